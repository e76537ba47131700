-- take_wake.lua: a wake-up pass starts: clears the flag and takes the classes freed since the last.
-- Clearing the flag first means capacity freed from here on queues another pass: none is lost.
--
-- KEYS[1] wake   KEYS[2] wake:classes
-- Returns the freed classes.

redis.call('DEL', KEYS[1])
local classes = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
return classes
