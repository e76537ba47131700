-- signal_pass.lua: signals a wake-up pass as the scripts that free capacity do (transition.lua's
-- wake_for): a token on wake:signal unless a key is there already, one token at most; and for a pass over
-- every pending job, '*' on wake:classes. Either key of another type (anyone who may write the prefix
-- can) is put right first: a wake:signal that is not a list counts as a token and is replaced by one, a
-- wake:classes that is not a set stands for every class freed and is replaced by '*'.
--
-- KEYS[1] wake:signal   KEYS[2] wake:classes
-- ARGV[1] 1 for a pass over every pending job, else 0
--
-- Returns {pushed, repaired}: pushed 1 when it pushed a token, repaired how many keys it put right.

local full = ARGV[1] == '1'
local repaired = 0
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'set' and kind ~= 'none' then
  redis.call('DEL', KEYS[2])
  full = true
  repaired = repaired + 1
end
kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'list' and kind ~= 'none' then
  redis.call('DEL', KEYS[1])
  repaired = repaired + 1
end
if full then
  redis.call('SADD', KEYS[2], '*')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RPUSH', KEYS[1], '1')
  return {1, repaired}
end
return {0, repaired}
