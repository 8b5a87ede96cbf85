-- One beat of a worker on one shard: the time of its beat, by Redis's clock (clock.lua in front), in the
-- shard's set of workers (the enqueue script counts the live ones there), and on the home shard its record,
-- expiring after the TTL. Workers silent for forget_after_s leave the set.
-- KEYS: workers, then on the home shard only: the worker's record
-- ARGV: worker, clock ('' = Redis's TIME), forget_after_s, record_json, ttl_s
-- Reply: the time of the beat
local now = clock(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if KEYS[2] then redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[5]) end
return tostring(now)
