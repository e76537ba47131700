-- pending_counts.lua: not a script of its own; put before each script that changes pending:for (claim,
-- transition, quarantine_job, recount_pending), which calls set_pending to change it.
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

-- job_id pending on classes (comma-joined), or no longer pending when classes is ''
local function set_pending(pending_for_key, counts_key, job_id, classes)
  local old = redis.call('HGET', pending_for_key, job_id)
  if old then
    count_pending(counts_key, old, -1)
  end
  if classes ~= '' then
    redis.call('HSET', pending_for_key, job_id, classes)
    count_pending(counts_key, classes, 1)
  elseif old then
    redis.call('HDEL', pending_for_key, job_id)
  end
end
