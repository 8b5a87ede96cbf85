-- The delivery queue's upkeep; idempotent, so any number of deliverers may run it:
--  1. requeue, at the front, every delivery whose lease deadline has passed (its deliverer is gone);
--  2. give an id claimed but never leased (a deliverer died between BLMOVE and the lease script) a
--     grace lease of lease_s, so that a lease script a moment away still wins, and a dead claimer's
--     id is requeued by step 1 once the grace lease lapses;
--  3. release retries whose backoff is over (to the back of the queue).
-- KEYS: leases, processing, deliveries, delayed
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), lease_s, promote_limit
-- Reply: {requeued, orphans, promoted}
local now = clock(ARGV[1])

local requeued = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], id)
  if redis.call('LREM', KEYS[2], 0, id) > 0 then
    redis.call('RPUSH', KEYS[3], id)
    requeued = requeued + 1
  end
end

local orphans = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  if redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[2]), id) == 1 then
    orphans = orphans + 1
  end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[4], id)
  redis.call('LPUSH', KEYS[3], id)
end
return {requeued, orphans, #due}
