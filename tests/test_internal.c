/* test_internal.c: white-box tests of what the public API cannot reach in
 * a test's time, or at all. A slot's 32-bit generation wraps only after
 * 2^30 reuses of that slot; here the test sets a free slot's generation to
 * the last one before the wrap, then reuses the slot once through each way
 * a task can leave (the manual cancel fast path, firing, a keyed cancel,
 * the threaded cancel) and checks the header's promise: the slot is
 * retired, and no id is ever issued twice. A thread that cannot be started
 * (pthread_create failing: no memory for its stack, a thread limit) is
 * made to happen at each start in turn through the runtime's hook. The
 * delay queue is checked on its own against a sorted list, ids forged past
 * a full pool are refused unread, the key map deletes from a probe run
 * that wraps past its end, and a watch list whose doubling would wrap is
 * refused. Linked against the static library, so that it
 * can reach the pool, the queue and the hook. */
#include "helpers.h"

#include <sched.h>
#include <semaphore.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "twheel_purgatory.h"

#include "timer.h" /* struct tw_timer: the shards and their pools */
#include "extra.h" /* the key map */
#include "purgatory.h" /* the watch lists */

#define LAST_FREE_GEN 0xFFFFFFFCu /* next plain task: ...FD, then wrap */

static tw_timer *mk(struct fake_clock *c)
{
    struct tw_options o = manual_opts(c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    return t;
}

/* The slot that `id` named, now free, gets the last generation before the
 * wrap. It is its shard's spare (freed last, into an empty free list), so
 * the next schedule on that shard takes it. */
static uint32_t age_slot(tw_timer *t, tw_id id)
{
    uint32_t si = tw__id_shard(t, id), slot = tw__id_slot(t, id);
    struct tw__shard *sh = &t->shards[si];
    tw__shard_lock(t, sh);
    struct tw__pool *p = &sh->eng.pool;
    tw__engine_settle(&sh->eng); /* the cancel's unlink, deferred until now */
    assert_int_equal(p->spare, slot);
    assert_int_equal(p->entries[slot].gen & 3u, 0); /* free */
    p->entries[slot].gen = LAST_FREE_GEN;
    tw__shard_unlock(t, sh);
    return slot;
}

static uint64_t retired(tw_timer *t)
{
    struct tw_stats s;
    tw_stats(t, &s);
    return s.retired_slots;
}

/* After the wrap: the slot is never handed out again, and every id that
 * named it stays stale. */
static void assert_retired(tw_timer *t, uint32_t slot, const tw_id *old, int nold)
{
    for (int k = 0; k < nold; k++)
        assert_int_equal(tw_cancel(t, old[k]), -ENOENT);
    /* a made-up id with the wrapped generation (0) names nothing either */
    assert_int_equal(tw_cancel(t, tw__make_id(t, tw__id_shard(t, old[0]), slot, 0)), -ENOENT);
    for (int k = 0; k < 1000; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &id), 0);
        assert_int_not_equal(tw__id_slot(t, id), slot);
        for (int j = 0; j < nold; j++)
            assert_int_not_equal(id, old[j]);
    }
    assert_check(t);
}

/* Schedules and cancels a task (its id in *old), then ages its slot: the
 * next schedule on this thread's shard takes it at its last generation. */
static uint32_t aged_slot(tw_timer *t, tw_id *old)
{
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, old), 0);
    assert_int_equal(tw_cancel(t, *old), 0);
    return age_slot(t, *old);
}

/* A plain task due in 1 ms, calling fn, in an aged slot: ids[0] is the
 * slot's cancelled task, ids[1] the new one. Returns the slot. */
static uint32_t reuse(tw_timer *t, tw_fn fn, tw_id ids[2])
{
    uint32_t slot = aged_slot(t, &ids[0]);
    assert_int_equal(tw_schedule(t, MS, fn, NULL, &ids[1]), 0);
    assert_int_equal(tw__id_slot(t, ids[1]), slot);
    assert_int_equal(ids[1] >> 32, LAST_FREE_GEN + TW__GEN_PLAIN);
    assert_check(t);
    return slot;
}

static void test_wrap_on_cancel(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id ids[2];
    uint32_t slot = reuse(t, noop_fn, ids);
    assert_int_equal(retired(t), 0);
    assert_int_equal(tw_cancel(t, ids[1]), 0); /* the fast path */
    assert_int_equal(retired(t), 1);
    assert_retired(t, slot, ids, 2);
    tw_destroy(t);
}

/* A periodic task in a slot past 16 bits: the slot it fires from is
 * carried from collection to its re-arm (timer.h's job), so it must be
 * carried whole. 70,000 one-shot tasks an hour out, then a periodic one
 * (slots are handed out in order: its own is past 65,535), which fires
 * three times, re-armed in its own slot each time and no other, then is
 * cancelled; the 70,000 are untouched. */
static void test_periodic_past_16_bits(void **state)
{
    (void)state;
    enum { N = 70000 };
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id *ids = malloc(N * sizeof(*ids));
    assert_non_null(ids);
    int oneshot = 0, n = 0;
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, 3600 * SEC, count_fn, &oneshot, &ids[k]), 0);
    tw_id id;
    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_RATE, count_fn, &n, &id), 0);
    assert_true(tw__id_slot(t, id) >= 65536);
    for (int k = 1; k <= 3; k++) {
        assert_int_equal(tw_advance(t, (uint64_t)k * 10 * MS), 1);
        assert_int_equal(n, k);
        assert_check(t);
        uint64_t d;
        assert_int_equal(tw_deadline(t, id, &d), 0);
        assert_int_equal(d, (uint64_t)(k + 1) * 10 * MS);
    }
    assert_int_equal(tw_pending(t), N + 1);
    assert_int_equal(tw_cancel(t, id), 0);
    assert_int_equal(tw_advance(t, 100 * MS), 0);
    assert_int_equal(n, 3);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    assert_int_equal(oneshot, 0);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
    free(ids);
}

/* More slots retired than 16 bits count: 70,000 tasks scheduled and
 * cancelled, every slot then aged to its last generation, 70,000 more
 * scheduled into those slots and cancelled, each generation wrapping.
 * Every one is retired, counted, and never handed out again. */
static void test_retired_past_16_bits(void **state)
{
    (void)state;
    enum { N = 70000 };
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id *ids = malloc(N * sizeof(*ids));
    assert_non_null(ids);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[k]), 0);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    struct tw__shard *sh = &t->shards[0];
    struct tw__pool *p = &sh->eng.pool;
    tw__engine_settle(&sh->eng); /* the deferred unlinks */
    uint32_t used = p->used;
    assert_true(used >= N);
    for (uint32_t i = 0; i < used; i++) {
        assert_int_equal(p->entries[i].gen & 3u, 0); /* free */
        p->entries[i].gen = LAST_FREE_GEN;
    }
    for (int k = 0; k < N; k++) {
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[k]), 0);
        assert_true(tw__id_slot(t, ids[k]) < used);
        assert_int_equal(ids[k] >> 32, LAST_FREE_GEN + TW__GEN_PLAIN);
    }
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    assert_int_equal(retired(t), N);
    assert_check(t);
    for (int k = 0; k < 1000; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &id), 0);
        /* never a retired slot: a fresh one, or one aged and left free */
        assert_true(tw__id_slot(t, id) >= used || id >> 32 == LAST_FREE_GEN + TW__GEN_PLAIN);
    }
    assert_int_equal(retired(t), N);
    assert_check(t);
    tw_destroy(t);
    free(ids);
}

static int fired_count;
static void count_fired(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    (void)arg;
    fired_count++;
}

static void test_wrap_on_fire(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id ids[2];
    uint32_t slot = reuse(t, count_fired, ids);
    /* two more, so that the free list holds more than the spare when the
     * timer empties (the other in the magazine) */
    assert_int_equal(tw_schedule(t, MS, count_fired, NULL, NULL), 0);
    assert_int_equal(tw_schedule(t, MS, count_fired, NULL, NULL), 0);
    fired_count = 0;
    assert_int_equal(tw_advance(t, MS), 3);
    assert_int_equal(fired_count, 3);
    assert_int_equal(retired(t), 1);
    /* the timer is empty, but a pool with a retired slot never rewinds
     * (pool.h): the rewound slots would include it, at generation 0 */
    assert_int_equal(t->shards[0].eng.pool.free_head, TW__NIL);
    assert_int_equal(t->shards[0].eng.pool.nmag, 1);
    assert_retired(t, slot, ids, 2);
    tw_destroy(t);
}

/* A keyed task's entry has the other state bit (extra): its last
 * generation is ...FE, and the release path is the general one. */
static void test_wrap_on_keyed_cancel(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id ids[2];
    uint32_t slot = aged_slot(t, &ids[0]);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, noop_fn, NULL, &ids[1]), 0);
    assert_int_equal(tw__id_slot(t, ids[1]), slot);
    assert_int_equal(ids[1] >> 32, LAST_FREE_GEN + TW__GEN_EXTRA);
    assert_int_equal(tw_cancel_keyed(t, "k", 1), 0);
    assert_int_equal(retired(t), 1);
    assert_retired(t, slot, ids, 2);
    /* the key itself is free again */
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, noop_fn, NULL, NULL), 0);
    assert_check(t);
    tw_destroy(t);
}

/* A drain with no callback frees every slot in one pass (drop_all in
 * drain.c): a plain task at its slot's last generation retires the slot
 * there too, and a keyed one beside it goes as a cancel's would. */
static void test_wrap_on_drop(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id ids[2];
    uint32_t slot = reuse(t, noop_fn, ids);
    assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, NULL), 0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, SEC, noop_fn, NULL, NULL), 0);
    assert_int_equal(retired(t), 0);
    assert_int_equal(tw_drain(t, NULL, NULL), 3);
    assert_int_equal(retired(t), 1);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel_keyed(t, "k", 1), -ENOENT);
    assert_retired(t, slot, ids, 2);
    tw_destroy(t);
}

static uint64_t fixed_clock(void *ctx)
{
    (void)ctx;
    return 1000 * SEC;
}

/* A threaded timer of 4 shards on a clock that stands still. */
static tw_timer *mk_threaded4(void)
{
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    o.clock = fixed_clock;
    o.shards = 4;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    return t;
}

/* Threads take shards round-robin at their first schedule and keep them
 * (timer.c, pick_shard): so many schedulers rarely share a shard lock,
 * which is what W5's scaling rests on. Four threads, one after the other,
 * each new to every timer, land on four different shards of a 4-shard
 * timer, and each thread's later schedules stay on its shard, by
 * tw_schedule_at and tw_schedule_every as by tw_schedule. (A pick that
 * sent every thread to one shard broke nothing else: every suite passed
 * with it, and with either of those two calls always taking shard 0.) */
struct shard_probe {
    tw_timer *t;
    tw_id ids[3];
    int rc[3]; /* asserted on the test's thread, where cmocka can fail */
};

static void *probe_shard(void *arg)
{
    struct shard_probe *sp = arg;
    sp->rc[0] = tw_schedule(sp->t, 3600 * SEC, noop_fn, NULL, &sp->ids[0]);
    sp->rc[1] = tw_schedule_at(sp->t, 3600 * SEC, noop_fn, NULL, &sp->ids[1]);
    sp->rc[2] = tw_schedule_every(sp->t, 3600 * SEC, 3600 * SEC, TW_FIXED_RATE, noop_fn, NULL,
                                  &sp->ids[2]);
    return NULL;
}

static void test_threads_spread_over_shards(void **state)
{
    (void)state;
    tw_timer *t = mk_threaded4();
    struct shard_probe sp[4];
    unsigned seen = 0;
    for (int n = 0; n < 4; n++) {
        pthread_t th;
        sp[n].t = t;
        assert_int_equal(pthread_create(&th, NULL, probe_shard, &sp[n]), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        for (int k = 0; k < 3; k++)
            assert_int_equal(sp[n].rc[k], 0);
        uint32_t si = tw__id_shard(t, sp[n].ids[0]);
        for (int k = 1; k < 3; k++)
            assert_int_equal(tw__id_shard(t, sp[n].ids[k]), si);
        assert_false(seen & (1u << si)); /* a shard no thread before took */
        seen |= 1u << si;
    }
    assert_int_equal(seen, 0xfu);
    assert_int_equal(tw_pending(t), 12);
    assert_int_equal(tw_check(t, stderr), 0);
    tw_destroy(t);
}

/* A keyed task's shard comes from its key's hash, not from the thread:
 * 64 keys scheduled from one thread land on every one of the 4 shards
 * (the keys' hash is seeded at random, so which key goes where changes
 * from run to run; all four shards are missed by some key with a
 * chance of about 4 in 10^8). */
static void test_keys_spread_over_shards(void **state)
{
    (void)state;
    tw_timer *t = mk_threaded4();
    unsigned seen = 0;
    for (int k = 0; k < 64; k++) {
        char key[16];
        int len = snprintf(key, sizeof key, "key-%d", k);
        tw_id id;
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, 3600 * SEC, noop_fn, NULL, &id), 0);
        seen |= 1u << tw__id_shard(t, id);
    }
    assert_int_equal(seen, 0xfu);
    assert_int_equal(tw_pending(t), 64);
    assert_int_equal(tw_check(t, stderr), 0);
    tw_destroy(t);
}

/* tw_stats' `levels` is the most any shard has made: here a day-long task
 * on a shard other than the last one, whose own wheel stays at one level
 * (a tw_stats that took the last shard's count passed every other test).
 * Each probe thread first learns its shard from a 1 ms task; the first
 * one not on the last shard schedules the day-long task. */
struct level_probe {
    tw_timer *t;
    uint32_t si;
    int rc, far;
};

static void *probe_far(void *arg)
{
    struct level_probe *lp = arg;
    tw_id id;
    lp->rc = tw_schedule(lp->t, MS, noop_fn, NULL, &id);
    lp->si = tw__id_shard(lp->t, id);
    lp->far = !lp->rc && lp->si != lp->t->nshards - 1;
    if (lp->far)
        lp->rc = tw_schedule(lp->t, 24 * 3600 * SEC, noop_fn, NULL, NULL);
    return NULL;
}

static void test_stats_levels_of_all_shards(void **state)
{
    (void)state;
    tw_timer *t = mk_threaded4();
    struct level_probe lp = { t, 0, 0, 0 };
    for (int n = 0; n < 4 && !lp.far; n++) {
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, probe_far, &lp), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(lp.rc, 0);
    }
    assert_true(lp.far);
    uint32_t most = t->shards[lp.si].eng.nlevels, last = t->shards[t->nshards - 1].eng.nlevels;
    assert_true(most > last);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.levels, most);
    tw_destroy(t);
}

/* Threaded: the locked cancel path, on whichever shard this thread got. */
static void test_wrap_threaded(void **state)
{
    (void)state;
    tw_timer *t = mk_threaded4();
    tw_id ids[2];
    uint32_t slot = reuse(t, noop_fn, ids);
    assert_int_equal(tw__id_shard(t, ids[1]), tw__id_shard(t, ids[0]));
    assert_int_equal(tw_cancel(t, ids[1]), 0);
    assert_int_equal(retired(t), 1);
    assert_retired(t, slot, ids, 2);
    tw_destroy(t);
}

/* ---- a thread that cannot be started ---------------------------------- */

static int start_calls, start_fail_at;

static int failing_start(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                         void *arg)
{
    if (++start_calls == start_fail_at)
        return EAGAIN; /* what pthread_create says at a thread or memory limit */
    return pthread_create(th, attr, fn, arg);
}

/* The threads a failed create started are gone: joined, so at most the
 * kernel's last moment of their exit is left to wait for. */
static void assert_threads_back_to(int before)
{
    if (before < 0)
        return; /* no /proc */
    assert_int_equal(wait_threads_named("", before), before);
}

/* tw_create fails at each thread start in turn (each worker, then the
 * driver): it returns the error, leaves *out alone, frees every byte and
 * joins every thread it started. Then a purgatory whose timer cannot
 * start. Then, with the hook put back, the same create works. */
static void test_thread_start_fails(void **state)
{
    (void)state;
    /* the threads of the tests before (joined) may linger a moment in
     * /proc: counted then, they would leave "before" one too high */
    int before = wait_threads_named("", 1);
    for (uint32_t workers = 0; workers <= 3; workers++) {
        for (int k = 1; k <= (int)workers + 1; k++) {
            struct count_alloc a = { 0 };
            struct fake_clock c = { 5 * SEC };
            struct tw_options o;
            tw_options_init(&o);
            o.threaded = 1;
            o.workers = workers;
            o.clock = fake_clock_read;
            o.clock_ctx = &c;
            o.allocator = counting(&a);
            tw_timer *t = (tw_timer *)&a; /* must stay as it was */
            start_calls = 0;
            start_fail_at = k;
            tw__thread_create = failing_start;
            int rc = tw_create(&t, &o);
            tw__thread_create = pthread_create;
            assert_int_equal(rc, -EAGAIN);
            assert_int_equal(start_calls, k); /* nothing started after the failure */
            assert_ptr_equal(t, (tw_timer *)&a);
            assert_true(a.allocs > 0);
            assert_int_equal(a.live, 0);
            assert_int_equal(a.bytes, 0);
            assert_threads_back_to(before);
        }
    }

    /* The limits themselves, 1024 workers and 64 shards, are accepted:
     * the create gets as far as its first thread start (refused here, so
     * that no test starts a thousand threads) and undoes all it did. */
    {
        struct count_alloc a = { 0 };
        struct tw_options o;
        tw_options_init(&o);
        o.threaded = 1;
        o.workers = 1024;
        o.shards = 64;
        o.allocator = counting(&a);
        tw_timer *t = (tw_timer *)&a;
        start_calls = 0;
        start_fail_at = 1;
        tw__thread_create = failing_start;
        int rc = tw_create(&t, &o);
        tw__thread_create = pthread_create;
        assert_int_equal(rc, -EAGAIN); /* not -EINVAL */
        assert_int_equal(start_calls, 1);
        assert_ptr_equal(t, (tw_timer *)&a);
        assert_int_equal(a.live, 0);
        assert_int_equal(a.bytes, 0);
    }

    struct count_alloc a = { 0 };
    struct tw_purgatory_options po;
    tw_purgatory_options_init(&po);
    po.timer.workers = 2;
    po.timer.allocator = counting(&a);
    tw_purgatory *p = (tw_purgatory *)&a;
    start_calls = 0;
    start_fail_at = 3; /* the driver, after both workers */
    tw__thread_create = failing_start;
    int rc = tw_purgatory_create(&p, &po);
    tw__thread_create = pthread_create;
    assert_int_equal(rc, -EAGAIN);
    assert_ptr_equal(p, (tw_purgatory *)&a);
    assert_int_equal(a.live, 0);
    assert_threads_back_to(before);

    /* the hook put back: a timer starts and fires */
    struct atomic_clock c;
    tw_timer *t = mk_fake(&c, 0);
    assert_int_equal(count_threads_named(""), before < 0 ? -1 : before + 1);
    int fired = 0;
    assert_int_equal(tw_schedule(t, 0, count_fn, &fired, NULL), 0);
    atomic_fetch_add(&c.now, MS);
    assert_int_equal(tw_wake(t), 0);
    assert_int_equal(fired, 1);
    tw_destroy(t);
    assert_threads_back_to(before);
}

/* Default shards: four per CPU the creating thread may run on, in 4 ..
 * 64, a power of two. Pinned to one CPU, a timer gets 4, however many the
 * machine has. */
#ifdef __linux__
static uint32_t default_shards(void)
{
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    uint32_t n = t->nshards;
    tw_destroy(t);
    return n;
}
#endif

static void test_default_shards_follow_affinity(void **state)
{
    (void)state;
#ifdef __linux__
    cpu_set_t was, one;
    assert_int_equal(sched_getaffinity(0, sizeof was, &was), 0);
    uint32_t want = 1;
    while (want < 4u * (uint32_t)CPU_COUNT(&was))
        want <<= 1;
    want = want < 4 ? 4 : want > 64 ? 64 : want;
    assert_int_equal(default_shards(), want);
    int first = 0;
    while (!CPU_ISSET(first, &was))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    uint32_t pinned = default_shards();
    assert_int_equal(sched_setaffinity(0, sizeof was, &was), 0);
    assert_int_equal(pinned, 4);
#else
    skip();
#endif
}

/* The pool's slot limit (238,609,294 a shard, less with many shards: a
 * task id has room for no more; less on 32-bit targets), lowered here to 300: the pool doubles
 * from 256 up to it, clamped, and past it a schedule of any kind fails
 * with -ENOMEM, nothing changed; a slot given back is taken again. */
static void test_slot_limit(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    struct tw__pool *p = &t->shards[0].eng.pool;
    p->max_slots = 300;
    tw_id first = 0;
    int n = 0;
    for (int k = 0; k < 300; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k % 7 + 1) * MS, count_fn, &n,
                                     k ? NULL : &first), 0);
    assert_int_equal(p->cap, 300);
    struct tw_stats s0, s1;
    tw_stats(t, &s0);
    tw_id untouched = 42;
    assert_int_equal(tw_schedule(t, MS, count_fn, &n, &untouched), -ENOMEM);
    assert_int_equal(tw_schedule_at(t, MS, count_fn, &n, &untouched), -ENOMEM);
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, count_fn, &n, &untouched),
                     -ENOMEM);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, count_fn, &n, &untouched), -ENOMEM);
    assert_int_equal(untouched, 42);
    tw_stats(t, &s1);
    assert_int_equal(s1.pending, 300);
    assert_int_equal(s1.scheduled, s0.scheduled);
    assert_int_equal(s1.memory_bytes, s0.memory_bytes);
    assert_check(t);
    assert_int_equal(tw_cancel(t, first), 0);
    assert_int_equal(tw_schedule(t, MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 10 * MS), 300);
    assert_int_equal(n, 300);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
}

/* The deferred cancels (wheel.c, "Deferred unlink") at steady churn: the
 * ring fills and stays full, each cancel then freeing the slot of the one
 * TW__DEFER before it, which the next schedule takes; the pool holds at
 * most TW__DEFER slots more than the tasks pending. With the pending count
 * exactly the pool's capacity, too: settling there at each schedule would
 * keep a ring of one (an eager cancel by the slow path). At a slot limit
 * the ring gives its slots back instead (test_slot_limit). */
static void test_deferred_ring_fills(void **state)
{
    (void)state;
    for (uint32_t n = 1000; n <= 1024; n += 24) {
        struct fake_clock c;
        tw_timer *t = mk(&c);
        struct tw__engine *e = &t->shards[0].eng;
        tw_id ids[1024];
        for (uint32_t k = 0; k < n; k++)
            assert_int_equal(tw_schedule(t, (1 + k % 5000) * MS, noop_fn, NULL, &ids[k]), 0);
        uint32_t used = e->pool.used;
        for (uint32_t k = 0; k < 5 * n; k++) { /* cancel the oldest, add one */
            assert_int_equal(tw_cancel(t, ids[k % n]), 0);
            assert_int_equal(tw_schedule(t, (1 + k % 7000) * MS, noop_fn, NULL, &ids[k % n]), 0);
            if (k >= TW__DEFER)
                for (uint32_t j = 0; j < TW__DEFER; j++)
                    assert_int_not_equal(e->defer[j], TW__NIL);
        }
        assert_true(e->pool.used <= used + TW__DEFER);
        assert_int_equal(tw_pending(t), n);
        assert_check(t);
        tw_destroy(t);
    }
}

/* The general path of schedule (here every schedule: a max_pending makes
 * it count) settles the ring only when the pool is full (twheel.h: a
 * cancelled slot is reused 16 cancels later, or when the timer needs
 * it): with room in the pool, the cancels' unlinks keep waiting. */
static uint32_t deferred_count(const struct tw__engine *e)
{
    uint32_t n = 0;
    for (uint32_t j = 0; j < TW__DEFER; j++)
        n += e->defer[j] != TW__NIL;
    return n;
}

static void test_ring_kept_by_general_schedule(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.max_pending = 100;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__engine *e = &t->shards[0].eng;
    tw_id ids[10];
    for (int k = 0; k < 10; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k + 1) * MS, noop_fn, NULL, &ids[k]), 0);
    for (int k = 0; k < 3; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    assert_int_equal(deferred_count(e), 3);
    assert_true(e->pool.used < e->pool.cap); /* room: nothing needs the slots */
    assert_int_equal(tw_schedule(t, 20 * MS, noop_fn, NULL, NULL), 0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, 30 * MS, noop_fn, NULL, NULL), 0);
    assert_int_equal(deferred_count(e), 3);
    assert_int_equal(tw_pending(t), 9);
    assert_check(t);
    tw_destroy(t);
}

/* The free list (pool.h: a spare, a magazine, then blocks kept inside
 * free entries): for every count of slots freed, across the magazine's
 * end and block boundaries, the schedules that follow take exactly the
 * slots freed (the pool does not grow), in the order pool.h gives: with
 * slots f0, f1, ... freed in turn into an empty free list, f0 is the
 * spare, the next TW__MAG go to the magazine and the rest to blocks, so
 * the schedules take f0, then the magazine's from the last freed down to
 * f1, then the blocks' from the last freed down to f(TW__MAG + 1).
 * tw_check walks every state in between. Freed by cancel (their deferred
 * unlinks settled, oldest first) and by firing (in the order fired);
 * taken by plain schedules (timer.c, insert_fast) and by keyed ones
 * (the general path: tw__pool_pop). */
static uint32_t fired_slots[64], nfired_slots;

static void record_slot(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    fired_slots[nfired_slots++] = tw__id_slot(t, id);
}

static void test_free_list_blocks(void **state)
{
    (void)state;
    enum { N = 1 + TW__MAG + 3 * (TW__FREE_SLOTS + 1) + 2 };
    _Static_assert(N <= 64, "fired_slots holds them");
    for (int mode = 0; mode < 4; mode++) {
        int by_firing = mode & 1, keyed = mode >> 1;
        for (uint32_t k = 0; k <= N; k++) {
            struct fake_clock c;
            struct tw_options o = manual_opts(&c, 0, MS, 64);
            tw_timer *t;
            assert_int_equal(tw_create(&t, &o), 0);
            struct tw__pool *p = &t->shards[0].eng.pool;
            tw_id ids[N];
            for (uint32_t j = 0; j < N; j++) /* the first k fire at 1 ms */
                assert_int_equal(tw_schedule(t, (j < k ? 1 : 10) * MS, record_slot, NULL,
                                             &ids[j]),
                                 0);
            uint32_t used = p->used;
            uint32_t f[N]; /* the slots in the order freed */
            nfired_slots = 0;
            if (by_firing) {
                assert_int_equal(tw_advance(t, MS), (int)k);
                assert_int_equal(nfired_slots, k);
                memcpy(f, fired_slots, k * sizeof(f[0]));
            } else {
                for (uint32_t j = 0; j < k; j++) {
                    assert_int_equal(tw_cancel(t, ids[j]), 0);
                    assert_check(t);
                    f[j] = tw__id_slot(t, ids[j]);
                }
                /* the unlinks deferred (wheel.c) done, oldest first: the
                 * free list as the cancels would have left it at once */
                tw__engine_settle(&t->shards[0].eng);
            }
            /* all fired: the timer is empty and rewinds (below), so the
             * slots are taken in address order */
            int rewound = by_firing && k == N;
            assert_int_equal(p->free_head == TW__REWOUND, rewound);
            uint32_t inmag = k > 1 ? (k - 1 < TW__MAG ? k - 1 : TW__MAG) : 0;
            assert_int_equal(p->nmag, rewound ? 0 : inmag);
            assert_check(t);
            for (uint32_t j = 0; j < k; j++) {
                tw_id id;
                if (keyed)
                    assert_int_equal(tw_schedule_keyed(t, &j, sizeof j, SEC, noop_fn, NULL, &id),
                                     0);
                else
                    assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &id), 0);
                uint32_t want = rewound  ? j
                                : j == 0 ? f[0]
                                : j <= inmag ? f[inmag + 1 - j]
                                             : f[k - 1 - (j - 1 - inmag)];
                assert_int_equal(tw__id_slot(t, id), want);
                assert_check(t);
            }
            assert_int_equal(p->used, used);
            assert_int_equal(p->spare, TW__NIL);
            assert_int_equal(p->nmag, 0);
            assert_int_equal(p->free_head, TW__NIL);
            tw_id id; /* the free list empty: the next slot is a new one */
            assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &id), 0);
            assert_int_equal(tw__id_slot(t, id), used);
            tw_destroy(t);
        }
    }
}

/* The rewind (pool.h): once a timer is empty, an advance forgets the free
 * list's order, and the schedules that follow take slots 0, 1, 2, ...;
 * slots freed after the rewind are taken before the rewound ones, the
 * pool does not grow until all are taken, and no id issued before the
 * rewind names a task after it. tw_check walks every state in between. */
static void test_free_list_rewinds(void **state)
{
    (void)state;
    enum { N = 200, HALF = N / 2 };
    struct fake_clock c;
    tw_timer *t = mk(&c);
    struct tw__pool *p = &t->shards[0].eng.pool;
    tw_id old[N], ids[N + 1]; /* ids[slot]: the task in that slot */
    uint32_t seed = 12345;
    for (int j = 0; j < N; j++) { /* scattered deadlines: a scattered free list */
        seed = seed * 1103515245u + 12345u;
        assert_int_equal(tw_schedule(t, (1 + (seed >> 8) % 1000) * MS, noop_fn, NULL, &old[j]),
                         0);
    }
    uint32_t used = p->used;
    int part = tw_advance(t, 500 * MS);
    assert_true(part > 0 && part < N);
    assert_int_not_equal(p->free_head, TW__REWOUND); /* not empty: no rewind */
    assert_check(t);
    assert_int_equal(tw_advance(t, 1001 * MS), N - part);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(p->free_head, TW__REWOUND);
    assert_int_equal(p->spare, TW__NIL);
    assert_int_equal(p->nmag, 0);
    assert_int_equal(p->rewound, 0);
    assert_check(t);

    for (uint32_t j = 0; j < HALF; j++) {
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[j]), 0);
        assert_int_equal(tw__id_slot(t, ids[j]), j); /* in address order */
        if (j % 16 == 0)
            assert_check(t);
    }
    /* freed after the rewind: taken first (the spare, then the block,
     * last in first out), then the rewound slots go on where they were */
    assert_int_equal(tw_cancel(t, ids[10]), 0);
    assert_int_equal(tw_cancel(t, ids[20]), 0);
    assert_int_equal(tw_cancel(t, ids[30]), 0);
    assert_check(t);
    tw__engine_settle(&t->shards[0].eng); /* their deferred unlinks */
    assert_check(t);
    const uint32_t order[] = { 10, 30, 20, HALF };
    for (int k = 0; k < 4; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &id), 0);
        assert_int_equal(tw__id_slot(t, id), order[k]);
        ids[order[k]] = id;
        assert_check(t);
    }
    /* the ids of before stay stale, though their slots hold tasks again */
    for (int j = 0; j < N; j++)
        assert_int_equal(tw_cancel(t, old[j]), -ENOENT);
    assert_int_equal(tw_pending(t), HALF + 1);
    /* the rest of the rewound slots, then a fresh one */
    assert_int_equal(used, N); /* one slot a task, none reused before */
    for (uint32_t j = HALF + 1; j < used; j++) {
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[j]), 0);
        assert_int_equal(tw__id_slot(t, ids[j]), j);
    }
    assert_int_equal(p->free_head, TW__NIL);
    assert_int_equal(p->used, used);
    assert_check(t);
    assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[used]), 0);
    assert_int_equal(tw__id_slot(t, ids[used]), used);

    /* emptied by cancels: the next advance rewinds, even to the same time */
    for (uint32_t j = 0; j <= used; j++)
        assert_int_equal(tw_cancel(t, ids[j]), 0);
    assert_int_equal(tw_pending(t), 0);
    assert_int_not_equal(p->free_head, TW__REWOUND);
    assert_check(t);
    assert_int_equal(tw_advance(t, 1001 * MS), 0);
    assert_int_equal(p->free_head, TW__REWOUND);
    assert_check(t);
    tw_destroy(t);
}

/* A timer of one task at a time: when it empties, its only free slot is
 * the spare, and it stays the spare (the fast path's), not rewound. With
 * two, the second is in the magazine, and the timer rewinds. */
static void test_rewind_not_for_the_spare(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    struct tw__pool *p = &t->shards[0].eng.pool;
    tw_id a, b;
    for (uint64_t k = 1; k <= 3; k++) {
        assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &a), 0);
        assert_int_equal(tw__id_slot(t, a), 0);
        assert_int_equal(tw_advance(t, k * MS), 1);
        assert_int_equal(p->spare, 0);
        assert_int_equal(p->free_head, TW__NIL);
        assert_check(t);
    }
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &a), 0);
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &b), 0);
    assert_int_equal(tw_advance(t, 5 * MS), 2);
    assert_int_equal(p->free_head, TW__REWOUND);
    assert_int_equal(p->spare, TW__NIL);
    assert_int_equal(p->nmag, 0);
    assert_check(t);
    tw_destroy(t);
}

/* A periodic task cancelled from its own callback holds its slot until the
 * callback returns: the advance rewinds after that, not before, and the
 * slot is among the rewound ones. */
static void cancel_self(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    struct tw__pool *p = &t->shards[0].eng.pool;
    assert_int_not_equal(p->free_head, TW__REWOUND);
    assert_int_equal(tw_cancel(t, id), 0);
    assert_int_equal(tw_pending(t), 0);
}

static void test_rewind_after_periodic(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    struct tw__pool *p = &t->shards[0].eng.pool;
    tw_id id, a;
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &a), 0);
    assert_int_equal(tw_schedule_every(t, 2 * MS, MS, TW_FIXED_RATE, cancel_self, NULL, &id), 0);
    assert_int_equal(tw_advance(t, MS), 1); /* the periodic one still pending */
    assert_int_not_equal(p->free_head, TW__REWOUND);
    assert_int_equal(tw_advance(t, 2 * MS), 1);
    assert_int_equal(p->free_head, TW__REWOUND);
    assert_check(t);
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &a), 0);
    assert_int_equal(tw__id_slot(t, a), 0);
    assert_int_not_equal(a, id);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    assert_check(t);
    tw_destroy(t);
}

/* A callback that cancels the last tasks pending empties the timer with
 * their unlinks deferred (wheel.c, "Deferred unlink"): they must be
 * settled before the advance rewinds, or the rewound slots would be handed
 * out while still in their lists, and a later unlink would take a new task
 * out of its bucket. (Two places settle them: the advance's last take,
 * which finds the expired list empty, and the rewind itself; the
 * mutation check's removal of either alone changes nothing.) Four tasks
 * scheduled after it take the rewound slots and all fire. */
static tw_id far_ids[2];

static void cancel_far(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_cancel(t, far_ids[k]), 0);
}

static void test_rewind_after_cancels_in_callback(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    struct tw__pool *p = &t->shards[0].eng.pool;
    /* due now: they wait on the expired list, and the advance takes no
     * bucket (a bucket taken would settle the ring as the cascade spreads) */
    assert_int_equal(tw_schedule(t, 0, cancel_far, NULL, NULL), 0);
    assert_int_equal(tw_schedule(t, 0, noop_fn, NULL, NULL), 0);
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_schedule(t, 3600 * SEC, noop_fn, NULL, &far_ids[k]), 0);
    assert_int_equal(tw_advance(t, 0), 2);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(p->free_head, TW__REWOUND);
    assert_check(t);
    int fired = 0;
    for (uint32_t k = 0; k < 4; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, MS, count_fn, &fired, &id), 0);
        assert_int_equal(tw__id_slot(t, id), k); /* the rewound slots */
        assert_check(t);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_cancel(t, far_ids[k]), -ENOENT);
    assert_int_equal(tw_advance(t, 2 * MS), 4);
    assert_int_equal(fired, 4);
    assert_check(t);
    tw_destroy(t);
}

/* Threaded, with a worker: a periodic task cancelled from its callback
 * holds its slot until the callback returns, and the driver, which has
 * handed the job over and found nothing more due, must not rewind over it
 * (taken). Once the callback has returned and another task has fired, the
 * driver rewinds. */
struct held {
    sem_t running, go;
    _Atomic int cancelled;
};

static void cancel_self_and_wait(tw_timer *t, tw_id id, void *arg)
{
    struct held *h = arg;
    atomic_store(&h->cancelled, tw_cancel(t, id) == 0 ? 1 : -1);
    sem_post(&h->running);
    while (sem_wait(&h->go) && errno == EINTR)
        ;
}

/* Shard si's pool as it is, read under its lock (the driver changes it). */
static struct tw__pool shard_pool(tw_timer *t, uint32_t si)
{
    struct tw__shard *sh = &t->shards[si];
    tw__shard_lock(t, sh);
    struct tw__pool p = sh->eng.pool;
    tw__shard_unlock(t, sh);
    return p;
}

static uint32_t shard_taken(tw_timer *t, uint32_t si)
{
    struct tw__shard *sh = &t->shards[si];
    tw__shard_lock(t, sh);
    uint32_t n = sh->eng.taken;
    tw__shard_unlock(t, sh);
    return n;
}

static void test_rewind_threaded_waits_for_periodic(void **state)
{
    (void)state;
    struct atomic_clock c;
    tw_timer *t = mk_fake(&c, 1);
    struct held h;
    assert_int_equal(sem_init(&h.running, 0, 0), 0);
    assert_int_equal(sem_init(&h.go, 0, 0), 0);
    atomic_init(&h.cancelled, 0);
    /* two plain tasks fire with it, so that the free list holds more
     * than the spare (a spare alone is never rewound) */
    tw_id id, plain[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &plain[k]), 0);
    assert_int_equal(
        tw_schedule_every(t, MS, MS, TW_FIXED_DELAY, cancel_self_and_wait, &h, &id), 0);
    uint32_t si = tw__id_shard(t, id);
    for (int k = 0; k < 2; k++) /* the same thread, the same shard */
        assert_int_equal(tw__id_shard(t, plain[k]), si);
    atomic_fetch_add(&c.now, MS);
    assert_int_equal(tw_wake(t), 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    assert_int_equal(sem_timedwait(&h.running, &ts), 0);
    assert_int_equal(atomic_load(&h.cancelled), 1);
    assert_int_equal(tw_pending(t), 0);
    /* the driver looks again (each wake passes over every shard) and
     * finds nothing due and nothing pending, and the plain tasks' slots
     * free (released as they were taken), one of them in the magazine:
     * it must not rewind, the periodic task's slot is still held */
    for (int k = 0; k < 5; k++) {
        assert_int_equal(tw_wake(t), 0);
        assert_int_equal(shard_pool(t, si).free_head, TW__NIL); /* as it was */
        assert_int_equal(shard_pool(t, si).nmag, 1);
        assert_check(t);
    }
    sem_post(&h.go);
    /* the callback returns and its job finishes: the slot is put */
    for (int k = 0; shard_taken(t, si) && k < 10000; k++)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    assert_int_equal(shard_taken(t, si), 0);
    assert_check(t);
    /* one more firing on that shard; the driver rewinds after it */
    tw_id next;
    assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &next), 0);
    assert_int_equal(tw__id_shard(t, next), si); /* the same thread, the same shard */
    atomic_fetch_add(&c.now, MS);
    assert_int_equal(tw_wake(t), 0);
    int k = 0;
    while (shard_pool(t, si).free_head != TW__REWOUND && k++ < 10000)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    assert_int_equal(shard_pool(t, si).free_head, TW__REWOUND);
    assert_check(t);
    tw_destroy(t);
    sem_destroy(&h.running);
    sem_destroy(&h.go);
}

/* Threaded, emptied by cancels: the driver's next pass takes nothing and
 * rewinds (dispatch_shard, once no batch is left), as a manual advance
 * does. The tasks are an hour out, so that once a tw_wake has answered
 * their schedules the driver sleeps until the test wakes it again. */
static void test_rewind_threaded_after_cancels(void **state)
{
    (void)state;
    enum { N = 40 }; /* more than the deferred ring holds: some unlinked */
    struct atomic_clock c;
    tw_timer *t = mk_fake(&c, 0);
    tw_id ids[N];
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, 3600 * SEC + (uint64_t)k * MS, noop_fn, NULL, &ids[k]),
                         0);
    uint32_t si = tw__id_shard(t, ids[0]);
    for (int k = 1; k < N; k++) /* the same thread, the same shard */
        assert_int_equal(tw__id_shard(t, ids[k]), si);
    assert_int_equal(tw_wake(t), 0); /* the schedules' kicks answered */
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    assert_int_equal(tw_pending(t), 0);
    assert_true(shard_pool(t, si).free_head != TW__REWOUND); /* no pass since */
    assert_check(t);
    assert_int_equal(tw_wake(t), 0); /* a pass: nothing due, nothing pending */
    assert_int_equal(shard_pool(t, si).free_head, TW__REWOUND);
    assert_check(t);
    for (uint32_t j = 0; j < 4; j++) { /* slots 0, 1, 2, ... again */
        tw_id id;
        assert_int_equal(tw_schedule(t, 3600 * SEC, noop_fn, NULL, &id), 0);
        assert_int_equal(tw__id_shard(t, id), si);
        assert_int_equal(tw__id_slot(t, id), j);
    }
    assert_check(t);
    tw_destroy(t);
}

struct at_call {
    tw_timer *t;
    uint64_t at;
    tw_id id;
    int rc;
};

static void *schedule_at_thread(void *arg)
{
    struct at_call *a = arg;
    a->rc = tw_schedule_at(a->t, a->at, noop_fn, NULL, &a->id);
    return NULL;
}

/* tw_schedule_at from a new thread, which takes the next shard in turn
 * (pick_shard), and that shard. */
static uint32_t schedule_at_elsewhere(tw_timer *t, uint64_t at)
{
    struct at_call a = { t, at, 0, -1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_at_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(a.rc, 0);
    return tw__id_shard(t, a.id);
}

/* A schedule wakes the driver only for a deadline before the one it sleeps
 * until: a shard that had no bucket gets one an hour after the driver's
 * plan, and the driver sleeps on (tw__runtime_kick compares the whole
 * deadline: on this clock, past 2^32 ns, one cut to 32 bits would look
 * earlier). A deadline before the plan, in that shard, does wake it.
 * tw_schedule_at reads no clock: every read here is the driver's. */
static void test_kick_only_earlier(void **state)
{
    (void)state;
    struct atomic_clock c;
    uint64_t now = fake_start();
    tw_timer *t = mk_fake_sharded(&c, 0, now, 2);
    tw_id first;
    assert_int_equal(tw_schedule_at(t, now + 3600 * SEC, noop_fn, NULL, &first), 0);
    uint32_t si = tw__id_shard(t, first);
    assert_int_equal(tw_wake(t), 0); /* planned: the driver sleeps for an hour */
    assert_driver_asleep(&c);
    uint64_t r0 = atomic_load(&c.reads);
    int n = 1; /* threads take shards in turn: two in a row differ */
    while (schedule_at_elsewhere(t, now + 7200 * SEC) == si && n < 4)
        n++;
    assert_true(n < 4);
    usleep(50000);
    assert_int_equal(atomic_load(&c.reads), r0); /* no pass since the plan */
    /* earlier than the plan, in the other shard: the driver looks again */
    while (schedule_at_elsewhere(t, now + 600 * SEC) == si)
        n++;
    int waited = 0;
    while (atomic_load(&c.reads) == r0 && waited++ < 5000)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    assert_true(atomic_load(&c.reads) > r0);
    assert_int_equal(tw_pending(t), (uint64_t)n + 2);
    assert_check(t);
    tw_destroy(t);
}

/* Populating the pool ahead of use (pool.h). */

/* Whether every page of [from, to) is resident (mincore). */
static int resident(uintptr_t from, uintptr_t to)
{
    uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE);
    from &= ~(psz - 1);
    size_t pages = (to - from + psz - 1) / psz;
    unsigned char *vec = malloc(pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)from, to - from, vec), 0);
    int all = 1;
    for (size_t k = 0; k < pages; k++)
        all &= vec[k] & 1;
    free(vec);
    return all;
}

/* Whether this kernel has MADV_POPULATE_WRITE (5.14 and later). */
static int can_populate(void)
{
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    int ok = madvise(m, len, MADV_POPULATE_WRITE) == 0;
    munmap(m, len);
    return ok;
}

/* tw__pool_populate on pools built by hand over a 1 MiB mapping of our
 * own (no transparent huge pages): one chunk a call, from the
 * first page boundary at or after slot fault_at, resident and no more;
 * fault_at on the slot that straddles or starts at the chunk's end, and
 * the next call going on from there; the last, short chunk reaches cap;
 * a call that fails (the mapping read-only) leaves fault_at at cap, so
 * that the fast path takes fresh slots again and they fault in one by
 * one. */
static void test_populate_chunks(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    if (!can_populate())
        skip();
    size_t len = (size_t)1 << 20, sz = sizeof(struct tw__entry);
    uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE), mask = ~(psz - 1);
    struct tw__pool p = { 0 };
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    /* no huge page, even where the kernel merges this mapping with a
     * neighbour (THP "always"): the test counts 4 KiB pages */
    assert_int_equal(madvise(m, len, MADV_NOHUGEPAGE), 0);
    uintptr_t base = (uintptr_t)m + 2 * sz; /* as if two entries of heads */
    p.entries = (struct tw__entry *)base;
    p.cap = (uint32_t)((len - 2 * sz) / sz);
    uintptr_t end = base + (uintptr_t)p.cap * sz, first = (base + psz - 1) & mask;
    uint32_t calls = 0;
    while (p.fault_at < p.cap) {
        uint32_t was = p.fault_at;
        p.used = was; /* the fresh slot that reached fault_at */
        tw__pool_populate(&p);
        calls++;
        assert_true(p.fault_at > was && p.fault_at <= p.cap);
        uintptr_t from = (base + (uintptr_t)was * sz + psz - 1) & mask;
        if (p.fault_at == p.cap) {
            assert_true(resident(from, end));
            break;
        }
        /* the slot at fault_at straddles or starts at the chunk's end */
        uintptr_t to = (base + (uintptr_t)p.fault_at * sz + psz - 1) & mask;
        assert_true(to - from == TW__POPULATE);
        assert_true(resident(from, to));
        assert_false(resident(to, to + 1));
    }
    assert_int_equal(calls, (end - first + TW__POPULATE - 1) / TW__POPULATE);
    assert_int_equal(p.fault_at, p.cap);
    assert_false(resident((uintptr_t)m, (uintptr_t)m + 1)); /* before `first` */
    /* read-only: the call fails, and nothing is populated */
    assert_int_equal(munmap(m, len), 0);
    m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    p.entries = (struct tw__entry *)m;
    p.used = p.fault_at = 0;
    tw__pool_populate(&p);
    assert_int_equal(p.fault_at, p.cap);
    assert_false(resident((uintptr_t)m, (uintptr_t)m + 1));
    munmap(m, len);
}

/* Through the timer: 30,000 schedules grow the pool into a block it maps
 * itself (1 MiB and up, mem.h), and from then on the slots ahead of the
 * high-water mark are resident before any schedule writes them, a chunk
 * at a time. Below that size (malloc's block), and with a user's
 * allocator, nothing is populated: fault_at stays at cap. tw_check holds
 * the bounds at every step. */
static void test_pool_populates_ahead(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    int can = can_populate();
    for (int user = 0; user < 2; user++) {
        struct count_alloc a = { 0 };
        struct fake_clock c;
        struct tw_options o = manual_opts(&c, 0, MS, 64);
        if (user)
            o.allocator = counting(&a);
        tw_timer *t;
        assert_int_equal(tw_create(&t, &o), 0);
        struct tw__pool *p = &t->shards[0].eng.pool;
        uint32_t chunks = 0;
        for (uint32_t j = 0; j < 30000; j++) {
            uint32_t was = p->fault_at;
            assert_int_equal(tw_schedule(t, SEC + j * MS, noop_fn, NULL, NULL), 0);
            assert_true(p->used <= p->fault_at && p->fault_at <= p->cap);
            size_t block = ((size_t)p->front + p->cap) * sizeof(struct tw__entry);
            if (user || block < TW__MAP_MIN || !can) {
                assert_int_equal(p->fault_at, p->cap);
            } else if (p->fault_at != was && p->fault_at < p->cap) {
                chunks++;
                uintptr_t e0 = (uintptr_t)p->entries;
                assert_true(resident(e0 + (uintptr_t)p->used * sizeof(struct tw__entry),
                                     e0 + (uintptr_t)p->fault_at * sizeof(struct tw__entry)));
            }
            if (j % 4096 == 0)
                assert_check(t);
        }
        /* 16,384 -> 30,000 fresh slots in a 32,768-slot mapped block */
        if (can && !user)
            assert_true(chunks >= 3);
        assert_check(t);
        tw_destroy(t);
    }
}

/* Whether any byte of [p, p + len) is mapped, as /proc/self/maps says
 * (a probe by syscall on an unmapped range is an error to valgrind). */
static int mapped(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    uintptr_t from = (uintptr_t)p, to = from + len;
    unsigned long lo, hi;
    char line[512];
    int any = 0;
    while (!any && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            any = lo < to && from < hi;
    fclose(f);
    return any;
}

/* Whether the mapping holding p asks for huge pages (VmFlags "hg");
 * -1 where the kernel cannot say (no smaps, or no THP at all). */
static int huge_advised(const void *p)
{
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK))
        return -1;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    unsigned long lo, hi;
    char line[512];
    int in = 0, hg = -1;
    while (hg < 0 && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo <= (uintptr_t)p && (uintptr_t)p < hi;
        else if (in && !strncmp(line, "VmFlags:", 8))
            hg = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return hg;
}

/* A mapping of the test's own, to show that huge-page advice stays
 * within the block it was meant for: a call with its address and length
 * swapped advised (from the length taken as an address, for as long as
 * the address) every mapping from there up to about the block, the
 * block's included. So it is placed below `above`, the block (the kernel
 * fills holes, so a plain mapping may land above a block made earlier):
 * a free 4 MiB within 1 GiB under it, tried 16 MiB at a time. Read-only,
 * so that the kernel does not merge it with a block's mapping. */
static void *foreign_map_below(const void *above)
{
    uintptr_t top = ((uintptr_t)above & ~(uintptr_t)(TW__HUGE - 1));
    for (uintptr_t k = 1; k <= 64; k++) {
        void *want = (void *)(top - k * (16u << 20));
        void *f = mmap(want, 4u << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
        if (f == want)
            return f;
        if (f != MAP_FAILED) /* a kernel before 4.17 takes it for a hint */
            munmap(f, 4u << 20);
    }
    fail_msg("no free 4 MiB within 1 GiB below %p", above);
    return NULL;
}

/* valgrind (3.19) emulates mremap itself. Since reservations are 2 MiB
 * aligned, the move below goes (under it) into a reservation that starts
 * where the old one ended, and memcheck then holds the grown part of the
 * block unaddressable, though the kernel maps it: natively and under ASan
 * the same steps pass, every byte checked. */
static int under_valgrind(void)
{
    const char *pre = getenv("LD_PRELOAD");
    return pre && strstr(pre, "vgpreload");
}

/* A reserved block (mem.h) grows in place within its reservation, with
 * its bytes where they were; past it, it moves (nothing copied) into a
 * new reservation and the old one is let go whole; asked for no more than
 * its size, it has none and moves by mremap. tw_stats' figure (m.bytes)
 * follows the sizes exactly, and freeing returns every byte and every
 * page of address space. */
static void test_reserved_block_growth(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    const size_t mb = (size_t)1 << 20;
    struct tw__mem m;
    assert_int_equal(tw__mem_init(&m, NULL), 0);
    size_t res;
    unsigned char *p = tw__alloc_res(&m, 2 * mb, 8 * mb, &res);
    assert_non_null(p);
    assert_true(res >= 8 * mb);
    assert_int_equal(m.bytes, 2 * mb);
    /* on a huge page boundary, so that whole huge pages fit; asking for
     * them only when told to, and then over the whole reservation */
    assert_int_equal((uintptr_t)p % TW__HUGE, 0);
    assert_int_not_equal(huge_advised(p), 1);
    void *other = foreign_map_below(p);
    tw__advise_huge(p, res);
    assert_int_not_equal(huge_advised(p), 0);
    assert_int_not_equal(huge_advised(p + 7 * mb), 0); /* the rest, too */
    assert_int_not_equal(huge_advised(other), 1);      /* and nothing else */
    munmap(other, 4u << 20);
    memset(p, 0xab, 2 * mb);

    unsigned char *q = tw__realloc_res(&m, p, 2 * mb, 6 * mb, 2 * mb, 8 * mb, &res);
    assert_ptr_equal(q, p); /* in place */
    assert_int_equal(m.bytes, 6 * mb);
    assert_int_equal(q[0], 0xab);
    assert_int_equal(q[2 * mb - 1], 0xab);
    assert_int_equal(q[6 * mb - 1], 0); /* the new part: fresh, writable */
    q[6 * mb - 1] = 7;
    if (under_valgrind()) { /* the moves below: see under_valgrind() */
        tw__free_res(&m, q, 6 * mb, res);
        assert_int_equal(m.bytes, 0);
        return;
    }

    unsigned char *r = tw__realloc_res(&m, q, 6 * mb, 12 * mb, 6 * mb, 24 * mb, &res);
    assert_non_null(r);
    assert_true(r != q); /* past the reservation: moved */
    assert_true(res >= 24 * mb);
    assert_int_equal(m.bytes, 12 * mb);
    assert_int_equal((uintptr_t)r % TW__HUGE, 0);
    assert_int_not_equal(huge_advised(r), 0); /* the advice moved with it */
    assert_int_not_equal(huge_advised(r + 20 * mb), 1); /* the rest: new */
    assert_int_equal(r[0], 0xab);
    assert_int_equal(r[6 * mb - 1], 7);
    assert_false(mapped(q, 8 * mb)); /* the old reservation went whole */
    r[12 * mb - 1] = 9;

    unsigned char *s = tw__realloc_res(&m, r, 12 * mb, 30 * mb, 12 * mb, 30 * mb, &res);
    assert_non_null(s);
    assert_int_equal(res, 0); /* asked for no room: none */
    assert_int_equal(s[0], 0xab);
    assert_int_equal(s[12 * mb - 1], 9);
    assert_false(mapped(r + 12 * mb, 12 * mb));
    tw__free_res(&m, s, 30 * mb, res);
    assert_int_equal(m.bytes, 0);
    assert_false(mapped(s, 30 * mb));
}

/* gcov keeps a process's counts in memory and writes them at exit(),
 * which _exit() skips: a child that ends so writes them first in a
 * coverage build (tests/meson.build defines TW_TEST_GCOV there; gcc's
 * libgcov has __gcov_dump), so that what it tests counts in CI's
 * coverage figure. */
#ifdef TW_TEST_GCOV
extern void __gcov_dump(void);
#endif

static _Noreturn void child_exit(int code)
{
#ifdef TW_TEST_GCOV
    __gcov_dump();
#endif
    _exit(code);
}

/* Where address space is short (RLIMIT_AS, in a child so that the limit
 * stays there), the reservation is refused and the block is mapped at its
 * size and grows by mremap, as if none had been asked for. */
static void test_reservation_refused(void **state)
{
    (void)state;
    const size_t mb = (size_t)1 << 20;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the space in use now, and 64 MiB more: a 1 GiB reservation
         * cannot fit */
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long pages = 0;
        if (!f || fscanf(f, "%lu", &pages) != 1)
            child_exit(2);
        fclose(f);
        struct rlimit rl;
        getrlimit(RLIMIT_AS, &rl);
        rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + 64 * mb;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
            child_exit(0); /* a tighter limit already: nothing to show */
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_AS, &rl))
            child_exit(3);
        struct tw__mem m;
        tw__mem_init(&m, NULL);
        size_t res = 1;
        unsigned char *p = tw__alloc_res(&m, 2 * mb, (size_t)1 << 30, &res);
        if (!p || res != 0 || m.bytes != 2 * mb)
            child_exit(4);
        p[2 * mb - 1] = 5;
        unsigned char *q = tw__realloc_res(&m, p, 2 * mb, 4 * mb, 2 * mb, (size_t)1 << 30, &res);
        if (!q || res != 0 || q[2 * mb - 1] != 5 || m.bytes != 4 * mb)
            child_exit(5);
        q[4 * mb - 1] = 1;
        tw__free_res(&m, q, 4 * mb, res);
        child_exit(m.bytes == 0 ? 0 : 6);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Through the timer: once the pool is mapped (1 MiB and up) it sits in a
 * reservation of at least 1 GiB on a 64-bit target, and grows from
 * 32,768 slots to 262,144 without moving: every task's entry stays where
 * it was written. A 32-bit target reserves nothing (its address space is
 * scarce): the pool moves by mremap as it grows. With huge_pages, past
 * its first 2 MiB it asks for huge pages; without (the default), never. */
static void pool_grows_in_place(int huge)
{
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.huge_pages = huge;
    const int before = huge ? 0 : TW__HUGE_NEVER; /* the state until asked */
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__pool *p = &t->shards[0].eng.pool;
    const struct tw__entry *at = NULL;
    uint32_t grew = 0, cap = 0;
    int fired = 0;
    void *other = NULL;
    for (uint32_t j = 0; j < 200000; j++) {
        assert_int_equal(tw_schedule(t, SEC + (j % 5000) * MS, count_fn, &fired, NULL), 0);
        size_t block = ((size_t)p->front + p->cap) * sizeof(struct tw__entry);
        if (block < TW__MAP_MIN)
            continue;
        /* no huge page is asked for until populating reaches past the
         * first 2 MiB: a pool that stays small stays at 4 KiB pages */
        if (((size_t)p->front + p->used) * sizeof(struct tw__entry) + TW__POPULATE + 4096 <=
            TW__HUGE)
            assert_int_equal(p->huge, before);
        if (sizeof(void *) >= 8) {
            assert_true(p->reserved >= ((size_t)1 << 30));
            if (!at) {
                at = p->entries;
                /* mapped below the reservation, before the advice */
                assert_int_equal(p->huge, before);
                other = foreign_map_below(at);
            }
            assert_ptr_equal(p->entries, at);
        } else {
            assert_int_equal(p->reserved, 0); /* none on a 32-bit target */
        }
        if (cap && p->cap != cap)
            assert_int_equal(p->cap, 2 * cap); /* a full pool doubles (twheel.h) */
        grew += p->cap != cap;
        cap = p->cap;
    }
    assert_true(grew >= 3); /* 32,768 -> 65,536 -> 131,072 -> 262,144 */
    assert_int_equal(cap, 262144);
    if (sizeof(void *) >= 8 && huge) {
        /* past its first 2 MiB, the pool asked for huge pages, over its
         * whole reservation (pool.c) */
        assert_int_equal(p->huge, 1);
        assert_int_not_equal(huge_advised(p->entries), 0);
        assert_int_not_equal(huge_advised((char *)p->entries + p->reserved - TW__HUGE), 0);
        assert_int_not_equal(huge_advised(other), 1); /* its own pages only */
    } else if (sizeof(void *) >= 8) {
        /* 9 MB of slots, and not one huge page asked for */
        assert_int_equal(p->huge, TW__HUGE_NEVER);
        assert_int_not_equal(huge_advised(p->entries), 1);
        assert_int_not_equal(huge_advised((char *)p->entries + (8u << 20)), 1);
        assert_int_not_equal(huge_advised((char *)p->entries + p->reserved - TW__HUGE), 1);
    }
    if (other)
        munmap(other, 4u << 20);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * SEC), 200000);
    assert_int_equal(fired, 200000);
    tw_destroy(t);
}

static void test_pool_grows_in_place(void **state)
{
    (void)state;
    pool_grows_in_place(0);
}

static void test_pool_grows_in_place_huge(void **state)
{
    (void)state;
    pool_grows_in_place(1);
}

/* huge_pages with a user's allocator: the pool is the allocator's
 * memory, in no reservation of ours, and no advice is given over it
 * (twheel.h), however far it grows. */
static void test_huge_pages_user_allocator(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.huge_pages = 1;
    o.allocator = counting(&a);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    const struct tw__pool *p = &t->shards[0].eng.pool;
    for (uint32_t j = 0; j < 100000; j++) /* 3.6 MB of slots */
        assert_int_equal(tw_schedule(t, SEC + (j % 5000) * MS, noop_fn, NULL, NULL), 0);
    assert_true((size_t)p->cap * sizeof(struct tw__entry) > 2 * TW__HUGE);
    assert_int_equal(p->reserved, 0);
    assert_int_equal(p->huge, 0); /* never asked */
    assert_int_not_equal(huge_advised(p->entries), 1);
    assert_check(t);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
}

/* A pool with a cap on its slots (a threaded shard's share of the id
 * space, pool.h's max_slots) reserves no more address space than the cap
 * could ever use (pool.c, reservation()): here 50,000 slots, about 1.8 MB,
 * not the 1 GiB an uncapped pool reserves. On a 64-bit target it reserves
 * all of that, and so, once mapped, grows to the cap in place. It grows
 * to the cap and no further: the 50,001st task is refused, and nothing
 * else changes. */
static void test_capped_pool_reserves_to_its_cap(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    const uint32_t capslots = 50000;
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__pool *p = &t->shards[0].eng.pool;
    p->max_slots = capslots; /* before the first task: nothing is placed */
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    int fired = 0, mapped_seen = 0;
    const struct tw__entry *at = NULL;
    for (uint32_t j = 0; j < capslots; j++) {
        assert_int_equal(tw_schedule(t, SEC + (j % 5000) * MS, count_fn, &fired, NULL), 0);
        size_t most = ((size_t)p->front + capslots) * sizeof(struct tw__entry);
        assert_true(p->reserved <= ((most + ps - 1) & ~(ps - 1)));
        assert_true(p->cap <= capslots);
        if (((size_t)p->front + p->cap) * sizeof(struct tw__entry) < TW__MAP_MIN)
            continue;
        mapped_seen = 1;
        if (sizeof(void *) >= 8) { /* the whole of it, so never a move */
            assert_int_equal(p->reserved, (most + ps - 1) & ~(ps - 1));
            if (!at)
                at = p->entries;
            assert_ptr_equal(p->entries, at);
        }
    }
    assert_true(mapped_seen); /* the checks above saw mapped blocks */
    assert_int_equal(p->cap, capslots);
    tw_id id = 12345;
    assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, &id), -ENOMEM);
    assert_int_equal(id, 12345); /* untouched */
    assert_int_equal(tw_pending(t), capslots);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * SEC), (int)capslots);
    assert_int_equal(fired, (int)capslots);
    tw_destroy(t);
}

/* A pool grown big (1 MiB and up) holds room for every level's heads, so
 * that the levels a far deadline makes later do not move it: before,
 * each new level copied the whole pool (its heads sit before slot 0),
 * under the shard's lock in threaded mode. A small pool still grows its
 * front level by level. */
static void test_new_level_leaves_big_pool(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__engine *e = &t->shards[0].eng;
    struct tw__pool *p = &e->pool;
    int fired = 0;
    assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, NULL), 0);
    assert_true(p->front < p->front_max); /* small: as levels need */
    for (uint32_t j = 1; j < 60000; j++) /* 2.2 MB: past TW__MAP_MIN */
        assert_int_equal(tw_schedule(t, SEC + (j % 50) * MS, count_fn, &fired, NULL), 0);
    assert_int_equal(p->front, p->front_max);
    uint32_t levels = e->nlevels;
    const struct tw__entry *at = p->entries;
    /* a day out: new levels, and their heads, in the room kept for them */
    assert_int_equal(tw_schedule(t, 86400 * SEC, count_fn, &fired, NULL), 0);
    assert_true(e->nlevels > levels);
    assert_ptr_equal(p->entries, at);
    assert_check(t);
    assert_int_equal(tw_advance(t, 2 * SEC), 60000);
    assert_int_equal(tw_advance(t, 86400 * SEC), 1);
    assert_int_equal(fired, 60001);
    assert_check(t);
    tw_destroy(t);
}

/* A threaded shard's pool never asks for huge pages: it is populated
 * under the lock its driver fires under, and a huge page comes in one
 * lump of up to milliseconds (pool.c). Its block is mapped in a
 * reservation all the same, and grows in place. */
static void test_threaded_pool_stays_small_paged(void **state)
{
    (void)state;
#ifndef __linux__
    skip(); /* elsewhere the pool is plain allocator memory (mem.c) */
#endif
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    o.shards = 1;
    o.capacity = 120000; /* 4.3 MB: mapped */
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    const struct tw__pool *p = &t->shards[0].eng.pool;
    /* the first makes the levels an hour needs: their heads move the
     * pool once (pool.h); after that it stays */
    assert_int_equal(tw_schedule(t, 3600 * SEC, noop_fn, NULL, NULL), 0);
    const struct tw__entry *at = p->entries;
    for (uint32_t j = 1; j < 110000; j++) /* past 2 MiB of fresh slots */
        assert_int_equal(tw_schedule(t, 3600 * SEC, noop_fn, NULL, NULL), 0);
    assert_int_equal(p->huge, TW__HUGE_NEVER);
    assert_ptr_equal(p->entries, at);
    if (sizeof(void *) >= 8)
        assert_true(p->reserved >= ((size_t)1 << 30));
    assert_int_not_equal(huge_advised(p->entries), 1);
    assert_int_not_equal(huge_advised((const char *)p->entries + (4 << 20)), 1);
    assert_check(t);
    tw_destroy(t);
}

/* Ids forged to name the slots just past those ever handed out, with a
 * live task's generation: each call that takes an id answers -ENOENT and
 * reads no entry past them. The pool is full to its last slot, so under
 * ASan a read one entry past it is caught. */
static void test_ids_past_the_pool(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.capacity = 100;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__pool *p = &t->shards[0].eng.pool;
    tw_id last = 0;
    while (p->used < p->cap || p->spare != TW__NIL || p->free_head != TW__NIL)
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &last), 0);
    uint32_t gen = (uint32_t)(last >> 32), cap = p->cap;
    assert_int_equal(tw__id_slot(t, last), cap - 1); /* the last slot */
    uint64_t d = 7;
    for (uint32_t slot = cap; slot < cap + 3; slot++) {
        tw_id forged = tw__make_id(t, 0, slot, gen);
        assert_int_equal(tw_cancel(t, forged), -ENOENT);
        assert_int_equal(tw_reschedule(t, forged, MS), -ENOENT);
        assert_int_equal(tw_deadline(t, forged, &d), -ENOENT);
    }
    assert_int_equal(d, 7);
    assert_int_equal(p->cap, cap);
    assert_int_equal(tw_pending(t), cap);
    assert_check(t);
    tw_destroy(t);
}

/* The key map's backward-shift deletion where a probe run wraps past the
 * table's end: with keys A (home: the last slot) and D, E (home: slot 0)
 * placed A, D, E, removing A must leave D where it is (its home lies in
 * the run before it, cyclically) and E too, so that both are still found. */
static void test_keymap_wrapped_run(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c);
    /* the first keyed task makes a 16-slot map; find keys for each home */
    const uint32_t cap = 16;
    char keys[3][8]; /* A, D, E */
    int a = 0, de = 0;
    for (unsigned k = 0; k < 100000 && (a < 1 || de < 2); k++) {
        char buf[8];
        snprintf(buf, sizeof buf, "k%u", k);
        uint32_t home = (uint32_t)tw__key_hash(&t->hkey, buf, strlen(buf)) & (cap - 1);
        if (home == cap - 1 && a < 1)
            memcpy(keys[a++], buf, sizeof buf);
        else if (home == 0 && de < 2)
            memcpy(keys[1 + de++], buf, sizeof buf);
    }
    assert_true(a == 1 && de == 2);
    for (int k = 0; k < 3; k++) /* A, then D, E */
        assert_int_equal(
            tw_schedule_keyed(t, keys[k], strlen(keys[k]), SEC, noop_fn, NULL, NULL), 0);
    const struct tw__keymap *m = &t->shards[0].eng.keys;
    assert_int_equal(m->cap, cap);
    assert_non_null(m->slots[cap - 1]); /* A */
    assert_non_null(m->slots[0]);       /* D */
    assert_non_null(m->slots[1]);       /* E */
    assert_int_equal(tw_cancel_keyed(t, keys[0], strlen(keys[0])), 0);
    assert_null(m->slots[cap - 1]);
    assert_check(t);
    assert_int_equal(tw_cancel_keyed(t, keys[1], strlen(keys[1])), 0);
    assert_int_equal(tw_cancel_keyed(t, keys[2], strlen(keys[2])), 0);
    assert_int_equal(tw_pending(t), 0);
    tw_destroy(t);
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The delay queue against a sorted list: buckets pushed in a shuffled
 * order with few distinct expirations (ties everywhere), some removed from
 * the middle through their position records, then popped: they must leave
 * in (expiration, bucket number) order, whatever order they came in, and
 * every position record must name the bucket's place all along. */
static void test_delay_queue_order(void **state)
{
    (void)state;
    enum { N = 300 };
    struct tw__mem m;
    assert_int_equal(tw__mem_init(&m, NULL), 0);
    uint64_t x = 0x9e3779b97f4a7c15ull; /* a fixed shuffle */
    for (int round = 0; round < 20; round++) {
        struct tw__dq q = { 0 };
        assert_int_equal(tw__dq_reserve(&q, &m, N), 0);
        static uint32_t pos[N], order[N];
        static uint64_t exp[N];
        for (uint32_t b = 0; b < N; b++) {
            exp[b] = xorshift(&x) % 5; /* 60 buckets per expiration */
            order[b] = b;
        }
        for (uint32_t b = N - 1; b > 0; b--) { /* Fisher-Yates */
            uint32_t j = (uint32_t)(xorshift(&x) % (b + 1)), tmp = order[b];
            order[b] = order[j];
            order[j] = tmp;
        }
        for (uint32_t k = 0; k < N; k++)
            tw__dq_push(&q, exp[order[k]], order[k], &pos[order[k]]);
        int gone[N] = { 0 };
        for (uint32_t k = 0; k < N / 3; k++) { /* a third leave by position */
            uint32_t b = order[(k * 7) % N];
            if (gone[b])
                continue;
            tw__dq_remove(&q, pos[b]);
            assert_int_equal(pos[b], TW__NOT_QUEUED);
            gone[b] = 1;
        }
        uint64_t last_exp = 0;
        uint32_t last_bn = 0, popped = 0;
        while (q.n) {
            for (uint32_t b = 0; b < N; b++)
                if (!gone[b])
                    assert_int_equal(q.h[pos[b]].bn, b);
            const struct tw__dq_node *top = tw__dq_min(&q);
            if (popped) /* strictly after the last: (exp, bn) order */
                assert_true(top->exp > last_exp || (top->exp == last_exp && top->bn > last_bn));
            last_exp = top->exp;
            last_bn = top->bn;
            gone[last_bn] = 1;
            tw__dq_remove(&q, 0);
            assert_int_equal(pos[last_bn], TW__NOT_QUEUED);
            popped++;
        }
        for (uint32_t b = 0; b < N; b++)
            assert_true(gone[b]);
        tw__dq_destroy(&q, &m);
    }
}

/* Tasks due in the same tick fire in the order the walk meets them: the
 * bucket's TW__SUBS lists (slot i in list i % TW__SUBS), each FIFO, taken
 * round-robin, an entry of each in turn, so that their misses overlap
 * (wheel.h; the README's "Order"). 20 tasks in one tick, three of them
 * cancelled so that the lists are uneven: the order is rebuilt from the
 * slots their ids name. A walk that drained each list before the next
 * (its `continue` after a due task made `break`) fired the same tasks in
 * another order, and its misses one after another. */
static struct {
    tw_id id[32];
    int n;
} fired_order;

static void note_order_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)arg;
    if (fired_order.n < 32)
        fired_order.id[fired_order.n++] = id;
}

static void test_bucket_walked_round_robin(void **state)
{
    (void)state;
    enum { N = 20 };
    struct fake_clock c;
    tw_timer *t = mk(&c);
    tw_id ids[N];
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, MS, note_order_fn, NULL, &ids[k]), 0);
    for (int k = 1; k <= 3; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    /* each list's live tasks as scheduled, then one of each list in turn */
    tw_id list[TW__SUBS][N], want[N];
    int len[TW__SUBS] = { 0 }, most = 0, n = 0;
    for (int k = 0; k < N; k++) {
        if (k >= 1 && k <= 3)
            continue;
        assert_int_equal(tw__id_shard(t, ids[k]), 0); /* one bucket */
        uint32_t j = tw__id_slot(t, ids[k]) % TW__SUBS;
        list[j][len[j]++] = ids[k];
        most = len[j] > most ? len[j] : most;
    }
    for (int r = 0; r < most; r++)
        for (uint32_t j = 0; j < TW__SUBS; j++)
            if (r < len[j])
                want[n++] = list[j][r];
    assert_int_equal(n, N - 3);
    /* uneven lists: the walk's order is neither the schedule's nor list by list */
    assert_true(most >= 2 && want[1] != ids[4] && want[1] != list[0][1]);
    fired_order.n = 0;
    assert_int_equal(tw_advance(t, MS), N - 3);
    assert_int_equal(fired_order.n, N - 3);
    for (int k = 0; k < n; k++)
        assert_int_equal(fired_order.id[k], want[k]);
    assert_check(t);
    tw_destroy(t);
}

static bool never(tw_op *op)
{
    (void)op;
    return false;
}

static void op_noop(tw_op *op)
{
    (void)op;
}

/* A purgatory watch list whose doubling would wrap its 32-bit count, or on
 * a 32-bit target the size of its array, is refused as -ENOMEM, not grown
 * to a wrapped size. No test can fill 2^31 entries, so the list's count
 * and capacity are set by hand (the array behind them stays the real,
 * small one, and nothing reads past it). (A shard's key table has the same
 * guard; it cannot be faked so, since a lookup reads the table at the
 * capacity it claims.) */
static void test_watch_list_cannot_wrap(void **state)
{
    (void)state;
    static const struct tw_op_ops ops = { never, op_noop, NULL };
    struct fake_clock c;
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer = manual_opts(&c, 0, MS, 64);
    o.shards = 1;
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    tw_op *a, *b;
    assert_int_equal(tw_op_create(p, &ops, NULL, SEC, &a), 0);
    assert_int_equal(tw_op_create(p, &ops, NULL, SEC, &b), 0);
    struct tw_key k = { "k", 1 };
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, a, &k, 1), 0);
    struct tw__wshard *s = &p->shards[0];
    struct tw__watcher *w = NULL;
    for (uint32_t i = 0; i < s->cap && !w; i++)
        w = s->table[i];
    if (!w) { /* (cmocka's asserts do not return, but the analyzer does not know) */
        fail_msg("the key's watch list is not in its shard");
        return;
    }
    assert_int_equal(w->n, 1);
    const uint32_t n = w->n, cap = w->cap;
    uint32_t huge[2] = { 1u << 31, 1u << 29 };
    for (int i = 0; i < (SIZE_MAX == UINT32_MAX ? 2 : 1); i++) {
        w->n = w->cap = huge[i];
        assert_int_equal(tw_purgatory_try_complete_else_watch(p, b, &k, 1), -ENOMEM);
        assert_int_equal(w->n, huge[i]); /* untouched */
        assert_int_equal(w->cap, huge[i]);
        w->n = n;
        w->cap = cap;
        assert_int_equal(tw_purgatory_watched(p), 1); /* b is in no list */
        assert_int_equal(tw_purgatory_delayed(p), 1);
    }
    /* restored: b watches normally */
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, b, &k, 1), 0);
    assert_int_equal(tw_purgatory_watched(p), 2);
    tw_op_release(a);
    tw_op_release(b);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A timer's key map whose doubling would wrap its 32-bit capacity (2^31
 * slots, half of them full) is refused as -ENOMEM, the map unchanged.
 * Through the API a lookup would read the table at the capacity claimed,
 * so tw__keymap_reserve is called on its own, with the count and capacity
 * set by hand over the real, small table (which it must not touch). */
static void test_key_map_cannot_wrap(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, SEC, noop_fn, NULL, NULL), 0);
    struct tw__keymap *m = &t->shards[0].eng.keys;
    const struct tw__keymap real = *m;
    size_t bytes = t->shards[0].mem.bytes;
    m->cap = 1u << 31;
    m->n = 1u << 30;
    assert_int_equal(tw__keymap_reserve(&t->shards[0].eng), -ENOMEM);
    assert_ptr_equal(m->slots, real.slots);
    assert_int_equal(m->cap, 1u << 31);
    assert_int_equal(m->n, 1u << 30);
    assert_int_equal(t->shards[0].mem.bytes, bytes); /* nothing allocated */
    *m = real;
    assert_int_equal(tw__keymap_reserve(&t->shards[0].eng), 0); /* room as it was */
    assert_int_equal(tw_cancel_keyed(t, "k", 1), 0);
    assert_check(t);
    tw_destroy(t);
}

/* Every block a timer allocates is freed with the size it was allocated
 * with: each memory account (a shard's, the timer's own) holds 0 bytes
 * when tw_destroy or a failed tw_create lets it go (tw__mem_released,
 * timer.h). The user's allocator never sees a size at free, so a wrong
 * one shows nowhere else: it would skew tw_stats' memory_bytes, and on a
 * mapped block unmap the wrong length. Everything that holds memory is
 * made: the pool past its capacity, levels days out, the delay queue, the
 * key map, periodic records; manual and threaded; and every allocation of
 * a threaded create refused in turn. */
static unsigned released, released_unbalanced;

static void on_released(const struct tw__mem *m)
{
    released++;
    if (m->bytes) {
        released_unbalanced++;
        print_message("an account let go holding %llu bytes\n", (unsigned long long)m->bytes);
    }
}

static void fill_everything(tw_timer *t, int *n)
{
    char key[16];
    for (uint64_t k = 0; k < 3000; k++) /* 1 ms to ~35 days: six levels */
        assert_int_equal(tw_schedule(t, (1 + k * k * 337) * MS, count_fn, n, NULL), 0);
    for (int k = 0; k < 200; k++) {
        int len = snprintf(key, sizeof key, "key-%d", k);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, (1 + (uint64_t)k) * SEC,
                                           count_fn, n, NULL), 0);
    }
    for (int k = 0; k < 200; k += 2) {
        int len = snprintf(key, sizeof key, "key-%d", k);
        assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), 0);
    }
    for (int k = 0; k < 10; k++)
        assert_int_equal(tw_schedule_every(t, MS, (1 + (uint64_t)k) * 10 * MS, TW_FIXED_RATE,
                                           count_fn, n, NULL), 0);
}

static void test_every_byte_accounted_at_destroy(void **state)
{
    (void)state;
    tw__mem_released = on_released;

    /* manual: filled, advanced a day (fired, cascaded, re-armed), freed
     * with keyed and periodic tasks still pending */
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.capacity = 1000;
    tw_timer *t;
    int n = 0;
    released = released_unbalanced = 0;
    assert_int_equal(tw_create(&t, &o), 0);
    fill_everything(t, &n);
    c.now = 86400 * SEC;
    assert_true(tw_advance(t, c.now) > 0);
    assert_true(n > 0);
    assert_check(t);
    tw_destroy(t);
    assert_int_equal(released, 2); /* the shard's account, then the timer's */
    assert_int_equal(released_unbalanced, 0);

    /* threaded, four shards, workers: filled and freed */
    struct atomic_clock ac;
    atomic_store(&ac.now, 0);
    atomic_store(&ac.reads, 0);
    tw_options_init(&o);
    o.threaded = 1;
    o.shards = 4;
    o.workers = 2;
    o.clock = atomic_clock_read;
    o.clock_ctx = &ac;
    released = 0;
    assert_int_equal(tw_create(&t, &o), 0);
    n = 0;
    fill_everything(t, &n);
    tw_destroy(t);
    assert_int_equal(released, 5);
    assert_int_equal(released_unbalanced, 0);

    /* a threaded create with a capacity, each allocation refused in turn:
     * the accounts it made are let go balanced too */
    unsigned failed = 0;
    for (unsigned k = 1;; k++) {
        struct count_alloc a = { 0 };
        a.fail_at = k;
        o.allocator = counting(&a);
        o.capacity = 5000;
        released = 0;
        t = NULL;
        int rc = tw_create(&t, &o);
        if (rc == 0) {
            tw_destroy(t);
            assert_int_equal(released, 5);
            break;
        }
        assert_int_equal(rc, -ENOMEM);
        assert_true(released >= (k > 1)); /* the first is the timer itself */
        assert_int_equal(a.live, 0);
        failed++;
    }
    assert_true(failed >= 6);
    assert_int_equal(released_unbalanced, 0);
    tw__mem_released = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrap_on_cancel),
        cmocka_unit_test(test_retired_past_16_bits),
        cmocka_unit_test(test_periodic_past_16_bits),
        cmocka_unit_test(test_wrap_on_fire),
        cmocka_unit_test(test_wrap_on_keyed_cancel),
        cmocka_unit_test(test_wrap_on_drop),
        cmocka_unit_test(test_wrap_threaded),
        cmocka_unit_test(test_threads_spread_over_shards),
        cmocka_unit_test(test_keys_spread_over_shards),
        cmocka_unit_test(test_stats_levels_of_all_shards),
        cmocka_unit_test(test_thread_start_fails),
        cmocka_unit_test(test_default_shards_follow_affinity),
        cmocka_unit_test(test_delay_queue_order),
        cmocka_unit_test(test_bucket_walked_round_robin),
        cmocka_unit_test(test_ids_past_the_pool),
        cmocka_unit_test(test_free_list_blocks),
        cmocka_unit_test(test_free_list_rewinds),
        cmocka_unit_test(test_rewind_not_for_the_spare),
        cmocka_unit_test(test_rewind_after_periodic),
        cmocka_unit_test(test_rewind_after_cancels_in_callback),
        cmocka_unit_test(test_rewind_threaded_waits_for_periodic),
        cmocka_unit_test(test_rewind_threaded_after_cancels),
        cmocka_unit_test(test_kick_only_earlier),
        cmocka_unit_test(test_populate_chunks),
        cmocka_unit_test(test_pool_populates_ahead),
        cmocka_unit_test(test_reserved_block_growth),
        cmocka_unit_test(test_reservation_refused),
        cmocka_unit_test(test_pool_grows_in_place),
        cmocka_unit_test(test_pool_grows_in_place_huge),
        cmocka_unit_test(test_huge_pages_user_allocator),
        cmocka_unit_test(test_capped_pool_reserves_to_its_cap),
        cmocka_unit_test(test_threaded_pool_stays_small_paged),
        cmocka_unit_test(test_new_level_leaves_big_pool),
        cmocka_unit_test(test_slot_limit),
        cmocka_unit_test(test_deferred_ring_fills),
        cmocka_unit_test(test_ring_kept_by_general_schedule),
        cmocka_unit_test(test_keymap_wrapped_run),
        cmocka_unit_test(test_watch_list_cannot_wrap),
        cmocka_unit_test(test_key_map_cannot_wrap),
        cmocka_unit_test(test_every_byte_accounted_at_destroy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
