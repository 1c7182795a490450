/* The shard lock's contended halves (see lock.h for the protocol). */
#include "lock.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How many times a contended lock is tried again before its thread
 * sleeps: glibc's adaptive mutex spins up to 100 (its default
 * max_adaptive_count). A shard's critical sections are well under a
 * microsecond, so on two or more CPUs the holder is usually done first. */
#define SPINS 100

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static void futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    /* EAGAIN (the word changed before the sleep) and EINTR both mean: look
     * again, which the caller's loop does */
    (void)syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

/* The spin goes on while others sleep (the word is 2), as glibc's adaptive
 * mutex's does. Taking a free word with 1 then is safe: the word leaves 2
 * only through an unlock that saw 2 and so woke a sleeper, and a woken
 * thread sets 2 again when it runs (below), whether it takes the lock or
 * sleeps once more. So while anyone sleeps, the word is 2 or a woken thread
 * is on its way to make it 2, and the sleepers left are woken in turn.
 * Stopping at 2, to queue behind the sleepers, made the contended lock's
 * sleeping path run all the time: once a thread has slept the word stays 2,
 * and every waiter went to the kernel at once (W5, two threads on one shard
 * in its slow mode: 3.3 to 4.2 million futex calls per 8 million pairs, a
 * median of 1.38 M pairs a second over 30 runs; spinning on, 1.9 to 2.4
 * million and 1.79; level where the host passes lines quickly:
 * benchmarks/results/history.md, "One contended shard follows the host").
 * Not a gain on every host: on a Zen 4 guest's slow mode two threads made
 * a fifth less with it (2.69 against 3.39) and eight a seventh more, their
 * longest stall 29 ms against 10 (history.md, "The lock's spin on the Zen
 * 4 guest"). */
void tw__lock_wait(struct tw__lock *l)
{
    for (int i = 0; i < SPINS; i++) {
        uint32_t v = atomic_load_explicit(&l->v, memory_order_relaxed);
        if (v == 0 && atomic_compare_exchange_weak_explicit(
                          &l->v, &v, 1, memory_order_acquire, memory_order_relaxed))
            return;
        cpu_relax();
    }
    /* Taking it with 2 (not 1): this thread cannot know whether another
     * still sleeps, so its unlock must wake one. */
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        futex(&l->v, FUTEX_WAIT_PRIVATE, 2);
}

void tw__lock_wake(struct tw__lock *l)
{
    futex(&l->v, FUTEX_WAKE_PRIVATE, 1);
}
#else
typedef int tw__lock_c_unused; /* elsewhere lock.h is all: no empty file */
#endif
