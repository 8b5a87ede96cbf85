-- Append one piece of a job's audio to its stream, for the holder of the job's current claim only:
-- a stale owner (its lease lapsed and the job was claimed again) must not write into the stream the
-- new owner is filling. A retried attempt starts the stream afresh with its first piece (fresh = '1'): its
-- entries are trimmed, not the key deleted, so the stream keeps its last id and new entries always come after
-- every id a reader has seen (a deleted stream could restart at a lower id within the same millisecond).
-- Each piece says where its chunk's speech starts and ends in the joined audio (samples) and its text (-1, -1 and
-- '' for a piece of a chunk still being generated), where the piece itself starts in the joined audio (at, samples)
-- and whether more of its chunk follows (partial); the part its chunk belongs to, and how many of the job's parts are
-- wholly in the stream once it is (a document's next attempt goes on from there).
-- KEYS: job, stream
-- ARGV: token, ttl_s, fresh ('1' | '0'), index, total, pcm, start, end, text, at, partial ('1' | '0'), part, parts_done
-- Reply: 1 (appended) | 0 (stale: the caller's claim is not the job's current one, or it is no longer running)
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local job = cjson.decode(raw)
if job.status ~= 'running' or tostring(job.claim) ~= ARGV[1] then return 0 end
if ARGV[3] == '1' then redis.call('XTRIM', KEYS[2], 'MAXLEN', '0') end
redis.call('XADD', KEYS[2], '*', 'index', ARGV[4], 'total', ARGV[5], 'pcm', ARGV[6], 'start', ARGV[7], 'end_at', ARGV[8],
  'text', ARGV[9], 'at', ARGV[10], 'partial', ARGV[11], 'part', ARGV[12], 'parts_done', ARGV[13])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
