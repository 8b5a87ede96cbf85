-- Move a delivery's lease deadline forward, if the lease is still the one this holder set
-- (its deadline is the fencing token). A lease the sweep reclaimed is not revived. The new deadline is
-- Redis's clock + lease_s (clock.lua in front).
-- KEYS: leases
-- ARGV: id, token (the deadline the holder was last given), clock ('' = Redis's TIME), lease_s
-- Reply: the new deadline (renewed: the holder's new token) | 0 (lost: lapsed and swept, or claimed by another deliverer)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
local until_ = deadline(clock(ARGV[3]) + tonumber(ARGV[4]))
redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[1])
return tostring(until_)
