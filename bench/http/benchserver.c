/* SPDX-License-Identifier: MIT */
#include "benchserver.h"
#include "benchutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXFD 4096

static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                            "\r\nok";

typedef struct conn {
  char buf[8192];
  size_t len;
} conn;

static void serve(int lfd, int ctl) {
  static conn *conns[MAXFD];
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  ev.data.fd = ctl;
  epoll_ctl(ep, EPOLL_CTL_ADD, ctl, &ev);
  char out[64 * sizeof reply];
  for (;;) {
    struct epoll_event evs[256];
    int n = epoll_wait(ep, evs, 256, -1);
    if (n < 0 && errno != EINTR)
      _exit(1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ctl)
        _exit(0);
      if (fd == lfd) {
        int c;
        while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          if (c >= MAXFD) {
            close(c);
            continue;
          }
          int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conns[c] = calloc(1, sizeof(conn));
          struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      conn *k = conns[fd];
      ssize_t r = read(fd, k->buf + k->len, sizeof k->buf - k->len);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
          continue;
        close(fd);
        free(k);
        conns[fd] = NULL;
        continue;
      }
      k->len += (size_t)r;
      /* answer every complete head (GET: no body); keep a partial one */
      size_t answered = 0, off = 0;
      char *end;
      while ((end = memmem(k->buf + off, k->len - off, "\r\n\r\n", 4))) {
        off = (size_t)(end - k->buf) + 4;
        memcpy(out + answered * (sizeof reply - 1), reply, sizeof reply - 1);
        if (++answered == 64)
          break;
      }
      memmove(k->buf, k->buf + off, k->len - off);
      k->len -= off;
      if (k->len == sizeof k->buf)
        k->len = 0; /* a head this big is not ours to parse */
      size_t total = answered * (sizeof reply - 1), done = 0;
      while (done < total) {
        ssize_t w = write(fd, out + done, total - done);
        if (w <= 0)
          break;
        done += (size_t)w;
      }
    }
  }
}

int benchserver_start(benchserver *s) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  int pipefd[2];
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1024) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &al) != 0 || pipe2(pipefd, O_CLOEXEC) != 0)
    return -1;
  s->port = ntohs(a.sin_port);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The server is the "second" role of LINKD_BENCH_CPUS (the client is the main thread). */
    lk_bench_pin(LK_BENCH_SECOND);
    close(pipefd[1]);
    serve(lfd, pipefd[0]);
  }
  close(lfd);
  close(pipefd[0]);
  s->pid = pid;
  s->ctl = pipefd[1];
  return 0;
}

void benchserver_stop(benchserver *s) {
  if (s->pid <= 0)
    return;
  close(s->ctl);
  waitpid(s->pid, NULL, 0);
  s->pid = 0;
}
