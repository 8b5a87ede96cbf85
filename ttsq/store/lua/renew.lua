-- Move the lease deadline of every job this worker still runs; report the ones it lost, and the
-- ones a caller cancelled while they ran (the worker stops their work and ends them as cancelled).
-- KEYS: leases, job_1 .. job_n
-- ARGV: worker, deadline, id_1 .. id_n
-- Reply: {lost ids (reaped, finished elsewhere, or gone), cancelling ids (held, cancel requested)}
local lost = {}
local cancelling = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local held = false
  local cancel = false
  if redis.call('ZSCORE', KEYS[1], id) then
    local raw = redis.call('GET', KEYS[i - 1])
    if raw then
      local job = cjson.decode(raw)
      held = job.status == 'running' and job.worker == ARGV[1]
      cancel = job.cancel_requested == true
    end
  end
  if held then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
    if cancel then table.insert(cancelling, id) end
  else
    table.insert(lost, id)
  end
end
return {lost, cancelling}
