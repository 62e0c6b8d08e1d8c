-- Complete: store the response on the record at KEYS[1], fenced by the owner
-- token and the in-progress status.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token            ARGV[5]  body (raw bytes)
-- ARGV[2]  status code            ARGV[6]  body is base64 ("1" or "0")
-- ARGV[3]  headers (JSON or "")   ARGV[7]  expires at (Unix µs)
-- ARGV[4]  headers encoding       ARGV[8]  key time to live (ms)
--
-- Returns 1 when written, 0 when the caller no longer owns the record as in
-- progress (nothing is written).
local cur = redis.call('HMGET', KEYS[1], 'status', 'owner')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1],
  'status', 'completed',
  'lease_until', '',
  'status_code', ARGV[2],
  'headers', ARGV[3],
  'headers_encoding', ARGV[4],
  'body', ARGV[5],
  'body_base64', ARGV[6],
  'expires_at', ARGV[7])
-- As in the claim: the time to live, on the server's clock.
redis.call('PEXPIRE', KEYS[1], ARGV[8])
return 1
