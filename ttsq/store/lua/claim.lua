-- Claim up to `count` jobs for a worker, from the front of the queue, in one step: each is moved to
-- the processing list, its attempt counted, marked running and leased to the worker until the
-- deadline under a new fencing token (the next number of the claims counter, kept on the job: only
-- its holder may renew, stream, complete or fail this attempt); or, past max_attempts, failed for
-- good and dead-lettered.
-- A job whose last worker was lost (isolate) runs alone: it is claimed only as the first job of a
-- claim that allows it (first = '1'), and nothing is claimed with it; a claim that does not allow it
-- stops before it.
-- The claim is safe to repeat: the reply is kept under the worker's claim record with the caller's
-- request id, and a second call with that id (a retry whose first answer was lost on the way)
-- answers the same jobs again instead of claiming more; they stay the worker's, nothing is stranded.
-- KEYS: queue, processing, leases, dead, claims, record
-- ARGV: worker, request_id, count, clock ('' = Redis's TIME), lease_s, ttl_s, dead_max, prefix, job_prefix, record_ttl_ms, first ('1' | '0')
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
local now = clock(ARGV[4])
local function start(id, job)
  job.attempts = job.attempts + 1
  job.orphan_seen_at = nil
  if job.attempts > job.max_attempts then
    job.status = 'failed'
    job.finished_at = now
    job.error = 'gave up after ' .. job.max_attempts .. ' attempts; last error: ' ..
      (type(job.error) == 'string' and job.error or 'unknown')
    local out = cjson.encode(job)
    redis.call('SET', ARGV[9] .. id, out, 'EX', ARGV[6])
    redis.call('LREM', KEYS[2], 0, id)
    redis.call('LPUSH', KEYS[4], out)
    redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[7]) - 1)
    ended(job, ARGV[8], id)
    return {'dead', out}
  end
  job.status = 'running'
  job.started_at = now
  job.worker = ARGV[1]
  job.claim = redis.call('INCR', KEYS[5])
  job.not_before = cjson.null
  local out = cjson.encode(job)
  redis.call('SET', ARGV[9] .. id, out)
  redis.call('ZADD', KEYS[3], deadline(now + tonumber(ARGV[5])), id)
  return {'run', out}
end
local claims = {}
while #claims < tonumber(ARGV[3]) do
  local id = redis.call('LINDEX', KEYS[1], -1)
  if not id then break end
  local raw = redis.call('GET', ARGV[9] .. id)
  local job = raw and cjson.decode(raw)
  local alone = job and job.isolate == true
  if alone and (#claims > 0 or ARGV[11] ~= '1') then break end
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
    redis.call('LREM', KEYS[2], 0, id)  -- nothing to run: an expired or finished job's id
  else
    table.insert(claims, start(id, job))
    if alone then break end
  end
end
redis.call('SET', KEYS[6], cjson.encode({request = ARGV[2], claims = claims}), 'PX', ARGV[10])
local reply = {'claimed'}
for _, item in ipairs(claims) do table.insert(reply, item) end
return reply
