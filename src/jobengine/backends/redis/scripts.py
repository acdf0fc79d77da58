"""The Lua scripts of the Redis transport: each step that touches two keys runs atomically in Redis.

Stream entries have two fields: ``m`` (the message body, canonical JSON) and ``d`` (deliveries made before
this entry existed, when a retry re-added it; absent means 0). A message's delivery count is ``d`` plus the
entry's own counter in the consumer group's pending list. Delayed retries wait in a sorted set scored by due
time (ms); a member is ``<d>|<old entry id>|<body>`` (the old id keeps equal bodies distinct).
"""

from __future__ import annotations

from typing import Final

#: KEYS: stream, then one idempotency key per message. ARGV: window (ms), then the bodies in the keys' order.
#: Returns, per message, 1 (added) or 0 (its key was taken).
PUBLISH: Final = """
local out = {}
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], '1', 'NX', 'PX', ARGV[1]) then
    redis.call('XADD', KEYS[1], '*', 'm', ARGV[i])
    out[i - 1] = 1
  else
    out[i - 1] = 0
  end
end
return out
"""

#: KEYS: stream, delayed set. ARGV: group, consumer, min idle (ms), count, now (ms), autoclaim cursor.
#: Moves due delayed entries back into the stream, then takes over entries idle longer than the lease.
#: Returns {moved, next cursor, {{id, fields, times delivered}...}, earliest delayed score or ''}.
MAINTAIN: Final = """
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[5], 'LIMIT', 0, 1000)
for _, member in ipairs(due) do
  local a = string.find(member, '|', 1, true)
  local b = string.find(member, '|', a + 1, true)
  redis.call('XADD', KEYS[1], '*', 'm', string.sub(member, b + 1), 'd', string.sub(member, 1, a - 1))
  redis.call('ZREM', KEYS[2], member)
end
local nextdue = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[6], 'COUNT', ARGV[4])
local out = {}
for _, entry in ipairs(claimed[2]) do
  if entry then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
    local times = 1
    if p[1] then times = p[1][4] end
    out[#out + 1] = {entry[1], entry[2], times}
  end
end
return {#due, claimed[1], out, nextdue[2] or ''}
"""

#: KEYS: stream, delayed set. ARGV: group, then per entry: id, deliveries so far, body, due (ms; 0: now).
#: Settles each entry and re-adds it (now, or into the delayed set).
RETRY: Final = """
for i = 2, #ARGV, 4 do
  local id, d, body, due = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    redis.call('XDEL', KEYS[1], id)
    if due == 0 then
      redis.call('XADD', KEYS[1], '*', 'm', body, 'd', d)
    else
      redis.call('ZADD', KEYS[2], due, d .. '|' .. id .. '|' .. body)
    end
  end
end
return 1
"""

#: KEYS: stream, dead-letter stream. ARGV: group, then per entry: id, field count n, n field/value pairs.
#: Appends each pending entry to the dead-letter stream and settles it (only if still pending: once).
DEAD_LETTER: Final = """
local i = 2
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    redis.call('XDEL', KEYS[1], id)
    redis.call('XADD', KEYS[2], '*', unpack(ARGV, i + 2, i + 1 + 2 * n))
  end
  i = i + 2 + 2 * n
end
return 1
"""
