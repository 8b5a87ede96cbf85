-- What the sweep would act on, read without changing anything, so the sweep that follows (sweep.lua)
-- can declare every key it touches: running jobs whose lease deadline has passed, ids in the processing
-- list with no lease (left by an older release's two-step claim), and retries whose backoff is over;
-- each with the lane and tenant whose queue it would go back to (fair.lua is put in front; the job keys
-- are read from the prefix: a misread can only make the sweep skip an id, which sweep.lua checks again).
-- Nothing when another worker holds this interval's sweep lock.
-- KEYS: lock, leases, processing, delayed
-- ARGV: clock ('' = Redis's TIME; clock.lua in front), limit, promote_limit, job_key_prefix
-- Reply: {'skipped'} | {'scan', {lapsed ids}, {unleased ids}, {due ids}, {lane, tenant per id, in that order}}
if redis.call('EXISTS', KEYS[1]) == 1 then return {'skipped'} end
local now = clock(ARGV[1])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local unleased = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if not redis.call('ZSCORE', KEYS[2], id) and #unleased < tonumber(ARGV[2]) then table.insert(unleased, id) end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local places = {}
for _, ids in ipairs({lapsed, unleased, due}) do
  for _, id in ipairs(ids) do
    local raw = redis.call('GET', ARGV[4] .. id)
    local job = raw and cjson.decode(raw)
    table.insert(places, lane_of(job))
    table.insert(places, tenant_of(job))
  end
end
return {'scan', lapsed, unleased, due, places}
