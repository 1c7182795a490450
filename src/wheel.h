/* wheel.h: one timing-wheel engine (see wheel.c for the design).
 *
 * A manual timer owns one engine; a threaded timer owns one per shard, each
 * behind its own lock. Nothing in here locks or calls user code. */
#ifndef TW_WHEEL_H
#define TW_WHEEL_H

#include <stdint.h>

#include "delay_queue.h"
#include "mem.h"
#include "pool.h"
#include "tickdiv.h"

#define TW__MAX_LEVELS 64
#define TW__LATE_BUCKETS 65

struct tw__bucket {
    struct tw__link link; /* list sentinel */
    uint32_t heap_index;  /* position in the delay queue or TW__NOT_QUEUED */
    uint32_t pad_;
};

struct tw__keymap {
    struct tw__extra **slots;
    uint32_t cap, n;      /* cap is 0 or a power of two */
};

struct tw__engine {
    struct tw__pool pool;
    struct tw__link expired; /* tasks collected, callbacks not yet run */
    uint64_t now_ns;         /* current time */
    uint64_t cur;            /* current time in ticks, floor(now / tick) */
    struct tw__div tick;
    uint32_t bits, mask, wsize;
    uint32_t nlevels, max_levels;
    uint8_t level_of_log2[64];
    struct tw__bucket *level[TW__MAX_LEVELS];
    struct tw__dq dq;
    struct tw__mem *mem;

    /* keyed and periodic tasks (extra.c) */
    struct tw__keymap keys;
    struct tw__extra *extra_free;
    uint32_t firing;         /* slot of the periodic task whose callback is
                                running, or TW__NIL */

    uint64_t pending, scheduled, fired, cancelled, drained, cascaded,
        rejected, advances, bucket_pops;
    uint64_t late_max;
    uint64_t late_hist[TW__LATE_BUCKETS]; /* by bit length of lateness */
};

int tw__engine_init(struct tw__engine *e, struct tw__mem *m, uint64_t tick_ns,
                    uint32_t wheel_size, uint64_t now_ns, uint32_t max_slots);
void tw__engine_destroy(struct tw__engine *e);

static inline struct tw__bucket *tw__bucket_at(const struct tw__engine *e,
                                               uint32_t bn)
{
    return &e->level[bn >> e->bits][bn & e->mask];
}

static inline struct tw__link *tw__link_at(struct tw__engine *e, uint32_t i)
{
    if (__builtin_expect(!(i & TW__SENT), 1))
        return &tw__pool_entry(&e->pool, i)->link;
    if (i == TW__EXPIRED_SENT)
        return &e->expired;
    return &tw__bucket_at(e, i & ~TW__SENT)->link;
}

static inline uint64_t tw__ticks_ceil(const struct tw__engine *e, uint64_t ns)
{
    return tw__div_ceil(&e->tick, ns);
}

/* The level whose span holds tick dt, for dt > cur. */
static inline uint32_t tw__level_for(const struct tw__engine *e, uint64_t dt)
{
    uint64_t delta = dt - e->cur;
    if (delta < e->wsize)
        return 0;
    uint32_t k = e->level_of_log2[63 - __builtin_clzll(delta)];
    while ((dt >> (e->bits * k)) - (e->cur >> (e->bits * k)) >= e->wsize)
        k++;
    return k;
}

/* Creates levels up to k. 0 or -ENOMEM (levels that were made are kept). */
int tw__wheel_add_levels(struct tw__engine *e, uint32_t k);

/* Makes sure the level for a task due at tick dt exists. 0 or -ENOMEM. */
static inline int tw__wheel_reserve_level(struct tw__engine *e, uint64_t dt)
{
    if (dt > e->cur) {
        uint32_t k = tw__level_for(e, dt);
        if (__builtin_expect(k >= e->nlevels, 0))
            return tw__wheel_add_levels(e, k);
    }
    return 0;
}

/* Makes sure a new task due at tick dt can be placed without allocating:
 * its level exists and a slot is free. 0 or -ENOMEM. */
static inline int tw__wheel_reserve(struct tw__engine *e, uint64_t dt)
{
    int rc = tw__wheel_reserve_level(e, dt);
    return rc ? rc : tw__pool_reserve(&e->pool, e->mem);
}

/* Makes sure that a periodic task can always be re-armed without
 * allocating: a deadline at most period_ns past the current tick never
 * needs a level above the one reserved here. 0 or -ENOMEM. */
int tw__wheel_reserve_period(struct tw__engine *e, uint64_t period_ns);

void tw__wheel_bucket_emptied(struct tw__engine *e, uint32_t bn);
void tw__wheel_queue_bucket(struct tw__engine *e, uint32_t bn, uint64_t exp);

/* Appends entry i to the list headed by sentinel s. */
static inline void tw__list_append(struct tw__engine *e, uint32_t s,
                                   uint32_t i, struct tw__entry *en)
{
    struct tw__link *head = tw__link_at(e, s);
    uint32_t tail = head->prev;
    en->link.next = s;
    en->link.prev = tail;
    tw__link_at(e, tail)->next = i;
    head->prev = i;
}

/* Unlinks an entry from whatever list holds it; a bucket left empty leaves
 * the delay queue. Only the entry itself is read: its neighbours are only
 * written, so a cancel costs one cache miss that the CPU waits for. */
static inline void tw__list_unlink(struct tw__engine *e, struct tw__entry *en)
{
    uint32_t n = en->link.next, p = en->link.prev;
    tw__link_at(e, p)->next = n;
    tw__link_at(e, n)->prev = p;
    /* n == p only when both are the sentinel of a list we just emptied */
    if (__builtin_expect(n == p, 0) && n != TW__EXPIRED_SENT)
        tw__wheel_bucket_emptied(e, n & ~TW__SENT);
}

/* Places entry i, due at tick dt, in its bucket (or in the current tick's
 * bucket when already due). The level must exist (tw__wheel_reserve). */
static inline void tw__wheel_place(struct tw__engine *e, uint32_t i,
                                   struct tw__entry *en, uint64_t dt)
{
    uint32_t k = 0;
    if (dt <= e->cur)
        dt = e->cur; /* due: the bucket of the current tick */
    else
        k = tw__level_for(e, dt);
    uint32_t shift = e->bits * k;
    uint32_t bn = (k << e->bits) | (uint32_t)((dt >> shift) & e->mask);
    struct tw__bucket *b = &e->level[k][bn & e->mask];
    tw__list_append(e, TW__SENT | bn, i, en);
    if (b->heap_index == TW__NOT_QUEUED)
        tw__wheel_queue_bucket(e, bn, (dt >> shift) << shift);
}

/* Moves every task due by tick `target` onto the expired list, cascading
 * coarse buckets on the way, and sets the current tick to target (never
 * backwards). Allocates nothing. Returns the number of buckets popped. */
uint64_t tw__wheel_collect(struct tw__engine *e, uint64_t target);

/* Moves every pending task of the wheel onto the expired list (drain). */
void tw__wheel_collect_all(struct tw__engine *e);

/* Records a lateness sample. */
static inline void tw__late_record(struct tw__engine *e, uint64_t late)
{
    if (late > e->late_max)
        e->late_max = late;
    e->late_hist[late ? 64 - __builtin_clzll(late) : 0]++;
}

#endif
