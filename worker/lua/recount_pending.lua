-- recount_pending.lua: counts pending:classes anew from pending:for, in one step (the maintenance sweep,
-- now and then: a count that went wrong, or one that a version of modelplan without it never kept, is
-- right again).
--
-- KEYS[1] pending:for   KEYS[2] pending:classes
-- Returns the number of pending jobs counted.

redis.call('DEL', KEYS[2])
local entries = redis.call('HGETALL', KEYS[1])
for i = 2, #entries, 2 do
  count_pending(KEYS[2], entries[i], 1)
end
return #entries / 2
