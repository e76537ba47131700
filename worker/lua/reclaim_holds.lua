-- reclaim_holds.lua: clears holds that no job owns, found so by the sweep (worker.orphans), each only if
-- it and its job's record are still exactly as the sweep judged them (their SHA-1s): a hold rewritten, or a
-- job whose record changed since (a commit that came in between), is left for the next sweep to judge
-- again. As transition.lua clears a hold: off held:{node} (and the node off holding once it holds
-- nothing), onto pool:changes for the workers' mirrors, and capacity freed: epoch bumped, a full pass
-- signalled ('*' on wake:classes, a token on wake:signal unless a key is there already).
--
-- KEYS[1] epoch   KEYS[2] wake:signal   KEYS[3] wake:classes   KEYS[4] holding   KEYS[5] pool:changes
-- KEYS[6..] for each hold: held:{node}, job:{job}
--
-- ARGV[1] pool:changes MAXLEN   ARGV[2] holds (n)
-- ARGV[3..] n x (node id, hold id, SHA-1 of the hold's value, SHA-1 of the job's record or '' for none)
--
-- Returns {holds cleared, wake}: wake 1 when it pushed a token. A shared key of the wrong type is
-- {'wrongtype', its key}: nothing written.

local n = tonumber(ARGV[2])
local kinds = {[1] = {string = true}, [3] = {set = true}, [4] = {set = true}, [5] = {stream = true}}
for i, allowed in pairs(kinds) do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and not allowed[kind] then
    return {'wrongtype', KEYS[i]}
  end
end

-- every check before the first write
local clear = {}
for i = 1, n do
  local at = 3 + 4 * (i - 1)
  local value = redis.pcall('HGET', KEYS[4 + 2 * i], ARGV[at + 1])
  local record = redis.pcall('GET', KEYS[5 + 2 * i])
  if type(value) == 'string' and redis.sha1hex(value) == ARGV[at + 2] and type(record) ~= 'table' then
    local sum = record and redis.sha1hex(record) or ''
    if sum == ARGV[at + 3] then
      clear[#clear + 1] = i
    end
  end
end

if #clear > 0 then
  repair_epoch(KEYS[1]) -- key_types.lua: before the first write
  repair_stream(KEYS[5])
end
for _, i in ipairs(clear) do
  local at = 3 + 4 * (i - 1)
  local held_key = KEYS[4 + 2 * i]
  redis.call('HDEL', held_key, ARGV[at + 1])
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[1], '*', 'n', ARGV[at], 'h', ARGV[at + 1], 'v', '')
  if redis.call('HLEN', held_key) == 0 then
    redis.call('SREM', KEYS[4], ARGV[at])
  end
end
local wake = 0
if #clear > 0 then
  wake = wake_all(KEYS[1], KEYS[2], KEYS[3])
end
return {#clear, wake}
