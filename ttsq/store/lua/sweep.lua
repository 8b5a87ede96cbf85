-- The queue's upkeep, done by one worker per interval (whoever takes the lock), on the ids sweep_scan.lua
-- found, whose job keys the caller declares (on a Redis Cluster whose slot is being moved, Redis then
-- refuses the script rather than let it read a moved job as missing); each is checked again here:
--  1. requeue, at the front, every running job whose lease deadline has passed (its worker is gone),
--     marked to run alone until it succeeds (it may be what killed the worker: see claim.lua);
--  2. requeue ids in the processing list that have no lease (left by an older release, whose claim
--     moved an id and started it in two steps), on the second sighting at least orphan_grace_s
--     apart, so a start a moment away is never raced;
--  3. release retries whose backoff is over (to the back of the queue).
-- KEYS: lock, leases, processing, queue, delayed, then the job key of each id in ARGV (same order)
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), lock_ms, orphan_grace_s, promote_limit, holder,
--       lapsed_count, the lapsed ids, then the unleased ids
-- Reply: {'skipped'} (another worker swept this interval) | {'swept', requeued, orphans, promoted}
if not redis.call('SET', KEYS[1], ARGV[5], 'NX', 'PX', ARGV[2]) then
  return {'skipped'}
end
local now = clock(ARGV[1])
local lapsed_count = tonumber(ARGV[6])

local function back_to_queue(id, job_key, job)
  job.status = 'queued'
  job.worker = cjson.null
  job.orphan_seen_at = nil
  redis.call('SET', job_key, cjson.encode(job))
  if redis.call('LREM', KEYS[3], 0, id) > 0 then
    redis.call('RPUSH', KEYS[4], id)
    return 1
  end
  return 0
end

local requeued = 0
local orphans = 0
for i = 7, #ARGV do
  local id, job_key = ARGV[i], KEYS[i - 1]
  local raw = redis.call('GET', job_key)
  local job = raw and cjson.decode(raw)
  if i - 6 <= lapsed_count then
    local score = redis.call('ZSCORE', KEYS[2], id)
    if score and tonumber(score) <= now then
      redis.call('ZREM', KEYS[2], id)
      if job and job.status == 'running' then
        job.error = 'worker lost during attempt ' .. job.attempts .. ' (lease expired)'
        job.isolate = true
        requeued = requeued + back_to_queue(id, job_key, job)
      else
        redis.call('LREM', KEYS[3], 0, id)
      end
    end
  elseif not redis.call('ZSCORE', KEYS[2], id) and redis.call('LPOS', KEYS[3], id) then
    if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
      redis.call('LREM', KEYS[3], 0, id)
    elseif type(job.orphan_seen_at) ~= 'number' then
      job.orphan_seen_at = now
      redis.call('SET', job_key, cjson.encode(job))
    elseif now - job.orphan_seen_at >= tonumber(ARGV[3]) then
      orphans = orphans + back_to_queue(id, job_key, job)
    end
  end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[5], id)
  redis.call('LPUSH', KEYS[4], id)
end
return {'swept', requeued, orphans, #due}
