-- wake_all.lua: not a script of its own; put before each script that frees capacity of any class at once
-- (quarantine_job, reclaim_holds), which calls wake_all for it.

-- capacity freed, any class: the epoch bumped (a plan made before must not commit a wait), a full pass
-- signalled ('*' on wake:classes, and a token on wake:signal unless one waits already); 1 when it pushed one
local function wake_all(epoch_key, signal_key, classes_key)
  redis.call('INCR', epoch_key)
  redis.call('SADD', classes_key, '*')
  if redis.call('EXISTS', signal_key) == 0 then
    redis.call('RPUSH', signal_key, '1')
    return 1
  end
  return 0
end
