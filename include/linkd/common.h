/* SPDX-License-Identifier: MIT */
/* linkd/common.h: export macro and small shared definitions.
 *
 * Every public symbol is declared with LK_EXPORT; the library is built with -fvisibility=hidden,
 * so anything without it stays private to the shared object.
 */
#ifndef LINKD_COMMON_H
#define LINKD_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define LK_EXPORT __attribute__((visibility("default")))
#else
#define LK_EXPORT
#endif

#ifdef __cplusplus
#define LK_BEGIN_DECLS extern "C" {
#define LK_END_DECLS }
#else
#define LK_BEGIN_DECLS
#define LK_END_DECLS
#endif

/* Durations and instants are int64_t nanoseconds on CLOCK_MONOTONIC. */
#define LK_NS_PER_US INT64_C(1000)
#define LK_NS_PER_MS INT64_C(1000000)
#define LK_NS_PER_S INT64_C(1000000000)
#define LK_MS(x) ((int64_t)(x) * LK_NS_PER_MS)
#define LK_SEC(x) ((int64_t)(x) * LK_NS_PER_S)

#endif
