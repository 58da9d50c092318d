/* SPDX-License-Identifier: MIT */
/* libFuzzer: libraryd's request bodies (JSON through jansson, then the strict field checks of
 * input_parse) for the three routes that take one. The first byte picks the route; the rest is
 * the body. Accepted input is in range; refused input gets a 400 whose body is a JSON object with
 * an "error" code. */
#include "server_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static bool text_ok(const char *s, size_t cap, bool required) {
  const char *nul = memchr(s, '\0', cap);
  return nul && (!required || nul != s);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size == 0)
    return 0;
  req *r = calloc(1, sizeof *r);
  if (!r)
    return 0;
  switch (data[0] % 3) {
  case 0: r->route = RT_BOOKS, strcpy(r->method, "POST"); break;
  case 1: r->route = RT_BOOK, strcpy(r->method, "PUT"), r->id = 7; break;
  default: r->route = RT_LOANS, strcpy(r->method, "POST"), r->id = 7; break;
  }
  /* A private copy of exactly the body's bytes, so ASan catches a read past its end. */
  r->body_len = size - 1;
  r->body = malloc(r->body_len ? r->body_len : 1);
  if (!r->body) {
    free(r);
    return 0;
  }
  memcpy(r->body, data + 1, r->body_len);
  lk_resp out;
  resp_init(&out, 200);
  if (input_parse(r, &out)) {
    if (out.body)
      abort();
    if (r->route == RT_LOANS) {
      if (!text_ok(r->borrower, sizeof r->borrower, false))
        abort();
    } else {
      const lk_book *b = &r->book_in;
      if (!text_ok(b->title, sizeof b->title, true) ||
          !text_ok(b->author, sizeof b->author, true) ||
          !text_ok(b->isbn, sizeof b->isbn, false) || b->stock < 0 || b->stock > 1000000000 ||
          (b->has_year && (b->year < -9999 || b->year > 9999)) || b->id != r->id)
        abort();
    }
  } else {
    if (out.status != 400 || !out.body)
      abort();
    json_t *o = json_loadb(out.body, out.body_len, 0, NULL);
    if (!o || !json_is_string(json_object_get(o, "error")))
      abort();
    json_decref(o);
  }
  resp_free(&out);
  free(r->body);
  free(r);
  return 0;
}
