-- Claim: take the record at KEYS[1] for the caller, or return it as stored.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token          ARGV[4]  lease until (Unix µs)
-- ARGV[2]  request hash         ARGV[5]  expires at (Unix µs)
-- ARGV[3]  caller's now (µs)    ARGV[6]  key expiry for PEXPIREAT (Unix ms)
--
-- Returns {"claimed"} when the caller's record was written, else the stored
-- record as a flat field/value list (HGETALL). Every time compared is the
-- caller's: the server's clock decides nothing here.
local rec = redis.call('HGETALL', KEYS[1])
if #rec > 0 then
  local f = {}
  for i = 1, #rec, 2 do
    f[rec[i]] = rec[i + 1]
  end
  local now = tonumber(ARGV[3])
  local expires = tonumber(f['expires_at'])
  local lease = tonumber(f['lease_until'])
  if expires == nil then
    return redis.error_reply('ERR idempotency record ' .. KEYS[1] .. ' has no expires_at')
  end
  -- Live unless expired, or in progress with a lease that ran out. A live
  -- record is returned untouched, also to its own owner (a repeated claim).
  local absent = expires <= now or (f['status'] == 'in_progress' and (lease == nil or lease <= now))
  if not absent then
    return rec
  end
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1],
  'status', 'in_progress',
  'owner', ARGV[1],
  'request_hash', ARGV[2],
  'created_at', ARGV[3],
  'lease_until', ARGV[4],
  'expires_at', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
return {'claimed'}
