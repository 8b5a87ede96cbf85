-- Move the lease deadline of every job this worker still holds; report the ones it lost, and the
-- ones a caller cancelled while they ran (the worker stops their work and ends them as cancelled).
-- A job is held while it is running under the fencing token the worker's claim got: a lease the
-- sweep took back, and the job's next claim (by any worker), make the token stale.
-- KEYS: leases, job_1 .. job_n
-- ARGV: clock ('' = Redis's TIME), lease_s, id_1, token_1 .. id_n, token_n
-- Reply: {lost ids (reaped, claimed again, finished elsewhere, or gone), cancelling ids (held, cancel requested)}
local until_ = deadline(clock(ARGV[1]) + tonumber(ARGV[2]))
local lost = {}
local cancelling = {}
for i = 1, (#ARGV - 2) / 2 do
  local id = ARGV[2 * i + 1]
  local held = false
  local cancel = false
  if redis.call('ZSCORE', KEYS[1], id) then
    local raw = redis.call('GET', KEYS[i + 1])
    if raw then
      local job = cjson.decode(raw)
      held = job.status == 'running' and tostring(job.claim) == ARGV[2 * i + 2]
      cancel = job.cancel_requested == true
    end
  end
  if held then
    redis.call('ZADD', KEYS[1], 'XX', until_, id)
    if cancel then table.insert(cancelling, id) end
  else
    table.insert(lost, id)
  end
end
return {lost, cancelling}
