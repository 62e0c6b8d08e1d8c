-- Release: delete the record at KEYS[1], fenced by the owner token (ARGV[1])
-- and the in-progress status.
--
-- Returns 1 when deleted, 0 when the caller no longer owns the record as in
-- progress (nothing is deleted). A key of another type answers WRONGTYPE.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  return cur
end
if not cur then
  return 0
end
local status, owner = head(cur)
if not status then
  return not_record(KEYS[1], cur)
end
if status ~= 'p' or owner ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
