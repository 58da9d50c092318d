/* SPDX-License-Identifier: MIT */
/* Name resolution against a resolver the test controls. The test process moves itself into a new
 * network and mount namespace (it runs as root, like the rest of the suite in CI), brings up its
 * own loopback, bind-mounts a private /etc/resolv.conf naming 127.0.0.1 and answers DNS on
 * 127.0.0.1:53 itself: names "nx-*" get NXDOMAIN, names "hang-*" are swallowed (a resolver that
 * never answers). libcurl's default threaded resolver calls glibc's getaddrinfo, which reads that
 * resolv.conf, so nothing here depends on the machine's DNS. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

static int dns_fd = -1;
static _Atomic int queries_nx, queries_hang;
static _Atomic bool dns_stop;
static pthread_t dns_th;

/* The first label of the query's name starts at byte 13 (header 12 bytes, then its length). */
static void *dns_serve(void *arg) {
  (void)arg;
  unsigned char q[512];
  for (;;) {
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(dns_fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
    if (n < 0 || atomic_load(&dns_stop))
      return NULL;
    if (n < 17)
      continue;
    if (memcmp(q + 13, "hang-", 5) == 0) {
      atomic_fetch_add(&queries_hang, 1);
      continue; /* never answered */
    }
    atomic_fetch_add(&queries_nx, 1);
    /* the query itself, turned into a response: QR, opcode kept, RD kept, RA, RCODE 3
     * (NXDOMAIN), the question echoed, no answers */
    q[2] = (unsigned char)(0x80 | (q[2] & 0x79));
    q[3] = 0x83;
    memset(q + 6, 0, 6); /* ANCOUNT, NSCOUNT, ARCOUNT (drops an EDNS OPT record's count) */
    size_t end = 12;
    while (end < (size_t)n && q[end])
      end += q[end] + 1u;
    end += 5; /* the root label, QTYPE, QCLASS */
    if (end <= (size_t)n)
      sendto(dns_fd, q, end, 0, (struct sockaddr *)&from, fl);
  }
}

/* The namespace, loopback, resolv.conf and the stub. Any failure fails the whole test. */
static int setup(void **s) {
  (void)s;
  if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
    perror("unshare(CLONE_NEWNET|CLONE_NEWNS) (the test needs root)");
    return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    perror("mount private");
    return -1;
  }
  int sfd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (sfd < 0 || ioctl(sfd, SIOCGIFFLAGS, &ifr) != 0) {
    perror("SIOCGIFFLAGS lo");
    return -1;
  }
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(sfd, SIOCSIFFLAGS, &ifr) != 0) {
    perror("SIOCSIFFLAGS lo up");
    return -1;
  }
  close(sfd);
  char path[] = "/tmp/linkd-resolv-XXXXXX";
  int fd = mkstemp(path);
  /* one try of one second per query: an unabandonable lookup blocks ~1 s per attempt */
  const char conf[] = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";
  if (fd < 0 || write(fd, conf, sizeof conf - 1) != (ssize_t)(sizeof conf - 1)) {
    perror("resolv.conf");
    return -1;
  }
  close(fd);
  if (mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0) {
    perror("bind-mount /etc/resolv.conf");
    return -1;
  }
  unlink(path); /* the mount keeps the file */
  dns_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (dns_fd < 0 || bind(dns_fd, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("bind 127.0.0.1:53");
    return -1;
  }
  return pthread_create(&dns_th, NULL, dns_serve, NULL) == 0 ? 0 : -1;
}

static int teardown(void **s) {
  (void)s;
  /* lookups abandoned by the driver end in glibc after its 1 s timeout; let them finish before
   * the process exits, so no resolver thread is left mid-call (bounded: 1.2 s) */
  for (int i = 0; i < 12; i++) {
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
  }
  /* wake the stub with a datagram of its own and join it before the socket goes */
  atomic_store(&dns_stop, true);
  int w = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (w < 0 || sendto(w, "", 1, 0, (struct sockaddr *)&a, sizeof a) != 1) {
    perror("waking the DNS stub");
    return -1;
  }
  close(w);
  pthread_join(dns_th, NULL);
  close(dns_fd);
  return 0;
}

static const char *const methods[] = {"GET", "POST", "PATCH", "DELETE"};

/* No such host: one attempt, DNS_FAILED, not retried for any method (curl gives up at once). */
static void test_nxdomain_not_retried(void **s) {
  (void)s;
  for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
    int before = atomic_load(&queries_nx);
    lk_http_policy pol;
    ht_policy(&pol);
    ht_run r;
    ht_call_url(NULL, methods[m], "http://nx-host.test/x", "b", 1, &pol, &r);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].failure, LK_F_DNS_FAILED);
    assert_int_equal(r.att[0].phase, LK_PHASE_DNS);
    assert_int_equal(r.att[0].decision.reason, LK_REASON_NOT_RETRYABLE);
    assert_int_equal(r.err, LK_ENOTRETRYABLE);
    assert_true(atomic_load(&queries_nx) > before); /* the stub was asked: the answer was its */
    assert_true(r.wall < LK_MS(500));
    ht_free(&r);
  }
}

/* A resolver that never answers: every attempt ends at dns_timeout as DNS_TIMEOUT, is retried
 * for every method (nothing was sent), and the whole call ends within its deadline: abandoning
 * a lookup does not wait for glibc's resolver thread. */
static void test_dns_timeout_retried_within_deadline(void **s) {
  (void)s;
  for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
    lk_http_policy pol;
    ht_policy(&pol);
    pol.dns_timeout = LK_MS(200);
    ht_run r;
    ht_call_url(NULL, methods[m], "http://hang-host.test/x", "b", 1, &pol, &r);
    assert_int_equal(r.err, LK_EATTEMPTS);
    assert_int_equal(r.nattempts, 3);
    ht_all_kinds(&r, LK_F_DNS_TIMEOUT);
    for (size_t i = 0; i < r.nattempts; i++) {
      assert_int_equal(r.att[i].phase, LK_PHASE_DNS);
      assert_true(r.att[i].duration >= LK_MS(200));
      assert_true(r.att[i].duration < LK_MS(290)); /* the DNS timer, not the 300 ms attempt */
      if (i + 1 < r.nattempts)
        assert_true(r.att[i].decision.retry);
    }
    /* 3 x 200 ms + 2 x 30 ms of backoff, with room for a loaded machine, not for a 1 s join */
    assert_true(r.wall < LK_MS(950));
    ht_within_deadline(&r, &pol);
    ht_free(&r);
  }
  assert_true(atomic_load(&queries_hang) > 0);
}

/* Without a DNS timer the attempt timeout ends the lookup, still as DNS_TIMEOUT, and the
 * deadline still bounds the call. */
static void test_attempt_timeout_in_dns(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_MS(500);
  pol.attempt_timeout = LK_MS(200);
  ht_attempts(&pol, 10);
  ht_run r;
  ht_call_url(NULL, "POST", "http://hang-other.test/x", "b", 1, &pol, &r);
  /* 200 + 30 + 200 + 30 + what is left: the deadline, not the attempts, ends the call */
  assert_true(r.nattempts >= 2);
  ht_all_kinds(&r, LK_F_DNS_TIMEOUT);
  assert_int_equal(r.err, LK_EDEADLINE);
  assert_int_equal(lk_http_result_failure(r.res), LK_F_DNS_TIMEOUT);
  ht_within_deadline(&r, &pol);
  ht_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nxdomain_not_retried),
      cmocka_unit_test(test_dns_timeout_retried_within_deadline),
      cmocka_unit_test(test_attempt_timeout_in_dns),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
