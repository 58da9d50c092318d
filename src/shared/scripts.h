/* SPDX-License-Identifier: MIT */
/* scripts.h: the Lua scripts run in Redis (EVALSHA), on Redis' clock (TIME, microseconds) so
 * that every process of the fleet judges by the same time line. Lua numbers are doubles:
 * microseconds since 1970 (~1.7e15) stay exact integers below 2^53, and the limiter's TAT is
 * stored with 17 significant digits so it round-trips. */
#ifndef LINKD_SHARED_SCRIPTS_H
#define LINKD_SHARED_SCRIPTS_H

/* GCRA. KEYS[1] = TAT key; ARGV = interval_us, span_us (= burst * interval), max_wait_us.
 * Returns the wait in whole microseconds (rounded up, >= 0; the token is taken) or -1 (refused,
 * nothing changed). Same rule as lk_limiter_reserve. The key expires once the bucket is full
 * again (and a second more), so an idle limiter leaves nothing behind. */
#define SH_SCRIPT_GCRA                                                                             \
  "local interval = tonumber(ARGV[1])\n"                                                           \
  "local span = tonumber(ARGV[2])\n"                                                               \
  "local max_wait = tonumber(ARGV[3])\n"                                                           \
  "local t = redis.call('TIME')\n"                                                                 \
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                        \
  "local tat = tonumber(redis.call('GET', KEYS[1]) or '0')\n"                                      \
  "if tat < now then tat = now end\n"                                                              \
  "local nxt = tat + interval\n"                                                                   \
  "local wait = nxt - span - now\n"                                                                \
  "if wait < 0 then wait = 0 end\n"                                                                \
  "if wait > max_wait then return -1 end\n"                                                        \
  "redis.call('SET', KEYS[1], string.format('%.17g', nxt), 'PX',\n"                                \
  "           math.ceil((nxt - now) / 1000) + 1000)\n"                                             \
  "return math.ceil(wait)\n"

/* RATIO deposit. KEYS[1] = window hash; ARGV = width_us, buckets, count, ttl_ms. Adds `count`
 * requests to field q<bucket> of the current bucket; the first deposit of a bucket deletes the
 * fields that left the window. Returns the bucket's request count. */
#define SH_SCRIPT_DEPOSIT                                                                          \
  "local t = redis.call('TIME')\n"                                                                 \
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                        \
  "local b = math.floor(now / tonumber(ARGV[1]))\n"                                                \
  "local n = tonumber(ARGV[2])\n"                                                                  \
  "local v = redis.call('HINCRBY', KEYS[1], 'q' .. b, ARGV[3])\n"                                  \
  "if v == tonumber(ARGV[3]) then\n"                                                               \
  "  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do\n"                                        \
  "    if tonumber(string.sub(f, 2)) <= b - n then redis.call('HDEL', KEYS[1], f) end\n"           \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"                                                      \
  "return v\n"

/* RATIO retry. KEYS[1] = window hash; ARGV = width_us, buckets, gain (micro-retries per
 * request), reserve (micro-retries of the floor), cost (micro-retries per retry), ttl_ms.
 * Over the buckets still in the window: allowed when reserve + requests * gain - retries * cost
 * >= cost, and then counts the retry in r<bucket>. Returns 1 (granted) or 0. */
#define SH_SCRIPT_RETRY                                                                            \
  "local t = redis.call('TIME')\n"                                                                 \
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                        \
  "local b = math.floor(now / tonumber(ARGV[1]))\n"                                                \
  "local n = tonumber(ARGV[2])\n"                                                                  \
  "local req, ret = 0, 0\n"                                                                        \
  "local h = redis.call('HGETALL', KEYS[1])\n"                                                     \
  "for i = 1, #h, 2 do\n"                                                                          \
  "  local k = tonumber(string.sub(h[i], 2))\n"                                                    \
  "  if k and k > b - n then\n"                                                                    \
  "    if string.sub(h[i], 1, 1) == 'q' then req = req + tonumber(h[i + 1])\n"                     \
  "    else ret = ret + tonumber(h[i + 1]) end\n"                                                  \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "local cost = tonumber(ARGV[5])\n"                                                               \
  "if tonumber(ARGV[4]) + req * tonumber(ARGV[3]) - ret * cost >= cost then\n"                     \
  "  redis.call('HINCRBY', KEYS[1], 'r' .. b, 1)\n"                                                \
  "  redis.call('PEXPIRE', KEYS[1], ARGV[6])\n"                                                    \
  "  return 1\n"                                                                                   \
  "end\n"                                                                                          \
  "return 0\n"

#endif
