-- Cancel a job for one caller. A holder other than the last (a single-flight joiner, or the first
-- submitter once others joined) is detached: the job goes on for the others; its key stays a reader,
-- to which the API shows the task as cancelled. Otherwise a job still
-- waiting leaves the queue at once and is cancelled; a running one is marked, and the completing
-- script cancels it when its batch ends (its audio is dropped). Cancelling again changes nothing.
-- A running job's mark is also announced on the shard's cancels stream (its id, worker and claim), which every
-- worker follows with a blocking read: its worker drops the job's rows at the next decode step instead of
-- at its next lease renewal (which still sees the mark, should the announcement be missed).
-- A waiting job leaves its tenant's queue (fair.lua, put in front): the tally drops it, and a tenant left
-- with nothing waiting leaves its lane's ring.
-- KEYS: job, queue (the tally), processing, delayed, inflight, stream, owner_jobs (of the job's owner), deliveries,
--       its tenant's queue, its lane's ring, its lane's credit, the shard's moves (a stream: jobs left the queue),
--       the shard's cancels (a stream: running jobs cancelled)
-- ARGV: id, reader (not read: a detached reader stays one), clock ('' = Redis's TIME), ttl_s, prefix, holder (the caller's owner name),
--       sole ('1': cancel only a job nobody joined — its submitter went away — else change nothing and reply 'kept'),
--       cancels_kept (the cancels stream's approximate length cap)
-- Reply: {'detached'} | {'cancelled'} | {'cancelling'} | {'final', status} | {'gone'} | {'kept'}
local raw = redis.call('GET', KEYS[1])
if not raw then return {'gone'} end
local job = cjson.decode(raw)
if job.status == 'cancelled' then return {'cancelled'} end
if job.status == 'done' or job.status == 'failed' then return {'final', job.status} end
if ARGV[7] == '1' and (tonumber(job.joins) or 0) > 0 then return {'kept'} end
local function without(list, value)
  local kept = {}
  for _, item in ipairs(list) do
    if item ~= value then table.insert(kept, item) end
  end
  return kept
end
if ARGV[6] ~= '' and type(job.holders) == 'table' and #job.holders > 1 then
  local holders = without(job.holders, ARGV[6])
  if #holders < #job.holders then
    job.holders = holders
    redis.call('SET', KEYS[1], cjson.encode(job))
    redis.call('XADD', KEYS[6], '*', 'detached', ARGV[6])  -- its listeners see the task as cancelled now
    redis.call('EXPIRE', KEYS[6], ARGV[4])
    return {'detached'}
  end
end
if job.status == 'running' then
  if job.cancel_requested ~= true then
    job.cancel_requested = true
    redis.call('SET', KEYS[1], cjson.encode(job))
    local worker = type(job.worker) == 'string' and job.worker or ''
    redis.call('XADD', KEYS[13], 'MAXLEN', '~', ARGV[8], '*', 'job', ARGV[1], 'worker', worker, 'claim', tostring(job.claim))
  end
  return {'cancelling'}
end
if KEYS[9] == fair_queue_key(ARGV[5] .. 'fair:', lane_of(job), tenant_of(job)) then
  fair_remove(KEYS[9], KEYS[10], KEYS[11], KEYS[2], tenant_of(job), ARGV[1])
end
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('GET', KEYS[5]) == ARGV[1] then redis.call('DEL', KEYS[5]) end
job.status = 'cancelled'
job.finished_at = clock(ARGV[3])
job.not_before = cjson.null
redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[4])
redis.call('XADD', KEYS[12], 'MAXLEN', '16', '*', 'cancelled', ARGV[1])  -- the jobs behind it moved up
ended(job, ARGV[1], KEYS[7], KEYS[8], ARGV[5], KEYS[6], ARGV[4])
return {'cancelled'}
