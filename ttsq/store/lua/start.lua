-- Start an attempt on a job that BLMOVE/LMOVE just put in the processing list: count the
-- attempt, mark it running and lease it to the worker until the deadline under a new fencing
-- token (the next number of the claims counter, kept on the job: only its holder may renew,
-- stream, complete or fail this attempt); or, past max_attempts, fail it for good and dead-letter it.
-- KEYS: job, leases, processing, dead, claims
-- ARGV: id, worker, now, lease_deadline, ttl_s, dead_max, prefix
-- Reply: {'run', job_json} | {'dead', job_json} | {'gone'}
local raw = redis.call('GET', KEYS[1])
if not raw then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return {'gone'}
end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return {'gone'}
end
job.attempts = job.attempts + 1
job.orphan_seen_at = nil
if job.attempts > job.max_attempts then
  job.status = 'failed'
  job.finished_at = tonumber(ARGV[3])
  job.error = 'gave up after ' .. job.max_attempts .. ' attempts; last error: ' ..
    (type(job.error) == 'string' and job.error or 'unknown')
  local out = cjson.encode(job)
  redis.call('SET', KEYS[1], out, 'EX', ARGV[5])
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  redis.call('LPUSH', KEYS[4], out)
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
  ended(job, ARGV[7], ARGV[1])
  return {'dead', out}
end
job.status = 'running'
job.started_at = tonumber(ARGV[3])
job.worker = ARGV[2]
job.claim = redis.call('INCR', KEYS[5])
job.not_before = cjson.null
local out = cjson.encode(job)
redis.call('SET', KEYS[1], out)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return {'run', out}
