-- claim.lua: takes a queued job into planning for a worker, in the round trip that reads its record.
--
-- A queued record is taken only in the form modelplan writes it: its head (schema version, id, state,
-- version, updated_at, worker, lease_until: the first fields of every record, in this order) with no
-- worker and no lease (worker/layout.py: JOB_HEAD). The head is written anew and the rest kept as it is,
-- so the record is not decoded.
-- Any other record (planning under a lapsed lease, settled, unreadable) is returned as it is, for the
-- caller to decide on in full.
--
-- KEYS[1]  job:{id}          KEYS[4]  jobs:queued      KEYS[6]  pending
-- KEYS[2]  job:{id}:events   KEYS[5]  jobs:planning    KEYS[7]  pending:for
-- KEYS[3]  events            KEYS[8]  pending:classes  KEYS[9]  pending:records
--
-- ARGV[1]  job id                     ARGV[5]  score in jobs:planning (the lease's end, ms)
-- ARGV[2]  updated_at, JSON           ARGV[6]  events MAXLEN      ARGV[7]  job events MAXLEN
-- ARGV[3]  worker, JSON               ARGV[8]  reason, for the streams
-- ARGV[4]  lease_until, JSON           ARGV[9]  the schema version of the records modelplan writes
--
-- Returns {"planning", record as now stored}, {"as_is", record as stored}, {"gone", ""}, or
-- {"wrongtype", key} for a key it would write that holds another type (nothing written).

local job_id, schema = ARGV[1], ARGV[9]
local raw = redis.call('GET', KEYS[1])
if not raw then
  return {'gone', ''}
end
local head = '{"schema_version":' .. schema .. ',"job_id":"' .. job_id .. '","state":"queued","version":'
if string.sub(raw, 1, #head) ~= head then
  return {'as_is', raw}
end
local _, head_end, version = string.find(
  raw, '^(%d+),"updated_at":"[^"]*","worker":null,"lease_until":null,', #head + 1)
if not head_end then
  return {'as_is', raw}
end
version = tostring(tonumber(version) + 1)
local record = '{"schema_version":' .. schema .. ',"job_id":"' .. job_id .. '","state":"planning","version":'
  .. version .. ',"updated_at":' .. ARGV[2] .. ',"worker":' .. ARGV[3] .. ',"lease_until":' .. ARGV[4] .. ','
  .. string.sub(raw, head_end + 1)

-- every key this call writes holds its own type, or none: else nothing is written
local mistyped = wrong_type({KEYS[2], 'stream', KEYS[3], 'stream', KEYS[4], 'zset', KEYS[5], 'zset', KEYS[6], 'zset',
                             KEYS[7], 'hash', KEYS[8], 'hash', KEYS[9], 'hash'})
if mistyped then
  return {'wrongtype', mistyped}
end

redis.call('SET', KEYS[1], record)
redis.call('ZREM', KEYS[4], job_id)
redis.call('ZADD', KEYS[5], ARGV[5], job_id)
redis.call('ZREM', KEYS[6], job_id)
set_pending(KEYS[7], KEYS[8], KEYS[9], job_id, '', '')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'job_id', job_id, 'state', 'planning',
           'version', version, 'reason', ARGV[8])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'job_id', job_id, 'state', 'planning',
           'version', version, 'reason', ARGV[8])
return {'planning', record}
