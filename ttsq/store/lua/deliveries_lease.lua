-- Lease a delivery that BLMOVE/LMOVE just moved into the processing list, unless there is nothing
-- left to deliver. The lease deadline (Redis's clock + lease_s, clock.lua in front) is also the claim's
-- fencing token: renewals and the final acknowledgement only act while the lease still carries the
-- deadline this holder was given.
-- KEYS: processing, leases, delayed, log, job
-- ARGV: id, clock ('' = Redis's TIME), lease_s
-- Reply: {'leased', attempts_so_far, deadline} | {'finished'} (already delivered or given up: dropped)
--      | {'gone'} (the task expired: dropped) | {'lost'} (the sweep took it back before this ran)
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  return {'lost'}
end
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {'gone'}
end
local attempts = 0
local last = redis.call('LINDEX', KEYS[4], -1)
if last then
  local record = cjson.decode(last)
  if record.outcome == 'delivered' or record.outcome == 'gave_up' then
    redis.call('LREM', KEYS[1], 1, ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {'finished'}
  end
  attempts = tonumber(record.attempt) or 0
end
local until_ = deadline(clock(ARGV[2]) + tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], until_, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return {'leased', attempts, tostring(until_)}
