-- take_wake.lua: a wake-up pass starts: takes the classes freed since the last pass, and reads the pending
-- jobs with the classes each waits on. A token on wake:signal goes too (one signalled after the waker took
-- its own): this pass covers every class freed until now, and capacity freed from here on signals another.
--
-- KEYS[1] wake:signal   KEYS[2] wake:classes   KEYS[3] pending   KEYS[4] pending:for
-- Returns {the freed classes, the pending job ids in priority then arrival order, for each the classes it
-- waits on (nil where pending:for has none)}.

local BATCH = 1000 -- ids per HMGET: unpack takes a few thousand values at most

redis.call('DEL', KEYS[1])
local classes = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
local ids = redis.call('ZRANGE', KEYS[3], 0, -1)
local fors = {}
for i = 1, #ids, BATCH do
  local got = redis.call('HMGET', KEYS[4], unpack(ids, i, math.min(i + BATCH - 1, #ids)))
  for j = 1, #got do
    fors[#fors + 1] = got[j]
  end
end
return {classes, ids, fors}
