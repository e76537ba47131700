-- pending_counts.lua: not a script of its own; put before each script that changes pending:for (claim,
-- transition, quarantine_job, recount_pending), which calls set_pending to change it (and pending:records
-- with it).
--
-- pending:classes counts, for each class, the pending jobs that capacity freed in it wakes (each class of
-- their pending:for value, comma-joined there). heartbeat.lua reads it to queue a wake-up pass only where
-- some job waits, not for every card that frees. A class no job waits on has no field.

local function count_pending(counts_key, classes, by)
  for class in string.gmatch(classes, '[^,]+') do
    if redis.call('HINCRBY', counts_key, class, by) <= 0 then
      redis.call('HDEL', counts_key, class)
    end
  end
end

-- job_id pending on classes (comma-joined) with its record as now stored, or no longer pending when
-- classes is ''. pending:records keeps a pending job's record beside its classes, so that a wake-up pass
-- takes the jobs and their records in one round trip (take_wake.lua).
local function set_pending(pending_for_key, counts_key, records_key, job_id, classes, record)
  local old = redis.call('HGET', pending_for_key, job_id)
  if old then
    count_pending(counts_key, old, -1)
  end
  if classes ~= '' then
    redis.call('HSET', pending_for_key, job_id, classes)
    redis.call('HSET', records_key, job_id, record)
    count_pending(counts_key, classes, 1)
  else
    if old then
      redis.call('HDEL', pending_for_key, job_id)
    end
    redis.call('HDEL', records_key, job_id)
  end
end
