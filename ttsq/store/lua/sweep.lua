-- The queue's upkeep, done by one worker per interval (whoever takes the lock), on the ids sweep_scan.lua
-- found, whose job keys and tenants' queues the caller declares (on a Redis Cluster whose slot is being
-- moved, Redis then refuses the script rather than let it read a moved job as missing); each is checked
-- again here (fair.lua is put in front; an id whose job no longer names the declared queue is left for
-- the next sweep):
--  1. requeue, at the front of its tenant's queue, every running job whose lease deadline has passed (its
--     worker is gone), marked to run alone when its next attempt is its last (it may be what killed the worker:
--     see lost_worker below and claim.lua);
--  2. requeue ids in the processing list that have no lease (left by an older release, whose claim
--     moved an id and started it in two steps), on the second sighting at least orphan_grace_s
--     apart, so a start a moment away is never raced;
--  3. release retries whose backoff is over (to the back of their tenant's queue);
--  4. requeue, at the front and marked as in 1 (a worker that stopped beating died as often as not of
--     the job it ran), every job still running under a claim of a worker whose heartbeat has lapsed (its last
--     beat older than heartbeat_ttl_s: seconds after its death, not a lease after), drop ids that are no longer
--     that worker's from its set of claims, and fence the worker: the claims counter goes under its name in
--     fences, so its next beat, should it come back, tells it every claim up to that number was taken back.
-- A tenant whose queue was empty joins its lane's ring at the far end (fair_push).
-- KEYS: lock, leases, processing, queue (the tally), delayed, the rings of every lane (LANES' order), workers, claims, fences,
--       then per id in ARGV (same order): its job key, its tenant's queue; then per id of 4: its worker's claims
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), lock_ms, orphan_grace_s, fair_prefix, holder,
--       lapsed_count, unleased_count, due_count, abandoned_count, heartbeat_ttl_s,
--       the lapsed ids, the unleased ids, the due retries' ids, the ids of 4, then the worker of each id of 4
-- Reply: {'skipped'} (another worker swept this interval) | {'swept', requeued, orphans, promoted, abandoned}
if not redis.call('SET', KEYS[1], ARGV[5], 'NX', 'PX', ARGV[2]) then
  return {'skipped'}
end
local now = clock(ARGV[1])
local counts = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}
local ttl = tonumber(ARGV[10])
local rings = {}
for index, lane in ipairs(LANES) do rings[lane] = KEYS[5 + index] end
local WORKERS, CLAIMS, FENCES = 6 + #LANES, 7 + #LANES, 8 + #LANES
local FIRST_ID, FIRST_PER_ID = 11, 9 + #LANES  -- ARGV index of the first id; KEYS index of the first id's job key
local total = counts[1] + counts[2] + counts[3] + counts[4]

-- The n-th id (1-based, over all four groups) and its declared keys.
local function entry(n)
  local raw = redis.call('GET', KEYS[FIRST_PER_ID + 2 * (n - 1)])
  return ARGV[FIRST_ID + n - 1], KEYS[FIRST_PER_ID + 2 * (n - 1)], KEYS[FIRST_PER_ID + 2 * (n - 1) + 1], raw and cjson.decode(raw)
end

-- The declared tenant queue, when it is the one this job belongs in (else nil: the id is left alone).
local function home_of(job, queue_key)
  if job and queue_key == fair_queue_key(ARGV[4], lane_of(job), tenant_of(job)) then return queue_key end
  return nil
end

-- A job whose worker was lost goes back at the front of its queue. It runs alone (isolate) only when its next
-- attempt is its last: a worker dies of its job as often as of anything else, and a job that keeps killing workers
-- must not take an innocent batch-mate's last attempt with it; but isolating at the first loss would make the re-run
-- wait behind every row the next worker has in flight, which is what a listener hears as a gap.
local function lost_worker(job, why)
  job.error = 'worker lost during attempt ' .. job.attempts .. ' (' .. why .. ')'
  job.isolate = (tonumber(job.max_attempts) or 1) - (tonumber(job.attempts) or 0) <= 1  -- the job's own, set at enqueue
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

local requeued, orphans, promoted, abandoned = 0, 0, 0, 0
local n = 0

for _ = 1, counts[1] do
  n = n + 1
  local id, job_key, queue_key, job = entry(n)
  local home = home_of(job, queue_key)
  local score = redis.call('ZSCORE', KEYS[2], id)
  local misplaced = job and job.status == 'running' and not home  -- declared elsewhere: left for the next sweep
  if score and tonumber(score) <= now and not misplaced then
    redis.call('ZREM', KEYS[2], id)
    if job and job.status == 'running' then
      lost_worker(job, 'lease expired')
      requeued = requeued + back_to_queue(id, job_key, job, home)
    else
      redis.call('LREM', KEYS[3], 0, id)
    end
  end
end

for _ = 1, counts[2] do
  n = n + 1
  local id, job_key, queue_key, job = entry(n)
  local home = home_of(job, queue_key)
  if not redis.call('ZSCORE', KEYS[2], id) and redis.call('LPOS', KEYS[3], id) then
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

for _ = 1, counts[3] do
  n = n + 1
  local id, _, queue_key, job = entry(n)
  local home = home_of(job, queue_key)
  local score = redis.call('ZSCORE', KEYS[5], id)
  if score and tonumber(score) <= now and (home or not job) then
    redis.call('ZREM', KEYS[5], id)
    if job and job.status == 'queued' then
      fair_push(home, rings[lane_of(job)], KEYS[4], tenant_of(job), id, false)
      promoted = promoted + 1
    end
  end
end

local fenced = {}
for k = 1, counts[4] do
  n = n + 1
  local id, job_key, queue_key, job = entry(n)
  local worker = ARGV[FIRST_ID + total + k - 1]
  local claims_key = KEYS[FIRST_PER_ID + 2 * total + k - 1]
  local last = tonumber(redis.call('ZSCORE', KEYS[WORKERS], worker))
  local token = redis.call('ZSCORE', claims_key, id)
  if token and (not last or last < now - ttl) then  -- still lapsed: it did not beat since the scan
    local held = job and job.status == 'running' and job.worker == worker and tostring(job.claim) == token
    local home = home_of(job, queue_key)
    if not held then
      redis.call('ZREM', claims_key, id)  -- ended, requeued by its lease, or claimed since: no longer this worker's
    elseif home then
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', claims_key, id)
      lost_worker(job, 'its heartbeat stopped')
      abandoned = abandoned + back_to_queue(id, job_key, job, home)
      fenced[worker] = true
    end
  end
end
local counter = redis.call('GET', KEYS[CLAIMS]) or '0'
for worker in pairs(fenced) do redis.call('HSET', KEYS[FENCES], worker, counter) end
return {'swept', requeued, orphans, promoted, abandoned}
