-- Fair queuing inside one shard (docs/fairness.md), loaded in front of every script that puts a job in
-- line, takes one out or says where one stands. Each tenant has a queue per lane (interactive, batch;
-- LPUSH at the back, the front at the tail); each lane has a ring of the tenants with jobs waiting
-- (its head, served now, at the tail) and the head's credit: deficit round robin with unit costs, so
-- the head tenant gets `weight` claims in a row, then moves to the other end of the ring. A tenant
-- whose queue empties leaves the ring and forgets its credit; one whose queue fills again joins at the
-- far end. The shard's tally (the `queue` key) holds one '*' per waiting job, so its length is the depth.
-- Lanes: continuation first (an interactive job continuing a stream whose listener is playing: a
-- realtime session's chunk after its first), then interactive, but after `burst` claims of either in a
-- row while batch jobs wait, one batch claim, so a batch backlog gets at least 1 claim in burst + 1.
-- A claim may be allowed continuations only (a worker without room for new streams): then only the
-- continuation lane is served, and the batch turn waits for a claim that may start new work.
-- The functions below decide; each script reads and writes the keys it declares (claim.lua) or only
-- reads (peek.lua, position.lua), so the same decisions are taken for real and in simulation.
local LANES = {'continuation', 'interactive', 'batch'}

local function lane_of(job)
  if type(job) ~= 'table' then return 'interactive' end
  if job.priority == 'batch' then return 'batch' end
  local stream = type(job.params) == 'table' and job.params.stream
  if type(stream) == 'table' and (tonumber(stream.chunk) or 0) > 0 then return 'continuation' end
  return 'interactive'
end

-- The rings of a shard's lanes, from its fair prefix.
local function fair_rings(fair_prefix)
  local rings = {}
  for _, lane in ipairs(LANES) do rings[lane] = fair_prefix .. lane .. ':ring' end
  return rings
end

-- A job without a tenant (a record older than fair queuing) waits under one tenant of its own.
local function tenant_of(job)
  if type(job) == 'table' and type(job.tenant) == 'string' and job.tenant ~= '' then return job.tenant end
  return '-'
end

local function fair_queue_key(fair_prefix, lane, tenant)
  return fair_prefix .. lane .. ':q:' .. tenant
end

-- The claims a tenant's turn starts with: its weight, a whole number of at least 1.
local function fair_quantum(weight)
  local w = tonumber(weight)
  if not w or w < 1 then return 1 end
  return math.floor(w)
end

-- The lane the next claim serves, from whether each lane has jobs waiting and whether the claim may
-- take new work (new_ok: a job of a lane other than continuation); nil when none may be served.
local function fair_lane(continuing, interactive_waiting, batch_waiting, streak, burst, new_ok)
  local urgent_turn = not batch_waiting or streak < burst
  if continuing and (urgent_turn or not new_ok) then return 'continuation' end
  if not new_ok then return nil end
  if interactive_waiting and urgent_turn then return 'interactive' end
  if batch_waiting then return 'batch' end
  return nil
end

-- The streak once `lane` has been served (batch_waiting: as it was before the claim).
local function fair_streak(lane, batch_waiting, streak)
  if lane ~= 'batch' and batch_waiting then return streak + 1 end
  return 0
end

-- What the ring does once its head tenant gave one job: 'drop' (its queue is empty), 'rotate' (its
-- turn is over) or 'stay' (credit left).
local function fair_after(left_in_queue, credit)
  if left_in_queue <= 0 then return 'drop' end
  if credit <= 0 then return 'rotate' end
  return 'stay'
end

-- Put an id in its tenant's queue (the tenant joins its lane's ring when its queue was empty): at the
-- back (a new job, a released retry) or at the front (a job whose worker was lost). The tally counts it.
local function fair_push(queue_key, ring_key, tally_key, tenant, id, front)
  if redis.call('LLEN', queue_key) == 0 and not redis.call('LPOS', ring_key, tenant) then
    redis.call('LPUSH', ring_key, tenant)
  end
  if front then redis.call('RPUSH', queue_key, id) else redis.call('LPUSH', queue_key, id) end
  redis.call('LPUSH', tally_key, '*')
end

-- Take an id out of its tenant's queue wherever it stands (a cancel); 1 when it was there, else 0.
local function fair_remove(queue_key, ring_key, credit_key, tally_key, tenant, id)
  local removed = redis.call('LREM', queue_key, 0, id)
  for _ = 1, removed do redis.call('RPOP', tally_key) end
  if removed > 0 and redis.call('LLEN', queue_key) == 0 then
    redis.call('LREM', ring_key, 0, tenant)
    redis.call('HDEL', credit_key, tenant)
  end
  return removed
end

-- An estimate of the claims before the job `ahead_own` places from the front of its tenant's queue, in
-- DRR order with nobody else arriving: its tenant needs ahead_own / weight more turns, and every other
-- tenant of its lane is served at most one turn more than that (or until its queue is empty); an
-- interactive job waits for every continuation waiting; either lets batch through once per `burst`
-- claims, and a batch job waits for their share. Read-only; O(tenants waiting in the shard).
local function fair_estimate(fair_prefix, rings, weights_key, lane, tenant, ahead_own, burst)
  local turns = math.floor(ahead_own / fair_quantum(redis.call('HGET', weights_key, tenant))) + 1
  local function lane_ahead(which, own)
    local total = 0
    for _, other in ipairs(redis.call('LRANGE', rings[which], 0, -1)) do
      if other ~= own then
        local waiting = redis.call('LLEN', fair_queue_key(fair_prefix, which, other))
        total = total + math.min(waiting, turns * fair_quantum(redis.call('HGET', weights_key, other)))
      end
    end
    return total
  end
  local function lane_total(which)
    local total = 0
    for _, other in ipairs(redis.call('LRANGE', rings[which], 0, -1)) do
      total = total + redis.call('LLEN', fair_queue_key(fair_prefix, which, other))
    end
    return total
  end
  local ahead = ahead_own + lane_ahead(lane, tenant)
  if lane ~= 'batch' then
    if lane == 'interactive' then ahead = ahead + lane_total('continuation') end
    if redis.call('LLEN', rings.batch) > 0 then ahead = ahead + math.floor(ahead / (burst + 1)) end
    return ahead
  end
  local urgent = lane_total('continuation') + lane_total('interactive')
  return ahead + math.min(urgent, (ahead + 1) * burst)
end
