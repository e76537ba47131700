-- recount_pending.lua: counts pending:classes anew from pending:for, in one step (the maintenance sweep,
-- now and then: a count that went wrong, or one that a version of modelplan without it never kept, is
-- right again); and drops from pending:records any job pending:for does not hold (a record a version of
-- modelplan without pending:records left behind, or one hand-written there).
--
-- KEYS[1] pending:for   KEYS[2] pending:classes   KEYS[3] pending:records
-- Returns the number of pending jobs counted.

redis.call('DEL', KEYS[2])
local entries = redis.call('HGETALL', KEYS[1])
for i = 2, #entries, 2 do
  count_pending(KEYS[2], entries[i], 1)
end
-- pending:records only saves a round trip: one of another type is dropped (a pass reads the records)
if redis.call('TYPE', KEYS[3]).ok ~= 'hash' then
  redis.call('DEL', KEYS[3])
else
  for _, job_id in ipairs(redis.call('HKEYS', KEYS[3])) do
    if redis.call('HEXISTS', KEYS[1], job_id) == 0 then
      redis.call('HDEL', KEYS[3], job_id)
    end
  end
end
return #entries / 2
