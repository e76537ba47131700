-- heartbeat.lua: stores nodes' heartbeats, each unless an older one of the same boot, and wakes waiting
-- jobs when they free capacity. One call takes a batch (a relay's rack, say), each node checked against its
-- own last heartbeat alone, in order, exactly as one call each would.
--
-- KEYS[1] nodes   KEYS[2] epoch   KEYS[3] wake:signal   KEYS[4] wake:classes   KEYS[5] pool:changes
-- KEYS[6] pending:classes
-- then for each node: node:{id}, held:{id}
--
-- ARGV[1] node TTL, ms   ARGV[2] pool:changes MAXLEN
-- then for each node (7): node id, record JSON, seq, boot id, card class ("" for none), free cards,
-- free host GiB
--
-- A node's score in nodes is when its heartbeat lapses, by the server's clock (as its key's TTL runs), so
-- that the sweep finds the lapsed nodes from the lowest scores rather than asking the whole index.
--
-- A stored heartbeat goes onto pool:changes with its TTL, for the workers' mirrors of the pool: the
-- record itself where it changes what a plan reads. A refresh (the same figures, a later seq) changes
-- only when the node's heartbeat lapses: the call's refreshes go on as one entry, the nodes' ids
-- space-separated with the TTL, so that a worker reads and parses one entry for a rack's refreshes. A
-- refresh is told from the stored text alone, without decoding it: most heartbeats are refreshes.
--
-- Capacity freed bumps the epoch (a plan made before it must not commit a wait); it signals a wake-up
-- pass (a token on wake:signal, which a worker's waker takes) only for a class that some pending job
-- waits on (pending:classes), or for a node that joined or came back, which may change any job's best
-- option.
--
-- Returns {wake, then for each node: code, restarted}: wake 1 when this call signalled a wake-up pass;
-- code "ok" or "stale" (an older heartbeat: nothing changed); restarted 1 when the node came back with a
-- new boot, or came back after its heartbeat lapsed, while jobs hold reservations on it: the caller has
-- those checked.

local ttl, maxlen = ARGV[1], ARGV[2]

-- What a plan reads of a stored heartbeat: all of it but its seq and when it arrived, as the text before
-- the seq, between it and received_at, and after that. Read from the layout modelplan writes, with plain
-- searches (a pattern tried at each position cost twice as much, and most heartbeats are refreshes); a
-- record laid out otherwise keeps what it was not cut at in its parts, so that it never compares equal
-- by mistake, and goes on whole.
local function view_parts(raw)
  local s, e = string.find(raw, '"seq":', 1, true), nil
  if s then
    e = select(2, string.find(raw, '^%d+,', s + 6))
  end
  if not e then
    s, e = 1, 0
  end
  local r = string.find(raw, ',"received_at":"', e + 1, true)
  local q = r and string.find(raw, '"', r + 16, true)
  if not q then
    r, q = #raw + 1, #raw
  end
  return string.sub(raw, 1, s - 1), string.sub(raw, e + 1, r - 1), string.sub(raw, q + 1)
end

local function same_view(a, b)
  local a1, a2, a3 = view_parts(a)
  local b1, b2, b3 = view_parts(b)
  return a1 == b1 and a2 == b2 and a3 == b3
end

local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local freed = {}
local refreshed = {}
local out = {0}

local function store(node_key, node_id, raw, refresh)
  redis.call('SET', node_key, raw, 'PX', ttl)
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ttl), node_id)
  if refresh then
    refreshed[#refreshed + 1] = node_id
  else
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'n', node_id, 'r', raw, 't', ttl)
  end
end

local function beat(node_key, held_key, node_id, raw, seq, boot_id, class, free_gpus, free_host)
  local old_raw = redis.call('GET', node_key)
  if old_raw then
    -- a refresh: the same view (boot, figures and all) under a later seq frees nothing and restarts nothing
    local old_seq = string.match(old_raw, '"seq":(%d+),')
    if old_seq and same_view(old_raw, raw) then
      if tonumber(old_seq) >= tonumber(seq) then
        return 'stale', 0
      end
      store(node_key, node_id, raw, true)
      return 'ok', 0
    end
  end
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
    if old.boot_id == boot_id then
      if tonumber(old.seq) >= tonumber(seq) then
        return 'stale', 0
      end
      if tonumber(free_gpus) > tonumber(old.free_gpus) and class ~= '' then
        freed[class] = true
      end
      if tonumber(free_host) > tonumber(old.host_free_gb) then
        freed['cpu'] = true
      end
      if old.gpu_class ~= class and class ~= '' then
        freed[class] = true
      end
    else
      restarted = 1
    end
  end
  if not old_raw and redis.call('HLEN', held_key) > 0 then
    -- back after a lapse: which boot its reservations were made on is for the caller to check
    restarted = 1
  end
  if not old_raw or restarted == 1 then
    -- a node joining (or back from a restart) may change any waiting job's best option: wake them all
    freed['*'] = true
  end
  store(node_key, node_id, raw, old_raw and restarted == 0 and same_view(old_raw, raw))
  return 'ok', restarted
end

for i = 0, (#ARGV - 2) / 7 - 1 do
  local a = 3 + 7 * i
  local code, restarted = beat(KEYS[7 + 2 * i], KEYS[8 + 2 * i], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
                               ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
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
