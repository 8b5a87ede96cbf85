-- Move a delivery's lease deadline forward, if the lease is still the one this holder set
-- (its deadline is the fencing token). A lease the sweep reclaimed is not revived.
-- KEYS: leases
-- ARGV: id, token (the deadline the holder last set), new deadline
-- Reply: 1 (renewed) | 0 (lost: lapsed and swept, or claimed by another deliverer)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
return 1
