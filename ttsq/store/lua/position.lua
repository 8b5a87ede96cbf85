-- Where a waiting job stands: fair.lua's estimate of the claims before it (put in front), or nothing when
-- it is not waiting in line. Read-only; the other tenants' queues are read from the prefix (an estimate).
-- KEYS: job, the rings of every lane (LANES' order), weights
-- ARGV: fair_prefix, burst
-- Reply: position | false (not waiting)
local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local job = cjson.decode(raw)
local lane, tenant = lane_of(job), tenant_of(job)
local queue_key = fair_queue_key(ARGV[1], lane, tenant)
local index = redis.call('LPOS', queue_key, job.id, 'RANK', -1)
if not index then return false end
local ahead = redis.call('LLEN', queue_key) - 1 - index
local rings = {}
for index, name in ipairs(LANES) do rings[name] = KEYS[1 + index] end
return fair_estimate(ARGV[1], rings, KEYS[2 + #LANES], lane, tenant, ahead, tonumber(ARGV[2]))
