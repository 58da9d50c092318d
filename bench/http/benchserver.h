/* SPDX-License-Identifier: MIT */
/* A minimal keep-alive HTTP/1.1 responder in a forked child process, for benchmarks only: it
 * answers every request head with a fixed 200 (body "ok"). One epoll thread; exits when the
 * parent closes its end of the control pipe (or dies). */
#ifndef LINKD_BENCHSERVER_H
#define LINKD_BENCHSERVER_H

#include <sys/types.h>

typedef struct benchserver {
  pid_t pid;
  int port;
  int ctl; /* parent's end of the control pipe */
} benchserver;

/* Starts the server on 127.0.0.1 (ephemeral port). 0 or -1. */
int benchserver_start(benchserver *s);
/* Stops it and reaps the child. */
void benchserver_stop(benchserver *s);

#endif
