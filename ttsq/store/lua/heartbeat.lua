-- One beat of a worker on one shard, by Redis's clock (clock.lua in front): the time of its beat in the shard's set
-- of workers (who counts as live: the enqueue script counts them there; the sweep takes back the claims of a worker
-- whose last beat is older than the TTL), the start of its unbroken run of beats (a gap longer than half the TTL starts
-- a new run: see sweep_scan.lua), and on the home shard its record, expiring after the TTL.
-- The beat reads and clears the worker's fence: the claims counter the sweep wrote when it took this worker's claims
-- back (its beats had lapsed), so that a worker declared dead learns it at its next beat and drops the jobs it holds
-- under claims up to that number. A retiring worker (it stops) is marked lapsed at once instead of removed, so the
-- next sweep takes back whatever it left in hand. Workers silent for forget_after_s leave the set, with their run and
-- fence.
-- KEYS: workers, beats_since, fences, then on the home shard only: the worker's record
-- ARGV: worker, clock ('' = Redis's TIME), forget_after_s, record_json, ttl_s, retire ('1' | '0')
-- Reply: {now, fence}: the time of the beat, and the fence's claims counter ('' when none was set)
local now = clock(ARGV[2])
local worker = ARGV[1]
local ttl = tonumber(ARGV[5])
local fence = redis.call('HGET', KEYS[3], worker)
if fence then redis.call('HDEL', KEYS[3], worker) end
if ARGV[6] == '1' then
  redis.call('ZADD', KEYS[1], now - ttl - 1, worker)
  redis.call('HDEL', KEYS[2], worker)
  if KEYS[4] then redis.call('DEL', KEYS[4]) end
  return {tostring(now), fence or ''}
end
local last = tonumber(redis.call('ZSCORE', KEYS[1], worker))
if not last or now - last > ttl / 2 or not redis.call('HGET', KEYS[2], worker) then
  redis.call('HSET', KEYS[2], worker, tostring(now))
end
redis.call('ZADD', KEYS[1], now, worker)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))) do
  redis.call('ZREM', KEYS[1], gone)
  redis.call('HDEL', KEYS[2], gone)
  redis.call('HDEL', KEYS[3], gone)
end
if KEYS[4] then redis.call('SET', KEYS[4], ARGV[4], 'PX', math.max(1, math.floor(ttl * 1000))) end
return {tostring(now), fence or ''}
