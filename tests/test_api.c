/* test_api.c: every public function and every error path, manual mode. */
#include "helpers.h"

/* Each recorded task gets a slot whose first word points at the recorder. */
struct tag {
    struct recorder *r;
    int n;
};

static tw_timer *mk(struct fake_clock *c, uint64_t start, uint64_t tick, uint32_t w)
{
    struct tw_options o = manual_opts(c, start, tick, w);
    tw_timer *t = NULL;
    assert_int_equal(tw_create(&t, &o), 0);
    assert_non_null(t);
    return t;
}

static void test_options_defaults(void **state)
{
    (void)state;
    struct tw_options o;
    memset(&o, 0xff, sizeof(o));
    tw_options_init(&o);
    assert_int_equal(o.tick_ns, 1000000);
    assert_int_equal(o.wheel_size, 64);
    assert_int_equal(o.max_pending, 0);
    assert_null(o.clock);
    assert_null(o.allocator.alloc);
    assert_int_equal(o.threaded, 0);
    assert_int_equal(o.huge_pages, 0); /* 4 KiB pages unless asked */
    tw_options_init(NULL); /* harmless */
}

static void test_create_errors(void **state)
{
    (void)state;
    struct tw_options o;
    tw_timer *t = (tw_timer *)0x1;
    tw_options_init(&o);
    assert_int_equal(tw_create(NULL, &o), -EINVAL);
    o.tick_ns = 0;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    tw_options_init(&o);
    uint32_t bad_sizes[] = { 0, 1, 3, 6, 100, TW_MAX_WHEEL_SIZE * 2 };
    for (size_t k = 0; k < sizeof(bad_sizes) / sizeof(bad_sizes[0]); k++) {
        o.wheel_size = bad_sizes[k];
        assert_int_equal(tw_create(&t, &o), -EINVAL);
    }
    tw_options_init(&o);
    o.allocator.alloc = count_alloc_fn; /* free missing */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.allocator.alloc = NULL; /* alloc missing */
    o.allocator.free = count_free_fn;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    tw_options_init(&o);
    o.workers = 2; /* workers without threaded */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    tw_options_init(&o);
    o.threaded = 2;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.threaded = 1;
    o.workers = 1025; /* past the limits */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.workers = 0;
    o.shards = 65;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.shards = 0;
    o.huge_pages = 1; /* huge pages are for manual timers only */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.threaded = 0;
    o.huge_pages = 2; /* 0 or 1 */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.huge_pages = -1;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    /* values past 16 bits whose low bits alone would be valid: every
     * field is taken whole */
    tw_options_init(&o);
    o.huge_pages = 1 << 16;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.huge_pages = 0;
    o.threaded = (1 << 16) + 1;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.threaded = 1;
    o.workers = (1u << 16) + 1;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.workers = 0;
    o.shards = (1u << 16) + 2;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.shards = 0;
    o.threaded = 0;
    o.wheel_size = (1u << 16) + 64;
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    o.wheel_size = 64;
    o.capacity = (1ull << 32) + 100; /* past a shard's most */
    assert_int_equal(tw_create(&t, &o), -EINVAL);
    assert_ptr_equal(t, (tw_timer *)0x1); /* untouched on error */
    tw_options_init(&o);
    o.huge_pages = 1; /* valid on a manual timer */
    assert_int_equal(tw_create(&t, &o), 0);
    assert_check(t);
    tw_destroy(t);
    t = (tw_timer *)0x1;

    /* NULL options: defaults on CLOCK_MONOTONIC */
    assert_int_equal(tw_create(&t, NULL), 0);
    assert_true(tw_now(t) > 0);
    assert_int_equal(tw_pending(t), 0);
    tw_destroy(t);
    tw_destroy(NULL);

    /* extreme but valid geometries */
    struct fake_clock c;
    uint32_t sizes[] = { 2, 4, TW_MAX_WHEEL_SIZE };
    for (size_t k = 0; k < 3; k++) {
        t = mk(&c, 0, 1, sizes[k]);
        int n = 0;
        assert_int_equal(tw_schedule(t, UINT64_MAX, count_fn, &n, NULL), 0);
        assert_int_equal(tw_schedule(t, 5, count_fn, &n, NULL), 0);
        assert_check(t);
        assert_int_equal(tw_advance(t, 5), 1);
        assert_int_equal(tw_advance(t, UINT64_MAX), 1);
        assert_int_equal(n, 2);
        assert_check(t);
        tw_destroy(t);
    }
}

/* A tick past 2^32 ns (10 s: a timer for deadlines days out): deadlines
 * round up to whole 10 s ticks, not to what a tick cut to 32 bits
 * (1.41 s) would make them, and a task far out comes down the levels to
 * fire at its own tick. */
static void test_tick_past_32_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    const uint64_t tick = 10 * SEC;
    tw_timer *t = mk(&c, 0, tick, 64);
    int near = 0, far = 0;
    assert_int_equal(tw_schedule(t, 25 * SEC, count_fn, &near, NULL), 0);
    assert_int_equal(tw_schedule(t, 1000000 * SEC + 1, count_fn, &far, NULL), 0);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_true(d == 30 * SEC);
    assert_int_equal(tw_advance(t, 30 * SEC - 1), 0);
    assert_int_equal(near, 0);
    assert_int_equal(tw_advance(t, 30 * SEC), 1);
    assert_int_equal(near, 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 1000000 * SEC + tick - 1), 0);
    assert_int_equal(far, 0);
    assert_int_equal(tw_advance(t, 1000000 * SEC + tick), 1);
    assert_int_equal(far, 1);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
}

static void test_time_starts_at_clock(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 123456789, MS, 64);
    assert_int_equal(tw_now(t), 123456789);
    c.now = 999 * SEC; /* manual mode: the clock is read only at creation */
    assert_int_equal(tw_now(t), 123456789);
    int n = 0;
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, NULL), 0);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    /* deadline 133456789 rounded up to the 1 ms tick */
    assert_int_equal(d, 134000000);
    assert_int_equal(tw_advance(t, 133999999), 0);
    assert_int_equal(tw_advance(t, 134000000), 1);
    tw_destroy(t);
}

static void test_schedule_errors(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_id id = 77;
    int n = 0;
    assert_int_equal(tw_schedule(NULL, 1, count_fn, &n, &id), -EINVAL);
    assert_int_equal(tw_schedule(t, 1, NULL, &n, &id), -EINVAL);
    assert_int_equal(tw_schedule_at(NULL, 1, count_fn, &n, &id), -EINVAL);
    assert_int_equal(tw_schedule_at(t, 1, NULL, &n, &id), -EINVAL);
    assert_int_equal(id, 77);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_schedule(t, 1, count_fn, &n, NULL), 0); /* id may be NULL */
    assert_int_equal(tw_pending(t), 1);
    tw_destroy(t);
}

static void test_never_early_rounds_up(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int a = 0, b = 0;
    /* on a tick boundary: fires exactly there */
    assert_int_equal(tw_schedule(t, 5 * MS, count_fn, &a, NULL), 0);
    /* mid-tick: rounded up to the next boundary, never down */
    assert_int_equal(tw_schedule(t, 5 * MS + 1, count_fn, &b, NULL), 0);
    assert_int_equal(tw_advance(t, 5 * MS - 1), 0);
    assert_int_equal(tw_advance(t, 5 * MS), 1);
    assert_int_equal(a, 1);
    assert_int_equal(b, 0);
    assert_int_equal(tw_advance(t, 6 * MS - 1), 0);
    assert_int_equal(tw_advance(t, 6 * MS), 1);
    assert_int_equal(b, 1);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.late_max_ns, MS - 1); /* b was due at 5ms+1 */
    tw_destroy(t);
}

static void test_schedule_at_past(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 100 * MS, MS, 64);
    int n = 0;
    assert_int_equal(tw_schedule_at(t, 50 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule_at(t, 0, count_fn, &n, NULL), 0);
    assert_check(t); /* both in the current tick's bucket */
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_true(d <= tw_now(t)); /* due now */
    assert_int_equal(tw_advance(t, tw_now(t)), 2); /* same time: fires */
    assert_int_equal(n, 2);
    assert_int_equal(tw_next_deadline(t, &d), -ENOENT);
    tw_destroy(t);
}

static void test_overflow_clamps_and_far_future(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, UINT64_MAX - 10 * SEC, MS, 64);
    int n = 0, far = 0;
    /* now + delay wraps: clamped to the far future, still works */
    assert_int_equal(tw_schedule(t, 20 * SEC, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t, UINT64_MAX, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, UINT64_MAX - 1), 0);
    /* their bucket is the tick after now, whose start in ns lies past
     * UINT64_MAX: the answer is the end of time, not a wrapped product */
    uint64_t d = 0;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, UINT64_MAX);
    assert_int_equal(tw_advance(t, UINT64_MAX), 2);
    assert_int_equal(n, 2);
    tw_destroy(t);

    /* the last tick whose start is still a time, floor(UINT64_MAX / tick)
     * (with a 1 us tick, 18446744073709551 us): its own time, not clamped */
    const uint64_t us = 1000, last_start = UINT64_MAX / us * us;
    t = mk(&c, last_start - 3 * us, us, 64);
    assert_int_equal(tw_schedule_at(t, last_start, count_fn, &n, NULL), 0);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, last_start);
    assert_int_equal(tw_advance(t, last_start - 1), 0);
    assert_int_equal(tw_advance(t, last_start), 1);
    assert_check(t);
    tw_destroy(t);

    /* delays of days and years */
    t = mk(&c, 0, MS, 64);
    const uint64_t day = 86400 * SEC, year = 365 * day;
    assert_int_equal(tw_schedule(t, 3 * day, count_fn, &far, NULL), 0);
    assert_int_equal(tw_schedule(t, 10 * year, count_fn, &far, NULL), 0);
    assert_check(t);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_true(s.levels >= 6);
    assert_int_equal(tw_advance(t, 3 * day - 1), 0);
    assert_int_equal(tw_advance(t, 3 * day), 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * year - 1), 0);
    assert_int_equal(tw_advance(t, 10 * year), 1);
    assert_int_equal(far, 2);
    tw_destroy(t);
}

/* The last 2W blocks of a level's granularity below 2^64 ticks: a level
 * whose window would reach past the end of time holds everything to the
 * end, and the level below must send on what lies in its own last block
 * rather than fold it onto the slot it is reading (wheel.c,
 * tw__wheel_level_last). With a 1 ns tick every deadline here is a tick
 * of its own. Each case: the clock `a` ns before the end, a task at
 * every ns after it (fired one an advance, none early), then each alone,
 * followed as an event loop follows tw_next_deadline (nothing fired
 * before the deadline, the last answer the deadline itself). */
static void test_last_ticks_before_the_end(void **state)
{
    (void)state;
    struct fake_clock c;
    const uint32_t sizes[] = { 2, 4 };
    for (size_t w = 0; w < 2; w++) {
        const uint64_t amax = 16 * (uint64_t)sizes[w] * sizes[w];
        for (uint64_t a = 1; a <= amax; a++) {
            const uint64_t start = UINT64_MAX - a;
            tw_timer *t = mk(&c, start, 1, sizes[w]);
            int n = 0;
            for (uint64_t b = 0; b < a; b++)
                assert_int_equal(tw_schedule_at(t, UINT64_MAX - b, count_fn, &n, NULL), 0);
            assert_check(t);
            for (uint64_t i = 1; i <= a; i++)
                assert_int_equal(tw_advance(t, start + i), 1);
            assert_int_equal(n, (int)a);
            assert_check(t);
            tw_destroy(t);

            for (uint64_t b = 0; b < a; b++) {
                const uint64_t due = UINT64_MAX - b;
                uint64_t d = 0;
                t = mk(&c, start, 1, sizes[w]);
                n = 0;
                assert_int_equal(tw_schedule_at(t, due, count_fn, &n, NULL), 0);
                /* an event loop's steps: each answer at most the deadline
                 * (earlier where a coarse bucket cascades), each step
                 * firing nothing before it */
                for (int steps = 0;; steps++) {
                    assert_int_equal(tw_next_deadline(t, &d), 0);
                    if (d >= due)
                        break;
                    assert_true(steps < 64);
                    assert_int_equal(tw_advance(t, d), 0);
                }
                assert_int_equal(d, due);
                assert_int_equal(tw_advance(t, due - 1), 0);
                assert_check(t);
                assert_int_equal(tw_advance(t, due), 1);
                tw_destroy(t);
            }
        }
    }
}

static void test_clock_backwards(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 50 * MS, MS, 64);
    int n = 0;
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 55 * MS), 0);
    assert_int_equal(tw_advance(t, 10 * MS), 0); /* backwards: ignored */
    assert_int_equal(tw_now(t), 55 * MS);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_advance(t, 60 * MS), 1);
    assert_int_equal(n, 1);
    tw_destroy(t);
}

static void test_cancel(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id a, b;
    assert_int_equal(tw_schedule(t, 5 * MS, count_fn, &n, &a), 0);
    assert_int_equal(tw_schedule(t, 5 * MS, count_fn, &n, &b), 0);
    assert_true(a != 0 && b != 0 && a != b);
    assert_int_equal(tw_cancel(NULL, a), -EINVAL);
    assert_int_equal(tw_cancel(t, 0), -ENOENT);
    assert_int_equal(tw_cancel(t, 0xdeadbeefcafe1234ull), -ENOENT);
    assert_int_equal(b, a + 1); /* next slot, same generation */
    assert_int_equal(tw_cancel(t, a + (2ull << 32)), -ENOENT); /* a later gen */
    assert_int_equal(tw_cancel(t, a ^ (1ull << 32)), -ENOENT);  /* a free gen */
    assert_int_equal(tw_cancel(t, a), 0);
    assert_int_equal(tw_cancel(t, a), -ENOENT);
    assert_int_equal(tw_pending(t), 1);
    /* an id made up to match the freed slot: a's slot, whose generation
     * the cancel moved to the next multiple of 4 (1 -> 4), names no task:
     * every call refuses it and touches nothing */
    tw_id made_up = a + (3ull << 32);
    uint64_t dl;
    assert_int_equal(tw_cancel(t, made_up), -ENOENT);
    assert_int_equal(tw_reschedule(t, made_up, MS), -ENOENT);
    assert_int_equal(tw_reschedule_at(t, made_up, MS), -ENOENT);
    assert_int_equal(tw_deadline(t, made_up, &dl), -ENOENT);
    assert_int_equal(tw_pending(t), 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 5 * MS), 1);
    assert_int_equal(n, 1);
    assert_int_equal(tw_cancel(t, b), -ENOENT); /* already fired */
    /* the freed slot is reused; the stale id must not touch the new task */
    tw_id c2;
    assert_int_equal(tw_schedule(t, MS, count_fn, &n, &c2), 0);
    assert_true(c2 != a && c2 != b);
    assert_int_equal(tw_cancel(t, a), -ENOENT);
    assert_int_equal(tw_cancel(t, b), -ENOENT);
    assert_int_equal(tw_pending(t), 1);
    /* cancelling the only task of a bucket takes the bucket off the queue */
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 1);
    assert_int_equal(tw_cancel(t, c2), 0);
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 0);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), -ENOENT);
    assert_check(t);
    tw_destroy(t);
}

/* A cancel's unlink waits in a ring of 16 (wheel.c, "Deferred unlink"),
 * which no caller may see: across more cancels than the ring holds, with
 * some left in it at each step, the next deadline, the pending count, the
 * queued buckets, a drain and the firings are those of the tasks not
 * cancelled, and the cancelled ids stay refused. */
struct drain_pair {
    tw_id pair[2];
    int handed;
};

/* Hands back one of the pair and cancels the other, not yet handed back. */
static void drain_cancel_each(tw_timer *t, tw_id id, void *arg)
{
    (void)arg; /* the task's own */
    struct drain_pair *dp = tw_drain_arg(t);
    if (dp->handed++)
        return;
    assert_true(id == dp->pair[0] || id == dp->pair[1]);
    assert_int_equal(tw_cancel(t, id == dp->pair[0] ? dp->pair[1] : dp->pair[0]), 0);
}

static void test_cancel_deferred_unseen(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    enum { N = 50 };
    int fired[N] = { 0 };
    tw_id ids[N];
    for (int k = 0; k < N; k++) /* task k due at k + 1 ms, a bucket each */
        assert_int_equal(tw_schedule(t, (uint64_t)(k + 1) * MS, count_fn, &fired[k], &ids[k]),
                         0);
    /* cancel the earliest one at a time, 41 of them: each time, the next
     * deadline is the next survivor's */
    for (int k = 0; k < 41; k++) {
        assert_int_equal(tw_cancel(t, ids[k]), 0);
        assert_int_equal(tw_cancel(t, ids[k]), -ENOENT);
        uint64_t d;
        assert_int_equal(tw_next_deadline(t, &d), 0);
        assert_int_equal(d, (uint64_t)(k + 2) * MS);
        assert_int_equal(tw_pending(t), (size_t)(N - k - 1));
        assert_check(t);
    }
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, N - 41);
    /* a stale id is refused by every call that takes one */
    uint64_t d;
    assert_int_equal(tw_deadline(t, ids[3], &d), -ENOENT);
    assert_int_equal(tw_reschedule(t, ids[3], MS), -ENOENT);
    /* the last nine fire, and only they */
    assert_int_equal(tw_advance(t, N * MS), N - 41);
    for (int k = 0; k < N; k++)
        assert_int_equal(fired[k], k >= 41);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);

    /* a drain's callback cancels a task not yet handed back: it is not */
    tw_id a;
    int fa = 0, fb = 0;
    struct drain_pair dp = { { 0, 0 }, 0 };
    assert_int_equal(tw_schedule(t, SEC, count_fn, &fa, &a), 0);
    assert_int_equal(tw_schedule(t, SEC, count_fn, &fb, &dp.pair[0]), 0);
    assert_int_equal(tw_schedule(t, 2 * SEC, count_fn, &fb, &dp.pair[1]), 0);
    assert_int_equal(tw_cancel(t, a), 0); /* deferred: still listed */
    assert_int_equal(tw_drain(t, drain_cancel_each, &dp), 1);
    assert_int_equal(dp.handed, 1);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(fa + fb, 0);
    assert_check(t);
    tw_destroy(t);
}

static void test_reschedule(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id a;
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, &a), 0);
    assert_int_equal(tw_reschedule(NULL, a, 1), -EINVAL);
    assert_int_equal(tw_reschedule(t, 0, 1), -ENOENT);
    assert_int_equal(tw_reschedule(t, a, 3 * SEC), 0); /* later, coarser level */
    assert_int_equal(tw_advance(t, 10 * MS), 0);
    assert_int_equal(tw_reschedule(t, a, 2 * MS), 0); /* now + 2 ms */
    assert_int_equal(tw_advance(t, 11 * MS), 0);
    assert_int_equal(tw_advance(t, 12 * MS), 1);
    assert_int_equal(n, 1);
    assert_int_equal(tw_reschedule(t, a, MS), -ENOENT);
    assert_check(t);
    tw_destroy(t);
}

/* A callback that pushes another task later (arg: that task's id; the
 * count goes to push_fired). */
static int push_fired;
static void push_other_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    push_fired++;
    assert_int_equal(tw_reschedule(t, *(tw_id *)arg, 40 * MS), 0);
}

/* A later deadline is written in place (wheel.c, "Pushing a deadline
 * later"): the task stays in its bucket, which tw_next_deadline may still
 * report, and moves when that bucket comes due. It fires at its last
 * deadline, never before, however often it was pushed and from whatever
 * level; a cancel or an earlier deadline after a push works as on any
 * task; and a task already collected as due (on the expired list, pushed
 * from another task's callback in the same advance) moves at once and
 * does not fire in that advance. tw_check holds throughout. */
static void test_reschedule_later_in_place(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id a, b, x, y;
    uint64_t d;

    /* pushed a thousand times, 1 ms at a time: fires at the last only */
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, &a), 0);
    for (uint64_t k = 1; k <= 1000; k++)
        assert_int_equal(tw_reschedule(t, a, (10 + k) * MS), 0);
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 1010 * MS);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_true(d >= 10 * MS && d <= 1010 * MS);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * MS), 0); /* its old bucket: moved on */
    assert_int_equal(tw_pending(t), 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 1010 * MS - 1), 0);
    assert_int_equal(tw_advance(t, 1010 * MS), 1);
    assert_int_equal(n, 1);

    /* from a coarse bucket (100 s, level 2) to a level not made yet: it
     * moves at once, with the level made */
    struct tw_stats st;
    tw_stats(t, &st);
    uint64_t levels = st.levels;
    assert_int_equal(tw_schedule(t, 100 * SEC, count_fn, &n, &b), 0);
    assert_int_equal(tw_reschedule(t, b, 3 * 3600 * SEC), 0);
    tw_stats(t, &st);
    assert_true(st.levels > levels);
    assert_int_equal(tw_advance(t, 101 * SEC), 0);
    assert_check(t);
    assert_int_equal(tw_advance(t, 1010 * MS + 3 * 3600 * SEC - 1), 0);
    assert_int_equal(tw_advance(t, 1010 * MS + 3 * 3600 * SEC), 1);
    assert_int_equal(n, 2);
    tw_destroy(t);

    /* pushed tasks in the level-1 bucket that the spread takes ahead of
     * its tick (tw_advance): each goes to the level its new tick needs,
     * level 1 again (5 s) or level 2 (20 s). Level 2 is made first (z, at
     * 30 s): a push past the levels made moves the task at once instead,
     * and the spread would never see it. */
    t = mk(&c, 0, MS, 64);
    tw_id w, z;
    assert_int_equal(tw_schedule(t, 30 * SEC, count_fn, &n, &z), 0);
    assert_int_equal(tw_schedule(t, 1000 * MS, count_fn, &n, &x), 0); /* block [960, 1024) */
    assert_int_equal(tw_schedule(t, 1010 * MS, count_fn, &n, &w), 0); /* the same block */
    assert_int_equal(tw_schedule(t, 900 * MS, count_fn, &n, &y), 0);  /* block [896, 960) */
    tw_stats(t, &st);
    levels = st.levels;
    uint64_t cascaded = st.cascaded;
    assert_int_equal(tw_reschedule(t, x, 5 * SEC), 0);
    assert_int_equal(tw_reschedule(t, w, 20 * SEC), 0);
    tw_stats(t, &st);
    assert_int_equal(st.levels, levels);      /* no level made: both stay put */
    assert_int_equal(st.cascaded, cascaded);
    /* pops y's bucket (y down to level 0), then spreads x's (x, w) */
    assert_int_equal(tw_advance(t, 896 * MS), 0);
    tw_stats(t, &st);
    assert_int_equal(st.cascaded, cascaded + 3);
    assert_check(t);
    assert_int_equal(tw_deadline(t, x, &d), 0);
    assert_int_equal(d, 5 * SEC);
    assert_int_equal(tw_deadline(t, w, &d), 0);
    assert_int_equal(d, 20 * SEC);
    assert_int_equal(tw_advance(t, 900 * MS), 1);
    assert_int_equal(tw_advance(t, 1010 * MS), 0); /* their old block: nothing due */
    assert_check(t);
    assert_int_equal(tw_advance(t, 5 * SEC - 1), 0);
    assert_int_equal(tw_advance(t, 5 * SEC), 1);
    assert_int_equal(tw_advance(t, 20 * SEC - 1), 0);
    assert_int_equal(tw_advance(t, 20 * SEC), 1);
    assert_int_equal(tw_advance(t, 30 * SEC), 1);
    assert_int_equal(n, 6);
    assert_int_equal(tw_pending(t), 0);

    /* cancelled after a push; brought earlier after a push */
    uint64_t now = tw_now(t);
    assert_int_equal(tw_schedule(t, 50 * MS, count_fn, &n, &a), 0);
    assert_int_equal(tw_reschedule(t, a, 500 * MS), 0);
    assert_int_equal(tw_cancel(t, a), 0);
    assert_int_equal(tw_schedule(t, 50 * MS, count_fn, &n, &b), 0);
    assert_int_equal(tw_reschedule(t, b, 500 * MS), 0);
    assert_int_equal(tw_reschedule(t, b, 20 * MS), 0);
    assert_int_equal(tw_advance(t, now + 20 * MS - 1), 0);
    assert_int_equal(tw_advance(t, now + 20 * MS), 1);
    assert_int_equal(tw_advance(t, now + 600 * MS), 0);
    assert_int_equal(n, 7);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);

    /* both due at the same tick; the first's callback pushes the second,
     * already collected, 40 ms on: it fires then, not in this advance */
    now = tw_now(t);
    push_fired = 0;
    assert_int_equal(tw_schedule(t, 5 * MS, push_other_fn, &y, &x), 0);
    assert_int_equal(tw_schedule(t, 5 * MS, count_fn, &n, &y), 0);
    assert_int_equal(tw_advance(t, now + 5 * MS), 1);
    assert_int_equal(push_fired, 1);
    assert_int_equal(n, 7);
    assert_check(t);
    assert_int_equal(tw_deadline(t, y, &d), 0);
    assert_int_equal(d, now + 45 * MS);
    assert_int_equal(tw_advance(t, now + 45 * MS - 1), 0);
    assert_int_equal(tw_advance(t, now + 45 * MS), 1);
    assert_int_equal(n, 8);
    assert_check(t);
    tw_destroy(t);
}

/* tw_reschedule_at: an absolute deadline, kept as given (tw_deadline) and
 * rounded up to the tick; a past one is due now; the end of time only at
 * tw_advance(UINT64_MAX); a failed call moves nothing. */
static void test_reschedule_at(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 1000 * MS, MS, 64);
    int n = 0;
    tw_id a, b;
    uint64_t d = 42;
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, &a), 0);
    assert_int_equal(tw_schedule(t, 3600 * SEC, count_fn, &n, &b), 0);
    assert_int_equal(tw_reschedule_at(NULL, a, 0), -EINVAL);
    assert_int_equal(tw_reschedule_at(t, 0, 0), -ENOENT);
    assert_int_equal(tw_reschedule_at(t, a ^ (1ull << 32), 0), -ENOENT);
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 1010 * MS); /* the failures moved nothing */

    /* later, to a coarser level, then back: never early */
    assert_int_equal(tw_reschedule_at(t, a, 5000 * SEC), 0);
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 5000 * SEC);
    assert_int_equal(tw_reschedule_at(t, a, 1005 * MS + 300), 0);
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 1005 * MS + 300);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 1006 * MS);
    assert_int_equal(tw_advance(t, 1005 * MS + 999999), 0);
    assert_int_equal(tw_advance(t, 1006 * MS), 1);
    assert_int_equal(n, 1);
    assert_int_equal(tw_reschedule_at(t, a, 2000 * MS), -ENOENT); /* fired */

    /* a deadline already past is due now, and kept as given */
    assert_int_equal(tw_reschedule_at(t, b, 3 * MS), 0);
    assert_int_equal(tw_deadline(t, b, &d), 0);
    assert_int_equal(d, 3 * MS);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_true(d <= 1006 * MS);
    assert_int_equal(tw_advance(t, 1006 * MS), 1);
    assert_int_equal(n, 2);

    /* the end of time: fires only there */
    assert_int_equal(tw_schedule(t, MS, count_fn, &n, &b), 0);
    assert_int_equal(tw_reschedule_at(t, b, UINT64_MAX), 0);
    assert_int_equal(tw_advance(t, 400ull * 365 * 86400 * SEC), 0);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_advance(t, UINT64_MAX), 1);
    assert_int_equal(n, 3);
    assert_check(t);
    tw_destroy(t);
}

/* From a periodic task's own callback, tw_reschedule_at sets its next
 * firing at that instant, and the period goes on from there. */
static tw_id resched_at_id;
static int resched_at_calls;
static void resched_at_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    if (resched_at_calls++ == 0)
        assert_int_equal(tw_reschedule_at(t, id, tw_now(t) + 25 * MS + 1), 0);
    resched_at_id = id;
}

static void test_periodic_reschedule_at_from_callback(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_id id;
    uint64_t d;
    assert_int_equal(tw_schedule_every(t, MS, 10 * MS, TW_FIXED_RATE, resched_at_fn, NULL,
                                       &id), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(tw_deadline(t, id, &d), 0);
    assert_int_equal(d, 26 * MS + 1);
    assert_int_equal(tw_advance(t, 26 * MS), 0); /* rounded up: at 27 ms */
    assert_int_equal(tw_advance(t, 27 * MS), 1);
    assert_int_equal(tw_deadline(t, id, &d), 0);
    assert_int_equal(d, 36 * MS + 1); /* the period, from the new deadline */
    assert_int_equal(resched_at_calls, 2);
    assert_int_equal(resched_at_id, id);
    assert_int_equal(tw_cancel(t, id), 0);
    assert_check(t);
    tw_destroy(t);
}

/* What tw_deadline says from a periodic task's own callback: -EBUSY until
 * the callback sets the next firing, then that; -ENOENT once cancelled. */
struct deadline_probe {
    int calls;
    int before, after_resched, after_cancel;
    uint64_t got;
};
static void deadline_probe_fn(tw_timer *t, tw_id id, void *arg)
{
    struct deadline_probe *p = arg;
    uint64_t d = 7;
    p->calls++;
    p->before = tw_deadline(t, id, &d);
    assert_int_equal(d, 7); /* untouched on failure */
    assert_int_equal(tw_reschedule(t, id, 40 * MS), 0);
    p->after_resched = tw_deadline(t, id, &p->got);
    if (p->calls == 2) {
        assert_int_equal(tw_cancel(t, id), 0);
        p->after_cancel = tw_deadline(t, id, &d);
    }
}

static void test_deadline(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 1000 * MS, MS, 64);
    int n = 0;
    tw_id a, far, past;
    uint64_t d = 42;
    assert_int_equal(tw_schedule(t, 5 * MS + 300, count_fn, &n, &a), 0);
    assert_int_equal(tw_deadline(NULL, a, &d), -EINVAL);
    assert_int_equal(tw_deadline(t, a, NULL), -EINVAL);
    assert_int_equal(tw_deadline(t, 0, &d), -ENOENT);
    assert_int_equal(tw_deadline(t, a ^ (1ull << 32), &d), -ENOENT);
    assert_int_equal(tw_deadline(t, 0xdeadbeefcafe1234ull, &d), -ENOENT);
    assert_int_equal(d, 42); /* written only on success */
    /* as scheduled, not rounded to the tick (it fires at 1006 ms) */
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 1005 * MS + 300);
    /* clamped at the end of time; a past absolute deadline as given */
    assert_int_equal(tw_schedule(t, UINT64_MAX - 5, count_fn, &n, &far), 0);
    assert_int_equal(tw_deadline(t, far, &d), 0);
    assert_int_equal(d, UINT64_MAX);
    assert_int_equal(tw_schedule_at(t, 3 * MS, count_fn, &n, &past), 0);
    assert_int_equal(tw_deadline(t, past, &d), 0);
    assert_int_equal(d, 3 * MS);
    /* a reschedule moves it; a query changes nothing */
    assert_int_equal(tw_reschedule(t, a, 20 * MS), 0);
    assert_int_equal(tw_deadline(t, a, &d), 0);
    assert_int_equal(d, 1020 * MS);
    assert_int_equal(tw_advance(t, 1019 * MS), 1); /* past only */
    assert_int_equal(tw_deadline(t, past, &d), -ENOENT); /* fired */
    assert_int_equal(tw_advance(t, 1020 * MS), 1);
    assert_int_equal(tw_deadline(t, a, &d), -ENOENT);
    assert_int_equal(tw_cancel(t, far), 0);
    assert_int_equal(tw_deadline(t, far, &d), -ENOENT); /* cancelled */
    /* keyed: its id answers too */
    tw_id k;
    assert_int_equal(tw_schedule_keyed(t, "conn-7", 6, 2 * SEC, count_fn, &n, &k), 0);
    assert_int_equal(tw_deadline(t, k, &d), 0);
    assert_int_equal(d, 1020 * MS + 2 * SEC);
    assert_int_equal(tw_cancel_keyed(t, "conn-7", 6), 0);
    assert_int_equal(tw_deadline(t, k, &d), -ENOENT);
    /* periodic: the next firing's, the fixed rate's grid */
    tw_id p;
    struct deadline_probe probe = { 0 };
    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_RATE,
                                       deadline_probe_fn, &probe, &p), 0);
    assert_int_equal(tw_deadline(t, p, &d), 0);
    assert_int_equal(d, 1030 * MS);
    assert_int_equal(tw_advance(t, 1030 * MS), 1);
    assert_int_equal(probe.before, -EBUSY);
    assert_int_equal(probe.after_resched, 0);
    assert_int_equal(probe.got, 1070 * MS);
    assert_int_equal(tw_deadline(t, p, &d), 0); /* after the callback */
    assert_int_equal(d, 1070 * MS);
    assert_int_equal(tw_advance(t, 1070 * MS), 1);
    assert_int_equal(probe.calls, 2);
    assert_int_equal(probe.after_cancel, -ENOENT);
    assert_int_equal(tw_deadline(t, p, &d), -ENOENT);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(n, 2);
    assert_check(t);
    tw_destroy(t);
}

static void test_order_across_levels(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 4); /* tiny wheel: many levels */
    struct recorder r = { 0 };
    struct tag tags[200];
    for (int k = 199; k >= 0; k--) {
        tags[k].r = &r;
        assert_int_equal(tw_schedule(t, (uint64_t)(k + 1) * MS, record_fn, &tags[k], NULL), 0);
    }
    assert_check(t);
    assert_int_equal(tw_advance(t, 1000 * MS), 200);
    for (int k = 0; k < 200; k++)
        assert_ptr_equal((void *)r.args[k], &tags[k]);
    tw_destroy(t);
}

static int self_cancel_calls;
static void self_cancel_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    self_cancel_calls++;
    if (self_cancel_calls == 3)
        assert_int_equal(tw_cancel(t, id), 0);
}

/* A periodic task reserves the levels its re-arms can need, and no more
 * (wheel.c, tw__wheel_reserve_period): a period whose re-arm lies under
 * 2W ticks ahead (ceil(period) + 1 < 2W, fixed delay, half a tick late)
 * fits level 0's 2W blocks, so no level 1 is made, at scheduling or at
 * any re-arm. */
static void test_periodic_reserves_no_more(void **state)
{
    (void)state;
    const uint32_t sizes[] = { 2, 8, 64 };
    for (size_t w = 0; w < sizeof sizes / sizeof sizes[0]; w++) {
        uint64_t W = sizes[w], p = 2 * W - 2; /* ticks: p + 1 < 2W */
        struct fake_clock c;
        tw_timer *t = mk(&c, 0, MS, (uint32_t)W);
        int n = 0;
        tw_id id;
        assert_int_equal(tw_schedule_every(t, MS, p * MS, TW_FIXED_DELAY, count_fn, &n, &id), 0);
        struct tw_stats s;
        tw_stats(t, &s);
        assert_int_equal(s.levels, 1);
        for (int k = 1; k <= 4; k++) {
            uint64_t d;
            assert_int_equal(tw_deadline(t, id, &d), 0);
            assert_int_equal(tw_advance(t, d + MS / 2), 1);
            assert_int_equal(n, k);
        }
        tw_stats(t, &s);
        assert_int_equal(s.levels, 1);
        assert_check(t);
        tw_destroy(t);
    }
}

static void test_periodic_fixed_rate(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    struct recorder r = { 0 };
    struct tag tg = { &r, 0 };
    tw_id id;
    assert_int_equal(tw_schedule_every(NULL, 1, 1, TW_FIXED_RATE, record_fn, &tg, &id), -EINVAL);
    assert_int_equal(tw_schedule_every(t, 1, 0, TW_FIXED_RATE, record_fn, &tg, &id), -EINVAL);
    assert_int_equal(tw_schedule_every(t, 1, 1, 0, record_fn, &tg, &id), -EINVAL);
    assert_int_equal(tw_schedule_every(t, 1, 1, TW_FIXED_RATE | TW_FIXED_DELAY, record_fn, &tg, &id), -EINVAL);
    /* flags read whole: a flag in its low bits, with bits above, is none */
    assert_int_equal(tw_schedule_every(t, 1, 1, TW_FIXED_RATE | 0x10000, record_fn, &tg, &id), -EINVAL);
    assert_int_equal(tw_schedule_every(t, 1, 1, TW_FIXED_DELAY | 0x100, record_fn, &tg, &id), -EINVAL);
    assert_int_equal(tw_schedule_every(t, 1, 1, TW_FIXED_RATE, NULL, &tg, &id), -EINVAL);
    assert_int_equal(tw_pending(t), 0);

    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_RATE, record_fn, &tg, &id), 0);
    assert_int_equal(tw_advance(t, 10 * MS), 1);
    assert_int_equal(tw_advance(t, 20 * MS), 1);
    assert_int_equal(tw_pending(t), 1);
    /* late by 45 ms: one firing, no burst; the rate grid is kept */
    assert_int_equal(tw_advance(t, 65 * MS), 1);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 70 * MS);
    assert_int_equal(tw_advance(t, 70 * MS), 1);
    /* late by exactly one period, then by two (80 missed, 90 on the grid):
     * one firing each time, and the next deadline lies after now, so a
     * second advance to the same time fires nothing more */
    assert_int_equal(tw_advance(t, 90 * MS), 1);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 100 * MS);
    assert_int_equal(tw_advance(t, 90 * MS), 0);
    assert_int_equal(tw_advance(t, 120 * MS), 1);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 130 * MS);
    assert_int_equal(tw_advance(t, 120 * MS), 0);
    assert_int_equal(r.n, 6);
    for (int k = 0; k < r.n; k++)
        assert_int_equal(r.ids[k], id); /* the same id every time */
    assert_int_equal(tw_cancel(t, id), 0);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    assert_int_equal(tw_advance(t, 500 * MS), 0);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);

    /* a periodic task cancelling itself from its own callback */
    self_cancel_calls = 0;
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, self_cancel_fn, NULL, &id), 0);
    for (int k = 0; k < 10; k++)
        tw_advance(t, tw_now(t) + MS);
    assert_int_equal(self_cancel_calls, 3);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    assert_check(t);
    tw_destroy(t);
}

static void test_periodic_fixed_delay(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id id;
    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_DELAY, count_fn, &n, &id), 0);
    assert_int_equal(tw_advance(t, 13 * MS), 1); /* late by 3 */
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 23 * MS); /* counted from when the callback ran */
    assert_int_equal(tw_advance(t, 22 * MS), 0);
    assert_int_equal(tw_advance(t, 23 * MS), 1);
    assert_int_equal(n, 2);
    /* a period longer than the wheel levels made so far: re-arming it
     * must not need memory (levels were reserved at schedule time) */
    tw_id slow;
    assert_int_equal(tw_schedule_every(t, MS, 40 * 86400 * SEC, TW_FIXED_DELAY, count_fn, &n, &slow), 0);
    assert_int_equal(tw_advance(t, 24 * MS), 1);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 33 * MS);
    assert_int_equal(tw_cancel(t, id), 0);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_true(d > 24 * MS && d <= 24 * MS + 40 * 86400 * SEC);
    assert_check(t);
    tw_destroy(t);

    /* the longest period on a 1 ns tick: the reservation for its re-arm
     * is the top level, and the re-armed deadline saturates at the end of
     * time; the firing there is its last */
    t = mk(&c, 0, 1, 64);
    n = 0;
    assert_int_equal(tw_schedule_every(t, 0, UINT64_MAX, TW_FIXED_DELAY, count_fn, &n, &id), 0);
    assert_int_equal(tw_advance(t, 10), 1);
    assert_int_equal(tw_next_deadline(t, &d), 0); /* its coarse bucket's */
    assert_true(d > 10);
    assert_int_equal(tw_advance(t, UINT64_MAX - 1), 0);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_advance(t, UINT64_MAX), 1);
    assert_int_equal(n, 2);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    assert_int_equal(tw_advance(t, UINT64_MAX), 0);
    assert_check(t);
    tw_destroy(t);
}

static tw_id end_resched_id;
static int end_resched_calls;
static void end_resched_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    end_resched_calls++;
    end_resched_id = id;
    if (end_resched_calls == 1)
        assert_int_equal(tw_reschedule(t, id, SEC), 0); /* clamped: due now */
}

/* At the end of time no instant lies after now, so a periodic task cannot
 * be re-armed: each flag's firing there is its last, and an event loop
 * that advances to tw_next_deadline does not spin on it. A reschedule from
 * the callback is obeyed, as at any other time. */
static void test_periodic_end_of_time(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id rate, delay, late;
    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_RATE, count_fn, &n, &rate), 0);
    assert_int_equal(tw_schedule_every(t, 10 * MS, 10 * MS, TW_FIXED_DELAY, count_fn, &n, &delay), 0);
    assert_int_equal(tw_advance(t, 10 * MS), 2);
    assert_int_equal(tw_pending(t), 2);
    /* a huge period from close to the end: fires at the end, once */
    assert_int_equal(tw_advance(t, UINT64_MAX - 5 * MS), 2);
    assert_int_equal(tw_schedule_every(t, MS, UINT64_MAX / 2, TW_FIXED_RATE, count_fn, &n, &late), 0);
    assert_int_equal(tw_advance(t, UINT64_MAX), 3);
    assert_int_equal(n, 7);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel(t, rate), -ENOENT);
    assert_int_equal(tw_cancel(t, delay), -ENOENT);
    assert_int_equal(tw_cancel(t, late), -ENOENT);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), -ENOENT);
    assert_int_equal(tw_advance(t, UINT64_MAX), 0);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.fired, 7);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.cancelled, 0);
    assert_check(t);

    /* scheduled at the end of time: fires at the next advance, once */
    assert_int_equal(tw_schedule_every(t, 0, MS, TW_FIXED_DELAY, count_fn, &n, &rate), 0);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_advance(t, UINT64_MAX), 1);
    assert_int_equal(tw_pending(t), 0);

    /* rescheduled from its callback: kept, and fires again */
    end_resched_calls = 0;
    assert_int_equal(tw_schedule_every(t, 0, MS, TW_FIXED_RATE, end_resched_fn, NULL, &late), 0);
    assert_int_equal(tw_advance(t, UINT64_MAX), 1);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_advance(t, UINT64_MAX), 1);
    assert_int_equal(end_resched_calls, 2);
    assert_int_equal(end_resched_id, late);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
}

static tw_id resched_id;
static int resched_calls;
static void resched_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)arg;
    resched_calls++;
    resched_id = id;
    /* back off: the next firing 50 ms from now instead of the period */
    assert_int_equal(tw_reschedule(t, id, 50 * MS), 0);
}

static void test_periodic_reschedule_from_callback(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_id id;
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, resched_fn, NULL, &id), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    uint64_t d;
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 51 * MS);
    assert_int_equal(tw_advance(t, 50 * MS), 0);
    assert_int_equal(tw_advance(t, 51 * MS), 1);
    assert_int_equal(resched_calls, 2);
    assert_int_equal(resched_id, id);
    assert_int_equal(tw_cancel(t, id), 0);
    tw_destroy(t);
}

/* A periodic task that cancelled itself from its callback cannot then be
 * rescheduled from it, and does not come back. */
static int cancel_resched_rc;
static void cancel_then_resched_fn(tw_timer *t, tw_id id, void *arg)
{
    (*(int *)arg)++;
    assert_int_equal(tw_cancel(t, id), 0);
    cancel_resched_rc = tw_reschedule(t, id, MS);
}

static void test_periodic_cancel_then_reschedule(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id id;
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, cancel_then_resched_fn, &n, &id), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(cancel_resched_rc, -ENOENT);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_advance(t, 100 * MS), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    assert_check(t);
    tw_destroy(t);
}

static void test_keyed(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int a = 0, b = 0, l = 0;
    tw_id id1, id2;
    assert_int_equal(tw_schedule_keyed(NULL, "k", 1, MS, count_fn, &a, NULL), -EINVAL);
    assert_int_equal(tw_schedule_keyed(t, NULL, 1, MS, count_fn, &a, NULL), -EINVAL);
    assert_int_equal(tw_schedule_keyed(t, "k", 0, MS, count_fn, &a, NULL), -EINVAL);
    if (SIZE_MAX > UINT32_MAX) /* too long: refused before the key is read */
        assert_int_equal(tw_schedule_keyed(t, "k", (size_t)UINT32_MAX + 1, MS, count_fn, &a, NULL),
                         -EINVAL);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, NULL, &a, NULL), -EINVAL);
    assert_int_equal(tw_cancel_keyed(t, "k", 0), -EINVAL);
    assert_int_equal(tw_cancel_keyed(NULL, "k", 1), -EINVAL);
    assert_int_equal(tw_cancel_keyed(t, NULL, 1), -EINVAL);
    if (SIZE_MAX > UINT32_MAX) /* likewise refused unread */
        assert_int_equal(tw_cancel_keyed(t, "k", (size_t)UINT32_MAX + 1), -EINVAL);
    assert_int_equal(tw_cancel_keyed(t, "k", 1), -ENOENT);

    assert_int_equal(tw_schedule_keyed(t, "conn-1", 6, 10 * MS, count_fn, &a, &id1), 0);
    assert_int_equal(tw_schedule_keyed(t, "conn-1", 6, 20 * MS, count_fn, &b, &id2), 0);
    assert_true(id1 != id2);
    assert_int_equal(tw_pending(t), 1); /* replaced, not added */
    assert_int_equal(tw_cancel(t, id1), -ENOENT);
    assert_int_equal(tw_advance(t, 10 * MS), 0);
    assert_int_equal(tw_advance(t, 20 * MS), 1);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    /* the fired task freed its key */
    assert_int_equal(tw_cancel_keyed(t, "conn-1", 6), -ENOENT);
    assert_int_equal(tw_schedule_keyed(t, "conn-1", 6, 5 * MS, count_fn, &a, &id1), 0);
    assert_int_equal(tw_cancel_keyed(t, "conn-1", 6), 0);
    assert_int_equal(tw_cancel(t, id1), -ENOENT);
    assert_int_equal(tw_cancel_keyed(t, "conn-1", 6), -ENOENT);
    /* cancel by id also frees the key */
    assert_int_equal(tw_schedule_keyed(t, "x", 1, 5 * MS, count_fn, &a, &id1), 0);
    assert_int_equal(tw_cancel(t, id1), 0);
    assert_int_equal(tw_cancel_keyed(t, "x", 1), -ENOENT);

    /* keys longer than the inline room, and binary keys */
    char longkey[300];
    for (int k = 0; k < 300; k++)
        longkey[k] = (char)(k * 7);
    assert_int_equal(tw_schedule_keyed(t, longkey, 300, 5 * MS, count_fn, &l, NULL), 0);
    assert_int_equal(tw_schedule_keyed(t, longkey, 299, 5 * MS, count_fn, &l, NULL), 0);
    assert_int_equal(tw_pending(t), 2);
    assert_int_equal(tw_schedule_keyed(t, longkey, 300, 6 * MS, count_fn, &l, NULL), 0);
    assert_int_equal(tw_pending(t), 2);
    assert_check(t);
    assert_int_equal(tw_advance(t, 100 * MS), 2);
    assert_int_equal(l, 2);

    /* at the edge of the inline room (extra.h: 40 bytes), seen in
     * memory_bytes with the task's record reused: a 40-byte key is kept in
     * the record, a 41-byte one takes exactly 41 bytes of its own, given
     * back when the task goes */
    struct tw_stats s0, s1;
    tw_id eid;
    assert_int_equal(tw_schedule_keyed(t, longkey, 40, 5 * MS, count_fn, &l, &eid), 0);
    assert_int_equal(tw_cancel(t, eid), 0);
    tw_stats(t, &s0);
    assert_int_equal(tw_schedule_keyed(t, longkey, 40, 5 * MS, count_fn, &l, &eid), 0);
    tw_stats(t, &s1);
    assert_int_equal(s1.memory_bytes, s0.memory_bytes);
    assert_int_equal(tw_cancel(t, eid), 0);
    assert_int_equal(tw_schedule_keyed(t, longkey, 41, 5 * MS, count_fn, &l, &eid), 0);
    tw_stats(t, &s1);
    assert_int_equal(s1.memory_bytes, s0.memory_bytes + 41);
    assert_int_equal(tw_cancel_keyed(t, longkey, 41), 0);
    tw_stats(t, &s1);
    assert_int_equal(s1.memory_bytes, s0.memory_bytes);

    /* many keys: the map grows and shrinks correctly */
    char key[16];
    for (int k = 0; k < 1000; k++) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, (uint64_t)(k + 1) * MS, count_fn, &a, NULL), 0);
    }
    for (int k = 0; k < 1000; k += 2) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), 0);
    }
    assert_check(t);
    assert_int_equal(tw_pending(t), 500);
    for (int k = 1; k < 1000; k += 2) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), 0);
    }
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
}

static void test_max_pending(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.max_pending = 3;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    int n = 0;
    tw_id ids[3], extra = 42;
    for (int k = 0; k < 3; k++)
        assert_int_equal(tw_schedule(t, MS, count_fn, &n, &ids[k]), 0);
    assert_int_equal(tw_schedule(t, MS, count_fn, &n, &extra), -EAGAIN);
    assert_int_equal(tw_schedule_at(t, MS, count_fn, &n, &extra), -EAGAIN);
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, count_fn, &n, &extra), -EAGAIN);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, count_fn, &n, &extra), -EAGAIN);
    assert_int_equal(extra, 42);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.rejected, 4);
    assert_int_equal(s.pending, 3);
    assert_int_equal(tw_cancel(t, ids[0]), 0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, MS, count_fn, &n, NULL), 0);
    /* replacing a key does not add a task, so it is allowed at the bound */
    assert_int_equal(tw_schedule_keyed(t, "k", 1, 2 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 5 * MS), 3);
    assert_int_equal(n, 3);
    tw_destroy(t);
}

/* A bound past 32 bits is kept whole: 2^32 + 1 admits a second task
 * (cut to 32 bits it would be 1), manual and threaded alike. */
static void test_max_pending_wide(void **state)
{
    (void)state;
    for (int threaded = 0; threaded <= 1; threaded++) {
        struct fake_clock c;
        struct atomic_clock ac = { 0, 0 };
        struct tw_options o = manual_opts(&c, 0, MS, 64);
        if (threaded) { /* the driver reads the clock too: an atomic one */
            o.threaded = 1;
            o.clock = atomic_clock_read;
            o.clock_ctx = &ac;
        }
        o.max_pending = ((uint64_t)1 << 32) + 1;
        tw_timer *t;
        assert_int_equal(tw_create(&t, &o), 0);
        int n = 0;
        tw_id a, b;
        assert_int_equal(tw_schedule(t, SEC, count_fn, &n, &a), 0);
        assert_int_equal(tw_schedule(t, SEC, count_fn, &n, &b), 0);
        struct tw_stats s;
        tw_stats(t, &s);
        assert_int_equal(s.rejected, 0);
        assert_int_equal(s.pending, 2);
        assert_int_equal(tw_cancel(t, a), 0);
        assert_int_equal(tw_cancel(t, b), 0);
        assert_int_equal(tw_pending(t), 0);
        tw_destroy(t);
    }
}

static void reenter_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    int *rc = arg;
    *rc = tw_advance(t, tw_now(t) + SEC);
}

struct sib {
    tw_id other;
    int cancel_rc;
    int fired;
};

static void cancel_sibling_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    struct sib *s = arg;
    s->fired++;
    s->cancel_rc = tw_cancel(t, s->other);
}

static int chain_count;
static void chain_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    /* due immediately: must wait for the next advance, not loop forever */
    if (++chain_count < 5)
        assert_int_equal(tw_schedule(t, 0, chain_fn, NULL, NULL), 0);
}

static void test_callbacks_reenter(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int rc = 0;
    assert_int_equal(tw_schedule(t, MS, reenter_fn, &rc, NULL), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(rc, -EDEADLK);
    assert_int_equal(tw_advance(NULL, 0), -EINVAL);

    /* a callback cancels a sibling due in the same advance: it never runs */
    struct sib s1 = { 0 }, s2 = { 0 };
    tw_id i1, i2;
    assert_int_equal(tw_schedule(t, MS, cancel_sibling_fn, &s1, &i1), 0);
    assert_int_equal(tw_schedule(t, MS, cancel_sibling_fn, &s2, &i2), 0);
    s1.other = i2;
    s2.other = i1;
    assert_int_equal(tw_advance(t, 2 * MS), 1);
    assert_int_equal(s1.fired + s2.fired, 1);
    assert_int_equal(s1.fired ? s1.cancel_rc : s2.cancel_rc, 0);
    assert_int_equal(tw_pending(t), 0);

    chain_count = 0;
    assert_int_equal(tw_schedule(t, 0, chain_fn, NULL, NULL), 0);
    assert_int_equal(tw_advance(t, 3 * MS), 1);
    assert_int_equal(tw_advance(t, 3 * MS), 1);
    assert_int_equal(chain_count, 2);
    while (tw_pending(t))
        tw_advance(t, tw_now(t));
    assert_int_equal(chain_count, 5);
    assert_check(t);
    tw_destroy(t);
}

/* From a callback, the tasks collected by the same tw_advance and not yet
 * run are still pending: tw_next_deadline reports them (due now), not
 * -ENOENT. */
static int next_rc = 1;
static uint64_t next_d;
static size_t next_pending;
static void next_from_callback(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    if ((*(int *)arg)++)
        return;
    next_pending = tw_pending(t);
    next_rc = tw_next_deadline(t, &next_d);
}

static void test_next_deadline_from_callback(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_schedule(t, 5 * MS, next_from_callback, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 5 * MS), 2);
    assert_int_equal(n, 2);
    assert_int_equal(next_pending, 1); /* the other one, not yet run */
    assert_int_equal(next_rc, 0);
    assert_int_equal(next_d, 5 * MS); /* due now */
    assert_int_equal(tw_next_deadline(t, &next_d), -ENOENT);
    tw_destroy(t);
}

static void test_next_deadline_loop(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    uint64_t d;
    assert_int_equal(tw_next_deadline(NULL, &d), -EINVAL);
    assert_int_equal(tw_next_deadline(t, NULL), -EINVAL);
    assert_int_equal(tw_next_deadline(t, &d), -ENOENT);
    struct recorder r = { 0 };
    static struct tag tags[500];
    uint64_t delays[500];
    uint64_t x = 12345;
    for (int k = 0; k < 500; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        delays[k] = (x >> 20) % (3600 * SEC);
        tags[k].r = &r;
        tags[k].n = k;
        assert_int_equal(tw_schedule(t, delays[k], record_fn, &tags[k], NULL), 0);
    }
    /* An event loop: sleep until tw_next_deadline, advance, repeat. */
    int wakeups = 0;
    while (tw_next_deadline(t, &d) == 0) {
        assert_true(d >= tw_now(t) || tw_pending(t));
        assert_true(tw_advance(t, d) >= 0);
        wakeups++;
        assert_true(wakeups < 5000);
    }
    assert_int_equal(r.n, 500);
    for (int k = 0; k < 500; k++) {
        struct tag *tg = (struct tag *)r.args[k];
        uint64_t due = delays[tg->n];
        assert_true(r.at[k] >= due);      /* never early */
        assert_true(r.at[k] < due + MS);  /* at most one tick late */
        if (k) { /* deadline order, to the tick */
            uint64_t before = delays[((struct tag *)r.args[k - 1])->n];
            assert_true((before + MS - 1) / MS <= (due + MS - 1) / MS);
        }
    }
    tw_destroy(t);
}

static tw_timer *not_draining; /* a timer no drain is running on */

static void drain_each(tw_timer *t, tw_id id, void *arg)
{
    int *ctx = tw_drain_arg(t);
    assert_non_null(ctx);
    assert_null(tw_drain_arg(not_draining)); /* NULL: not a drain of it */
    assert_true(id != 0);
    (*ctx)++;
    (*(int *)arg) += 100;
}

static void test_drain(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int args[4] = { 0 };
    assert_int_equal(tw_schedule(t, MS, count_fn, &args[0], NULL), 0);
    assert_int_equal(tw_schedule(t, 10 * SEC, count_fn, &args[1], NULL), 0);
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, count_fn, &args[2], NULL), 0);
    assert_int_equal(tw_schedule_keyed(t, "key", 3, MS, count_fn, &args[3], NULL), 0);
    int handed = 0;
    struct fake_clock c2;
    not_draining = mk(&c2, 0, MS, 64);
    assert_int_equal(tw_drain(t, drain_each, &handed), 4);
    assert_int_equal(handed, 4);
    tw_destroy(not_draining);
    not_draining = NULL;
    for (int k = 0; k < 4; k++)
        assert_int_equal(args[k], 100); /* each got its own arg, unfired */
    assert_null(tw_drain_arg(t));
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel_keyed(t, "key", 3), -ENOENT);
    assert_int_equal(tw_advance(t, 100 * SEC), 0);
    assert_int_equal(tw_drain(t, NULL, NULL), 0);
    assert_int_equal(tw_drain(NULL, NULL, NULL), 0);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.drained, 4);
    assert_check(t);
    tw_destroy(t);
}

/* A drain of another timer from within a drain's callback: each drain
 * keeps its own arg, and the outer one's is still there, inside the inner
 * drain and after it. */
struct nested_drain {
    tw_timer *outer, *inner;
    int outer_ctx, inner_ctx;
    int outer_calls, inner_calls;
};

static struct nested_drain *nested;

static void nested_inner_each(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    assert_ptr_equal(t, nested->inner);
    assert_ptr_equal(tw_drain_arg(nested->inner), &nested->inner_ctx);
    assert_ptr_equal(tw_drain_arg(nested->outer), &nested->outer_ctx);
    nested->inner_calls++;
}

static void nested_outer_each(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    assert_ptr_equal(tw_drain_arg(t), &nested->outer_ctx);
    if (nested->outer_calls++ == 0) {
        assert_int_equal(tw_drain(nested->inner, nested_inner_each, &nested->inner_ctx), 2);
        assert_null(tw_drain_arg(nested->inner)); /* its drain is over */
    }
    assert_ptr_equal(tw_drain_arg(t), &nested->outer_ctx); /* still ours */
}

static void test_drain_nested(void **state)
{
    (void)state;
    struct fake_clock c1, c2;
    struct nested_drain nd = { .outer = mk(&c1, 0, MS, 64), .inner = mk(&c2, 0, MS, 64) };
    nested = &nd;
    int n = 0;
    for (int k = 0; k < 3; k++)
        assert_int_equal(tw_schedule(nd.outer, (uint64_t)(k + 1) * MS, count_fn, &n, NULL), 0);
    for (int k = 0; k < 2; k++)
        assert_int_equal(tw_schedule(nd.inner, (uint64_t)(k + 1) * SEC, count_fn, &n, NULL), 0);
    assert_int_equal(tw_drain(nd.outer, nested_outer_each, &nd.outer_ctx), 3);
    assert_int_equal(nd.outer_calls, 3);
    assert_int_equal(nd.inner_calls, 2);
    assert_null(tw_drain_arg(nd.outer));
    assert_int_equal(tw_pending(nd.outer) + tw_pending(nd.inner), 0);
    assert_int_equal(n, 0); /* handed back, never fired */
    nested = NULL;
    tw_destroy(nd.inner);
    tw_destroy(nd.outer);
}

/* Drains nested more than a byte counts, on one timer: each callback of a
 * drain starts the next drain from inside it, 300 deep, one task each.
 * At every depth the tasks not yet handed back (none of them due) wait on
 * the expired list, which the checker allows only while a drain is under
 * way; then every one is handed back exactly once. */
enum { DEEP_DRAINS = 300 };
static int deep_calls;
static size_t deep_handed;
static void deep_drain_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    assert_check(t); /* at every depth: a count that wraps reads 0 at one */
    if (++deep_calls < DEEP_DRAINS)
        deep_handed += tw_drain(t, deep_drain_fn, NULL);
}

static void test_drain_nested_past_8_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    for (int k = 0; k < DEEP_DRAINS; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k + 1) * SEC, count_fn, NULL, NULL), 0);
    deep_calls = 0;
    deep_handed = 0;
    deep_handed += tw_drain(t, deep_drain_fn, NULL);
    assert_int_equal(deep_calls, DEEP_DRAINS);
    assert_int_equal(deep_handed, DEEP_DRAINS);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.drained, DEEP_DRAINS);
    assert_check(t);
    tw_destroy(t);
}

/* tw_drain from a periodic task's own callback hands that task back too
 * (it is running, in no list) along with what is pending, and it is not
 * re-armed. */
static int self_drain_n = -1, self_drain_handed;
static void self_drain_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (*(int *)arg)++;
    self_drain_n = (int)tw_drain(t, drain_each, &self_drain_handed);
}

static void test_drain_from_periodic(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int self = 0, other = 0;
    assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, self_drain_fn, &self, NULL), 0);
    assert_int_equal(tw_schedule_every(t, 5 * MS, MS, TW_FIXED_DELAY, count_fn, &other, NULL), 0);
    assert_int_equal(tw_schedule(t, SEC, count_fn, &other, NULL), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(self_drain_n, 3);
    assert_int_equal(self_drain_handed, 3);
    assert_int_equal(self, 1 + 100); /* ran once, then handed back */
    assert_int_equal(other, 200);    /* both of the others handed back */
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * SEC), 0); /* not re-armed */
    assert_int_equal(self, 101);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.fired, 1);
    assert_int_equal(s.drained, 3);
    assert_check(t);
    tw_destroy(t);
}

/* tw_drain with no callback (and no periodic task running) drops the
 * lists whole and frees the slots in one pass (no list is walked): tasks
 * on several levels, cancels whose unlinks still wait in the ring, from a
 * callback tasks already on the expired list, and keyed and periodic
 * tasks, whose records and keys go as a cancel's. Every id and key goes
 * stale, nothing fires, the counts hold, and the memory is reused. */
static size_t drop_rc;

static void drop_all_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (*(int *)arg)++;
    drop_rc = tw_drain(t, NULL, NULL);
}

static void test_drain_drops_plain_whole(void **state)
{
    (void)state;
    enum { N = 3000 };
    static tw_id ids[N];
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int fired = 0;
    size_t live = 0;
    for (int i = 0; i < N; i++) /* 1 ms to ~3 days: four levels */
        assert_int_equal(tw_schedule(t, (uint64_t)(i + 1) * (i % 4 ? 7 : 86413) * MS, count_fn,
                                     &fired, &ids[i]), 0);
    for (int i = 1; i < N; i += 3) /* the last 16 wait in the ring */
        assert_int_equal(tw_cancel(t, ids[i]), 0);
    for (int i = 0; i < N; i++) /* slot 0 and the top slot among them */
        live += i % 3 != 1;
    struct tw_stats s0, s;
    tw_stats(t, &s0);
    assert_true(s0.levels >= 4);
    assert_int_equal(tw_drain(t, NULL, NULL), live);
    assert_int_equal(tw_pending(t), 0);
    tw_stats(t, &s);
    assert_int_equal(s.drained, s0.drained + live);
    assert_int_equal(s.cancelled, s0.cancelled);
    assert_int_equal(s.queued_buckets, 0);
    assert_int_equal(s.memory_bytes, s0.memory_bytes); /* kept for reuse */
    assert_check(t);
    uint64_t d;
    for (int i = 0; i < N; i++) {
        assert_int_equal(tw_cancel(t, ids[i]), -ENOENT);
        assert_int_equal(tw_deadline(t, ids[i], &d), -ENOENT);
    }
    assert_int_equal(tw_next_deadline(t, &d), -ENOENT);
    assert_int_equal(tw_advance(t, 10 * 86400 * SEC), 0);
    assert_int_equal(fired, 0);

    /* the slots come back: no new memory, the old ids still stale */
    for (int i = 0; i < N; i++)
        assert_int_equal(tw_schedule(t, (uint64_t)(i % 50 + 1) * MS, count_fn, &fired, NULL), 0);
    tw_stats(t, &s);
    assert_int_equal(s.memory_bytes, s0.memory_bytes);
    for (int i = 0; i < N; i++)
        assert_int_equal(tw_cancel(t, ids[i]), -ENOENT);
    assert_check(t);
    uint64_t now = tw_now(t);
    assert_int_equal(tw_advance(t, now + 100 * MS), N);
    assert_int_equal(fired, N);

    /* from a callback: the tasks due with it wait on the expired list and
     * are dropped with the rest, unfired */
    fired = 0;
    now = tw_now(t);
    assert_int_equal(tw_schedule(t, MS, drop_all_fn, &fired, NULL), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tw_schedule(t, MS, count_fn, &fired, NULL), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_advance(t, now + 2 * SEC), 1);
    assert_int_equal(drop_rc, 20);
    assert_int_equal(fired, 1);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);

    /* keyed and periodic tasks among plain ones: their records and keys
     * go as a cancel's do, and the keys can be used again */
    now = tw_now(t);
    tw_stats(t, &s0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(tw_schedule(t, (uint64_t)(i + 1) * MS, count_fn, &fired, &ids[i]), 0);
    char key[8];
    for (int i = 0; i < 50; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, (uint64_t)(i + 1) * SEC, count_fn,
                                           &fired, &ids[100 + i]), 0);
        assert_int_equal(tw_schedule_every(t, MS, (uint64_t)(i + 1) * MS, TW_FIXED_RATE, count_fn,
                                           &fired, &ids[150 + i]), 0);
    }
    assert_int_equal(tw_drain(t, NULL, NULL), 200);
    tw_stats(t, &s);
    assert_int_equal(s.drained, s0.drained + 200);
    assert_check(t);
    for (int i = 0; i < 200; i++)
        assert_int_equal(tw_cancel(t, ids[i]), -ENOENT);
    for (int i = 0; i < 50; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), -ENOENT);
    }
    assert_int_equal(tw_advance(t, now + 100 * SEC), 0);
    assert_int_equal(fired, 1);
    /* the records and keys come back for reuse: no new memory */
    uint64_t mem = s.memory_bytes;
    for (int i = 0; i < 50; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, MS, count_fn, &fired, NULL), 0);
        assert_int_equal(tw_schedule_every(t, MS, MS, TW_FIXED_RATE, count_fn, &fired, &ids[i]), 0);
    }
    tw_stats(t, &s);
    assert_int_equal(s.memory_bytes, mem);
    now = tw_now(t);
    assert_int_equal(tw_advance(t, now + MS), 100);
    assert_int_equal(fired, 101);
    assert_int_equal(tw_drain(t, NULL, NULL), 50); /* the periodic ones */
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
}

/* A drop from a callback, after the same callback cancelled a task that
 * waits beside it on the expired list: that cancel's unlink is still in
 * the ring, and the drop must settle it before it resets the list's head,
 * or the unlink writes the head back towards the dropped tasks (the list
 * would then lead into freed slots). Which task the cancel takes decides
 * whether its neighbours are the head, so each is taken in turn. */
struct cancel_drop {
    tw_id ids[11];
    int k;          /* the task to cancel, by the order of the schedules */
    int fired;
    int cancel_rc;
    size_t dropped;
};

static void cancel_then_drop_fn(tw_timer *t, tw_id id, void *arg)
{
    struct cancel_drop *cd = arg;
    if (cd->fired++)
        return; /* the drop below leaves none to fire: never reached */
    tw_id target = cd->ids[cd->k] != id ? cd->ids[cd->k] : cd->ids[(cd->k + 1) % 11];
    cd->cancel_rc = tw_cancel(t, target);
    cd->dropped = tw_drain(t, NULL, NULL);
}

static void test_drop_from_callback_after_cancel(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int later = 0;
    for (int k = 0; k < 11; k++) {
        struct cancel_drop cd = { .k = k };
        uint64_t now = tw_now(t);
        for (int i = 0; i < 11; i++) /* all due in one tick */
            assert_int_equal(tw_schedule(t, MS, cancel_then_drop_fn, &cd, &cd.ids[i]), 0);
        assert_int_equal(tw_schedule(t, SEC, cancel_then_drop_fn, &cd, NULL), 0);
        assert_int_equal(tw_advance(t, now + 2 * SEC), 1);
        assert_int_equal(cd.fired, 1);
        assert_int_equal(cd.cancel_rc, 0);
        assert_int_equal(cd.dropped, 10); /* 9 beside it, and the one due later */
        assert_int_equal(tw_pending(t), 0);
        assert_check(t);
        for (int i = 0; i < 11; i++)
            assert_int_equal(tw_cancel(t, cd.ids[i]), -ENOENT);
        /* the expired list works on: a task fires once, and no other */
        now = tw_now(t);
        assert_int_equal(tw_schedule(t, MS, count_fn, &later, NULL), 0);
        assert_int_equal(tw_advance(t, now + 2 * SEC), 1);
        assert_int_equal(later, k + 1);
        assert_int_equal(cd.fired, 1);
        assert_check(t);
    }
    tw_destroy(t);
}

/* tw_destroy from a callback of its own timer cannot return an error
 * (void) and must not go on: the loop that called the callback would run
 * over freed memory. It aborts with a message, from a firing and from a
 * drain. A callback may destroy another timer, a firing's or a drain's. */
static void destroy_timer_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    (void)arg;
    tw_destroy(t);
}

static void destroy_other_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    tw_destroy(arg);
}

static void destroy_in_advance(void *arg)
{
    (void)arg;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_schedule(t, MS, destroy_timer_fn, NULL, NULL);
    tw_schedule(t, MS, noop_fn, NULL, NULL);
    tw_advance(t, 2 * MS);
}

static void destroy_in_drain(void *arg)
{
    (void)arg;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_schedule(t, MS, noop_fn, NULL, NULL);
    tw_schedule(t, 2 * MS, noop_fn, NULL, NULL);
    tw_drain(t, destroy_timer_fn, NULL);
}

static void test_destroy_from_callback(void **state)
{
    (void)state;
    const char *msg = "twheel: tw_destroy called from a callback of the same timer";
    assert_true(aborts_with(destroy_in_advance, NULL, msg));
    assert_true(aborts_with(destroy_in_drain, NULL, msg));

    struct fake_clock c1, c2;
    tw_timer *t = mk(&c1, 0, MS, 64), *other = mk(&c2, 0, MS, 64);
    int fired = 0;
    assert_int_equal(tw_schedule(other, MS, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_schedule(t, MS, destroy_other_fn, other, NULL), 0);
    assert_int_equal(tw_advance(t, MS), 1);
    assert_int_equal(fired, 0); /* other is gone, its task dropped */
    assert_int_equal(tw_pending(t), 0);
    /* and from a drain's callback: a drain of t is no callback of other */
    other = mk(&c2, 0, MS, 64);
    assert_int_equal(tw_schedule(other, MS, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_schedule(t, MS, destroy_other_fn, other, NULL), 0);
    assert_int_equal(tw_drain(t, destroy_other_fn, NULL), 1);
    assert_int_equal(fired, 0);
    assert_int_equal(tw_pending(t), 0);
    tw_destroy(t);
}

/* wheel.c's placement rule, seen through the levels it makes: a task goes
 * to the finest level k whose 2W blocks, counted from the current tick
 * rounded down to level k's width, reach its tick, and a level is made
 * the first time a task needs it. With 1 ms ticks and W = 64, level 0
 * holds ticks cur .. cur + 127, and level 1 the 128 blocks of 64 ticks
 * from cur's own block. A deadline already past is due now and needs no level
 * above 0, on the fast path and on the checked one (max_pending) alike. */
static void test_level_boundaries(void **state)
{
    (void)state;
    const struct { uint64_t start_ms, delay_ms, levels; } cases[] = {
        /* a level holds 2W = 128 of its blocks from the current one */
        { 0, 127, 1 },   { 0, 128, 2 },   { 10, 127, 1 },  { 10, 128, 2 },
        { 0, 8191, 2 },  { 0, 8192, 3 },  { 10, 8181, 2 }, { 10, 8182, 3 },
        { 70, 8185, 2 }, { 70, 8186, 3 }, /* cur's block is 64 .. 127 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct fake_clock c;
        tw_timer *t = mk(&c, cases[k].start_ms * MS, MS, 64);
        int n = 0;
        uint64_t due = (cases[k].start_ms + cases[k].delay_ms) * MS;
        assert_int_equal(tw_schedule(t, cases[k].delay_ms * MS, count_fn, &n, NULL), 0);
        struct tw_stats s;
        tw_stats(t, &s);
        assert_int_equal(s.levels, cases[k].levels);
        assert_int_equal(tw_check(t, stderr), 0);
        assert_int_equal(tw_advance(t, due - 1), 0);
        assert_int_equal(tw_advance(t, due), 1);
        assert_int_equal(n, 1);
        tw_destroy(t);
    }
    for (int limited = 0; limited < 2; limited++) {
        struct fake_clock c;
        struct tw_options o = manual_opts(&c, 10 * SEC, MS, 64);
        o.max_pending = limited ? 100 : 0;
        tw_timer *t;
        assert_int_equal(tw_create(&t, &o), 0);
        int n = 0;
        assert_int_equal(tw_schedule_at(t, 0, count_fn, &n, NULL), 0);
        assert_int_equal(tw_schedule_at(t, 5 * SEC, count_fn, &n, NULL), 0);
        struct tw_stats s;
        tw_stats(t, &s);
        assert_int_equal(s.levels, 1);
        assert_int_equal(tw_check(t, stderr), 0);
        assert_int_equal(tw_advance(t, 10 * SEC), 2); /* due now */
        assert_int_equal(n, 2);
        tw_destroy(t);
    }
}

/* A coarse bucket comes due at its start, when its tasks move down a
 * level, so how soon that start can come after a task is placed is how
 * soon an idle timer may wake with nothing due. Placed by its level's 2W
 * blocks, a task due delta from now sits in a bucket that starts more
 * than delta * (W - 1) / (2W - 1) from now (wheel.c), whatever the
 * clock's alignment: here just before, at, and just after boundaries of
 * levels 1 to 4, for delays from 2W ticks to ten days. (Placed by W
 * blocks, a task 263 s out placed 1 s before a level-3 boundary made the
 * timer wake 1 s later.) */
static void test_coarse_bucket_not_soon(void **state)
{
    (void)state;
    const uint64_t ticks[] = { 64, 4096, 262144, 16777216 }; /* level widths */
    const uint64_t delays_ms[] = { 128, 129, 200, 4095, 8191, 8192, 9000, 263000,
                                   524287, 524288, 600000, 3600000, 86400000,
                                   864000000 };
    const int64_t offsets_ms[] = { -16000, -1000, -1, 0, 1, 1000 };
    for (size_t a = 0; a < sizeof ticks / sizeof ticks[0]; a++)
        for (size_t b = 0; b < sizeof offsets_ms / sizeof offsets_ms[0]; b++)
            for (size_t k = 0; k < sizeof delays_ms / sizeof delays_ms[0]; k++) {
                uint64_t start = (uint64_t)((int64_t)(1000 * ticks[a]) + offsets_ms[b]) * MS;
                struct fake_clock c;
                tw_timer *t = mk(&c, start, MS, 64);
                int n = 0;
                uint64_t delay = delays_ms[k] * MS, next;
                assert_int_equal(tw_schedule(t, delay, count_fn, &n, NULL), 0);
                assert_int_equal(tw_next_deadline(t, &next), 0);
                if (next - start <= delay / 127 * 63) {
                    fprintf(stderr, "start %llu ms, delay %llu ms: next work after %llu ms\n",
                            (unsigned long long)(start / MS),
                            (unsigned long long)delays_ms[k],
                            (unsigned long long)((next - start) / MS));
                    fail();
                }
                tw_destroy(t);
            }
}

static void test_stats_and_misc(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int n = 0;
    tw_id a;
    assert_int_equal(tw_schedule(t, 2 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t, 5 * SEC, count_fn, &n, &a), 0);
    assert_int_equal(tw_schedule(t, 10 * SEC, count_fn, &n, NULL), 0);
    assert_int_equal(tw_cancel(t, a), 0);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.pending, 2);
    assert_int_equal(s.scheduled, 3);
    assert_int_equal(s.cancelled, 1);
    assert_int_equal(s.fired, 0);
    /* no lateness measured yet: every figure of it 0 */
    assert_int_equal(s.late_max_ns, 0);
    assert_int_equal(s.late_p50_ns, 0);
    assert_int_equal(s.late_p99_ns, 0);
    assert_int_equal(s.levels, 3);
    assert_int_equal(s.queued_buckets, 2);
    assert_int_equal(s.entry_bytes, 36);
    assert_true(s.memory_bytes > 0);
    assert_int_equal(tw_advance(t, 20 * SEC), 2);
    tw_stats(t, &s);
    assert_int_equal(s.fired, 2);
    assert_int_equal(s.advances, 1);
    assert_true(s.cascaded >= 1); /* the 10 s task came down the levels */
    assert_true(s.bucket_pops >= 2);
    assert_int_equal(s.queued_buckets, 0);
    /* bucket_pops counts exactly: tasks due in three ticks sit in three
     * level-0 buckets, whatever the number of tasks in each */
    struct fake_clock c2;
    tw_timer *t2 = mk(&c2, 0, MS, 64);
    assert_int_equal(tw_schedule(t2, 1 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t2, 2 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t2, 2 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t2, 3 * MS, count_fn, &n, NULL), 0);
    tw_stats(t2, &s);
    assert_int_equal(s.queued_buckets, 3);
    assert_int_equal(s.bucket_pops, 0);
    assert_int_equal(tw_advance(t2, 2 * MS), 3);
    tw_stats(t2, &s);
    assert_int_equal(s.bucket_pops, 2);
    assert_int_equal(tw_advance(t2, 10 * MS), 1);
    tw_stats(t2, &s);
    assert_int_equal(s.bucket_pops, 3);
    assert_int_equal(s.advances, 2);
    assert_int_equal(s.cascaded, 0);
    /* a periodic task makes room for its period's re-arms, and no more:
     * 10 ms fits level 0, so no level is added */
    assert_int_equal(tw_schedule_every(t2, MS, 10 * MS, TW_FIXED_RATE, count_fn, &n, NULL), 0);
    tw_stats(t2, &s);
    assert_int_equal(s.levels, 1);
    tw_destroy(t2);
    tw_stats(t, NULL);
    tw_stats(NULL, &s); /* every field zeroed, not just some */
    struct tw_stats zero;
    memset(&zero, 0, sizeof(zero));
    assert_memory_equal(&s, &zero, sizeof(s));
    assert_int_equal(tw_now(NULL), 0);
    assert_int_equal(tw_pending(NULL), 0);
    assert_int_equal(tw_check(NULL, NULL), -EINVAL);
    assert_int_equal(tw_check(t, NULL), 0);
    assert_int_equal(tw_stop(t, NULL, NULL), -EINVAL); /* manual timer */
    assert_int_equal(tw_wake(t), -EINVAL);             /* manual timer */
    assert_int_equal(tw_wake(NULL), -EINVAL);
    assert_string_equal(tw_strerror(-ENOENT), "no such pending task");
    assert_string_equal(tw_strerror(-EINVAL), "invalid argument");
    assert_string_equal(tw_strerror(12345), "unknown error");
    /* read whole: a code with bits above a known one's is unknown */
    assert_string_equal(tw_strerror(-EINVAL - 0x10000), "unknown error");
    assert_string_equal(tw_strerror(-EINVAL + 0x100), "unknown error");
    /* the library's version is the headers' */
    assert_int_equal(tw_version(), TW_VERSION_HEX);
    assert_int_equal(tw_version() >> 16, TW_VERSION_MAJOR);
    assert_int_equal((tw_version() >> 8) & 0xff, TW_VERSION_MINOR);
    assert_int_equal(tw_version() & 0xff, TW_VERSION_PATCH);
    /* every code the headers document has its own description */
    int codes[] = { 0, -EINVAL, -ENOMEM, -ENOENT, -EAGAIN, -EDEADLK, -EPERM,
                    -ESHUTDOWN, -EALREADY, -EFAULT, -EBUSY };
    size_t ncodes = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < ncodes; i++) {
        assert_string_not_equal(tw_strerror(codes[i]), "unknown error");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(tw_strerror(codes[i]), tw_strerror(codes[j]));
    }
    tw_destroy(t);
}

static void test_ids_never_reissued(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    /* the same slot is reused over and over (LIFO): every id differs */
    tw_id prev = 0;
    for (int k = 0; k < 10000; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, &id), 0);
        assert_true(id != 0);
        assert_true(id != prev);
        assert_int_equal(tw_cancel(t, id), 0);
        assert_int_equal(tw_cancel(t, prev), -ENOENT);
        prev = id;
    }
    tw_destroy(t);
}

static void test_capacity_preallocates(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.allocator = counting(&a);
    o.capacity = 5000;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_schedule(t, 3 * SEC, noop_fn, NULL, NULL), 0); /* levels */
    long before = a.allocs;
    tw_id ids[5000];
    for (int k = 1; k < 5000; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k % 50) * MS, noop_fn, NULL, &ids[k]), 0);
    /* churn at capacity: the cancels' deferred unlinks have room too */
    for (int k = 1; k < 5000; k++) {
        assert_int_equal(tw_cancel(t, ids[k]), 0);
        assert_int_equal(tw_schedule(t, (uint64_t)(k % 70) * MS, noop_fn, NULL, &ids[k]), 0);
    }
    assert_int_equal(a.allocs, before); /* no allocation: the room was made */
    int more = 0; /* the pool grows past it (the slack the cancels had is
                     theirs: their slots wait to be unlinked now) */
    while (a.allocs == before && more < 64) {
        assert_int_equal(tw_schedule(t, MS, noop_fn, NULL, NULL), 0);
        more++;
    }
    assert_int_equal(a.allocs, before + 1);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
    /* a capacity the allocator cannot give fails creation cleanly; one
     * beyond what a shard can ever hold is refused before anything is
     * allocated (a shard's limit is lower with 32 or 64 shards: the id
     * has room for fewer slots) */
    a.fail_above = 64u << 20;
    tw_timer *untouched = (tw_timer *)&a;
    const struct { int threaded; uint32_t shards; uint64_t limit; } lim[] = {
#if SIZE_MAX > UINT32_MAX
        { 0, 0, 238609294u }, { 1, 16, 16ull * 238609294u },
        { 1, 32, 32ull * 134217727u }, { 1, 64, 64ull * 67108863u },
#else /* a 32-bit size_t: a shard's pool stays within 2 GiB */
        { 0, 0, 59652323u }, { 1, 16, 16ull * 59652323u },
        { 1, 32, 32ull * 59652323u }, { 1, 64, 64ull * 59652323u },
#endif
    };
    for (size_t k = 0; k < sizeof lim / sizeof lim[0]; k++) {
        o.threaded = lim[k].threaded;
        o.shards = lim[k].shards;
        o.capacity = lim[k].limit;
        t = untouched;
        assert_int_equal(tw_create(&t, &o), -ENOMEM);
        long allocs = a.allocs, failed = a.failed;
        o.capacity = lim[k].limit + 1;
        assert_int_equal(tw_create(&t, &o), -EINVAL);
        o.capacity = UINT64_MAX;
        assert_int_equal(tw_create(&t, &o), -EINVAL);
        assert_int_equal(a.allocs, allocs); /* nothing was even asked for */
        assert_int_equal(a.failed, failed);
        assert_ptr_equal(t, untouched);
        assert_int_equal(a.live, 0);
    }
}

/* A cancelled task is never cascaded, though its unlink waits in the ring
 * (wheel.c, "Deferred unlink"): a collect settles the ring first, so only
 * the live task of the coarse bucket comes down a level. */
static void test_cancelled_not_cascaded(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int fired = 0;
    tw_id x;
    assert_int_equal(tw_schedule(t, 1000 * MS, count_fn, &fired, &x), 0); /* level 1 */
    assert_int_equal(tw_schedule(t, 1000 * MS, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_cancel(t, x), 0);
    assert_int_equal(tw_advance(t, 1000 * MS), 1);
    assert_int_equal(fired, 1);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.cancelled, 1);
    assert_int_equal(s.fired, 1);
    assert_int_equal(s.cascaded, 1);
    assert_check(t);
    tw_destroy(t);
}

/* Nothing shrinks, and what a peak made is reused: after 50,000 tasks
 * (levels, pool, keyed records and their key table) are all cancelled
 * the timer holds the same bytes, and a second peak of the same size,
 * at other delays, allocates nothing at all (its 8-byte keys fit the
 * record's inline room; a longer key is allocated and freed with its
 * task). */
static void test_peak_kept_and_reused(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.allocator = counting(&a);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    enum { N = 50000 };
    static tw_id ids[N];
    int fired = 0;
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < N; k++) {
            uint64_t d = (uint64_t)((k * 7919 + round * 104729) % 3600000 + 1) * MS;
            if (k % 10 == 0) {
                char key[8];
                memcpy(key, &k, sizeof k);
                memset(key + sizeof k, round, sizeof key - sizeof k);
                assert_int_equal(tw_schedule_keyed(t, key, sizeof key, d, count_fn,
                                                   &fired, &ids[k]), 0);
            } else {
                assert_int_equal(tw_schedule(t, d, count_fn, &fired, &ids[k]), 0);
            }
        }
        struct tw_stats peak;
        tw_stats(t, &peak);
        long allocs = a.allocs, frees = a.frees;
        assert_int_equal(peak.memory_bytes, a.bytes);
        for (int k = 0; k < N; k++)
            assert_int_equal(tw_cancel(t, ids[k]), 0);
        struct tw_stats after;
        tw_stats(t, &after);
        assert_int_equal(after.pending, 0);
        assert_int_equal(after.memory_bytes, peak.memory_bytes); /* kept */
        assert_int_equal(a.allocs, allocs);
        assert_int_equal(a.frees, frees); /* nothing given back */
        if (round == 0)
            a.fail_at = 1; /* from here any allocation fails a schedule above */
        assert_check(t);
    }
    assert_int_equal(a.failed, 0); /* the second peak asked for nothing */
    assert_int_equal(tw_advance(t, 7200 * SEC), 0);
    assert_int_equal(fired, 0);
    tw_destroy(t);
    assert_int_equal(a.live, 0);
}

/* The pool grows by mremap with the default allocator (once it reaches
 * 1 MiB; 200,000 tasks take it to ~7 MB) and by alloc, copy, free with a
 * user's: both must keep every task and account the same. */
static void test_growth_both_allocators(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct fake_clock c1, c2;
    struct tw_options o1 = manual_opts(&c1, 0, MS, 64), o2 = manual_opts(&c2, 0, MS, 64);
    o2.allocator = counting(&a);
    tw_timer *t1, *t2;
    assert_int_equal(tw_create(&t1, &o1), 0);
    assert_int_equal(tw_create(&t2, &o2), 0);
    int fired1 = 0, fired2 = 0;
    tw_id keep1 = 0, keep2 = 0;
    for (int k = 0; k < 200000; k++) {
        uint64_t d = (uint64_t)(k * 7919 % 100000) * MS; /* up to 100 s: levels too */
        tw_id id1, id2;
        assert_int_equal(tw_schedule(t1, d, count_fn, &fired1, &id1), 0);
        assert_int_equal(tw_schedule(t2, d, count_fn, &fired2, &id2), 0);
        if (k == 1234) {
            keep1 = id1;
            keep2 = id2;
        }
        if (k % 5000 == 0) {
            struct tw_stats s1, s2;
            tw_stats(t1, &s1);
            tw_stats(t2, &s2);
            assert_int_equal(s2.memory_bytes, a.bytes); /* exact */
            assert_int_equal(s1.memory_bytes, s2.memory_bytes);
        }
    }
    assert_check(t1);
    assert_check(t2);
    /* an id taken before the pool moved still names its task */
    assert_int_equal(tw_cancel(t1, keep1), 0);
    assert_int_equal(tw_cancel(t2, keep2), 0);
    assert_int_equal(tw_advance(t1, 200 * SEC), 199999);
    assert_int_equal(tw_advance(t2, 200 * SEC), 199999);
    assert_int_equal(fired1, 199999);
    assert_int_equal(fired2, 199999);
    tw_destroy(t1);
    tw_destroy(t2);
    assert_int_equal(a.live, 0);
}

/* ---- past 16 bits ------------------------------------------------------
 * Counts and indices that a timer of a million tasks carries past 65,535,
 * tried at 70,000: a local or a field kept in 16 bits anywhere on these
 * paths is seen (mutants.py, sets 29 and 30). */
enum { PAST16 = 70000 };

/* A key longer than 65,535 bytes is a key like any other: its whole
 * length is kept, so it is found again (to replace, to cancel) by the
 * same bytes and length, and not by its first 4,464 bytes (70,000 less
 * 2^16: what a length kept in 16 bits would make of it), nor by a key
 * that differs only in its last byte. */
static void test_key_longer_than_16_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    unsigned char *other, *key = long_key(PAST16, &other);
    int hit = 0, miss = 0;
    tw_id id, id2;
    assert_int_equal(tw_schedule_keyed(t, key, PAST16, 5 * MS, count_fn, &miss, &id), 0);
    assert_int_equal(tw_schedule_keyed(t, key, PAST16, 7 * MS, count_fn, &hit, &id2), 0);
    assert_int_equal(tw_pending(t), 1); /* replaced, not added */
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    uint64_t d;
    assert_int_equal(tw_deadline(t, id2, &d), 0);
    assert_true(d == 7 * MS);
    assert_int_equal(tw_cancel_keyed(t, key, PAST16 - 65536), -ENOENT);
    assert_int_equal(tw_cancel_keyed(t, other, PAST16), -ENOENT);
    assert_check(t);
    assert_int_equal(tw_advance(t, 6 * MS), 0);
    assert_int_equal(tw_advance(t, 7 * MS), 1);
    assert_int_equal(hit, 1);
    assert_int_equal(miss, 0);
    assert_int_equal(tw_schedule_keyed(t, key, PAST16, 5 * MS, count_fn, &miss, &id), 0);
    assert_int_equal(tw_cancel_keyed(t, key, PAST16), 0);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_advance(t, 20 * MS), 0);
    assert_int_equal(miss, 0);
    assert_check(t);
    tw_destroy(t);
    free(key);
    free(other);
}

/* More keyed tasks than 2^15 in one engine: the key map grows past 65,536
 * slots and the tasks' slots pass 65,535. Every key is found by tw_check's
 * walk of the whole map, cancelled by its key or by its id, and the rest
 * fire once each. */
static void test_keys_past_16_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_id *ids = malloc(PAST16 * sizeof(*ids));
    int *hit = calloc(PAST16, sizeof(*hit));
    assert_non_null(ids);
    assert_non_null(hit);
    char key[16];
    for (int k = 0; k < PAST16; k++) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, (uint64_t)(k % 1000 + 1) * MS,
                                           count_fn, &hit[k], &ids[k]),
                         0);
    }
    assert_int_equal(tw_pending(t), PAST16);
    struct tw_stats st;
    tw_stats(t, &st); /* the figures too, past 16 bits */
    assert_true(st.pending == PAST16 && st.scheduled == PAST16);
    assert_check(t);
    int left = 0;
    for (int k = 0; k < PAST16; k++) {
        int len = snprintf(key, sizeof key, "key%d", k);
        if (k % 3 == 0)
            assert_int_equal(tw_cancel(t, ids[k]), 0);
        else if (k % 3 == 1)
            assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), 0);
        else
            left++;
    }
    assert_int_equal(tw_pending(t), left);
    assert_check(t);
    for (int k = 0; k < PAST16; k++) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_cancel_keyed(t, key, (size_t)len), k % 3 == 2 ? 0 : -ENOENT);
        if (k % 3 == 2) /* and again, to fire */
            assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, (uint64_t)(k % 1000 + 1) * MS,
                                               count_fn, &hit[k], &ids[k]),
                             0);
    }
    assert_check(t);
    assert_int_equal(tw_advance(t, 1000 * MS), left);
    for (int k = 0; k < PAST16; k++)
        assert_int_equal(hit[k], k % 3 == 2);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
    free(ids);
    free(hit);
}

/* Schedules PAST16 plain tasks, task k marking hit[k], due over 5 s. */
static void schedule_past16(tw_timer *t, int *hit, tw_id *ids)
{
    for (int k = 0; k < PAST16; k++)
        assert_int_equal(tw_schedule(t, (uint64_t)(k % 5000 + 1) * MS, count_fn, &hit[k],
                                     ids ? &ids[k] : NULL),
                         0);
    assert_int_equal(tw_pending(t), PAST16);
}

/* A drain of more than 65,535 tasks: dropped whole (each NULL), then
 * handed back one by one, each task's own arg, from slots past 65,535;
 * both return the full count. */
static void test_drain_past_16_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int *hit = calloc(PAST16, sizeof(*hit));
    assert_non_null(hit);
    schedule_past16(t, hit, NULL);
    assert_int_equal(tw_drain(t, NULL, NULL), PAST16);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.drained, PAST16);
    assert_check(t);
    schedule_past16(t, hit, NULL);
    assert_int_equal(tw_drain(t, count_fn, NULL), PAST16);
    for (int k = 0; k < PAST16; k++)
        assert_int_equal(hit[k], 1);
    tw_stats(t, &s);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.drained, 2 * PAST16);
    assert_int_equal(tw_advance(t, 10 * SEC), 0);
    assert_check(t);
    tw_destroy(t);
    free(hit);
}

/* Slots past 65,535 go through the free list's blocks and, once the timer
 * has emptied, its rewind; nothing grows, each task fires once. Then one
 * slot taken and freed 20,000 times (its generation past 2^16): still
 * reused, never retired (only a wrap of the full 32 bits retires). */
static void test_slots_past_16_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    tw_id *ids = malloc(PAST16 * sizeof(*ids));
    int *hit = calloc(PAST16, sizeof(*hit));
    assert_non_null(ids);
    assert_non_null(hit);
    schedule_past16(t, hit, ids);
    /* cancelled in a stride across the pool: the blocks hold slots from
     * all over it */
    for (int k = 0, j = 0; k < PAST16; k++, j = (j + 7919) % PAST16)
        assert_int_equal(tw_cancel(t, ids[j]), 0);
    struct tw_stats s0, s;
    tw_stats(t, &s0);
    assert_int_equal(s0.pending, 0);
    schedule_past16(t, hit, ids); /* from the blocks */
    tw_stats(t, &s);
    assert_int_equal(s.memory_bytes, s0.memory_bytes);
    assert_check(t);
    assert_int_equal(tw_advance(t, 5 * SEC), PAST16); /* empties: rewinds */
    for (int k = 0; k < PAST16; k++)
        assert_int_equal(hit[k], 1);
    schedule_past16(t, hit, ids); /* from the rewound slots */
    tw_stats(t, &s);
    assert_int_equal(s.memory_bytes, s0.memory_bytes);
    assert_check(t);
    assert_int_equal(tw_advance(t, 10 * SEC), PAST16);
    for (int k = 0; k < PAST16; k++)
        assert_int_equal(hit[k], 2);
    int n = 0;
    for (int k = 0; k < 20000; k++) {
        assert_int_equal(tw_schedule(t, MS, count_fn, &n, NULL), 0);
        assert_int_equal(tw_advance(t, tw_now(t) + MS), 1);
    }
    assert_int_equal(n, 20000);
    tw_stats(t, &s);
    assert_int_equal(s.retired_slots, 0);
    assert_int_equal(s.memory_bytes, s0.memory_bytes);
    assert_check(t);
    tw_destroy(t);
    free(ids);
    free(hit);
}

/* tw_stats' counters carried past 65,535 on one timer (1 ms tick, 64
 * slots): 70,000 rounds, each scheduling a task 1 s out (level 1: it moves
 * down a level before it fires), scheduling and cancelling another, and
 * advancing one tick, with a task due at every tick once the first second
 * has passed; then a timer bounded at one pending task refuses 70,000
 * schedules; then lateness percentiles over 70,000 firings. */
static void test_stats_past_16_bits(void **state)
{
    (void)state;
    enum { N = PAST16 };
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int fired = 0;
    uint64_t now = 0, advances = 0;
    for (int k = 0; k < N; k++) {
        tw_id id;
        assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, NULL), 0);
        assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, &id), 0);
        assert_int_equal(tw_cancel(t, id), 0);
        now += MS;
        assert_true(tw_advance(t, now) >= 0);
        advances++;
    }
    uint64_t next;
    while (tw_next_deadline(t, &next) == 0) {
        assert_true(tw_advance(t, next) >= 0);
        advances++;
    }
    assert_int_equal(fired, N);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.scheduled, 2 * N);
    assert_int_equal(s.cancelled, N);
    assert_int_equal(s.fired, N);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.advances, advances);
    assert_true(s.bucket_pops >= N); /* a bucket of level 0 at each tick */
    assert_true(s.cascaded >= N);    /* each fired task moved down once */
    assert_check(t);
    tw_destroy(t);

    struct tw_options o = manual_opts(&c, 0, MS, 64);
    o.max_pending = 1;
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, NULL), 0);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, SEC, count_fn, &fired, NULL), -EAGAIN);
    tw_stats(t, &s);
    assert_int_equal(s.rejected, N);
    assert_int_equal(s.pending, 1);
    tw_destroy(t);

    /* The lateness percentiles over 70,000 firings: half on time, then
     * half 5 ms late. The median is the first of the late ones. */
    t = mk(&c, 0, MS, 64);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, k < N / 2 ? SEC : 2 * SEC, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_advance(t, SEC), N / 2);
    assert_int_equal(tw_advance(t, 2 * SEC + 5 * MS), N / 2);
    tw_stats(t, &s);
    assert_int_equal(s.late_max_ns, 5 * MS);
    assert_true(s.late_p50_ns >= 5 * MS && s.late_p50_ns < 10 * MS);
    assert_true(s.late_p99_ns >= 5 * MS && s.late_p99_ns < 10 * MS);
    tw_destroy(t);
}

/* One bucket of 600,000 tasks, as a million request timeouts of the same
 * length can make: each of its 8 lists holds 75,000, and the checker walks
 * each past 65,535 entries. They fire together, once each. Then one bucket
 * of 70,000 keyed tasks. */
static void test_one_bucket_past_16_bits(void **state)
{
    (void)state;
    enum { N = 600000 };
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, MS, 64);
    int fired = 0;
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, 30 * SEC, count_fn, &fired, NULL), 0);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 30 * SEC), N);
    assert_int_equal(fired, N);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    /* and 70,000 keyed tasks in one bucket: the checker's count of them
     * there must match the key map's */
    char key[16];
    for (int k = 0; k < PAST16; k++) {
        int len = snprintf(key, sizeof key, "key%d", k);
        assert_int_equal(tw_schedule_keyed(t, key, (size_t)len, 30 * SEC, count_fn, &fired, NULL),
                         0);
    }
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 1);
    assert_check(t);
    assert_int_equal(tw_advance(t, 60 * SEC), PAST16);
    assert_int_equal(fired, N + PAST16);
    assert_check(t);
    tw_destroy(t);
}

/* Checks a firing of test_delay_queue_past_16_bits, whose clock moves
 * to each next deadline on a 1 ns tick: never early, at most a tick late,
 * in deadline order. arg points to the task's deadline. */
struct dq_fire {
    uint64_t last;
    long fired;
};
static struct dq_fire dqf;
static void dq_fire_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    uint64_t d = *(uint64_t *)arg;
    assert_true(tw_now(t) >= d);
    assert_true(tw_now(t) - d <= 1);
    assert_true(d >= dqf.last);
    dqf.last = d;
    dqf.fired++;
}

/* A delay queue of more than 2^15 buckets (a sift from a node past 32,767
 * has children past 65,535): wheel_size 4096 and a 1 ns tick, with a task
 * in every bucket the 2W blocks of levels 0 to 4 give, about 41,000. The
 * heap keeps its order (tw_check), and the buckets come due in deadline
 * order as the clock jumps from one to the next. Then the same deadlines
 * again on a fresh timer, latest first: each new bucket is the earliest,
 * so each sifts up from the bottom to the root, through parents past
 * 255 and 65,535 alike. */
static void test_delay_queue_past_16_bits(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 0, 1, TW_MAX_WHEEL_SIZE);
    enum { MAXN = 50000 };
    uint64_t *dl = malloc(MAXN * sizeof(*dl));
    assert_non_null(dl);
    long n = 0;
    uint64_t queued = 0;
    /* deadlines j * 4096^k: kept where they started a bucket of their own */
    for (int k = 0; k < 5; k++) {
        uint64_t unit = (uint64_t)1 << (12 * k);
        for (uint64_t j = 1; j < 2 * TW_MAX_WHEEL_SIZE && n < MAXN; j++) {
            dl[n] = j * unit;
            tw_id id;
            assert_int_equal(tw_schedule_at(t, dl[n], dq_fire_fn, &dl[n], &id), 0);
            struct tw_stats s;
            tw_stats(t, &s);
            if (s.queued_buckets > queued) {
                queued = s.queued_buckets;
                n++;
            } else {
                assert_int_equal(tw_cancel(t, id), 0);
            }
        }
    }
    assert_true(queued > 40000);
    for (int latest_first = 0; latest_first <= 1; latest_first++) {
        if (latest_first) {
            tw_destroy(t);
            t = mk(&c, 0, 1, TW_MAX_WHEEL_SIZE);
            for (long k = n - 1; k >= 0; k--) {
                assert_int_equal(tw_schedule_at(t, dl[k], dq_fire_fn, &dl[k], NULL), 0);
                struct tw_stats s;
                tw_stats(t, &s);
                assert_int_equal(s.queued_buckets, (uint64_t)(n - k));
            }
        }
        assert_int_equal(tw_pending(t), n);
        assert_check(t);
        memset(&dqf, 0, sizeof dqf);
        uint64_t next;
        while (tw_next_deadline(t, &next) == 0)
            assert_true(tw_advance(t, next) >= 0);
        assert_int_equal(dqf.fired, n);
        assert_int_equal(tw_pending(t), 0);
        assert_check(t);
    }
    tw_destroy(t);
    free(dl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_defaults),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_tick_past_32_bits),
        cmocka_unit_test(test_time_starts_at_clock),
        cmocka_unit_test(test_schedule_errors),
        cmocka_unit_test(test_never_early_rounds_up),
        cmocka_unit_test(test_schedule_at_past),
        cmocka_unit_test(test_overflow_clamps_and_far_future),
        cmocka_unit_test(test_last_ticks_before_the_end),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_deferred_unseen),
        cmocka_unit_test(test_reschedule),
        cmocka_unit_test(test_reschedule_at),
        cmocka_unit_test(test_reschedule_later_in_place),
        cmocka_unit_test(test_periodic_reschedule_at_from_callback),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_order_across_levels),
        cmocka_unit_test(test_level_boundaries),
        cmocka_unit_test(test_coarse_bucket_not_soon),
        cmocka_unit_test(test_periodic_reserves_no_more),
        cmocka_unit_test(test_periodic_fixed_rate),
        cmocka_unit_test(test_periodic_fixed_delay),
        cmocka_unit_test(test_periodic_end_of_time),
        cmocka_unit_test(test_periodic_reschedule_from_callback),
        cmocka_unit_test(test_periodic_cancel_then_reschedule),
        cmocka_unit_test(test_keyed),
        cmocka_unit_test(test_max_pending),
        cmocka_unit_test(test_max_pending_wide),
        cmocka_unit_test(test_callbacks_reenter),
        cmocka_unit_test(test_next_deadline_loop),
        cmocka_unit_test(test_next_deadline_from_callback),
        cmocka_unit_test(test_drain),
        cmocka_unit_test(test_drain_nested),
        cmocka_unit_test(test_drain_nested_past_8_bits),
        cmocka_unit_test(test_drain_from_periodic),
        cmocka_unit_test(test_drain_drops_plain_whole),
        cmocka_unit_test(test_drop_from_callback_after_cancel),
        cmocka_unit_test(test_destroy_from_callback),
        cmocka_unit_test(test_stats_and_misc),
        cmocka_unit_test(test_ids_never_reissued),
        cmocka_unit_test(test_capacity_preallocates),
        cmocka_unit_test(test_cancelled_not_cascaded),
        cmocka_unit_test(test_growth_both_allocators),
        cmocka_unit_test(test_peak_kept_and_reused),
        cmocka_unit_test(test_keys_past_16_bits),
        cmocka_unit_test(test_key_longer_than_16_bits),
        cmocka_unit_test(test_drain_past_16_bits),
        cmocka_unit_test(test_slots_past_16_bits),
        cmocka_unit_test(test_delay_queue_past_16_bits),
        cmocka_unit_test(test_stats_past_16_bits),
        cmocka_unit_test(test_one_bucket_past_16_bits),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
