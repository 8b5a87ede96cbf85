-- Forget a finished job's single-flight marker, if it still names that job.
-- KEYS: inflight   ARGV: job_id   Reply: 1 if removed, else 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
