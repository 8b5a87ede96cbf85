-- Claim jobs for a worker from the front of the queue, in one step: each is moved to the processing
-- list, its attempt counted, marked running and leased to the worker until the deadline under a new
-- fencing token (the next number of the claims counter, kept on the job: only its holder may renew,
-- stream, complete or fail this attempt); or, past max_attempts, failed for good and dead-lettered.
-- The caller names the jobs it expects at the front (peek.lua) and declares their keys and their
-- owners' count keys, so every key touched is declared: on a Redis Cluster whose slot is being moved,
-- Redis then refuses the script (TRYAGAIN, ASK) rather than let it read a job the move has taken
-- away as missing. Claiming stops at the first id that is no longer at the front (another worker
-- was quicker: the caller peeks again).
-- A job whose last worker was lost (isolate) runs alone: it is claimed only as the first job of a
-- claim that allows it (first = '1'), and nothing is claimed with it; a claim that does not allow it
-- stops before it.
-- The claim is safe to repeat: the reply is kept under the worker's claim record with the caller's
-- request id, and a second call with that id (a retry whose first answer was lost on the way)
-- answers the same jobs again instead of claiming more; they stay the worker's, nothing is stranded.
-- KEYS: queue, processing, leases, dead, claims, record, deliveries, then per expected id: job, owner_jobs
-- ARGV: worker, request_id, clock ('' = Redis's TIME), lease_s, ttl_s, dead_max, prefix, record_ttl_ms,
--       first ('1' | '0'), then the expected ids in claim order
-- Reply: {'claimed' | 'repeated', {started, job_json}, ...} with started 'run' (leased to this worker)
--        or 'dead' (no attempts left: dead-lettered)
local record = redis.call('GET', KEYS[6])
if record then
  local saved = cjson.decode(record)
  if saved.request == ARGV[2] then
    local again = {'repeated'}
    for _, item in ipairs(saved.claims) do table.insert(again, item) end
    return again
  end
end
local now = clock(ARGV[3])
local function start(id, job, job_key, owner_key)
  job.attempts = job.attempts + 1
  job.orphan_seen_at = nil
  if job.attempts > job.max_attempts then
    job.status = 'failed'
    job.finished_at = now
    job.error = 'gave up after ' .. job.max_attempts .. ' attempts; last error: ' ..
      (type(job.error) == 'string' and job.error or 'unknown')
    local out = cjson.encode(job)
    redis.call('SET', job_key, out, 'EX', ARGV[5])
    redis.call('LREM', KEYS[2], 0, id)
    redis.call('LPUSH', KEYS[4], out)
    redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
    ended(job, id, owner_key, KEYS[7], ARGV[7])
    return {'dead', out}
  end
  job.status = 'running'
  job.started_at = now
  job.worker = ARGV[1]
  job.claim = redis.call('INCR', KEYS[5])
  job.not_before = cjson.null
  local out = cjson.encode(job)
  redis.call('SET', job_key, out)
  redis.call('ZADD', KEYS[3], deadline(now + tonumber(ARGV[4])), id)
  return {'run', out}
end
local claims = {}
for i = 10, #ARGV do
  local id = ARGV[i]
  local job_key, owner_key = KEYS[6 + 2 * (i - 9)], KEYS[7 + 2 * (i - 9)]
  if redis.call('LINDEX', KEYS[1], -1) ~= id then break end
  local raw = redis.call('GET', job_key)
  local job = raw and cjson.decode(raw)
  local alone = job and job.isolate == true
  if alone and (#claims > 0 or ARGV[9] ~= '1') then break end
  if job and type(job.owner) == 'string' and owner_key ~= ARGV[7] .. 'owner-jobs:' .. job.owner then break end
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
    redis.call('LREM', KEYS[2], 0, id)  -- nothing to run: an expired or finished job's id
  else
    table.insert(claims, start(id, job, job_key, owner_key))
    if alone then break end
  end
end
redis.call('SET', KEYS[6], cjson.encode({request = ARGV[2], claims = claims}), 'PX', ARGV[8])
local reply = {'claimed'}
for _, item in ipairs(claims) do table.insert(reply, item) end
return reply
