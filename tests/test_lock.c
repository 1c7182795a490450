/* test_lock.c: the shard lock (src/lock.h) on its own. Mutual exclusion
 * under contention (threads adding to a plain counter: a lost update, or
 * under ThreadSanitizer a race, if it failed), and each state of its word
 * reached on purpose: free and held, then a waiter that has announced it
 * sleeps (2), is seen asleep in the kernel (not spinning), and which the
 * release must wake. No test waits on a timer: the sleeper's announcement
 * and its thread's state are watched for. Linked against the static
 * library, whose lock.c it tests. */
#include "helpers.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>

#include "lock.h"

#ifdef __linux__
static uint32_t word(struct tw__lock *l)
{
    return atomic_load(&l->v);
}
#endif

static void test_free_and_held(void **state)
{
    (void)state;
#ifdef __linux__
    struct tw__lock l;
    assert_int_equal(tw__lock_init(&l), 0);
    assert_int_equal(word(&l), 0);
    tw__lock(&l);
    assert_int_equal(word(&l), 1); /* held, nobody waiting */
    tw__unlock(&l);
    assert_int_equal(word(&l), 0);
    tw__lock_destroy(&l);
#else
    skip();
#endif
}

#define THREADS 4
#define ROUNDS 200000

struct counter {
    struct tw__lock lock;
    uint64_t n; /* plain: only the lock keeps its updates whole */
};

static void *add_many(void *p)
{
    struct counter *c = p;
    for (int i = 0; i < ROUNDS; i++) {
        tw__lock(&c->lock);
        uint64_t v = c->n;
        if ((i & 255) == 0)
            sched_yield(); /* now and then, give up the CPU holding it */
        c->n = v + 1;
        tw__unlock(&c->lock);
    }
    return NULL;
}

static void test_excludes(void **state)
{
    (void)state;
    struct counter c = { .n = 0 };
    assert_int_equal(tw__lock_init(&c.lock), 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, add_many, &c), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(c.n, (uint64_t)THREADS * ROUNDS);
#ifdef __linux__
    assert_int_equal(word(&c.lock), 0); /* every sleeper woken and gone */
#endif
    tw__lock_destroy(&c.lock);
}

#ifdef __linux__
struct handoff {
    struct tw__lock lock;
    int written;      /* by the holder, before its release */
    int seen;         /* by the waiter, once it has the lock */
    _Atomic long tid; /* the waiter's thread id, set before it waits */
};

/* The scheduler's state of thread tid of this process ('R' running or
 * runnable, 'S' asleep, ...), from /proc; 0 if it cannot be read. */
static char thread_state(long tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *e = strrchr(buf, ')'); /* the name may hold spaces and ')' */
    return e && e[1] == ' ' ? e[2] : 0;
}

static void *waiter(void *p)
{
    struct handoff *h = p;
    atomic_store(&h->tid, (long)syscall(SYS_gettid));
    tw__lock(&h->lock); /* held by the test: spins, then sleeps */
    h->seen = h->written;
    tw__unlock(&h->lock);
    return NULL;
}
#endif

static void test_sleeper_is_woken(void **state)
{
    (void)state;
#ifdef __linux__
    struct handoff h = { .written = 0, .seen = 0, .tid = 0 };
    assert_int_equal(tw__lock_init(&h.lock), 0);
    tw__lock(&h.lock);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter, &h), 0);
    /* The waiter gives up spinning and sets 2 before it sleeps; only then
     * must the release wake it. */
    while (word(&h.lock) != 2)
        sched_yield();
    /* ... and sleeps in the kernel, rather than spinning on: a waiter that
     * never slept would burn a CPU for as long as a holder keeps the lock
     * (a holder the host has preempted, say). Its thread must come to the
     * state 'S'; the bound (10 s) is for the slowest build, not a timing. */
    char st = thread_state(atomic_load(&h.tid));
    if (st == 0) {
        /* no /proc here (a chroot, say): the rest of the test still runs */
        print_message("no /proc/self/task: the waiter's sleep is not checked\n");
    } else {
        for (int i = 0; i < 10000 && st != 'S'; i++) {
            nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
            st = thread_state(atomic_load(&h.tid));
        }
        assert_int_equal(st, 'S');
    }
    assert_int_equal(word(&h.lock), 2); /* asleep, still announced */
    h.written = 1;
    tw__unlock(&h.lock); /* sees 2: wakes the waiter */
    pthread_join(th, NULL);
    assert_int_equal(h.seen, 1); /* it ran after the release, and saw it */
    /* it took the lock with 2 (it could not know it was the last waiter),
     * so its own release went through the wake as well, and left it free */
    assert_int_equal(word(&h.lock), 0);
    tw__lock_destroy(&h.lock);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_and_held),
        cmocka_unit_test(test_excludes),
        cmocka_unit_test(test_sleeper_is_woken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
