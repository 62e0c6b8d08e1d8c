-- Takeover: the claim's SET … NX GET found a record that the caller's clock
-- says is absent (expired, or in progress with a lease that ran out). Read it
-- again and decide against the earlier of the caller's clock and the
-- server's (TIME): replace it with the caller's record, or return it.
--
-- KEYS[1]  the record's key
-- ARGV[1]  the caller's in-progress record
-- ARGV[2]  the caller's now (Unix µs)
-- ARGV[3]  the key's time to live (ms)
--
-- Returns 1 when the caller's record was written (also when the key vanished
-- since the SET), else the live record as stored. A key of another
-- type answers WRONGTYPE, as it came.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  return cur
end
if cur then
  local status, lease, expires = parse(cur)
  if not status then
    return not_record(KEYS[1], cur)
  end
  local function live(t)
    return expires > t and (status == 'c' or lease > t)
  end
  local now = tonumber(ARGV[2])
  local present = live(now)
  if not present then
    local time = redis.call('TIME')
    local server = tonumber(time[1]) * 1000000 + tonumber(time[2])
    if server < now then
      present = live(server)
    end
  end
  if present then
    return cur
  end
end
-- The key lives for the record's time to live, counted on the server's
-- clock, so that a caller whose clock runs behind does not see it vanish.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
