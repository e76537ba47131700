-- take_wake.lua: a wake-up pass starts: takes the classes freed since the last pass, and the pending jobs
-- that capacity freed there could serve, in priority then arrival order. A token on wake:signal goes too
-- (one signalled after the waker took its own): this pass covers every class freed until now, and
-- capacity freed from here on signals another.
--
-- A pending job is picked when the pass is full (ARGV[1] is 1, or '*' was freed: a node joined or came
-- back, or a record was dropped; or wake:classes is not a set, taken as '*' and deleted), when
-- pending:for does not say what it waits for, when it waits for 'any' class, or when one of the classes
-- it waits for (comma-joined) was freed (each freed entry may be comma-joined too).
--
-- KEYS[1] wake:signal   KEYS[2] wake:classes   KEYS[3] pending   KEYS[4] pending:for
-- KEYS[5] pending:records
-- ARGV[1] 1 for a full pass, else 0
-- Returns {the freed classes, the picked job ids, their records}: each record as pending:records keeps it
-- beside pending:for, or false where it has none (a job made pending by a modelplan without it; or
-- pending:records of another type): the caller reads those from their own keys, which the script may not
-- touch (a script touches no key it was not handed). A record kept there that is older than the job's own
-- costs a plan at most: the commit checks the version.

local BATCH = 1000 -- ids per HMGET: unpack takes a few thousand values at most

local full = ARGV[1] == '1'
-- wake:classes of another type (anyone who may write the prefix can) stands for every class freed
local classes = {'*'}
local kind = redis.call('TYPE', KEYS[2]).ok
if kind == 'set' or kind == 'none' then
  classes = redis.call('SMEMBERS', KEYS[2])
end
redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])

local freed = {}
for _, entry in ipairs(classes) do
  for class in string.gmatch(entry, '[^,]+') do
    freed[class] = true
  end
end
if freed['*'] then
  full = true
end

local function woken(waits_for)
  if full or not waits_for then
    return true
  end
  for class in string.gmatch(waits_for, '[^,]+') do
    if class == 'any' or freed[class] then
      return true
    end
  end
  return false
end

local ids = redis.call('ZRANGE', KEYS[3], 0, -1)
local picked = {}
for i = 1, #ids, BATCH do
  local fors = redis.call('HMGET', KEYS[4], unpack(ids, i, math.min(i + BATCH - 1, #ids)))
  for j = 1, #fors do
    local id = ids[i + j - 1]
    if woken(fors[j]) then
      picked[#picked + 1] = id
    end
  end
end

local records = {}
if redis.call('TYPE', KEYS[5]).ok == 'hash' then
  for i = 1, #picked, BATCH do
    local got = redis.call('HMGET', KEYS[5], unpack(picked, i, math.min(i + BATCH - 1, #picked)))
    for j = 1, #got do
      records[i + j - 1] = got[j]
    end
  end
else
  for i = 1, #picked do
    records[i] = false
  end
end
return {classes, picked, records}
