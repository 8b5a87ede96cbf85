-- Charge one submit that does not queue a job (a cache hit), or work paid before it is done (a voice draw's
-- jobs, a dictionary's regexes); token_bucket.lua is put in front.
-- KEYS: bucket   ARGV: clock ('' = Redis's TIME), rate, burst, cost (tokens to take)
-- Reply: {allowed (1 | 0), tokens_left, seconds_until_a_token, seconds_until_full}
return {take_token(KEYS[1], clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))}
