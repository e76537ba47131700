-- transition.lua: moves one job to its next record in one step, or changes nothing.
--
-- The caller read the job's record at some version, planned, and built the next record. This writes it
-- only if the record is still at that version, and with it everything the move implies: the job leaves
-- one state index and joins another; holds (reservations, or a nomination) are cleared and written, each
-- written one checked for room first; cleared holds wake the jobs pending on their class; a job left
-- pending (a replica not on its best option) is indexed by the class it waits for (and counted there in
-- pending:classes), and woken at once if
-- capacity freed since its plan was made; the change goes onto both streams.
--
-- KEYS[1]  job:{id}           KEYS[5]  jobs:{new state}   KEYS[9]   wake:signal
-- KEYS[2]  job:{id}:events    KEYS[6]  pending            KEYS[10]  wake:classes
-- KEYS[3]  events             KEYS[7]  pending:for        KEYS[11]  holding
-- KEYS[4]  jobs:{old state}   KEYS[8]  epoch
-- KEYS[12] pool:changes       KEYS[13] pending:classes    KEYS[14]  pending:records
-- KEYS[15..] for each hold to write: node:{id}, held:{id}; then for each hold to clear: held:{id}
--
-- ARGV[1]  job id                      ARGV[9]   seconds to keep a final record (0: keep; -1: keep
--                                                 for good a record that was final, retried)
-- ARGV[2]  version it is made from     ARGV[10]  events MAXLEN     ARGV[11] job events MAXLEN
-- ARGV[3]  the next record, JSON       ARGV[12]  reason, for the streams
-- ARGV[4]  the next state              ARGV[13]  holds to write (n)  ARGV[14] holds to clear (m)
-- ARGV[5]  score in jobs:{next state}  ARGV[15]  pool:changes MAXLEN
-- ARGV[6]  classes pending on, or ""
-- ARGV[7]  score in pending
-- ARGV[8]  epoch the plan saw, or ""  ARGV[16..] n x (node id, hold id, gpus, host GiB, nominated 0/1,
--                                                the engines' API key or ""), then m x (node id, hold id,
--                                                class)
--
-- Every hold written or cleared goes onto pool:changes (node, hold id, value or ""), for the workers'
-- mirrors of the pool.
--
-- Returns {code, detail, wake}: "ok" (detail: the new version; wake 1: it signalled a wake-up pass), "stale"
-- (detail: the version now, or "unreadable"), "gone" (no record), "full" or "silent" (detail: the node that
-- lacks room, or has no live heartbeat that decodes; nothing written), "wrongtype" (detail: a key it would
-- write that holds another type; nothing written).

local job_id = ARGV[1]
local n_place, n_clear = tonumber(ARGV[13]), tonumber(ARGV[14])
local place_at, clear_at = 16, 16 + 6 * n_place
local clear_key_at = 14 + 2 * n_place

-- A record's version, read from the head that modelplan's records start with (their first four fields,
-- in this order, worker/layout.py's JOB_VERSION_HEAD; ids and states carry no quote): decoding a whole
-- record with its request and alternatives costs some 150 us on every commit. Anything else is decoded in
-- full; nil when that fails.
local function version_of(raw)
  local v = string.match(raw, '^{"schema_version":%d+,"job_id":"[%w._-]*","state":"%l+","version":(%d+),')
  if v then
    return v
  end
  local ok, record = pcall(cjson.decode, raw)
  if not ok or type(record) ~= 'table' or record.version == nil then
    return nil
  end
  return tostring(record.version)
end

local raw = redis.call('GET', KEYS[1])
if not raw then
  return {'gone', '', 0}
end
-- a record that does not decode is stale to every caller: it re-reads it and finds it unreadable
local current = version_of(raw)
if current == nil then
  return {'stale', 'unreadable', 0}
end
if current ~= ARGV[2] then
  return {'stale', current, 0}
end

-- every key this call may write holds its own type, or none: else nothing is written
local spec = {KEYS[2], 'stream', KEYS[3], 'stream', KEYS[4], 'zset', KEYS[5], 'zset', KEYS[6], 'zset',
              KEYS[7], 'hash', KEYS[8], 'string', KEYS[9], 'list', KEYS[10], 'set', KEYS[11], 'set',
              KEYS[12], 'stream', KEYS[13], 'hash', KEYS[14], 'hash'}
for i = 1, n_place do
  spec[#spec + 1] = KEYS[14 + 2 * i]
  spec[#spec + 1] = 'hash'
end
for j = 1, n_clear do
  spec[#spec + 1] = KEYS[clear_key_at + j]
  spec[#spec + 1] = 'hash'
end
local mistyped = wrong_type(spec)
if mistyped then
  return {'wrongtype', mistyped, 0}
end

-- holds on their way out do not count against the room
local clearing = {}
for j = 1, n_clear do
  local node_id = ARGV[clear_at + 3 * (j - 1)]
  clearing[node_id] = clearing[node_id] or {}
  clearing[node_id][ARGV[clear_at + 3 * (j - 1) + 1]] = true
end

-- every hold must have the room before anything is written
local boots, adding = {}, {}
for i = 1, n_place do
  local at = place_at + 6 * (i - 1)
  local node_id, hold_id = ARGV[at], ARGV[at + 1]
  local gpus, host_gb = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local node_raw = redis.call('GET', KEYS[13 + 2 * i])
  if not node_raw then
    return {'silent', node_id, 0}
  end
  -- a heartbeat that does not decode leaves its node out of the pool, as a silent one is
  local decoded, node = pcall(cjson.decode, node_raw)
  if not decoded or type(node) ~= 'table' or type(node.gpus) ~= 'number' or type(node.free_gpus) ~= 'number'
      or type(node.host_free_gb) ~= 'number' or type(node.started) ~= 'table' then
    return {'silent', node_id, 0}
  end
  local started = {}
  for _, s in ipairs(node.started) do
    started[s] = true
  end
  local skip = clearing[node_id] or {}
  local add = adding[node_id] or {gpus = 0, host = 0}
  local all_gpus, unseen_gpus, unseen_host = add.gpus, add.gpus, add.host
  local held = redis.call('HGETALL', KEYS[14 + 2 * i])
  for h = 1, #held, 2 do
    if held[h] ~= hold_id and not skip[held[h]] then
      -- a hold that does not decode keeps its cards taken; which cards is unknown, so all are
      local readable, r = pcall(cjson.decode, held[h + 1])
      if not readable or type(r) ~= 'table' or type(r.gpus) ~= 'number' or type(r.host_gb) ~= 'number' then
        return {'full', node_id, 0}
      end
      all_gpus = all_gpus + r.gpus
      if not started[held[h]] then
        unseen_gpus = unseen_gpus + r.gpus
        unseen_host = unseen_host + r.host_gb
      end
    end
  end
  if all_gpus + gpus > node.gpus or (gpus > 0 and node.free_gpus - unseen_gpus < gpus)
      or (host_gb > 0 and node.host_free_gb - unseen_host < host_gb) then
    return {'full', node_id, 0}
  end
  adding[node_id] = {gpus = add.gpus + gpus, host = add.host + host_gb}
  boots[i] = node.boot_id
end

-- values no writer of modelplan's leaves, put right before the first write (key_types.lua)
repair_epoch(KEYS[8])
repair_stream(KEYS[2])
repair_stream(KEYS[3])
repair_stream(KEYS[12])

local wake = 0
local function wake_for(class)
  redis.call('SADD', KEYS[10], class)
  -- one token waits at most: the pass it starts takes every class freed until then
  if redis.call('EXISTS', KEYS[9]) == 0 then
    redis.call('RPUSH', KEYS[9], '1')
    wake = 1
  end
end

-- a hold cleared and written again (a nomination that changes) frees nothing: no wake-up for it
local rewritten = {}
for i = 1, n_place do
  local at = place_at + 6 * (i - 1)
  rewritten[ARGV[at] .. '/' .. ARGV[at + 1]] = true
end

local freed = false
for j = 1, n_clear do
  local at = clear_at + 3 * (j - 1)
  local held_key = KEYS[clear_key_at + j]
  local deleted = redis.call('HDEL', held_key, ARGV[at + 1]) == 1
  if deleted then
    redis.call('XADD', KEYS[12], 'MAXLEN', '~', ARGV[15], '*', 'n', ARGV[at], 'h', ARGV[at + 1], 'v', '')
  end
  if deleted and not rewritten[ARGV[at] .. '/' .. ARGV[at + 1]] then
    freed = true
    wake_for(ARGV[at + 2])
    if redis.call('HLEN', held_key) == 0 then
      redis.call('SREM', KEYS[11], ARGV[at])
    end
  end
end
if freed then
  redis.call('INCR', KEYS[8])
end

for i = 1, n_place do
  local at = place_at + 6 * (i - 1)
  local hold = {gpus = tonumber(ARGV[at + 2]), host_gb = tonumber(ARGV[at + 3]),
                boot_id = boots[i], nominated = ARGV[at + 4] == '1'}
  if ARGV[at + 5] ~= '' then
    hold.api_key = ARGV[at + 5]
  end
  local value = cjson.encode(hold)
  redis.call('HSET', KEYS[14 + 2 * i], ARGV[at + 1], value)
  redis.call('SADD', KEYS[11], ARGV[at])
  redis.call('XADD', KEYS[12], 'MAXLEN', '~', ARGV[15], '*', 'n', ARGV[at], 'h', ARGV[at + 1], 'v', value)
end

set_pending(KEYS[7], KEYS[13], KEYS[14], job_id, ARGV[6], ARGV[3])
if ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[6], ARGV[7], job_id)
  if ARGV[8] ~= '' and tostring(redis.call('GET', KEYS[8]) or '0') ~= ARGV[8] then
    -- capacity freed while this job was being planned: it must not sleep through that
    wake_for(ARGV[6])
  end
else
  redis.call('ZREM', KEYS[6], job_id)
end

redis.call('SET', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[4], job_id)
redis.call('ZADD', KEYS[5], ARGV[5], job_id)

local version = version_of(ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[11], '*', 'job_id', job_id, 'state', ARGV[4],
           'version', version, 'reason', ARGV[12])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*', 'job_id', job_id, 'state', ARGV[4],
           'version', version, 'reason', ARGV[12])

local keep = tonumber(ARGV[9])
if keep > 0 then
  redis.call('EXPIRE', KEYS[1], keep)
  redis.call('EXPIRE', KEYS[2], keep)
elseif keep < 0 then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return {'ok', version, wake}
