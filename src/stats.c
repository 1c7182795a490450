/* stats.c: tw_stats (every shard's counters and lateness histogram,
 * summed under each shard's lock in turn), tw_version and tw_strerror. */
#include <errno.h>
#include <string.h>

#include "timer.h"

static uint64_t percentile(const uint64_t *hist, uint64_t total, double q)
{
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    if (want >= total)
        want = total - 1;
    for (int b = 0; b < TW__LATE_BUCKETS; b++) {
        seen += hist[b];
        if (seen > want)
            return b == 0 ? 0 : (b >= 64 ? UINT64_MAX : ((uint64_t)1 << b) - 1);
    }
    return UINT64_MAX;
}

void tw_stats(tw_timer *t, struct tw_stats *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof(*s));
    if (!t)
        return;
    uint64_t hist[TW__LATE_BUCKETS] = { 0 }, total = 0;
    s->memory_bytes = t->mem.bytes;
    s->entry_bytes = sizeof(struct tw__entry);
    for (uint32_t k = 0; k < t->nshards; k++) {
        struct tw__shard *sh = &t->shards[k];
        tw__shard_lock(t, sh);
        struct tw__engine *e = &sh->eng;
        tw__engine_settle(e); /* queued_buckets, retired_slots: as settled */
        s->pending += tw__engine_pending(e);
        s->scheduled += e->scheduled;
        s->fired += e->fired;
        s->cancelled += e->cancelled;
        s->drained += e->drained;
        s->cascaded += e->cascaded;
        s->rejected += e->rejected;
        if (e->nlevels > s->levels)
            s->levels = e->nlevels;
        s->queued_buckets += e->dq.n;
        s->advances += e->advances;
        s->bucket_pops += e->bucket_pops;
        s->memory_bytes += sh->mem.bytes;
        s->retired_slots += e->pool.retired;
        if (e->late_max > s->late_max_ns)
            s->late_max_ns = e->late_max;
        for (int b = 0; b < TW__LATE_BUCKETS; b++)
            hist[b] += e->late_hist[b];
        tw__shard_unlock(t, sh);
    }
    if (t->threaded)
        tw__runtime_late(t, &s->late_max_ns, hist);
    for (int b = 0; b < TW__LATE_BUCKETS; b++)
        total += hist[b];
    s->late_p50_ns = percentile(hist, total, 0.50);
    s->late_p99_ns = percentile(hist, total, 0.99);
    if (s->late_p50_ns > s->late_max_ns)
        s->late_p50_ns = s->late_max_ns;
    if (s->late_p99_ns > s->late_max_ns)
        s->late_p99_ns = s->late_max_ns;
}

/* meson.build's project version and the header's macros are one
 * version: the build passes the former in and fails when they differ. */
#if defined(TW__PROJECT_MAJOR) &&                                            \
    (TW__PROJECT_MAJOR != TW_VERSION_MAJOR || TW__PROJECT_MINOR != TW_VERSION_MINOR || \
     TW__PROJECT_PATCH != TW_VERSION_PATCH)
#error "meson.build's version and twheel.h's TW_VERSION_* differ"
#endif

unsigned tw_version(void)
{
    return TW_VERSION_HEX;
}

const char *tw_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case -EINVAL: return "invalid argument";
    case -ENOMEM: return "out of memory";
    case -ENOENT: return "no such pending task";
    /* also tw_create's when pthread_create finds no room for a thread */
    case -EAGAIN: return "limit reached (max_pending, or threads)";
    case -EDEADLK: return "not allowed from a callback of this timer";
    case -EPERM: return "not allowed on a threaded timer";
    case -ESHUTDOWN: return "timer stopped";
    case -EALREADY: return "timer already stopped";
    case -EBUSY: return "periodic task firing: its next deadline is not set yet";
    case -EFAULT: return "invariant violated";
    default: return "unknown error";
    }
}
