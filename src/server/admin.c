/* SPDX-License-Identifier: MIT */
/* admin.c: the admin listener (a separate port): fault rules at run time and loan statistics
 * that make duplicate applications visible. Never subject to fault injection. */
#include "server_impl.h"
#include "strict.h"
#include "util.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMIN_BODY_MAX (64 * 1024)
#define GROUPS_MAX 10000

typedef struct admin_req {
  char *body;
  size_t len;
  bool too_big;
} admin_req;

/* `allow`: the Allow header of a 405, else NULL. */
static enum MHD_Result reply_allow(struct MHD_Connection *c, int status, json_t *o,
                                   const char *allow) {
  char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!txt)
    return MHD_NO;
  size_t n = strlen(txt);
  struct MHD_Response *m = MHD_create_response_from_buffer(n, txt, MHD_RESPMEM_MUST_FREE);
  if (!m) {
    free(txt);
    return MHD_NO;
  }
  MHD_add_response_header(m, "Content-Type", "application/json");
  if (allow)
    MHD_add_response_header(m, "Allow", allow);
  enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, m);
  MHD_destroy_response(m);
  return rc;
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, json_t *o) {
  return reply_allow(c, status, o, NULL);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, int status, const char *code,
                                   const char *msg) {
  return reply(c, status,
               json_pack("{s:s,s:s,s:i}", "error", code, "message", msg, "status", status));
}

static json_t *rule_json(const lk_fault_rule *r) {
  return json_pack("{s:i,s:s,s:s,s:s,s:f,s:I,s:I,s:I,s:I}", "id", r->id, "spec", r->spec, "route",
                   r->route, "kind", lk_fault_kind_name(r->act.kind), "p", r->p, "count",
                   (json_int_t)r->count, "skip", (json_int_t)r->skip, "matched",
                   (json_int_t)r->matched, "fired", (json_int_t)r->fired);
}

static enum MHD_Result list_faults(lk_server *s, struct MHD_Connection *c) {
  static lk_fault_rule rules[LK_FAULT_RULES_MAX]; /* the admin listener has a single thread */
  int n = lk_faults_snapshot(s->faults, rules, LK_FAULT_RULES_MAX);
  json_t *arr = json_array();
  for (int i = 0; i < n && i < LK_FAULT_RULES_MAX; i++)
    json_array_append_new(arr, rule_json(&rules[i]));
  return reply(c, 200,
               json_pack("{s:I,s:o}", "seed", (json_int_t)lk_faults_seed(s->faults), "rules", arr));
}

/* The first member of JSON object o not named in `allowed` (NULL-terminated), or NULL: extra
 * fields are refused as the main API refuses them, not ignored. */
static const char *unknown_field(json_t *o, const char *const *allowed) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    const char *const *p = allowed;
    while (*p && strcmp(*p, k))
      p++;
    if (!*p)
      return k;
  }
  return NULL;
}

/* Text body "k=v,..." or JSON {"rule":"k=v,..."}; false with the error's code and message. */
static bool rule_from_body(const admin_req *a, lk_fault_rule *rule, const char **code, char *err,
                           size_t cap) {
  char spec[LK_FAULT_SPEC_MAX];
  *code = "bad_rule";
  if (a->len && a->body[0] == '{') {
    json_t *o = json_loadb(a->body, a->len, JSON_REJECT_DUPLICATES, NULL);
    static const char *const fields[] = {"rule", NULL};
    const char *extra = json_is_object(o) ? unknown_field(o, fields) : NULL;
    if (extra) {
      *code = "unknown_field";
      snprintf(err, cap, "%.100s: not a field of this resource", extra);
      json_decref(o);
      return false;
    }
    const char *t = json_string_value(json_object_get(o, "rule"));
    if (!t || strlen(t) >= sizeof spec) {
      json_decref(o);
      snprintf(err, cap, "expected {\"rule\": \"route=...,kind=...\"}");
      return false;
    }
    snprintf(spec, sizeof spec, "%s", t);
    json_decref(o);
  } else {
    size_t n = a->len;
    while (n && (a->body[n - 1] == '\n' || a->body[n - 1] == '\r' || a->body[n - 1] == ' '))
      n--;
    if (n >= sizeof spec) {
      snprintf(err, cap, "rule too long");
      return false;
    }
    /* A NUL would silently cut the rule short: the text after it is not ignored, but refused. */
    if (n && memchr(a->body, '\0', n)) {
      snprintf(err, cap, "a NUL byte in the rule");
      return false;
    }
    memcpy(spec, a->body ? a->body : "", n);
    spec[n] = '\0';
  }
  return lk_fault_rule_parse(spec, rule, err, cap) == LK_OK;
}

static enum MHD_Result add_fault(lk_server *s, struct MHD_Connection *c, const admin_req *a) {
  lk_fault_rule rule;
  char err[200];
  const char *code;
  if (!rule_from_body(a, &rule, &code, err, sizeof err))
    return reply_error(c, 400, code, err);
  int id = lk_faults_add(s->faults, &rule);
  if (id < 0) { /* LK_ETOOBIG, the only failure */
    snprintf(err, sizeof err, "at most %d rules; remove one first", LK_FAULT_RULES_MAX);
    return reply_error(c, 409, "too_many_rules", err);
  }
  return reply(c, 201, json_pack("{s:i}", "id", id));
}

/* {"seed": N?, "rules": ["spec", ...]}: validated as a whole, then swapped in. */
static enum MHD_Result replace_faults(lk_server *s, struct MHD_Connection *c, const admin_req *a) {
  json_error_t je;
  json_t *o = json_loadb(a->body ? a->body : "", a->len, JSON_REJECT_DUPLICATES, &je);
  json_t *rules = json_object_get(o, "rules");
  json_t *seed = json_object_get(o, "seed");
  static const char *const fields[] = {"seed", "rules", NULL};
  const char *extra = json_is_object(o) ? unknown_field(o, fields) : NULL;
  if (extra) {
    char msg[160];
    snprintf(msg, sizeof msg, "%.100s: not a field of this resource", extra);
    json_decref(o);
    return reply_error(c, 400, "unknown_field", msg);
  }
  /* A body with only a seed must not wipe the rules by accident; [] clears them on purpose. */
  if (json_is_object(o) && !rules) {
    json_decref(o);
    return reply_error(c, 400, "missing_field", "rules: required ([] removes every rule)");
  }
  if (!json_is_object(o) || !json_is_array(rules) ||
      (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0))) {
    json_decref(o);
    return reply_error(c, 400, "bad_body",
                       "expected {\"seed\": N (optional), \"rules\": [\"route=...\", ...]}");
  }
  size_t n = json_array_size(rules);
  if (n > LK_FAULT_RULES_MAX) {
    char msg[96];
    snprintf(msg, sizeof msg, "at most %d rules, not %zu", LK_FAULT_RULES_MAX, n);
    json_decref(o);
    return reply_error(c, 400, "too_many_rules", msg);
  }
  lk_fault_rule *parsed = calloc(n ? n : 1, sizeof *parsed);
  if (!parsed) {
    json_decref(o);
    return MHD_NO;
  }
  for (size_t i = 0; i < n; i++) {
    const char *t = json_string_value(json_array_get(rules, i));
    char err[200];
    if (!t || lk_fault_rule_parse(t, &parsed[i], err, sizeof err) != LK_OK) {
      char msg[300];
      snprintf(msg, sizeof msg, "rule %zu: %s", i, t ? err : "not a string");
      free(parsed);
      json_decref(o);
      return reply_error(c, 400, "bad_rule", msg);
    }
  }
  int id[LK_FAULT_RULES_MAX];
  /* One swap: requests never see the rule set empty or half replaced. */
  lk_faults_replace(s->faults, parsed, n, seed != NULL,
                    seed ? (uint64_t)json_integer_value(seed) : 0, id);
  json_t *ids = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(ids, json_integer(id[i]));
  free(parsed);
  json_decref(o);
  return reply(c, 200, json_pack("{s:o}", "ids", ids));
}

static int group_cb(void *arg, const char *tenant, int64_t book_id, const char *id, int64_t count) {
  json_array_append_new(arg, json_pack("{s:s,s:I,s:s,s:I}", "tenant", tenant, "book_id",
                                       (json_int_t)book_id, "id", id, "count", (json_int_t)count));
  return 0;
}

static int tenant_cb(void *arg, const char *tenant, const lk_tenant_totals *t) {
  json_object_set_new(arg, tenant,
                      json_pack("{s:I,s:I,s:I,s:I}", "loans", (json_int_t)t->loans, "keyed_loans",
                                (json_int_t)t->keyed_loans, "duplicate_loans_by_request_id",
                                (json_int_t)t->duplicate_by_request_id, "duplicate_loans_by_key",
                                (json_int_t)t->duplicate_by_key));
  return 0;
}

#define ST(f) (json_int_t) atomic_load(&s->stats.f)

static enum MHD_Result stats(lk_server *s, struct MHD_Connection *c) {
  const char *all;
  if (query_lookup(c, "groups", &all) > 1)
    return reply_error(c, 400, "bad_query", "groups is given more than once; give it once");
  lk_store_counts counts;
  if (lk_store_counts_get(s->store, &counts) != LK_OK)
    return reply_error(c, 500, "storage_error", "cannot read counts");
  bool only_dupes = !(all && !strcmp(all, "all"));
  json_t *by_rid = json_array(), *by_key = json_array(), *tenants = json_object();
  int rc = lk_store_loan_groups(s->store, false, only_dupes, GROUPS_MAX, group_cb, by_rid);
  if (rc == LK_OK)
    rc = lk_store_loan_groups(s->store, true, only_dupes, GROUPS_MAX, group_cb, by_key);
  if (rc == LK_OK)
    rc = lk_store_tenant_totals(s->store, tenant_cb, tenants);
  if (rc != LK_OK) {
    json_decref(by_rid);
    json_decref(by_key);
    json_decref(tenants);
    return reply_error(c, 500, "storage_error", "cannot read loan groups");
  }
  json_t *server = json_pack(
      "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "requests", ST(requests), "replays",
      ST(replays), "key_conflicts", ST(key_conflicts), "key_mismatches", ST(key_mismatches),
      "key_missing", ST(key_missing), "deadline_expired_on_arrival",
      ST(deadline_expired_on_arrival), "deadline_expired_in_flight", ST(deadline_expired_in_flight),
      "faults_injected", ST(faults_injected), "loans_applied", ST(loans_applied), "write_errors",
      ST(write_errors), "requests_in_flight", (json_int_t)atomic_load(&s->active), "keys_executing",
      (json_int_t)lk_inflight_count(s->inflight));
  size_t depth, depth_max;
  pool_depth(s, &depth, &depth_max);
  json_t *cap = json_pack(
      "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "workers",
      (json_int_t)s->cfg.workers, "queue_limit", (json_int_t)s->cfg.queue_limit, "queue_depth",
      (json_int_t)depth, "queue_depth_max", (json_int_t)depth_max, "admitted", ST(admitted),
      "work_done", ST(work_done), "work_abandoned", ST(work_abandoned), "work_ns", ST(work_ns),
      "work_abandoned_ns", ST(work_abandoned_ns), "dropped_queue_full", ST(dropped_queue_full),
      "dropped_deadline_expired", ST(dropped_deadline_expired), "dropped_deadline_too_short",
      ST(dropped_deadline_too_short), "dropped_codel", ST(dropped_codel), "busy_ns", ST(busy_ns),
      "uptime_ns", (json_int_t)(lk_now_ns() - s->started_ns), "slowdown_factor",
      lk_faults_slowdown(s->faults, NULL, NULL, lk_now_ns()));
  json_object_update(server, cap);
  json_decref(cap);
  json_object_set_new(server, "queue_discipline",
                      json_string(lk_qdisc_name(s->cfg.queue_discipline)));
  /* How many writes shared each COMMIT (and so each fsync): group commit at work. */
  lk_store_commit_stats cs;
  lk_store_commit_stats_get(s->store, &cs);
  json_object_set_new(server, "store_commits",
                      json_pack("{s:I,s:I,s:I,s:I}", "commits", (json_int_t)cs.commits, "writes",
                                (json_int_t)cs.writes, "largest_group", (json_int_t)cs.largest,
                                "joined_from_io_thread", ST(joined_group)));
  return reply(c, 200,
               json_pack("{s:I,s:I,s:I,s:I,s:o,s:o,s:{s:o,s:o}}", "books", (json_int_t)counts.books,
                         "loans", (json_int_t)counts.loans, "keyed_loans",
                         (json_int_t)counts.keyed_loans, "idempotency_records",
                         (json_int_t)counts.idem_records, "server", server, "tenants", tenants,
                         only_dupes ? "duplicates" : "groups", "by_request_id", by_rid, "by_key",
                         by_key));
}

static enum MHD_Result series(lk_server *s, struct MHD_Connection *c) {
  char *txt = lk_series_json(&s->series, lk_now_ns());
  if (!txt)
    return MHD_NO;
  struct MHD_Response *m = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
  if (!m) {
    free(txt);
    return MHD_NO;
  }
  MHD_add_response_header(m, "Content-Type", "application/json");
  enum MHD_Result rc = MHD_queue_response(c, 200, m);
  MHD_destroy_response(m);
  return rc;
}

/* A known resource asked with a method it does not take: 405 with the methods it does take. */
static enum MHD_Result not_allowed(struct MHD_Connection *c, const char *method, const char *url,
                                   const char *allow) {
  char msg[300];
  snprintf(msg, sizeof msg, "%.20s is not allowed on %.200s", method, url);
  return reply_allow(
      c, 405,
      json_pack("{s:s,s:s,s:i}", "error", "method_not_allowed", "message", msg, "status", 405),
      allow);
}

static enum MHD_Result dispatch(lk_server *s, struct MHD_Connection *c, const char *url,
                                const char *method, const admin_req *a) {
  /* HEAD is GET without the body (libmicrohttpd leaves it out). */
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  const char *allow = NULL;
  if (!strcmp(url, "/admin/healthz")) {
    if (get)
      return reply(c, 200, json_pack("{s:s}", "status", "ok"));
    allow = "GET, HEAD";
  } else if (!strcmp(url, "/admin/stats")) {
    if (get)
      return stats(s, c);
    allow = "GET, HEAD";
  } else if (!strcmp(url, "/admin/series")) {
    if (get)
      return series(s, c);
    allow = "GET, HEAD";
  } else if (!strcmp(url, "/admin/faults")) {
    if (get)
      return list_faults(s, c);
    if (!strcmp(method, "POST"))
      return add_fault(s, c, a);
    if (!strcmp(method, "PUT"))
      return replace_faults(s, c, a);
    if (!strcmp(method, "DELETE")) {
      lk_faults_clear(s->faults);
      return reply(c, 200, json_pack("{s:b}", "cleared", 1));
    }
    allow = "GET, HEAD, POST, PUT, DELETE";
  } else if (!strncmp(url, "/admin/faults/", 14)) {
    int64_t id;
    if (lk_parse_id(url + 14, strlen(url + 14), &id) != LK_OK || id > INT32_MAX)
      return reply_error(c, 400, "bad_id",
                         "fault rule ids are positive integers (no sign or leading zero)");
    if (strcmp(method, "DELETE"))
      return not_allowed(c, method, url, "DELETE");
    if (lk_faults_remove(s->faults, (int)id) != LK_OK)
      return reply_error(c, 404, "not_found", "no such fault rule");
    return reply(c, 200, json_pack("{s:I}", "removed", (json_int_t)id));
  }
  if (allow) /* a known resource; every method it takes has returned above */
    return not_allowed(c, method, url, allow);
  return reply_error(c, 404, "not_found",
                     "admin routes: /admin/healthz, /admin/stats, /admin/series, "
                     "/admin/faults[/{id}]");
}

enum MHD_Result admin_handler(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  (void)version;
  admin_req *a = *con_cls;
  if (!a) {
    lk_head_taken(conn);
    a = calloc(1, sizeof *a);
    if (!a)
      return MHD_NO;
    *con_cls = a;
    return MHD_YES;
  }
  if (*upload_size) {
    if (!a->too_big && a->len + *upload_size <= ADMIN_BODY_MAX) {
      char *b = realloc(a->body, a->len + *upload_size + 1);
      if (b) {
        memcpy(b + a->len, upload, *upload_size);
        a->body = b;
        a->len += *upload_size;
      } else {
        a->too_big = true;
      }
    } else {
      a->too_big = true;
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (a->too_big)
    return reply_error(conn, 413, "body_too_large", "admin bodies are limited to 64 KiB");
  return dispatch(cls, conn, url, method, a);
}

void admin_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                     enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  (void)toe;
  admin_req *a = *con_cls;
  if (!a)
    return;
  free(a->body);
  free(a);
  *con_cls = NULL;
}
