-- Claim: take the record at KEYS[1] for the caller, or return it as stored.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token          ARGV[4]  lease until (Unix µs)
-- ARGV[2]  request hash         ARGV[5]  expires at (Unix µs)
-- ARGV[3]  caller's now (µs)    ARGV[6]  key time to live (ms)
--
-- Returns {"claimed"} when the caller's record was written, {"reclaimed"}
-- when the caller's own live claim of the same request was found (a lost
-- reply), else the stored record's fields in the order of the HMGET below.
--
-- A replay is one HMGET. Takeover and expiry are decided against the earlier
-- of the caller's clock and the server's (TIME): the server's clock is read
-- only when the caller's says the record is absent, so a caller whose clock
-- runs ahead cannot take over a lease that is live by the server's clock.
local rec = redis.call('HMGET', KEYS[1], 'status', 'request_hash', 'owner', 'lease_until', 'expires_at',
  'created_at', 'status_code', 'headers', 'headers_encoding', 'body', 'body_base64')
local status = rec[1]
if status then
  local now = tonumber(ARGV[3])
  local expires = tonumber(rec[5])
  if expires == nil then
    return redis.error_reply('ERR idempotency record ' .. KEYS[1] .. ' has no expires_at')
  end
  local lease = tonumber(rec[4])
  local function live(t)
    return expires > t and (status == 'completed' or (lease ~= nil and lease > t))
  end
  local present = live(now)
  if not present then
    local time = redis.call('TIME')
    local server = tonumber(time[1]) * 1000000 + tonumber(time[2])
    if server < now then
      present = live(server)
    end
  end
  if present then
    if status == 'in_progress' and rec[3] == ARGV[1] and rec[2] == ARGV[2] then
      return {'reclaimed'}
    end
    for i = 1, #rec do
      if not rec[i] then
        rec[i] = ''
      end
    end
    return rec
  end
end
-- Absent, expired or abandoned: the caller's record replaces it. A record
-- taken over has every other field emptied, so that nothing of it remains.
if status then
  redis.call('HSET', KEYS[1],
    'status', 'in_progress',
    'owner', ARGV[1],
    'request_hash', ARGV[2],
    'created_at', ARGV[3],
    'lease_until', ARGV[4],
    'expires_at', ARGV[5],
    'status_code', '', 'headers', '', 'headers_encoding', '', 'body', '', 'body_base64', '')
else
  redis.call('HSET', KEYS[1],
    'status', 'in_progress',
    'owner', ARGV[1],
    'request_hash', ARGV[2],
    'created_at', ARGV[3],
    'lease_until', ARGV[4],
    'expires_at', ARGV[5])
end
-- The key lives for the record's time to live, counted on the server's
-- clock, so that a caller whose clock runs behind does not see it vanish.
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'claimed'}
