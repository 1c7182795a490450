/* wheel.c: the hierarchical timing wheel and its delay queue.
 *
 * Design
 * ------
 * Time is counted in ticks of tick_ns. Level 0's buckets are one tick
 * wide and W = 2^b (wheel_size) of them make its span; level k+1's buckets
 * are each as long as the whole span of level k. Each level keeps 2W
 * buckets, not W, and a task may go into any of the 2W blocks from the
 * current one (below). With the defaults (1 ms tick, W = 64):
 *
 *   level  bucket width      level span        holds tasks due within
 *   0      1 ms              64 ms             128 ms
 *   1      64 ms             4.1 s             8.2 s
 *   2      4.1 s             4.4 min           8.7 min
 *   3      4.4 min           4.7 h             9.3 h
 *   4      4.7 h             12.4 days         24.9 days
 *   5      12.4 days         2.2 years         4.4 years
 *   ...    up to the level that covers all of uint64_t ns (level 7 here)
 *
 * Level 0 is made with the timer; a higher level is made the first time a
 * task needs it (Kafka's lazy overflow wheel), and with it we reserve room
 * for its buckets in the delay queue, so nothing on the advance path can
 * fail for lack of memory.
 *
 * A task due at tick d goes into the finest level k whose 2W blocks,
 * counted from the current tick rounded down to level k's width, cover d:
 * (d >> bk) - (cur >> bk) < 2W. Its bucket is (d >> bk) mod 2W and the
 * bucket's expiration is d rounded down to level k's width. The blocks in
 * use at a level lie within 2W of the current one, so at any moment each
 * bucket stands for exactly one range of time and never mixes tasks from
 * two rotations.
 *
 * Why 2W blocks, not W (Kafka's rule, and this file's until 2026-11): a
 * coarse bucket comes due at its start, when its tasks move down a level,
 * and that can come long before they are due. Placed by W blocks, a task
 * 263 s out placed 1 s before a level-3 boundary (level 3's blocks are
 * 262 s) went into the level-3 bucket starting at that boundary, and an
 * idle timer woke 1 s later to move it, with nothing due for four minutes
 * (twheel-bench W3, 10^5 timers over 1 min .. 24 h: about one 10 s window
 * in 26 saw such a wake-up). By 2W blocks, a task at level k >= 1 did not
 * fit level k - 1's 2W blocks, so it is due at least (2W - 1) blocks of
 * level k - 1 from now, and its bucket starts after
 * delta * (W - 1) / (2W - 1) of its delay delta has passed: about half,
 * whatever the clock's alignment (test_api.c, test_coarse_bucket_not_soon).
 * It costs no memory: the 2W buckets were there for the spread (below),
 * and the level choice is the same table lookup and compare. What it does
 * cost: with tasks spread over twice the buckets of a level, a bucket's
 * lists start and empty more often (2 instructions more a W1 pair at
 * N = 10^4, 141 -> 143 then; W1 and W2 times unchanged within the noise).
 *
 * Every non-empty bucket sits in one binary heap keyed by its expiration
 * (delay_queue.c). The clock never walks empty ticks: tw_advance pops
 * buckets whose expiration has come, in order. A level-0 bucket's tasks
 * are due and move to the expired list one by one, in a walk that takes
 * the bucket's eight lists in turn and prefetches each list's next entry,
 * so that their cache misses overlap before the callbacks need them (a
 * splice of each list would be O(1), but left the firing loop to take one
 * miss after another: 1.4x to 2.6x the CPU per timer fired, measured in
 * benchmarks/results/history.md). A coarser bucket's tasks are
 * re-inserted relative to the bucket's own expiration, which demotes
 * each to a finer level (or to the expired list when due); the new
 * buckets are due no later than the target, so the same advance pops them
 * in turn. Cost: one heap operation per bucket that comes due and O(1) per
 * task per level it descends, never anything per tick that passed. A task
 * descends at most once per level, so its lifetime cost is O(levels).
 *
 * Spreading the cascade. Done whole at its tick, a coarse bucket's cascade
 * holds up that tick's due tasks, which are somewhere in its lists: with
 * 10^6 tasks spread over 2 s (twheel-bench W2) a level-1 bucket holds
 * ~31,000, and its tick took ~1 ms against ~0.03 ms for an ordinary one,
 * which was most of threaded W2's p99 lateness. So each level has 2W
 * buckets, not W (what comes down early lands in the blocks past the
 * first W; since 2026-11 the placement rule above uses them too). After
 * every advance that popped a bucket (after its callbacks in
 * manual mode; after the due tasks are taken in threaded mode), for each
 * level k >= 1, up to TW__SPREAD (1024) tasks of level k's *next* bucket
 * (the block after the current one) move to level k - 1, whose 2W blocks
 * from the current one reach the end of that bucket. A busy timer thus
 * empties each coarse bucket in slices before its tick comes (W2: ~31
 * slices a level-1 bucket; its longest advance on a simulated clock 0.09
 * to 0.10 ms of CPU instead of 0.70 to 0.99, threaded p99 1.05 to 1.10 ms
 * instead of 1.24 to 1.76; benchmarks/results/history.md), and whatever
 * is left when the tick comes cascades whole, as before. The work is the
 * same moves, done earlier: a task cancelled in between was moved for
 * nothing, which costs little since the window is the last 1/W of the
 * task's time at that level. An advance that pops nothing spreads
 * nothing, so an idle timer does no work and takes no extra wake-up (W3),
 * and a spread moves tasks only to buckets due no earlier than the one
 * they leave, so the next deadline it reports never moves earlier.
 * Cost: twice the bucket heads, 144 bytes per slot and level instead of
 * 72 (9 KB a level at W = 64).
 *
 * Never early: a deadline is rounded UP to the tick (tw__ticks_ceil) before
 * it is placed, a bucket is popped only when the target tick, floor(now
 * / tick), has reached its expiration, and of its tasks only those whose
 * own tick that is go to be fired (one pushed later is placed anew, below;
 * empty_bucket). So a task fires at the first advance
 * with now >= ceil(deadline / tick) * tick: never before its deadline, and
 * at most one tick after it for a caller advancing to tw_next_deadline.
 *
 * Order: buckets leave the heap in (expiration, bucket number) order and
 * each list is FIFO, so tasks whose deadlines are a tick or more apart fire
 * in deadline order and ties fire in a deterministic order.
 *
 * Cancel: lists are doubly linked through 32-bit refs (scaled offsets
 * from slot 0); a list's head (sentinel) is a link of its own in front of
 * slot 0 (pool.h), so links to heads and to entries are followed the same
 * way. An entry therefore need not remember its bucket: unlinking it
 * touches only its two neighbours, and finding both neighbours to be the
 * same sentinel is what tells us that bucket just became empty, so it
 * leaves the heap and costs no wake-up later.
 *
 * Deferred unlink. With a million timers pending, the task a cancel names
 * is a random line of the pool and so are its two neighbours: three cache
 * misses, the last two stores whose addresses wait for the first. So a
 * plain cancel makes the id stale at once (the generation moves on: any
 * later use of it is refused) and counts the task gone, but leaves it
 * linked: it puts the slot in a ring of TW__DEFER (16); the unlink, and
 * the slot's return to the free list, is done by the cancel TW__DEFER
 * later, reading the links as they are then (a neighbour unlinked
 * meanwhile has already been stepped over). By then the task's own line,
 * which its cancel read, is in the cache: the two stores have their
 * addresses at once and wait for their lines in the store buffer, off
 * the path of the loads that follow. W1 at 10^6, A/B: 15% less time a
 * pair in manual mode, 29% threaded (benchmarks/results/history.md).
 * The cancel also prefetched both neighbours until 2026-11-30: without
 * the prefetches, W1 took 16% less again at 10^6 and 19% at 10^5 on a
 * Zen 5 guest (9% at 10^6 on a Zen 4 guest), threaded W1 the same within
 * noise (history.md, "The cancel prefetches nothing"). Until its unlink
 * the dead task sits in its list, and every reader of the lists or the
 * queue that would take it for a live one settles first
 * (tw__engine_settle: all of them unlinked, oldest first): a collection,
 * the taking of each expired task (a callback may have cancelled the
 * next), a drain, the next deadline, the pool's rewind, tw_stats. (So an
 * event loop that asks tw_next_deadline at every turn settles at every
 * turn: the overlap then spans one turn's cancels.) A cascade may move a
 * dead task down a level meanwhile; harmless, it stays linked where the
 * ring finds it. A full pool grows rather than settle (settling there, a
 * pool exactly full would flush a ring of one at every schedule); only
 * where it cannot grow (a shard's limit, no memory) does the ring give
 * its slots back first, so that a cancel always makes room. A cancel that
 * wraps a slot's generation retires it at once instead. tw_check checks
 * the ring and counts its tasks apart. Cost: up to 16 slots a shard held
 * a little longer, and ~13 instructions a W1 pair (141 -> 154). With the
 * prefetches (17 then), a pair took ~1-2 ns more where the caches are
 * hot (the task recent, W1r, or the timer small, W1 at 10^4) than with
 * an eager unlink; without them, those rows ran faster than with them.
 *
 * Pushing a deadline later. An idle timeout is pushed back at every
 * request on its connection, many times for each time it could fire.
 * Moving the task each time is an unlink and an append, with the two
 * neighbours' cache misses the deferred cancel above avoids. So when
 * tw_reschedule gives a plain task a deadline no earlier than its own,
 * and the task is still in the wheel (its tick after the current one),
 * the new deadline is only written into the entry: the task stays in its
 * bucket, whose expiration is no later than the old deadline's tick, so
 * no later than the new one's. When that bucket comes due, collection
 * reads each task's tick before it takes it (level 0 included, which
 * until then fired a level-0 bucket's tasks unread), and places a task
 * not yet due anew, as a cascade does; the spread does the same for a
 * task due past the level it would move to. However often a task is
 * pushed, it moves at most once per bucket it sat in that came due, and
 * the move is part of a walk whose next entries are prefetched. Never
 * early holds: what fires is only what collection finds due. A push
 * past the levels made so far moves the task at once, after making its
 * level, so that a later move never needs memory. Not for an earlier
 * deadline (it must move now), a keyed or periodic task (their records
 * follow their place), a task on the expired list (due: it moves at
 * once) or while a drain is under way.
 * Cost: a pushed task's old bucket may be the earliest one, so
 * tw_next_deadline and the threaded driver may wake for it with nothing
 * to fire (once per bucket, as for a coarse bucket's cascade); tw_check
 * then allows a plain task past its bucket's end; and ~6 instructions per
 * task fired, to read its tick. twheel-bench W6 (idle timeouts), A/B
 * against moving at each push: see benchmarks/results/history.md.
 *
 * Re-arming a periodic task. At tw_schedule_every the level its period
 * needs is made (tw__wheel_reserve_period), so that re-arming from the
 * engine's time never allocates: manual mode re-arms from there. Threaded,
 * a task re-arms from the clock read when its callback returns, and the
 * engine's time is the driver's last pass over the shard, which may be
 * far behind (a long callback, or workers that fell behind, leave the
 * driver waiting): the distance is the lag plus a period, and no reserve
 * made in advance covers the lag. So the re-arm makes the level it needs
 * then (tw__finish_periodic, under the shard lock, as a schedule would);
 * until 2026-11-29 it placed the task in a level never made, and the
 * task was lost. Without memory for it, tw__wheel_place holds the task
 * in the last bucket the levels reach, before its tick, and collection
 * moves it on each time that bucket comes due, until a level made holds
 * it: never early, and nothing lost, at a bucket pop (threaded, a
 * wake-up) a move; the task is marked (tw__wheel_hold), and tw_check
 * lets a marked task's bucket bind it by its start alone. A collection
 * that meets a held task sets it aside rather than holding it again one
 * span on, and puts it back when the current tick reaches it (the tick
 * moves there: no bucket lies before it) or at the collection's end:
 * moved on one span at a time, a pass catching up on a long lag popped
 * its bucket once per span (with 1 ns ticks and one level of 2 slots, a
 * 2^52 ns lag was 2^50 pops, under the shard lock: found 2026-11-29 by
 * the model once its callbacks moved the clock). So a move per
 * collection, at most: per pass, threaded.
 */
#include <errno.h>
#include <string.h>

#include "wheel.h"

/* Points a list head at itself: an empty list. */
static void sent_init(struct tw__engine *e, uint32_t s)
{
    struct tw__link *h = tw__link_at(e, s);
    h->next = h->prev = s;
}

int tw__wheel_add_levels(struct tw__engine *e, uint32_t k)
{
    if (k >= e->max_levels)
        return -ENOMEM; /* cannot happen: the top level covers 2^64 */
    while (e->nlevels <= k) {
        uint32_t lv = e->nlevels;
        /* reserve the delay-queue room for the new buckets first */
        int rc = tw__dq_reserve(&e->dq, e->mem, (lv + 1) << e->sbits);
        if (rc)
            return rc;
        struct tw__bucket *b =
            tw__alloc(e->mem, ((size_t)1 << e->sbits) * sizeof(*b));
        if (!b)
            return -ENOMEM;
        if ((rc = tw__pool_grow_front(&e->pool, e->mem, tw__sent_count(e, lv + 1)))) {
            tw__free(e->mem, b, ((size_t)1 << e->sbits) * sizeof(*b));
            return rc;
        }
        for (uint32_t s = 0; s <= e->smask; s++) {
            for (uint32_t j = 0; j < TW__SUBS; j++)
                sent_init(e, tw__sent((lv << e->sbits) | s, j));
            b[s].heap_index = TW__NOT_QUEUED;
            b[s].mask = 0;
        }
        e->level[lv] = b;
        e->nlevels++;
    }
    return 0;
}

/* The last tick level k can hold while the current tick is cur. */
uint64_t tw__wheel_level_last(const struct tw__engine *e, uint32_t k, uint64_t cur)
{
    uint32_t s = e->bits * k; /* < 64 for every level */
    uint64_t base = cur >> s;
    uint64_t room = UINT64_MAX >> s; /* (base + 2W) << s must not pass it */
    uint64_t span = 2u * (uint64_t)e->wsize;
    if (room < span || base > room - span)
        return UINT64_MAX;
    return ((base + span) << s) - 1;
}

void tw__wheel_set_cur(struct tw__engine *e, uint64_t cur)
{
    uint64_t old = e->cur;
    if (cur <= old)
        return;
    e->cur = cur;
    /* level k's limit moves only when cur >> bk does, and then so did
     * every finer level's */
    for (uint32_t k = 0; k < e->max_levels; k++) {
        uint32_t s = e->bits * k;
        if ((old >> s) == (cur >> s))
            break;
        e->lv[k].last = tw__wheel_level_last(e, k, cur);
    }
}

int tw__engine_init(struct tw__engine *e, struct tw__mem *m, uint64_t tick_ns,
                    uint32_t wheel_size, uint64_t now_ns, uint32_t max_slots)
{
    memset(e, 0, sizeof(*e));
    e->mem = m;
    e->pool.free_head = e->pool.spare = TW__NIL;
    e->pool.max_slots = max_slots;
    tw__div_init(&e->tick, tick_ns);
    e->wsize = wheel_size;
    e->bits = (uint32_t)__builtin_ctz(wheel_size);
    e->sbits = e->bits + 1;
    e->smask = 2 * wheel_size - 1;
    e->max_levels = (64 + e->bits - 1) / e->bits;
    /* a distance of at least 2^j cannot be held by level k once
     * 2^j >= 2W << bk, i.e. for k < (j - 1) / b; level (j - 1) / b + 1
     * always can (wheel.h, tw__level_for) */
    for (uint32_t j = 0; j < 64; j++)
        e->level_of_log2[j] = (uint8_t)(j ? (j - 1) / e->bits : 0);
    for (uint32_t k = 0; k < TW__DEFER; k++)
        e->defer[k] = TW__NIL;
    tw__engine_set_now(e, now_ns);
    uint64_t r;
    e->cur = tw__div_floor(&e->tick, now_ns, &r);
    for (uint32_t k = 0; k < e->max_levels; k++) {
        e->lv[k].last = tw__wheel_level_last(e, k, e->cur);
        e->lv[k].shift = e->bits * k;
        e->lv[k].sb = tw__sent(k << e->sbits, 0);
    }
    e->pool.front_max = tw__pool_front_for(tw__sent_count(e, e->max_levels));
    int rc = tw__pool_grow_front(&e->pool, m, tw__sent_count(e, 0));
    if (!rc) {
        sent_init(e, TW__EXPIRED_SENT);
        rc = tw__wheel_add_levels(e, 0);
    }
    if (rc)
        tw__engine_destroy(e);
    return rc;
}

void tw__engine_destroy(struct tw__engine *e)
{
    for (uint32_t k = 0; k < e->nlevels; k++)
        tw__free(e->mem, e->level[k], ((size_t)1 << e->sbits) * sizeof(struct tw__bucket));
    e->nlevels = 0;
    tw__dq_destroy(&e->dq, e->mem);
    tw__pool_destroy(&e->pool, e->mem);
}

void tw__engine_flush(struct tw__engine *e)
{
    for (uint32_t k = 0; k < TW__DEFER; k++) {
        uint32_t pos = (e->defer_pos + k) & (TW__DEFER - 1u); /* oldest first */
        uint32_t i = e->defer[pos];
        if (i != TW__NIL) {
            e->defer[pos] = TW__NIL;
            uint32_t s;
            if (tw__defer_unlink(e, i, &s))
                tw__wheel_sub_emptied(e, s);
        }
    }
}

void tw__wheel_queue_bucket(struct tw__engine *e, uint32_t bn, uint64_t exp)
{
    tw__dq_push(&e->dq, exp, bn, &tw__bucket_at(e, bn)->heap_index);
}

uint32_t tw__wheel_sub_started(struct tw__engine *e, uint32_t s)
{
    uint32_t j, bn = tw__sent_bucket(s, &j);
    struct tw__bucket *b = tw__bucket_at(e, bn);
    uint32_t was = b->mask;
    b->mask = was | (1u << j);
    return was ? TW__NIL : bn;
}

void tw__wheel_sub_emptied(struct tw__engine *e, uint32_t s)
{
    if (s == TW__EXPIRED_SENT)
        return;
    uint32_t j, bn = tw__sent_bucket(s, &j);
    struct tw__bucket *b = tw__bucket_at(e, bn);
    b->mask &= ~(1u << j);
    if (!b->mask && b->heap_index != TW__NOT_QUEUED)
        tw__dq_remove(&e->dq, b->heap_index);
}

/* Moves the list first..last to the end of the expired list. */
static void splice_to_expired(struct tw__engine *e, uint32_t first,
                              uint32_t last)
{
    struct tw__link *x = tw__link_at(e, TW__EXPIRED_SENT);
    uint32_t tail = x->prev;
    tw__link_at(e, tail)->next = first;
    tw__link_at(e, first)->prev = tail;
    tw__link_at(e, last)->next = TW__EXPIRED_SENT;
    x->prev = last;
}

/* Both cache lines of the entry that ref r names (see empty_bucket). */
static inline void prefetch_entry(const struct tw__engine *e, uint32_t r)
{
    const char *p = (const char *)tw__ref_entry(&e->pool, r);
    __builtin_prefetch(p);
    __builtin_prefetch(p + sizeof(struct tw__entry) - 1);
}

/* The tasks a collection set aside because no level made reaches their
 * tick from the current one (see "Re-arming a periodic task" above):
 * chained through their `next` links, in the order met, with the
 * earliest tick among them. Only tw__wheel_collect has one, and it is
 * empty again when that returns. */
struct parked {
    uint32_t head, tail; /* refs; TW__NIL when empty */
    uint64_t min;        /* the earliest tick of the chain */
};

static void park(struct tw__engine *e, struct parked *pk, uint32_t r,
                 struct tw__entry *en, uint64_t dt)
{
    en->link.next = TW__NIL;
    if (pk->head == TW__NIL)
        pk->head = r;
    else
        tw__ref_entry(&e->pool, pk->tail)->link.next = r;
    pk->tail = r;
    if (dt < pk->min)
        pk->min = dt;
}

/* Places every parked task that a level made now reaches (at least the
 * earliest, once the current tick is its own), in the order parked; with
 * `all`, the rest too, each held short of its tick (tw__wheel_place), as
 * it was before collection met it. */
static void unpark(struct tw__engine *e, struct parked *pk, int all)
{
    uint32_t r = pk->head;
    pk->head = pk->tail = TW__NIL;
    pk->min = UINT64_MAX;
    while (r != TW__NIL) {
        struct tw__entry *en = tw__ref_entry(&e->pool, r);
        uint32_t next = en->link.next, i = tw__ref_slot(r);
        /* dt >= cur: parked past the current tick, which never passes
         * the earliest parked one (tw__wheel_collect) */
        uint64_t dt = tw__ticks_ceil(e, en->deadline);
        uint32_t k = tw__level_for(e, dt);
        if (k < e->nlevels)
            tw__wheel_place_at(e, i, en, dt, k);
        else if (all)
            tw__wheel_place(e, i, en, dt);
        else
            park(e, pk, r, en, dt);
        r = next;
    }
}

/* Takes every task out of bucket bn, visiting its lists round-robin with
 * the next entry of each list prefetched, so that the misses of the
 * lists overlap. A task due by the current tick goes to the expired list;
 * any other is placed again relative to the current tick, which demotes
 * it to a finer level (a held task that no level made reaches yet is set
 * aside on pk instead). Level-0 tasks are all due, but for one whose
 * deadline tw_reschedule pushed later in place, which is placed anew.
 *
 * Both ends of the next entry are prefetched: a 36-byte entry spans two
 * cache lines at half the positions, and the deadline (read here when
 * cascading) and the callback (read when firing) often lie in the second.
 * A walk that prefetched only the first line waited for the second's
 * miss on its own: ~35 ns more per timer in W2, in real time, where the
 * entries have left the cache since they were placed. With no prefetch
 * at all, on the Zen 5 guest, warm W2 took 0.173 CPU s per million
 * against 0.162, and cold W2 tied (history.md, "The free list's and the
 * walk's prefetches, taken out again"). */
static void empty_bucket(struct tw__engine *e, uint32_t bn, int cascade,
                         struct parked *pk)
{
    struct tw__bucket *b = tw__bucket_at(e, bn);
    uint32_t cursor[TW__SUBS], live = 0;
    for (uint32_t j = 0; j < TW__SUBS; j++) {
        uint32_t self = tw__sent(bn, j);
        struct tw__link *h = tw__link_at(e, self);
        cursor[j] = h->next;
        live += cursor[j] != self;
        h->next = h->prev = self;
    }
    b->mask = 0;
    while (live) {
        for (uint32_t j = 0; j < TW__SUBS; j++) {
            uint32_t r = cursor[j], self = tw__sent(bn, j);
            if (r == self)
                continue;
            struct tw__entry *en = tw__ref_entry(&e->pool, r);
            uint32_t i = tw__ref_slot(r);
            uint32_t next = en->link.next;
            cursor[j] = next;
            if (next != self)
                prefetch_entry(e, next);
            else
                live--;
            /* never early: a level-0 task is looked at too, since one
             * pushed later (tw_reschedule) may sit in a bucket before its
             * tick */
            uint64_t dt = tw__ticks_ceil(e, en->deadline);
            if (dt <= e->cur) {
                tw__list_append(e, TW__EXPIRED_SENT, i, en);
                e->cascaded += (uint64_t)cascade;
                continue;
            }
            uint32_t k = tw__level_for(e, dt);
            if (__builtin_expect(k < e->nlevels, 1))
                tw__wheel_place_at(e, i, en, dt, k);
            else /* a held task, past every level made: set aside */
                park(e, pk, r, en, dt);
            e->cascaded++;
        }
    }
}

uint64_t tw__wheel_collect(struct tw__engine *e, uint64_t target)
{
    tw__engine_settle(e);
    uint64_t pops = 0;
    struct parked pk = { TW__NIL, TW__NIL, UINT64_MAX };
    for (;;) {
        const struct tw__dq_node *top = tw__dq_min(&e->dq);
        /* A held task due before the next bucket: the current tick moves
         * to its tick (no bucket lies before it), where it is placed,
         * due, and popped in its turn: in order, never early. Put back
         * into the wheel at each bucket instead, it would be held again
         * one top-level span on, and a collection far behind its target
         * (a driver catching up after a long callback) would pop and move
         * it once per span all the way there: 2^50 times, for a 2^52 ns
         * lag over one 2-slot level of 1 ns ticks (test_model found the
         * spin). */
        if (pk.head != TW__NIL && pk.min <= target && (!top || pk.min < top->exp)) {
            tw__wheel_set_cur(e, pk.min);
            unpark(e, &pk, 0);
            continue;
        }
        if (!top || top->exp > target)
            break;
        uint64_t exp = top->exp;
        uint32_t bn = top->bn;
        tw__dq_remove(&e->dq, 0);
        pops++;
        /* Re-insertion is relative to the bucket's own time, which is what
         * demotes its tasks by one level at least. */
        tw__wheel_set_cur(e, exp);
        empty_bucket(e, bn, bn > e->smask, &pk);
    }
    tw__wheel_set_cur(e, target);
    /* the tasks still set aside are due after the target: back into the
     * wheel, held once more where no level made reaches them yet, one
     * move per collection. (A re-arm's task
     * fits by now, its period's level made, unless the clock went back
     * since its re-arm: test_held_task_clock_back.) */
    if (pk.head != TW__NIL)
        unpark(e, &pk, 1);
    e->bucket_pops += pops;
    return pops;
}

/* Moves up to `budget` tasks of bucket bn (level k >= 1) down to level
 * k - 1, taking the head of each list in turn with the next entry
 * prefetched, as empty_bucket does. */
static void spread_bucket(struct tw__engine *e, uint32_t bn, uint32_t k,
                              uint32_t budget)
{
    struct tw__bucket *b = tw__bucket_at(e, bn);
    uint32_t moved = 0;
    while (b->mask && moved < budget) {
        for (uint32_t j = 0; j < TW__SUBS; j++) {
            uint32_t self = tw__sent(bn, j);
            struct tw__link *h = tw__link_at(e, self);
            uint32_t r = h->next;
            if (r == self)
                continue;
            struct tw__entry *en = tw__ref_entry(&e->pool, r);
            uint32_t next = en->link.next;
            h->next = next;
            tw__link_at(e, next)->prev = self;
            if (next != self)
                prefetch_entry(e, next);
            else
                tw__wheel_sub_emptied(e, self); /* the last list leaves the queue */
            /* the task is due in the next block of level k, after cur,
             * within level k - 1's 2W blocks from the current one (never
             * early: dt is its own rounded-up tick, as everywhere); one
             * pushed later (tw_reschedule) may be due past them, and goes
             * to the level its tick needs */
            uint64_t dt = tw__ticks_ceil(e, en->deadline);
            if (__builtin_expect(dt <= e->lv[k - 1].last, 1))
                tw__wheel_place_at(e, tw__ref_slot(r), en, dt, k - 1);
            else
                tw__wheel_place(e, tw__ref_slot(r), en, dt);
            moved++;
        }
    }
    e->cascaded += moved;
}

void tw__wheel_spread(struct tw__engine *e)
{
    for (uint32_t k = e->nlevels; k-- > 1;) {
        uint32_t shift = e->bits * k;
        uint64_t next = (e->cur >> shift) + 1;
        uint32_t bn = (k << e->sbits) | ((uint32_t)next & e->smask);
        struct tw__bucket *b = tw__bucket_at(e, bn);
        /* the bucket of that slot holds the next block or nothing: its
         * blocks lie within 2W of the current one (check.c) */
        if (b->mask)
            spread_bucket(e, bn, k, TW__SPREAD);
    }
}

/* Empties every queued bucket: its lists go onto the expired list when
 * `keep`, else they are let go (their tasks' links are then stale). */
static void empty_queued(struct tw__engine *e, int keep)
{
    tw__engine_settle(e);
    while (e->dq.n) {
        uint32_t bn = e->dq.h[e->dq.n - 1].bn;
        struct tw__bucket *b = tw__bucket_at(e, bn);
        tw__dq_remove(&e->dq, e->dq.n - 1);
        for (uint32_t j = 0; j < TW__SUBS; j++) {
            uint32_t self = tw__sent(bn, j);
            struct tw__link *h = tw__link_at(e, self);
            uint32_t first = h->next, last = h->prev;
            h->next = h->prev = self;
            if (keep && first != self)
                splice_to_expired(e, first, last);
        }
        b->mask = 0;
    }
}

void tw__wheel_collect_all(struct tw__engine *e)
{
    empty_queued(e, 1);
}

void tw__wheel_clear(struct tw__engine *e)
{
    empty_queued(e, 0);
    sent_init(e, TW__EXPIRED_SENT);
}

int tw__wheel_reserve_period(struct tw__engine *e, uint64_t period_ns)
{
    /* A re-armed deadline lies at most ceil(period / tick) + 1 ticks past
     * the current tick. For a distance delta, level_of_log2 names the
     * lowest level that can hold it and one more level always can,
     * whatever the alignment of the current tick. */
    uint64_t delta = tw__ticks_ceil(e, period_ns);
    delta = delta == UINT64_MAX ? delta : delta + 1;
    uint32_t k = 0;
    if (delta >= 2u * (uint64_t)e->wsize)
        k = e->level_of_log2[63 - __builtin_clzll(delta)] + 1u;
    if (k >= e->max_levels)
        k = e->max_levels - 1;
    return k < e->nlevels ? 0 : tw__wheel_add_levels(e, k);
}
