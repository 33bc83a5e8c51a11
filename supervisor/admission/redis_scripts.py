"""The Lua scripts the Redis store runs: one per operation, so each is one atomic
step on the server and one round trip for the daemon.

Every key a script touches is passed in KEYS and carries the same hash tag, so all
of them live in one Redis Cluster slot (see `redis_store.py` for the layout). A
scope (a client key, "k:<name>", or a deployment, "d:<name>") has five keys, always
passed in this order: its window (a hash: "r<second>" requests and "t<second>"
tokens per second, 60 seconds kept), its requests in flight (a sorted set: request
id -> when the hold lapses), its spend today, its spend this month, and its cooldown
(the wall-clock second it ends). Numbers a script returns are strings: Redis would
truncate a Lua number to an integer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

_WINDOW = """
local function window(wkey, second)
  local rows = redis.call('HGETALL', wkey)
  local oldest = second - 60
  local reqs, toks = 0, 0
  local seconds, per, stale = {}, {}, {}
  for i = 1, #rows, 2 do
    local field = rows[i]
    local s = tonumber(string.sub(field, 2))
    local v = tonumber(rows[i + 1])
    if s == nil or s <= oldest then
      stale[#stale + 1] = field
    else
      local b = per[s]
      if not b then b = {0, 0}; per[s] = b; seconds[#seconds + 1] = s end
      if string.sub(field, 1, 1) == 'r' then b[1] = b[1] + v; reqs = reqs + v
      else b[2] = b[2] + v; toks = toks + v end
    end
  end
  if #stale > 0 then redis.call('HDEL', wkey, unpack(stale)) end
  return reqs, toks, seconds, per
end
"""

#: KEYS: claim, held, then 5 keys per scope (scope 0 the client key, 1.. the candidates).
#: ARGV: now, request id, daemon, claim ms (0: no claim), hold s, tokens, day end, month
#: end, has key (1/0), candidates, then 5 limits per scope (rpm, tpm, parallel, usd/day,
#: usd/month; "" for none).
ADMIT = (
    _WINDOW
    + """
local now = tonumber(ARGV[1])
local second = math.floor(now)
local rid = ARGV[2]
local claim_ms = tonumber(ARGV[4])
local hold = tonumber(ARGV[5])
local tokens = tonumber(ARGV[6])
local ncand = tonumber(ARGV[10])

if claim_ms > 0 then
  local owner = redis.call('GET', KEYS[1])
  if owner then return {'D', owner} end
end

local function num(x) if x == '' then return nil end return tonumber(x) end

local function freed(seconds, per, need_r, need_t)
  table.sort(seconds)
  for _, s in ipairs(seconds) do
    need_r = need_r - per[s][1]
    need_t = need_t - per[s][2]
    if need_r <= 0 and need_t <= 0 then return math.max(s + 60 - now, 0.001) end
  end
  return 60
end

local function check(i, is_deployment)
  local kb = 2 + i * 5
  local ab = 11 + i * 5
  local rpm, tpm, par = num(ARGV[ab]), num(ARGV[ab + 1]), num(ARGV[ab + 2])
  local usd_day, usd_month = num(ARGV[ab + 3]), num(ARGV[ab + 4])
  if is_deployment then
    local cool = tonumber(redis.call('GET', KEYS[kb + 5]) or '0')
    if cool > now then return {'cooldown', tostring(cool - now)} end
  end
  if usd_day then
    local spent = tonumber(redis.call('GET', KEYS[kb + 3]) or '0')
    if spent >= usd_day then return {'day', tostring(spent), ARGV[7]} end
  end
  if usd_month then
    local spent = tonumber(redis.call('GET', KEYS[kb + 4]) or '0')
    if spent >= usd_month then return {'month', tostring(spent), ARGV[8]} end
  end
  if rpm or tpm then
    local reqs, toks, seconds, per = window(KEYS[kb + 1], second)
    if rpm and reqs + 1 > rpm then
      return {'rpm', tostring(reqs), tostring(freed(seconds, per, reqs + 1 - rpm, 0))}
    end
    if tpm and toks + tokens > tpm then
      if tokens > tpm then return {'tpm_never', tostring(toks)} end
      return {'tpm', tostring(toks), tostring(freed(seconds, per, 0, toks + tokens - tpm))}
    end
  end
  if par then
    redis.call('ZREMRANGEBYSCORE', KEYS[kb + 2], '-inf', now)
    local n = redis.call('ZCARD', KEYS[kb + 2])
    if n + 1 > par then return {'parallel', tostring(n)} end
  end
  return nil
end

local function count(i)
  local kb = 2 + i * 5
  local w = KEYS[kb + 1]
  redis.call('HINCRBY', w, 'r' .. second, 1)
  if tokens ~= 0 then redis.call('HINCRBY', w, 't' .. second, tokens) end
  redis.call('EXPIRE', w, 120)
  redis.call('ZADD', KEYS[kb + 2], now + hold, rid)
  redis.call('EXPIRE', KEYS[kb + 2], hold + 60)
end

local has_key = ARGV[9] == '1'
if has_key then
  local refused = check(0, false)
  if refused then return {'R', refused} end
end
local chosen = 0
local skipped, refusals = {}, {}
for c = 1, ncand do
  local refused = check(c, true)
  if refused then
    skipped[#skipped + 1] = c - 1
    refusals[#refusals + 1] = refused
  else
    chosen = c
    break
  end
end
if ncand > 0 and chosen == 0 then return {'C', skipped, refusals} end
if has_key then count(0) end
if chosen > 0 then count(chosen) end
redis.call('HSET', KEYS[2], 'second', second, 'tokens', tokens)
redis.call('EXPIRE', KEYS[2], hold)
if claim_ms > 0 then redis.call('SET', KEYS[1], ARGV[3], 'PX', claim_ms) end
return {'A', chosen - 1, skipped, refusals}
"""
)

#: KEYS: held, settled, 5 keys of the client key's scope, 5 of the deployment's.
#: ARGV: request id, now, tokens, cost ("" unknown), hold s, day end, month end, has key,
#: has deployment, admitted locally (1: it was decided in memory during an outage, so
#: the windows never counted it: count it now).
SETTLE = """
local hold = tonumber(ARGV[5])
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', hold) then return 0 end
local now = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local scopes = {}
if ARGV[8] == '1' then scopes[#scopes + 1] = 3 end
if ARGV[9] == '1' then scopes[#scopes + 1] = 8 end
local held = redis.call('HMGET', KEYS[1], 'second', 'tokens')
if held[1] then
  local second = held[1]
  local delta = tokens - tonumber(held[2])
  for _, kb in ipairs(scopes) do
    redis.call('ZREM', KEYS[kb + 1], ARGV[1])
    if delta ~= 0 and redis.call('HEXISTS', KEYS[kb], 'r' .. second) == 1 then
      redis.call('HINCRBY', KEYS[kb], 't' .. second, delta)
    end
  end
  redis.call('DEL', KEYS[1])
elseif ARGV[10] == '1' then
  local second = math.floor(now)
  for _, kb in ipairs(scopes) do
    redis.call('HINCRBY', KEYS[kb], 'r' .. second, 1)
    if tokens ~= 0 then redis.call('HINCRBY', KEYS[kb], 't' .. second, tokens) end
    redis.call('EXPIRE', KEYS[kb], 120)
  end
end
local cost = tonumber(ARGV[4])
if cost and cost > 0 then
  for _, kb in ipairs(scopes) do
    redis.call('INCRBYFLOAT', KEYS[kb + 2], ARGV[4])
    redis.call('EXPIREAT', KEYS[kb + 2], math.floor(tonumber(ARGV[6])) + 3600)
    redis.call('INCRBYFLOAT', KEYS[kb + 3], ARGV[4])
    redis.call('EXPIREAT', KEYS[kb + 3], math.floor(tonumber(ARGV[7])) + 3600)
  end
end
return 1
"""

#: KEYS: held, settled, 5 keys of the client key's scope, 5 of the deployment's.
#: ARGV: request id, hold s, has key, has deployment.
RELEASE = """
local held = redis.call('HMGET', KEYS[1], 'second', 'tokens')
if not held[1] then return 0 end
redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[2]))
local scopes = {}
if ARGV[3] == '1' then scopes[#scopes + 1] = 3 end
if ARGV[4] == '1' then scopes[#scopes + 1] = 8 end
for _, kb in ipairs(scopes) do
  redis.call('ZREM', KEYS[kb + 1], ARGV[1])
  if redis.call('HEXISTS', KEYS[kb], 'r' .. held[1]) == 1 then
    redis.call('HINCRBY', KEYS[kb], 'r' .. held[1], -1)
    redis.call('HINCRBY', KEYS[kb], 't' .. held[1], -tonumber(held[2]))
  end
end
redis.call('DEL', KEYS[1])
return 1
"""

#: KEYS: the deployment's failures (sorted set), its cooldown.
#: ARGV: now, threshold, window s, cooldown s, a member unique to this failure.
FAILURE = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[3])
local cooldown = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
  if cool <= now then
    redis.call('SET', KEYS[2], tostring(now + cooldown), 'PX', math.ceil(cooldown * 1000) + 1000)
    redis.call('DEL', KEYS[1])
    return 1
  end
end
return 0
"""

#: KEYS: the deployment's cooldown. ARGV: until, now.
COOLDOWN = """
local untl = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > cur and untl > tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', math.ceil((untl - tonumber(ARGV[2])) * 1000) + 1000)
end
return 1
"""

#: KEYS: 5 per scope. ARGV: now. Per scope: requests and tokens in the window, in
#: flight, spent today, this month, cooldown end ("" none).
USE = (
    _WINDOW
    + """
local now = tonumber(ARGV[1])
local second = math.floor(now)
local out = {}
for kb = 0, #KEYS - 1, 5 do
  local reqs, toks = window(KEYS[kb + 1], second)
  local flying = redis.call('ZCOUNT', KEYS[kb + 2], '(' .. now, '+inf')
  local cool = tonumber(redis.call('GET', KEYS[kb + 5]) or '0')
  out[#out + 1] = {
    tostring(reqs), tostring(toks), tostring(flying),
    redis.call('GET', KEYS[kb + 3]) or '0', redis.call('GET', KEYS[kb + 4]) or '0',
    cool > now and tostring(cool) or ''
  }
end
return out
"""
)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


def _script(name: str, source: str) -> Script:
    return Script(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


SCRIPTS = {
    s.name: s
    for s in (
        _script("admit", ADMIT),
        _script("settle", SETTLE),
        _script("release", RELEASE),
        _script("failure", FAILURE),
        _script("cooldown", COOLDOWN),
        _script("use", USE),
    )
}
