-- Renew: move the lease of the in-progress record at KEYS[1], fenced by the
-- owner token and the in-progress status (no clock is consulted).
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token                ARGV[3]  new lease (Unix µs, decimal)
-- ARGV[2]  new lease (Unix µs,        ARGV[4]  key time to live until the
--          8 bytes, as record.go)              new lease (ms)
--
-- The lease is overwritten in place (SETRANGE keeps the key's time to live);
-- when it reaches past the record's expires at, expires at follows, and the
-- key's time to live is raised to cover it (PEXPIRE GT never shortens it).
--
-- Returns 1 when renewed, 0 when the caller no longer owns the record as in
-- progress (nothing is written). A key of another type answers WRONGTYPE.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  return cur
end
if not cur then
  return 0
end
local status, _, expires, owner = parse(cur)
if not status then
  return not_record(KEYS[1], cur)
end
if status ~= 'p' or owner ~= ARGV[1] then
  return 0
end
redis.call('SETRANGE', KEYS[1], 11, ARGV[2])
if tonumber(ARGV[3]) > expires then
  redis.call('SETRANGE', KEYS[1], 19, ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4], 'GT')
return 1
