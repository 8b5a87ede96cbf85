-- What the sweep would act on, read without changing anything, so the sweep that follows (sweep.lua)
-- can declare every key it touches: running jobs whose lease deadline has passed, ids in the processing
-- list with no lease (left by an older release's two-step claim), retries whose backoff is over, and the
-- jobs claimed by workers whose heartbeat has lapsed (each worker's own set of claims: no other job is
-- read); each with the lane and tenant whose queue it would go back to (fair.lua is put in front; the job
-- keys are read from the prefix: a misread can only make the sweep skip an id, which sweep.lua checks again).
-- Heartbeats are judged only by a sweeper whose own beats have run unbroken for a TTL up to now (heartbeat.lua
-- starts a new run after a gap of more than half the TTL): after an outage (Redis restarted, paused, failed over,
-- or this shard's slot moved) every worker's last beat is old, and none of them is dead for that; they have a TTL
-- from the sweeper's return to beat again. Half the TTL, not all of it: another worker misses its TTL in an outage
-- shorter than the TTL by up to one beat interval, which is under half the TTL (settings.py checks it), and that
-- outage broke the sweeper's run too.
-- Nothing when another worker holds this interval's sweep lock.
-- KEYS: lock, leases, processing, delayed, workers, beats_since
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), limit, promote_limit, job_key_prefix, holder (the sweeping
--       worker), heartbeat_ttl_s, worker_jobs_prefix
-- Reply: {'skipped'} | {'scan', {lapsed ids}, {unleased ids}, {due ids}, {lane, tenant per id, in that order},
--         {ids of lapsed workers' claims}, {the worker of each}}
if redis.call('EXISTS', KEYS[1]) == 1 then return {'skipped'} end
local now = clock(ARGV[1])
local limit = tonumber(ARGV[2])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
local unleased = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if not redis.call('ZSCORE', KEYS[2], id) and #unleased < limit then table.insert(unleased, id) end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local abandoned, owners = {}, {}
local ttl = tonumber(ARGV[6])
local mine = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[5]))
local since = tonumber(redis.call('HGET', KEYS[6], ARGV[5]))
if mine and since and mine >= now - ttl and since <= now - ttl then
  for _, worker in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. (now - ttl))) do
    for _, id in ipairs(redis.call('ZRANGE', ARGV[7] .. worker, 0, limit - #abandoned - 1)) do
      table.insert(abandoned, id)
      table.insert(owners, worker)
    end
    if #abandoned >= limit then break end
  end
end
local places = {}
for _, ids in ipairs({lapsed, unleased, due, abandoned}) do
  for _, id in ipairs(ids) do
    local raw = redis.call('GET', ARGV[4] .. id)
    local job = raw and cjson.decode(raw)
    table.insert(places, lane_of(job))
    table.insert(places, tenant_of(job))
  end
end
return {'scan', lapsed, unleased, due, places, abandoned, owners}
