-- The next `count` ids a claim would take, in deficit-round-robin order (fair.lua is put in front): each
-- with its owner, lane and tenant, so the claim that follows can declare every key it touches
-- (claim.lua). Read-only: it simulates the claims without changing anything, so what it reads of keys
-- it does not declare (the jobs, the tenants' queues, built from the prefixes) can only mislead a claim
-- into doing less, never into losing a job: claim.lua takes the same decisions again with the keys declared.
-- KEYS: the rings of every lane (LANES' order), their credits, weights, streak
-- ARGV: count, job_key_prefix, fair_prefix, burst, new (how many of them may be new work, jobs of a lane other than
--       continuation; '' = all)
-- Reply: {id_1, owner_1, lane_1, tenant_1, ..., id_n, owner_n, lane_n, tenant_n} in claim order;
--        owner '' when the job has none (or is not here)
local count, burst, new = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local rings, credit_keys, credits = {}, {}, {}
for index, lane in ipairs(LANES) do
  -- Each claim moves a ring's head by one at most: only its last count + 1 tenants can come up.
  local length = redis.call('LLEN', KEYS[index])
  rings[lane] = redis.call('LRANGE', KEYS[index], math.max(0, length - count - 1), -1)
  credit_keys[lane] = KEYS[#LANES + index]
  credits[lane] = {}
end
local weights_key = KEYS[2 * #LANES + 1]
local streak = tonumber(redis.call('GET', KEYS[2 * #LANES + 2]) or '0')
local taken = {}
local reply = {}
for _ = 1, count do
  local batch_waiting = #rings.batch > 0
  local lane = fair_lane(#rings.continuation > 0, #rings.interactive > 0, batch_waiting, streak, burst, new ~= 0)
  if not lane then break end
  if new and lane ~= 'continuation' then new = new - 1 end
  local ring = rings[lane]
  local tenant = ring[#ring]
  local queue_key = fair_queue_key(ARGV[3], lane, tenant)
  local before = taken[queue_key] or 0
  local id = redis.call('LINDEX', queue_key, -1 - before)
  if not id then break end  -- a ring naming an empty queue: claim.lua stops there too
  taken[queue_key] = before + 1
  local credit = credits[lane][tenant]
  if credit == nil then credit = tonumber(redis.call('HGET', credit_keys[lane], tenant)) end
  if not credit then credit = fair_quantum(redis.call('HGET', weights_key, tenant)) end
  credit = credit - 1
  streak = fair_streak(lane, batch_waiting, streak)
  local after = fair_after(redis.call('LLEN', queue_key) - before - 1, credit)
  if after == 'drop' then
    table.remove(ring)
    credits[lane][tenant] = false
  elseif after == 'rotate' then
    table.insert(ring, 1, table.remove(ring))
    credits[lane][tenant] = false
  else
    credits[lane][tenant] = credit
  end
  local raw = redis.call('GET', ARGV[2] .. id)
  local owner = ''
  if raw then
    local job = cjson.decode(raw)
    if type(job.owner) == 'string' then owner = job.owner end
  end
  for _, value in ipairs({id, owner, lane, tenant}) do table.insert(reply, value) end
end
return reply
