-- Take up to `count` more job ids for a batch (from the front of the queue, as claims do), stopping at
-- the first job that must run alone: one whose last attempt's worker was lost (its lease lapsed),
-- so it may be what killed that worker. It stays at the front for the next blocking claim, which
-- runs it by itself; the jobs behind it wait one batch. A job that only ever failed in Python
-- (an exception, recorded by fail.lua) is not isolated: it cannot take its batch-mates down.
-- KEYS: queue, processing
-- ARGV: count, job_key_prefix
-- Reply: the ids moved to processing, in claim order
local taken = {}
for _ = 1, tonumber(ARGV[1]) do
  local id = redis.call('LINDEX', KEYS[1], -1)
  if not id then break end
  local raw = redis.call('GET', ARGV[2] .. id)
  if raw and cjson.decode(raw).isolate == true then break end
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  table.insert(taken, id)
end
return taken
