-- The queue's upkeep, done by one worker per interval (whoever takes the lock):
--  1. requeue, at the front, every running job whose lease deadline has passed (its worker is gone),
--     marked to run alone until it succeeds (it may be what killed the worker: see claim.lua);
--  2. requeue ids in the processing list that are not running (left by an older release, whose
--     claim moved an id and started it in two steps), on the second sighting at least
--     orphan_grace_s apart, so a start a moment away is never raced;
--  3. release retries whose backoff is over (to the back of the queue).
-- Every key shares the namespace's hash tag, so the job keys built from the prefix live in the
-- same Redis Cluster slot as the declared keys.
-- KEYS: lock, leases, processing, queue, delayed
-- ARGV: clock ('' = Redis's TIME), lock_ms, orphan_grace_s, job_key_prefix, promote_limit, holder
-- Reply: {'skipped'} (another worker swept this interval) | {'swept', requeued, orphans, promoted}
if not redis.call('SET', KEYS[1], ARGV[6], 'NX', 'PX', ARGV[2]) then
  return {'skipped'}
end
local now = clock(ARGV[1])

local function load(id)
  local raw = redis.call('GET', ARGV[4] .. id)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function back_to_queue(id, job)
  job.status = 'queued'
  job.worker = cjson.null
  job.orphan_seen_at = nil
  redis.call('SET', ARGV[4] .. id, cjson.encode(job))
  if redis.call('LREM', KEYS[3], 0, id) > 0 then
    redis.call('RPUSH', KEYS[4], id)
    return 1
  end
  return 0
end

local requeued = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('ZREM', KEYS[2], id)
  local job = load(id)
  if job and job.status == 'running' then
    job.error = 'worker lost during attempt ' .. job.attempts .. ' (lease expired)'
    job.isolate = true
    requeued = requeued + back_to_queue(id, job)
  else
    redis.call('LREM', KEYS[3], 0, id)
  end
end

local orphans = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if not redis.call('ZSCORE', KEYS[2], id) then
    local job = load(id)
    if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
      redis.call('LREM', KEYS[3], 0, id)
    elseif type(job.orphan_seen_at) ~= 'number' then
      job.orphan_seen_at = now
      redis.call('SET', ARGV[4] .. id, cjson.encode(job))
    elseif now - job.orphan_seen_at >= tonumber(ARGV[3]) then
      orphans = orphans + back_to_queue(id, job)
    end
  end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[5], id)
  redis.call('LPUSH', KEYS[4], id)
end
return {'swept', requeued, orphans, #due}
