-- The next `count` ids a claim would take (from the front of the queue), each with its owner, so the
-- claim that follows can declare every key it touches (claim.lua). Read-only: it changes nothing, so
-- what it reads of keys it does not declare (the jobs, built from the prefix) can only mislead a
-- claim into doing less, never into losing a job: claim.lua checks everything again with the keys declared.
-- KEYS: queue
-- ARGV: count, job_key_prefix
-- Reply: {id_1, owner_1, ..., id_n, owner_n} in claim order; owner '' when the job has none (or is not here)
local ids = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[1]), -1)
local reply = {}
for i = #ids, 1, -1 do
  local raw = redis.call('GET', ARGV[2] .. ids[i])
  local owner = ''
  if raw then
    local job = cjson.decode(raw)
    if type(job.owner) == 'string' then owner = job.owner end
  end
  table.insert(reply, ids[i])
  table.insert(reply, owner)
end
return reply
