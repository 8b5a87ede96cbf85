-- Store a job's result and mark it done; both expire after ttl_s. Releases its lease, its place
-- in the processing list and (with single-flight) its inflight marker, and ends its audio stream.
-- A job cancelled while it ran is marked cancelled instead and its audio dropped. Only the holder
-- of the job's current claim may do this: a stale owner (its lease lapsed and the sweep requeued
-- the job, perhaps to another worker) changes nothing, not even the new owner's lease.
-- KEYS: job, result, leases, processing, stats, inflight, stream, owner_jobs (of the job's owner), deliveries
-- ARGV: id, audio, ttl_s, clock ('' = Redis's TIME), duration_s, content_type, busy_s, single_flight ('1' | '0'), prefix, token,
--       captions (a JSON list of cues, or '' for none), speaker (the speaker embedding used, or '' for none)
-- Reply: 'done' | 'cancelled' | 'gone' (the job had already finished, or expired)
--      | 'stale' (the caller's claim is not the job's current one: refused)
local raw = redis.call('GET', KEYS[1])
local job = raw and cjson.decode(raw)
if not job or job.status == 'done' or job.status == 'failed' or job.status == 'cancelled' then
  redis.call('LREM', KEYS[4], 0, ARGV[1])  -- nobody holds a job that ended: no lease or claim of it can be live
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 'gone'
end
if job.status ~= 'running' or tostring(job.claim) ~= ARGV[10] then return 'stale' end
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[8] == '1' and redis.call('GET', KEYS[6]) == ARGV[1] then
  redis.call('DEL', KEYS[6])
end
job.finished_at = clock(ARGV[4])
job.worker = cjson.null
if job.cancel_requested == true then
  job.status = 'cancelled'
  redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[3])
  ended(job, ARGV[1], KEYS[8], KEYS[9], ARGV[9], KEYS[7], ARGV[3])
  return 'cancelled'
end
job.status = 'done'
job.duration_s = tonumber(ARGV[5])
job.content_type = ARGV[6]
job.result_bytes = string.len(ARGV[2])
job.error = cjson.null
if ARGV[11] ~= '' then job.captions = cjson.decode(ARGV[11]) end
if ARGV[12] and ARGV[12] ~= '' then job.speaker = ARGV[12] end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[3])
redis.call('HINCRBY', KEYS[5], 'jobs', 1)
redis.call('HINCRBYFLOAT', KEYS[5], 'busy_s', ARGV[7])
-- After the job is done, in the same step, ended() ends the stream: a reader that sees the end finds it done
-- (and a reader waiting on a job that streamed nothing, one chunk, wakes up at once).
ended(job, ARGV[1], KEYS[8], KEYS[9], ARGV[9], KEYS[7], ARGV[3])
return 'done'
