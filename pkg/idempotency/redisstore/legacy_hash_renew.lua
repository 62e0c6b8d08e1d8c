-- Renew on a key that holds a record of the hash layout (see
-- legacy_hash_claim.lua): move the lease of the record at KEYS[1], fenced by
-- the owner token and the in-progress status.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- ARGV[2]  new lease (Unix µs)
-- ARGV[3]  key time to live until the new lease (ms)
--
-- Returns 1 when renewed, 0 when the caller no longer owns the record as in
-- progress (nothing is written).
local cur = redis.pcall('HMGET', KEYS[1], 'status', 'owner', 'expires_at')
if cur.err then
  return cur -- WRONGTYPE: the key holds a string again
end
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
if tonumber(ARGV[2]) > (tonumber(cur[3]) or 0) then
  redis.call('HSET', KEYS[1], 'expires_at', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3], 'GT')
return 1
