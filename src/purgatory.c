/* purgatory.c: delayed operations on a twheel timer (see
 * include/twheel_purgatory.h for the semantics).
 *
 * Exactly-once. tw_op_force_complete sets COMPLETED in the op's state
 * under the op's lock; only the caller that sets it runs on_complete,
 * still under that lock, so no try_complete of the same op can run beside
 * it (the lock is recursive so that try_complete itself may force
 * completion).
 *
 * Handing over. cancel_key sets CANCELLED (no lock), then cancels the
 * timeout. An expiration completes the op only from a state with neither
 * bit, in one compare-and-swap, so a timeout the driver took before the
 * cancel could reach it does not expire the op afterwards; a submission
 * that has yet to schedule the timeout sees the bit and schedules none
 * (or cancels the one it just got).
 *
 * Timeouts. An op's timeout is a one-shot twheel task holding a reference.
 * Whoever removes the task settles its reference and the `delayed` count
 * exactly once: a canceller whose tw_cancel returns 0 (the callback will
 * never run), or else the callback itself. Cancelling from inside the
 * callback (force_complete of an expiring op) gets -ENOENT, as it must.
 *
 * Purging. Completing an op adds the lists still holding it to `stale`,
 * then sets its word in the table of completion words (op_states.c), by
 * which a compaction knows it without reading the op; dropping such an
 * entry takes it off `stale` again. Past purge_interval, and once they
 * are an eighth of all entries, a purge is due: every completion looks
 * (force_complete, an expiration, check_and_complete's walk), so that the
 * bound holds however the ops complete, and the one that finds it due
 * queues the reaper, a task on the purgatory's own timer, which goes over
 * every list a slice at a time, coming back as long after each slice as
 * it took (reap_fn). The completing threads only look: until the
 * eighty-fifth session they ran the slices themselves, and a request's
 * thread waited behind them (benchmarks/results/history.md, "The purge
 * on a reaper task"). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "timer.h" /* tw__in_callback, tw__misuse */
#include "purgatory.h"

/* A pass of the purge goes in slices of about this many visits (entries,
 * lists and buckets), ~0.1 ms, each a run of the reaper (reap_fn). */
#define TW__PURGE_SLICE 16384u

void *tw__p_alloc(tw_purgatory *p, size_t size)
{
    return p->a.alloc(p->a.ctx, size);
}

void tw__p_free(tw_purgatory *p, void *ptr)
{
    if (ptr)
        p->a.free(p->a.ctx, ptr);
}

void tw_purgatory_options_init(struct tw_purgatory_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    tw_options_init(&o->timer);
    o->timer.threaded = 1;
    o->shards = 512;
    o->purge_interval = 1000;
}

int tw_purgatory_create(tw_purgatory **out, const struct tw_purgatory_options *opt)
{
    struct tw_purgatory_options o;
    if (opt)
        o = *opt;
    else
        tw_purgatory_options_init(&o);
    if (!out)
        return -EINVAL;
    if (!o.shards)
        o.shards = 512;
    if ((o.shards & (o.shards - 1)) || o.shards > (1u << 16))
        return -EINVAL;
    struct tw__mem mem;
    int rc = tw__mem_init(&mem, &o.timer.allocator);
    if (rc)
        return rc;
    tw_purgatory *p = mem.a.alloc(mem.a.ctx, sizeof(*p));
    if (!p)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    p->a = mem.a;
    p->threaded = o.timer.threaded;
    p->nshards = o.shards;
    p->purge_interval = o.purge_interval;
    p->purge_slice = TW__PURGE_SLICE;
    tw__hash_key_init(&p->hkey);
    if ((rc = tw__states_create(&p->states, &p->a))) {
        tw__p_free(p, p);
        return rc;
    }
    if ((rc = tw__watchers_init(p))) {
        tw__states_release(p->states);
        tw__p_free(p, p);
        return rc;
    }
    if ((rc = tw_create(&p->timer, &o.timer))) {
        tw__watchers_destroy(p);
        tw__states_release(p->states);
        tw__p_free(p, p);
        return rc;
    }
    *out = p;
    return 0;
}

tw_timer *tw_purgatory_timer(tw_purgatory *p)
{
    return p ? p->timer : NULL;
}

uint64_t tw_purgatory_watched(tw_purgatory *p)
{
    return p ? atomic_load(&p->watched) : 0;
}

uint64_t tw_purgatory_delayed(tw_purgatory *p)
{
    return p ? atomic_load(&p->delayed) : 0;
}

/* ---- operations ------------------------------------------------------- */

int tw_op_create(tw_purgatory *p, const struct tw_op_ops *ops, void *ctx,
                 uint64_t timeout_ns, tw_op **out)
{
    if (!p || !ops || !out || !ops->try_complete || !ops->on_complete)
        return -EINVAL;
    tw_op *op = tw__p_alloc(p, sizeof(*op));
    if (!op)
        return -ENOMEM;
    memset(op, 0, sizeof(*op));
    op->p = p;
    op->states = p->states;
    op->ops = ops;
    op->ctx = ctx;
    op->timeout_ns = timeout_ns;
    int rc = tw__lock_init(&op->lock);
    if (rc) {
        tw__p_free(p, op);
        return rc;
    }
    if ((rc = tw__state_get(p->states, &op->sidx))) {
        tw__lock_destroy(&op->lock);
        tw__p_free(p, op);
        return rc;
    }
    atomic_init(&op->refs, 1);
    *out = op;
    return 0;
}

/* The op's recursive lock: the shard lock (lock.h) with an owner mark
 * and a depth. It was a recursive pthread mutex, two calls through its
 * type dispatch per try; a check_and_complete tries every op listed under
 * its key, so those calls took a fifth of the samples in a profile of
 * twheel-purgatory-bench at 80,000 requests a second. With this one the
 * benchmark's completions kept up at 75,000 to 80,000 requests a second
 * where they had fallen behind from 70,000 to 75,000, and an op is 96
 * bytes, not 120 (benchmarks/results/history.md, "The purgatory's
 * completions, and its op lock").
 * The owner mark is the address of a thread-local byte, unique among live
 * threads. A thread reads its own mark back only if it wrote it (no other
 * thread writes it), so the relaxed load decides rightly whether this
 * thread holds the lock. */
static _Thread_local char self_tag __attribute__((tls_model("initial-exec")));

static inline __attribute__((always_inline)) void op_lock(tw_op *op)
{
    uintptr_t me = (uintptr_t)&self_tag;
    if (atomic_load_explicit(&op->owner, memory_order_relaxed) == me) {
        op->depth++;
        return;
    }
    tw__lock(&op->lock);
    atomic_store_explicit(&op->owner, me, memory_order_relaxed);
    op->depth = 1;
}

static inline __attribute__((always_inline)) void op_unlock(tw_op *op)
{
    if (--op->depth)
        return;
    atomic_store_explicit(&op->owner, 0, memory_order_relaxed);
    tw__unlock(&op->lock);
}

void tw_op_retain(tw_op *op)
{
    if (op)
        atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
}

void tw_op_release(tw_op *op)
{
    if (!op || atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) != 1)
        return;
    tw__lock_destroy(&op->lock);
    /* not through op->p: it may be gone; the table is not, till this */
    struct tw__states *t = op->states;
    uint32_t i = op->sidx;
    tw__states_free(t, op);
    tw__state_put(t, i);
}

void *tw_op_ctx(const tw_op *op)
{
    return op ? op->ctx : NULL;
}

bool tw_op_is_completed(const tw_op *op)
{
    return op && tw__op_completed(op);
}

/* The op's flags (COMPLETED, CANCELLED), without its count of lists. */
static uint32_t op_state(tw_op *op)
{
    return atomic_load(&op->state) & TW__OP_FLAGS;
}

void tw__op_unlisted(tw_op *op)
{
    /* completed before this step: its completion counted this list in
     * `stale`; after it, not */
    uint32_t was = atomic_fetch_sub(&op->state, TW__OP_LISTED);
    atomic_fetch_sub(&op->p->watched, 1);
    if (was & TW__OP_COMPLETED)
        atomic_fetch_sub(&op->p->stale, 1);
}

void tw__completed_unlisted(tw_purgatory *p, size_t n)
{
    if (n) {
        atomic_fetch_sub(&p->watched, n);
        atomic_fetch_sub(&p->stale, (int64_t)n);
    }
}

/* Cancels the op's pending timeout, settling its reference if the task
 * will never run. */
static void cancel_timeout(tw_op *op)
{
    tw_id id = atomic_exchange(&op->timer_id, 0);
    if (id && tw_cancel(op->p->timer, id) == 0) {
        atomic_fetch_sub(&op->p->delayed, 1);
        tw_op_release(op);
    }
}

/* Completes op unless its state already has COMPLETED or a bit of
 * `refuse` (an expiration refuses CANCELLED). Returns whether this call
 * completed it and ran on_complete; *listed_in (if not NULL) is then the
 * purgatory whose lists still held it, whose count of completed entries
 * it added to, or NULL if none did (an op held past
 * tw_purgatory_destroy, whose purgatory is gone, is in none). */
static bool complete(tw_op *op, uint32_t refuse, tw_purgatory **listed_in)
{
    op_lock(op);
    uint32_t s = atomic_load(&op->state);
    do {
        if (s & (TW__OP_COMPLETED | refuse)) {
            op_unlock(op);
            return false;
        }
    } while (!atomic_compare_exchange_weak(&op->state, &s, s | TW__OP_COMPLETED));
    /* The lists holding it as it completed, read in the step that
     * completed it: each counts once in `stale` and comes off once as it
     * lets the op go, whenever that is (a compaction goes by COMPLETED
     * alone, and may drop it before this line runs; cancel_key's
     * tw__op_unlisted learns from the same word which side it was on).
     * Read apart, each time the two met the count drifted down by one,
     * for good, and held purges back. An op held past
     * tw_purgatory_destroy is in no list and has no timeout (destroy took
     * both), so from here on it touches nothing of its purgatory but the
     * table of completion words, which outlives it while ops do. */
    uint32_t listed = s / TW__OP_LISTED;
    if (listed)
        atomic_fetch_add(&op->p->stale, (int64_t)listed);
    if (listed_in) /* none for an op in no list: held past
                      tw_purgatory_destroy, its purgatory is gone */
        *listed_in = listed ? op->p : NULL;
    /* what a compaction goes by (tw__went_completed) */
    atomic_store_explicit(tw__state_word(op->states, op->sidx), 1, memory_order_release);
    cancel_timeout(op);
    op->ops->on_complete(op);
    op_unlock(op);
    return true;
}

static void request_purge(tw_purgatory *p);

/* A completion adds to the completed entries still listed, so it also
 * looks whether a purge is due, as expirations and check_and_complete
 * do: without it, ops completed by force_complete alone (none expiring,
 * no event walked) stayed listed, with their memory, until the next
 * expiration, however many there were. */
bool tw_op_force_complete(tw_op *op)
{
    tw_purgatory *p;
    if (!op || !complete(op, 0, &p))
        return false;
    if (p)
        request_purge(p);
    return true;
}

/* Under the op's lock: never beside on_complete. */
static bool safe_try_complete(tw_op *op)
{
    op_lock(op);
    bool done = !(op_state(op) & TW__OP_COMPLETED) && op->ops->try_complete(op);
    op_unlock(op);
    return done;
}

/* The purge's share: completed entries are at least 1/TW__PURGE_SHARE of
 * all listed ones before they are purged (purge_due). A larger share
 * visits fewer entries a purge, but frees more ops in one go, on the
 * timer's thread: the expirations behind it wait (measured when the
 * thread whose expiration noticed ran a whole pass at once, with
 * Kafka's own benchmark at 400,000 requests/s their lateness at p99 was
 * 1.7 to 2.6 ms on the count alone, 3.3 to 5.6 with an eighth, 4.5 to 5.3
 * with a quarter: history.md, "Kafka's test as written, and a purge that
 * waits for an eighth"). */
#define TW__PURGE_SHARE 8u

static bool purge_due(tw_purgatory *p)
{
    /* The count can dip below 0 for a moment when an entry is dropped
     * between an op's completion and its adding of its lists; the bound is
     * compared unsigned, so that one past INT64_MAX is never passed. */
    int64_t stale = atomic_load(&p->stale);
    if (stale <= 0 || (uint64_t)stale <= p->purge_interval)
        return false;
    /* A purge visits every entry, so it also waits until the completed
     * ones are an eighth of them: it then costs at most eight visits an
     * entry it drops. On the count alone (Kafka's rule) a hot key's long
     * list was walked whole every purge_interval completions: under
     * Kafka's own benchmark at 800,000 requests/s, 43% of the expiring
     * thread's time, which then fell behind. */
    return (uint64_t)stale >= (atomic_load(&p->watched) + TW__PURGE_SHARE - 1) / TW__PURGE_SHARE;
}

/* One slice of the pass under way, or of a new one when a purge is due,
 * by the holder of `purging`. A slice is timed on the timer's clock (read
 * even in manual mode, whose tw_now stands still through a callback), and
 * one that runs later than the last one's length past its end has a
 * budget as many times larger as it is late: the reaper runs at most once
 * a tick, and a pass must keep up however seldom it runs. Returns whether
 * a pass is still under way. */
static bool purge_step(tw_purgatory *p)
{
    bool passing = atomic_load_explicit(&p->passing, memory_order_relaxed);
    if (!passing && !purge_due(p))
        return false;
    uint64_t now = tw__clock_now(p->timer);
    uint64_t budget = p->purge_slice;
    if (passing && now > p->purge_next) {
        uint64_t took = p->purge_took;
        uint64_t late = (now - p->purge_next) / (took ? took : 1);
        budget = late >= UINT32_MAX / p->purge_slice ? UINT32_MAX
                                                     : (late + 1) * p->purge_slice;
    }
    size_t gone;
    bool over = tw__purge_slice(p, (uint32_t)budget, &gone);
    uint64_t then = tw__clock_now(p->timer);
    p->purge_took = then > now ? then - now : 0;
    p->purge_next = then + p->purge_took;
    atomic_store_explicit(&p->passing, !over, memory_order_relaxed);
    return !over;
}

/* A slice (purge_step) under the purge's flag, unless another thread
 * holds it. Returns whether a pass is still under way (true, too, when
 * the flag was held: its holder may leave the pass unfinished), and sets
 * *took to the slice's length (0 if none ran). */
static bool try_slice(tw_purgatory *p, uint64_t *took)
{
    *took = 0;
    if (atomic_exchange(&p->purging, 1))
        return true;
    bool more = purge_step(p);
    *took = p->purge_took;
    atomic_store(&p->purging, 0);
    return more;
}

/* The reaper: a task on the purgatory's own timer that runs the purge a
 * slice at a time, as Kafka's expiration reaper does, so that the threads
 * completing ops only look whether a purge is due and hand it over. After
 * each slice it comes back as long after as the slice took: the timer's
 * thread spends at most about half its time on the purge while
 * expirations wait, and they wait for one slice, not a pass. */
static void reap_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    tw_purgatory *p = arg;
    uint64_t wait;
    if (try_slice(p, &wait)) {
        if (tw_schedule(t, wait, reap_fn, p, NULL) == 0)
            return;
        /* stopping (destroy), no memory or max_pending: the look below
         * runs the slice here if the task still cannot be scheduled, and
         * later completions go on with the pass */
    }
    atomic_store(&p->reaping, 0);
    /* a completion that looked while `reaping` was set left it to us */
    if (atomic_load_explicit(&p->passing, memory_order_relaxed) || purge_due(p))
        request_purge(p);
}

/* Hands a due purge to the reaper, unless it has it already. Most calls
 * stop at the first load. Where the reaper cannot be scheduled (the
 * purgatory is being destroyed, no memory, or the timer's max_pending
 * reached), the caller runs a slice itself, so that the bound on
 * completed entries does not rest on the timer. */
static void request_purge(tw_purgatory *p)
{
    if (atomic_load(&p->reaping))
        return;
    /* a pass left unfinished (the reaper could not come back) goes on */
    if (!atomic_load_explicit(&p->passing, memory_order_relaxed) && !purge_due(p))
        return;
    if (atomic_exchange(&p->reaping, 1))
        return;
    if (tw_schedule(p->timer, 0, reap_fn, p, NULL) == 0)
        return;
    atomic_store(&p->reaping, 0);
    uint64_t took;
    (void)try_slice(p, &took);
}

size_t tw_purgatory_purge(tw_purgatory *p)
{
    return p ? tw__purge_all(p) : 0;
}

static void expire_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    tw_op *op = arg;
    tw_purgatory *p = op->p;
    atomic_fetch_sub(&p->delayed, 1);
    tw_id expect = id;
    atomic_compare_exchange_strong(&op->timer_id, &expect, 0);
    /* A cancel_key that reached the op after the driver took this job
     * (too late for tw_cancel) has handed it over, promising it will not
     * expire: complete() refuses a CANCELLED op, in the same atomic step
     * that would complete it. */
    tw_purgatory *listed = NULL;
    bool expired = complete(op, TW__OP_CANCELLED, &listed);
    if (expired && op->ops->on_expire)
        op->ops->on_expire(op); /* after on_complete, outside the op lock */
    tw_op_release(op);
    if (expired && listed)
        request_purge(p);
}

int tw_purgatory_try_complete_else_watch(tw_purgatory *p, tw_op *op,
                                         const struct tw_key *keys, size_t nkeys)
{
    if (!p || !op || op->p != p || (nkeys && !keys) || nkeys > TW__OP_MAX_LISTED)
        return -EINVAL;
    for (size_t k = 0; k < nkeys; k++)
        if (!keys[k].data || !keys[k].len)
            return -EINVAL;
    if (atomic_exchange(&op->submitted, 1))
        return -EINVAL;

    op_lock(op);
    if (op_state(op) & TW__OP_COMPLETED) { /* before this call: not ours */
        op_unlock(op);
        return 0;
    }
    if (op->ops->try_complete(op)) {
        op_unlock(op);
        return 1;
    }
    size_t watched = 0;
    for (; watched < nkeys && !(op_state(op) & TW__OP_COMPLETED); watched++) {
        if (tw__watch(p, op, &keys[watched])) {
            for (; watched > 0; watched--) /* nothing half-done */
                tw__unwatch(p, op, &keys[watched - 1]);
            /* a cancel_key may have handed it over meanwhile (through
             * a key watched already): the caller has it from there, and
             * an error here would answer the request a second time */
            bool handed = op_state(op) & TW__OP_CANCELLED;
            if (!handed)
                atomic_store(&op->submitted, 0);
            op_unlock(op);
            return handed ? 0 : -ENOMEM;
        }
    }
    /* one more try: an event may have come between the first and the watch */
    bool done = !(op_state(op) & TW__OP_COMPLETED) && op->ops->try_complete(op);
    op_unlock(op);
    if (done)
        return 1;
    if (op_state(op))
        return 0; /* completed, or handed over by cancel_key, meanwhile */

    atomic_fetch_add(&p->delayed, 1);
    tw_op_retain(op); /* the timeout's reference */
    tw_id id;
    int rc = tw_schedule(p->timer, op->timeout_ns, expire_fn, op, &id);
    if (rc) {
        atomic_fetch_sub(&p->delayed, 1);
        tw_op_release(op);
        op_lock(op);
        for (size_t k = 0; k < watched; k++)
            tw__unwatch(p, op, &keys[k]);
        /* An event on one of its keys (or a force_complete) may have
         * completed it since the lock was dropped, or a cancel_key handed
         * it over: on_complete has run, or the caller has it from
         * cancel_key, so the failure is moot and the caller must not
         * answer the request a second time. */
        int moot = op_state(op) != 0;
        if (!moot)
            atomic_store(&op->submitted, 0);
        op_unlock(op);
        return moot ? 0 : rc;
    }
    /* Completed or handed over by cancel_key while we scheduled: either
     * that side finds the id stored here (and cancels), or this load sees
     * its flag (the atomics are sequentially consistent) and the timeout
     * is cancelled here; cancel_timeout settles it once. */
    atomic_store(&op->timer_id, id);
    if (op_state(op))
        cancel_timeout(op);
    return 0;
}

int tw_purgatory_check_and_complete(tw_purgatory *p, const void *key, size_t keylen)
{
    if (!p || !key || !keylen)
        return -EINVAL;
    tw_op *buf[64], **ops;
    struct tw__pin pin;
    long n = tw__snapshot(p, key, keylen, buf, sizeof(buf) / sizeof(buf[0]), &ops, &pin);
    if (n < 0)
        return (int)n;
    /* No reference per op: the pinned list's keep them (purgatory.h). */
    long completed = 0; /* a list holds up to 2^31 entries: clamped below */
    for (long i = 0; i < n; i++)
        if (!tw__op_completed(ops[i]) && safe_try_complete(ops[i]))
            completed++;
    if (ops != buf)
        tw__p_free(p, ops);
    if (n)
        tw__unpin(p, &pin);
    /* each completion above looked whether a purge is due: a try that
     * completes does so through tw_op_force_complete */
    return completed > INT_MAX ? INT_MAX : (int)completed;
}

size_t tw_purgatory_cancel_key(tw_purgatory *p, const void *key, size_t keylen,
                               void (*each)(tw_op *op, void *arg), void *arg)
{
    if (!p || !key || !keylen)
        return 0;
    struct tw__wshard *s;
    struct tw__watcher *w = tw__take_key(p, key, keylen, &s);
    if (!w)
        return 0;
    size_t n = 0;
    for (uint32_t i = 0; i < w->n; i++) {
        tw_op *op = w->ents[i].op;
        if (tw__dead(op))
            continue; /* unwatched already */
        tw__op_unlisted(op);
        /* Handed over: no expiry from now on. Set before the cancel (see
         * the submission's end); an expiration already under way checks
         * it as it completes (see expire_fn), so the promise holds
         * whoever else is at the timeout. */
        atomic_fetch_or(&op->state, TW__OP_CANCELLED);
        cancel_timeout(op);
        if (each)
            each(op, arg);
        n++;
    }
    /* the list's references, which a walker of the key may still rely on */
    tw__drop_taken(p, s, w);
    return n;
}

/* ---- shutdown ---------------------------------------------------------- */

/* A timeout that will never fire: its op is still waiting. */
static void unfired_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    tw_purgatory *p = tw_drain_arg(t);
    if (arg == p) { /* the reaper's task: no op */
        atomic_store(&p->reaping, 0);
        return;
    }
    /* Threaded, the driver has stopped: a reaper still queued will never
     * run, and its task may be handed back after this op's. The
     * completions in `unfinished` must not leave the purge to it: with
     * `reaping` clear they try to queue one, which the stopped timer
     * refuses, and run the slice themselves. */
    if (p->threaded)
        atomic_store(&p->reaping, 0);
    tw_op *op = arg;
    atomic_fetch_sub(&p->delayed, 1);
    atomic_store(&op->timer_id, 0);
    /* one cancel_key handed over already (its timeout was taken by the
     * driver, too late to cancel) is not handed over twice */
    if (!op_state(op) && p->unfinished)
        p->unfinished(op, p->unfinished_arg);
    tw_op_release(op);
}

void tw_purgatory_destroy(tw_purgatory *p, void (*unfinished)(tw_op *op, void *arg), void *arg)
{
    if (!p)
        return;
    if (tw__in_callback(p->timer)) /* an expiration, or `unfinished` itself */
        tw__misuse("tw_purgatory_destroy called from a callback of the same purgatory");
    p->unfinished = unfinished;
    p->unfinished_arg = arg;
    if (p->threaded)
        tw_stop(p->timer, unfired_fn, p);
    else
        tw_drain(p->timer, unfired_fn, p);
    tw__watchers_destroy(p);
    tw_destroy(p->timer);
    tw__states_release(p->states); /* ops still held keep it */
    tw__p_free(p, p);
}
