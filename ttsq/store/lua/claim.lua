-- Claim jobs for a worker in deficit-round-robin order over the shard's tenants (fair.lua, put in
-- front), in one step: each is moved to the processing list, its attempt counted, marked running and
-- leased to the worker until the deadline under a new fencing token (the next number of the claims
-- counter, kept on the job: only its holder may renew, stream, complete or fail this attempt); or, past
-- max_attempts, failed for good and dead-lettered.
-- The caller names the jobs it expects (peek.lua: id, lane, tenant) and declares their keys, their
-- owners' count keys and their tenants' queues, so every key touched is declared: on a Redis Cluster
-- whose slot is being moved, Redis then refuses the script (TRYAGAIN, ASK) rather than let it read a
-- job the move has taken away as missing. Claiming stops at the first expected id that is not the one
-- the round robin picks now (another worker was quicker: the caller peeks again).
-- A job whose last worker was lost (isolate) runs alone: it is claimed only as the first job of a
-- claim that allows it (first = '1'), and nothing is claimed with it; a claim that does not allow it
-- stops before it.
-- The claim is safe to repeat: the reply is kept under the worker's claim record with the caller's
-- request id, and a second call with that id (a retry whose first answer was lost on the way)
-- answers the same jobs again instead of claiming more; they stay the worker's, nothing is stranded.
-- Each job started gets a 'status running' entry on its audio stream, and a claim that took jobs out of the queue
-- adds one entry to the shard's moves stream: what the API's listener follows instead of reading jobs again.
-- Each job started joins the worker's own set of claims (scored by its token), kept for two leases past the last
-- claim or renewal: what the sweep takes back, without reading any other job, once the worker's heartbeat lapses.
-- A claim may be limited in new work (a worker without room for more new streams): past `new` jobs of a
-- lane other than continuation it takes continuations only (fair_lane), and stops at any other.
-- KEYS: queue (the tally), processing, leases, dead, claims, record, deliveries, the rings of every lane (LANES'
--       order), their credits, weights, streak, moves, the worker's claims (worker_jobs),
--       then per expected id: job, owner_jobs, tenant queue, stream
-- ARGV: worker, request_id, clock ('' = Redis's TIME), lease_s, ttl_s, dead_max, prefix, record_ttl_ms,
--       first ('1' | '0'), burst, new ('' = no limit), then the expected ids in claim order
-- Reply: {'claimed' | 'repeated', {started, job_json}, ...} with started 'run' (leased to this worker)
--        or 'dead' (no attempts left: dead-lettered)
local record = redis.call('GET', KEYS[6])
if record then
  local saved = cjson.decode(record)
  if saved.request == ARGV[2] then
    local again = {'repeated'}
    for _, item in ipairs(saved.claims) do table.insert(again, item) end
    return again
  end
end
local now = clock(ARGV[3])
local WEIGHTS, STREAK, MOVES, WORKER_JOBS = 8 + 2 * #LANES, 9 + 2 * #LANES, 10 + 2 * #LANES, 11 + 2 * #LANES
local function start(id, job, job_key, owner_key, stream_key)
  job.attempts = job.attempts + 1
  job.orphan_seen_at = nil
  if job.attempts > job.max_attempts then
    job.status = 'failed'
    job.finished_at = now
    job.error = 'gave up after ' .. job.max_attempts .. ' attempts; last error: ' ..
      (type(job.error) == 'string' and job.error or 'unknown')
    local out = cjson.encode(job)
    redis.call('SET', job_key, out, 'EX', ARGV[5])
    redis.call('LREM', KEYS[2], 0, id)
    redis.call('LPUSH', KEYS[4], out)
    redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
    ended(job, id, owner_key, KEYS[7], ARGV[7], stream_key, ARGV[5])
    return {'dead', out}
  end
  job.status = 'running'
  job.started_at = now
  job.worker = ARGV[1]
  job.claim = redis.call('INCR', KEYS[5])
  job.not_before = cjson.null
  local out = cjson.encode(job)
  redis.call('SET', job_key, out)
  redis.call('ZADD', KEYS[3], deadline(now + tonumber(ARGV[4])), id)
  redis.call('ZADD', KEYS[WORKER_JOBS], job.claim, id)
  redis.call('PEXPIRE', KEYS[WORKER_JOBS], math.ceil(2000 * tonumber(ARGV[4])))
  redis.call('XADD', stream_key, '*', 'status', 'running', 'attempt', job.attempts)
  redis.call('EXPIRE', stream_key, ARGV[5])
  return {'run', out}
end
local rings, credit_keys = {}, {}
for index, lane in ipairs(LANES) do
  rings[lane] = KEYS[7 + index]
  credit_keys[lane] = KEYS[7 + #LANES + index]
end
local burst, new = tonumber(ARGV[10]), tonumber(ARGV[11])
local FIRST_ID = 12
local claims = {}
local moved = 0
for i = FIRST_ID, #ARGV do
  local id = ARGV[i]
  local base = WORKER_JOBS + 4 * (i - FIRST_ID)
  local job_key, owner_key, queue_key, stream_key = KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4]
  local batch_waiting = redis.call('LLEN', rings.batch) > 0
  local streak = tonumber(redis.call('GET', KEYS[STREAK]) or '0')
  local continuing = redis.call('LLEN', rings.continuation) > 0
  local lane = fair_lane(continuing, redis.call('LLEN', rings.interactive) > 0, batch_waiting, streak, burst, new ~= 0)
  if not lane then break end
  local tenant = redis.call('LINDEX', rings[lane], -1)
  if queue_key ~= fair_queue_key(ARGV[7] .. 'fair:', lane, tenant) then break end
  if redis.call('LINDEX', queue_key, -1) ~= id then break end
  local raw = redis.call('GET', job_key)
  local job = raw and cjson.decode(raw)
  local alone = job and job.isolate == true
  if alone and (#claims > 0 or ARGV[9] ~= '1') then break end
  if job and type(job.owner) == 'string' and owner_key ~= ARGV[7] .. 'owner-jobs:' .. job.owner then break end
  -- Out of the tenant's queue (and the tally) into processing; the round robin moves on.
  if new and lane ~= 'continuation' then new = new - 1 end
  redis.call('RPOP', queue_key)
  redis.call('RPOP', KEYS[1])
  moved = moved + 1
  redis.call('LPUSH', KEYS[2], id)
  local credit = tonumber(redis.call('HGET', credit_keys[lane], tenant)) or fair_quantum(redis.call('HGET', KEYS[WEIGHTS], tenant))
  credit = credit - 1
  local next_streak = fair_streak(lane, batch_waiting, streak)
  if next_streak ~= streak then redis.call('SET', KEYS[STREAK], next_streak) end
  local after = fair_after(redis.call('LLEN', queue_key), credit)
  if after == 'drop' then
    redis.call('RPOP', rings[lane])
    redis.call('HDEL', credit_keys[lane], tenant)
  elseif after == 'rotate' then
    redis.call('LMOVE', rings[lane], rings[lane], 'RIGHT', 'LEFT')
    redis.call('HDEL', credit_keys[lane], tenant)
  else
    redis.call('HSET', credit_keys[lane], tenant, credit)
  end
  if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
    redis.call('LREM', KEYS[2], 0, id)  -- nothing to run: an expired or finished job's id
  else
    table.insert(claims, start(id, job, job_key, owner_key, stream_key))
    if alone then break end
  end
end
if moved > 0 then redis.call('XADD', KEYS[MOVES], 'MAXLEN', '16', '*', 'claimed', moved) end
redis.call('SET', KEYS[6], cjson.encode({request = ARGV[2], claims = claims}), 'PX', ARGV[8])
local reply = {'claimed'}
for _, item in ipairs(claims) do table.insert(reply, item) end
return reply
