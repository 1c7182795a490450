/* test_kafka.c: Kafka's timing-wheel tests (TimingWheel / TimerTest),
 * restated for this engine with a manual clock. Kafka fires a task up to a
 * tick early and reports "already expired" from add(); twheel never fires
 * early and defers due tasks to the next advance, so the expectations are
 * the same where Kafka is right and stricter where it is not. */
#include "helpers.h"

static tw_timer *mk(struct fake_clock *c, uint64_t tick, uint32_t w)
{
    struct tw_options o = manual_opts(c, 0, tick, w);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    return t;
}

static void test_already_due(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, MS, 8);
    assert_int_equal(tw_advance(t, 10 * MS), 0);
    int n = 0;
    /* delays -5..-1 ms: deadlines in the past */
    for (int d = -5; d < 0; d++)
        assert_int_equal(tw_schedule_at(t, (uint64_t)(10 + d) * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_schedule(t, 0, count_fn, &n, NULL), 0);
    assert_int_equal(n, 0); /* never fired inside schedule */
    assert_int_equal(tw_advance(t, 10 * MS), 6);
    assert_int_equal(n, 6);
    tw_destroy(t);
}

static void test_current_tick(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 10 * MS, 8);
    int n = 0;
    assert_int_equal(tw_advance(t, 3 * MS), 0); /* inside tick [0, 10) */
    /* due within the current tick: rounded up to the next tick, not early */
    assert_int_equal(tw_schedule_at(t, 5 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 9 * MS), 0);
    assert_int_equal(tw_advance(t, 10 * MS), 1);
    tw_destroy(t);
}

static void test_overflow_level_created_and_reused(void **state)
{
    (void)state;
    struct fake_clock c;
    /* blocks of 1, 4, 16 ms; a new task goes to the finest level whose
     * 2W = 8 blocks from the current one reach it: up to 8, 32, 128 ms */
    tw_timer *t = mk(&c, MS, 4);
    struct tw_stats s;
    int n = 0;
    tw_stats(t, &s);
    assert_int_equal(s.levels, 1);
    assert_int_equal(tw_schedule(t, 7 * MS, count_fn, &n, NULL), 0);
    tw_stats(t, &s);
    assert_int_equal(s.levels, 1); /* fits level 0 */
    assert_int_equal(tw_schedule(t, 40 * MS, count_fn, &n, NULL), 0);
    tw_stats(t, &s);
    assert_int_equal(s.levels, 3); /* 40 ms needs level 2 (and level 1) */
    assert_int_equal(tw_schedule(t, 45 * MS, count_fn, &n, NULL), 0);
    tw_stats(t, &s);
    assert_int_equal(s.levels, 3);         /* reused */
    assert_int_equal(s.queued_buckets, 2); /* 40 and 45 share a bucket */
    assert_check(t);
    assert_int_equal(tw_advance(t, 100 * MS), 3);
    tw_destroy(t);
}

static void test_advance_within_and_to_next_tick(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, 10 * MS, 8);
    int n = 0;
    assert_int_equal(tw_schedule(t, 10 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 1 * MS), 0);
    assert_int_equal(tw_advance(t, 9 * MS), 0); /* within the tick */
    assert_int_equal(tw_now(t), 9 * MS);
    assert_int_equal(tw_advance(t, 10 * MS), 1); /* to the next tick */
    assert_int_equal(n, 1);
    tw_destroy(t);
}

static void test_overflow_clocks_after_advance(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, MS, 4);
    int n = 0;
    uint64_t d;
    /* 40 ms lands in level 2's bucket [32, 48): it wakes at 32 */
    assert_int_equal(tw_schedule(t, 40 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 32 * MS);
    assert_int_equal(tw_advance(t, 10 * MS), 0);
    /* at 10 ms, 46 ms is still level 2 (level 1's 8 blocks from [8, 12)
     * end at 40; bucket [32, 48), the same one) */
    assert_int_equal(tw_schedule(t, 36 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 32 * MS);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 1);
    /* at 32 the bucket cascades: 40 -> level 1 [40, 44), 46 -> [44, 48)
     * (level 0's 8 blocks from 32 end at 40) */
    assert_int_equal(tw_advance(t, 32 * MS), 0);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 40 * MS);
    tw_stats(t, &s);
    assert_int_equal(s.queued_buckets, 2);
    assert_int_equal(s.cascaded, 2);
    /* at 40, 40 fires from its level-1 bucket; then, [44, 48) being level
     * 1's next bucket, the spread moves 46 down to level 0 ahead of time
     * (four re-insertions in all) */
    assert_int_equal(tw_advance(t, 40 * MS), 1);
    assert_int_equal(tw_next_deadline(t, &d), 0);
    assert_int_equal(d, 46 * MS);
    tw_stats(t, &s);
    assert_int_equal(s.cascaded, 4);
    assert_int_equal(tw_advance(t, 45 * MS), 0);
    assert_int_equal(tw_advance(t, 46 * MS), 1);
    assert_int_equal(n, 2);
    tw_destroy(t);
}

/* One advance straight to a level-2 task's deadline takes it down a level
 * a bucket, as the advances step by step above do: [32, 48) at 32 puts 40
 * into level 1's [40, 44), which at 40 hands it to the expired list; two
 * buckets popped, two re-insertions. (A collection that set every
 * cascaded task aside and placed it from the earliest one's tick, as it
 * does a held task, would put 40 straight into level 0 at 40: one
 * re-insertion, and the wheel's counts no longer what its levels say.) */
static void test_one_advance_cascades_level_by_level(void **state)
{
    (void)state;
    struct fake_clock c;
    tw_timer *t = mk(&c, MS, 4);
    int n = 0;
    assert_int_equal(tw_schedule(t, 40 * MS, count_fn, &n, NULL), 0);
    assert_int_equal(tw_advance(t, 40 * MS), 1);
    assert_int_equal(n, 1);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.bucket_pops, 2);
    assert_int_equal(s.cascaded, 2);
    assert_check(t);
    tw_destroy(t);
}

/* A big coarse bucket is not cascaded whole at its tick: each advance that
 * fires something moves a bounded slice of the next coarse bucket down
 * ahead of time, so that by its tick nothing is left to cascade (the tick's
 * due tasks would otherwise wait for all of it). Nothing fires early or out
 * of order on the way. */
struct spread_task {
    uint64_t deadline;
    uint64_t fired_at;
    int fired;
};

static uint64_t spread_last; /* the deadline of the last task fired */
static int spread_order_ok = 1;

static void spread_fn(tw_timer *t, tw_id id, void *arg)
{
    struct spread_task *k = arg;
    (void)id;
    k->fired++;
    k->fired_at = tw_now(t);
    /* tasks of different (rounded-up) ticks fire in order */
    if ((k->deadline + MS - 1) / MS < (spread_last + MS - 1) / MS)
        spread_order_ok = 0;
    spread_last = k->deadline;
}

static void test_cascade_spread(void **state)
{
    (void)state;
    enum { BIG = 5000, BEATS = 192 }; /* beats 1 .. 191 ms */
    struct fake_clock c;
    tw_timer *t = mk(&c, MS, 64);
    static struct spread_task big[BIG], beat[BEATS];
    spread_last = 0;
    spread_order_ok = 1;
    /* level 1's bucket [128, 192) ms (level 0 takes what is due within
     * 2W = 128 ticks) gets BIG tasks due 164 .. 191 ms (the odd ns rounds
     * them up a tick); one task due each ms keeps every advance firing
     * something */
    for (int i = 0; i < BIG; i++) {
        big[i].deadline = (uint64_t)(164 + i % 28) * MS - (uint64_t)(i % 3);
        assert_int_equal(tw_schedule_at(t, big[i].deadline, spread_fn, &big[i], NULL), 0);
    }
    for (int i = 1; i < BEATS; i++) {
        beat[i].deadline = (uint64_t)i * MS;
        assert_int_equal(tw_schedule_at(t, beat[i].deadline, spread_fn, &beat[i], NULL), 0);
    }
    struct tw_stats s;
    tw_stats(t, &s);
    assert_int_equal(s.cascaded, 0);
    uint64_t before = 0, most = 0;
    for (uint64_t ms = 1; ms < BEATS; ms++) {
        assert_true(tw_advance(t, ms * MS) >= 1);
        assert_check(t);
        tw_stats(t, &s);
        uint64_t moved = s.cascaded - before;
        before = s.cascaded;
        if (moved > most)
            most = moved;
        if (ms == 63) /* nothing moves while [128, 192) is not yet level
                         * 1's next bucket */
            assert_int_equal(s.cascaded, 0);
        if (ms == 127) /* all of [128, 192) is down before its tick: the
                          * BIG tasks and the 64 beats due in it */
            assert_int_equal(s.cascaded, BIG + 64);
        if (ms == 128) /* so its tick cascades nothing */
            assert_int_equal(moved, 0);
    }
    /* spread over several advances, not done in one */
    assert_true(most <= BIG / 4);
    for (int i = 0; i < BIG; i++) {
        assert_int_equal(big[i].fired, 1);
        /* never early, and at the first advance at or past the deadline's tick */
        assert_true(big[i].fired_at >= big[i].deadline);
        assert_int_equal(big[i].fired_at, (big[i].deadline + MS - 1) / MS * MS);
    }
    assert_true(spread_order_ok);
    tw_destroy(t);
}

/* TimerTest.testTaskExpiration: delays 0..4, 10..99 twice, 100..499,
 * submitted in shuffled order; all fire in deadline order, exactly once. */
struct task {
    uint64_t delay;
    int fired;
    uint64_t at;
};

static int fire_order_n;
static struct task *fire_order[1000];

static void task_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    struct task *k = arg;
    k->fired++;
    k->at = tw_now(t);
    fire_order[fire_order_n++] = k;
}

static void test_task_expiration(void **state)
{
    (void)state;
    uint32_t wheels[] = { 4, 8, 64 };
    for (size_t w = 0; w < 3; w++) {
        struct fake_clock c;
        tw_timer *t = mk(&c, MS, wheels[w]);
        static struct task tasks[1000];
        int n = 0;
        for (int d = 0; d < 5; d++)
            tasks[n++].delay = (uint64_t)d;
        for (int d = 10; d < 100; d++) {
            tasks[n++].delay = (uint64_t)d;
            tasks[n++].delay = (uint64_t)d;
        }
        for (int d = 100; d < 500; d++)
            tasks[n++].delay = (uint64_t)d;
        uint64_t x = 42 + w;
        for (int k = n - 1; k > 0; k--) { /* seeded shuffle */
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((x >> 33) % (uint64_t)(k + 1));
            struct task tmp = tasks[k];
            tasks[k] = tasks[j];
            tasks[j] = tmp;
        }
        for (int k = 0; k < n; k++) {
            tasks[k].fired = 0;
            assert_int_equal(tw_schedule(t, tasks[k].delay * MS, task_fn, &tasks[k], NULL), 0);
        }
        fire_order_n = 0;
        uint64_t dl;
        while (tw_next_deadline(t, &dl) == 0)
            tw_advance(t, dl);
        assert_int_equal(fire_order_n, n);
        for (int k = 0; k < n; k++) {
            assert_int_equal(tasks[k].fired, 1);
            assert_int_equal(tasks[k].at, tasks[k].delay * MS); /* exactly on time */
            if (k)
                assert_true(fire_order[k - 1]->delay <= fire_order[k]->delay);
        }
        tw_destroy(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_already_due),
        cmocka_unit_test(test_current_tick),
        cmocka_unit_test(test_overflow_level_created_and_reused),
        cmocka_unit_test(test_advance_within_and_to_next_tick),
        cmocka_unit_test(test_overflow_clocks_after_advance),
        cmocka_unit_test(test_one_advance_cascades_level_by_level),
        cmocka_unit_test(test_cascade_spread),
        cmocka_unit_test(test_task_expiration),
    };
    return cmocka_run_group_tests_name("kafka", tests, NULL, NULL);
}
