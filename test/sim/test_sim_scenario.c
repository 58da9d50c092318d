/* SPDX-License-Identifier: MIT */
/* The scenario parser: what it accepts, and that every error names its line. */
#include "sim/sim.h"

#include <linkd/error.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char base[] = "policy p attempts=3\n"
                           "tier t workers=2 service=exp:1ms\n"
                           "client c rate=10/s target=t policy=p\n";

static int parse(const char *text, sim_scenario *s, char *err, size_t cap) {
  return sim_scenario_parse(text, strlen(text), s, err, cap);
}

static void test_minimal(void **state) {
  (void)state;
  sim_scenario s;
  char err[256] = "";
  assert_int_equal(parse(base, &s, err, sizeof err), LK_OK);
  assert_int_equal(s.n_policies, 1);
  assert_int_equal(s.n_tiers, 1);
  assert_int_equal(s.n_groups, 1);
  assert_int_equal(s.policies[0].retry.max_attempts, 3);
  assert_int_equal(s.tiers[0].workers, 2);
  assert_int_equal(s.tiers[0].service.kind, SIM_D_EXP);
  assert_int_equal(s.tiers[0].service.a, 1000000);
  assert_true(s.groups[0].rate == 10.0);
  assert_int_equal(s.groups[0].target, 0);
  assert_int_equal(s.tiers[0].calls, -1);
}

static void test_everything(void **state) {
  (void)state;
  const char *text =
      "# a comment line\n"
      "seed 42   # trailing comment\n"
      "duration 3s\n"
      "drain 1s\n"
      "window 50ms\n"
      "network delay=normal:10ms:2ms\n"
      "policy up attempts=4 backoff=exponential base=10ms max=1s jitter=full timeout=300ms "
      "deadline=1s propagate=yes budget=token budget.tokens=20 budget.token_ratio=0.5 "
      "breaker=yes breaker.window=40 breaker.min=10 breaker.rate=25 breaker.open=50ms "
      "breaker.open_max=400ms breaker.probes=3 breaker.wait=yes limiter=500:20 retry_on=all\n"
      "policy down attempts=2 backoff=none propagate=yes budget=quota budget.capacity=100\n"
      "tier front servers=3 workers=8 service=choice:1ms/3,2ms/1 queue=50 discipline=lifo "
      "drop_expired=yes calls=back policy=down\n"
      "tier back workers=4 service=uniform:1ms:3ms drop_expired=short\n"
      "tier row kind=occ\n"
      "client open rate=100 arrivals=uniform target=front policy=up\n"
      "client shut loop=closed count=7 think=const:5ms ops=2 target=row policy=down\n"
      "trigger outage tier=back from=1s to=1.5s fail=refused\n"
      "trigger slowdown tier=front from=1s to=2s factor=3\n"
      "trigger capacity tier=back from=2s to=2.5s workers=1\n"
      "trigger burst client=open from=0.5s to=1s factor=2\n";
  sim_scenario s;
  char err[256] = "";
  assert_int_equal(parse(text, &s, err, sizeof err), LK_OK);
  assert_int_equal(s.seed, 42);
  assert_int_equal(s.duration, 3000000000);
  assert_int_equal(s.window, 50000000);
  assert_int_equal(s.net.kind, SIM_D_NORMAL);
  assert_int_equal(s.tiers[0].calls, 1);
  assert_int_equal(s.tiers[0].policy, 1);
  assert_int_equal(s.tiers[0].discipline, SIM_Q_LIFO);
  assert_int_equal(s.tiers[0].service.n, 2);
  assert_int_equal(s.tiers[0].service.cum[1], 4);
  assert_int_equal(s.tiers[2].kind, SIM_TIER_OCC);
  assert_true(s.tiers[0].drop_expired && !s.tiers[0].drop_short);
  assert_true(s.tiers[1].drop_expired && s.tiers[1].drop_short);
  assert_true(s.groups[1].closed);
  assert_int_equal(s.groups[1].count, 7);
  assert_int_equal(s.policies[0].budget, SIM_BUDGET_TOKEN);
  assert_true(s.policies[0].breaker_cfg.wait_backoff);
  assert_int_equal(s.policies[0].breaker_cfg.backoff.max, 400000000);
  assert_true(s.policies[0].limiter);
  assert_int_equal(s.triggers[0].fail, LK_F_CONNECT_REFUSED);
  assert_int_equal(s.triggers[3].group, 0);
}

typedef struct bad {
  const char *text;
  const char *msg; /* expected prefix of the message */
} bad;

/* Each text is refused (LK_EPARSE) with a message starting with its msg. */
static void expect_errors(const bad *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sim_scenario s;
    char err[256] = "";
    int rc = parse(cases[i].text, &s, err, sizeof err);
    if (rc != LK_EPARSE || strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0)
      fail_msg("case %zu: rc %d, message '%s', expected '%s...'", i, rc, err, cases[i].msg);
  }
}

static void test_errors_name_their_line(void **state) {
  (void)state;
  static const bad cases[] = {
      {"seed x\n", "line 1: seed: 'x' is not a whole number"},
      {"\n\nfrobnicate 3\n", "line 3: unknown directive 'frobnicate'"},
      {"duration 3\n", "line 1: duration:"},
      {"policy p attempts=0\n", "line 1: attempts: '0' is not a whole number in [1, "},
      {"policy p wobble=1\n", "line 1: policy: unknown key 'wobble'"},
      {"policy p base=10ms max=1ms\n", "line 1: policy p: "},
      {"policy p\npolicy p\n", "line 2: policy p defined twice"},
      {"policy p attempts\n", "line 1: 'attempts' is not key=value"},
      {"policy p jitter=purple\n", "line 1: jitter: 'purple' is not none"},
      {"policy p budget=ratio budget.percent=2000\n", "line 1: budget.percent:"},
      {"tier t workers=2\n", "line 1: tier t: needs service=DIST"},
      {"tier t service=exp\n", "line 1: service: 'exp' is not"},
      {"tier t service=uniform:3ms:1ms\n", "line 1: service: uniform:LOW:HIGH needs LOW <= HIGH"},
      {"tier t service=choice:1ms/1,2ms/1,3ms/1,4ms/1,5ms/1\n", "line 1: service: at most 4"},
      {"policy p\ntier a service=1ms calls=b policy=p\ntier b service=1ms\n"
       "client c rate=1 target=zz policy=p\n",
       "line 4: client c: target 'zz' is not a tier"},
      {"policy p\ntier a service=1ms calls=a policy=p\nclient c rate=1 target=a policy=p\n",
       "line 2: tier a calls 'a': a tier may call only a tier defined after it"},
      {"policy p\ntier a service=1ms calls=b\ntier b service=1ms\n"
       "client c rate=1 target=a policy=p\n",
       "line 2: tier a calls b: needs policy=NAME"},
      {"policy p\ntier a service=1ms\nclient c target=a policy=p\n",
       "line 3: client c: an open loop needs rate=N/s > 0"},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger slowdown tier=a from=2s to=1s factor=2\n",
       "line 4: trigger: to= must be after from="},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger burst client=nobody from=1s to=2s factor=2\n",
       "line 4: trigger burst: client 'nobody'"},
      /* a reference left out is named as the key needed, not as '' */
      {"policy p\ntier a service=1ms\nclient c rate=1 policy=p\n",
       "line 3: client c: needs target=TIER"},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a\n",
       "line 3: client c: needs policy=NAME"},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger burst from=1s to=2s factor=2\n",
       "line 4: trigger burst: needs client=GROUP"},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger outage from=1s to=2s\n",
       "line 4: trigger: needs tier=TIER"},
      {"policy bad=name\n", "line 1: policy NAME key=value"},
      {"policy p timeout=0s\n", "line 1: timeout: must be > 0"},
      {"window 1ns\n", "line 1: window: at least 1us"},
      {"policy p\ntier u service=1ms workers=2 workers=3\n", "line 2: tier: workers= given twice"},
      /* either order: the breaker's own keys are named, not its backoff's */
      {"policy q breaker=yes breaker.open=10s breaker.open_max=1s\n",
       "line 1: policy q: breaker.open_max (1s) is shorter than breaker.open (10s)"},
      {"policy q breaker=yes breaker.open_max=1s breaker.open=10s\n",
       "line 1: policy q: breaker.open_max (1s) is shorter than breaker.open (10s)"},
      {"network speed=3\n", "line 1: network: unknown key 'speed=3'"},
      {"duration 1h\ndrain 0s\nwindow 100ms\npolicy p\ntier a service=1ms\n"
       "client c rate=1 target=a policy=p\n",
       "line 3: more than 19999 windows"},
      {"duration 1s\nwindow 10s\npolicy p\ntier a service=1ms\n"
       "client c rate=1 target=a policy=p\n",
       "line 2: window longer than the duration"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
}

/* What the file lacks as a whole has no line to name: the message says what is needed. */
static void test_file_level_errors(void **state) {
  (void)state;
  sim_scenario s;
  char err[256] = "";
  assert_int_equal(parse("policy p\ntier a service=1ms\n", &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "no client: a scenario needs at least one `client` line");
  assert_int_equal(parse("policy p\n", &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "no tier: a scenario needs at least one `tier` line");
  assert_int_equal(parse("", &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "no tier: a scenario needs at least one `tier` line");
  /* through a file: its name, then the message, and no "line 0" */
  char path[] = "/tmp/linkd-sim-scenario-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("seed 3\npolicy p\n", f);
  fclose(f);
  char msg[600] = "", want[600];
  assert_int_equal(sim_scenario_load(path, &s, msg, sizeof msg), LK_EPARSE);
  snprintf(want, sizeof want, "%s: no tier: a scenario needs at least one `tier` line", path);
  assert_string_equal(msg, want);
  remove(path);
}

/* A key that has no effect where it is written is refused, naming its line, the key and why;
 * the same key where it applies is accepted, wherever it is on the line. */
static void test_keys_that_do_not_apply(void **state) {
  (void)state;
  static const char tail[] = "tier t service=1ms\nclient c rate=10/s target=t policy=p\n";
  static const bad cases[] = {
      {"policy p attempts=3 breaker.window=50\n",
       "line 1: policy p: breaker.window applies only with breaker=yes"},
      {"policy p breaker=no breaker.open=1s\n",
       "line 1: policy p: breaker.open applies only with breaker=yes"},
      {"policy p breaker.wait=yes\n",
       "line 1: policy p: breaker.wait applies only with breaker=yes"},
      {"policy p budget.percent=5\n",
       "line 1: policy p: budget.percent applies only with budget=ratio (the policy's budget is "
       "none)"},
      {"policy p budget=token budget.ttl=5s\n",
       "line 1: policy p: budget.ttl applies only with budget=ratio (the policy's budget is "
       "token)"},
      {"policy p budget.tokens=5 budget=ratio\n",
       "line 1: policy p: budget.tokens applies only with budget=token (the policy's budget is "
       "ratio)"},
      {"policy p budget=none budget.capacity=10\n",
       "line 1: policy p: budget.capacity applies only with budget=quota"},
      {"policy p attempts=1 base=10ms\n",
       "line 1: policy p: base does not apply with attempts=1 (there is no retry)"},
      {"policy p budget=ratio attempts=1\n",
       "line 1: policy p: budget does not apply with attempts=1"},
      {"policy p retry_on=all attempts=1\n",
       "line 1: policy p: retry_on does not apply with attempts=1"},
      {"policy p base=10ms backoff=none\n",
       "line 1: policy p: base does not apply with backoff=none (the next attempt at once)"},
      {"policy p backoff=none jitter=full\n",
       "line 1: policy p: jitter does not apply with backoff=none"},
      {"policy p backoff=linear multiplier=3\n",
       "line 1: policy p: multiplier applies only with backoff=exponential"},
      {"policy p multiplier=3 jitter=decorrelated\n",
       "line 1: policy p: multiplier does not apply with jitter=decorrelated"},
      {"policy p jitter=full ratio=0.2\n",
       "line 1: policy p: ratio (of the jitter) applies only with jitter=symmetric"},
      {"policy p\ntier r kind=occ workers=4\n",
       "line 2: tier r: workers does not apply to kind=occ (an occ tier has no workers and no "
       "queue)"},
      {"policy p\ntier r service=1ms kind=occ\n",
       "line 2: tier r: service does not apply to kind=occ"},
      {"policy p\ntier r kind=occ queue=5\n", "line 2: tier r: queue does not apply to kind=occ"},
      {"policy p\ntier r discipline=lifo service=1ms queue=0\n",
       "line 2: tier r: discipline does not apply with queue=0"},
      {"policy p\ntier r drop_expired=yes service=1ms queue=0\n",
       "line 2: tier r: drop_expired=yes does not apply with queue=0"},
      {"policy p\ntier t service=1ms\nclient c loop=closed count=2 rate=10/s target=t policy=p\n",
       "line 3: client c: rate applies only with loop=open (this group is loop=closed)"},
      {"policy p\ntier t service=1ms\nclient c arrivals=uniform loop=closed target=t policy=p\n",
       "line 3: client c: arrivals applies only with loop=open"},
      {"policy p\ntier t service=1ms\nclient c rate=10/s count=5 target=t policy=p\n",
       "line 3: client c: count applies only with loop=closed (this group is loop=open, the "
       "default)"},
      {"policy p\ntier t service=1ms\nclient c loop=open think=1ms rate=1 target=t policy=p\n",
       "line 3: client c: think applies only with loop=closed"},
      {"policy p\ntier t service=1ms\nclient c ops=3 rate=1 target=t policy=p\n",
       "line 3: client c: ops applies only with loop=closed"},
      {"trigger outage tier=t from=1s to=2s factor=2\n",
       "line 1: trigger outage: factor does not apply (its keys: from, to, tier, fail)"},
      {"trigger slowdown tier=t from=1s to=2s factor=2 workers=1\n",
       "line 1: trigger slowdown: workers does not apply"},
      {"trigger capacity tier=t from=1s to=2s workers=1 fail=503\n",
       "line 1: trigger capacity: fail does not apply"},
      {"trigger burst client=c tier=t from=1s to=2s factor=2\n",
       "line 1: trigger burst: tier does not apply (its keys: from, to, client, factor)"},
      {"trigger slowdown client=c from=1s to=2s factor=2\n",
       "line 1: trigger slowdown: client does not apply"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
  /* Where they apply, in any order on the line. */
  static const char *const good[] = {
      "policy p breaker.window=50 breaker.min=10 breaker.wait=yes breaker=yes\n",
      "policy p budget.percent=5 budget.ttl=5s budget.min_per_sec=3 budget=ratio\n",
      "policy p budget.tokens=5 budget.token_ratio=0.5 budget=token\n",
      "policy p budget.capacity=10 budget=quota\n",
      "policy p attempts=1 timeout=1s deadline=2s propagate=yes breaker=yes limiter=10:1\n",
      "policy p backoff=none attempts=3 retry_on=all\n",
      "policy p multiplier=3 ratio=0.2 base=10ms max=1s\n",
      "policy p backoff=fixed base=100ms max=100ms jitter=none resolution=1us\n",
      "policy p jitter=decorrelated backoff=exponential base=5ms\n",
      "policy p\ntier r kind=occ servers=3\ntier q queue=0 drop_expired=short service=1ms\n",
      "policy p\ntier q queue=0 drop_expired=no service=1ms\n",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", good[i], tail);
    sim_scenario s;
    char err[256] = "";
    if (parse(text, &s, err, sizeof err) != LK_OK)
      fail_msg("good %zu: '%s'", i, err);
  }
  static const char groups[] = "policy p\ntier t service=1ms\n"
                               "client o arrivals=uniform rate=5/s loop=open target=t policy=p\n"
                               "client k think=1ms count=3 ops=2 loop=closed target=t policy=p\n"
                               "trigger outage from=1s to=2s tier=t fail=none\n"
                               "trigger slowdown tier=t from=1s to=2s factor=2\n"
                               "trigger capacity tier=t from=1s to=2s workers=0\n"
                               "trigger burst client=o from=1s to=2s factor=2\n";
  sim_scenario s;
  char err[256] = "";
  if (parse(groups, &s, err, sizeof err) != LK_OK)
    fail_msg("groups: '%s'", err);
  assert_true(s.groups[1].closed && s.groups[1].count == 3 && s.groups[1].ops == 2);
  assert_true(!s.groups[0].closed && s.groups[0].rate == 5.0 && !s.groups[0].poisson);
}

/* A UTF-8 byte order mark starting the file is not part of line 1; anywhere else it is text. */
static void test_byte_order_mark(void **state) {
  (void)state;
  sim_scenario s;
  char err[256] = "";
  char text[512];
  snprintf(text, sizeof text, "\xef\xbb\xbfseed 7\n%s", base);
  assert_int_equal(parse(text, &s, err, sizeof err), LK_OK);
  assert_int_equal(s.seed, 7);
  assert_int_equal(s.n_tiers, 1);
  /* an error still names the first line as line 1 */
  assert_int_equal(parse("\xef\xbb\xbfseed x\n", &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "line 1: seed: 'x' is not a whole number");
  /* a BOM alone is an empty file */
  assert_int_equal(parse("\xef\xbb\xbf", &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "no tier: a scenario needs at least one `tier` line");
  /* one at the start of another line, or a second one, is not skipped */
  snprintf(text, sizeof text, "seed 7\n\xef\xbb\xbf%s", base);
  assert_int_equal(parse(text, &s, err, sizeof err), LK_EPARSE);
  assert_true(strncmp(err, "line 2: unknown directive", 25) == 0);
  snprintf(text, sizeof text, "\xef\xbb\xbf\xef\xbb\xbfseed 7\n%s", base);
  assert_int_equal(parse(text, &s, err, sizeof err), LK_EPARSE);
  assert_true(strncmp(err, "line 1: unknown directive", 25) == 0);
  /* never read past len: a cut BOM is not one */
  assert_int_equal(sim_scenario_parse("\xef\xbb", 2, &s, err, sizeof err), LK_EPARSE);
}

static void test_nul_and_long_lines(void **state) {
  (void)state;
  sim_scenario s;
  char err[256] = "";
  const char with_nul[] = "seed 1\nse\0ed 2\n";
  assert_int_equal(sim_scenario_parse(with_nul, sizeof with_nul - 1, &s, err, sizeof err),
                   LK_EPARSE);
  assert_string_equal(err, "line 2: NUL byte");
  size_t n = 5000;
  char *longline = malloc(n + 1);
  memset(longline, 'x', n);
  longline[n] = '\0';
  assert_int_equal(sim_scenario_parse(longline, n, &s, err, sizeof err), LK_EPARSE);
  assert_string_equal(err, "line 1: longer than 4095 bytes");
  free(longline);
  /* Never reads past len: the last directive is cut where len ends. */
  assert_int_equal(sim_scenario_parse(base, strlen(base) - 20, &s, err, sizeof err), LK_EPARSE);
}

/* A capacity trigger names its number of workers: left out, it was 0 (nothing starts while it
 * lasts) without a word. 0 written out is still 0. */
static void test_capacity_needs_workers(void **state) {
  (void)state;
  static const bad cases[] = {
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger capacity tier=a from=1s to=2s\n",
       "line 4: trigger capacity: needs workers=N (workers per server while it lasts; 0: no "
       "attempt starts)"},
      {"policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
       "trigger slowdown tier=a from=1s to=2s factor=2\n\n"
       "trigger capacity from=1s to=2s tier=a\n",
       "line 6: trigger capacity: needs workers=N"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
  sim_scenario s;
  char err[256] = "";
  assert_int_equal(parse("policy p\ntier a service=1ms workers=4\nclient c rate=1 target=a "
                         "policy=p\ntrigger capacity tier=a from=1s to=2s workers=0\n",
                         &s, err, sizeof err),
                   LK_OK);
  assert_int_equal(s.triggers[0].workers, 0);
  assert_int_equal(parse("policy p\ntier a service=1ms\nclient c rate=1 target=a policy=p\n"
                         "trigger capacity workers=8 tier=a from=1s to=2s\n",
                         &s, err, sizeof err),
                   LK_OK);
  assert_int_equal(s.triggers[0].workers, 8);
}

/* drop_expired acts only on attempts whose caller's policy propagates its deadline. Where no run
 * of the file could have one (no policy propagates, or the tier is called only by tiers whose
 * policies do not), the key is refused at the tier's line; where a --compare run could (a client
 * group targets the tier and some policy propagates), it is accepted. */
static void test_drop_expired_needs_propagation(void **state) {
  (void)state;
  static const bad cases[] = {
      {"policy p attempts=3\ntier t service=1ms drop_expired=yes\n"
       "client c rate=10/s target=t policy=p\n",
       "line 2: tier t: drop_expired=yes acts only on attempts whose caller's policy has "
       "propagate=yes, and no policy has it"},
      {"policy p propagate=no\ntier t service=1ms drop_expired=short queue=0\n"
       "client c rate=10/s target=t policy=p\n",
       "line 2: tier t: drop_expired=short acts only on attempts whose caller's policy has "
       "propagate=yes, and no policy has it"},
      /* a tier below, called with a policy that does not propagate */
      {"policy up propagate=yes\npolicy down\n"
       "tier a service=1ms calls=b policy=down\ntier b service=1ms drop_expired=yes\n"
       "client c rate=10/s target=a policy=up\n",
       "line 4: tier b: drop_expired=yes acts only on attempts whose caller's policy has "
       "propagate=yes, and tier a calls it with policy down, which has not"},
      {"policy up propagate=yes\npolicy down\npolicy side\n"
       "tier a service=1ms calls=c policy=down\ntier b service=1ms calls=c policy=side\n"
       "tier c service=1ms drop_expired=short\n"
       "client x rate=10/s target=a policy=up\nclient y rate=10/s target=b policy=up\n",
       "line 6: tier c: drop_expired=short acts only on attempts whose caller's policy has "
       "propagate=yes, and tier a calls it with policy down, which has not (nor have the other "
       "callers' policies)"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
  static const char *const good[] = {
      /* the client's own policy propagates */
      "policy p propagate=yes\ntier t service=1ms drop_expired=yes\n"
      "client c rate=10/s target=t policy=p\n",
      /* another policy does, which --compare puts the client on (examples/sim/storm.scn) */
      "policy naive\npolicy linkd propagate=yes\ntier t service=1ms drop_expired=short\n"
      "client c rate=10/s target=t policy=naive\n",
      /* one of the calling tiers' policies does */
      "policy up\npolicy down propagate=yes\npolicy side\n"
      "tier a service=1ms calls=c policy=side\ntier b service=1ms calls=c policy=down\n"
      "tier c service=1ms drop_expired=yes\nclient x rate=10/s target=a policy=up\n"
      "client y rate=10/s target=b policy=up\n",
      /* called with a policy that does not, but also targeted by clients, and one policy does */
      "policy up propagate=yes\npolicy down\n"
      "tier a service=1ms calls=b policy=down\ntier b service=1ms drop_expired=yes\n"
      "client c rate=10/s target=a policy=up\nclient d rate=10/s target=b policy=down\n",
      /* a tier nothing calls: its keys do nothing, drop_expired no more than the others */
      "policy p\ntier t service=1ms\ntier idle service=1ms drop_expired=yes\n"
      "client c rate=10/s target=t policy=p\n",
      "policy p\ntier t service=1ms drop_expired=no\nclient c rate=10/s target=t policy=p\n",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    sim_scenario s;
    char err[256] = "";
    if (parse(good[i], &s, err, sizeof err) != LK_OK)
      fail_msg("good %zu: '%s'", i, err);
  }
}

static void test_examples_parse(void **state) {
  (void)state;
  static const char *const files[] = {"storm.scn", "brooker.scn", "metastable.scn", "tiers.scn",
                                      "fleet.scn"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/sim/%s", LINKD_SOURCE_DIR, files[i]);
    sim_scenario s;
    char err[600] = "";
    if (sim_scenario_load(path, &s, err, sizeof err) != LK_OK)
      fail_msg("%s", err);
  }
  sim_scenario s;
  char err[600] = "";
  assert_int_equal(sim_scenario_load("/nonexistent/x.scn", &s, err, sizeof err), LK_ESYS);
  assert_non_null(strstr(err, "/nonexistent/x.scn"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal),
      cmocka_unit_test(test_everything),
      cmocka_unit_test(test_errors_name_their_line),
      cmocka_unit_test(test_file_level_errors),
      cmocka_unit_test(test_keys_that_do_not_apply),
      cmocka_unit_test(test_byte_order_mark),
      cmocka_unit_test(test_nul_and_long_lines),
      cmocka_unit_test(test_capacity_needs_workers),
      cmocka_unit_test(test_drop_expired_needs_propagation),
      cmocka_unit_test(test_examples_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
