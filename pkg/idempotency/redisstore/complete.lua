-- Complete: store the response on the record at KEYS[1], fenced by the owner
-- token and the in-progress status.
--
-- KEYS[1]  the record's key
-- ARGV[1]  owner token                ARGV[4]  headers, then the origin
-- ARGV[2]  version, status ('c') and           when there is one, encoded
--          flags (3 bytes)            ARGV[5]  body (raw bytes)
-- ARGV[3]  lease (zero), expires at   ARGV[6]  key time to live (ms)
--          and status code (16 bytes)
--
-- Returns 1 when written, 0 when the caller no longer owns the record as in
-- progress (nothing is written). A key of another type answers WRONGTYPE.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  return cur
end
if not cur then
  return 0
end
local status, owner, last = head(cur)
if not status then
  return not_record(KEYS[1], cur)
end
if status ~= 'p' or owner ~= ARGV[1] then
  return 0
end
-- The completed record keeps the claim's created at, request hash and owner.
redis.call('SET', KEYS[1],
  ARGV[2] .. string.sub(cur, 4, 11) .. ARGV[3] .. string.sub(cur, 32, last) .. ARGV[4] .. ARGV[5],
  'PX', ARGV[6])
return 1
