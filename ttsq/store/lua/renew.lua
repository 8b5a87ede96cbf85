-- Move the lease deadline of every job this worker still holds; report the ones it lost, and the
-- ones a caller cancelled while they ran (the worker stops their work and ends them as cancelled).
-- A job is held while it is running under the fencing token the worker's claim got: a lease the
-- sweep took back, and the job's next claim (by any worker), make the token stale.
-- Named, the worker's own set of claims (claim.lua) is pruned here: every id claimed up to the newest claim the worker
-- has seen answered (seen) leaves it unless it is held, so it keeps the jobs in hand and any claim whose answer is
-- still on its way; and it is kept two leases more.
-- KEYS: leases, the worker's claims (worker_jobs; any key of the shard when no worker is named), job_1 .. job_n
-- ARGV: clock ('' = Redis's TIME), lease_s, worker ('' = none), seen (the newest claim token it has seen on this
--       shard), id_1, token_1 .. id_n, token_n
-- Reply: {lost ids (reaped, claimed again, finished elsewhere, or gone), cancelling ids (held, cancel requested)}
local until_ = deadline(clock(ARGV[1]) + tonumber(ARGV[2]))
local named = ARGV[3] ~= ''
if named then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4]) end
local lost = {}
local cancelling = {}
for i = 1, (#ARGV - 4) / 2 do
  local id = ARGV[2 * i + 3]
  local held = false
  local cancel = false
  if redis.call('ZSCORE', KEYS[1], id) then
    local raw = redis.call('GET', KEYS[i + 2])
    if raw then
      local job = cjson.decode(raw)
      held = job.status == 'running' and tostring(job.claim) == ARGV[2 * i + 4]
      cancel = job.cancel_requested == true
    end
  end
  if held then
    redis.call('ZADD', KEYS[1], 'XX', until_, id)
    if named then redis.call('ZADD', KEYS[2], ARGV[2 * i + 4], id) end
    if cancel then table.insert(cancelling, id) end
  else
    table.insert(lost, id)
  end
end
if named and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], math.ceil(2000 * tonumber(ARGV[2])))
end
return {lost, cancelling}
