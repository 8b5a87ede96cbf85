-- What the sweep would act on, read without changing anything, so the sweep that follows (sweep.lua)
-- can declare every job key it touches: running jobs whose lease deadline has passed, and ids in the
-- processing list with no lease (left by an older release's two-step claim). Nothing when another
-- worker holds this interval's sweep lock.
-- KEYS: lock, leases, processing
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), limit
-- Reply: {'skipped'} | {'scan', {lapsed ids}, {unleased ids}}
if redis.call('EXISTS', KEYS[1]) == 1 then return {'skipped'} end
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', clock(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
local unleased = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if not redis.call('ZSCORE', KEYS[2], id) and #unleased < tonumber(ARGV[2]) then table.insert(unleased, id) end
end
return {'scan', lapsed, unleased}
