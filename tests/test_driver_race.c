/* test_driver_race.c: the threaded driver's guards against a lost wake-up,
 * each with its window forced open.
 *
 * The driver plans its sleep without its mutex, then takes the mutex and
 * checks, before it waits, whether anything came in since it planned: a
 * kick (a schedule that made an earlier bucket after the driver's second
 * look at the shards) or a tw_wake. Either is lost if it lands between the
 * plan and that check and the check is missing: the driver sleeps to the
 * bucket it planned for. No real-time test can land there on purpose.
 *
 * Here the library's calls to pthread_mutex_lock, pthread_cond_wait and
 * pthread_join are wrapped at link time (tests/meson.build; Linux, where
 * the shard locks are futexes, so the driver's only pthread_mutex_lock in
 * a pass of one-shot tasks is the one that ends its plan). When the test
 * arms the hook, the driver's next such call first does what the test
 * asked (on the driver's own thread, with no lock of the library held),
 * then takes the mutex: a schedule, or a helper thread's tw_wake or
 * tw_stop, awaited until it blocks (in pthread_cond_wait or pthread_join:
 * its request counted, or the stop marked and signalled). The driver has
 * planned to sleep an hour; what came in must be seen at once. Awaited in
 * real time, up to 60 s: milliseconds when the guard holds, the hour when
 * it does not. */
#include "helpers.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

int __real_pthread_mutex_lock(pthread_mutex_t *m);
int __real_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __wrap_pthread_mutex_lock(pthread_mutex_t *m);
int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_join(pthread_t th, void **ret);

/* Set on the test's own threads; the driver is the only other thread. */
static _Thread_local int test_side;

enum hook { HOOK_NONE, HOOK_SCHEDULE, HOOK_WAKE, HOOK_STOP };
static _Atomic int armed = HOOK_NONE;
static _Atomic int fired_hooks;
static tw_timer *hook_timer;
static _Atomic int hook_task;

/* the helper thread (HOOK_WAKE, HOOK_STOP): blocked in tw_wake or
 * tw_stop (the request counted, or the stop marked), and returned */
static _Atomic int helper_waiting, helper_done, helper_rc;
static int helper_stops;

static void task_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    atomic_fetch_add((_Atomic int *)arg, 1);
}

static void *helper_main(void *arg)
{
    (void)arg;
    test_side = 1;
    atomic_store(&helper_rc, helper_stops ? tw_stop(hook_timer, NULL, NULL)
                                          : tw_wake(hook_timer));
    atomic_store(&helper_done, 1);
    return NULL;
}

static pthread_t helper;

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
    int h = HOOK_NONE;
    if (!test_side && (h = atomic_exchange(&armed, HOOK_NONE)) != HOOK_NONE) {
        if (h == HOOK_SCHEDULE) {
            /* an earlier bucket, made after the driver's second look: its
             * schedule kicks (the driver's plan is published) */
            if (tw_schedule(hook_timer, 0, task_fn, &hook_task, NULL) != 0)
                abort();
        } else {
            /* a tw_wake in flight, or a tw_stop: let it count its request
             * (or mark the stop and signal) and wait for the driver */
            helper_stops = h == HOOK_STOP;
            if (pthread_create(&helper, NULL, helper_main, NULL) != 0)
                abort();
            while (!atomic_load(&helper_waiting))
                sched_yield();
        }
        atomic_fetch_add(&fired_hooks, 1);
    }
    return __real_pthread_mutex_lock(m);
}

int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (test_side == 1) /* tw_wake: its request is counted */
        atomic_store(&helper_waiting, 1);
    return __real_pthread_cond_wait(c, m);
}

int __wrap_pthread_join(pthread_t th, void **ret)
{
    if (test_side == 1) /* tw_stop: the stop is marked and signalled */
        atomic_store(&helper_waiting, 1);
    return __real_pthread_join(th, ret);
}

/* Arms the hook with a helper thread's call. */
static void arm_helper(int h)
{
    atomic_store(&helper_waiting, 0);
    atomic_store(&helper_done, 0);
    atomic_store(&helper_rc, -1);
    atomic_store(&armed, h);
}

static void spin_until(_Atomic int *flag)
{
    for (int ms = 0; ms < 60000 && !atomic_load(flag); ms++)
        usleep(1000);
}

/* A threaded timer, its driver asleep until a task an hour away. */
static tw_timer *mk_planned(struct atomic_clock *c, _Atomic int *far)
{
    tw_timer *t = mk_fake(c, 0);
    hook_timer = t;
    atomic_store(&hook_task, 0);
    atomic_store(&fired_hooks, 0);
    assert_int_equal(tw_schedule(t, 3600 * SEC, task_fn, far, NULL), 0);
    assert_int_equal(tw_wake(t), 0); /* planned: an hour away */
    return t;
}

/* A schedule between the driver's plan and its sleep kicks; the driver
 * sees the kick count moved and plans again instead of sleeping the hour. */
static void test_kick_after_plan(void **state)
{
    (void)state;
    test_side = 2;
    struct atomic_clock c;
    _Atomic int far = 0;
    tw_timer *t = mk_planned(&c, &far);
    atomic_store(&armed, HOOK_SCHEDULE);
    assert_int_equal(tw_wake(t), 0); /* one more pass; the hook ends its plan */
    assert_int_equal(atomic_load(&fired_hooks), 1);
    spin_until(&hook_task); /* due now: no tw_wake, no clock moved */
    assert_int_equal(atomic_load(&hook_task), 1);
    assert_int_equal(atomic_load(&far), 0);
    assert_int_equal(tw_pending(t), 1);
    assert_check(t);
    tw_destroy(t);
}

/* A tw_wake that counts its request between the driver's plan and its
 * sleep: the pass under way cannot answer it (it began before), so the
 * driver goes round again instead of sleeping, and the call returns. */
static void test_wake_after_plan(void **state)
{
    (void)state;
    test_side = 2;
    struct atomic_clock c;
    _Atomic int far = 0;
    tw_timer *t = mk_planned(&c, &far);
    arm_helper(HOOK_WAKE);
    assert_int_equal(tw_wake(t), 0);
    assert_int_equal(atomic_load(&fired_hooks), 1);
    spin_until(&helper_done);
    assert_int_equal(atomic_load(&helper_done), 1);
    assert_int_equal(atomic_load(&helper_rc), 0);
    assert_int_equal(atomic_load(&far), 0);
    /* stopped before the helper is joined: one still blocked (the guard
     * gone) is let go by the stop, not left on a freed timer */
    assert_int_equal(tw_stop(t, NULL, NULL), 1); /* the far task, dropped */
    __real_pthread_join(helper, NULL);
    tw_destroy(t);
}

/* A tw_stop that marks the stop and signals between the driver's plan and
 * its sleep: the driver leaves instead of sleeping, and the stop returns
 * with the far task handed back. */
static void test_stop_after_plan(void **state)
{
    (void)state;
    test_side = 2;
    struct atomic_clock c;
    _Atomic int far = 0;
    tw_timer *t = mk_planned(&c, &far);
    arm_helper(HOOK_STOP);
    assert_int_equal(tw_wake(t), 0);
    assert_int_equal(atomic_load(&fired_hooks), 1);
    spin_until(&helper_done);
    assert_int_equal(atomic_load(&helper_done), 1);
    assert_int_equal(atomic_load(&helper_rc), 1); /* the far task, dropped */
    assert_int_equal(atomic_load(&far), 0);
    __real_pthread_join(helper, NULL);
    assert_int_equal(tw_pending(t), 0);
    tw_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kick_after_plan),
        cmocka_unit_test(test_wake_after_plan),
        cmocka_unit_test(test_stop_after_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
