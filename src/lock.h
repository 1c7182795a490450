/* The shard lock.
 *
 * A threaded schedule or cancel holds its shard's lock around a few dozen
 * instructions of wheel work. glibc's pthread_mutex_lock and unlock take
 * ~31 and ~34 instructions a call (callgrind: the type dispatch, the
 * elision and owner bookkeeping, the PLT), so a schedule + cancel pair
 * spent ~130 instructions on its two locks, and the calls made GCC keep
 * every live value in a saved register. This lock is Drepper's third
 * futex mutex ("Futexes Are Tricky", 2011): taking it free and releasing
 * it with no waiter are one atomic instruction each, inline.
 *
 *   v == 0: free; 1: held, no waiter; 2: held, and a thread may sleep on it.
 *
 * A contended lock spins a little first (as glibc's adaptive mutex, which
 * this replaces, did), even while others sleep: the holder's critical
 * section is short, and a futex sleep and wake cost microseconds. A
 * waiter that sleeps sets 2, so the unlock that sees 2 makes the one
 * futex call that wakes it; every woken thread takes the lock with 2
 * again, as it cannot know whether others still sleep (a spare wake at
 * worst, never a lost one). A spinner may take the lock before a woken
 * sleeper does: no order is kept among waiters.
 *
 * Known cost: the unlock's exchange is a locked instruction, a full
 * barrier on x86, because it must read the word it clears. Measured on
 * the Zen 5 guest, that is ~11 ns of a threaded schedule + cancel pair
 * with the tasks in the cache and 50 to 60 ns at 10^6 pending. A plain
 * store instead can lose a wake-up, unless the waiter pays the
 * barrier (membarrier: a contended shard a quarter as fast there, at
 * worst) or bounds its sleep (a lost wake-up then costs up to that
 * bound, in a race no figure could show to be rare); both tried,
 * neither kept (benchmarks/results/history.md, "An unlock without a
 * locked instruction").
 *
 * A shard's lock is never held across user code or a sleep (the driver
 * sleeps on its own mutex and condition variable). The purgatory's ops
 * hold it, made recursive (purgatory.c, op_lock), across try_complete and
 * on_complete: a waiter then spins its 100 times and sleeps until the
 * callback is done, as it would on a pthread mutex. Not recursive itself,
 * no owner check. Memory order: acquire on taking, release
 * on releasing, so ThreadSanitizer sees the happens-before edges it needs
 * through the atomics themselves.
 *
 * Order: an op's lock is taken before a watch list shard's (a submission
 * watches its keys under it) and before a timer shard's (a completion
 * cancels the op's timeout under it), and a timer shard's before the
 * runtime's mutex (a schedule that makes an earlier bucket kicks the
 * driver); never the other way round. ThreadSanitizer's deadlock
 * detector follows pthread mutexes only, so CI checks this order in its
 * build with __linux__ undefined, where this lock is one.
 *
 * Elsewhere than Linux (no futex) it is a pthread mutex. */
#ifndef TW_LOCK_H
#define TW_LOCK_H

#ifdef __linux__
#include <stdatomic.h>
#include <stdint.h>

struct tw__lock {
    _Atomic uint32_t v;
};

/* The contended halves, out of line (lock.c). */
void tw__lock_wait(struct tw__lock *l);
void tw__lock_wake(struct tw__lock *l);

/* Returns 0, or a negative errno (only where it is a pthread mutex). */
static inline int tw__lock_init(struct tw__lock *l)
{
    atomic_init(&l->v, 0);
    return 0;
}

static inline void tw__lock_destroy(struct tw__lock *l)
{
    (void)l;
}

static inline __attribute__((always_inline)) void tw__lock(struct tw__lock *l)
{
    uint32_t free_ = 0;
    if (__builtin_expect(!atomic_compare_exchange_strong_explicit(
                             &l->v, &free_, 1, memory_order_acquire,
                             memory_order_relaxed), 0))
        tw__lock_wait(l);
}

static inline __attribute__((always_inline)) void tw__unlock(struct tw__lock *l)
{
    if (__builtin_expect(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2, 0))
        tw__lock_wake(l);
}

#else /* no futex: a pthread mutex */
#include <pthread.h>

struct tw__lock {
    pthread_mutex_t m;
};

static inline int tw__lock_init(struct tw__lock *l)
{
    return -pthread_mutex_init(&l->m, NULL); /* e.g. ENOMEM on FreeBSD */
}

static inline void tw__lock_destroy(struct tw__lock *l)
{
    pthread_mutex_destroy(&l->m);
}

static inline void tw__lock(struct tw__lock *l)
{
    pthread_mutex_lock(&l->m);
}

static inline void tw__unlock(struct tw__lock *l)
{
    pthread_mutex_unlock(&l->m);
}
#endif

#endif
