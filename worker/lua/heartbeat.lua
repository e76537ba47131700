-- heartbeat.lua: stores nodes' heartbeats, each unless an older one of the same boot, and wakes waiting
-- jobs when they free capacity. One call takes a batch (a relay's rack, say), each node checked against its
-- own last heartbeat alone, in order, exactly as one call each would.
--
-- KEYS[1] nodes   KEYS[2] epoch   KEYS[3] wake:signal   KEYS[4] wake:classes   KEYS[5] pool:changes
-- KEYS[6] pending:classes   KEYS[7] conflicts   KEYS[8] stats   KEYS[9] restarts
-- then for each node (4), in the order of its heartbeat in ARGV: node:{id}, held:{id}, boots:{id},
-- conflict:{id}
--
-- ARGV[1] node TTL, ms   ARGV[2] pool:changes MAXLEN   ARGV[3] how long a boot is remembered once another
-- took its place, ms   ARGV[4] how long a conflict lasts past its last flip, ms   ARGV[5] the field of
-- stats that counts the heartbeats refused for a conflict   ARGV[6] the schema version of the records
-- modelplan writes
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
-- arrived, last (worker/layout.py: NODE_TAIL, SEQ_AT). A record in any other layout (an older version's,
-- one written by hand) is decoded and stored as a change: the same outcome, with its record on the stream.
--
-- Capacity freed bumps the epoch (a plan made before it must not commit a wait); it signals a wake-up
-- pass (a token on wake:signal, which a worker's waker takes) only for a class that some pending job
-- waits on (pending:classes), or for a node that joined or came back, which may change any job's best
-- option.
--
-- Two agents under one node id (a cloned machine image) take turns: each heartbeat carries the other's
-- boot. A restart puts its old boot out for good, so a boot that another took the place of is
-- remembered for a while (boots:{id}: when it was last heard, its last seq), and heard again with a later
-- seq it is a second agent, not a restart; with a seq no later than its last it is a heartbeat sent before
-- the restart that arrived late, and changes nothing. Then the node id is in conflict (conflict:{id}: the
-- boots heard, since when, how many times the boot changed; indexed in conflicts by when it clears): the
-- node leaves the pool (its record deleted, gone on pool:changes, its lapse in nodes moved to now, so that
-- the sweep hands its jobs on as for a node gone silent), and its heartbeats are refused and counted in
-- stats, none a restart. The conflict lasts until one boot alone has been heard for its time; the
-- heartbeat after that is a node joining.
--
-- Returns {wake, then for each node: code, restarted}: wake 1 when this call signalled a wake-up pass;
-- code "ok", "stale" (an older heartbeat: nothing changed), "bad" (a record that does not decode:
-- nothing stored) or "conflict" (two agents claim the node id: not stored); restarted 1 when the node
-- came back with a new boot, or came back after its heartbeat lapsed, while jobs hold reservations on it:
-- the caller has those checked; such a node also goes into restarts, which a worker's waker takes and has
-- checked, so that a caller that may not queue work (an agent's login) leaves no restart unchecked. {'wrongtype', key} when a key the call may write holds another type:
-- nothing written.

local ttl, maxlen, remember, clear = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local refused_field, schema = ARGV[5], ARGV[6]
local FIRST = 7 -- the first node's id in ARGV
local SHARED = 9 -- the keys before the first node's
if not remember or not clear then
  return redis.error_reply('heartbeat.lua: ARGV[3] and ARGV[4] are times in ms')
end
if (#ARGV - FIRST + 1) % 2 ~= 0 or #KEYS ~= SHARED + 2 * (#ARGV - FIRST + 1) then
  return redis.error_reply('heartbeat.lua: each node takes two arguments (id, record) and four keys')
end

-- A record in modelplan's layout is {<view>,"seq":N,"schema_version":V,"received_at":"<time>"}: its view
-- is everything but the seq and the time (what a plan reads, and the boot). No value in a record holds a
-- quote (ids, hold ids, figures), so the first ,"seq": is the key.
local REST = '^,"seq":(%d+),"schema_version":' .. schema .. ',"received_at":"[^"]*"}$'

-- the seq of a record in modelplan's layout whose view is the text before k, else nil
local function seq_after(raw, k)
  return string.match(raw, REST, k)
end

-- the keys every node's heartbeat may write hold their own type, or none: else nothing is written
local mistyped = wrong_type({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'list', KEYS[4], 'set', KEYS[5], 'stream',
                             KEYS[6], 'hash', KEYS[7], 'zset', KEYS[8], 'hash', KEYS[9], 'set'})
if mistyped then
  return {'wrongtype', mistyped}
end

local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local lapse = string.format('%d', now_ms + tonumber(ttl)) -- each node's score, made once for the call
local freed = {}
local refreshed = {}
local refused = 0
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
      and type(rec.host_free_gb) == 'number' and type(rec.boot_id) == 'string' then
    return rec
  end
  return nil
end

-- a whole number as JSON holds it: cjson writes 14 digits, and a seq may have 16
local function int(x)
  return string.format('%.0f', x)
end

-- the boots remembered on a node (boots:{id}) and heard within the window, each {boot id, when last
-- heard (ms), its last seq}, oldest first; what does not decode to that is forgotten
local function remembered(boots_key)
  local out = {}
  local ok, seen = pcall(cjson.decode, redis.call('GET', boots_key) or '{}')
  if not ok or type(seen) ~= 'table' then
    return out
  end
  for boot, b in pairs(seen) do
    if type(boot) == 'string' and type(b) == 'table' and type(b[1]) == 'number' and type(b[2]) == 'number'
        and b[1] > now_ms - remember then
      out[#out + 1] = {boot, b[1], b[2]}
    end
  end
  table.sort(out, function(x, y) return x[2] < y[2] or (x[2] == y[2] and x[1] < y[1]) end)
  return out
end

local function remember_boots(boots_key, boots)
  local parts = {}
  for _, b in ipairs(boots) do
    parts[#parts + 1] = cjson.encode(b[1]) .. ':[' .. int(b[2]) .. ',' .. int(b[3]) .. ']'
  end
  redis.call('SET', boots_key, '{' .. table.concat(parts, ',') .. '}', 'PX', remember)
end

-- a conflict record (conflict:{id}) as {boots = {{boot id, when last heard, last seq}...} in the order
-- first heard, flips, since, last boot}, or nil when it does not decode to one
local function conflict_of(raw)
  local ok, c = pcall(cjson.decode, raw)
  if not ok or type(c) ~= 'table' or type(c.boots) ~= 'table' or type(c.flips) ~= 'number'
      or type(c.since_ms) ~= 'number' or type(c.last_boot) ~= 'string' then
    return nil
  end
  local boots = {}
  for _, b in ipairs(c.boots) do
    if type(b) ~= 'table' or type(b.boot_id) ~= 'string' or type(b.heard_ms) ~= 'number'
        or type(b.seq) ~= 'number' then
      return nil
    end
    boots[#boots + 1] = {b.boot_id, b.heard_ms, b.seq}
  end
  return {boots = boots, flips = c.flips, since = c.since_ms, last = c.last_boot}
end

-- writes a node's conflict record (PX: a flip starts its time again; else KEEPTTL) and remembers its boots
local function put_conflict(node_id, conflict_key, boots_key, c, flipped)
  local boots = {}
  for _, b in ipairs(c.boots) do
    boots[#boots + 1] = '{"boot_id":' .. cjson.encode(b[1]) .. ',"heard_ms":' .. int(b[2]) .. ',"seq":'
      .. int(b[3]) .. '}'
  end
  local raw = '{"node_id":' .. cjson.encode(node_id) .. ',"boots":[' .. table.concat(boots, ',')
    .. '],"last_boot":' .. cjson.encode(c.last) .. ',"flips":' .. int(c.flips) .. ',"since_ms":'
    .. int(c.since) .. ',"last_heard_ms":' .. int(now_ms) .. ',"schema_version":' .. schema .. '}'
  if flipped then
    redis.call('SET', conflict_key, raw, 'PX', clear)
    redis.call('ZADD', KEYS[7], int(now_ms + clear), node_id)
  else
    redis.call('SET', conflict_key, raw, 'KEEPTTL')
  end
  remember_boots(boots_key, c.boots)
  refused = refused + 1
  return 'conflict', 0
end

-- a heartbeat of a node id in conflict: refused, its boot and seq noted
local function in_conflict(node_id, conflict_key, boots_key, raw, new)
  local c = conflict_of(raw) or {boots = {}, flips = 0, since = now_ms, last = new.boot_id}
  local heard = nil
  for _, b in ipairs(c.boots) do
    if b[1] == new.boot_id then
      heard = b
    end
  end
  if heard and heard[3] >= new.seq then
    return 'stale', 0
  end
  if heard then
    heard[2], heard[3] = now_ms, new.seq
  else
    c.boots[#c.boots + 1] = {new.boot_id, now_ms, new.seq}
  end
  local flipped = c.last ~= new.boot_id
  if flipped then
    c.flips, c.last = c.flips + 1, new.boot_id
  end
  return put_conflict(node_id, conflict_key, boots_key, c, flipped)
end

-- a boot heard again after another took its place (memory: remembered's): the node leaves the pool
local function begin_conflict(node_id, node_key, conflict_key, boots_key, memory, new, old)
  local boots = {}
  for _, b in ipairs(memory) do
    if b[1] == new.boot_id then
      boots[#boots + 1] = {b[1], now_ms, new.seq}
    elseif b[1] ~= old.boot_id then
      boots[#boots + 1] = b
    end
  end
  boots[#boots + 1] = {old.boot_id, now_ms, old.seq}
  redis.call('DEL', node_key)
  redis.call('ZADD', KEYS[1], int(now_ms), node_id)
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'n', node_id, 'gone', '1')
  for i = #refreshed, 1, -1 do -- stored earlier in this call: no longer
    if refreshed[i] == node_id then
      table.remove(refreshed, i)
    end
  end
  return put_conflict(node_id, conflict_key, boots_key, {boots = boots, flips = 1, since = now_ms, last = new.boot_id},
                      true)
end

-- one node's heartbeat, its keys node:{id}, held:{id}, boots:{id}, conflict:{id}
local function beat(node_id, raw, node_key, held_key, boots_key, conflict_key)
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
  if not old_raw then
    -- a node in conflict has no record: only then is there one to look for
    local conflict_raw = redis.call('GET', conflict_key)
    if conflict_raw then
      return in_conflict(node_id, conflict_key, boots_key, conflict_raw, new)
    end
  end
  local class = type(new.gpu_class) == 'string' and new.gpu_class or ''
  local restarted = 0
  local memory = nil
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
      memory = remembered(boots_key)
      for _, b in ipairs(memory) do
        if b[1] == new.boot_id then
          if b[3] >= new.seq then
            return 'stale', 0
          end
          return begin_conflict(node_id, node_key, conflict_key, boots_key, memory, new, old)
        end
      end
      restarted = 1
    end
  elseif redis.call('HLEN', held_key) > 0 then
    -- back after a lapse: which boot its reservations were made on is for the caller to check
    restarted = 1
  end
  if not old or restarted == 1 then
    -- a node joining (or back from a restart) may change any waiting job's best option: wake them all
    freed['*'] = true
  end
  if memory then
    -- the boot this one took the place of: heard again, it is a second agent
    local boots = {}
    for _, b in ipairs(memory) do
      if b[1] ~= old.boot_id then
        boots[#boots + 1] = b
      end
    end
    boots[#boots + 1] = {old.boot_id, now_ms, old.seq}
    remember_boots(boots_key, boots)
  end
  store(node_key, node_id, raw, false)
  if restarted == 1 and redis.call('HLEN', held_key) > 0 then
    -- for a worker to check, whoever called: the caller may not queue work (an agent's login may not)
    redis.call('SADD', KEYS[9], node_id)
  end
  return 'ok', restarted
end

for a = FIRST, #ARGV, 2 do
  local at = SHARED + 2 * (a - FIRST) -- the node's keys follow
  local code, restarted = beat(ARGV[a], ARGV[a + 1], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3], KEYS[at + 4])
  out[#out + 1] = code
  out[#out + 1] = restarted
end

if #refreshed > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'ns', table.concat(refreshed, ' '), 't', ttl)
end

if refused > 0 then
  redis.call('HINCRBY', KEYS[8], refused_field, refused)
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
