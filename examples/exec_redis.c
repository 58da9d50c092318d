/* SPDX-License-Identifier: MIT */
/* exec_redis: one Redis command (hiredis) run through liblinkd's executor: a deadline for the
 * whole call, a timeout per attempt, retries with backoff, and every hiredis error classified by
 * whether the command can have reached the server.
 *
 *   exec_redis [-v] [-i] [-d DEADLINE_MS] [-t ATTEMPT_MS] [-n ATTEMPTS] HOST PORT ARG...
 *     -v  print the attempt timeline to stderr
 *     -i  the command is idempotent (GET, SET without side effects on retry): retry it even
 *         after it was sent
 *     -d  the whole call's deadline (default 3000), -t each attempt's (default 800), -n the
 *         attempts (default 4, at most 64)
 * Prints the reply (a string, an integer, or each element of an array) to stdout. Exit status:
 * 0 success, 1 the call failed (typed error on stderr), 2 usage.
 *
 * Classification:
 *   cannot connect: refused                   CONNECT_REFUSED    not sent: always retried
 *   cannot connect: timeout                   CONNECT_TIMEOUT    not sent
 *   cannot connect: anything else             CONNECT_FAILED     not sent
 *   the command could not be written          RESET_BEFORE_SEND  not sent
 *   connection closed after it was written    RESET_AFTER_SEND   sent: retried only with -i
 *   no reply within the attempt's timeout     READ_TIMEOUT       sent: retried only with -i
 *   -LOADING, -BUSY, -MASTERDOWN, -TRYAGAIN,  SERVER_5XX, not    the server refused before
 *     -CLUSTERDOWN, -OOM                      sent               running it: safe to repeat
 *   any other error reply (-ERR, -WRONGTYPE,  CLIENT_4XX         permanent: never retried
 *     -NOSCRIPT, -READONLY, ...)
 */
#include <linkd/exec.h>

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* hiredis 1.0 has REDIS_ERR_TIMEOUT; 0.14 (Debian 12) reports a timeout as an I/O error with
 * errno EAGAIN ("Resource temporarily unavailable") or "Connection timed out". */
static bool is_timeout(const redisContext *c) {
#ifdef REDIS_ERR_TIMEOUT
  if (c->err == REDIS_ERR_TIMEOUT)
    return true;
#endif
  return c->err == REDIS_ERR_IO &&
         (strstr(c->errstr, "temporarily unavailable") || strstr(c->errstr, "timed out"));
}

typedef struct command {
  const char *host;
  int port;
  int argc;
  const char **argv;
  redisReply *reply; /* the successful attempt's reply */
  char last_error[256];
} command;

static struct timeval tv_of(int64_t ns) {
  if (ns < LK_NS_PER_MS)
    ns = LK_NS_PER_MS; /* hiredis treats a zero timeout as "none" */
  struct timeval tv = {(time_t)(ns / LK_NS_PER_S), (suseconds_t)(ns % LK_NS_PER_S / 1000)};
  return tv;
}

/* Error replies the server sends without having run the command. */
static bool refused_before_running(const char *s) {
  static const char *const prefixes[] = {"LOADING",  "BUSY",        "MASTERDOWN",
                                         "TRYAGAIN", "CLUSTERDOWN", "OOM"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t n = strlen(prefixes[i]);
    if (!strncmp(s, prefixes[i], n) && (s[n] == ' ' || s[n] == '\0'))
      return true;
  }
  return false;
}

static void attempt(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  command *cmd = ctx;
  cmd->last_error[0] = '\0';
  out->retry_after = -1;
  out->sent = false;
  redisContext *c = redisConnectWithTimeout(cmd->host, cmd->port, tv_of(a->timeout));
  if (!c || c->err) {
    bool timed_out = c && is_timeout(c);
    bool refused = c && c->err == REDIS_ERR_IO && strstr(c->errstr, "refused");
    out->failure = refused     ? LK_F_CONNECT_REFUSED
                   : timed_out ? LK_F_CONNECT_TIMEOUT
                               : LK_F_CONNECT_FAILED;
    snprintf(cmd->last_error, sizeof cmd->last_error, "%s", c ? c->errstr : "no memory");
    redisFree(c);
    return;
  }
  /* the rest of this attempt's time, for writing and reading */
  int64_t left = a->end_at - lk_now_ns();
  redisSetTimeout(c, tv_of(left));
  if (redisAppendCommandArgv(c, cmd->argc, cmd->argv, NULL) != REDIS_OK) {
    out->failure = LK_F_RESET_BEFORE_SEND;
    goto done;
  }
  int written = 0;
  while (!written) {
    if (redisBufferWrite(c, &written) != REDIS_OK) {
      /* not fully written: the server cannot have run a command it has not read */
      out->failure = is_timeout(c) ? LK_F_WRITE_TIMEOUT : LK_F_RESET_BEFORE_SEND;
      goto done;
    }
  }
  out->sent = true;
  redisReply *r = NULL;
  if (redisGetReply(c, (void **)&r) != REDIS_OK) {
    out->failure = is_timeout(c) ? LK_F_READ_TIMEOUT : LK_F_RESET_AFTER_SEND;
    goto done;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    if (refused_before_running(r->str)) {
      out->failure = LK_F_SERVER_5XX;
      out->sent = false;
    } else {
      out->failure = LK_F_CLIENT_4XX;
    }
    snprintf(cmd->last_error, sizeof cmd->last_error, "%s", r->str);
    freeReplyObject(r);
    goto done;
  }
  out->failure = LK_F_NONE;
  if (cmd->reply)
    freeReplyObject(cmd->reply);
  cmd->reply = r;
done:
  if (out->failure != LK_F_NONE && !cmd->last_error[0])
    snprintf(cmd->last_error, sizeof cmd->last_error, "%s", c->errstr);
  redisFree(c);
}

/* The reply types every hiredis has; RESP3 types of newer ones print their text if any. */
static void print_reply(const redisReply *r) {
  switch (r->type) {
  case REDIS_REPLY_INTEGER: printf("%lld\n", r->integer); break;
  case REDIS_REPLY_NIL: printf("(nil)\n"); break;
  case REDIS_REPLY_ARRAY:
    for (size_t i = 0; i < r->elements; i++)
      print_reply(r->element[i]);
    break;
  default:
    if (r->str)
      printf("%.*s\n", (int)r->len, r->str);
    break;
  }
}

int main(int argc, char **argv) {
  bool verbose = false, idempotent = false;
  long deadline_ms = 3000, attempt_ms = 800, attempts = 4;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-v"))
      verbose = true;
    else if (!strcmp(argv[i], "-i"))
      idempotent = true;
    else if (!strcmp(argv[i], "-d") && i + 1 < argc)
      deadline_ms = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc)
      attempt_ms = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc)
      attempts = strtol(argv[++i], NULL, 10);
    else
      break;
  }
  long port = argc - i >= 3 ? strtol(argv[i + 1], NULL, 10) : 0;
  if (argc - i < 3 || port <= 0 || port > 65535 || deadline_ms <= 0 || attempt_ms <= 0 ||
      attempts < 1 || attempts > 64) {
    fprintf(stderr, "usage: exec_redis [-v] [-i] [-d DEADLINE_MS] [-t ATTEMPT_MS] [-n ATTEMPTS] "
                    "HOST PORT ARG...\n");
    return 2;
  }
  command cmd = {argv[i], (int)port, argc - i - 2, (const char **)argv + i + 2, NULL, ""};

  lk_exec_policy pol;
  lk_exec_policy_init_default(&pol);
  pol.deadline = LK_MS(deadline_ms);
  pol.attempt_timeout = LK_MS(attempt_ms);
  pol.idempotent = idempotent;
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = (int)attempts;
  rc.backoff.base = LK_MS(100);
  rc.backoff.max = LK_MS(500);
  const char *why = NULL;
  if (lk_retry_policy_init(&pol.retry, &rc, &why) != LK_OK) {
    fprintf(stderr, "exec_redis: %s\n", why);
    return 2;
  }

  lk_exec_attempt_info timeline[64];
  lk_exec_result res = {.timeline = timeline, .timeline_cap = 64};
  int err = lk_exec_run(&pol, attempt, &cmd, NULL, &res);

  if (verbose) {
    for (int k = 0; k < res.attempts && k < 64; k++) {
      const lk_exec_attempt_info *a = &timeline[k];
      fprintf(stderr, "attempt %d start %.1fms took %.1fms %s sent=%d -> %s\n", a->number,
              (double)a->start / 1e6, (double)a->duration / 1e6, lk_failure_name(a->failure),
              a->sent, a->reason);
    }
  }
  if (err != LK_OK) {
    fprintf(stderr, "exec_redis: %s (%s): %s; last error: %s\n", lk_err_name(err), res.stop,
            lk_failure_name(res.failure), cmd.last_error[0] ? cmd.last_error : "none");
    if (cmd.reply)
      freeReplyObject(cmd.reply);
    return 1;
  }
  print_reply(cmd.reply);
  freeReplyObject(cmd.reply);
  return 0;
}
