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
