-- Append one piece of a job's audio to its stream, for the holder of the job's current claim only:
-- a stale owner (its lease lapsed and the job was claimed again) must not write into the stream the
-- new owner is filling. A retried attempt starts the stream afresh with its first piece (fresh = '1').
-- KEYS: job, stream
-- ARGV: token, ttl_s, fresh ('1' | '0'), index, total, pcm
-- Reply: 1 (appended) | 0 (stale: the caller's claim is not the job's current one, or it is no longer running)
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local job = cjson.decode(raw)
if job.status ~= 'running' or tostring(job.claim) ~= ARGV[1] then return 0 end
if ARGV[3] == '1' then redis.call('DEL', KEYS[2]) end
redis.call('XADD', KEYS[2], '*', 'index', ARGV[4], 'total', ARGV[5], 'pcm', ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
