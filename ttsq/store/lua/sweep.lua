-- The queue's upkeep, done by one worker per interval (whoever takes the lock), on the ids sweep_scan.lua
-- found, whose job keys and tenants' queues the caller declares (on a Redis Cluster whose slot is being
-- moved, Redis then refuses the script rather than let it read a moved job as missing); each is checked
-- again here (fair.lua is put in front; an id whose job no longer names the declared queue is left for
-- the next sweep):
--  1. requeue, at the front of its tenant's queue, every running job whose lease deadline has passed (its
--     worker is gone), marked to run alone until it succeeds (it may be what killed the worker: see claim.lua);
--  2. requeue ids in the processing list that have no lease (left by an older release, whose claim
--     moved an id and started it in two steps), on the second sighting at least orphan_grace_s
--     apart, so a start a moment away is never raced;
--  3. release retries whose backoff is over (to the back of their tenant's queue).
-- A tenant whose queue was empty joins its lane's ring at the far end (fair_push).
-- KEYS: lock, leases, processing, queue (the tally), delayed, interactive ring, batch ring,
--       then per id in ARGV (same order): its job key, its tenant's queue
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), lock_ms, orphan_grace_s, fair_prefix, holder,
--       lapsed_count, unleased_count, the lapsed ids, the unleased ids, then the due retries' ids
-- Reply: {'skipped'} (another worker swept this interval) | {'swept', requeued, orphans, promoted}
if not redis.call('SET', KEYS[1], ARGV[5], 'NX', 'PX', ARGV[2]) then
  return {'skipped'}
end
local now = clock(ARGV[1])
local lapsed_count, unleased_count = tonumber(ARGV[6]), tonumber(ARGV[7])
local rings = {interactive = KEYS[6], batch = KEYS[7]}

-- The declared tenant queue, when it is the one this job belongs in (else nil: the id is left alone).
local function home_of(job, queue_key)
  if job and queue_key == fair_queue_key(ARGV[4], lane_of(job), tenant_of(job)) then return queue_key end
  return nil
end

local function back_to_queue(id, job_key, job, queue_key)
  job.status = 'queued'
  job.worker = cjson.null
  job.orphan_seen_at = nil
  redis.call('SET', job_key, cjson.encode(job))
  if redis.call('LREM', KEYS[3], 0, id) > 0 then
    fair_push(queue_key, rings[lane_of(job)], KEYS[4], tenant_of(job), id, true)
    return 1
  end
  return 0
end

local requeued = 0
local orphans = 0
local first_due = 8 + lapsed_count + unleased_count
for i = 8, first_due - 1 do
  local id, job_key, queue_key = ARGV[i], KEYS[6 + 2 * (i - 7)], KEYS[7 + 2 * (i - 7)]
  local raw = redis.call('GET', job_key)
  local job = raw and cjson.decode(raw)
  local home = home_of(job, queue_key)
  if i - 7 <= lapsed_count then
    local score = redis.call('ZSCORE', KEYS[2], id)
    local misplaced = job and job.status == 'running' and not home  -- declared elsewhere: left for the next sweep
    if score and tonumber(score) <= now and not misplaced then
      redis.call('ZREM', KEYS[2], id)
      if job and job.status == 'running' then
        job.error = 'worker lost during attempt ' .. job.attempts .. ' (lease expired)'
        job.isolate = true
        requeued = requeued + back_to_queue(id, job_key, job, home)
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
    elseif now - job.orphan_seen_at >= tonumber(ARGV[3]) and home then
      orphans = orphans + back_to_queue(id, job_key, job, home)
    end
  end
end

local promoted = 0
for i = first_due, #ARGV do
  local id, job_key, queue_key = ARGV[i], KEYS[6 + 2 * (i - 7)], KEYS[7 + 2 * (i - 7)]
  local score = redis.call('ZSCORE', KEYS[5], id)
  local raw = redis.call('GET', job_key)
  local job = raw and cjson.decode(raw)
  local home = home_of(job, queue_key)
  if score and tonumber(score) <= now and (home or not job) then
    redis.call('ZREM', KEYS[5], id)
    if job and job.status == 'queued' then
      fair_push(home, rings[lane_of(job)], KEYS[4], tenant_of(job), id, false)
      promoted = promoted + 1
    end
  end
end
return {'swept', requeued, orphans, promoted}
