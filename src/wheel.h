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
#include "wrap.h"

#define TW__MAX_LEVELS 64

/* The hot paths are a few dozen instructions; a call per helper would
 * double them. */
#define TW__HOT static inline __attribute__((always_inline))
#define TW__LATE_BUCKETS 65

/* A bucket is TW__SUBS lists, not one: entry i goes to list
 * i % TW__SUBS. Walking a bucket (cascade, firing) follows all of them
 * round-robin, so TW__SUBS cache misses are in flight at once instead of one:
 * a single linked list of timers scattered over a large pool is a chain of
 * dependent DRAM misses (measured: 133 ns per fired timer at 10^6 with one
 * list). The list heads live in the pool, in front of slot 0 (see pool.h):
 * 8 bytes each, 64 bytes a bucket. Ref -3 is the expired list's head; list
 * j of bucket bn has ref -5 - 2 * (bn << TW__SUB_BITS | j). */
#define TW__SUB_BITS 3u
#define TW__SUBS (1u << TW__SUB_BITS)

/* Plain cancels whose unlink waits: a power of two (see "Deferred unlink"
 * in wheel.c). */
#define TW__DEFER 16u

struct tw__bucket {
    uint32_t heap_index; /* position in the delay queue or TW__NOT_QUEUED */
    uint32_t mask;       /* bit j set: list j is not empty */
};

/* What placing a task at level k needs, in one place. */
struct tw__level {
    /* the last tick level k can hold now, ((cur >> bk) + W << bk) - 1, or
     * UINT64_MAX where that passes 2^64; kept with cur (tw__wheel_set_cur)
     * so that choosing a level is one compare */
    uint64_t last;
    uint32_t shift; /* b * k */
    uint32_t sb;    /* sentinel of list 0 of the level's bucket 0 */
};

struct tw__keymap {
    struct tw__extra **slots;
    uint32_t cap, n;      /* cap is 0 or a power of two */
};

struct tw__engine {
    struct tw__pool pool;
    uint64_t now_ns;         /* current time (set with tw__engine_set_now) */
    uint64_t room;           /* delays below this keep now_ns + delay within
                                tick.lim (the exact hot tick conversion):
                                lim - now_ns + 1, or 0 past lim */
    uint64_t cur;            /* current time in ticks, floor(now / tick) */
    struct tw__div tick;
    uint32_t bits, wsize;       /* a level's growth: W = 2^bits = wsize */
    uint32_t sbits, smask;      /* its buckets: 2W = 2^sbits, 2W - 1 (see
                                   "Spreading the cascade" in wheel.c) */
    uint32_t nlevels, max_levels;
    uint8_t level_of_log2[64];
    struct tw__level lv[TW__MAX_LEVELS];
    struct tw__bucket *level[TW__MAX_LEVELS];
    struct tw__dq dq;
    struct tw__mem *mem;
    /* Cancelled plain tasks still linked, in cancel order from defer_pos
     * (TW__NIL where none): "Deferred unlink" in wheel.c. The slot
     * before defer_pos holds one exactly when any is held. */
    uint32_t defer[TW__DEFER];
    uint32_t defer_pos;

    /* keyed and periodic tasks (extra.c) */
    struct tw__keymap keys;
    struct tw__extra *extra_free;
    uint64_t extras;         /* records out of extra_free: one for each
                                slot in use by a keyed or periodic task.
                                While 0, a destroy frees the pool whole
                                instead of walking every list (timer.c) */
    uint32_t draining;       /* drains of this engine under way: while one
                                runs a callback (unlocked), every task it
                                has yet to hand back waits on the expired
                                list, due or not, so the driver leaves the
                                engine alone (runtime.c) */
    uint32_t taken;          /* periodic tasks taken to fire and not yet
                                finished: in no list while their callback
                                runs or waits in a batch or the workers'
                                queue (manual mode: at most one) */

    /* Counters. Every task leaves exactly one way (cancelled, drained, or
     * completed), so pending is not kept: it is scheduled minus those
     * three (tw__engine_pending), and schedule and cancel pay one counter
     * each. (Two counters bumped side by side have been merged by GCC into
     * one 16-byte vector load/add/store, whose load cannot be forwarded
     * from a narrower store still in the store buffer: measured, 55% of W1
     * time at 10^6 on that one instruction. Keep hot counters apart.) */
    uint64_t scheduled, fired, cancelled, drained, cascaded;
    uint64_t rejected, advances, bucket_pops;
    uint64_t completed; /* one-shot tasks taken to fire (fired counts
                           periodic firings too) */
    uint64_t late_max;
    uint64_t late_hist[TW__LATE_BUCKETS]; /* by bit length of lateness */
};

/* Tasks scheduled and not yet gone (fired, cancelled or drained); a
 * periodic task stays pending until it is cancelled or drained. */
static inline uint64_t tw__engine_pending(const struct tw__engine *e)
{
    return e->scheduled - e->cancelled - e->drained - e->completed;
}

/* The earliest bucket's expiration in ticks, UINT64_MAX if none: a mark
 * taken before a change, for tw__engine_head_earlier after it. */
static inline uint64_t tw__engine_head(const struct tw__engine *e)
{
    return e->dq.n ? e->dq.h[0].exp : UINT64_MAX;
}

/* Whether the change since `before` (tw__engine_head) made an earlier
 * earliest bucket: the threaded schedule's test for waking the driver.
 * With none before, any bucket now is earlier, one at tick UINT64_MAX
 * included, which a 1 ns tick gives the end of time (once a clock is
 * there, the driver sleeps with nothing pending until woken). A bucket at
 * that tick before counts as none: a needless wake-up, at the end of
 * time only. */
static inline int tw__engine_head_earlier(const struct tw__engine *e, uint64_t before)
{
    return tw__engine_head(e) < before || (before == UINT64_MAX && e->dq.n);
}

void tw__engine_flush(struct tw__engine *e);

/* Whether any cancel's unlink waits: the slot before defer_pos says. */
TW__HOT int tw__engine_deferring(const struct tw__engine *e)
{
    return e->defer[tw__wrap_sub32(e->defer_pos, 1u) & (TW__DEFER - 1u)] != TW__NIL;
}

/* Unlinks every deferred cancel ("Deferred unlink" in wheel.c): what
 * anything that walks, fires or counts the lists, or would take a fresh
 * slot while a cancelled one waits, calls first. One load and a branch
 * when none waits. */
TW__HOT void tw__engine_settle(struct tw__engine *e)
{
    if (__builtin_expect(tw__engine_deferring(e), 0))
        tw__engine_flush(e);
}

/* Rewinds the pool's free list (pool.h) when no slot is in use: no task
 * pending, none running, no drain under way. Called once an advance, after
 * its callbacks, where a count of zero means every slot has been put. */
static inline void tw__engine_rewind_if_empty(struct tw__engine *e)
{
    if (!e->taken && !e->draining && tw__engine_pending(e) == 0) {
        tw__engine_settle(e); /* the deferred cancels' slots, put first */
        tw__pool_rewind(&e->pool);
    }
}

/* Sets the engine's time, and the room the schedule fast path checks. */
static inline void tw__engine_set_now(struct tw__engine *e, uint64_t now_ns)
{
    e->now_ns = now_ns;
    e->room = now_ns <= e->tick.lim ? e->tick.lim - now_ns + 1 : 0;
}

int tw__engine_init(struct tw__engine *e, struct tw__mem *m, uint64_t tick_ns,
                    uint32_t wheel_size, uint64_t now_ns, uint32_t max_slots);
void tw__engine_destroy(struct tw__engine *e);

TW__HOT struct tw__bucket *tw__bucket_at(const struct tw__engine *e,
                                               uint32_t bn)
{
    return &e->level[bn >> e->sbits][bn & e->smask];
}

/* The sentinel (ref) of list j of bucket bn. */
TW__HOT uint32_t tw__sent(uint32_t bn, uint32_t j)
{
    return TW__EXPIRED_SENT - 2u - (((bn << TW__SUB_BITS) | j) << 1);
}

/* The bucket number of a bucket list's sentinel s, and its list in *j. */
TW__HOT uint32_t tw__sent_bucket(uint32_t s, uint32_t *j)
{
    uint32_t o = (TW__EXPIRED_SENT - 2u - s) >> 1;
    *j = o & (TW__SUBS - 1u);
    return o >> TW__SUB_BITS;
}

/* The list heads in front of slot 0 while the wheel has nlevels levels. */
TW__HOT uint32_t tw__sent_count(const struct tw__engine *e, uint32_t nlevels)
{
    return 1u + ((nlevels << e->sbits) << TW__SUB_BITS);
}

/* The link that ref r names: one address computation for entries and
 * list heads alike. */
TW__HOT struct tw__link *tw__link_at(const struct tw__engine *e, uint32_t r)
{
    return tw__pool_link(&e->pool, r);
}

/* The ref of the first task on the expired list, or TW__EXPIRED_SENT. */
TW__HOT uint32_t tw__expired_first(const struct tw__engine *e)
{
    return tw__link_at(e, TW__EXPIRED_SENT)->next;
}

TW__HOT uint64_t tw__ticks_ceil(const struct tw__engine *e, uint64_t ns)
{
    return tw__div_ceil(&e->tick, ns);
}

/* The level whose 2W blocks hold tick dt >= cur: the lowest k with
 * (dt >> bk) - (cur >> bk) < 2W, i.e. dt <= last[k]. With delta = dt - cur
 * and L = floor(log2(delta)), no level below (L - 1) / b can hold it
 * (delta >= 2W << bk) and the one above always can, so one compare decides
 * between the two: no loop. */
TW__HOT uint32_t tw__level_for(const struct tw__engine *e, uint64_t dt)
{
    uint32_t k = e->level_of_log2[63u - (uint32_t)__builtin_clzll((dt - e->cur) | 1u)];
    return k + (dt > e->lv[k].last);
}

/* The last tick level k can hold while the current tick is cur. */
uint64_t tw__wheel_level_last(const struct tw__engine *e, uint32_t k, uint64_t cur);

/* Sets the current tick (never backwards) and the levels' limits. */
void tw__wheel_set_cur(struct tw__engine *e, uint64_t cur);

/* Creates levels up to k. 0 or -ENOMEM (levels that were made are kept). */
int tw__wheel_add_levels(struct tw__engine *e, uint32_t k);

/* Makes sure the level for a task due at tick dt exists. 0 or -ENOMEM. */
static inline int tw__wheel_reserve_level(struct tw__engine *e, uint64_t dt)
{
    uint32_t k = tw__level_for(e, dt > e->cur ? dt : e->cur);
    return __builtin_expect(k >= e->nlevels, 0) ? tw__wheel_add_levels(e, k) : 0;
}

/* Makes sure a new task due at tick dt can be placed without allocating:
 * its level exists and a slot is free. 0 or -ENOMEM. */
static inline int tw__wheel_reserve(struct tw__engine *e, uint64_t dt)
{
    int rc = tw__wheel_reserve_level(e, dt);
    if (rc)
        return rc;
    rc = tw__pool_reserve(&e->pool, e->mem);
    /* The pool at its limit, or no memory to grow it: the deferred
     * cancels' slots, freed now, make the room, so that a cancel always
     * does. Short of that the pool grows while they wait: settled here
     * each time instead, a pool exactly full would flush a ring of one at
     * every schedule and never let it fill. */
    if (__builtin_expect(rc != 0, 0) && tw__engine_deferring(e)) {
        tw__engine_flush(e);
        rc = tw__pool_reserve(&e->pool, e->mem);
    }
    return rc;
}

/* Makes sure that a periodic task can always be re-armed without
 * allocating: a deadline at most period_ns past the current tick never
 * needs a level above the one reserved here. 0 or -ENOMEM. */
int tw__wheel_reserve_period(struct tw__engine *e, uint64_t period_ns);

/* Bucket list s just got its first task: marks it. Returns the bucket's
 * number if the whole bucket was empty until now (the caller queues it),
 * else TW__NIL. */
uint32_t tw__wheel_sub_started(struct tw__engine *e, uint32_t s);
/* List sentinel s just became empty: if it is a bucket's list, the bucket
 * leaves the delay queue when no list of it is left (the expired list
 * needs nothing). */
void tw__wheel_sub_emptied(struct tw__engine *e, uint32_t s);
void tw__wheel_queue_bucket(struct tw__engine *e, uint32_t bn, uint64_t exp);

/* Appends entry i to the list headed by sentinel s. */
TW__HOT void tw__list_append(struct tw__engine *e, uint32_t s,
                                   uint32_t i, struct tw__entry *en)
{
    struct tw__link *head = tw__link_at(e, s);
    uint32_t tail = head->prev, r = tw__ref(i);
    en->link.next = s;
    en->link.prev = tail;
    tw__link_at(e, tail)->next = r;
    head->prev = r;
}

/* Unlinks deferred slot i (its cancel's generation already set: never 0,
 * see cancel_task) and puts it on the free list. Returns 1 when that left
 * its list empty, whose sentinel is then *s (the caller calls
 * tw__wheel_sub_emptied), else 0. */
TW__HOT int tw__defer_unlink(struct tw__engine *e, uint32_t i, uint32_t *s)
{
    struct tw__pool *p = &e->pool;
    struct tw__entry *en = tw__pool_entry(p, i);
    uint32_t n = en->link.next, pv = en->link.prev;
    tw__pool_link(p, pv)->next = n; /* entries or list heads alike */
    tw__pool_link(p, n)->prev = pv;
    tw__pool_push(p, i);
    *s = n;
    /* n == pv only when both are the sentinel of a list just emptied */
    return n == pv;
}

/* Unlinks an entry from whatever list holds it; a bucket left empty leaves
 * the delay queue. Only the entry itself is read: its neighbours are only
 * written, so a cancel costs one cache miss that the CPU waits for. */
TW__HOT void tw__list_unlink(struct tw__engine *e, struct tw__entry *en)
{
    uint32_t n = en->link.next, p = en->link.prev;
    tw__link_at(e, p)->next = n;
    tw__link_at(e, n)->prev = p;
    /* n == p only when both are the sentinel of a list we just emptied */
    if (__builtin_expect(n == p, 0))
        tw__wheel_sub_emptied(e, n);
}

/* Appends entry i to its bucket at level k, due at tick dt (> cur when
 * k > 0; <= cur means due now: the current tick's bucket). The level must
 * exist. Returns the bucket number if the bucket was empty until now (the
 * caller queues it, with tw__wheel_bucket_exp), else TW__NIL. */
TW__HOT uint32_t tw__wheel_append(struct tw__engine *e, uint32_t i,
                                  struct tw__entry *en, uint64_t dt, uint32_t k)
{
    const struct tw__level *lv = &e->lv[k];
    uint32_t slot = (uint32_t)(dt >> lv->shift) & e->smask;
    uint32_t j = i & (TW__SUBS - 1u);
    uint32_t self = lv->sb - (((slot << TW__SUB_BITS) | j) << 1);
    struct tw__link *h = tw__link_at(e, self);
    uint32_t tail = h->prev, r = tw__ref(i);
    /* (stores ordered so that GCC does not merge the two links through a
     * vector register: four instructions for two) */
    en->link.next = self;
    h->prev = r;
    en->link.prev = tail;
    tw__link_at(e, tail)->next = r; /* the head itself if the list was empty */
    if (__builtin_expect(tail != self, 1))
        return TW__NIL;
    return tw__wheel_sub_started(e, self);
}

/* A bucket's expiration: dt rounded down to its level's width. */
static inline uint64_t tw__wheel_bucket_exp(const struct tw__engine *e, uint64_t dt, uint32_t k)
{
    uint32_t shift = e->bits * k;
    return (dt >> shift) << shift;
}

/* Places entry i at level k, due at tick dt (clamped to now if past). */
TW__HOT void tw__wheel_place_at(struct tw__engine *e, uint32_t i,
                                struct tw__entry *en, uint64_t dt, uint32_t k)
{
    if (dt < e->cur)
        dt = e->cur;
    uint32_t bn = tw__wheel_append(e, i, en, dt, k);
    if (bn != TW__NIL)
        tw__wheel_queue_bucket(e, bn, tw__wheel_bucket_exp(e, dt, k));
}

/* Marks a task placed short of its tick (below): only a periodic task's
 * re-arm without memory for its level does that, and tw_check then lets
 * its bucket bind it by its start alone. */
void tw__wheel_hold(struct tw__entry *en);

/* Places entry i, due at tick dt (or now, if dt is already due). A tick
 * past every level made (a periodic task re-armed without memory for the
 * level it needs: tw__finish_periodic) is held at the last tick the top
 * level reaches: that bucket comes due before the task, and collection,
 * which looks at each task's own tick, moves it on from there. Never
 * early; it costs a bucket pop (a wake-up, threaded) per move. */
TW__HOT void tw__wheel_place(struct tw__engine *e, uint32_t i,
                             struct tw__entry *en, uint64_t dt)
{
    uint32_t k = dt <= e->cur ? 0 : tw__level_for(e, dt);
    if (__builtin_expect(k >= e->nlevels, 0)) {
        k = e->nlevels - 1;
        dt = e->lv[k].last;
        tw__wheel_hold(en);
    }
    tw__wheel_place_at(e, i, en, dt, k);
}

/* Moves every task due by tick `target` onto the expired list, cascading
 * coarse buckets on the way, and sets the current tick to target (never
 * backwards). A held task (tw__wheel_place) is set aside until the tick
 * reaches its own, not held again span by span: it moves once a call.
 * Allocates nothing. Returns the number of buckets popped. */
uint64_t tw__wheel_collect(struct tw__engine *e, uint64_t target);

/* After an advance that popped a bucket: moves up to TW__SPREAD tasks per
 * level from the next bucket of each level k >= 1 down to level k - 1,
 * ahead of that bucket's time (see "Spreading the cascade" in wheel.c).
 * Allocates nothing, calls no user code, fires nothing. */
#define TW__SPREAD 1024u
void tw__wheel_spread(struct tw__engine *e);

/* Moves every pending task of the wheel onto the expired list (drain). */
void tw__wheel_collect_all(struct tw__engine *e);

/* Empties every list, the expired list included, and the delay queue,
 * visiting no task: their slots must then be freed by the caller
 * (drop_all in drain.c), or they are lost. O(buckets queued). */
void tw__wheel_clear(struct tw__engine *e);

/* Adds a lateness sample to a maximum and a histogram by bit length. */
TW__HOT void tw__late_add(uint64_t *max, uint64_t *hist, uint64_t late)
{
    if (late > *max)
        *max = late;
    hist[late ? 64 - __builtin_clzll(late) : 0]++;
}

/* Records a lateness sample. */
TW__HOT void tw__late_record(struct tw__engine *e, uint64_t late)
{
    tw__late_add(&e->late_max, e->late_hist, late);
}

#endif
