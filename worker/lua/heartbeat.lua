-- heartbeat.lua: stores nodes' heartbeats, each unless an older one of the same boot. One call takes a
-- batch (a relay's rack, say), each node checked against its own last heartbeat alone, in order, exactly as
-- one call each would. It runs with its caller's rights (a node agent's, a relay's), so it writes only the
-- keys of the nodes it is handed, nothing any other node or a worker reads as shared: what a stored
-- heartbeat means to the pool (the change feed, the index of nodes, the epoch, wake-ups, restarts, the
-- conflicts index, counters) is written by a worker's intake (intake.lua), rung by the server's own
-- keyspace notification of the node's key (docs/WORKERS.md).
--
-- for each node (5), in the order of its heartbeat in ARGV: node:{id}, held:{id} (read only), boots:{id},
-- conflict:{id}, beat:{id}
--
-- ARGV[1] node TTL, ms   ARGV[2] how long a boot is remembered once another took its place, ms
-- ARGV[3] how long a conflict lasts past its last flip, ms   ARGV[4] the schema version of the records
-- modelplan writes   ARGV[5] the longest value of a node's own keys kept, bytes
-- then for each node (2): node id, its record's JSON (``NodeRecord`` as modelplan writes it)
--
-- A heartbeat that changes the node's view (what a plan reads, or its boot) replaces node:{id} (SET: the
-- one write a worker's intake is rung for). A refresh (the same view, a later seq) only moves the TTL of
-- node:{id} (PEXPIRE, of which no notification is asked for) and keeps its seq in beat:{id} (a hash,
-- likewise unannounced), so that an older heartbeat is still told by its seq: the last seq of a node is
-- the larger of its record's and beat:{id}'s.
--
-- Most heartbeats are refreshes, so a refresh is told from the text alone, without decoding it, in the
-- layout modelplan writes: everything a plan reads, then the seq, then the schema version and when it
-- arrived, last (worker/layout.py: NODE_TAIL, SEQ_AT). A record in any other layout (an older version's,
-- one written by hand) is decoded and stored as a change.
--
-- Two agents under one node id (a cloned machine image) take turns: each heartbeat carries the other's
-- boot. A restart puts its old boot out for good, so a boot that another took the place of is
-- remembered for a while (boots:{id}: when it was last heard, its last seq), and heard again with a later
-- seq it is a second agent, not a restart; with a seq no later than its last it is a heartbeat sent before
-- the restart that arrived late, and changes nothing. Then the node id is in conflict (conflict:{id}: the
-- boots heard, since when, how many times the boot changed, how many heartbeats were refused): the node's
-- record is deleted (the intake, rung by the conflict's record, takes the node out of the pool and indexes
-- the conflict), and its heartbeats are refused, none a restart. The conflict lasts until one boot alone
-- has been heard for its time; the heartbeat after that is a node joining.
--
-- Returns {0, then for each node: code, restarted, changed}: code "ok", "stale" (an older heartbeat:
-- nothing changed), "bad" (a record that does not decode: nothing stored) or "conflict" (two agents claim
-- the node id: not stored); restarted 1 when the node came back with a new boot, or came back after its
-- heartbeat lapsed, while jobs hold reservations on it (the intake has those checked, whoever called);
-- changed 1 when node:{id} or conflict:{id} was written (the intake has something to take). The first
-- element is kept for the reply's shape: whether a wake-up pass is signalled is the intake's to say.

local ttl, remember, clear, schema = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local max_bytes = tonumber(ARGV[5])
local FIRST = 6 -- the first node's id in ARGV
local PER = 5 -- the keys of each node
if not tonumber(ttl) or not remember or not clear then
  return redis.error_reply('heartbeat.lua: ARGV[1] to ARGV[3] are times in ms')
end
if not max_bytes then
  return redis.error_reply('heartbeat.lua: ARGV[5] is the longest value of a node kept, in bytes')
end
if (#ARGV - FIRST + 1) % 2 ~= 0 or #KEYS ~= PER * (#ARGV - FIRST + 1) / 2 then
  return redis.error_reply('heartbeat.lua: each node takes two arguments (id, record) and five keys')
end

-- A record in modelplan's layout is {<view>,"seq":N,"schema_version":V,"received_at":"<time>"}: its view
-- is everything but the seq and the time (what a plan reads, and the boot). No value in a record holds a
-- quote (ids, hold ids, figures), so the first ,"seq": is the key.
local REST = '^,"seq":(%d+),"schema_version":' .. schema .. ',"received_at":"[^"]*"}$'

-- the seq of a record in modelplan's layout whose view is the text before k, else nil
local function seq_after(raw, k)
  return string.match(raw, REST, k)
end

local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local out = {0}

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

-- the node's own keys hold their own type and size, or are not there: one that does not (written by hand,
-- or by the node's own login) is the node's to lose, deleted before anything is written. A string is at
-- most max_bytes (as the intake takes a record); beat:{id} holds its one field, seq, a number.
local function own_types(node_key, boots_key, conflict_key, beat_key)
  local spec = {node_key, 'string', boots_key, 'string', conflict_key, 'string', beat_key, 'hash'}
  for i = 1, #spec, 2 do
    local key, want = spec[i], spec[i + 1]
    local found = redis.call('TYPE', key)
    if type(found) == 'table' then
      found = found['ok']
    end
    if found ~= 'none' and (found ~= want
        or (want == 'string' and redis.call('STRLEN', key) > max_bytes)
        or (want == 'hash' and (redis.call('HLEN', key) > 1 or redis.call('HSTRLEN', key, 'seq') > 20))) then
      redis.call('DEL', key)
    end
  end
end

-- the last seq heard of a node's stored boot: its record's, or a later refresh's (beat:{id})
local function last_seq(record_seq, beat_key)
  local refreshed = tonumber(redis.call('HGET', beat_key, 'seq'))
  if refreshed and refreshed > record_seq then
    return refreshed
  end
  return record_seq
end

-- the boots remembered on a node (boots:{id}) and heard within the window, each {boot id, when last
-- heard (ms), its last seq}, oldest first; what does not decode to that is forgotten
local function remembered(boots_key)
  local found = {}
  local ok, seen = pcall(cjson.decode, redis.call('GET', boots_key) or '{}')
  if not ok or type(seen) ~= 'table' then
    return found
  end
  for boot, b in pairs(seen) do
    if type(boot) == 'string' and type(b) == 'table' and type(b[1]) == 'number' and type(b[2]) == 'number'
        and b[1] > now_ms - remember then
      found[#found + 1] = {boot, b[1], b[2]}
    end
  end
  table.sort(found, function(x, y) return x[2] < y[2] or (x[2] == y[2] and x[1] < y[1]) end)
  return found
end

local function remember_boots(boots_key, boots)
  local parts = {}
  for _, b in ipairs(boots) do
    parts[#parts + 1] = cjson.encode(b[1]) .. ':[' .. int(b[2]) .. ',' .. int(b[3]) .. ']'
  end
  redis.call('SET', boots_key, '{' .. table.concat(parts, ',') .. '}', 'PX', remember)
end

-- a conflict record (conflict:{id}) as {boots = {{boot id, when last heard, last seq}...} in the order
-- first heard, flips, since, last boot, refused}, or nil when it does not decode to one
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
  local refused = type(c.refused) == 'number' and c.refused or 0
  return {boots = boots, flips = c.flips, since = c.since_ms, last = c.last_boot, refused = refused}
end

-- writes a node's conflict record (PX: a flip starts its time again; else KEEPTTL), one more heartbeat
-- refused counted in it, and remembers its boots
local function put_conflict(node_id, conflict_key, boots_key, c, flipped)
  local boots = {}
  for _, b in ipairs(c.boots) do
    boots[#boots + 1] = '{"boot_id":' .. cjson.encode(b[1]) .. ',"heard_ms":' .. int(b[2]) .. ',"seq":'
      .. int(b[3]) .. '}'
  end
  local raw = '{"node_id":' .. cjson.encode(node_id) .. ',"boots":[' .. table.concat(boots, ',')
    .. '],"last_boot":' .. cjson.encode(c.last) .. ',"flips":' .. int(c.flips) .. ',"since_ms":'
    .. int(c.since) .. ',"last_heard_ms":' .. int(now_ms) .. ',"refused":' .. int(c.refused + 1)
    .. ',"schema_version":' .. schema .. '}'
  if flipped or redis.call('PTTL', conflict_key) < 0 then
    redis.call('SET', conflict_key, raw, 'PX', clear)
  else
    redis.call('SET', conflict_key, raw, 'KEEPTTL')
  end
  remember_boots(boots_key, c.boots)
  return 'conflict', 0, 1
end

-- a heartbeat of a node id in conflict: refused, its boot and seq noted
local function in_conflict(node_id, conflict_key, boots_key, raw, new)
  local c = conflict_of(raw) or {boots = {}, flips = 0, since = now_ms, last = new.boot_id, refused = 0}
  local heard = nil
  for _, b in ipairs(c.boots) do
    if b[1] == new.boot_id then
      heard = b
    end
  end
  if heard and heard[3] >= new.seq then
    return 'stale', 0, 0
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
local function begin_conflict(node_id, node_key, conflict_key, boots_key, beat_key, memory, new, old, old_seq)
  local boots = {}
  for _, b in ipairs(memory) do
    if b[1] == new.boot_id then
      boots[#boots + 1] = {b[1], now_ms, new.seq}
    elseif b[1] ~= old.boot_id then
      boots[#boots + 1] = b
    end
  end
  boots[#boots + 1] = {old.boot_id, now_ms, old_seq}
  redis.call('DEL', node_key, beat_key)
  local c = {boots = boots, flips = 1, since = now_ms, last = new.boot_id, refused = 0}
  return put_conflict(node_id, conflict_key, boots_key, c, true)
end

-- one node's heartbeat, its keys node:{id}, held:{id}, boots:{id}, conflict:{id}, beat:{id}: code,
-- restarted, changed
local function beat(node_id, raw, node_key, held_key, boots_key, conflict_key, beat_key)
  own_types(node_key, boots_key, conflict_key, beat_key)
  local old_raw = redis.call('GET', node_key)
  if old_raw then
    -- a refresh: the same view (boot, figures and all) under a later seq frees nothing and restarts nothing
    local k = string.find(raw, ',"seq":', 1, true)
    local seq = k and seq_after(raw, k)
    if seq and string.sub(old_raw, k, k + 6) == ',"seq":' then
      local old_seq = seq_after(old_raw, k)
      if old_seq and string.find(old_raw, string.sub(raw, 1, k - 1), 1, true) == 1 then
        if last_seq(tonumber(old_seq), beat_key) >= tonumber(seq) then
          return 'stale', 0, 0
        end
        redis.call('PEXPIRE', node_key, ttl)
        redis.call('HSET', beat_key, 'seq', seq)
        redis.call('PEXPIRE', beat_key, ttl)
        return 'ok', 0, 0
      end
    end
  end
  local new = decoded(raw)
  if not new then
    return 'bad', 0, 0
  end
  if not old_raw then
    -- a node in conflict has no record: only then is there one to look for
    local conflict_raw = redis.call('GET', conflict_key)
    if conflict_raw then
      return in_conflict(node_id, conflict_key, boots_key, conflict_raw, new)
    end
  end
  local restarted = 0
  local memory = nil
  -- a stored heartbeat that does not decode is as good as none: this one replaces it
  local old = old_raw and decoded(old_raw)
  local old_seq = old and last_seq(old.seq, beat_key)
  if old then
    if old.boot_id == new.boot_id then
      if old_seq >= new.seq then
        return 'stale', 0, 0
      end
    else
      memory = remembered(boots_key)
      for _, b in ipairs(memory) do
        if b[1] == new.boot_id then
          if b[3] >= new.seq then
            return 'stale', 0, 0
          end
          return begin_conflict(node_id, node_key, conflict_key, boots_key, beat_key, memory, new, old, old_seq)
        end
      end
      restarted = 1
    end
  elseif redis.call('HLEN', held_key) > 0 then
    -- back after a lapse: which boot its reservations were made on is for the caller to check
    restarted = 1
  end
  if memory then
    -- the boot this one took the place of: heard again, it is a second agent
    local boots = {}
    for _, b in ipairs(memory) do
      if b[1] ~= old.boot_id then
        boots[#boots + 1] = b
      end
    end
    boots[#boots + 1] = {old.boot_id, now_ms, old_seq}
    remember_boots(boots_key, boots)
  end
  redis.call('SET', node_key, raw, 'PX', ttl)
  redis.call('DEL', beat_key)
  return 'ok', restarted, 1
end

for a = FIRST, #ARGV, 2 do
  local at = PER * (a - FIRST) / 2 -- the node's keys
  local code, restarted, changed = beat(ARGV[a], ARGV[a + 1], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3],
                                        KEYS[at + 4], KEYS[at + 5])
  out[#out + 1] = code
  out[#out + 1] = restarted
  out[#out + 1] = changed
end
return out
