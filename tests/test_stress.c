/* test_stress.c: many threads against one threaded timer, tw_stop in the
 * middle. Run under ThreadSanitizer in CI (suite "stress").
 *
 * Six threads schedule, reschedule and cancel at random while the driver
 * fires and a pool of workers runs callbacks that themselves schedule and
 * cancel; periodic tasks run too. One producer calls tw_drain early on;
 * part-way through, the main thread calls tw_stop. Every task that was
 * scheduled has exactly one outcome: it fired (one-shot), its cancel
 * returned 0, or the drain or tw_stop handed it back; periodic tasks end
 * cancelled or handed back, once. Bounded by operation counts,
 * not by time, so a slow (sanitized) machine does the same work.
 *
 * The stop comes in the middle by construction, not by timing: each
 * producer waits at its halfway operation until all have reached theirs
 * and tasks have fired; the main thread lets them go, waits until each
 * has done GATE_OPS operations more (so that all are running, with
 * thousands left), and calls tw_stop. None can have ended by then: each
 * makes its last schedule only once tw_stop has returned, and that one
 * must be refused. */
#include "helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

/* cmocka's asserts longjmp and must stay on the test's own thread; the
 * producer, driver and worker threads check with this instead. */
#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                       \
        }                                                                  \
    } while (0)

#define THREADS 6
#define OPS 6000
/* Tasks scheduled from callbacks: a budget, so that the slots needed stay
 * bounded however long the run goes before tw_stop. Without it a periodic
 * task's firings, which go on till then, scheduled ever more: under
 * helgrind, whose threads run one at a time, a run needed more than the
 * 172,000 slots there were (tests/README.md). A usual run takes tens.
 * The producers schedule once an operation at most. */
#define CB_TASKS 100000
#define MAX_TASKS (THREADS * OPS + CB_TASKS)

struct task {
    _Atomic tw_id id;
    _Atomic int fired, cancelled, handed;
    int periodic;
};

static struct task *tasks;
static _Atomic int ntasks;
static _Atomic int cb_budget; /* schedules left to callbacks */
static tw_timer *timer;
static uint64_t start_ns; /* tw_now at creation: no deadline is earlier */
/* the stop in the middle (see the top): producers at their halfway gate,
 * let go, past it by GATE_OPS operations; the stop begun, returned */
#define GATE_OPS 16
static _Atomic int at_gate, released, running, stop_begun, stop_returned;
static _Atomic long after_stop_begun; /* operations begun since */
static _Atomic long fired_total;
static _Atomic long drained_total;

static struct task *new_task(void)
{
    int k = atomic_fetch_add(&ntasks, 1);
    CHECK(k < MAX_TASKS);
    return &tasks[k];
}

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fire_fn(tw_timer *t, tw_id id, void *arg);

/* Schedules a task; if the timer is stopped, the slot is simply unused. */
static void schedule_one(tw_timer *t, uint64_t *seed, int periodic)
{
    struct task *k = new_task();
    k->periodic = periodic;
    tw_id id = 0;
    uint64_t delay = xs(seed) % (30 * MS);
    int rc = periodic ? tw_schedule_every(t, delay, MS + xs(seed) % (5 * MS), TW_FIXED_RATE,
                                          fire_fn, k, &id)
                      : tw_schedule(t, delay, fire_fn, k, &id);
    if (rc == 0)
        atomic_store(&k->id, id);
    else
        CHECK(rc == -ESHUTDOWN);
}

static void try_cancel(tw_timer *t, struct task *k)
{
    tw_id id = atomic_load(&k->id);
    if (id && tw_cancel(t, id) == 0)
        atomic_fetch_add(&k->cancelled, 1);
}

static void fire_fn(tw_timer *t, tw_id id, void *arg)
{
    struct task *k = arg;
    tw_id known = atomic_load(&k->id);
    CHECK(known == 0 || known == id);
    atomic_fetch_add(&k->fired, 1);
    atomic_fetch_add(&fired_total, 1);
    uint64_t seed = id * 0x9E3779B97F4A7C15ull | 1;
    uint64_t r = xs(&seed) % 16;
    if (r == 0 && atomic_fetch_sub(&cb_budget, 1) > 0)
        schedule_one(t, &seed, 0); /* callbacks schedule too */
    else if (r == 1 && atomic_load(&ntasks) > 0)
        try_cancel(t, &tasks[xs(&seed) % (uint64_t)atomic_load(&ntasks)]);
    else if (k->periodic && r == 2)
        try_cancel(t, k); /* a periodic task stopping itself */
}

static void unfired(tw_timer *t, tw_id id, void *arg);

static void *producer(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg * 0x2545F4914F6CDD1Dull | 1;
    for (int i = 0; i < OPS; i++) {
        if (i == OPS / 2) {
            atomic_fetch_add(&at_gate, 1);
            while (!atomic_load(&released))
                usleep(100);
        } else if (i == OPS / 2 + GATE_OPS) {
            atomic_fetch_add(&running, 1);
        }
        if (atomic_load(&stop_begun))
            atomic_fetch_add(&after_stop_begun, 1);
        if (i == OPS / 8 && (uintptr_t)arg == 1) {
            /* one drain while everything runs: tasks pending, firing,
             * and taken by the driver but not yet run are handed back */
            atomic_fetch_add(&drained_total, (long)tw_drain(timer, unfired, NULL));
            continue;
        }
        uint64_t r = xs(&seed) % 10;
        int n = atomic_load(&ntasks);
        if (r < 5 || n == 0) {
            schedule_one(timer, &seed, r == 0 && (xs(&seed) % 8) == 0);
        } else if (r < 8) {
            try_cancel(timer, &tasks[xs(&seed) % (uint64_t)n]);
        } else {
            tw_id id = atomic_load(&tasks[xs(&seed) % (uint64_t)n].id);
            int rc = id ? tw_reschedule(timer, id, xs(&seed) % (20 * MS)) : -ENOENT;
            CHECK(rc == 0 || rc == -ENOENT || rc == -ESHUTDOWN);
            /* and asked when it is due, racing the driver and the others:
             * a deadline no earlier than the timer's start, or gone, or a
             * periodic task firing */
            uint64_t d = 0;
            int drc = id ? tw_deadline(timer, id, &d) : -ENOENT;
            CHECK((drc == 0 && d >= start_ns) || (drc == -ENOENT && d == 0) ||
                  (drc == -EBUSY && d == 0));
        }
    }
    /* the last schedule, once tw_stop has returned: refused, with no
     * slot taken and no id written */
    while (!atomic_load(&stop_returned))
        usleep(100);
    tw_id late = 0;
    CHECK(tw_schedule(timer, MS, fire_fn, NULL, &late) == -ESHUTDOWN && late == 0);
    return NULL;
}

static void unfired(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    struct task *k = arg;
    atomic_fetch_add(&k->handed, 1);
}

static void run(uint32_t workers)
{
    tasks = calloc(MAX_TASKS, sizeof(*tasks));
    assert_non_null(tasks);
    atomic_store(&ntasks, 0);
    atomic_store(&cb_budget, CB_TASKS);
    atomic_store(&at_gate, 0);
    atomic_store(&released, 0);
    atomic_store(&running, 0);
    atomic_store(&stop_begun, 0);
    atomic_store(&stop_returned, 0);
    atomic_store(&after_stop_begun, 0);
    atomic_store(&fired_total, 0);
    atomic_store(&drained_total, 0);
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    o.workers = workers;
    o.shards = 4;
    assert_int_equal(tw_create(&timer, &o), 0);
    start_ns = tw_now(timer);
    pthread_t th[THREADS];
    for (int k = 0; k < THREADS; k++)
        pthread_create(&th[k], NULL, producer, (void *)(uintptr_t)(k + 1));
    /* the stop in the middle (see the top): every producer at its gate
     * (an operation count away), and tasks firing (bounded, so that a
     * timer that fires nothing fails below rather than hangs) */
    while (atomic_load(&at_gate) < THREADS)
        usleep(200);
    for (int spin = 0; spin < 20000 && atomic_load(&fired_total) < 20; spin++)
        usleep(500);
    atomic_store(&released, 1);
    while (atomic_load(&running) < THREADS)
        usleep(50);
    atomic_store(&stop_begun, 1);
    int handed_back = tw_stop(timer, unfired, NULL);
    atomic_store(&stop_returned, 1);
    assert_true(handed_back >= 0);
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    assert_int_equal(tw_pending(timer), 0);
    struct tw_stats s;
    tw_stats(timer, &s);
    assert_check(timer);
    tw_destroy(timer);

    long scheduled = 0, fired = 0, cancelled = 0, handed = 0;
    for (int i = 0; i < atomic_load(&ntasks); i++) {
        struct task *k = &tasks[i];
        if (!atomic_load(&k->id))
            continue; /* refused: the timer was stopped */
        scheduled++;
        int f = atomic_load(&k->fired), c = atomic_load(&k->cancelled), h = atomic_load(&k->handed);
        if (k->periodic) {
            /* fired any number of times; ended exactly once */
            assert_int_equal(c + h, 1);
        } else {
            assert_int_equal(f + c + h, 1); /* exactly one outcome */
            fired += f;
        }
        cancelled += c;
        handed += h;
    }
    assert_int_equal(handed, handed_back + atomic_load(&drained_total));
    assert_int_equal(scheduled, (long)s.scheduled);
    assert_true(fired > 0 && cancelled > 0);
    /* how many of the producers' operations (their last schedules left
     * out) began once the stop had: reported, not asserted, for it
     * follows the threads' turns (each had at most 2,984 left) */
    print_message("workers=%u: %ld scheduled, %ld fired (one-shot), %ld cancelled, %ld handed back "
                  "(%ld by a drain); %ld operations begun after the stop began\n",
                  workers, scheduled, fired, cancelled, handed, atomic_load(&drained_total),
                  atomic_load(&after_stop_begun));
    free(tasks);
}

static void test_stress_driver_callbacks(void **state)
{
    (void)state;
    run(0);
}

static void test_stress_worker_pool(void **state)
{
    (void)state;
    run(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_driver_callbacks),
        cmocka_unit_test(test_stress_worker_pool),
    };
    return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
