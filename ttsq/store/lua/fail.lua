-- Record a failed attempt: retry after retry_base_s ^ attempts, or fail for good (expiring
-- after ttl_s) and keep the final record in the capped dead-letter list. A job cancelled while it
-- ran is marked cancelled instead of retried. Only the holder of the job's current claim may do
-- this: a stale owner's failure changes nothing (see complete.lua).
-- KEYS: job, leases, processing, delayed, dead, inflight, owner_jobs (of the job's owner), deliveries, stream
-- ARGV: id, reason, retryable ('1' | '0'), clock ('' = Redis's TIME), retry_base_s, ttl_s, dead_max, single_flight ('1' | '0'), prefix, token
-- Reply: {'retry', delay_s} | {'failed'} | {'cancelled'} | {'gone'} | {'stale'}
local raw = redis.call('GET', KEYS[1])
local job = raw and cjson.decode(raw)
if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {'gone'}
end
if job.status ~= 'running' or tostring(job.claim) ~= ARGV[10] then return {'stale'} end
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
job.error = ARGV[2]
job.worker = cjson.null
local now = clock(ARGV[4])
local function release_inflight()
  if ARGV[8] == '1' and redis.call('GET', KEYS[6]) == ARGV[1] then
    redis.call('DEL', KEYS[6])
  end
end
if job.cancel_requested == true then
  job.status = 'cancelled'
  job.finished_at = now
  redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[6])
  release_inflight()
  ended(job, ARGV[1], KEYS[7], KEYS[8], ARGV[9], KEYS[9], ARGV[6])
  return {'cancelled'}
end
if ARGV[3] == '1' and job.attempts < job.max_attempts then
  local delay = tonumber(ARGV[5]) ^ job.attempts
  job.status = 'queued'
  job.not_before = now + delay
  redis.call('SET', KEYS[1], cjson.encode(job))
  redis.call('ZADD', KEYS[4], now + delay, ARGV[1])
  redis.call('XADD', KEYS[9], '*', 'status', 'queued')  -- its listeners see it wait for its next attempt
  redis.call('EXPIRE', KEYS[9], ARGV[6])
  return {'retry', tostring(delay)}
end
job.status = 'failed'
job.finished_at = now
local out = cjson.encode(job)
redis.call('SET', KEYS[1], out, 'EX', ARGV[6])
redis.call('LPUSH', KEYS[5], out)
redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[7]) - 1)
release_inflight()
ended(job, ARGV[1], KEYS[7], KEYS[8], ARGV[9], KEYS[9], ARGV[6])
return {'failed'}
