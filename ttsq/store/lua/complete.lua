-- Store a job's result and mark it done; both expire after ttl_s. Releases its lease, its place
-- in the processing list and (with single-flight) its inflight marker. A job cancelled while it ran
-- is marked cancelled instead and its audio dropped.
-- KEYS: job, result, leases, processing, stats, inflight
-- ARGV: id, audio, ttl_s, now, duration_s, content_type, busy_s, single_flight ('1' | '0'), prefix
-- Reply: 'done' | 'cancelled' | 'gone' (the job had already finished, or expired)
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[8] == '1' and redis.call('GET', KEYS[6]) == ARGV[1] then
  redis.call('DEL', KEYS[6])
end
local raw = redis.call('GET', KEYS[1])
if not raw then return 'gone' end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then return 'gone' end
job.finished_at = tonumber(ARGV[4])
job.worker = cjson.null
if job.cancel_requested == true then
  job.status = 'cancelled'
  redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[3])
  ended(job, ARGV[9], ARGV[1])
  return 'cancelled'
end
job.status = 'done'
job.duration_s = tonumber(ARGV[5])
job.content_type = ARGV[6]
job.result_bytes = string.len(ARGV[2])
job.error = cjson.null
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[3])
redis.call('HINCRBY', KEYS[5], 'jobs', 1)
redis.call('HINCRBYFLOAT', KEYS[5], 'busy_s', ARGV[7])
ended(job, ARGV[9], ARGV[1])
return 'done'
