/* SPDX-License-Identifier: MIT */
/* overload.c: an open-loop HTTP/1.1 load generator for libraryd's overload experiment.
 *
 *   bench_overload PORT RATE SECONDS TIMEOUT_MS [PATH] [EXTRA_HEADER]
 *
 * Starts RATE requests per second for SECONDS (each on a new loopback connection, with
 * "Connection: close"), whatever the server does: an open loop, as many independent callers
 * are, so a slow server faces the same arrivals rather than fewer. Each caller gives up after
 * TIMEOUT_MS and closes its connection. Prints one line of key=value counts, where goodput is the
 * rate of 200 answers received in full within the caller's timeout. Bounded: at most
 * RATE x SECONDS requests (RATE <= 20000, SECONDS <= 120, TIMEOUT_MS <= 60000) and
 * SECONDS + TIMEOUT + 1 s of time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_LAT 2400000

typedef struct conn {
  int fd;
  int64_t start;
  size_t sent;
  char head[16]; /* "HTTP/1.1 200" */
  size_t hlen;
  struct conn *next_free;
} conn;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s PORT RATE SECONDS TIMEOUT_MS [PATH] [EXTRA_HEADER]\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[1]);
  double rate = atof(argv[2]), secs = atof(argv[3]);
  int64_t timeout = (int64_t)atol(argv[4]) * 1000000;
  const char *path = argc > 5 ? argv[5] : "/books/1";
  const char *extra = argc > 6 ? argv[6] : NULL;
  if (port <= 0 || port > 65535 || !(rate > 0 && rate <= 20000) || !(secs > 0 && secs <= 120) ||
      timeout <= 0 || timeout > INT64_C(60000000000)) {
    fprintf(stderr, "overload: bad arguments\n");
    return 2;
  }
  char req[1024];
  int rlen = snprintf(req, sizeof req,
                      "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%sConnection: close\r\n\r\n", path,
                      extra ? extra : "", extra ? "\r\n" : "");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);

  uint64_t total = (uint64_t)(rate * secs);
  int64_t *lat = malloc(sizeof *lat * (total < MAX_LAT ? total : MAX_LAT));
  size_t nconn = (size_t)(rate * (double)(timeout / 1000000 + 1000) / 1000.0) + 64;
  conn *pool = calloc(nconn, sizeof *pool);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (!lat || !pool || ep < 0) {
    fprintf(stderr, "overload: out of memory\n");
    return 1;
  }
  conn *free_list = NULL;
  for (size_t i = nconn; i-- > 0;) {
    pool[i].fd = -1;
    pool[i].next_free = free_list;
    free_list = &pool[i];
  }
  uint64_t started = 0, ok = 0, late = 0, s503 = 0, s504 = 0, other = 0, timeouts = 0, errs = 0,
           no_slot = 0, nlat = 0;
  size_t open_n = 0;
  int64_t t0 = now_ns(), end_arrivals = t0 + (int64_t)(secs * 1e9),
          hard_end = end_arrivals + timeout + 1000000000;
  int64_t every = (int64_t)(1e9 / rate);
  struct epoll_event evs[256];
  for (;;) {
    int64_t now = now_ns();
    /* Arrivals due by now (open loop: the schedule does not wait for answers). */
    while (started < total && t0 + (int64_t)started * every <= now) {
      started++;
      conn *c = free_list;
      if (!c) {
        no_slot++;
        continue;
      }
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        errs++;
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        close(fd);
        errs++;
        continue;
      }
      free_list = c->next_free;
      *c = (conn){.fd = fd, .start = t0 + (int64_t)(started - 1) * every};
      struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = c};
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
      open_n++;
    }
    if ((started >= total && open_n == 0) || now >= hard_end)
      break;
    int n = epoll_wait(ep, evs, 256, 1);
    now = now_ns();
    for (int i = 0; i < n; i++) {
      conn *c = evs[i].data.ptr;
      if (c->fd < 0)
        continue;
      bool done = false;
      if ((evs[i].events & EPOLLOUT) && c->sent < (size_t)rlen) {
        ssize_t w = send(c->fd, req + c->sent, (size_t)rlen - c->sent, MSG_NOSIGNAL);
        if (w > 0) {
          c->sent += (size_t)w;
          if (c->sent == (size_t)rlen) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
          }
        } else if (w < 0 && errno != EAGAIN) {
          errs++;
          done = true;
        }
      }
      if (!done && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        char buf[4096];
        for (;;) {
          ssize_t r = recv(c->fd, buf, sizeof buf, 0);
          if (r > 0) {
            size_t take = sizeof c->head - 1 - c->hlen;
            take = (size_t)r < take ? (size_t)r : take;
            memcpy(c->head + c->hlen, buf, take);
            c->hlen += take;
            continue;
          }
          if (r < 0 && errno == EAGAIN)
            break;
          /* EOF (the server closes after the response) or an error: the exchange is over. */
          done = true;
          if (c->hlen >= 12 && !strncmp(c->head, "HTTP/1.1 ", 9)) {
            int code = atoi(c->head + 9);
            if (code == 200) {
              if (now - c->start <= timeout) {
                ok++;
                if (nlat < MAX_LAT)
                  lat[nlat++] = now - c->start;
              } else {
                late++;
              }
            } else if (code == 503) {
              s503++;
            } else if (code == 504) {
              s504++;
            } else {
              other++;
            }
          } else {
            errs++;
          }
          break;
        }
      }
      if (done) {
        close(c->fd);
        c->fd = -1;
        c->next_free = free_list;
        free_list = c;
        open_n--;
      }
    }
    /* Callers whose patience ran out hang up (FIN), whatever the server is doing. */
    for (size_t i = 0; i < nconn; i++) {
      conn *c = &pool[i];
      if (c->fd >= 0 && now - c->start > timeout) {
        close(c->fd);
        c->fd = -1;
        c->next_free = free_list;
        free_list = c;
        open_n--;
        timeouts++;
      }
    }
  }
  double p50 = 0, p99 = 0;
  if (nlat) {
    qsort(lat, nlat, sizeof *lat, cmp_i64);
    p50 = (double)lat[nlat / 2] / 1e6;
    p99 = (double)lat[(size_t)((double)nlat * 0.99)] / 1e6;
  }
  printf("started=%llu goodput=%.1f ok=%llu late=%llu s503=%llu s504=%llu other=%llu "
         "timeouts=%llu errors=%llu no_slot=%llu p50_ms=%.1f p99_ms=%.1f\n",
         (unsigned long long)started, (double)ok / secs, (unsigned long long)ok,
         (unsigned long long)late, (unsigned long long)s503, (unsigned long long)s504,
         (unsigned long long)other, (unsigned long long)timeouts, (unsigned long long)errs,
         (unsigned long long)no_slot, p50, p99);
  free(lat);
  free(pool);
  close(ep);
  return 0;
}
