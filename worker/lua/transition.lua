-- transition.lua: moves one job to its next state in one step, or changes nothing.
--
-- The caller read the job's record at some version, planned, and built the next record. This writes it
-- only if the record is still at that version, and with it everything the move implies: the job leaves
-- one state index and joins another; its reservations are written (each node checked for room first)
-- or cleared (and the freed classes wake waiting jobs); a waiting job notes what it waits for, and is
-- woken at once if capacity freed since the plan was made; the change goes onto both streams.
--
-- KEYS[1]   job:{id}            KEYS[6]   waiting:for
-- KEYS[2]   job:{id}:events     KEYS[7]   epoch
-- KEYS[3]   events              KEYS[8]   wake
-- KEYS[4]   jobs:{old state}    KEYS[9]   wake:classes
-- KEYS[5]   jobs:{new state}    KEYS[10]  held:nodes
-- KEYS[11..] for each reservation to write: node:{id}, held:{id}; then for each node to clear: held:{id}
--
-- ARGV[1]  job id                         ARGV[8]   seconds to keep a final record (0: keep)
-- ARGV[2]  version the change is made from ARGV[9]  wake flag TTL, ms
-- ARGV[3]  the next record, JSON          ARGV[10]  events MAXLEN, ARGV[11] job events MAXLEN
-- ARGV[4]  the next state                 ARGV[12]  reason, for the streams
-- ARGV[5]  score in jobs:{next state}     ARGV[13]  reservations to write (n), ARGV[14] nodes to clear (m)
-- ARGV[6]  class waited for, or ""        ARGV[15..] n x (node id, gpus, host GiB), then m x (node id, class)
-- ARGV[7]  epoch the plan saw, or ""
--
-- Returns {code, detail, wake}: code "ok" (wake 1: the caller queues a wake-up pass), "stale" (detail:
-- the record's version now), "gone" (no record), "full" or "silent" (detail: the node that lacks room or
-- has no live heartbeat; nothing written).

local job_id, from_version, record, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n_place, n_clear = tonumber(ARGV[13]), tonumber(ARGV[14])

local raw = redis.call('GET', KEYS[1])
if not raw then
  return {'gone', '', 0}
end
local current = tostring(cjson.decode(raw).version)
if current ~= from_version then
  return {'stale', current, 0}
end

-- Every node must have the room before anything is written.
local boots = {}
for i = 1, n_place do
  local node_key, held_key = KEYS[9 + 2 * i], KEYS[10 + 2 * i]
  local node_id = ARGV[12 + 3 * i]
  local gpus, host_gb = tonumber(ARGV[13 + 3 * i]), tonumber(ARGV[14 + 3 * i])
  local node_raw = redis.call('GET', node_key)
  if not node_raw then
    return {'silent', node_id, 0}
  end
  local node = cjson.decode(node_raw)
  local started = {}
  for _, started_id in ipairs(node.started) do
    started[started_id] = true
  end
  local all_gpus, unseen_gpus, unseen_host = 0, 0, 0
  local held = redis.call('HGETALL', held_key)
  for h = 1, #held, 2 do
    if held[h] ~= job_id then
      local r = cjson.decode(held[h + 1])
      all_gpus = all_gpus + r.gpus
      if not started[held[h]] then
        unseen_gpus = unseen_gpus + r.gpus
        unseen_host = unseen_host + r.host_gb
      end
    end
  end
  if all_gpus + gpus > node.gpus or node.free_gpus - unseen_gpus < gpus
      or (host_gb > 0 and node.host_free_gb - unseen_host < host_gb) then
    return {'full', node_id, 0}
  end
  boots[i] = node.boot_id
end

local wake = 0
local function wake_for(class)
  redis.call('SADD', KEYS[9], class)
  if redis.call('SET', KEYS[8], '1', 'NX', 'PX', ARGV[9]) then
    wake = 1
  end
end

for i = 1, n_place do
  local node_id = ARGV[12 + 3 * i]
  local held = cjson.encode({gpus = tonumber(ARGV[13 + 3 * i]), host_gb = tonumber(ARGV[14 + 3 * i]),
                             boot_id = boots[i]})
  redis.call('HSET', KEYS[10 + 2 * i], job_id, held)
  redis.call('SADD', KEYS[10], node_id)
end

local freed = false
local clear_args = 15 + 3 * n_place
for j = 1, n_clear do
  local held_key = KEYS[10 + 2 * n_place + j]
  local node_id, class = ARGV[clear_args + 2 * (j - 1)], ARGV[clear_args + 2 * (j - 1) + 1]
  if redis.call('HDEL', held_key, job_id) == 1 then
    freed = true
    wake_for(class)
    if redis.call('HLEN', held_key) == 0 then
      redis.call('SREM', KEYS[10], node_id)
    end
  end
end
if freed then
  redis.call('INCR', KEYS[7])
end

if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[6], job_id, ARGV[6])
  if ARGV[7] ~= '' and tostring(redis.call('GET', KEYS[7]) or '0') ~= ARGV[7] then
    -- capacity freed while this job was being planned: it must not sleep through that
    wake_for(ARGV[6])
  end
else
  redis.call('HDEL', KEYS[6], job_id)
end

redis.call('SET', KEYS[1], record)
redis.call('ZREM', KEYS[4], job_id)
redis.call('ZADD', KEYS[5], ARGV[5], job_id)

local version = tostring(cjson.decode(record).version)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[11], '*', 'job_id', job_id, 'state', state, 'version', version,
           'reason', ARGV[12])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*', 'job_id', job_id, 'state', state, 'version', version,
           'reason', ARGV[12])

local keep = tonumber(ARGV[8])
if keep > 0 then
  redis.call('EXPIRE', KEYS[1], keep)
  redis.call('EXPIRE', KEYS[2], keep)
end
return {'ok', version, wake}
