-- key_types.lua: not a script of its own; put before each script that writes keys that another writer
-- could have given another type (a hand-written SET on a list, say).
--
-- Redis does not roll a script back: one that fails half-way keeps what it wrote. So a script checks the
-- type of every key it may write before its first write, and on a mismatch writes nothing and says which
-- key it was ({'wrongtype', key, 0}); the caller repairs the key, or reports it.

-- the first key in spec (a flat list: key, type, key, type, ...) that holds another type, else nil
local function wrong_type(spec)
  for i = 1, #spec, 2 do
    local found = redis.call('TYPE', spec[i])
    if type(found) == 'table' then
      found = found['ok']
    end
    if found ~= 'none' and found ~= spec[i + 1] then
      return spec[i]
    end
  end
  return nil
end

-- A key of the right type may still hold what no writer of modelplan's would leave there: an epoch that is
-- no integer (INCR fails on it), a stream whose last id is past any time (XADD '*' fails on it: a writer
-- can set one of 18446744073709551615-18446744073709551615; one emptied since keeps that last id). Either
-- would stop a script half-way, so a script that bumps the epoch or appends to a stream puts them right
-- before its first write: the epoch starts again above any count (the server's time in ms), the stream is
-- made anew (a worker's mirror reads a stream made anew as lost, and reads the whole pool). Each repair is
-- said in the server's log. Each returns 1 when it put its key right, else 0.

local function server_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function type_of(key)
  local found = redis.call('TYPE', key)
  if type(found) == 'table' then
    found = found['ok']
  end
  return found
end

local function repair_epoch(epoch_key)
  if type_of(epoch_key) == 'string' and not string.match(redis.call('GET', epoch_key), '^%-?%d+$') then
    redis.call('SET', epoch_key, string.format('%d', server_ms()))
    redis.log(redis.LOG_WARNING, 'modelplan: ' .. epoch_key .. ' held no integer; set to the time in ms')
    return 1
  end
  return 0
end

local function repair_stream(stream_key)
  if type_of(stream_key) ~= 'stream' then
    return 0
  end
  -- the last entry's id (an emptied stream keeps its last id, unseen here: left as it is)
  local last = redis.call('XREVRANGE', stream_key, '+', '-', 'COUNT', 1)
  local at = last[1] and tonumber(string.match(last[1][1], '^(%d+)')) or nil
  -- more than a day ahead of the server's clock: no writer of modelplan's put it there
  if at and at > server_ms() + 86400000 then
    redis.call('DEL', stream_key)
    redis.log(redis.LOG_WARNING, 'modelplan: ' .. stream_key .. ' had ids past any time; made anew')
    return 1
  end
  return 0
end
