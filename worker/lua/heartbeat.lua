-- heartbeat.lua: stores a node's heartbeat unless an older one of the same boot, and wakes waiting
-- jobs when it frees capacity.
--
-- KEYS[1] node:{id}   KEYS[2] nodes   KEYS[3] epoch   KEYS[4] wake   KEYS[5] wake:classes
-- KEYS[6] held:{id}    KEYS[7] pool:changes
--
-- ARGV[1] node id      ARGV[4] boot id             ARGV[7] the node's card class ("" for none)
-- ARGV[2] record JSON  ARGV[5] node TTL, ms         ARGV[8] free cards    ARGV[9] free host GiB
-- ARGV[3] seq          ARGV[6] wake flag TTL, ms    ARGV[10] pool:changes MAXLEN
--
-- The node's score in nodes is when this heartbeat lapses, by the server's clock (as its key's TTL runs),
-- so that the sweep finds the lapsed nodes from the lowest scores rather than asking the whole index.
--
-- A stored heartbeat goes onto pool:changes with its TTL, for the workers' mirrors of the pool: the
-- record itself where it changes what a plan reads, only its TTL where it is a refresh (the same figures,
-- a later seq), so that a worker does not parse every refresh of every node.
--
-- Returns {code, wake, restarted}: code "ok" or "stale" (an older heartbeat: nothing changed); wake 1
-- when the caller queues a wake-up pass; restarted 1 when the node came back with a new boot, or came
-- back after its heartbeat lapsed, while jobs hold reservations on it: the caller has those checked.

-- What a plan reads of a stored heartbeat: all of it but its seq and when it arrived. Read from the
-- layout modelplan writes; a record laid out otherwise never compares equal, and goes on whole.
local function plan_view(raw)
  local view = string.gsub(raw, '"seq":%d+,', '', 1)
  return (string.gsub(view, ',"received_at":"[^"]*"', '', 1))
end

local old_raw = redis.call('GET', KEYS[1])
local freed = {}
local restarted = 0
local old
if old_raw then
  -- a stored heartbeat that does not decode is as good as none: this one replaces it
  local ok, decoded = pcall(cjson.decode, old_raw)
  if ok and type(decoded) == 'table' and type(decoded.seq) == 'number' and type(decoded.free_gpus) == 'number'
      and type(decoded.host_free_gb) == 'number' then
    old = decoded
  else
    old_raw = false
  end
end
if old_raw then
  if old.boot_id == ARGV[4] then
    if tonumber(old.seq) >= tonumber(ARGV[3]) then
      return {'stale', 0, 0}
    end
    if tonumber(ARGV[8]) > tonumber(old.free_gpus) and ARGV[7] ~= '' then
      freed[#freed + 1] = ARGV[7]
    end
    if tonumber(ARGV[9]) > tonumber(old.host_free_gb) then
      freed[#freed + 1] = 'cpu'
    end
    if old.gpu_class ~= ARGV[7] and ARGV[7] ~= '' then
      freed[#freed + 1] = ARGV[7]
    end
  else
    restarted = 1
  end
end
if not old_raw and redis.call('HLEN', KEYS[6]) > 0 then
  -- back after a lapse: which boot its reservations were made on is for the caller to check
  restarted = 1
end
if not old_raw or restarted == 1 then
  -- a node joining (or back from a restart) may change any waiting job's best option: wake them all
  freed[#freed + 1] = '*'
end

local now = redis.call('TIME')
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[5])
redis.call('ZADD', KEYS[2], now[1] * 1000 + math.floor(now[2] / 1000) + tonumber(ARGV[5]), ARGV[1])
if old_raw and restarted == 0 and plan_view(old_raw) == plan_view(ARGV[2]) then
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[10], '*', 'n', ARGV[1], 't', ARGV[5])
else
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[10], '*', 'n', ARGV[1], 'r', ARGV[2], 't', ARGV[5])
end

local wake = 0
if #freed > 0 then
  redis.call('INCR', KEYS[3])
  redis.call('SADD', KEYS[5], unpack(freed))
  if redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[6]) then
    wake = 1
  end
end
return {'ok', wake, restarted}
