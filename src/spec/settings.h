/* SPDX-License-Identifier: MIT */
/* Policy settings as layers: built-in defaults < config [defaults] < config [host ...] < flags.
 *
 * Every setting has one name, used both as the long flag (--deadline) and as the config key
 * (deadline = 3s), and one parser, so a value means the same thing wherever it is written. A
 * layer holds only the settings given in it; cli_settings_merge() lays one over another and
 * cli_settings_to_policy() turns the result into an lk_http_policy. */
#ifndef LINKD_CLI_SETTINGS_H
#define LINKD_CLI_SETTINGS_H

#include "budget_spec.h"
#include "retry_on.h"

#include <linkd/backoff.h>
#include <linkd/http.h>
#include <linkd/idem.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_field {
  CLI_F_DEADLINE,
  CLI_F_ATTEMPT_TIMEOUT,
  CLI_F_CONNECT_TIMEOUT,
  CLI_F_DNS_TIMEOUT,
  CLI_F_TLS_TIMEOUT,
  CLI_F_WRITE_TIMEOUT,
  CLI_F_FIRST_BYTE_TIMEOUT,
  CLI_F_IDLE_TIMEOUT,
  CLI_F_MAX_ATTEMPTS,
  CLI_F_BACKOFF,
  CLI_F_BASE,
  CLI_F_MAX_DELAY,
  CLI_F_JITTER,
  CLI_F_IDEMPOTENCY_KEY,
  CLI_F_RETRY_ON,
  CLI_F_BUDGET,
  CLI_F_CACERT,
  CLI_F_CERT,
  CLI_F_KEY,
  CLI_F_PASS,
  CLI_F_HEADER,
  CLI_F__COUNT
} cli_field;

#define CLI_BIT(f) (1u << (unsigned)(f))

/* The origin label of settings given as flags ("command line"); compare by address. */
extern const char cli_origin_flag[];

typedef struct cli_header {
  char *name;
  char *value; /* NULL: remove the header inherited from an earlier layer ("-H 'Name:'") */
} cli_header;

typedef struct cli_settings {
  unsigned set;                     /* CLI_BIT(field) for every field given in this layer */
  const char *origin[CLI_F__COUNT]; /* per given field: a label owned by whoever made the layer */
  int64_t deadline, attempt_timeout, connect_timeout, base, max_delay; /* ns */
  /* Phase timeouts, ns; 0: bounded by the attempt timeout only. */
  int64_t dns_timeout, tls_timeout, write_timeout, first_byte_timeout, idle_timeout;
  int max_attempts;
  lk_backoff_kind backoff;
  double multiplier; /* exponential only */
  lk_jitter_kind jitter;
  double jitter_ratio; /* symmetric only */
  lk_idem_mode idem_mode;
  char idem_key[LK_IDEM_KEY_MAX]; /* LK_IDEM_KEY */
  cli_retry_edit retry_on;
  cli_budget_spec budget;
  char *cacert;        /* owned: a CA bundle (PEM) instead of libcurl's default; NULL: none */
  char *cert;          /* owned: a client certificate (PEM file); NULL: none */
  char *key;           /* owned: its private key (PEM file); NULL: in the certificate's file */
  char *pass;          /* owned: the key's pass phrase (wiped when freed); NULL: none */
  cli_header *headers; /* owned, in order given */
  size_t nheaders;
} cli_settings;

/* Result of cli_settings_set(). */
enum { CLI_SET_OK = 0, CLI_SET_BAD_VALUE = -1, CLI_SET_UNKNOWN_KEY = -2, CLI_SET_NOMEM = -3 };

/* An empty layer. */
void cli_settings_init(cli_settings *s);
/* Frees the headers and the TLS file names (the pass phrase wiped); the layer is empty
 * again. */
void cli_settings_free(cli_settings *s);

/* The field a key names ("deadline", "retry-on", "header", ...), or -1. */
int cli_settings_field(const char *key);
/* The key of a field. */
const char *cli_settings_key(cli_field f);

/* Parses `value` for `key` into the layer and marks the field given, with `origin` (not copied;
 * must outlive the layer). A given field is replaced, except "header", which appends.
 * `in_config` refuses what only makes sense for one call (a literal Idempotency-Key).
 * Returns CLI_SET_* with a message (no key name, no trailing period) in err. */
int cli_settings_set(cli_settings *s, const char *key, const char *value, const char *origin,
                     bool in_config, char *err, size_t cap);

/* Lays `top` over `dst`: every field given in `top` replaces dst's; retry-on edits compose; a
 * header in `top` replaces every header of that name in `dst` (a removal entry just removes).
 * Returns 0 or -1 (no memory). */
int cli_settings_merge(cli_settings *dst, const cli_settings *top);

#endif
