-- The record format, versions 1 and 2, as record.go writes it (the package
-- comment describes it). Positions are Lua's, counted from 1; integers
-- big-endian:
--
--   1      version (1, or 2)     12-19  lease until (Unix µs, signed)
--   2      status ('p' or 'c')   20-27  expires at (Unix µs, signed)
--   3      flags                 28-31  status code
--   4-11   created at            32-33  length h of the request hash
--
-- then the hash, the owner after its 2-byte length, the headers, the origin
-- (version 2 only) and the body.
-- This file is the start of takeover.lua, complete.lua, release.lua and
-- renew.lua.

local function u16(s, i)
  local a, b = string.byte(s, i, i + 1)
  return a * 256 + b
end

-- i64 reads a signed 64-bit integer. Lua's numbers are doubles: exact for
-- every Unix microsecond until the year 2255.
local function i64(s, i)
  local n = 0
  for k = i, i + 7 do
    n = n * 256 + string.byte(s, k)
  end
  if string.byte(s, i) >= 128 then
    n = n - 18446744073709551616
  end
  return n
end

-- head returns the status and the owner of the record v, and the position of
-- the owner's last byte; nil when v is not a record of this format. It checks
-- what parse checks, without reading the times, which the complete and
-- release scripts do not use (their two i64 reads cost a completion 1 to 4 µs
-- of server time on Redis 7.0: BenchmarkPeerShapeScripts).
local function head(v)
  local version = string.byte(v, 1)
  if #v < 37 or (version ~= 1 and version ~= 2) then
    return nil
  end
  local status = string.sub(v, 2, 2)
  if status ~= 'c' and (status ~= 'p' or version ~= 1) then
    -- Version 2 is a completed record with an origin: in progress, it
    -- is not a record.
    return nil
  end
  local o = 34 + u16(v, 32)
  if #v < o + 1 then
    return nil
  end
  local last = o + 1 + u16(v, o)
  if #v < last + 2 then
    return nil
  end
  return status, string.sub(v, o + 2, last), last
end

-- parse returns the status, lease until, expires at and owner of the record
-- v, and the position of the owner's last byte; nil when v is not a record
-- of this format.
local function parse(v)
  local status, owner, last = head(v)
  if not status then
    return nil
  end
  return status, i64(v, 12), i64(v, 20), owner, last
end

-- not_record refuses the value v at key: a record of a later format (a
-- version above 2, which a later release writes) or no record at all.
local function not_record(key, v)
  if v and #v > 0 and string.byte(v, 1) > 2 and string.byte(v, 1) < 32 then
    return redis.error_reply('ERR the value at ' .. key .. ' is an idempotency record of a later format')
  end
  return redis.error_reply('ERR the value at ' .. key .. ' is not an idempotency record')
end

