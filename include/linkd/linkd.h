/* SPDX-License-Identifier: MIT */
/* linkd/linkd.h: umbrella header for liblinkd. Each concept has its own header; include only the
 * ones you use, or this one for all of them. */
#ifndef LINKD_LINKD_H
#define LINKD_LINKD_H

#include <linkd/adaptive.h>
#include <linkd/advisor.h>
#include <linkd/backoff.h>
#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/callmetrics.h>
#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/deadline.h>
#include <linkd/duration.h>
#include <linkd/error.h>
#include <linkd/event.h>
#include <linkd/exec.h>
#include <linkd/failure.h>
#include <linkd/hedge.h>
#include <linkd/hist.h>
#include <linkd/http.h>
#include <linkd/idem.h>
#include <linkd/limiter.h>
#include <linkd/metrics.h>
#include <linkd/rand.h>
#include <linkd/retry.h>
#include <linkd/version.h>

#endif
