/*
 * twheel: a hierarchical timing wheel for very large numbers of timers.
 *
 * A tw_timer holds pending tasks (a deadline, a callback and its argument).
 * Tasks live in cascading wheels whose tick grows by a factor of
 * `wheel_size` per level; every non-empty bucket sits in one binary heap
 * (the delay queue) keyed by its expiration, so the clock jumps straight to
 * the next occupied bucket and no empty tick is ever visited.
 *
 * Guarantees (see src/wheel.c for where each is enforced):
 *   - a task never fires before its deadline: deadlines are rounded UP to
 *     the tick;
 *   - in manual mode a task fires at the first tw_advance(now) with
 *     now >= its deadline rounded up to the tick, so at most one tick late
 *     for a caller that advances to tw_next_deadline();
 *   - tasks whose deadlines are a tick or more apart fire in deadline order;
 *     tasks due in the same tick fire in a deterministic order (not FIFO:
 *     see src/wheel.h on the lists of a bucket). Threaded, this holds
 *     within a shard when callbacks run on the driver (workers = 0): a
 *     driver pass fires one shard's due tasks, then the next shard's, so
 *     when a pass covers several ticks (the driver woke late, the clock
 *     jumped) tasks of different shards may interleave out of order; with
 *     workers, callbacks run concurrently and no order holds;
 *   - schedule and cancel are O(1) and allocate nothing once the entry pool
 *     is warm (keyed and periodic tasks also reuse pooled records);
 *   - ids are never reissued: a stale id is answered with -ENOENT and
 *     touches nothing;
 *   - on any error the timer is left exactly as it was.
 *
 * Time is uint64_t nanoseconds on the timer's clock (CLOCK_MONOTONIC unless
 * an injectable clock is given). Errors are negative errno values.
 *
 * Thread-safety: a manual-mode timer (the default) is not thread-safe; use
 * it from one thread at a time, like a libuv loop. A threaded timer
 * (options.threaded = 1) may be used from any thread at any time; see
 * "Threaded mode" below.
 */
#ifndef TWHEEL_H
#define TWHEEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TW_API
#else
#define TW_API __attribute__((visibility("default")))
#endif

#define TW_VERSION_MAJOR 0
#define TW_VERSION_MINOR 2
#define TW_VERSION_PATCH 0
/* The version these headers describe, as one number; compare it with
 * tw_version() to see which library was loaded. */
#define TW_VERSION_HEX \
    ((TW_VERSION_MAJOR << 16) | (TW_VERSION_MINOR << 8) | TW_VERSION_PATCH)

typedef struct tw_timer tw_timer;

/* A task handle. 0 never names a task; an id is never reissued. */
typedef uint64_t tw_id;

/* A task callback: the timer, the task's id and the arg given at schedule. */
typedef void (*tw_fn)(tw_timer *t, tw_id id, void *arg);

/* Allocation hook. Every allocation twheel makes goes through it. Both
 * functions set, or both NULL for the default allocator (libc malloc, or
 * jemalloc when built with -Djemalloc=enabled; blocks of 1 MiB or more
 * are mapped with mmap directly; the task pool's block sits in a larger
 * reservation of address space (PROT_NONE, at least 1 GiB on a 64-bit
 * target, none on a 32-bit one) and grows in place, without moving or
 * copying). free is never given NULL. The functions may be
 * called with the timer's (or the purgatory's) internal locks held: they
 * must not call back into the same timer or purgatory, where a call that
 * takes a lock already held deadlocks. Threaded, they are called from
 * any thread that calls into the timer, and from the driver or a worker
 * when a periodic task re-arms (see tw_schedule_every): they must be
 * thread-safe. */
struct tw_allocator {
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *p);
    void *ctx;
};

struct tw_options {
    uint64_t tick_ns;             /* level-0 tick; default 1 ms (1000000) */
    uint32_t wheel_size;          /* slots per level: power of two in
                                     [2, TW_MAX_WHEEL_SIZE]; default 64. A
                                     level, made when first needed, costs
                                     wheel_size * 144 bytes (9 KB at 64:
                                     twice the slots' bucket lists, see
                                     tw_advance); a task pool whose slots
                                     take 1 MiB or more keeps room for every
                                     level's list heads from the start, so
                                     that making a level never moves it */
    uint64_t max_pending;         /* 0 = unbounded; else schedule beyond it
                                     returns -EAGAIN */
    uint64_t (*clock)(void *ctx); /* NULL = CLOCK_MONOTONIC in ns */
    void *clock_ctx;
    struct tw_allocator allocator; /* all NULL = the default allocator */
    int threaded;                 /* 0 = manual (default); 1 = a driver
                                     thread advances the timer itself */
    uint32_t workers;             /* threaded only: 0 = callbacks run on the
                                     driver thread; N = on N worker threads
                                     (at most 1024) */
    uint32_t shards;              /* threaded only: independent engine
                                     shards, each with its own lock,
                                     rounded up to a power of two, at
                                     most 64; 0 = four per CPU the
                                     creating thread may run on (its
                                     affinity: a cpuset, taskset),
                                     4 .. 64 */
    uint64_t capacity;            /* tasks to make room for at creation (0 =
                                     grow on demand; threaded: shared out
                                     evenly over the shards; a thread
                                     schedules into one shard (see "Scaling"
                                     below), so with fewer scheduling threads
                                     than shards their shards outgrow their
                                     shares and the other shares go unused:
                                     counted in tw_stats.memory_bytes, not
                                     resident with the default allocator), and
                                     for the 16 cancels a shard whose slots
                                     wait to be reused (tw_cancel). A full
                                     pool doubles: with the default allocator
                                     a pool of 1 MiB or more is mapped
                                     directly in a reservation of address
                                     space (see tw_allocator) and grows in
                                     place (past it, by mremap: its pages
                                     move, nothing is copied), and is made
                                     resident 128 KiB at a time ahead of the
                                     slots in use (Linux 5.14+: madvise
                                     MADV_POPULATE_WRITE, one call in place of
                                     32 page faults), on 4 KiB pages unless
                                     huge_pages; a user's allocator copies it
                                     and its pages fault in as touched. A
                                     manual timer sized here never grows (a
                                     threaded shard may outgrow its share). A
                                     shard holds at most 238,609,294 tasks
                                     (with 32 shards 134,217,727, with 64
                                     67,108,863; on a 32-bit target 59,652,323
                                     whatever the shards; then -ENOMEM); a
                                     capacity whose share is larger is refused
                                     (-EINVAL). Nothing shrinks: the room a
                                     peak made (slots, levels, keyed and
                                     periodic records, the key table) stays
                                     with the timer, reused, until tw_destroy
                                     (tw_stats.memory_bytes counts it). */
    int huge_pages;               /* manual mode only: 0 = the task pool
                                     stays on 4 KiB pages (default);
                                     1 = once the pool, mapped by the
                                     default allocator, reaches past
                                     its first 2 MiB, it asks for
                                     transparent huge pages over its
                                     reservation (Linux madvise
                                     MADV_HUGEPAGE; nothing where THP
                                     is "never", on a 32-bit target or
                                     with a user's allocator). A trade
                                     (README, "Memory"): one fault a
                                     2 MiB instead of 512, but each
                                     huge page comes in one lump,
                                     inside one tw_schedule, of ~0.1
                                     ms to ~4 ms (more if the kernel
                                     must compact memory for it), and
                                     up to 2 MiB sits resident beyond
                                     the slots in use. Threaded shards
                                     never ask (they populate under
                                     the lock their driver fires
                                     under): 1 with threaded is
                                     -EINVAL. */
};

/* Largest wheel_size: 4096, i.e. at most 288 KB a level. A bucket is
 * eight 8-byte list heads (its tasks are spread over eight lists, so
 * that walking it keeps eight cache misses in flight) and 8 bytes. */
#define TW_MAX_WHEEL_SIZE (1u << 12)

/* Periodic flags (exactly one). */
#define TW_FIXED_RATE  1 /* next deadline = previous deadline + period.
                            Missed periods are skipped, not fired in a
                            burst: the task fires once, late, and its next
                            deadline is the first previous + k * period that
                            lies after the current time. */
#define TW_FIXED_DELAY 2 /* next deadline = time the callback returned +
                            period (manual mode: the timer's current time). */

struct tw_stats {
    uint64_t pending;        /* tasks scheduled and not yet fired, cancelled
                                or drained (a periodic task counts until it
                                is cancelled) */
    uint64_t scheduled;      /* successful schedule calls of every kind */
    uint64_t fired;          /* callbacks run (each periodic firing counts) */
    uint64_t cancelled;      /* tasks removed by cancel, keyed replacement or
                                cancel_keyed */
    uint64_t drained;        /* tasks handed back by tw_drain / tw_stop */
    uint64_t cascaded;       /* re-insertions of a task from a coarse bucket
                                into a finer one, at the bucket's tick or
                                ahead of it (see tw_advance), or of a task
                                pushed later by tw_reschedule from the
                                bucket it had stayed in */
    uint64_t rejected;       /* schedules refused for max_pending */
    uint64_t levels;         /* wheel levels created so far */
    uint64_t queued_buckets; /* non-empty buckets in the delay queue now */
    uint64_t advances;       /* tw_advance calls (threaded: driver wake-ups
                                that advanced the clock) */
    uint64_t bucket_pops;    /* buckets taken off the delay queue */
    uint64_t memory_bytes;   /* bytes the timer holds from its allocator */
    uint64_t entry_bytes;    /* bytes per task slot (entry + generation) */
    uint64_t retired_slots;  /* slots whose generation wrapped: never reused,
                                so that no id is ever reissued */
    /* Lateness of fired tasks: firing time minus deadline, in ns (never
     * negative). Manual mode measures against the time given to
     * tw_advance; threaded mode against the clock read before dispatch.
     * Only tasks whose callbacks run are measured (not one the driver took
     * and tw_stop handed back). Threaded, a task may count in `fired` a
     * little before it counts here: its lateness is recorded once it is
     * sure to run. All three are 0 until a measured task has fired. */
    uint64_t late_max_ns;
    uint64_t late_p50_ns;    /* upper bound of the histogram bucket (powers */
    uint64_t late_p99_ns;    /* of two) holding the percentile */
};

/* Fills *o with the defaults. Always succeeds. */
TW_API void tw_options_init(struct tw_options *o);

/* Creates a timer. o may be NULL for the defaults. Returns 0 and sets *out,
 * or -EINVAL (out NULL, tick_ns 0, wheel_size not a power of two in
 * [2, TW_MAX_WHEEL_SIZE], only one allocator function set, workers or
 * shards without threaded, threaded or huge_pages not 0 or 1, huge_pages
 * with threaded, more than 1024 workers or 64 shards, a capacity beyond
 * what the shards can hold), -ENOMEM, or
 * (threaded) pthread_create's error negated (-EAGAIN: a thread or memory
 * limit). On error *out is left as it was, every byte is freed and every
 * thread already started is joined. The options are copied. */
TW_API int tw_create(tw_timer **out, const struct tw_options *o);

/* Destroys a timer; a threaded timer is stopped first (pending tasks are
 * dropped unfired: call tw_stop first to get them back). NULL is a no-op.
 * Frees every byte the timer holds. Cost: pending plain tasks go with
 * the entry pool, freed whole (a few ns a task: its share of the pages
 * unmapped; twheel-bench's W4 close column). A shard that holds keyed or
 * periodic tasks (records and keys of their own) first frees its tasks
 * as tw_drain(t, NULL, NULL) does, in one pass over its slots (4 to 7 ns
 * a task at 10^6 pending beside one periodic task, history.md, "A drain
 * with nothing to hand back"); only one whose periodic task was taken to
 * fire when the timer stopped walks its lists, a cache miss a task (171
 * to 201 ns at 10^6).
 * Must not be called from a callback of the same timer (a firing, a
 * drain's `each`, tw_stop's `unfired`): the loop running the callback
 * would go on over freed memory, and a void call cannot report it, so it
 * writes "twheel: tw_destroy called from a callback of the same timer" to
 * stderr and aborts. Any thread may destroy another timer, from a
 * callback too. */
TW_API void tw_destroy(tw_timer *t);

/* Schedules fn(t, id, arg) to run delay_ns after the timer's current time
 * (tw_now). A delay that would overflow is clamped to the far future
 * (UINT64_MAX ns). Sets *id when id is not NULL, on success only: a
 * refused schedule leaves *id as it was. Returns 0, -EINVAL (t or fn
 * NULL), -EAGAIN (max_pending reached), -ENOMEM, or -ESHUTDOWN (stopped).
 * O(1). */
TW_API int tw_schedule(tw_timer *t, uint64_t delay_ns, tw_fn fn, void *arg,
                       tw_id *id);

/* Like tw_schedule, with an absolute deadline on the timer's clock. A
 * deadline in the past is due now: it fires at the next tw_advance (in
 * threaded mode, the driver's next pass). Reads no clock, where a threaded
 * tw_schedule reads it once per call. */
TW_API int tw_schedule_at(tw_timer *t, uint64_t deadline_ns, tw_fn fn,
                          void *arg, tw_id *id);

/* Schedules a periodic task: first after first_delay_ns, then every
 * period_ns, with flags TW_FIXED_RATE or TW_FIXED_DELAY. The same id names
 * every firing; cancel it (from anywhere, its own callback included) to
 * stop it. Next deadlines that would overflow saturate at UINT64_MAX, the
 * end of time; a firing at the end of time is the task's last (no later
 * instant exists), and the task then leaves as a one-shot task does,
 * unless its callback rescheduled it. Returns 0, -EINVAL (period 0, flags
 * not exactly one of the two), or the errors of tw_schedule.
 * Threaded, a callback that returns long after its deadline (the driver
 * has not advanced the timer since) re-arms the task further out than
 * the levels made so far may reach: the level it needs is made then, on
 * the thread that ran the callback. Without memory for it the task still
 * fires at its next deadline, never before, at the cost of a driver
 * wake-up, until then, about once per span of the highest level made
 * as time goes by (a pass that catches up on a long stretch at once
 * moves it once, not once per span: src/wheel.c, "Re-arming a periodic
 * task"). */
TW_API int tw_schedule_every(tw_timer *t, uint64_t first_delay_ns,
                             uint64_t period_ns, int flags, tw_fn fn,
                             void *arg, tw_id *id);

/* Moves a pending task so that it fires delay_ns after tw_now (clamped as
 * in tw_schedule). Its id stays the same. Called on a periodic task from
 * its own callback, it sets the next firing. Returns 0, -ENOENT if the id
 * is not pending, -EINVAL (t NULL), -ENOMEM (the task is left as it was:
 * only a deadline past every level made so far allocates), -ESHUTDOWN
 * once tw_stop has begun. O(1). A later deadline for a plain task (an
 * idle timeout pushed back) is written in place and the task stays where
 * it is until its old place comes due, then moves, once however often it
 * was pushed: it never fires before its new deadline, but
 * tw_next_deadline (and the threaded driver) may still name the old
 * place's time, with nothing to fire then. An earlier deadline, or a
 * keyed or periodic task, moves at once. */
TW_API int tw_reschedule(tw_timer *t, tw_id id, uint64_t delay_ns);

/* Like tw_reschedule, with an absolute deadline on the timer's clock (as
 * tw_schedule_at is to tw_schedule): a deadline in the past is due now,
 * and fires at the next tw_advance (threaded: the driver's next pass).
 * Reads no clock. Returns as tw_reschedule does. */
TW_API int tw_reschedule_at(tw_timer *t, tw_id id, uint64_t deadline_ns);

/* When a pending task is due: sets *deadline_ns to its deadline as
 * scheduled, on the timer's clock (tw_now's), before rounding: it fires at
 * the first tick boundary at or after it. For a periodic task, its next
 * firing's. Returns 0; -ENOENT if the id is not pending (it fired, was
 * cancelled or drained, or never existed); -EBUSY for a periodic task
 * whose callback is running (threaded: or taken by the driver to run)
 * and has not set its next firing with tw_reschedule, since that
 * deadline is made only when the callback returns; -EINVAL (t or
 * deadline_ns NULL). *deadline_ns is written only on success. Changes
 * nothing. O(1); threaded, it takes the task's shard lock. */
TW_API int tw_deadline(tw_timer *t, tw_id id, uint64_t *deadline_ns);

/* Cancels a task. Returns 0 if it was pending (its callback will not run;
 * for a periodic task running its callback right now: it will not run
 * again; threaded, a periodic task the driver has taken but whose callback
 * has not started does not run), -ENOENT if it already fired, was
 * cancelled, or never existed, -EINVAL if t is NULL. O(1). The id is
 * stale, and the task gone from tw_pending, tw_next_deadline and every
 * other call, at once; the slot of a plain task goes back to be reused
 * 16 cancels later (or when the timer next fires, drains or needs it):
 * its unlink waits until its own cache line, which the cancel reads, is
 * in, so that the writes to its neighbours never wait on it. A timer
 * thus holds up to 16 slots (36 bytes each) per shard beyond its
 * pending tasks. */
TW_API int tw_cancel(tw_timer *t, tw_id id);

/* Schedules a task under a key (a byte string, copied). A pending task
 * under the same key is cancelled and replaced (its callback will not run;
 * the new task gets a new id). The key is freed when the task fires or is
 * cancelled. Returns 0, -EINVAL (key NULL, keylen 0 or above
 * UINT32_MAX, checked before the key is read), or the errors of
 * tw_schedule; on error the old task stays pending. */
TW_API int tw_schedule_keyed(tw_timer *t, const void *key, size_t keylen,
                             uint64_t delay_ns, tw_fn fn, void *arg,
                             tw_id *id);

/* Cancels the pending task under key. Returns 0, -ENOENT if no task is
 * pending under it, -EINVAL (t or key NULL, keylen 0 or above UINT32_MAX,
 * checked before the key is read). */
TW_API int tw_cancel_keyed(tw_timer *t, const void *key, size_t keylen);

/* Sets the 16-byte key (copied) under which the timer hashes task keys
 * (SipHash-1-3). tw_create draws a random one for each timer, so that keys
 * a client chooses cannot be made to pile up in one probe run or on one
 * shard; set one only to make runs repeat exactly (tests, replaying a
 * fuzzer's input: which shard a key lands on, and so which allocations a
 * run makes, follows from it) or to draw it from your own random source.
 * Returns 0, -EINVAL (t or key NULL), or -EBUSY while a keyed task is
 * pending (its key was placed under the old hash; nothing changes). Not
 * thread-safe: call it before other threads use the timer. */
TW_API int tw_set_hash_key(tw_timer *t, const unsigned char key[16]);

/* Manual mode: moves the timer's time to now_ns (a time earlier than tw_now
 * is taken as tw_now: a clock going backwards fires nothing early and loses
 * nothing) and runs the callbacks of every task due by then, in deadline
 * order, after all of them have been collected. Returns how many callbacks
 * ran (INT_MAX if more), -EDEADLK when called from a callback of this
 * timer, -EINVAL (t NULL), -EPERM on a threaded timer. Cost is
 * proportional to the buckets and tasks due, never to the time that
 * passed, plus, when a bucket came due, a bounded slice of work done
 * ahead: after the callbacks, up to 1024 tasks per level move from the
 * next coarse bucket to a finer level, so that a big coarse bucket is not
 * cascaded all at once at its tick, where that tick's due tasks would
 * wait for it (the threaded driver does the same after each firing
 * pass). */
TW_API int tw_advance(tw_timer *t, uint64_t now_ns);

/* Sets *deadline_ns to the time at which tw_advance next has work: never
 * later than the earliest pending task's firing time, possibly earlier
 * when a coarse bucket must cascade or a task pushed later by
 * tw_reschedule must move, and possibly <= tw_now (call
 * tw_advance right away). Returns 0, -ENOENT if nothing is pending, or
 * -EINVAL (t or deadline_ns NULL); *deadline_ns is written only on
 * success. */
TW_API int tw_next_deadline(tw_timer *t, uint64_t *deadline_ns);

/* The timer's current time in ns: what relative delays count from.
 * Manual: the last tw_advance (or the clock at creation). Threaded: the
 * clock, read now. 0 when t is NULL. */
TW_API uint64_t tw_now(tw_timer *t);

/* Number of pending tasks (as tw_stats.pending); 0 when t is NULL.
 * Threaded, it takes each shard's lock in turn, so the sum may be off by
 * the operations in flight. */
TW_API size_t tw_pending(tw_timer *t);

/* Removes every pending task without firing it, calling each(t, id,
 * task_arg) for each (each may be NULL to just drop them). Keys are freed.
 * A periodic task whose callback is running is handed back too and will
 * not run again; threaded, so is one the driver has taken and whose
 * callback has not started, and that callback does not run. `arg` is the
 * caller's context, readable from `each` with tw_drain_arg(). Returns how
 * many tasks were removed (0 when t is NULL). each must not call back
 * into this timer (but for tw_drain_arg). Threaded: tasks scheduled while
 * it runs may stay; a shard fires nothing while it is being drained (its
 * tasks due meanwhile fire when the drain ends, late by as long as the
 * callbacks took, never early).
 * O(pending + buckets), plus a pass over the slots ever used while a
 * periodic task is running or taken: each task is taken out of its list,
 * a cache miss apiece once they outgrow the cache. With each NULL, a
 * shard with no periodic task running or taken instead lets its lists go
 * whole and frees the slots in one pass over them in address order (a
 * keyed or periodic task's record and key as a cancel frees them), its
 * lock held throughout: O(slots ever used + buckets). At 10^6 pending,
 * 1.4 to 4.3 ns a task against 160 to 192 for the walk (twheel-bench's W4
 * drop column; benchmarks/results/history.md, "A drain with nothing to
 * hand back"). */
TW_API size_t tw_drain(tw_timer *t, tw_fn each, void *arg);

/* Within a tw_drain / tw_stop callback: the `arg` given to that call
 * (tw_stop's callbacks may run on the driver thread: they see it too).
 * Kept per drain, so drains of one timer from several threads at once each
 * see their own, and a drain of another timer from within `each` leaves
 * the outer drain's in place. NULL outside a drain of t. */
TW_API void *tw_drain_arg(tw_timer *t);

/* Fills *s (all zero when t is NULL; nothing when s is NULL). pending is
 * scheduled - cancelled - drained - the firings that ended a task (every
 * one-shot firing; a periodic one's only at the end of time), so while only
 * one-shot tasks are used scheduled == pending + fired + cancelled +
 * drained (each periodic firing adds to fired alone). Threaded, the
 * figures are summed over shards, each read under its own lock: that
 * identity holds in every result, even while other threads schedule,
 * fire and stop, but the sum is not one instant (an operation in a shard
 * already read is missed while a later one in a shard read after it is
 * counted). late_max_ns never decreases from one call to the next. */
TW_API void tw_stats(tw_timer *t, struct tw_stats *s);

/* Checks every internal invariant (heap order and indices, list links,
 * bucket placement of every task, counts, free list, pool bounds, key
 * map). Returns 0 if all hold, else -EFAULT after describing each failure
 * on report (which may be NULL), or -EINVAL when t is NULL.
 * O(pending + buckets + slots); threaded, it takes each shard's lock in
 * turn. It changes nothing; it mallocs (not through tw_options.allocator)
 * one bit per slot while it walks the free list, and without that memory
 * skips the one rule that needs it (no slot listed twice). For tests and
 * fuzzers. */
TW_API int tw_check(tw_timer *t, FILE *report);

/* A static description of a twheel error code (negative errno): each code
 * the functions above document has its own; any other gets "unknown
 * error". Thread-safe. */
TW_API const char *tw_strerror(int err);

/* The version of the library loaded at run time, as TW_VERSION_HEX:
 * (major << 16) | (minor << 8) | patch. A program built against these
 * headers may check that the shared library it runs with is not older.
 * Thread-safe. */
TW_API unsigned tw_version(void);

/*
 * Threaded mode (options.threaded = 1).
 *
 * A driver thread ("tw-driver") sleeps until the earliest occupied bucket
 * comes due and advances the timer itself; it is woken early only when a
 * schedule creates an earlier bucket. Every function above may be called
 * from any thread, callbacks included, except tw_advance (-EPERM).
 * Callbacks run on the driver thread (workers = 0: a long callback delays
 * the tasks due after it, and the clock with them) or on a pool of
 * `workers` threads ("tw-worker-N": a long callback holds only its own
 * worker; the driver keeps advancing). At most 16,384 fired tasks wait
 * for a worker; when the workers fall that far behind, the driver waits
 * for room (nothing is dropped, and the tasks due meanwhile fire late).
 * No internal lock is held while a callback runs. Cancel racing with the
 * firing of the same task has one winner: either tw_cancel returns 0 and
 * the callback never runs, or the callback runs (or is running) and
 * tw_cancel returns -ENOENT.
 *
 * Scaling: the timer is split into `shards` engines, each behind its own
 * lock (a futex lock that spins briefly first; uncontended, taking and
 * releasing it are one atomic instruction each); a thread schedules into
 * the shard it was given on first use (a keyed task, the shard its key
 * hashes to), and an id names its shard, so concurrent schedulers rarely
 * share a lock. Threads on different CPUs that schedule into the same
 * shard at once (with shards = 1, say) take turns at its lock and pass
 * its cache lines between the CPUs on every operation: in twheel-bench's
 * W5 on one shard, two threads made 0.09x to 0.41x of one thread's
 * operations a second, by host (on one guest, with the time a cache line
 * took to pass between its two CPUs). Keep the default shards. A
 * threaded schedule reads the clock itself (delays count from the clock,
 * not from the driver's last pass). The driver sleeps until the earliest
 * occupied bucket and never wakes for an empty tick; with nothing due
 * soon it may still wake when a coarse bucket's time comes, to move its
 * tasks to a finer level: at most once per level in a task's life, and
 * never sooner than about half the task's delay after it was scheduled. On
 * Linux the driver sets its own timer slack to 1 ns (prctl
 * PR_SET_TIMERSLACK), so that its sleeps end on time rather than up to
 * 50 us late; the caller's threads and the workers keep theirs.
 *
 * Signals: the driver and the workers block every signal except the ones
 * a fault raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and
 * SIGPROF (so that a sampling profiler sees the callbacks), so a
 * process-directed signal (SIGINT, SIGTERM, SIGCHLD, SIGALRM, ...) is
 * delivered to one of your threads, never to ours, and callbacks run with
 * that mask (a callback that must take a signal unblocks it itself). The
 * calling thread's own mask is left as it was.
 *
 * fork(): the child of a process that holds a threaded timer has no
 * driver and no workers, and a lock may have been held at the fork. The
 * child must not call anything on that timer, tw_destroy included (it
 * would wait for threads that are not there); it may only abandon it, or
 * exec. A manual timer is plain memory: the child may go on using its
 * copy, as the parent does its own.
 *
 * With an injectable clock the driver sleeps for the clock distance to
 * the next deadline on CLOCK_MONOTONIC; tw_wake() makes it look now. With
 * nothing pending it sleeps until a schedule wakes it, whatever the
 * clock reads (at the end of time, UINT64_MAX, too).
 */

/* Stops a threaded timer: stops the driver and the workers (they take no
 * more work: a task already queued for a worker is handed back, not run),
 * waits for the callbacks already running (or starting) to finish, then
 * hands every task whose callback never ran to unfired(t, id, task_arg)
 * (NULL to drop them, at tw_drain's cost with each NULL; periodic tasks
 * once). Afterwards schedule returns
 * -ESHUTDOWN; tw_destroy still frees. Returns the number of tasks handed
 * back (INT_MAX if more), -EDEADLK from a callback of this timer, -EINVAL
 * (t NULL or a manual timer: use tw_drain), -EALREADY if already
 * stopped: a call made while another thread's stop is under way waits
 * for that stop to finish first (its callbacks done, its tasks handed
 * back); one made from a drain callback of this timer (that stop's own
 * unfired callbacks, say, which it would wait for) returns at once. */
TW_API int tw_stop(tw_timer *t, tw_fn unfired, void *arg);

/* Threaded: wakes the driver now and returns once it has dispatched
 * everything due at the clock's current time (with workers = 0 their
 * callbacks have run; with workers they are queued to them), but for a
 * shard a tw_drain holds meanwhile: the drain hands its tasks back, or
 * they fire when it ends (tw_drain). For an
 * injectable clock that jumps (tests) and for a clock the driver cannot
 * sleep on. Returns 0, -EINVAL (t NULL or manual), -EDEADLK from a callback
 * of this timer, -ESHUTDOWN once stopped, and also when tw_stop overtakes
 * the call (what was due is then handed back by tw_stop, not dispatched). */
TW_API int tw_wake(tw_timer *t);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_H */
