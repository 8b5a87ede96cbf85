-- Shared by the scripts that end a job (loaded in front of them): release its owner's count and
-- queue its completion webhook, in the same atomic step that makes it final.
-- Expects: job (decoded), prefix (the namespace's key prefix).
local function ended(job, prefix, id)
  if type(job.owner) == 'string' then
    local key = prefix .. 'owner-jobs:' .. job.owner
    if tonumber(redis.call('DECR', key)) <= 0 then redis.call('DEL', key) end
  end
  if type(job.params) == 'table' and type(job.params.callback_url) == 'string' then
    redis.call('LPUSH', prefix .. 'deliveries', id)
  end
end
