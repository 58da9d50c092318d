/* SPDX-License-Identifier: MIT */
#include "tmpsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int lk_tmpsrv_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* PostgreSQL's server binaries are not on PATH on Debian; $LINKD_PG_BINDIR overrides the search. */
static int pg_bindir(char *out, size_t n) {
  const char *env = getenv("LINKD_PG_BINDIR");
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return 0;
  }
  glob_t g;
  if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0 || g.gl_pathc == 0) {
    fprintf(stderr, "tmpsrv: no /usr/lib/postgresql/*/bin/initdb (run scripts/deps.sh)\n");
    return -1;
  }
  /* glob sorts: the last entry is the newest major version. */
  snprintf(out, n, "%s", g.gl_pathv[g.gl_pathc - 1]);
  globfree(&g);
  char *slash = strrchr(out, '/');
  if (slash)
    *slash = '\0';
  return 0;
}

/* As root, PostgreSQL must run as an unprivileged user: the Debian package's `postgres`. */
static int pg_user(uid_t *uid, gid_t *gid) {
  if (geteuid() != 0) {
    *uid = geteuid();
    *gid = getegid();
    return 0;
  }
  struct passwd *pw = getpwnam("postgres");
  if (!pw) {
    fprintf(stderr, "tmpsrv: running as root and no `postgres` user exists\n");
    return -1;
  }
  *uid = pw->pw_uid;
  *gid = pw->pw_gid;
  return 0;
}

/* fork + exec argv with stdout/stderr appended to log, optionally as another user. */
static pid_t spawn(char *const argv[], const char *log, bool drop, uid_t uid, gid_t gid) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  /* A new process group, so a test's Ctrl-C or kill of its group does not race the cleanup. */
  setpgid(0, 0);
  if (drop && (setgid(gid) != 0 || setuid(uid) != 0)) {
    perror("tmpsrv: setuid");
    _exit(126);
  }
  execv(argv[0], argv);
  fprintf(stderr, "tmpsrv: exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static int run_wait(char *const argv[], const char *log, bool drop, uid_t uid, gid_t gid) {
  pid_t pid = spawn(argv, log, drop, uid, gid);
  if (pid < 0)
    return -1;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void print_log_tail(const lk_tmpsrv *s) {
  FILE *f = fopen(s->log, "r");
  if (!f)
    return;
  char line[512];
  fprintf(stderr, "tmpsrv: --- %s ---\n", s->log);
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fclose(f);
}

static int make_dir(lk_tmpsrv *s, const char *prefix) {
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
  if (!mkdtemp(s->dir)) {
    fprintf(stderr, "tmpsrv: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
  return 0;
}

static bool pg_isready(const lk_tmpsrv *s) {
  char bindir[200], exe[260], port[16];
  if (pg_bindir(bindir, sizeof bindir) != 0)
    return false;
  snprintf(exe, sizeof exe, "%s/pg_isready", bindir);
  snprintf(port, sizeof port, "%d", s->port);
  char *argv[] = {exe, "-q", "-h", "127.0.0.1", "-p", port, "-U", "postgres", NULL};
  return run_wait(argv, "/dev/null", false, 0, 0) == 0;
}

static bool redis_ping(const lk_tmpsrv *s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = false;
  char buf[16] = {0};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, "PING\r\n", 6) == 6 &&
      read(fd, buf, sizeof buf - 1) > 0)
    ok = strncmp(buf, "+PONG", 5) == 0;
  close(fd);
  return ok;
}

bool lk_tmpsrv_ready(const lk_tmpsrv *s) {
  if (s->pid <= 0)
    return false;
  return s->kind == LK_TMPSRV_PG ? pg_isready(s) : redis_ping(s);
}

static int wait_ready(lk_tmpsrv *s, double limit_s) {
  double end = now_s() + limit_s;
  while (now_s() < end) {
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      fprintf(stderr, "tmpsrv: the server exited during start-up\n");
      s->pid = 0;
      print_log_tail(s);
      return -1;
    }
    if (lk_tmpsrv_ready(s))
      return 0;
    sleep_ms(50);
  }
  fprintf(stderr, "tmpsrv: the server was not ready within %.0f s\n", limit_s);
  print_log_tail(s);
  return -1;
}

static int pg_launch(lk_tmpsrv *s) {
  char bindir[200], exe[260], data[300], port[16], sock[300];
  uid_t uid;
  gid_t gid;
  if (pg_bindir(bindir, sizeof bindir) != 0 || pg_user(&uid, &gid) != 0)
    return -1;
  snprintf(exe, sizeof exe, "%s/postgres", bindir);
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(sock, sizeof sock, "unix_socket_directories=%s", s->dir);
  /* Small and quick, but durable: fsync stays on, so crash tests test something. */
  char *argv[] = {exe,  "-D", data, "-p", port, "-c", "listen_addresses=127.0.0.1", "-c", sock,
                  "-c", "max_connections=100", "-c", "shared_buffers=32MB", "-c",
                  "log_min_messages=warning", NULL};
  s->pid = spawn(argv, s->log, geteuid() == 0, uid, gid);
  if (s->pid < 0) {
    s->pid = 0;
    return -1;
  }
  return wait_ready(s, 30.0);
}

int lk_tmpsrv_pg_start(lk_tmpsrv *s) {
  memset(s, 0, sizeof *s);
  s->kind = LK_TMPSRV_PG;
  char bindir[200], exe[260], data[300];
  uid_t uid;
  gid_t gid;
  if (pg_bindir(bindir, sizeof bindir) != 0 || pg_user(&uid, &gid) != 0 ||
      make_dir(s, "linkd-pg") != 0)
    return -1;
  if (geteuid() == 0 && chown(s->dir, uid, gid) != 0) {
    fprintf(stderr, "tmpsrv: chown %s: %s\n", s->dir, strerror(errno));
    return -1;
  }
  /* The log is created before the privileges are dropped; let the server append to it. */
  int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    if (geteuid() == 0 && fchown(fd, uid, gid) != 0)
      perror("tmpsrv: fchown log");
    close(fd);
  }
  snprintf(exe, sizeof exe, "%s/initdb", bindir);
  snprintf(data, sizeof data, "%s/data", s->dir);
  char *argv[] = {exe, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-sync", NULL};
  if (run_wait(argv, s->log, geteuid() == 0, uid, gid) != 0) {
    fprintf(stderr, "tmpsrv: initdb failed\n");
    print_log_tail(s);
    return -1;
  }
  s->port = lk_tmpsrv_free_port();
  if (s->port <= 0)
    return -1;
  return pg_launch(s);
}

void lk_tmpsrv_pg_conninfo(const lk_tmpsrv *s, char *buf, size_t n) {
  snprintf(buf, n, "host=127.0.0.1 port=%d user=postgres dbname=postgres", s->port);
}

void lk_tmpsrv_pg_url(const lk_tmpsrv *s, char *buf, size_t n) {
  snprintf(buf, n, "postgres://postgres@127.0.0.1:%d/postgres", s->port);
}

static int redis_launch(lk_tmpsrv *s) {
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  char exe[] = "/usr/bin/redis-server";
  if (access(exe, X_OK) != 0) {
    fprintf(stderr, "tmpsrv: no %s (run scripts/deps.sh)\n", exe);
    return -1;
  }
  char *argv[] = {exe, "--port", port, "--bind", "127.0.0.1", "--dir", s->dir, "--save", "",
                  "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", NULL};
  s->pid = spawn(argv, s->log, false, 0, 0);
  if (s->pid < 0) {
    s->pid = 0;
    return -1;
  }
  return wait_ready(s, 10.0);
}

int lk_tmpsrv_redis_start(lk_tmpsrv *s) {
  memset(s, 0, sizeof *s);
  s->kind = LK_TMPSRV_REDIS;
  if (make_dir(s, "linkd-redis") != 0)
    return -1;
  s->port = lk_tmpsrv_free_port();
  if (s->port <= 0)
    return -1;
  return redis_launch(s);
}

int lk_tmpsrv_stop(lk_tmpsrv *s, int sig) {
  if (s->pid <= 0)
    return 0;
  kill(s->pid, sig);
  double end = now_s() + 30.0;
  int st;
  for (;;) {
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r == s->pid || (r < 0 && errno == ECHILD))
      break;
    if (now_s() > end) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &st, 0);
      break;
    }
    sleep_ms(20);
  }
  if (s->kind == LK_TMPSRV_PG && sig == SIGKILL) {
    /* The postmaster's backends notice its death and exit by themselves; a restart before they
     * have would find the shared memory still attached. Their group is the postmaster's. */
    kill(-s->pid, SIGKILL);
    sleep_ms(100);
  }
  s->pid = 0;
  return 0;
}

int lk_tmpsrv_restart(lk_tmpsrv *s) {
  if (s->pid > 0)
    return 0;
  return s->kind == LK_TMPSRV_PG ? pg_launch(s) : redis_launch(s);
}

void lk_tmpsrv_destroy(lk_tmpsrv *s) {
  if (!s->kind)
    return;
  if (s->pid > 0)
    lk_tmpsrv_stop(s, s->kind == LK_TMPSRV_PG ? SIGINT : SIGTERM);
  if (s->dir[0]) {
    char rm[] = "/bin/rm";
    char *argv[] = {rm, "-rf", s->dir, NULL};
    run_wait(argv, "/dev/null", false, 0, 0);
  }
  memset(s, 0, sizeof *s);
}
