-- Record a job and queue its id in one step; a second call with the same id changes nothing.
-- With single-flight on, an identical job already in flight is joined instead (its id is the
-- value of the inflight key): the joining API key becomes one of its readers and the joining owner
-- one of its holders (whose cancels only detach them while others hold it), and the job counts the
-- join (joins: a sole cancel, by a submitter who went away, leaves a joined job be); ARGV[5] names an
-- id the caller found finished, which may be replaced. An owner (API key or client address) may
-- have at most max_per_owner jobs queued or running. With a rate (ARGV[12]) the submit first takes a
-- token from the caller's bucket (token_bucket.lua is put in front): one round trip pays and queues.
-- The job's created_at is set here, by Redis's clock (clock.lua is put in front). It waits at the back of
-- its tenant's queue in its lane (fair.lua is put in front); the tenant's weight is recorded for the round
-- robin; the shard's tally counts it, and the depth cap is the tally's length (every tenant's jobs).
-- KEYS: job, queue (the tally), stats, workers, inflight, owner_jobs, bucket, tenant queue, lane ring, weights
-- ARGV: job_json, job_id, max_depth, single_flight ('1' | '0'), stale_inflight_id, heartbeat_ttl_s,
--       job_key_prefix, reader ('' = none), owner ('' = none), max_per_owner,
--       clock ('' = Redis's TIME), rate ('' = do not charge), burst, tenant, lane, weight, fair_prefix,
--       lane_burst (INTERACTIVE_BURST)
-- Reply: {'limited', tokens_left, seconds_until_a_token, seconds_until_full}
--      | {'joined', other_id} | {'exists', depth} | {'full', depth} | {'owner_full', owned}
--      | {'created', position, jobs_done, busy_s, live_workers}  (what the wait estimate needs; the position
--        is fair.lua's estimate of the claims before it)
--      each but 'limited' followed, when charged, by tokens_left and seconds_until_full
local function contains(list, value)
  for _, item in ipairs(list) do
    if item == value then return true end
  end
  return false
end
local now = clock(ARGV[11])
local charged = {}
if ARGV[12] ~= '' then
  local allowed, left, wait, full = take_token(KEYS[7], now, tonumber(ARGV[12]), tonumber(ARGV[13]))
  if allowed == 0 then return {'limited', left, wait, full} end
  charged = {left, full}
end
local function reply(values)
  for _, value in ipairs(charged) do table.insert(values, value) end
  return values
end
local single_flight = ARGV[4] == '1'
if single_flight then
  local current = redis.call('GET', KEYS[5])
  if current and current ~= ARGV[5] then
    local key = ARGV[7] .. current
    local raw = redis.call('GET', key)
    if not raw then return reply({'joined', current}) end  -- a stale marker: the caller retries naming it
    local other = cjson.decode(raw)
    -- An anonymous caller never joins a keyed job (it could not read it); it gets a job of its own.
    if not (ARGV[8] == '' and type(other.readers) == 'table') then
      other.joins = (tonumber(other.joins) or 0) + 1  -- even by its own submitter: one owner may ask twice
      local changed = true
      if ARGV[8] ~= '' and type(other.readers) == 'table' and not contains(other.readers, ARGV[8]) then
        table.insert(other.readers, ARGV[8])
        changed = true
      end
      if ARGV[9] ~= '' then  -- every submitter holds a share: one's cancel only detaches it
        if type(other.holders) ~= 'table' then other.holders = {} end
        if not contains(other.holders, ARGV[9]) then
          table.insert(other.holders, ARGV[9])
          changed = true
        end
      end
      if changed then redis.call('SET', key, cjson.encode(other), 'KEEPTTL') end
      return reply({'joined', current})
    end
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return reply({'exists', redis.call('LLEN', KEYS[2])})
end
local depth = redis.call('LLEN', KEYS[2])
if depth >= tonumber(ARGV[3]) then
  return reply({'full', depth})
end
if ARGV[9] ~= '' then
  local owned = tonumber(redis.call('GET', KEYS[6]) or '0')
  if owned >= tonumber(ARGV[10]) then
    return reply({'owner_full', owned})
  end
  redis.call('INCR', KEYS[6])
end
local job = cjson.decode(ARGV[1])
job.created_at = now
redis.call('SET', KEYS[1], cjson.encode(job))
redis.call('HSET', KEYS[10], ARGV[14], fair_quantum(ARGV[16]))
fair_push(KEYS[8], KEYS[9], KEYS[2], ARGV[14], ARGV[2], false)
local rings = fair_rings(ARGV[17])
local position = fair_estimate(ARGV[17], rings, KEYS[10], ARGV[15], ARGV[14], redis.call('LLEN', KEYS[8]) - 1, tonumber(ARGV[18]))
if single_flight then
  redis.call('SET', KEYS[5], ARGV[2])
end
local stats = redis.call('HMGET', KEYS[3], 'jobs', 'busy_s')
return reply({'created', position, stats[1] or '0', stats[2] or '0', redis.call('ZCOUNT', KEYS[4], now - tonumber(ARGV[6]), '+inf')})
