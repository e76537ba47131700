-- intake.lua: a worker takes what nodes' own keys say into the state workers and the fleet share. Node
-- agents and relays write only their nodes' keys (heartbeat.lua, run with their rights); this runs with a
-- worker's, rung by the server's keyspace notification of a node's record or conflict record being set or
-- expiring (worker/intake.py), or by a full reconcile. It does what a stored heartbeat means to the pool:
-- the change feed, the index of nodes, the epoch and wake-ups for capacity freed, restarts to check, the
-- conflicts index and the count of heartbeats refused for a conflict.
--
-- KEYS[1] nodes   KEYS[2] epoch   KEYS[3] wake:signal   KEYS[4] wake:classes   KEYS[5] pool:changes
-- KEYS[6] pending:classes   KEYS[7] conflicts   KEYS[8] stats   KEYS[9] restarts   KEYS[10] taken
-- then for each node (3), in the order of ARGV: node:{id}, held:{id}, conflict:{id}
--
-- ARGV[1] pool:changes MAXLEN   ARGV[2] the longest node record taken, bytes   ARGV[3] the field of stats
-- that counts heartbeats refused for a conflict   ARGV[4] the most of those one record may add at a time
-- ARGV[5] the field of stats that counts node records dropped (too long, or of another type)
-- then the nodes' ids
--
-- What was taken of each node is the workers' own (taken: node id -> JSON [SHA-1 of its record, boot, free
-- cards, free host GiB, class, heartbeats refused as last counted]), so that the same record taken again,
-- by several workers rung for one change, does nothing: the work is done once. A record of the node's
-- login is trusted for nothing but its own node: too long, or of another type, it is deleted (counted in
-- stats) and the node is gone; one that does not decode goes onto the feed like any other change, and
-- the workers' mirrors leave it out (quarantine).
--
-- The feed's entry for a changed record names the node and carries its record's SHA-1 and TTL (n, r, t):
-- a mirror reads the record from the node's key, never from the feed. A node whose record is gone (it
-- lapsed, was dropped, or its id went into conflict) gets a gone entry, and its lapse in nodes moved to now
-- at the latest, so that the sweep hands its jobs on. Capacity freed (more free cards or host memory, a
-- class changed, a node joining or back) bumps the epoch and signals a wake-up pass for a class some
-- pending job waits on (pending:classes), or for every job when a node joined or came back. A node back
-- with a new boot, or after its record was gone, while jobs hold reservations on it, goes into restarts.
--
-- Every shared key is checked before the first write, and one of another type (or an epoch that is no
-- integer, a feed past any time) is put right and counted, never a reason to stop half-way.
--
-- Returns {wake, changes written, keys put right}.

local maxlen, max_bytes = ARGV[1], tonumber(ARGV[2])
local refused_field, refused_max, dropped_field = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local FIRST = 6 -- the first node's id in ARGV
local SHARED = 10
if not max_bytes or not refused_max or #KEYS ~= SHARED + 3 * (#ARGV - FIRST + 1) then
  return redis.error_reply('intake.lua: each node takes one argument (its id) and three keys')
end

-- the shared keys hold their own type, or none: one that does not is rebuilt by what comes next (each is a
-- hint, an index or a count of the workers'), deleted before anything is written to it. The wake-up keys
-- are looked at only when a pass is to be signalled (and then stand for a full pass, as signal_pass.lua
-- takes them), so that the sweep's own check of them is left its work.
local repaired = 0
local spec = {KEYS[1], 'zset', KEYS[5], 'stream', KEYS[7], 'zset', KEYS[8], 'hash', KEYS[9], 'set',
              KEYS[10], 'hash'}
local function put_right(spec)
  for i = 1, #spec, 2 do
    local found = redis.call('TYPE', spec[i])
    if type(found) == 'table' then
      found = found['ok']
    end
    if found ~= 'none' and found ~= spec[i + 1] then
      redis.call('DEL', spec[i])
      redis.log(redis.LOG_WARNING, 'modelplan: ' .. spec[i] .. ' held another type; deleted')
      repaired = repaired + 1
    end
  end
end
put_right(spec)
repaired = repaired + repair_stream(KEYS[5])

local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local freed = {}
local changes = 0
local dropped = 0
local refused = 0

local function kind_of(key)
  local found = redis.call('TYPE', key)
  if type(found) == 'table' then
    found = found['ok']
  end
  return found
end

-- a node's own key: its string, or nil; one of another type, or past max_bytes, is deleted and counted
local function own(key)
  local kind = kind_of(key)
  if kind == 'none' then
    return nil
  end
  if kind ~= 'string' or redis.call('STRLEN', key) > max_bytes then
    redis.call('DEL', key)
    dropped = dropped + 1
    return nil
  end
  return redis.call('GET', key)
end

local function decoded(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' and type(rec.free_gpus) == 'number' and type(rec.host_free_gb) == 'number'
      and type(rec.boot_id) == 'string' then
    return rec
  end
  return nil
end

-- what was taken of a node, or nil
local function taken_of(node_id)
  local raw = redis.call('HGET', KEYS[10], node_id)
  if not raw then
    return nil
  end
  local ok, t = pcall(cjson.decode, raw)
  if not ok or type(t) ~= 'table' or type(t[1]) ~= 'string' or type(t[2]) ~= 'string' or type(t[3]) ~= 'number'
      or type(t[4]) ~= 'number' or type(t[5]) ~= 'string' or type(t[6]) ~= 'number' then
    return nil
  end
  return {digest = t[1], boot = t[2], free = t[3], host = t[4], class = t[5], refused = t[6]}
end

local function put_taken(node_id, t)
  redis.call('HSET', KEYS[10], node_id, cjson.encode({t.digest, t.boot, t.free, t.host, t.class, t.refused}))
end

local function take(node_id, node_key, held_key, conflict_key)
  local raw = own(node_key)
  local conflict_raw = own(conflict_key)
  local t = taken_of(node_id)
  local was = t or {digest = '', boot = '', free = 0, host = 0, class = '', refused = 0}
  local now_refused = was.refused
  if conflict_raw then
    local ok, c = pcall(cjson.decode, conflict_raw)
    local pttl = redis.call('PTTL', conflict_key)
    redis.call('ZADD', KEYS[7], string.format('%d', now_ms + math.max(pttl, 0)), node_id)
    if ok and type(c) == 'table' and type(c.refused) == 'number' and c.refused >= 0 then
      if c.refused > was.refused then
        refused = refused + math.min(c.refused - was.refused, refused_max)
      end
      now_refused = c.refused
    end
  else
    now_refused = 0
  end
  if not raw then
    if was.digest ~= '' then
      redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'n', node_id, 'gone', '1')
      changes = changes + 1
      redis.call('ZADD', KEYS[1], 'LT', string.format('%d', now_ms), node_id)
    end
    if conflict_raw then
      if not t or was.digest ~= '' or was.refused ~= now_refused then
        put_taken(node_id, {digest = '', boot = '', free = 0, host = 0, class = '', refused = now_refused})
      end
    elseif t then
      redis.call('HDEL', KEYS[10], node_id)
    end
    return
  end
  local digest = redis.sha1hex(raw)
  if digest == was.digest then
    if was.refused ~= now_refused then
      was.refused = now_refused
      put_taken(node_id, was)
    end
    return
  end
  local new = decoded(raw)
  local now_taken = {digest = digest, boot = '', free = 0, host = 0, class = '', refused = now_refused}
  if new then
    local class = type(new.gpu_class) == 'string' and new.gpu_class or ''
    now_taken.boot, now_taken.free, now_taken.host, now_taken.class = new.boot_id, new.free_gpus,
      new.host_free_gb, class
    local restarted = false
    if was.boot == '' then
      -- joining, or back after its record was gone: which boot its reservations were made on is checked
      restarted = redis.call('HLEN', held_key) > 0
      freed['*'] = true
    elseif was.boot ~= new.boot_id then
      restarted = true
      freed['*'] = true
    else
      if new.free_gpus > was.free and class ~= '' then
        freed[class] = true
      end
      if new.host_free_gb > was.host then
        freed['cpu'] = true
      end
      if was.class ~= class and class ~= '' then
        freed[class] = true
      end
    end
    if restarted and redis.call('HLEN', held_key) > 0 then
      redis.call('SADD', KEYS[9], node_id)
    end
  end
  local pttl = redis.call('PTTL', node_key)
  local ttl = string.format('%d', math.max(pttl, 0))
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'n', node_id, 'r', digest, 't', ttl)
  changes = changes + 1
  if pttl >= 0 then
    redis.call('ZADD', KEYS[1], string.format('%d', now_ms + pttl), node_id)
  else
    redis.call('ZADD', KEYS[1], string.format('%d', 2 ^ 52), node_id) -- no TTL (written by hand): never lapses
  end
  put_taken(node_id, now_taken)
end

for a = FIRST, #ARGV do
  local at = SHARED + 3 * (a - FIRST)
  take(ARGV[a], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3])
end

if refused > 0 then
  redis.call('HINCRBY', KEYS[8], refused_field, refused)
end
if dropped > 0 then
  redis.call('HINCRBY', KEYS[8], dropped_field, dropped)
end

local wake = 0
if next(freed) then
  local before = repaired
  put_right({KEYS[2], 'string', KEYS[3], 'list', KEYS[4], 'set', KEYS[6], 'hash'})
  repaired = repaired + repair_epoch(KEYS[2])
  if repaired > before then
    freed['*'] = true -- a wake-up key put right stands for every class freed
  end
  redis.call('INCR', KEYS[2])
  local classes = {}
  -- each class on its own, so that a batch wakes for what its nodes one at a time would
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
      wake = 1
    end
  end
end
return {wake, changes, repaired}
