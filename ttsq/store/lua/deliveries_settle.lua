-- Record a delivery attempt and act on its outcome, in one step: log it (always: the attempt
-- happened), then — only while this holder's lease is intact — release the lease and the
-- processing entry and, for a retry, schedule it in the delayed set. The log expires with the
-- task (the job key's remaining TTL; fallback_ttl_s when the job has none).
-- KEYS: processing, leases, delayed, log, job
-- ARGV: id, token (the holder's lease deadline), record_json, retry_at ('' = no retry), log_max, fallback_ttl_s
-- Reply: 'settled' | 'lost' (the lease had lapsed or passed to another deliverer: only the log changed)
redis.call('RPUSH', KEYS[4], ARGV[3])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[5]), -1)
local ttl = redis.call('PTTL', KEYS[5])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[4], ttl)
else
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 'lost'
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[1], 1, ARGV[1])
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
end
return 'settled'
