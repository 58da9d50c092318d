/* SPDX-License-Identifier: MIT */
/* faultd: an HTTP/1.1 server on 127.0.0.1 that fails on command, byte by byte, so tests can make
 * a real libcurl client meet every network fault. See faultd_client.h for the modes and options. */
#include "faultd_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FD_CONN_BUF (64 * 1024) /* also the largest request head accepted */
#define FD_MAX_FILLERS 16

fd_config g_cfg;
atomic_bool g_stop;

static volatile sig_atomic_t got_signal;
static atomic_int active_conns;
static int conn_seq;

static const struct {
  const char *name;
  fd_mode mode;
} modes[] = {
    {"refuse", FD_MODE_REFUSE},
    {"blackhole", FD_MODE_BLACKHOLE},
    {"accept_noread", FD_MODE_ACCEPT_NOREAD},
    {"reset_before_read", FD_MODE_RESET_BEFORE_READ},
    {"read_then_reset", FD_MODE_READ_THEN_RESET},
    {"read_then_close", FD_MODE_READ_THEN_CLOSE},
    {"status", FD_MODE_STATUS},
    {"slow", FD_MODE_SLOW},
    {"partial_stall", FD_MODE_PARTIAL_STALL},
    {"reset_mid_upload", FD_MODE_RESET_MID_UPLOAD},
    {"keepalive_close", FD_MODE_KEEPALIVE_CLOSE},
    {"ok", FD_MODE_OK},
};

static void usage(FILE *f) {
  fputs("usage: faultd --port-file FILE --mode MODE [options]\n"
        "modes: refuse blackhole accept_noread reset_before_read read_then_reset\n"
        "       read_then_close status slow partial_stall reset_mid_upload keepalive_close ok\n"
        "options: --port N --log FILE --conn-log FILE --status N --retry-after V --body TEXT\n"
        "         --delay-ms N --drip-ms N --close-after N\n"
        "         --close-when before_response|after_response|idle --idle-ms N\n"
        "         --reset-after BYTES --script LIST --max-seconds S --max-conns N\n"
        "         --rcvbuf BYTES --parent-pid PID\n",
        f);
}

static void on_signal(int sig) {
  (void)sig;
  got_signal = 1;
}

enum {
  O_PORT_FILE = 1,
  O_PORT,
  O_LOG,
  O_CONN_LOG,
  O_MODE,
  O_STATUS,
  O_RETRY_AFTER,
  O_BODY,
  O_DELAY,
  O_DRIP,
  O_CLOSE_AFTER,
  O_CLOSE_WHEN,
  O_IDLE,
  O_RESET_AFTER,
  O_SCRIPT,
  O_MAX_SEC,
  O_MAX_CONNS,
  O_RCVBUF,
  O_PARENT,
  O_HELP
};

/* In enum order: opts[c - 1] is option c. */
static const struct option opts[] = {
    {"port-file", required_argument, NULL, O_PORT_FILE},
    {"port", required_argument, NULL, O_PORT},
    {"log", required_argument, NULL, O_LOG},
    {"conn-log", required_argument, NULL, O_CONN_LOG},
    {"mode", required_argument, NULL, O_MODE},
    {"status", required_argument, NULL, O_STATUS},
    {"retry-after", required_argument, NULL, O_RETRY_AFTER},
    {"body", required_argument, NULL, O_BODY},
    {"delay-ms", required_argument, NULL, O_DELAY},
    {"drip-ms", required_argument, NULL, O_DRIP},
    {"close-after", required_argument, NULL, O_CLOSE_AFTER},
    {"close-when", required_argument, NULL, O_CLOSE_WHEN},
    {"idle-ms", required_argument, NULL, O_IDLE},
    {"reset-after", required_argument, NULL, O_RESET_AFTER},
    {"script", required_argument, NULL, O_SCRIPT},
    {"max-seconds", required_argument, NULL, O_MAX_SEC},
    {"max-conns", required_argument, NULL, O_MAX_CONNS},
    {"rcvbuf", required_argument, NULL, O_RCVBUF},
    {"parent-pid", required_argument, NULL, O_PARENT},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

/* Parses a numeric option's value into its g_cfg field. 1: done, 0: not numeric, -1: bad. */
static int numeric_option(int c, const char *arg) {
  int *field = NULL;
  long long lo = 0, hi = 1 << 30;
  switch (c) {
  case O_PORT:
    field = &g_cfg.port;
    hi = 65535;
    break;
  case O_STATUS:
    field = &g_cfg.status;
    lo = 100;
    hi = 999;
    break;
  case O_DELAY: field = &g_cfg.delay_ms; break;
  case O_DRIP: field = &g_cfg.drip_ms; break;
  case O_CLOSE_AFTER: field = &g_cfg.close_after; break;
  case O_IDLE: field = &g_cfg.idle_ms; break;
  case O_MAX_SEC:
    field = &g_cfg.max_seconds;
    lo = 1;
    break;
  case O_MAX_CONNS:
    field = &g_cfg.max_conns;
    lo = 1;
    break;
  case O_RCVBUF: field = &g_cfg.rcvbuf; break;
  case O_RESET_AFTER:
  case O_PARENT: hi = 1LL << 50; break;
  default: return 0;
  }
  char *end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (errno || end == arg || *end || v < lo || v > hi) {
    fprintf(stderr, "faultd: bad value for --%s: '%s'\n", opts[c - 1].name, arg);
    return -1;
  }
  if (field)
    *field = (int)v;
  else if (c == O_RESET_AFTER)
    g_cfg.reset_after = v;
  else
    g_cfg.parent_pid = (pid_t)v;
  return 1;
}

static int string_option(int c, const char *arg, const char **mode, const char **script) {
  switch (c) {
  case O_PORT_FILE: g_cfg.port_file = arg; return 0;
  case O_LOG: g_cfg.log_file = arg; return 0;
  case O_CONN_LOG: g_cfg.conn_log_file = arg; return 0;
  case O_MODE: *mode = arg; return 0;
  case O_RETRY_AFTER: g_cfg.retry_after = arg; return 0;
  case O_BODY: g_cfg.body = arg; return 0;
  case O_SCRIPT: *script = arg; return 0;
  case O_CLOSE_WHEN:
    if (strcmp(arg, "before_response") == 0)
      g_cfg.close_when = FD_CLOSE_BEFORE_RESPONSE;
    else if (strcmp(arg, "after_response") == 0)
      g_cfg.close_when = FD_CLOSE_AFTER_RESPONSE;
    else if (strcmp(arg, "idle") == 0)
      g_cfg.close_when = FD_CLOSE_IDLE;
    else {
      fprintf(stderr, "faultd: bad value for --close-when: '%s'\n", arg);
      return -1;
    }
    return 0;
  default: return -1; /* getopt already said what was wrong */
  }
}

/* Checks the combination of options once all are known. */
static int check_config(const char *mode, const char *script) {
  if (!g_cfg.port_file || !mode) {
    fprintf(stderr, "faultd: --port-file and --mode are required\n");
    return -1;
  }
  size_t i = 0;
  while (i < sizeof modes / sizeof modes[0] && strcmp(modes[i].name, mode) != 0)
    i++;
  if (i == sizeof modes / sizeof modes[0]) {
    fprintf(stderr, "faultd: unknown mode '%s'\n", mode);
    return -1;
  }
  g_cfg.mode = modes[i].mode;
  if (g_cfg.mode == FD_MODE_KEEPALIVE_CLOSE && g_cfg.close_when != FD_CLOSE_BEFORE_RESPONSE &&
      g_cfg.close_after < 1) {
    fprintf(stderr, "faultd: --close-after must be >= 1 unless --close-when before_response\n");
    return -1;
  }
  if (!script)
    return 0;
  if (g_cfg.mode != FD_MODE_STATUS && g_cfg.mode != FD_MODE_OK && g_cfg.mode != FD_MODE_SLOW) {
    fprintf(stderr, "faultd: --script needs --mode status, ok or slow\n");
    return -1;
  }
  return fd_parse_script(script);
}

static int parse_args(int argc, char **argv) {
  g_cfg = (fd_config){.status = 503,
                      .delay_ms = -1,
                      .close_after = 1,
                      .idle_ms = 100,
                      .reset_after = 16384,
                      .max_seconds = 120,
                      .max_conns = 256};
  const char *mode = NULL, *script = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == O_HELP) {
      usage(stdout);
      exit(0);
    }
    int rc = numeric_option(c, optarg);
    if (rc == 0)
      rc = string_option(c, optarg, &mode, &script);
    if (rc < 0) {
      usage(stderr);
      return -1;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "faultd: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return -1;
  }
  if (check_config(mode, script) != 0) {
    usage(stderr);
    return -1;
  }
  return 0;
}

static int make_socket(bool listening) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1;
  if (listening)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  /* Set before listen() so accepted sockets inherit it (it sizes the advertised window). */
  if (g_cfg.rcvbuf > 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &g_cfg.rcvbuf, sizeof g_cfg.rcvbuf);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_cfg.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    fprintf(stderr, "faultd: bind 127.0.0.1:%d: %s\n", g_cfg.port, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

static int bound_port(int fd) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  return ntohs(a.sin_port);
}

/* Starts a non-blocking connect to 127.0.0.1:port and waits up to wait_ms for it to complete.
 * 1: connected, 0: still pending (the fd stays open in *out), -1: error. */
static int try_connect(int port, int wait_ms, int *out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  *out = fd;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
    return 1;
  if (errno != EINPROGRESS)
    return -1;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (poll(&p, 1, wait_ms) <= 0)
    return 0;
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err == 0 ? 1 : -1;
}

/* A listener whose accept queue is full: Linux drops further SYNs, so connects time out. The
 * queue is filled from here, and a final probe whose connect must stay pending verifies it. */
static int fill_backlog(int port, int *fillers, int *nfill) {
  for (*nfill = 0; *nfill < FD_MAX_FILLERS;) {
    int fd = -1;
    int rc = try_connect(port, *nfill == 0 ? 2000 : 200, &fd);
    if (rc < 0) {
      if (fd >= 0)
        close(fd);
      fprintf(stderr, "faultd: blackhole filler connect failed\n");
      return -1;
    }
    fillers[(*nfill)++] = fd;
    if (rc == 0 && *nfill > 1)
      return 0;
  }
  fprintf(stderr, "faultd: the accept backlog never filled up\n");
  return -1;
}

static int write_port_file(int port) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", g_cfg.port_file) >= (int)sizeof tmp)
    return -1;
  FILE *f = fopen(tmp, "w");
  if (!f)
    return -1;
  int ok = fprintf(f, "%d\n", port) > 0;
  ok = (fclose(f) == 0) && ok;
  /* rename makes the file appear complete: a reader never sees a partial number. */
  if (!ok || rename(tmp, g_cfg.port_file) != 0) {
    fprintf(stderr, "faultd: cannot write %s: %s\n", g_cfg.port_file, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void *conn_main(void *arg) {
  fd_conn *c = arg;
  fd_serve(c);
  if (c->fd >= 0)
    fd_close_quiet(c, "stop");
  fd_log_conn(c, "close");
  free(c->buf);
  free(c);
  atomic_fetch_sub(&active_conns, 1);
  return NULL;
}

static void accept_one(int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0)
    return;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fd_conn *c = calloc(1, sizeof *c);
  char *buf = malloc(FD_CONN_BUF);
  if (!c || !buf) {
    free(c);
    free(buf);
    close(fd);
    return;
  }
  *c = (fd_conn){.fd = fd, .id = ++conn_seq, .buf = buf, .cap = FD_CONN_BUF};
  fd_log_conn(c, "accept");
  atomic_fetch_add(&active_conns, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  /* Signals go to the main thread, whose poll loop watches for them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &attr, conn_main, c);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&active_conns, 1);
    fd_close_quiet(c, "rst");
    fd_log_conn(c, "close");
    free(c->buf);
    free(c);
  }
}

int main(int argc, char **argv) {
  if (parse_args(argc, argv) != 0)
    return 2;
  fd_io_init();
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  if (fd_open_logs() != 0)
    return 1;

  bool refuse = g_cfg.mode == FD_MODE_REFUSE;
  bool blackhole = g_cfg.mode == FD_MODE_BLACKHOLE;
  /* refuse: a bound socket that never listens keeps the port reserved, and the kernel answers
   * every SYN to it with RST. */
  int lfd = make_socket(!refuse);
  if (lfd < 0)
    return 1;
  if (!refuse && listen(lfd, blackhole ? 0 : 128) != 0) {
    fprintf(stderr, "faultd: listen: %s\n", strerror(errno));
    return 1;
  }
  int port = bound_port(lfd);
  int fillers[FD_MAX_FILLERS];
  int nfill = 0;
  if (port <= 0 || (blackhole && fill_backlog(port, fillers, &nfill) != 0))
    return 1;
  if (write_port_file(port) != 0)
    return 1;

  bool accepting = !refuse && !blackhole;
  int64_t end = fd_now_ms() + (int64_t)g_cfg.max_seconds * 1000;
  while (!got_signal && fd_now_ms() < end) {
    if (g_cfg.parent_pid > 0 && getppid() != g_cfg.parent_pid)
      break; /* the test process is gone: do not linger */
    bool room = atomic_load(&active_conns) < g_cfg.max_conns;
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int n = poll(&p, accepting && room ? 1 : 0, accepting && room ? 100 : 20);
    if (n > 0 && (p.revents & POLLIN))
      accept_one(lfd);
  }
  atomic_store(&g_stop, true);
  close(lfd);
  for (int i = 0; i < nfill; i++)
    close(fillers[i]);
  /* Connection threads notice g_stop within one poll slice (100 ms). */
  int64_t wait_end = fd_now_ms() + 3000;
  while (atomic_load(&active_conns) > 0 && fd_now_ms() < wait_end) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&active_conns) == 0)
    fd_free_script(); /* else a straggler may still read it; the process ends anyway */
  return 0;
}
