-- A token bucket per API key (or anonymous client address), shared by every API replica; put in
-- front of the scripts that charge a submit (rate_limit.lua alone, enqueue.lua in the same step as
-- the job it pays for), after clock.lua: the bucket refills by Redis's clock, never a replica's. The bucket holds at most `burst` tokens and refills at `rate` per second;
-- a request takes one, or `cost` (what its work costs: a voice draw pays one per job it queues; at most `burst`).
-- Returns: allowed (1 | 0), tokens_left (floor), seconds_until_a_token (ceil, 0 when allowed; until `cost` tokens
--          when refused), seconds_until_full (ceil)
local function take_token(key, now, rate, burst, cost)
  cost = cost or 1
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1]) or burst
  local at = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
  local allowed = 0
  if tokens >= cost then
    tokens = tokens - cost
    allowed = 1
  end
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst / rate) * 1000) + 1000)
  local wait = 0
  if allowed == 0 then wait = math.ceil((cost - tokens) / rate) end
  return allowed, math.floor(tokens), wait, math.ceil((burst - tokens) / rate)
end
