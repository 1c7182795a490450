/* test_alloc_fail.c: allocation failure at every allocation site in turn.
 *
 * A script of operations that between them reach every allocation site
 * (first slab, slab directory growth, every new wheel level and its
 * delay-queue room, periodic reservations, extra records, the key map,
 * long keys) runs once to count its allocations A, then A more times with
 * the N-th allocation failing. Each failing call must return -ENOMEM and
 * leave the timer exactly as it was (same pending count and next
 * deadline, tw_check clean);
 * retried, it must succeed; at the end every task that was not cancelled
 * fires exactly once, and destroy returns every block. The script runs on
 * a manual timer and again on a threaded one (whose schedule and cancel
 * take other paths, under the shard lock), and creation is failed at each
 * of its allocations in both modes. */
#include "helpers.h"

#include <stdatomic.h>

#define MANY 9000 /* > 8 slabs of 1024: the slab directory grows too */

struct script {
    tw_timer *t;
    int fired;
    int expected;
    tw_id ids[MANY + 64];
    int nids;
};

static int op(struct script *s, int k)
{
    tw_timer *t = s->t;
    tw_id id = 0;
    int rc;
    switch (k) {
    case 0: rc = tw_schedule(t, MS, count_fn, &s->fired, &id); break;
    case 1: rc = tw_schedule(t, 10 * SEC, count_fn, &s->fired, &id); break;
    case 2: rc = tw_schedule(t, 3 * 86400 * SEC, count_fn, &s->fired, &id); break;
    case 3: rc = tw_schedule_every(t, MS, 86400 * SEC, TW_FIXED_DELAY, count_fn, &s->fired, &id); break;
    case 4: rc = tw_schedule_keyed(t, "short", 5, 2 * MS, count_fn, &s->fired, &id); break;
    case 5: {
        char key[100];
        memset(key, 'k', sizeof key);
        rc = tw_schedule_keyed(t, key, sizeof key, 3 * MS, count_fn, &s->fired, &id);
        break;
    }
    /* levels, 64 slots of 1 ms: 3 days is level 4; the one-day period
     * reserves level 5; the replace needs 6 and the reschedule 7 (the top) */
    case 6: rc = tw_schedule_keyed(t, "short", 5, 5ull * 365 * 86400 * SEC, count_fn, &s->fired, &id); break; /* replace */
    case 7: rc = tw_reschedule(t, s->ids[0], 500ull * 365 * 86400 * SEC); break;
    default:
        if (k < 8 + 20) { /* 20 keys: the key map grows */
            char key[16];
            int len = snprintf(key, sizeof key, "key%d", k);
            rc = tw_schedule_keyed(t, key, (size_t)len, 5 * MS, count_fn, &s->fired, &id);
        } else {
            /* 1 ms at least: nothing is due at 0, where the threaded
             * timer's clock stays until the end, so its driver fires
             * nothing while the script runs and the counts the script
             * compares move only by its own calls (a task due at 0 once
             * fired between a failed call and the check of tw_pending) */
            rc = tw_schedule(t, (uint64_t)(k % 5000 + 1) * MS, count_fn, &s->fired, &id);
        }
        break;
    }
    if (!rc && id) {
        s->ids[s->nids++] = id;
        if (k != 3 && k != 6)
            s->expected++; /* the periodic one is cancelled; 6 replaces 4 */
    }
    return rc;
}

#define NOPS (8 + 20 + MANY)

/* The threaded timer's clock: the test moves it, the driver reads it. */
static _Atomic uint64_t thr_now;

static uint64_t thr_clock(void *ctx)
{
    (void)ctx;
    return atomic_load(&thr_now);
}

/* The counting allocator has no lock. It needs none: a threaded timer's
 * driver never allocates (tw_schedule reserves what a firing needs), and
 * it frees (a fired task's long key) only in the final tw_wake, while the
 * test thread waits for it. TSan checks that claim on this test. */
static long run(long fail_at, int threaded, long *allocs)
{
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.allocator = counting(&a);
    if (threaded) {
        atomic_store(&thr_now, 0);
        o.clock = thr_clock;
        o.threaded = 1;
        o.shards = 2; /* no workers: callbacks run on the driver, and
                          s.fired has one writer at a time */
    }
    static struct script s;
    memset(&s, 0, sizeof s);
    assert_int_equal(tw_create(&s.t, &o), 0);
    /* a fixed hash key: the shard each key lands on, and so the count of
     * allocations, must be the same in every run */
    static const unsigned char hkey[16] = "alloc_fail  key";
    assert_int_equal(tw_set_hash_key(s.t, hkey), 0);
    long base = a.allocs;
    a.fail_at = fail_at;
    for (int k = 0; k < NOPS; k++) {
        size_t before = tw_pending(s.t);
        uint64_t next = 0, next_after = 0;
        int has_next = tw_next_deadline(s.t, &next);
        int rc = op(&s, k);
        if (rc == -ENOMEM) {
            /* a driver's pass here, at the script's clock: it must find
             * nothing to do, and change nothing the checks look at */
            if (threaded)
                assert_int_equal(tw_wake(s.t), 0);
            assert_int_equal(tw_pending(s.t), before);
            /* nothing moved: a half-done replace or reschedule would */
            assert_int_equal(tw_next_deadline(s.t, &next_after), has_next);
            assert_true(next_after == next);
            assert_check(s.t);
            rc = op(&s, k); /* the failure was one-shot: must work now */
        }
        assert_int_equal(rc, 0);
    }
    *allocs = a.allocs - base;
    assert_check(s.t);
    /* the periodic task (ids[3]) is cancelled; all the others fire once */
    assert_int_equal(tw_cancel(s.t, s.ids[3]), 0);
    if (threaded) {
        atomic_store(&thr_now, UINT64_MAX); /* everything is due */
        assert_int_equal(tw_wake(s.t), 0); /* and fires in this pass */
        assert_int_equal(tw_stop(s.t, count_fn, &s.fired), 0);
    } else {
        assert_true(tw_advance(s.t, UINT64_MAX) >= 0);
    }
    assert_int_equal(s.fired, s.expected);
    assert_int_equal(tw_pending(s.t), 0);
    tw_destroy(s.t);
    assert_int_equal(a.live, 0);
    return a.failed;
}

static void every_allocation_fails_cleanly(int threaded)
{
    long allocs = 0;
    assert_int_equal(run(0, threaded, &allocs), 0);
    assert_true(allocs >= 15); /* the script does reach many sites */
    for (long n = 1; n <= allocs; n++) {
        long again;
        assert_int_equal(run(n, threaded, &again), 1); /* exactly that one failed */
    }
}

static void test_every_allocation_fails_cleanly(void **state)
{
    (void)state;
    every_allocation_fails_cleanly(0);
}

static void test_every_allocation_fails_cleanly_threaded(void **state)
{
    (void)state;
    every_allocation_fails_cleanly(1);
}

/* A periodic task's callback reschedules it far out, to a level not yet
 * made: the first time that allocation fails, and the task keeps its
 * period; the second time it succeeds. */
struct far {
    struct count_alloc *a;
    int calls;
    int rc[2];
};

static void resched_far_fn(tw_timer *t, tw_id id, void *arg)
{
    struct far *f = arg;
    f->a->fail_at = f->calls == 0; /* the next allocation fails, once */
    f->rc[f->calls++] = tw_reschedule(t, id, 500ull * 365 * 86400 * SEC);
    f->a->fail_at = 0;
}

static void test_periodic_reschedule_fails_cleanly(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.allocator = counting(&a);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct far f = { &a, 0, { 1, 1 } };
    tw_id id;
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, resched_far_fn, &f, &id), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(f.rc[0], -ENOMEM);
    assert_int_equal(a.failed, 1);
    assert_check(t);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 2 * MS); /* the period, as if never rescheduled */
    assert_int_equal(tw_advance(t, 2 * MS), 1);
    assert_int_equal(f.rc[1], 0);
    assert_int_equal(tw_advance(t, 1000 * SEC), 0); /* moved far out */
    assert_int_equal(tw_pending(t), 1);
    assert_check(t);
    assert_int_equal(tw_cancel(t, id), 0);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
}

/* A periodic task re-arms after each firing without allocating: whatever
 * level its next deadline needs was made when it was scheduled
 * (tw__wheel_reserve_period). One case: a wheel of W buckets (1 ms
 * ticks), a first delay and a period in ticks, fixed delay or rate; each
 * firing run half a tick late, with every allocation failing once the
 * task is scheduled: each firing must re-arm it. */
static void rearm_case(uint64_t W, uint64_t first, uint64_t p, int flags)
{
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, (uint32_t)W);
    o.allocator = counting(&a);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    int n = 0;
    tw_id id;
    assert_int_equal(tw_schedule_every(t, first * MS, p * MS,
                                       flags ? TW_FIXED_DELAY : TW_FIXED_RATE, count_fn, &n,
                                       &id),
                     0);
    a.fail_above = 1; /* from here on, every allocation fails */
    for (int k = 1; k <= 4; k++) {
        /* half a tick late: a fixed-delay task then re-arms at its
         * farthest, ceil(period) + 1 ticks past the current one */
        uint64_t d;
        assert_int_equal(tw_deadline(t, id, &d), 0);
        d = (d + MS - 1) / MS * MS; /* its tick */
        assert_int_equal(tw_advance(t, d - 1), 0);
        assert_int_equal(tw_advance(t, d + MS / 2), 1);
        assert_int_equal(n, k);
        assert_int_equal(tw_pending(t), 1);
        assert_check(t);
    }
    assert_int_equal(a.failed, 0); /* none was even tried */
    assert_int_equal(tw_cancel(t, id), 0);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
}

/* Tried at the boundaries where the level a period needs changes (about
 * W and W^2 ticks), from first delays that meet the wheel at different
 * alignments; and, on wheels of 2 and 4 buckets, every period up to 3W^2
 * ticks from every first delay below 2W^2: a reserve one level short
 * loses a fixed-delay task every 6 ticks, first due at 4, on a wheel of
 * 2, at its first re-arm, an alignment the boundary cases never meet. */
static void test_periodic_rearm_allocates_nothing(void **state)
{
    (void)state;
    const uint32_t sizes[] = { 2, 4, 8, 64 };
    for (size_t w = 0; w < sizeof sizes / sizeof sizes[0]; w++) {
        uint64_t W = sizes[w];
        const uint64_t bounds[] = { W, W * W };
        const uint64_t firsts[] = { 1, 2, W / 2, W - 1, W };
        for (int m = 0; m < 2; m++)
            for (uint64_t p = bounds[m] > 2 ? bounds[m] - 2 : 1; p <= bounds[m] + 1; p++)
                for (int f = 0; f < 5; f++)
                    for (int flags = 0; flags < 2; flags++)
                        rearm_case(W, firsts[f] ? firsts[f] : 1, p, flags);
    }
    for (uint64_t W = 2; W <= 4; W *= 2)
        for (uint64_t p = 1; p <= 3 * W * W; p++)
            for (uint64_t first = 1; first < 2 * W * W; first++)
                for (int flags = 0; flags < 2; flags++)
                    rearm_case(W, first, p, flags);
}

/* Creation fails at its n-th allocation for every n until it succeeds:
 * -ENOMEM each time, *out untouched, nothing leaked. Returns how many
 * allocations a successful creation made. */
static long create_fails_cleanly(struct tw_options o)
{
    for (long n = 1;; n++) {
        struct count_alloc a = { 0 };
        a.fail_at = n;
        o.allocator = counting(&a);
        tw_timer *t = NULL;
        int rc = tw_create(&t, &o);
        if (rc == 0) {
            assert_int_equal(a.failed, 0);
            tw_destroy(t);
            assert_int_equal(a.live, 0);
            return n - 1;
        }
        assert_int_equal(rc, -ENOMEM);
        assert_null(t);
        assert_int_equal(a.live, 0);
    }
}

/* tw_destroy with tasks still pending returns every block: plain tasks
 * go with the pool (destroy frees it whole when no task holds an extra
 * record), and keyed (long keys live in blocks of their own) and periodic
 * tasks are released one by one. Each shape is destroyed with the tasks
 * that hold memory pending, then after they have all gone, so that both of
 * destroy's ways are taken; the timer's own count of extra records is
 * checked by tw_check on the way. */
static void destroy_pending(int threaded, int extras_left)
{
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 8);
    o.allocator = counting(&a);
    if (threaded) {
        o.threaded = 1;
        o.shards = 2;
    }
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    for (int k = 0; k < 3000; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k % 500 + 1) * SEC, noop_fn, NULL, NULL), 0);
    char key[64];
    tw_id every[20];
    for (int k = 0; k < 20; k++) {
        memset(key, 'k', sizeof key);
        snprintf(key, sizeof key, "%d", k);
        /* longer than a record holds inline: the key has a block */
        assert_int_equal(tw_schedule_keyed(t, key, sizeof key, (uint64_t)(k + 1) * SEC,
                                           noop_fn, NULL, NULL), 0);
        assert_int_equal(tw_schedule_every(t, SEC, (uint64_t)(k + 1) * SEC, TW_FIXED_RATE,
                                           noop_fn, NULL, &every[k]), 0);
    }
    long with_extras = a.live;
    if (!extras_left) {
        for (int k = 0; k < 20; k++) {
            memset(key, 'k', sizeof key);
            snprintf(key, sizeof key, "%d", k);
            assert_int_equal(tw_cancel_keyed(t, key, sizeof key), 0);
            assert_int_equal(tw_cancel(t, every[k]), 0);
        }
        assert_true(a.live < with_extras); /* the long keys' blocks went */
    }
    assert_int_equal(tw_check(t, NULL), 0);
    assert_int_equal(tw_pending(t), extras_left ? 3040 : 3000);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
    assert_int_equal(a.bytes, 0);
}

static void test_destroy_returns_every_block(void **state)
{
    (void)state;
    destroy_pending(0, 1);
    destroy_pending(0, 0);
    destroy_pending(1, 1);
    destroy_pending(1, 0);
}

static void test_create_fails_cleanly(void **state)
{
    (void)state;
    struct tw_options o;
    tw_options_init(&o);
    long manual = create_fails_cleanly(o);
    assert_true(manual >= 2);
    /* threaded: the shards, the runtime, the workers' table and queue;
     * a failure after the shards are made must undo them */
    o.threaded = 1;
    o.shards = 4;
    assert_true(create_fails_cleanly(o) >= manual + 3);
    o.workers = 3;
    assert_true(create_fails_cleanly(o) >= manual + 5);
    /* a capacity: each engine's pool is grown to it, one more step that
     * can fail, and a failure before it must not be undone by it */
    tw_options_init(&o);
    o.capacity = 1000;
    assert_true(create_fails_cleanly(o) >= manual);
    o.threaded = 1;
    o.shards = 4;
    assert_true(create_fails_cleanly(o) >= manual + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_fails_cleanly),
        cmocka_unit_test(test_every_allocation_fails_cleanly),
        cmocka_unit_test(test_every_allocation_fails_cleanly_threaded),
        cmocka_unit_test(test_periodic_reschedule_fails_cleanly),
        cmocka_unit_test(test_periodic_rearm_allocates_nothing),
        cmocka_unit_test(test_destroy_returns_every_block),
    };
    return cmocka_run_group_tests_name("alloc_fail", tests, NULL, NULL);
}
