-- Claim on a key that holds a record of the hash layout, which stores before
-- the string layout wrote (one hash field per record field). The claim's
-- SET answered WRONGTYPE; this script decides as the hash layout's claim
-- did, but a record it takes over, or writes because the key is gone,
-- becomes a record of the string layout.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token          ARGV[4]  the caller's in-progress record
-- ARGV[2]  request hash                  (string layout)
-- ARGV[3]  caller's now (µs)    ARGV[5]  key time to live (ms)
--
-- Returns {"claimed"} when the caller's record was written, {"reclaimed"}
-- when the caller's own live claim of the same request was found (a lost
-- reply), else the stored record's fields in the order of the HMGET below.
-- A key that holds a string again answers WRONGTYPE, so that the caller goes
-- back to the string layout.
local rec = redis.pcall('HMGET', KEYS[1], 'status', 'request_hash', 'owner', 'lease_until', 'expires_at',
  'created_at', 'status_code', 'headers', 'headers_encoding', 'body', 'body_base64')
if rec.err then
  if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
    return rec
  end
  return redis.error_reply('ERR the value at ' .. KEYS[1] .. ' is not an idempotency record')
end
local status = rec[1]
if not status and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ERR the value at ' .. KEYS[1] .. ' is not an idempotency record')
end
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
-- Absent, expired or abandoned: the caller's record, in the string layout,
-- replaces the hash. The key lives for the record's time to live, counted
-- on the server's clock.
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
return {'claimed'}
