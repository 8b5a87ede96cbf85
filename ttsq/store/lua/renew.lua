-- Move the lease deadline of every job this worker still runs; report the ones it lost.
-- KEYS: leases, job_1 .. job_n
-- ARGV: worker, deadline, id_1 .. id_n
-- Reply: the ids whose lease was lost (reaped, finished elsewhere, or gone)
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local held = false
  if redis.call('ZSCORE', KEYS[1], id) then
    local raw = redis.call('GET', KEYS[i - 1])
    if raw then
      local job = cjson.decode(raw)
      held = job.status == 'running' and job.worker == ARGV[1]
    end
  end
  if held then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
  else
    table.insert(lost, id)
  end
end
return lost
