-- quarantine_job.lua: a job whose record does not parse is marked failed, in one step, unless the record
-- changed since it was read. The record's bytes are kept as they are (they expire as a failed record
-- does); the job leaves every other state index and the pending index, joins jobs:failed, frees any hold
-- it had (waking every waiting job), and the change goes onto both streams with the reason.
--
-- KEYS[1]  job:{id}           KEYS[4]   jobs:failed          KEYS[11] pending      KEYS[14] wake:signal
-- KEYS[2]  job:{id}:events    KEYS[5..10] the other six       KEYS[12] pending:for  KEYS[15] wake:classes
-- KEYS[3]  events                        jobs:{state}         KEYS[13] epoch        KEYS[16] holding
-- KEYS[17] quarantine         KEYS[18] pool:changes        KEYS[19] pending:classes
-- KEYS[20] pending:records    KEYS[21..] held:{node} for each hold to drop
--
-- ARGV[1] job id               ARGV[5] seconds to keep the record   ARGV[9]  holds to drop (n)
-- ARGV[2] the record as read   ARGV[6] events MAXLEN                ARGV[10] pool:changes MAXLEN
-- ARGV[3] reason               ARGV[7] job events MAXLEN            ARGV[11..] n x (node id, hold id)
-- ARGV[4] now, ms              ARGV[8] quarantine entry, JSON
--
-- Returns {code, wake}: "ok", "changed" (the record is no longer what was read: nothing written), or
-- "wrongtype" (wake: a key it would write that holds another type; nothing written); wake 1 when it
-- signalled a wake-up pass.
local job_id = ARGV[1]
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return {'changed', 0}
end
-- every key this call may write holds its own type, or none: else nothing is written
local spec = {KEYS[2], 'stream', KEYS[3], 'stream', KEYS[11], 'zset', KEYS[12], 'hash', KEYS[13], 'string',
              KEYS[14], 'list', KEYS[15], 'set', KEYS[16], 'set', KEYS[17], 'hash', KEYS[18], 'stream',
              KEYS[19], 'hash', KEYS[20], 'hash'}
for i = 4, 10 do
  spec[#spec + 1] = KEYS[i]
  spec[#spec + 1] = 'zset'
end
for j = 21, #KEYS do
  spec[#spec + 1] = KEYS[j]
  spec[#spec + 1] = 'hash'
end
local mistyped = wrong_type(spec)
if mistyped then
  return {'wrongtype', mistyped}
end
-- key_types.lua: before the first write
repair_epoch(KEYS[13])
repair_stream(KEYS[2])
repair_stream(KEYS[3])
repair_stream(KEYS[18])
for i = 5, 10 do
  redis.call('ZREM', KEYS[i], job_id)
end
redis.call('ZADD', KEYS[4], ARGV[4], job_id)
redis.call('ZREM', KEYS[11], job_id)
set_pending(KEYS[12], KEYS[19], KEYS[20], job_id, '', '')
redis.call('HSET', KEYS[17], KEYS[1], ARGV[8])
local wake = 0
local freed = false
for j = 1, tonumber(ARGV[9]) do
  local node_id, hold_id = ARGV[9 + 2 * j], ARGV[10 + 2 * j]
  if redis.call('HDEL', KEYS[20 + j], hold_id) == 1 then
    freed = true
    redis.call('XADD', KEYS[18], 'MAXLEN', '~', ARGV[10], '*', 'n', node_id, 'h', hold_id, 'v', '')
    if redis.call('HLEN', KEYS[20 + j]) == 0 then
      redis.call('SREM', KEYS[16], node_id)
    end
  end
end
if freed then
  wake = wake_all(KEYS[13], KEYS[14], KEYS[15])
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'job_id', job_id, 'state', 'failed',
           'version', '0', 'reason', ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'job_id', job_id, 'state', 'failed',
           'version', '0', 'reason', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return {'ok', wake}
