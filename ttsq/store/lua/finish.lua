-- Shared by the scripts that end a job (loaded in front of them): release its owner's count, queue its
-- completion webhook and end its audio stream, in the same atomic step that makes it final. Every ending
-- (done, failed for good, dead-lettered, cancelled) writes the stream's end marker here, so whoever follows
-- the stream (the API's listener) learns of it without reading the job again and again. Both keys are declared
-- by the caller (KEYS), never built here: on a Redis Cluster whose slot is being moved, a script may
-- only touch keys Redis knows it touches, or it could write a key the move has already taken away.
-- Expects: job (decoded), id, owner_key (the owner-jobs key of job.owner, or a placeholder when it has
-- none), deliveries_key, prefix (the namespace's key prefix, to check owner_key names this job's owner),
-- stream_key (the job's audio stream), ttl_s (how long the stream is kept: the result's lifetime).
local function ended(job, id, owner_key, deliveries_key, prefix, stream_key, ttl_s)
  if type(job.owner) == 'string' and owner_key == prefix .. 'owner-jobs:' .. job.owner then
    if tonumber(redis.call('DECR', owner_key)) <= 0 then redis.call('DEL', owner_key) end
  end
  if type(job.params) == 'table' and type(job.params.callback_url) == 'string' then
    redis.call('LPUSH', deliveries_key, id)
  end
  redis.call('XADD', stream_key, '*', 'end', job.status)
  redis.call('EXPIRE', stream_key, ttl_s)
end
