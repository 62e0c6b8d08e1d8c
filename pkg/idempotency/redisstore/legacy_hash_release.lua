-- Release on a key that holds a record of the hash layout (see
-- legacy_hash_claim.lua): delete the record at KEYS[1], fenced by the owner
-- token (ARGV[1]) and the in-progress status.
--
-- Returns 1 when deleted, 0 when the caller no longer owns the record as in
-- progress (nothing is deleted).
local cur = redis.pcall('HMGET', KEYS[1], 'status', 'owner')
if cur.err then
  return cur -- WRONGTYPE: the key holds a string again
end
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
