-- Put a dead-lettered job back in the queue under its own id, so clients still polling it get their
-- audio: its record is restored from the dead-letter entry if it has expired meanwhile, its
-- attempts start again, it runs alone (it failed, perhaps by killing workers), and its webhook will
-- be sent again for the new outcome. The entry leaves the dead-letter list.
-- KEYS: dead, queue, job, stream, delivery_log, owner_jobs
-- ARGV: id, now
-- Reply: {'requeued', position} | {'missing'} (no such dead letter) | {'active', status} (the id is
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
redis.call('LPUSH', KEYS[2], ARGV[1])
return {'requeued', redis.call('LLEN', KEYS[2]) - 1}
