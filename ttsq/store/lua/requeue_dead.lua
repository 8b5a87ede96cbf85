-- Put a dead-lettered job back in the queue under its own id, so clients still polling it get their
-- audio: its record is restored from the dead-letter entry if it has expired meanwhile, its
-- attempts start again, it runs alone (it failed, perhaps by killing workers), and its webhook will
-- be sent again for the new outcome. The entry leaves the dead-letter list.
-- It goes to the back of its tenant's queue (fair.lua, put in front).
-- KEYS: dead, queue (the tally), job, stream, delivery_log, owner_jobs, its tenant's queue, its lane's ring, weights
-- ARGV: id, now, fair_prefix, burst
-- Reply: {'requeued', position (fair.lua's estimate)} | {'missing'} (no such dead letter) | {'active', status} (the id is
--        queued, running or done again: nothing changed)
local entry = nil
for _, raw in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local job = cjson.decode(raw)
  if job.id == ARGV[1] then
    entry = raw
    break
  end
end
if not entry then return {'missing'} end
local current = redis.call('GET', KEYS[3])
local job = cjson.decode(current or entry)
if job.status ~= 'failed' then return {'active', job.status} end
if KEYS[7] ~= fair_queue_key(ARGV[3], lane_of(job), tenant_of(job)) then return {'missing'} end
redis.call('LREM', KEYS[1], 0, entry)
job.status = 'queued'
job.attempts = 0
job.error = cjson.null
job.started_at = cjson.null
job.finished_at = cjson.null
job.worker = cjson.null
job.not_before = cjson.null
job.isolate = true
job.requeues = (tonumber(job.requeues) or 0) + 1
redis.call('SET', KEYS[3], cjson.encode(job))  -- no expiry: a queued job never expires
redis.call('DEL', KEYS[4], KEYS[5])  -- the failed attempt's partial audio and its webhook's deliveries
if type(job.owner) == 'string' then redis.call('INCR', KEYS[6]) end  -- held again until it ends
fair_push(KEYS[7], KEYS[8], KEYS[2], tenant_of(job), ARGV[1], false)
local rings = fair_rings(ARGV[3])
local ahead = redis.call('LLEN', KEYS[7]) - 1
return {'requeued', fair_estimate(ARGV[3], rings, KEYS[9], lane_of(job), tenant_of(job), ahead, tonumber(ARGV[4]))}
