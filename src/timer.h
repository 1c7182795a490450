/* timer.h: the public tw_timer, its shards, and the dispatch helpers that
 * the API (timer.c, drain.c, stats.c) and the threaded runtime
 * (runtime.c) share. */
#ifndef TW_TIMER_H
#define TW_TIMER_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "extra.h"
#include "hash.h"
#include "lock.h"
#include "mem.h"
#include "twheel.h"
#include "wheel.h"

/* A shard's size, padded: 3 * 1024 bytes, so that finding shard si
 * (t->shards + si) is an lea and a shift. Its fields take 2,624 bytes on
 * x86-64 (41 lines), whose multiply took one instruction more on every
 * threaded schedule and cancel (callgrind: 290.3 instructions a threaded
 * W1 pair against 288.4); sizes of 1, 3, 5 or 9 times a power of two
 * take two. The padding costs 448 bytes a shard. */
#define TW__SHARD_BYTES 3072

struct tw__shard {
    union {
        struct {
            struct tw__lock lock; /* taken only in threaded mode (lock.h) */
            struct tw__mem mem;   /* per shard, so accounting needs no atomics */
            /* on a line of its own: threads spinning on a contended lock
             * keep reading its word, and would otherwise take the
             * engine's hottest fields (the pool's) from the holder on
             * every read */
            struct tw__engine eng __attribute__((aligned(64)));
        };
        char size_[TW__SHARD_BYTES];
    };
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct tw__shard) == TW__SHARD_BYTES,
               "a shard's fields outgrew its padding: pick the next size of "
               "1, 3, 5 or 9 times a power of two");

struct tw__runtime;

struct tw_timer {
    struct tw__mem mem; /* the timer's own blocks (struct, shards) */
    uint64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint64_t max_pending;
    _Atomic uint64_t total_pending; /* kept only when threaded with
                                       max_pending */
    struct tw__hash_key hkey; /* keyed tasks' hash (hash.h) */
    uint32_t nshards, shard_bits;
    int threaded;
    /* shard 0's engine when the manual fast paths of tw_schedule and
     * tw_cancel apply (manual mode, no max_pending), else NULL: one load
     * tells both whether they may run and where. */
    struct tw__engine *fast;
    int in_dispatch;    /* manual: a callback of tw_advance is running */
    struct tw__runtime *rt;
    _Atomic int stopped;  /* threaded: tw_stop has begun */
    struct tw__shard *shards;
    void *shards_raw;
    size_t shards_bytes;
};

/* A drain (tw_drain, tw_stop) whose callbacks this thread is running:
 * what tw_drain_arg returns. Kept per thread, not in the timer, so that
 * drains of one timer from several threads at once (or a drain racing
 * tw_stop) each see their own arg. A stack: a callback may drain another
 * timer. */
struct tw__drain_ctx {
    tw_timer *t;
    void *arg;
    struct tw__drain_ctx *prev;
};
void tw__drain_enter(struct tw__drain_ctx *c, tw_timer *t, void *arg);
void tw__drain_leave(struct tw__drain_ctx *c);

/* One collected task, ready for its callback. */
struct tw__job {
    tw_fn fn;
    void *arg;
    tw_id id;
    struct tw__extra *x; /* periodic: re-armed after the callback */
    uint64_t late;       /* threaded: its lateness, recorded once it is
                            sure to run (runtime.c, "Lateness") */
    uint32_t slot;
    uint32_t shard;
};

static inline tw_id tw__make_id(const tw_timer *t, uint32_t shard,
                                uint32_t slot, uint32_t gen)
{
    return ((uint64_t)gen << 32) | ((uint64_t)slot << t->shard_bits) | shard;
}

static inline uint32_t tw__id_shard(const tw_timer *t, tw_id id)
{
    return (uint32_t)id & (t->nshards - 1);
}

static inline uint32_t tw__id_slot(const tw_timer *t, tw_id id)
{
    return (uint32_t)id >> t->shard_bits;
}

static inline void tw__shard_lock(tw_timer *t, struct tw__shard *s)
{
    if (t->threaded)
        tw__lock(&s->lock);
}

static inline void tw__shard_unlock(tw_timer *t, struct tw__shard *s)
{
    if (t->threaded)
        tw__unlock(&s->lock);
}

static inline uint64_t tw__clock_now(const tw_timer *t)
{
    return t->clock(t->clock_ctx);
}

/* A task stops being pending (or an admitted one was never made): only
 * the threaded bound keeps a running count; the engine's own is derived
 * (tw__engine_pending). */
static inline void tw__pending_release(tw_timer *t)
{
    if (t->max_pending && t->threaded)
        atomic_fetch_sub(&t->total_pending, 1);
}

/* Frees task i, already out of every list: its slot (ids naming it go
 * stale), its extra record and key if it has one, and its place under
 * max_pending. The caller counts how it left. */
static inline void tw__task_free(tw_timer *t, struct tw__engine *e, uint32_t i,
                                 struct tw__entry *en)
{
    if (tw__is_extra(en)) {
        struct tw__extra *x = en->arg;
        if (x->key)
            tw__keymap_remove(e, x); /* its key is free from now on */
        tw__extra_put(e, x);
    }
    tw__pool_put(&e->pool, i);
    tw__pending_release(t);
}

/* Pops the head of the shard's expired list into *j. One-shot tasks are
 * released here (a cancel from now on returns -ENOENT); a periodic task is
 * marked firing. Returns 0, or -ENOENT when the list is empty. Call with
 * the shard lock held. Inline: it runs once per fired task. */
static inline int tw__take_job(tw_timer *t, uint32_t si, uint64_t now,
                               struct tw__job *j)
{
    struct tw__engine *e = &t->shards[si].eng;
    tw__engine_settle(e); /* a callback may have cancelled the next task */
    uint32_t r = tw__expired_first(e);
    if (r == TW__EXPIRED_SENT)
        return -ENOENT;
    uint32_t i = tw__ref_slot(r);
    struct tw__entry *en = tw__pool_entry(&e->pool, i);
    tw__list_unlink(e, en);
    uint64_t late = now > en->deadline ? now - en->deadline : 0;
    e->fired++;
    j->slot = i;
    j->shard = si;
    j->id = tw__make_id(t, si, i, *tw__pool_gen(&e->pool, i));
    j->x = NULL;
    j->fn = en->fn;
    j->arg = en->arg;
    if (tw__is_extra(en)) {
        struct tw__extra *x = en->arg;
        j->fn = x->fn;
        j->arg = x->arg;
        if (x->period) {
            x->state = TW__X_FIRING;
            en->link.next = en->link.prev = TW__NIL; /* in no list while it runs */
            e->taken++;
            j->x = x;
        }
    }
    /* Threaded, a taken task may still be handed back unrun (tw_stop; a
     * periodic one also by a cancel or drain): its lateness is recorded
     * only once it is sure to run (runtime.c, "Lateness"), so that
     * tw_stats measures what fired. Manual mode runs it next. */
    j->late = late;
    if (!t->threaded)
        tw__late_record(e, late);
    if (j->x)
        return 0;
    tw__task_free(t, e, i, en); /* one-shot */
    e->completed++;
    return 0;
}

/* After a periodic job's callback (or in its place, when it will not
 * run): re-arm it, or release it if it was cancelled or drained meanwhile.
 * Call with the shard lock held. */
void tw__finish_periodic(tw_timer *t, uint32_t shard, struct tw__job *j,
                         uint64_t now);

/* Hands every task of a shard back, unfired, through each. Takes and drops
 * the shard lock itself around the user calls when threaded. */
size_t tw__drain_shard(tw_timer *t, uint32_t shard, tw_fn each);

/* The earliest bucket expiration of a shard in ns, or UINT64_MAX. */
uint64_t tw__shard_next_ns(struct tw__engine *e);
/* The same into *ns; returns 1 if the shard has a bucket, 0 if none
 * (UINT64_MAX is also a bucket's time: one at, or clamped to, the end of
 * time). Call with the shard lock held. */
int tw__shard_next(struct tw__engine *e, uint64_t *ns);

/* Threaded runtime (runtime.c). */
int tw__runtime_start(tw_timer *t, const struct tw_options *o);
/* Every thread the runtime starts is started through this (pthread_create
 * unless a white-box test swaps it to make the Nth start fail, as the
 * allocator hook does for memory). Not exported. */
extern int (*tw__thread_create)(pthread_t *th, const pthread_attr_t *attr,
                                void *(*fn)(void *), void *arg);
void tw__runtime_kick(tw_timer *t, uint64_t exp_ns);

/* When set (by a white-box test; NULL otherwise), called with each memory
 * account a timer lets go of, once everything allocated through it has
 * been freed: each shard's as tw_destroy (or a failed tw_create) frees it,
 * and the timer's own last. Every block is freed with the size it was
 * allocated with, so the account's bytes are 0 there: a size named wrong
 * would unmap the wrong length of a mapped block, and skews tw_stats'
 * memory_bytes. Not exported. */
extern void (*tw__mem_released)(const struct tw__mem *m);

/* Adds the lateness of the one-shot jobs the workers took to *max and
 * hist (TW__LATE_BUCKETS counts). */
void tw__runtime_late(tw_timer *t, uint64_t *max, uint64_t *hist);
void tw__runtime_free(tw_timer *t);
/* 1 on the timer's own driver or worker threads. */
int tw__runtime_own_thread(tw_timer *t);

/* 1 when the calling thread is inside a callback of t: firing (manual or
 * threaded), a drain's `each`, or tw_stop's `unfired`. */
int tw__in_callback(tw_timer *t);
/* A contract broken in a way no error code can report (a void call, and
 * going on would run on freed memory): writes "twheel: <what>" to stderr
 * and aborts. */
_Noreturn void tw__misuse(const char *what);

#endif
