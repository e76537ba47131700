-- signal_pass.lua: signals a wake-up pass as the scripts that free capacity do (transition.lua's
-- wake_for): a token on wake:signal unless a key is there already, one token at most; and for a pass over
-- every pending job, '*' on wake:classes. A wake:signal of another type counts as a token: the waker takes
-- it as one (and deletes it).
--
-- KEYS[1] wake:signal   KEYS[2] wake:classes
-- ARGV[1] 1 for a pass over every pending job, else 0
--
-- Returns 1 when it pushed a token, else 0.

if ARGV[1] == '1' then
  redis.call('SADD', KEYS[2], '*')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RPUSH', KEYS[1], '1')
  return 1
end
return 0
