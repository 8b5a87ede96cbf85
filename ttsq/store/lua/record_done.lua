-- Record a task that is finished on arrival (a cache hit): its result and its final record at once, both expiring
-- after the result TTL; a task with a webhook is put on the delivery queue (its webhook is due at once). One script,
-- so that the WAIT which acknowledges it (JobQueue._acknowledged) follows it on the same connection.
-- KEYS: result, job, deliveries
-- ARGV: audio, job_json, ttl_s, deliver ('1' | '0'), job_id
-- Reply: none
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
if ARGV[4] == '1' then
  redis.call('LPUSH', KEYS[3], ARGV[5])
end
