-- Record a job and queue its id in one step; a second call with the same id changes nothing.
-- With single-flight on, an identical job already in flight is joined instead (its id is the
-- value of the inflight key); ARGV[5] names an id the caller found finished, which may be replaced.
-- KEYS: job, queue, stats, workers, inflight
-- ARGV: job_json, job_id, max_depth, single_flight ('1' | '0'), stale_inflight_id, live_since
-- Reply: {'joined', other_id} | {'exists', depth} | {'full', depth}
--      | {'created', depth, jobs_done, busy_s, live_workers}  (what the wait estimate needs)
local single_flight = ARGV[4] == '1'
if single_flight then
  local current = redis.call('GET', KEYS[5])
  if current and current ~= ARGV[5] then
    return {'joined', current}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', redis.call('LLEN', KEYS[2])}
end
local depth = redis.call('LLEN', KEYS[2])
if depth >= tonumber(ARGV[3]) then
  return {'full', depth}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[2], ARGV[2])
if single_flight then
  redis.call('SET', KEYS[5], ARGV[2])
end
local stats = redis.call('HMGET', KEYS[3], 'jobs', 'busy_s')
return {'created', depth, stats[1] or '0', stats[2] or '0', redis.call('ZCOUNT', KEYS[4], ARGV[6], '+inf')}
