/* helpers.h: what every twheel test shares: a manual clock (and an atomic
 * one for threaded timers), a counting allocator that can fail on demand,
 * a firing recorder, a thread counter, and a death test. */
#ifndef TW_TEST_HELPERS_H
#define TW_TEST_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "twheel.h"

#define MS 1000000ull
#define SEC (1000 * MS)

/* An injectable clock that only moves when a test moves it. */
struct fake_clock {
    uint64_t now;
};

static inline uint64_t fake_clock_read(void *ctx)
{
    return ((struct fake_clock *)ctx)->now;
}

/* The same for a threaded timer, whose driver reads the clock too. It
 * counts its reads: a driver that should be asleep reads no clock. */
struct atomic_clock {
    _Atomic uint64_t now;
    _Atomic uint64_t reads;
};

static inline uint64_t atomic_clock_read(void *ctx)
{
    struct atomic_clock *c = ctx;
    atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
    return atomic_load(&c->now);
}

/* A callback held until tw_stop has halted its timer's runtime returns
 * once the stopping thread joins the thread the callback runs on: tw_stop
 * joins the driver and the workers only after it has marked the runtime
 * halted, so the tasks taken behind the callback are then handed back,
 * not run. No public call tells a callback that the halt has come, so the
 * tests that hold one (test_threaded, test_purgatory) are linked, on
 * Linux, against the static library with pthread_join wrapped
 * (-Wl,--wrap=pthread_join, TW_TEST_WRAP_JOIN; tests/meson.build), and
 * the wrapper lists the threads being joined. --wrap rewires the calls of
 * the objects linked into the test, the library's among them, and the
 * test's own joins, which are listed too and harm nothing. Elsewhere the
 * callback waits in real time (200 ms; 5 s under TW_TEST_SLOW), which a
 * stopping thread kept off the CPU for longer can outlast. */
#if defined(TW_TEST_WRAP_JOIN) || defined(TW_TEST_WRAP_CONDWAIT)
#include <pthread.h>

/* The threads inside a wrapped call, listed by its wrapper. */
struct tw_test_threads {
    pthread_mutex_t mu;
    int cap;
    pthread_t *th;
    int *used;
};

/* Lists th; returns its place, for tw_test_threads_remove. */
static inline int tw_test_threads_add(struct tw_test_threads *l, pthread_t th)
{
    int k;
    pthread_mutex_lock(&l->mu);
    for (k = 0; k < l->cap && l->used[k]; k++)
        ;
    if (k == l->cap)
        abort(); /* more at once than any test makes */
    l->th[k] = th;
    l->used[k] = 1;
    pthread_mutex_unlock(&l->mu);
    return k;
}

static inline void tw_test_threads_remove(struct tw_test_threads *l, int k)
{
    pthread_mutex_lock(&l->mu);
    l->used[k] = 0;
    pthread_mutex_unlock(&l->mu);
}

/* How many listed are th (same = 1), or are not (same = 0). */
static inline int tw_test_threads_count(struct tw_test_threads *l, pthread_t th, int same)
{
    int n = 0;
    pthread_mutex_lock(&l->mu);
    for (int k = 0; k < l->cap; k++)
        n += l->used[k] && (pthread_equal(l->th[k], th) != 0) == (same != 0);
    pthread_mutex_unlock(&l->mu);
    return n;
}
#endif

#ifdef TW_TEST_WRAP_JOIN
int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_join(pthread_t th, void **ret);

static pthread_t tw_test_joins_th[16];
static int tw_test_joins_used[16];
static struct tw_test_threads tw_test_joins = { PTHREAD_MUTEX_INITIALIZER, 16, tw_test_joins_th,
                                                tw_test_joins_used }; /* threads being joined */

int __wrap_pthread_join(pthread_t th, void **ret)
{
    int k = tw_test_threads_add(&tw_test_joins, th);
    int rc = __real_pthread_join(th, ret);
    tw_test_threads_remove(&tw_test_joins, k);
    return rc;
}

/* Whether some thread is joining the calling one. */
static inline int being_joined(void)
{
    return tw_test_threads_count(&tw_test_joins, pthread_self(), 1) > 0;
}
#endif

/* From a callback of a threaded timer that tw_stop has begun to stop
 * (tw_reschedule says -ESHUTDOWN): returns once the runtime is halted
 * (see above). Gives up after 60 s; a test that then finds tasks run
 * rather than handed back fails. Never asserts: it runs on the library's
 * threads. */
static inline void wait_until_halted(void)
{
#ifdef TW_TEST_WRAP_JOIN
    for (int ms = 0; ms < 60000 && !being_joined(); ms++)
        usleep(1000);
#else
    usleep(getenv("TW_TEST_SLOW") ? 5000000 : 200000);
#endif
}

/* test_threaded, on Linux, wraps pthread_cond_wait and
 * pthread_cond_timedwait too (-Wl,--wrap=..., TW_TEST_WRAP_CONDWAIT), and
 * the wrappers list the threads inside them, so that a test can see a
 * thread of the library asleep (the driver waiting for room in a full
 * workers' queue, or for its next deadline) rather than sleep and hope it
 * got there. A thread is listed before the real call: it holds the mutex
 * until that call lets it go, so whoever would wake it cannot come
 * between. */
#ifdef TW_TEST_WRAP_CONDWAIT
int __real_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __real_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                  const struct timespec *ts);
int __wrap_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                  const struct timespec *ts);

/* test_thread_names starts 300 workers, each waiting for a job */
static pthread_t tw_test_conds_th[1024];
static int tw_test_conds_used[1024];
static struct tw_test_threads tw_test_conds = { PTHREAD_MUTEX_INITIALIZER, 1024, tw_test_conds_th,
                                                tw_test_conds_used }; /* in a cond wait */

int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    int k = tw_test_threads_add(&tw_test_conds, pthread_self());
    int rc = __real_pthread_cond_wait(c, m);
    tw_test_threads_remove(&tw_test_conds, k);
    return rc;
}

int __wrap_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                  const struct timespec *ts)
{
    int k = tw_test_threads_add(&tw_test_conds, pthread_self());
    int rc = __real_pthread_cond_timedwait(c, m, ts);
    tw_test_threads_remove(&tw_test_conds, k);
    return rc;
}

/* How many threads but `other` are inside a cond wait, timed or not. */
static inline int cond_waiters_but(pthread_t other)
{
    return tw_test_threads_count(&tw_test_conds, other, 0);
}
#endif

/* A wrapper of syscall() (-Wl,--wrap=syscall) reads the six words
 * glibc's syscall() reads, however many its caller passed, and passes
 * them all on: the library's futex calls are not the only ones it gets,
 * for on i386 a sanitizer's runtime linked into the test calls syscall()
 * too (its x86-64 runtime makes its system calls itself). */
#define TW_TEST_SYSCALL_WORDS(a, n)                                        \
    do {                                                                   \
        va_list ap_;                                                       \
        va_start(ap_, n);                                                  \
        for (int k_ = 0; k_ < 6; k_++)                                     \
            (a)[k_] = va_arg(ap_, long);                                   \
        va_end(ap_);                                                       \
    } while (0)
long __real_syscall(long n, ...);
long __wrap_syscall(long n, ...);

/* A test that holds a lock while another thread tries to take it must
 * see that thread blocked, and not let it in. In real time that is a
 * window in which nothing may happen: the shorter, the weaker the test.
 * On Linux the purgatory's op lock sleeps through the library's one call
 * of syscall() (src/lock.c, a futex wait once the spin is over), which
 * test_purgatory wraps at link time (-Wl,--wrap=syscall,
 * TW_TEST_WRAP_FUTEX; tests/meson.build): the wrapper counts the waits
 * begun on one word, so the test waits until the other thread has gone
 * to sleep on the lock instead. (The -U__linux__ builds' lock is a
 * pthread mutex: nothing to count, and the window remains; the link
 * wraps syscall() all the same, so there the wrapper only passes the
 * calls on.) */
#ifdef TW_TEST_WRAP_FUTEX
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#define TW_TEST_FUTEX 1

static _Atomic(const void *) tw_test_futex_word; /* whose waits count */
static _Atomic int tw_test_futex_waits;
#endif

long __wrap_syscall(long n, ...)
{
    long a[6];
    TW_TEST_SYSCALL_WORDS(a, n);
#ifdef TW_TEST_FUTEX
    if (n == SYS_futex && ((int)a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT &&
        (const void *)a[0] == atomic_load(&tw_test_futex_word))
        atomic_fetch_add(&tw_test_futex_waits, 1);
#endif
    return __real_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
#endif

/* Counts from now the futex waits on `word` (a lock's word), where the
 * wrapper above counts them; elsewhere does nothing. */
static inline void watch_lock_word(const void *word)
{
#ifdef TW_TEST_FUTEX
    atomic_store(&tw_test_futex_waits, 0);
    atomic_store(&tw_test_futex_word, word);
#else
    (void)word;
#endif
}

/* Called holding the lock watch_lock_word named: waits until another
 * thread has gone to sleep on it (returns 1) or *done is set (returns 0:
 * the other thread got past the lock, which the caller's test must
 * fail). 60 s at most. Without the wrapper it waits for *done for 200 ms
 * (1 s under TW_TEST_SLOW), and returns -1 if it is not set: nothing
 * known. Never asserts: it may run in a library callback. */
static inline int wait_blocked_on_lock(_Atomic int *done)
{
#ifdef TW_TEST_FUTEX
    for (int ms = 0; ms < 60000 && !atomic_load(done); ms++) {
        if (atomic_load(&tw_test_futex_waits))
            return 1;
        usleep(1000);
    }
    return atomic_load(done) ? 0 : -1;
#else
    int ms = getenv("TW_TEST_SLOW") ? 1000 : 200;
    for (int k = 0; k < ms && !atomic_load(done); k++)
        usleep(1000);
    return atomic_load(done) ? 0 : -1;
#endif
}

/* A timer as mk_fake_sharded (below) makes, with a tick of `tick` ns
 * (0: the default). */
static inline tw_timer *mk_fake_tick(struct atomic_clock *c, uint32_t workers,
                                     uint64_t start, uint32_t shards, uint64_t tick)
{
    struct tw_options o;
    tw_options_init(&o);
    atomic_store(&c->now, start);
    atomic_store(&c->reads, 0);
    o.clock = atomic_clock_read;
    o.clock_ctx = c;
    o.threaded = 1;
    o.workers = workers;
    if (shards)
        o.shards = shards;
    if (tick)
        o.tick_ns = tick;
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    return t;
}

/* A threaded timer (callbacks on `workers` threads, 0: on the driver; in
 * `shards` shards, 0: the default) on an atomic clock set to `start`;
 * tw_wake makes it look. */
static inline tw_timer *mk_fake_sharded(struct atomic_clock *c, uint32_t workers,
                                        uint64_t start, uint32_t shards)
{
    return mk_fake_tick(c, workers, start, shards, 0);
}

static inline tw_timer *mk_fake_at(struct atomic_clock *c, uint32_t workers,
                                   uint64_t start)
{
    return mk_fake_sharded(c, workers, start, 0);
}

/* The driver is asleep: over 100 ms of real time it reads the timer's
 * clock at most a few times (a spurious wake-up of its condition
 * variable). A driver that spins reads it thousands of times. It may still
 * be on its way to sleep when this is called: 20 ms are given first. */
static inline void assert_driver_asleep(struct atomic_clock *c)
{
    usleep(20000);
    uint64_t r0 = atomic_load(&c->reads);
    usleep(100000);
    uint64_t reads = atomic_load(&c->reads) - r0;
    if (reads > 4)
        fail_msg("the driver read the clock %llu times in 100 ms while nothing was due",
                 (unsigned long long)reads);
}

/* Where mk_fake's clock starts: at 1000 s, or, with TW_TEST_CLOCK=late
 * (meson's threaded_late_clock and purgatory_late_clock), at a moment
 * whose count of 1 ms ticks is past 2^32, its low word 50 short of
 * wrapping, as a driver's is past 49.7 days of CLOCK_MONOTONIC: there, a
 * tick kept in 32 bits anywhere is seen. */
static inline uint64_t fake_start(void)
{
    const char *v = getenv("TW_TEST_CLOCK");
    return v && !strcmp(v, "late") ? ((3ull << 32) - 50) * MS : 1000 * SEC;
}

/* The same on a clock set to fake_start(). */
static inline tw_timer *mk_fake(struct atomic_clock *c, uint32_t workers)
{
    return mk_fake_at(c, workers, fake_start());
}

/* The process's threads whose name starts with prefix ("": all of them),
 * or -1 without /proc. */
static inline int count_threads_named(const char *prefix)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[300], name[32] = { 0 };
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(name, sizeof name, f) && !strncmp(name, prefix, strlen(prefix)))
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* count_threads_named, once it is `want` or after 1 s. A joined thread
 * can still be listed for a moment: pthread_join returns when the kernel
 * clears the thread's id, a little before it removes the thread. */
static inline int wait_threads_named(const char *prefix, int want)
{
    int n = count_threads_named(prefix);
    for (int i = 0; i < 1000 && n >= 0 && n != want; i++) {
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
        n = count_threads_named(prefix);
    }
    return n;
}

/* A counting allocator: fail_at = k makes the k-th allocation from now on
 * fail (once); live counts blocks not yet freed, bytes what they hold (a
 * 16-byte header keeps each block's size, so a timer's own accounting,
 * tw_stats.memory_bytes, can be checked against it). */
struct count_alloc {
    long allocs, frees, live;
    long fail_at;   /* 0 = never */
    long failed;
    size_t fail_above; /* 0 = no limit; else larger requests fail */
    size_t bytes;
    /* Set: a freed block is filled with TW_POISON and kept, not freed,
     * until count_quarantine_release checks that nothing wrote it since:
     * a use after free that writes shows in any build, not only under
     * AddressSanitizer. Its header's second word links the kept blocks. */
    int quarantine;
    size_t *kept;
};

#define TW_POISON 0xa5

static inline void *count_alloc_fn(void *ctx, size_t size)
{
    struct count_alloc *a = ctx;
    if ((a->fail_at && --a->fail_at == 0) || (a->fail_above && size > a->fail_above)) {
        a->failed++;
        return NULL;
    }
    size_t *p = malloc(size + 16);
    if (!p)
        return NULL;
    a->allocs++;
    a->live++;
    a->bytes += size;
    *p = size;
    return (char *)p + 16;
}

static inline void count_free_fn(void *ctx, void *p)
{
    struct count_alloc *a = ctx;
    size_t *h = (size_t *)((char *)p - 16);
    a->frees++;
    a->live--;
    a->bytes -= *h;
    if (a->quarantine) {
        memset(p, TW_POISON, *h);
        h[1] = (size_t)(uintptr_t)a->kept;
        a->kept = h;
        return;
    }
    free(h);
}

/* Frees the blocks the quarantine kept; returns how many of them were
 * written after they were freed (0 if none). */
static inline long count_quarantine_release(struct count_alloc *a)
{
    long written = 0;
    while (a->kept) {
        size_t *h = a->kept;
        const unsigned char *b = (const unsigned char *)h + 16;
        for (size_t i = 0; i < h[0]; i++)
            if (b[i] != TW_POISON) {
                written++;
                break;
            }
        a->kept = (size_t *)(uintptr_t)h[1];
        free(h);
    }
    return written;
}

/* The counting allocator as a timer's allocator. */
static inline struct tw_allocator counting(struct count_alloc *a)
{
    return (struct tw_allocator){ count_alloc_fn, count_free_fn, a };
}

/* Options for a manual timer on a fake clock starting at `start`. */
static inline struct tw_options manual_opts(struct fake_clock *c, uint64_t start,
                                            uint64_t tick, uint32_t wheel)
{
    struct tw_options o;
    tw_options_init(&o);
    c->now = start;
    o.clock = fake_clock_read;
    o.clock_ctx = c;
    o.tick_ns = tick;
    o.wheel_size = wheel;
    return o;
}

/* Records firings: which arg fired, at which timer time, in which order. */
#define REC_MAX 4096
struct recorder {
    int n;
    uintptr_t args[REC_MAX];
    tw_id ids[REC_MAX];
    uint64_t at[REC_MAX];
};

static inline void record_fn(tw_timer *t, tw_id id, void *arg)
{
    struct recorder *r = *(struct recorder **)arg;
    (void)t;
    if (r->n < REC_MAX) {
        r->args[r->n] = (uintptr_t)arg;
        r->ids[r->n] = id;
        r->at[r->n] = tw_now(t);
    }
    r->n++;
}

static inline void noop_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    (void)arg;
}

/* A key of n bytes (n >= 1) in a pattern, and in *twin the same key with
 * its last byte changed: the tests of keys longer than 16 bits can count.
 * Both from malloc; the caller frees them. */
static inline unsigned char *long_key(size_t n, unsigned char **twin)
{
    unsigned char *k = malloc(n), *o = malloc(n);
    assert_non_null(k);
    assert_non_null(o);
    for (size_t i = 0; i < n; i++)
        k[i] = (unsigned char)(i * 7 + 3);
    memcpy(o, k, n);
    o[n - 1] ^= 1;
    *twin = o;
    return k;
}

static inline void count_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    (*(int *)arg)++;
}

static inline void assert_check(tw_timer *t)
{
    assert_int_equal(tw_check(t, stderr), 0);
}

/* A death test: runs fn(arg) in a child process and returns 1 if the
 * child was killed by SIGABRT after writing `msg` to its stderr (a pipe
 * read here; valgrind's report, when under valgrind, goes there too). A
 * child that returns from fn exits 0, and one still running after 60 s
 * dies of SIGALRM: either fails. */
static inline int aborts_with(void (*fn)(void *), void *arg, const char *msg)
{
    int fd[2];
    if (pipe(fd))
        return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        /* cmocka's handlers would catch a crash here and go on running
         * the rest of the suite in the child */
        static const int crash[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT };
        for (size_t i = 0; i < sizeof crash / sizeof crash[0]; i++)
            signal(crash[i], SIG_DFL);
        close(fd[0]);
        dup2(fd[1], 2);
        alarm(60); /* a child that hangs instead fails the test (SIGALRM) */
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    static char out[1 << 16];
    char sink[4096];
    size_t n = 0;
    for (;;) { /* read to the end, so that a long report cannot block it */
        int room = n + 1 < sizeof out;
        ssize_t k = room ? read(fd[0], out + n, sizeof out - 1 - n)
                         : read(fd[0], sink, sizeof sink);
        if (k <= 0)
            break;
        if (room)
            n += (size_t)k;
    }
    out[n] = 0;
    close(fd[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return 0;
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || !strstr(out, msg)) {
        fprintf(stderr, "child: %s %d; its stderr:\n%s\n",
                WIFSIGNALED(st) ? "signal" : "exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), out);
        return 0;
    }
    return 1;
}

#endif
