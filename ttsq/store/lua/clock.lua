-- One clock for every deadline and bucket: Redis's own (TIME), so that no host's clock matters, however
-- far the hosts of the API replicas and workers drift apart. Loaded in front of every script that keeps
-- time. A test may pin the time (a number in the script's clock argument) to move it on without
-- sleeping; production passes '' and Redis decides.
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 5: allow writes after TIME
local function clock(pinned)
  if pinned ~= nil and pinned ~= '' then return tonumber(pinned) end
  local now = redis.call('TIME')
  return tonumber(now[1]) + tonumber(now[2]) / 1000000
end
-- A deadline as it is kept and handed back (a lease's fencing token): whole milliseconds, so its text
-- (Lua's 14 significant digits) reads back as exactly the number that was stored.
local function deadline(at)
  return math.floor(at * 1000 + 0.5) / 1000
end
