/* timer.c: the public API over the engine(s).
 *
 * A manual timer has one shard and never locks. A threaded timer has a
 * power-of-two number of shards, each an independent engine behind its own
 * mutex; runtime.c drives them. Every public entry point below takes the
 * lock of the one shard it touches (tw__shard_lock is a no-op in manual
 * mode), and no user code is ever called with a lock held.
 *
 * Failure discipline: every function checks its arguments and reserves
 * whatever memory it will need (a slot, a wheel level, an extra record, key
 * room) before it changes anything, so an error leaves the timer exactly as
 * it was. Capacity reserved by a failed call is kept for the next one. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "timer.h"
#include "wrap.h"

static uint64_t monotonic_ns(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void tw_options_init(struct tw_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->tick_ns = 1000000;
    o->wheel_size = 64;
}

/* ---- shards ----------------------------------------------------------- */

static _Atomic uint32_t next_thread_shard;
/* initial-exec: no __tls_get_addr call per schedule (4 bytes of the static
 * TLS surplus glibc keeps even for a dlopen'ed library) */
static _Thread_local uint32_t thread_shard __attribute__((tls_model("initial-exec"))) = UINT32_MAX;

/* Threads spread over shards round-robin on first use and stay there, so
 * concurrent schedulers rarely share a lock or a cache line. */
static inline uint32_t pick_shard(const tw_timer *t)
{
    if (t->nshards == 1)
        return 0;
    if (thread_shard == UINT32_MAX)
        thread_shard = atomic_fetch_add_explicit(&next_thread_shard, 1,
                                                 memory_order_relaxed);
    return thread_shard & (t->nshards - 1);
}

static inline uint32_t key_shard(const tw_timer *t, uint64_t hash)
{
    return (uint32_t)(hash >> 32) & (t->nshards - 1);
}

/* The time relative delays count from. */
static inline uint64_t base_time(tw_timer *t, struct tw__engine *e)
{
    return t->threaded ? tw__clock_now(t) : e->now_ns;
}

/* Only a threaded timer is ever stopped (tw_stop; a runtime that failed to
 * start), so manual mode needs no test of its own. */
static inline int stopped(tw_timer *t)
{
    return atomic_load_explicit(&t->stopped, memory_order_acquire);
}

/* ---- pending accounting ----------------------------------------------- */

static inline int admit(tw_timer *t, struct tw__engine *e)
{
    if (!t->max_pending)
        return 0;
    if (t->threaded) {
        if (atomic_fetch_add(&t->total_pending, 1) < t->max_pending)
            return 0;
        atomic_fetch_sub(&t->total_pending, 1);
    } else if (tw__engine_pending(e) < t->max_pending) {
        return 0;
    }
    e->rejected++;
    return -EAGAIN;
}

/* ---- create / destroy ------------------------------------------------- */

static int check_options(const struct tw_options *o)
{
    if (!o->tick_ns || o->wheel_size < 2 || o->wheel_size > TW_MAX_WHEEL_SIZE ||
        (o->wheel_size & (o->wheel_size - 1)))
        return -EINVAL;
    if (o->threaded != 0 && o->threaded != 1)
        return -EINVAL;
    /* threaded shards populate under their lock: no huge page's lump
     * there (pool.c) */
    if ((o->huge_pages != 0 && o->huge_pages != 1) || (o->huge_pages && o->threaded))
        return -EINVAL;
    if (!o->threaded && (o->workers || o->shards))
        return -EINVAL;
    if (o->workers > 1024 || o->shards > 64)
        return -EINVAL;
    return 0;
}

/* The CPUs the calling thread may run on (a container's cpuset, taskset),
 * not all the machine's: more shards than that only spread the same
 * threads thinner. */
static long usable_cpus(void)
{
#ifdef __linux__
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    return sysconf(_SC_NPROCESSORS_ONLN);
}

static uint32_t choose_shards(const struct tw_options *o)
{
    if (!o->threaded)
        return 1;
    uint32_t want = o->shards;
    if (!want) {
        /* More shards than CPUs: threads stick to a shard, and with only
         * one shard per CPU, 8 threads on 2 CPUs share each lock four
         * ways; a holder preempted mid-operation then stalls the others
         * for a time slice (W5 measured 0.49x of 2 threads). */
        long cpus = usable_cpus();
        want = cpus < 1 ? 4 : cpus > 16 ? 64 : 4 * (uint32_t)cpus;
    }
    uint32_t n = 1;
    while (n < want)
        n <<= 1;
    return n;
}

void (*tw__mem_released)(const struct tw__mem *m);

static void free_shards(tw_timer *t, uint32_t made)
{
    for (uint32_t s = 0; s < made; s++) {
        struct tw__shard *sh = &t->shards[s];
        /* Only keyed and periodic tasks hold memory of their own (an extra
         * record, a key): the drain releases theirs (a pass over the slots,
         * or, with a periodic task taken, a walk of every list). With
         * none, a plain task is just its slot, and the pool, the wheels
         * and the delay queue are freed whole below. Threaded, the runtime
         * is gone by now (stopped without a drain), so no other thread can
         * touch the shard. */
        if (sh->eng.extras)
            tw__drain_shard(t, s, NULL);
        tw__extra_pool_destroy(&sh->eng);
        tw__keymap_destroy(&sh->eng);
        tw__engine_destroy(&sh->eng);
        if (t->threaded)
            tw__lock_destroy(&sh->lock);
        if (tw__mem_released)
            tw__mem_released(&sh->mem);
    }
}

int tw_create(tw_timer **out, const struct tw_options *opt)
{
    struct tw_options o;
    if (opt)
        o = *opt;
    else
        tw_options_init(&o);
    if (!out)
        return -EINVAL;
    int rc = check_options(&o);
    if (rc)
        return rc;
    uint32_t nshards = choose_shards(&o);
    uint32_t shard_bits = (uint32_t)__builtin_ctz(nshards);
    /* a slot index shifted by shard_bits must fit in the id's low word */
    uint32_t max_slots = shard_bits ? (1u << (32 - shard_bits)) - 1u : TW__MAX_SLOTS;
    if (max_slots > TW__MAX_SLOTS)
        max_slots = TW__MAX_SLOTS;
    /* room that could never be used is refused, not quietly cut down */
    if (o.capacity / nshards + (o.capacity % nshards != 0) > max_slots)
        return -EINVAL;
    struct tw__mem mem;
    if ((rc = tw__mem_init(&mem, &o.allocator)))
        return rc;

    tw_timer *t = tw__alloc(&mem, sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t, 0, sizeof(*t));
    t->mem = mem;
    t->clock = o.clock ? o.clock : monotonic_ns;
    t->clock_ctx = o.clock ? o.clock_ctx : NULL;
    t->max_pending = o.max_pending;
    t->threaded = o.threaded;
    t->nshards = nshards;
    t->shard_bits = shard_bits;
    atomic_init(&t->total_pending, 0);
    tw__hash_key_init(&t->hkey);

    /* the shards are cache-line aligned: over-allocate and align */
    t->shards_bytes = (size_t)t->nshards * sizeof(struct tw__shard) + 63;
    void *raw = tw__alloc(&t->mem, t->shards_bytes);
    if (!raw) {
        tw__free(&mem, t, sizeof(*t));
        if (tw__mem_released)
            tw__mem_released(&mem);
        return -ENOMEM;
    }
    t->shards = (struct tw__shard *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    memset(t->shards, 0, (size_t)t->nshards * sizeof(struct tw__shard));
    t->shards_raw = raw;

    uint64_t now = tw__clock_now(t);
    uint32_t made = 0;
    for (; made < t->nshards; made++) {
        struct tw__shard *sh = &t->shards[made];
        sh->mem = mem;
        sh->mem.bytes = 0;
        if (t->threaded && (rc = tw__lock_init(&sh->lock)))
            break;
        rc = tw__engine_init(&sh->eng, &sh->mem, o.tick_ns, o.wheel_size,
                             now, max_slots);
        if (!o.huge_pages) /* opt-in; never threaded (check_options) */
            sh->eng.pool.huge = TW__HUGE_NEVER;
        if (!rc && o.capacity) {
            /* and room for the cancels whose unlink waits (wheel.c,
             * "Deferred unlink"), so that churn at capacity never grows
             * the pool; at a shard's limit the ring gives its slots back
             * instead (tw__wheel_reserve) */
            uint64_t per = (o.capacity + t->nshards - 1) / t->nshards + TW__DEFER;
            if (per > max_slots)
                per = max_slots;
            if ((rc = tw__pool_grow_to(&sh->eng.pool, &sh->mem, per)))
                tw__engine_destroy(&sh->eng);
        }
        if (rc) {
            if (t->threaded)
                tw__lock_destroy(&sh->lock);
            break;
        }
    }
    t->fast = t->threaded || t->max_pending ? NULL : &t->shards[0].eng;
    if (!rc && t->threaded)
        rc = tw__runtime_start(t, &o);
    if (rc) {
        free_shards(t, made);
        mem = t->mem; /* t's own bytes are counted there too */
        tw__free(&mem, raw, t->shards_bytes);
        tw__free(&mem, t, sizeof(*t));
        if (tw__mem_released)
            tw__mem_released(&mem);
        return rc;
    }
    *out = t;
    return 0;
}

void tw_destroy(tw_timer *t)
{
    if (!t)
        return;
    /* The firing loop, drain or stop that called the callback would go on
     * over freed memory (and threaded, the driver cannot join itself). */
    if (tw__in_callback(t))
        tw__misuse("tw_destroy called from a callback of the same timer");
    if (t->threaded)
        tw__runtime_free(t); /* stops the threads if still running */
    free_shards(t, t->nshards);
    struct tw__mem mem = t->mem;
    tw__free(&mem, t->shards_raw, t->shards_bytes);
    tw__free(&mem, t, sizeof(*t));
    if (tw__mem_released)
        tw__mem_released(&mem);
}

/* ---- scheduling ------------------------------------------------------- */

/* Commits a new task; tw__wheel_reserve has succeeded. */
static inline tw_id commit(tw_timer *t, uint32_t si, struct tw__engine *e,
                           uint64_t deadline, uint64_t dt, tw_fn fn,
                           void *arg, uint32_t *slot)
{
    uint32_t gen, i = tw__pool_take(&e->pool, &gen,
                                    fn == tw__extra_marker ? TW__GEN_EXTRA : TW__GEN_PLAIN);
    struct tw__entry *en = tw__pool_entry(&e->pool, i);
    en->deadline = deadline;
    en->fn = fn;
    en->arg = arg;
    tw__wheel_place(e, i, en, dt);
    e->scheduled++;
    if (slot)
        *slot = i;
    return tw__make_id(t, si, i, gen);
}

/* Wakes the driver when the shard's earliest bucket moved earlier
 * (head_before: tw__engine_head before the change). */
static inline void kick_if_earlier(tw_timer *t, struct tw__engine *e,
                                   uint64_t head_before)
{
    if (tw__engine_head_earlier(e, head_before))
        tw__runtime_kick(t, tw__shard_next_ns(e));
}

/* Commits a new task (tw__wheel_reserve has succeeded) and, threaded,
 * wakes the driver when it made an earlier bucket; sets *idp if not
 * NULL. The tail of every general-path schedule. */
static void commit_and_kick(tw_timer *t, uint32_t si, struct tw__engine *e,
                            uint64_t deadline, uint64_t dt, tw_fn fn, void *arg,
                            uint32_t *slot, tw_id *idp)
{
    uint64_t before = t->threaded ? tw__engine_head(e) : 0;
    tw_id id = commit(t, si, e, deadline, dt, fn, arg, slot);
    if (t->threaded)
        kick_if_earlier(t, e, before);
    if (idp)
        *idp = id;
}

static int add_plain(tw_timer *t, uint32_t si, uint64_t deadline, tw_fn fn,
                     void *arg, tw_id *idp)
{
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    int rc = admit(t, e);
    if (rc)
        return rc;
    uint64_t dt = tw__ticks_ceil(e, deadline);
    if ((rc = tw__wheel_reserve(e, dt))) {
        tw__pending_release(t);
        return rc;
    }
    commit_and_kick(t, si, e, deadline, dt, fn, arg, NULL, idp);
    return 0;
}

/* insert_fast (below) just made list head `self` non-empty: mark the
 * list, and queue its bucket if that was empty. The bucket's expiration is
 * worked out again from the one task on the list (the same arithmetic as
 * insert_fast's, clamp included), so that the fast path need not keep it.
 * Returns 0: a tail call from tw_schedule. */
static __attribute__((noinline)) int list_started(struct tw__engine *e, uint32_t self)
{
    uint32_t bn = tw__wheel_sub_started(e, self);
    if (bn != TW__NIL) {
        uint64_t dt = tw__ticks_ceil(e, tw__ref_entry(&e->pool, tw__link_at(e, self)->next)->deadline);
        if (dt < e->cur)
            dt = e->cur;
        tw__wheel_queue_bucket(e, bn, tw__wheel_bucket_exp(e, dt, bn >> e->sbits));
    }
    return 0;
}

/* The tail of the insertion both fast paths share (insert_fast): slot i,
 * just taken, made a plain task due at `deadline` and appended to its
 * list in the bucket whose list 0 has head `first`. Returns 0, or 2 when
 * the task made list head *started non-empty. */
static inline __attribute__((always_inline)) int
insert_slot(struct tw__engine *e, uint32_t shard_bits, uint32_t si, uint32_t first,
            uint32_t i, uint64_t deadline, tw_fn fn, void *arg, tw_id *id,
            uint32_t *started)
{
    struct tw__pool *p = &e->pool;
    struct tw__entry *en = &p->entries[i];
    uint32_t gen = en->gen += TW__GEN_PLAIN;
    en->deadline = deadline;
    en->fn = fn;
    en->arg = arg;
    e->scheduled++;
    /* tw__make_id's layout; taken apart so that manual mode's constant
     * shard_bits and si fold away */
    if (id)
        *id = ((uint64_t)gen << 32) | ((uint64_t)i << shard_bits) | si;

    /* append to list i % 8 of the bucket (see tw__wheel_append) */
    uint32_t self = first - ((i & (TW__SUBS - 1u)) << 1), r = tw__ref(i);
    struct tw__link *h = tw__pool_link(p, self);
    uint32_t tail = h->prev;
    en->link.next = self;
    h->prev = r;
    en->link.prev = tail;
    tw__pool_link(p, tail)->next = r; /* the head itself if the list was empty */
    if (__builtin_expect(tail != self, 1))
        return 0;
    *started = self;
    return 2;
}

/* The insertion both fast paths share: a plain task due at `deadline`
 * (<= tick.lim, the caller checks) into engine e, when its level exists
 * and a slot is free. Returns 0 when done, having set *id (when id is not
 * NULL); 2 when done and the task made list head *started non-empty (the
 * caller calls list_started); 3 when the spare was taken but the free
 * list's blocks hold slots: nothing has changed, and *started is the head
 * of list 0 of the task's bucket, for the caller to finish with a slot
 * from the blocks (insert_slot, out of line); or 1 when the general path
 * (add_plain) must do it: nothing has changed then.
 * Written out rather than composed from helpers, and ordered so that the
 * level and bucket are dead before the slot is taken: the instruction
 * count per schedule is a published figure, and fewer live values means
 * fewer registers saved and restored. */
TW__HOT int insert_fast(struct tw__engine *e, int clamp, uint32_t shard_bits,
                        uint32_t si, uint64_t deadline, tw_fn fn, void *arg,
                        tw_id *id, uint32_t *started)
{
    uint64_t dt = tw__div_ceil_hot(&e->tick, deadline);
    /* tw_schedule in manual mode needs no clamp (see there); a deadline
     * given to tw_schedule_at may be past, and a threaded schedule's clock
     * read may be older than the driver's last pass: due now */
    if (clamp && dt < e->cur)
        dt = e->cur;
    uint32_t k = tw__level_for(e, dt);
    if (__builtin_expect(k >= e->nlevels, 0))
        return 1;
    /* the head of list 0 of the task's bucket; list j's is first - 2j */
    const struct tw__level *lv = &e->lv[k];
    uint32_t first = lv->sb - (((uint32_t)(dt >> lv->shift) & e->smask) << (TW__SUB_BITS + 1));

    struct tw__pool *p = &e->pool;
    /* The spare (what W1 takes: its cancel has just freed it), else the
     * magazine's top (what a burst of adds after a burst of cancels
     * takes), else a slot never used while no other is free. A slot
     * from the free list's blocks is taken out of line (rc 3): their
     * walk and its prefetch, inlined here, made every schedule save two
     * registers more (6 instructions a W1 pair, 149), and a call here,
     * five more; the walk waits on memory either way (pool.h). */
    uint32_t i = tw__pool_pop_spare(p);
    if (__builtin_expect(i == TW__NIL, 0)) {
        /* the magazine's top (pool.h), else blocks or rewound slots to
         * pop, or the pool full, or its next page not populated */
        if (p->nmag) {
            i = p->mag[--p->nmag];
        } else if (p->free_head != TW__NIL) {
            *started = first;
            return 3;
        } else if (p->used >= p->fault_at) {
            return 1;
        } else {
            i = p->used++;
            p->entries[i].gen = 0;
        }
    }
    return insert_slot(e, shard_bits, si, first, i, deadline, fn, arg, id, started);
}

/* What insert_fast left to do (rc 1, 2 or 3), with shard si's lock held
 * (threaded). rc 3: the slot from the free list's blocks, so that adds
 * that do not each follow a cancel (a warm timer refilled after its
 * firings, cancels in bursts longer than the magazine) stay off the
 * general path, which cost a W1b pair 326 instructions against W1's 154
 * (210 and 153 with rc 3, 169 and 153 with the magazine since; callgrind
 * at 10^4, benchmarks/callgrind.sh; history.md, "Adds that do not
 * follow a cancel" and "A magazine of free slots"). */
static __attribute__((noinline)) int insert_finish(tw_timer *t, uint32_t si, int rc,
                                                   uint32_t started, uint64_t deadline,
                                                   tw_fn fn, void *arg, tw_id *id)
{
    struct tw__engine *e = &t->shards[si].eng;
    if (rc == 1)
        return add_plain(t, si, deadline, fn, arg, id);
    if (rc == 3 && !insert_slot(e, t->shard_bits, si, started, tw__pool_pop(&e->pool),
                                deadline, fn, arg, id, &started))
        return 0;
    /* a new bucket: in threaded mode it may be the earliest */
    uint64_t before = t->threaded ? tw__engine_head(e) : 0;
    list_started(e, started);
    if (t->threaded)
        kick_if_earlier(t, e, before);
    return 0;
}

/* Schedules a plain task at an absolute deadline on shard si, whose lock
 * the caller holds: the shared insertion, or the general path for what it
 * cannot do (a new level, a full pool, a bound on pending tasks, a
 * deadline past tick.lim). Inline, so
 * that the lock is held around as few instructions, and as few calls, as
 * can be. */
static inline __attribute__((always_inline)) int
add_plain_locked(tw_timer *t, uint32_t si, uint64_t deadline, tw_fn fn, void *arg,
                 tw_id *id)
{
    struct tw__engine *e = &t->shards[si].eng;
    uint32_t started = TW__NIL; /* set by insert_fast when it returns 2 */
    /* stopped is read under the lock: tw_stop's drain of this shard, which
     * takes it, then never misses a task added here */
    if (__builtin_expect(stopped(t) || t->max_pending || deadline > e->tick.lim, 0))
        return stopped(t) ? -ESHUTDOWN : add_plain(t, si, deadline, fn, arg, id);
    int rc = insert_fast(e, 1, t->shard_bits, si, deadline, fn, arg, id, &started);
    return rc ? insert_finish(t, si, rc, started, deadline, fn, arg, id) : 0;
}

/* A threaded tw_schedule: delays count from a clock read now. */
static __attribute__((noinline)) int schedule_threaded(tw_timer *t, uint64_t delay_ns,
                                                       tw_fn fn, void *arg, tw_id *id)
{
    uint64_t deadline = tw__sat_add64(tw__clock_now(t), delay_ns);
    uint32_t si = pick_shard(t);
    struct tw__shard *sh = &t->shards[si];
    tw__lock(&sh->lock);
    int rc = add_plain_locked(t, si, deadline, fn, arg, id);
    tw__unlock(&sh->lock);
    return rc;
}

static __attribute__((noinline)) int schedule_slow(tw_timer *t, uint64_t delay_ns,
                                                   tw_fn fn, void *arg, tw_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    if (t->threaded)
        return schedule_threaded(t, delay_ns, fn, arg, id);
    struct tw__engine *e = &t->shards[0].eng;
    return add_plain(t, 0, tw__sat_add64(e->now_ns, delay_ns), fn, arg, id);
}

/* Manual mode's rc 3 (insert_fast): the slot from the free list's
 * blocks, into the list found. A tail call, with six arguments. */
static __attribute__((noinline)) int schedule_popped(struct tw__engine *e, uint32_t first,
                                                     uint64_t deadline, tw_fn fn, void *arg,
                                                     tw_id *id)
{
    uint32_t started;
    if (!insert_slot(e, 0, 0, first, tw__pool_pop(&e->pool), deadline, fn, arg, id, &started))
        return 0;
    return list_started(e, started);
}

/* The manual-mode fast path: no lock, no bound to check, one engine. What
 * needs memory (a new level, a new pool capacity) goes the general way,
 * and a slot from the free list's blocks is taken out of line (rc 3, see
 * insert_fast). */
int tw_schedule(tw_timer *t, uint64_t delay_ns, tw_fn fn, void *arg,
                tw_id *id)
{
    struct tw__engine *e;
    if (__builtin_expect(!t || !fn || !(e = t->fast), 0))
        return schedule_slow(t, delay_ns, fn, arg, id);
    /* Deadlines past the next 292 years (and sums that wrap, which
     * saturate) go the general way: below that, the tick is one multiply
     * and one shift (tickdiv.h). */
    if (__builtin_expect(delay_ns >= e->room, 0))
        return schedule_slow(t, delay_ns, fn, arg, id);
    uint64_t deadline = e->now_ns + delay_ns; /* <= tick.lim: no wrap */
    /* dt >= cur with no clamp: cur <= floor(now / tick) (the end-of-time
     * advance, which sets cur past that, leaves now at UINT64_MAX, where
     * every deadline took the general path above), and deadline >= now. */
    uint32_t started;
    int rc = insert_fast(e, 0, 0, 0, deadline, fn, arg, id, &started);
    if (__builtin_expect(rc == 0, 1))
        return 0;
    if (rc == 3)
        return schedule_popped(e, started, deadline, fn, arg, id);
    if (rc == 1)
        return add_plain(t, 0, deadline, fn, arg, id);
    return list_started(e, started);
}

int tw_schedule_at(tw_timer *t, uint64_t deadline_ns, tw_fn fn, void *arg,
                   tw_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    uint32_t si = pick_shard(t);
    struct tw__shard *sh = &t->shards[si];
    tw__shard_lock(t, sh);
    int rc = add_plain_locked(t, si, deadline_ns, fn, arg, id);
    tw__shard_unlock(t, sh);
    return rc;
}

int tw_schedule_every(tw_timer *t, uint64_t first_delay_ns, uint64_t period_ns,
                      int flags, tw_fn fn, void *arg, tw_id *idp)
{
    if (!t || !fn || !period_ns || (flags != TW_FIXED_RATE && flags != TW_FIXED_DELAY))
        return -EINVAL;
    uint32_t si = pick_shard(t);
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    tw__shard_lock(t, sh);
    int rc = stopped(t) ? -ESHUTDOWN : admit(t, e);
    if (rc)
        goto out;
    uint64_t deadline = tw__sat_add64(base_time(t, e), first_delay_ns);
    uint64_t dt = tw__ticks_ceil(e, deadline);
    struct tw__extra *x = NULL;
    if ((rc = tw__wheel_reserve(e, dt)) || (rc = tw__wheel_reserve_period(e, period_ns)) ||
        (rc = (x = tw__extra_get(e)) ? 0 : -ENOMEM)) {
        tw__pending_release(t);
        goto out;
    }
    x->fn = fn;
    x->arg = arg;
    x->period = period_ns;
    x->flags = (uint8_t)flags;
    commit_and_kick(t, si, e, deadline, dt, tw__extra_marker, x, &x->slot, idp);
out:
    tw__shard_unlock(t, sh);
    return rc;
}

int tw_schedule_keyed(tw_timer *t, const void *key, size_t keylen,
                      uint64_t delay_ns, tw_fn fn, void *arg, tw_id *idp)
{
    if (!t || !fn || !key || !keylen || keylen > UINT32_MAX)
        return -EINVAL;
    uint64_t h = tw__key_hash(&t->hkey, key, keylen);
    uint32_t si = key_shard(t, h);
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    tw__shard_lock(t, sh);
    int rc = stopped(t) ? -ESHUTDOWN : 0;
    if (rc)
        goto out;
    uint64_t deadline = tw__sat_add64(base_time(t, e), delay_ns);
    uint64_t dt = tw__ticks_ceil(e, deadline);
    struct tw__extra *x = tw__keymap_find(e, key, keylen, h);
    if (x) {
        /* Replace: the record and its key carry over to the new task. */
        if ((rc = tw__wheel_reserve(e, dt)))
            goto out;
        struct tw__entry *old = tw__pool_entry(&e->pool, x->slot);
        tw__list_unlink(e, old);
        tw__pool_put(&e->pool, x->slot);
        e->cancelled++; /* the new task takes its place: no admit needed */
    } else {
        if ((rc = admit(t, e)))
            goto out;
        if ((rc = tw__wheel_reserve(e, dt)) || (rc = tw__keymap_reserve(e)) ||
            (rc = (x = tw__extra_get(e)) ? 0 : -ENOMEM)) {
            tw__pending_release(t);
            goto out;
        }
        if ((rc = tw__extra_set_key(e, x, key, keylen, h))) {
            tw__extra_put(e, x);
            tw__pending_release(t);
            goto out;
        }
        tw__keymap_insert(e, x);
    }
    x->fn = fn;
    x->arg = arg;
    commit_and_kick(t, si, e, deadline, dt, tw__extra_marker, x, &x->slot, idp);
out:
    tw__shard_unlock(t, sh);
    return rc;
}

/* ---- cancel / reschedule ---------------------------------------------- */

/* Cancels a task with an extra record (keyed or periodic). */
static __attribute__((noinline)) int cancel_extra(tw_timer *t, struct tw__engine *e,
                                                  uint32_t i, struct tw__entry *en)
{
    struct tw__extra *x = en->arg;
    if (x->state != TW__X_IDLE) { /* periodic, its callback running */
        if (!tw__extra_live(x))
            return -ENOENT;
        x->state = TW__X_CANCELLED; /* released when it returns */
        e->cancelled++;
        tw__pending_release(t);
        return 0;
    }
    tw__list_unlink(e, en);
    tw__task_free(t, e, i, en);
    e->cancelled++;
    return 0;
}

static __attribute__((noinline)) int sub_emptied(struct tw__engine *e, uint32_t s)
{
    tw__wheel_sub_emptied(e, s);
    return 0;
}

/* A plain task's cancel that wrapped its slot's generation to 0: unlinked
 * at once, and the slot retired (never reused), not deferred. Returns 0. */
static __attribute__((noinline)) int cancel_retire(struct tw__engine *e,
                                                   struct tw__entry *en)
{
    e->pool.retired++;
    tw__list_unlink(e, en);
    return 0;
}

/* Cancels task (i, gen) of engine e, whose lock (if any) the caller holds:
 * the body of every cancel. Written out for the plain task, the common
 * case: the entry's generation read (the id's says whether it is a plain
 * task) and bumped; its unlink is deferred ("Deferred unlink" in
 * wheel.c): the task cancelled TW__DEFER cancels ago is unlinked instead,
 * and nothing is prefetched for this one's (measured slower). `threaded`
 * is a constant where it is inlined (manual mode's fast path passes 0: no
 * bound, so nothing to release). */
static inline __attribute__((always_inline)) int
cancel_task(tw_timer *t, struct tw__engine *e, uint32_t i, uint32_t gen, int threaded)
{
    struct tw__pool *p = &e->pool;
    struct tw__entry *en = &p->entries[i];
    if (i >= p->used || en->gen != gen)
        return -ENOENT;
    /* equal generations: bit 0 is the plain task; else an extra task (2),
     * or an id made up to match a free slot (0) */
    if (__builtin_expect(!(gen & TW__GEN_PLAIN), 0))
        return (gen & TW__GEN_EXTRA) ? cancel_extra(t, e, i, en) : -ENOENT;
    e->cancelled++;
    if (threaded)
        tw__pending_release(t);
    /* the next multiple of 4: the id is stale from now */
    if (__builtin_expect((en->gen = tw__wrap_add32(gen, 3u)) == 0, 0))
        return cancel_retire(e, en);
    uint32_t pos = e->defer_pos, old = e->defer[pos], s;
    e->defer[pos] = i;
    e->defer_pos = (pos + 1u) & (TW__DEFER - 1u);
    if (__builtin_expect(old == TW__NIL, 0)) /* the ring was not full */
        return 0;
    if (__builtin_expect(tw__defer_unlink(e, old, &s), 0))
        return sub_emptied(e, s);
    return 0;
}

static __attribute__((noinline)) int cancel_slow(tw_timer *t, tw_id id)
{
    if (!t)
        return -EINVAL;
    uint32_t si = tw__id_shard(t, id);
    struct tw__shard *sh = &t->shards[si];
    uint32_t i = tw__id_slot(t, id), gen = (uint32_t)(id >> 32);
    if (!t->threaded) /* manual mode with max_pending: nothing to release */
        return cancel_task(t, &sh->eng, i, gen, 0);
    tw__lock(&sh->lock);
    int rc = cancel_task(t, &sh->eng, i, gen, 1);
    tw__unlock(&sh->lock);
    return rc;
}

/* The manual-mode fast path of cancel: one engine, no lock, no bound. */
int tw_cancel(tw_timer *t, tw_id id)
{
    struct tw__engine *e;
    if (__builtin_expect(!t || !(e = t->fast), 0))
        return cancel_slow(t, id);
    return cancel_task(t, e, (uint32_t)id, (uint32_t)(id >> 32), 0);
}

int tw_set_hash_key(tw_timer *t, const unsigned char key[16])
{
    if (!t || !key)
        return -EINVAL;
    int rc = 0;
    for (uint32_t si = 0; si < t->nshards && !rc; si++) {
        struct tw__shard *sh = &t->shards[si];
        tw__shard_lock(t, sh);
        rc = sh->eng.keys.n ? -EBUSY : 0;
        tw__shard_unlock(t, sh);
    }
    if (!rc)
        tw__hash_key_from_bytes(&t->hkey, key);
    return rc;
}

int tw_cancel_keyed(tw_timer *t, const void *key, size_t keylen)
{
    /* as tw_schedule_keyed: a key no task can hold is refused unread */
    if (!t || !key || !keylen || keylen > UINT32_MAX)
        return -EINVAL;
    uint64_t h = tw__key_hash(&t->hkey, key, keylen);
    uint32_t si = key_shard(t, h);
    struct tw__shard *sh = &t->shards[si];
    tw__shard_lock(t, sh);
    struct tw__extra *x = tw__keymap_find(&sh->eng, key, keylen, h);
    int rc = x ? cancel_task(t, &sh->eng, x->slot,
                             *tw__pool_gen(&sh->eng.pool, x->slot), t->threaded)
               : -ENOENT;
    tw__shard_unlock(t, sh);
    return rc;
}

/* tw_reschedule (v a delay from tw_now) and tw_reschedule_at (v a
 * deadline). */
static int reschedule(tw_timer *t, tw_id id, int absolute, uint64_t v)
{
    if (!t)
        return -EINVAL;
    uint32_t si = tw__id_shard(t, id);
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    tw__shard_lock(t, sh);
    /* Once stopped, tasks are being handed back: moving one back into the
     * wheel now would hide it from tw_stop's drain. */
    int rc = stopped(t) ? -ESHUTDOWN : -ENOENT;
    uint32_t i = tw__pool_lookup(&e->pool, tw__id_slot(t, id), (uint32_t)(id >> 32));
    if (i == TW__NIL || rc == -ESHUTDOWN)
        goto out;
    struct tw__entry *en = tw__pool_entry(&e->pool, i);
    /* a deadline already past is due now: placing clamps it to the
     * current tick (tw__wheel_place_at), as tw_schedule_at's is */
    uint64_t deadline = absolute ? v : tw__sat_add64(base_time(t, e), v);
    uint64_t dt = tw__ticks_ceil(e, deadline);
    struct tw__extra *x = tw__is_extra(en) ? en->arg : NULL;
    /* Pushed later: the new deadline is written in place and the task
     * stays in its bucket, which comes due no later than it (wheel.c,
     * "Pushing a deadline later"). Only a plain task still in the wheel
     * (its tick after the current one: not on the expired list, which
     * holds due tasks only, or a drain's, which holds anything), and only
     * while the levels made hold its new tick, so that placing it when
     * its bucket comes due cannot fail (past them it moves, below, once
     * its level is made). */
    if (!x && deadline >= en->deadline && !e->draining &&
        tw__ticks_ceil(e, en->deadline) > e->cur && dt <= e->lv[e->nlevels - 1].last) {
        en->deadline = deadline;
        rc = 0;
        goto out;
    }
    if (x && x->state != TW__X_IDLE) { /* from a periodic's own callback */
        if (!tw__extra_live(x))
            goto out;
        if ((rc = tw__wheel_reserve_level(e, dt)))
            goto out;
        x->resched = deadline;
        x->state = TW__X_RESCHED;
        goto out;
    }
    if ((rc = tw__wheel_reserve_level(e, dt)))
        goto out;
    en = tw__pool_entry(&e->pool, i); /* a new level moves the pool */
    uint64_t before = tw__engine_head(e);
    tw__list_unlink(e, en);
    en->deadline = deadline;
    tw__wheel_place(e, i, en, dt);
    if (t->threaded)
        kick_if_earlier(t, e, before);
out:
    tw__shard_unlock(t, sh);
    return rc;
}

int tw_reschedule(tw_timer *t, tw_id id, uint64_t delay_ns)
{
    return reschedule(t, id, 0, delay_ns);
}

int tw_reschedule_at(tw_timer *t, tw_id id, uint64_t deadline_ns)
{
    return reschedule(t, id, 1, deadline_ns);
}

int tw_deadline(tw_timer *t, tw_id id, uint64_t *deadline_ns)
{
    if (!t || !deadline_ns)
        return -EINVAL;
    uint32_t si = tw__id_shard(t, id);
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    tw__shard_lock(t, sh);
    int rc = -ENOENT;
    uint32_t i = tw__pool_lookup(&e->pool, tw__id_slot(t, id), (uint32_t)(id >> 32));
    if (i != TW__NIL) {
        const struct tw__entry *en = tw__pool_entry(&e->pool, i);
        const struct tw__extra *x = tw__is_extra(en) ? en->arg : NULL;
        if (!x || x->state == TW__X_IDLE) {
            *deadline_ns = en->deadline; /* as asked: rounding is the wheel's */
            rc = 0;
        } else if (x->state == TW__X_RESCHED) {
            *deadline_ns = x->resched; /* its callback set the next firing */
            rc = 0;
        } else if (x->state == TW__X_FIRING) {
            /* The next deadline is made when the callback returns (fixed
             * delay counts from then; fixed rate skips the periods missed
             * by then): there is none to give yet. */
            rc = -EBUSY;
        } /* cancelled or drained while its callback runs: not pending */
    }
    tw__shard_unlock(t, sh);
    return rc;
}

/* ---- firing ----------------------------------------------------------- */

void tw__finish_periodic(tw_timer *t, uint32_t si, struct tw__job *j,
                         uint64_t now)
{
    struct tw__engine *e = &t->shards[si].eng;
    struct tw__extra *x = j->x;
    struct tw__entry *en = tw__pool_entry(&e->pool, j->slot);
    e->taken--;
    if (!tw__extra_live(x)) {
        tw__extra_put(e, x); /* pending was counted down at the cancel */
        tw__pool_put(&e->pool, j->slot);
        return;
    }
    uint64_t next;
    if (x->state == TW__X_RESCHED) {
        next = x->resched;
    } else if (x->flags == TW_FIXED_RATE) {
        /* Missed periods are skipped, not fired in a burst: the next
         * deadline is the first prev + k * period strictly after now. One
         * equal to now would be due at once and fire again in the next
         * advance to the same time, a second firing for one instant. */
        uint64_t prev = en->deadline;
        next = tw__sat_add64(prev, x->period);
        if (next <= now) {
            /* k >= 1 periods fit in (prev, now]; take the one after them */
            uint64_t k = (now - prev) / x->period;
            next = k >= (UINT64_MAX - prev) / x->period ? UINT64_MAX
                                                         : prev + (k + 1) * x->period;
        }
    } else {
        next = tw__sat_add64(now, x->period);
    }
    if (__builtin_expect(next <= now, 0) && x->state != TW__X_RESCHED) {
        /* Only at the end of time (now == UINT64_MAX): no instant lies
         * after it, so that firing was the last. Re-armed at now, the task
         * would be due at once, forever: every advance would fire it and a
         * driver would spin firing it. It leaves as a one-shot task does
         * (a reschedule from its callback is the caller's choice, kept). */
        tw__task_free(t, e, j->slot, en);
        e->completed++;
        return;
    }
    x->state = TW__X_IDLE;
    uint64_t dt = tw__ticks_ceil(e, next);
    /* Manual mode counts `now` from the engine's time, and the level
     * reserved for the period (tw__wheel_reserve_period) holds the next
     * deadline. Threaded, `now` is the clock when the callback returned,
     * which runs ahead of the engine's time by as long as the driver has
     * not advanced this shard since it took the task: a long callback, or
     * workers that fell behind. No reserve made in advance can cover that
     * lag, so the level is made here, as a schedule's would be; placed in
     * a level not made, the task was lost (never fired, never handed
     * back). Without memory for it, tw__wheel_place holds the task at the
     * farthest tick the levels reach and collection moves it on. */
    (void)tw__wheel_reserve_level(e, dt);
    en = tw__pool_entry(&e->pool, j->slot); /* a new level moves the pool */
    en->deadline = next;
    tw__wheel_place(e, j->slot, en, dt);
}

static int run_manual(tw_timer *t, struct tw__engine *e, uint64_t now)
{
    uint64_t n = 0;
    struct tw__job j;
    t->in_dispatch = 1;
    while (tw__take_job(t, 0, now, &j) == 0) {
        if (j.x) {
            j.fn(t, j.id, j.arg);
            tw__finish_periodic(t, 0, &j, e->now_ns);
        } else {
            j.fn(t, j.id, j.arg);
        }
        n++;
    }
    t->in_dispatch = 0;
    return n > INT_MAX ? INT_MAX : (int)n;
}

int tw_advance(tw_timer *t, uint64_t now_ns)
{
    if (!t)
        return -EINVAL;
    if (t->threaded)
        return -EPERM;
    if (t->in_dispatch)
        return -EDEADLK;
    struct tw__engine *e = &t->shards[0].eng;
    if (now_ns < e->now_ns)
        now_ns = e->now_ns; /* a clock going backwards changes nothing */
    tw__engine_set_now(e, now_ns);
    e->advances++;
    /* Fire what is due by the current tick. A deadline in the last tick
     * before UINT64_MAX rounds up past it, so the end of time (now ==
     * UINT64_MAX) reaches every tick: everything fires, nothing early. */
    uint64_t r, target = now_ns == UINT64_MAX ? tw__ticks_ceil(e, now_ns)
                                              : tw__div_floor(&e->tick, now_ns, &r);
    uint64_t pops = tw__wheel_collect(e, target);
    int n = run_manual(t, e, now_ns);
    /* after the callbacks, so that they do not wait for it */
    if (pops)
        tw__wheel_spread(e);
    tw__engine_rewind_if_empty(e);
    return n;
}

/* ---- queries ---------------------------------------------------------- */

int tw__shard_next(struct tw__engine *e, uint64_t *ns)
{
    tw__engine_settle(e); /* a bucket of cancelled tasks is not due */
    if (tw__expired_first(e) != TW__EXPIRED_SENT) {
        *ns = e->now_ns;
        return 1;
    }
    if (!e->dq.n) {
        *ns = UINT64_MAX;
        return 0;
    }
    uint64_t exp = e->dq.h[0].exp;
    *ns = exp > UINT64_MAX / e->tick.d ? UINT64_MAX : exp * e->tick.d;
    return 1;
}

uint64_t tw__shard_next_ns(struct tw__engine *e)
{
    uint64_t ns;
    tw__shard_next(e, &ns);
    return ns;
}

int tw_next_deadline(tw_timer *t, uint64_t *deadline_ns)
{
    if (!t || !deadline_ns)
        return -EINVAL;
    int found = 0;
    uint64_t best = UINT64_MAX;
    for (uint32_t s = 0; s < t->nshards; s++) {
        struct tw__shard *sh = &t->shards[s];
        tw__shard_lock(t, sh);
        uint64_t v;
        if (tw__shard_next(&sh->eng, &v)) {
            found = 1;
            if (v < best)
                best = v;
        }
        tw__shard_unlock(t, sh);
    }
    if (!found)
        return -ENOENT;
    *deadline_ns = best;
    return 0;
}

uint64_t tw_now(tw_timer *t)
{
    if (!t)
        return 0;
    return t->threaded ? tw__clock_now(t) : t->shards[0].eng.now_ns;
}

size_t tw_pending(tw_timer *t)
{
    if (!t)
        return 0;
    uint64_t n = 0;
    for (uint32_t s = 0; s < t->nshards; s++) {
        tw__shard_lock(t, &t->shards[s]);
        n += tw__engine_pending(&t->shards[s].eng);
        tw__shard_unlock(t, &t->shards[s]);
    }
    return (size_t)n;
}
