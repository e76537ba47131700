-- heartbeat.lua: stores nodes' heartbeats, each unless an older one of the same boot, and wakes waiting
-- jobs when they free capacity. One call takes a batch (a relay's rack, say), each node checked against its
-- own last heartbeat alone, in order, exactly as one call each would.
--
-- KEYS[1] nodes   KEYS[2] epoch   KEYS[3] wake:signal   KEYS[4] wake:classes   KEYS[5] pool:changes
-- KEYS[6] pending:classes
--
-- ARGV[1] node TTL, ms   ARGV[2] pool:changes MAXLEN   ARGV[3] what every node:{id} key starts with
-- ARGV[4] what every held:{id} key starts with
-- then for each node (2): node id, its record's JSON (``NodeRecord`` as modelplan writes it)
--
-- A node's score in nodes is when its heartbeat lapses, by the server's clock (as its key's TTL runs), so
-- that the sweep finds the lapsed nodes from the lowest scores rather than asking the whole index.
--
-- A stored heartbeat goes onto pool:changes with its TTL, for the workers' mirrors of the pool: the
-- record itself where it changes what a plan reads. A refresh (the same figures, a later seq) changes
-- only when the node's heartbeat lapses: the call's refreshes go on as one entry, the nodes' ids
-- space-separated with the TTL, so that a worker reads and parses one entry for a rack's refreshes.
--
-- Most heartbeats are refreshes, so a refresh is told from the text alone, without decoding it, in the
-- layout modelplan writes: everything a plan reads, then the seq, then the schema version and when it
-- arrived, last (see cut). A record in any other layout (an older version's, one written by hand) is
-- decoded and stored as a change: the same outcome, with its record on the stream.
--
-- Capacity freed bumps the epoch (a plan made before it must not commit a wait); it signals a wake-up
-- pass (a token on wake:signal, which a worker's waker takes) only for a class that some pending job
-- waits on (pending:classes), or for a node that joined or came back, which may change any job's best
-- option.
--
-- Returns {wake, then for each node: code, restarted}: wake 1 when this call signalled a wake-up pass;
-- code "ok", "stale" (an older heartbeat: nothing changed) or "bad" (a record that does not decode:
-- nothing stored); restarted 1 when the node came back with a new boot, or came back after its heartbeat
-- lapsed, while jobs hold reservations on it: the caller has those checked.

local ttl, maxlen, node_prefix, held_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- A record in modelplan's layout is {<view>,"seq":N,"schema_version":1,"received_at":"<time>"}: its view
-- is everything but the seq and the time (what a plan reads, and the boot). No value in a record holds a
-- quote (ids, hold ids, figures), so the first ,"seq": is the key.
local REST = '^,"seq":(%d+),"schema_version":1,"received_at":"[^"]*"}$'

-- the seq of a record in modelplan's layout whose view is the text before k, else nil
local function seq_after(raw, k)
  return string.match(raw, REST, k)
end

local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local lapse = string.format('%d', now_ms + tonumber(ttl)) -- each node's score, made once for the call
local freed = {}
local refreshed = {}
local out = {0}

local function store(node_key, node_id, raw, refresh)
  redis.call('SET', node_key, raw, 'PX', ttl)
  redis.call('ZADD', KEYS[1], lapse, node_id)
  if refresh then
    refreshed[#refreshed + 1] = node_id
  else
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'n', node_id, 'r', raw, 't', ttl)
  end
end

-- a record decoded, or nil when it does not decode to one with the figures compared here
local function decoded(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' and type(rec.seq) == 'number' and type(rec.free_gpus) == 'number'
      and type(rec.host_free_gb) == 'number' then
    return rec
  end
  return nil
end

local function beat(node_id, raw)
  local node_key = node_prefix .. node_id
  local old_raw = redis.call('GET', node_key)
  if old_raw then
    -- a refresh: the same view (boot, figures and all) under a later seq frees nothing and restarts nothing
    local k = string.find(raw, ',"seq":', 1, true)
    local seq = k and seq_after(raw, k)
    if seq and string.sub(old_raw, k, k + 6) == ',"seq":' then
      local old_seq = seq_after(old_raw, k)
      if old_seq and string.find(old_raw, string.sub(raw, 1, k - 1), 1, true) == 1 then
        if tonumber(old_seq) >= tonumber(seq) then
          return 'stale', 0
        end
        store(node_key, node_id, raw, true)
        return 'ok', 0
      end
    end
  end
  local new = decoded(raw)
  if not new then
    return 'bad', 0
  end
  local class = type(new.gpu_class) == 'string' and new.gpu_class or ''
  local restarted = 0
  -- a stored heartbeat that does not decode is as good as none: this one replaces it
  local old = old_raw and decoded(old_raw)
  if old then
    if old.boot_id == new.boot_id then
      if old.seq >= new.seq then
        return 'stale', 0
      end
      if new.free_gpus > old.free_gpus and class ~= '' then
        freed[class] = true
      end
      if new.host_free_gb > old.host_free_gb then
        freed['cpu'] = true
      end
      if old.gpu_class ~= class and class ~= '' then
        freed[class] = true
      end
    else
      restarted = 1
    end
  elseif redis.call('HLEN', held_prefix .. node_id) > 0 then
    -- back after a lapse: which boot its reservations were made on is for the caller to check
    restarted = 1
  end
  if not old or restarted == 1 then
    -- a node joining (or back from a restart) may change any waiting job's best option: wake them all
    freed['*'] = true
  end
  store(node_key, node_id, raw, false)
  return 'ok', restarted
end

for a = 5, #ARGV, 2 do
  local code, restarted = beat(ARGV[a], ARGV[a + 1])
  out[#out + 1] = code
  out[#out + 1] = restarted
end

if #refreshed > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'ns', table.concat(refreshed, ' '), 't', ttl)
end

if next(freed) then
  redis.call('INCR', KEYS[2])
  local classes = {}
  -- each class on its own, so that a batch wakes for what its heartbeats one at a time would
  local anyone = redis.call('HEXISTS', KEYS[6], 'any') == 1
  for class in pairs(freed) do
    if class == '*' or anyone or redis.call('HEXISTS', KEYS[6], class) == 1 then
      classes[#classes + 1] = class
    end
  end
  if #classes > 0 then
    redis.call('SADD', KEYS[4], unpack(classes))
    -- one token waits at most: the pass it starts takes every class freed until then
    if redis.call('EXISTS', KEYS[3]) == 0 then
      redis.call('RPUSH', KEYS[3], '1')
      out[1] = 1
    end
  end
end
return out
