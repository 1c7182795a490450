/* runtime.c: the threaded runtime. A driver thread advances the timer by
 * itself; callbacks run on it or on a pool of workers.
 *
 * Sleeping. The driver sleeps on a condition variable (CLOCK_MONOTONIC)
 * until the earliest occupied bucket of any shard comes due. Nothing wakes
 * it before then except a schedule that creates an earlier bucket, and it
 * never wakes for an empty tick (Netty wakes every tick; Kafka's reaper
 * polls every 200 ms). The earliest occupied bucket may be a coarse one
 * whose tasks are not due yet: its time is when they move down a level
 * (wheel.c), so with nothing due the driver may still wake for that, at
 * most once per level in a task's life and never sooner than about half
 * the task's delay after it was scheduled.
 *
 * No lost wake-up. The driver publishes its planned wake time (`target`)
 * and then reads every shard's earliest bucket again. A scheduler inserts
 * under its shard lock and then reads `target`. Either the driver's second
 * read sees the new bucket, or the scheduler sees the new target and
 * kicks: it bumps `kicks` under the runtime mutex and signals. The driver
 * compares `kicks` with the value it saw before planning, under the same
 * mutex, before it waits (as it checks for a tw_wake or a tw_stop that
 * came in since it planned; tests/test_runtime_race.c lands each of these
 * in its window: a schedule before the plan is out and one after, a
 * tw_wake, a tw_stop). A schedule that creates no earlier bucket costs one
 * atomic load here and nothing more.
 *
 * Firing. For each shard, under its lock: collect what is due, then take
 * up to a batch of jobs (a one-shot task is released as it is taken, so a
 * cancel from then on returns -ENOENT; before that, a cancel removes it
 * and it never runs: one winner). The lock is dropped, and the callbacks
 * run (workers = 0) or go to the workers' queue. No lock of ours is held
 * while user code runs. A periodic task is re-armed, under its shard lock,
 * after its callback returns.
 *
 * Lateness. tw_stats measures the tasks whose callbacks run, and a task
 * the driver took may still be handed back unrun (by tw_stop; a periodic
 * one also by a cancel or a drain). So a job carries its lateness, and it
 * is recorded only where the job is sure to run, under a lock already
 * held there: a periodic job in periodic_still_due (shard lock); a
 * one-shot job run by the driver when the driver takes the shard lock
 * again after its batch; one run by a worker as the worker takes it from
 * the queue (queue lock), into the runtime's own figures, which tw_stats
 * adds in.
 *
 * Signals. The driver and the workers are the library's threads, not the
 * application's: a process-directed signal (SIGINT, SIGTERM, SIGCHLD, a
 * timer's SIGALRM) must reach a thread of the application, which may run
 * its handler or sigwait() for it, and never interrupt a callback on one of
 * ours. So they start with every signal blocked but the ones a fault
 * raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGPROF:
 * a crash in a callback still reaches the application's crash handler (a
 * blocked fault signal would kill the process without it), and a sampling
 * profiler (setitimer's or a per-thread timer's SIGPROF) still sees where
 * the callbacks spend their time. The mask is set around
 * pthread_create, which copies it into the new thread, rather than by the
 * thread itself, so no signal can land on a thread in its first moments.
 *
 * Stopping. tw_stop marks the timer stopped (schedules fail from then
 * on), stops the driver, which finishes the callback it is running and
 * hands back the rest of its batch, stops the workers likewise, hands back
 * what is left in their queue, and finally drains every shard. Every task
 * either ran, was cancelled, or was handed back: nothing is lost. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "timer.h"
#include "wrap.h"

#define BATCH 64
#define QUEUE_CAP 16384u /* jobs waiting for a worker (driver blocks beyond) */

struct tw__runtime {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the driver sleeps here */
    pthread_cond_t done_cv; /* tw_wake callers wait here, and a second
                               tw_stop for the first */
    int stop_done;          /* under mu: a stop has finished */
    pthread_t driver;
    int driver_started;
    int stopping;           /* under mu */
    uint64_t kicks;         /* under mu */
    uint64_t wake_req, wake_done; /* under mu */
    _Atomic uint64_t target; /* when the driver plans to wake (ns) */
    _Atomic int halt;        /* stop dispatching: hand back instead */
    int real_clock;          /* the timer's clock is CLOCK_MONOTONIC */

    /* workers */
    uint32_t nworkers, started;
    pthread_t *workers;
    pthread_mutex_t qmu;
    pthread_cond_t qcv, qspace;
    struct tw__job *ring;
    uint32_t head, count;
    int wstop;

    /* lateness of the one-shot jobs the workers took (under qmu) */
    uint64_t late_max;
    uint64_t late_hist[TW__LATE_BUCKETS];

    /* tw_stop */
    tw_fn unfired;
    void *unfired_arg; /* what tw_drain_arg returns to unfired */
    _Atomic uint64_t handed;
};

static _Thread_local tw_timer *tls_timer; /* set on driver/worker threads */

int tw__runtime_own_thread(tw_timer *t)
{
    return tls_timer == t;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- handing back ------------------------------------------------------ */

/* A taken periodic job that will not run, cancelled or drained (its
 * state says which): its firing was counted when it was taken, and was
 * not; released here. Shard lock held. */
static void drop_periodic(tw_timer *t, struct tw__job *j)
{
    t->shards[j->shard].eng.fired--;
    tw__finish_periodic(t, j->shard, j, 0);
}

/* A job that was taken but will not run. One-shot tasks were released
 * when taken; a periodic one is released here, and handed back unless it
 * was cancelled or drained meanwhile (then its canceller or the drain had
 * it). */
static void hand_back(tw_timer *t, struct tw__job *j)
{
    struct tw__runtime *rt = t->rt;
    struct tw__shard *sh = &t->shards[j->shard];
    struct tw__engine *e = &sh->eng;
    tw__lock(&sh->lock);
    if (j->x) {
        int live = tw__extra_live(j->x);
        if (live) {
            j->x->state = TW__X_DRAINED;
            e->drained++;
            tw__pending_release(t);
        }
        drop_periodic(t, j);
        tw__unlock(&sh->lock);
        if (!live)
            return;
    } else {
        e->fired--; /* counted as fired when taken */
        e->completed--;
        e->drained++;
        tw__unlock(&sh->lock);
    }
    atomic_fetch_add(&rt->handed, 1);
    if (rt->unfired) { /* on the driver, or on tw_stop's thread */
        struct tw__drain_ctx c;
        tw__drain_enter(&c, t, rt->unfired_arg);
        rt->unfired(t, j->id, j->arg);
        tw__drain_leave(&c);
    }
}

/* A periodic job is looked at once more before it runs: cancelled or
 * drained since the driver took it (while it waited in the batch or the
 * workers' queue), it does not run: tw_cancel returned 0, or tw_drain
 * handed it back. Returns whether it may run; if not, releases it. */
static int periodic_still_due(tw_timer *t, struct tw__job *j)
{
    struct tw__shard *sh = &t->shards[j->shard];
    tw__lock(&sh->lock);
    int live = tw__extra_live(j->x);
    if (live)
        tw__late_record(&sh->eng, j->late); /* see tw__take_job */
    else
        drop_periodic(t, j);
    tw__unlock(&sh->lock);
    return live;
}

/* Runs one job on this thread, then re-arms it if periodic. */
static void run_job(tw_timer *t, struct tw__job *j)
{
    if (j->x && !periodic_still_due(t, j))
        return;
    j->fn(t, j->id, j->arg);
    if (j->x) {
        struct tw__shard *sh = &t->shards[j->shard];
        uint64_t now = tw__clock_now(t);
        tw__lock(&sh->lock);
        uint64_t before = tw__engine_head(&sh->eng);
        tw__finish_periodic(t, j->shard, j, now);
        if (tw__engine_head_earlier(&sh->eng, before))
            tw__runtime_kick(t, tw__shard_next_ns(&sh->eng));
        tw__unlock(&sh->lock);
    }
}

/* ---- workers ------------------------------------------------------------ */

static void queue_push(tw_timer *t, struct tw__job *j)
{
    struct tw__runtime *rt = t->rt;
    pthread_mutex_lock(&rt->qmu);
    while (rt->count == QUEUE_CAP && !rt->wstop)
        pthread_cond_wait(&rt->qspace, &rt->qmu);
    if (rt->wstop) { /* tw_stop has begun: the workers take no more */
        pthread_mutex_unlock(&rt->qmu);
        hand_back(t, j);
        return;
    }
    rt->ring[(rt->head + rt->count++) % QUEUE_CAP] = *j;
    pthread_cond_signal(&rt->qcv);
    pthread_mutex_unlock(&rt->qmu);
}

static void *worker_main(void *p)
{
    tw_timer *t = p;
    struct tw__runtime *rt = t->rt;
    tls_timer = t;
    pthread_mutex_lock(&rt->qmu);
    for (;;) {
        while (!rt->count && !rt->wstop)
            pthread_cond_wait(&rt->qcv, &rt->qmu);
        if (rt->wstop)
            break; /* what is queued is handed back by tw_stop */
        struct tw__job j = rt->ring[rt->head];
        rt->head = (rt->head + 1) % QUEUE_CAP;
        rt->count--;
        if (!j.x) /* sure to run now (see "Lateness" at the top) */
            tw__late_add(&rt->late_max, rt->late_hist, j.late);
        pthread_cond_signal(&rt->qspace);
        pthread_mutex_unlock(&rt->qmu);
        run_job(t, &j);
        pthread_mutex_lock(&rt->qmu);
    }
    pthread_mutex_unlock(&rt->qmu);
    return NULL;
}

/* ---- the driver ------------------------------------------------------- */

/* Fires what is due at `now` on one shard. */
static void dispatch_shard(tw_timer *t, uint32_t si, uint64_t now)
{
    struct tw__runtime *rt = t->rt;
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    struct tw__job batch[BATCH];
    tw__lock(&sh->lock);
    if (e->draining) { /* see draining in wheel.h; the drain kicks after */
        tw__unlock(&sh->lock);
        return;
    }
    if (now > e->now_ns)
        tw__engine_set_now(e, now);
    uint64_t r, target = now == UINT64_MAX ? tw__ticks_ceil(e, now)
                                           : tw__div_floor(&e->tick, now, &r);
    uint64_t pops = 0;
    if ((e->dq.n && e->dq.h[0].exp <= target) || tw__expired_first(e) != TW__EXPIRED_SENT) {
        e->advances++;
        pops = tw__wheel_collect(e, target);
    }
    for (;;) {
        int n = 0;
        /* Once halted, take nothing more: tw_stop's drain hands it back.
         * Nor while a drain runs: it may have begun while the lock was
         * dropped for the last batch, and its tasks, due or not, are on
         * the expired list now. */
        while (n < BATCH && !e->draining &&
               !atomic_load_explicit(&rt->halt, memory_order_acquire) &&
               tw__take_job(t, si, now, &batch[n]) == 0)
            n++;
        /* every due task taken (and, with no workers, run): spread the
         * next cascades, where no firing waits for it. It moves tasks only
         * to buckets due no earlier than the one they leave, so the
         * driver's next wake-up stands. */
        if (!n && pops && !e->draining)
            tw__wheel_spread(e);
        if (!n)
            tw__engine_rewind_if_empty(e);
        tw__unlock(&sh->lock);
        if (!n)
            return;
        uint64_t ran[BATCH]; /* the lateness of one-shot jobs run */
        int nran = 0;
        for (int k = 0; k < n; k++) {
            if (atomic_load_explicit(&rt->halt, memory_order_acquire)) {
                hand_back(t, &batch[k]);
            } else if (rt->nworkers) {
                queue_push(t, &batch[k]);
            } else {
                if (!batch[k].x)
                    ran[nran++] = batch[k].late;
                run_job(t, &batch[k]);
            }
        }
        tw__lock(&sh->lock);
        for (int k = 0; k < nran; k++)
            tw__late_record(e, ran[k]);
    }
}

/* The earliest bucket of all shards, in ns; *found says whether there is
 * one. UINT64_MAX alone cannot say it: a bucket at the end of time (or
 * past it, clamped) has that time too, and once the clock is there that
 * bucket is due now, where "none" must let the driver sleep. */
static uint64_t next_due(tw_timer *t, int *found)
{
    uint64_t best = UINT64_MAX;
    *found = 0;
    for (uint32_t s = 0; s < t->nshards; s++) {
        struct tw__shard *sh = &t->shards[s];
        tw__lock(&sh->lock);
        /* a shard being drained has nothing for the driver until the
         * drain ends (it kicks then) */
        uint64_t v = UINT64_MAX;
        int any = !sh->eng.draining && tw__shard_next(&sh->eng, &v);
        tw__unlock(&sh->lock);
        *found |= any;
        if (v < best)
            best = v;
    }
    return best;
}

static void *driver_main(void *p)
{
    tw_timer *t = p;
    struct tw__runtime *rt = t->rt;
    tls_timer = t;
#ifdef __linux__
    /* Linux lets a sleep end up to the thread's timer slack late (50 us
     * unless the process set it), so that wake-ups can be merged. The
     * driver sleeps only until a bucket is due and its whole job is to be
     * on time: it asks for the least slack, 1 ns. That took ~50 us off
     * every firing in W2 (p50 0.63 -> 0.58 ms) at no measurable CPU. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    pthread_mutex_lock(&rt->mu);
    while (!rt->stopping) {
        uint64_t seen_kicks = rt->kicks, req = rt->wake_req;
        pthread_mutex_unlock(&rt->mu);

        uint64_t now = tw__clock_now(t);
        for (uint32_t s = 0; s < t->nshards && !atomic_load(&rt->halt); s++)
            dispatch_shard(t, s, now);

        /* plan: publish the wake time, then look again (see the top) */
        int found, found_again;
        uint64_t next = next_due(t, &found);
        atomic_store(&rt->target, next);
        uint64_t again = next_due(t, &found_again);

        pthread_mutex_lock(&rt->mu);
        /* This pass answers the tw_wake calls made before it began, unless
         * tw_stop halted it: it may then have left due tasks untaken (the
         * stop hands them back), and those calls return -ESHUTDOWN. */
        if (!atomic_load(&rt->halt)) {
            rt->wake_done = req;
            pthread_cond_broadcast(&rt->done_cv);
        }
        if (rt->stopping || again < next || found_again > found ||
            rt->kicks != seen_kicks || rt->wake_req != req)
            continue;
        uint64_t clock_now = tw__clock_now(t);
        if (found && next <= clock_now)
            continue; /* already due: go round again */
        /* Sleep on CLOCK_MONOTONIC. With the timer's own clock, the
         * distance to the deadline is what we can honour. With nothing
         * pending, until woken: a schedule kicks (tw__runtime_kick). */
        uint64_t wait = found ? next - clock_now : UINT64_MAX;
        uint64_t mono = rt->real_clock ? clock_now : mono_ns();
        uint64_t until = tw__sat_add64(mono, wait);
        if (until > (uint64_t)INT64_MAX)
            until = (uint64_t)INT64_MAX;
        /* a 32-bit time_t (i386, armhf) counts 68 years of seconds: a
         * sleep further out is cut there (the driver then replans), not
         * wrapped into the past, where it would spin */
        uint64_t sec = until / 1000000000u;
        if (sizeof(time_t) < 8 && sec > (uint64_t)INT32_MAX)
            sec = (uint64_t)INT32_MAX;
        struct timespec ts = { (time_t)sec, (long)(until % 1000000000u) };
        pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
        atomic_store(&rt->target, 0); /* awake: the next pass replans */
    }
    /* a tw_wake still waiting was answered by no pass: it sees stopping */
    pthread_cond_broadcast(&rt->done_cv);
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

void tw__runtime_late(tw_timer *t, uint64_t *max, uint64_t *hist)
{
    struct tw__runtime *rt = t->rt;
    if (!rt)
        return;
    pthread_mutex_lock(&rt->qmu);
    if (rt->late_max > *max)
        *max = rt->late_max;
    for (int b = 0; b < TW__LATE_BUCKETS; b++)
        hist[b] += rt->late_hist[b];
    pthread_mutex_unlock(&rt->qmu);
}

void tw__runtime_kick(tw_timer *t, uint64_t exp_ns)
{
    struct tw__runtime *rt = t->rt;
    if (!rt)
        return;
    /* A target of UINT64_MAX may be "nothing pending" (next_due): a task
     * due at the end of time wakes the driver then too, since once the
     * clock is there (an injectable clock's) it is due now. A plan for
     * the end of time is woken by it as well, needlessly, but only when
     * a shard goes from no bucket to one there: a schedule kicks only
     * when it makes its shard's earliest bucket earlier. */
    uint64_t target = atomic_load(&rt->target);
    if (exp_ns >= target && target != UINT64_MAX)
        return;
    pthread_mutex_lock(&rt->mu);
    rt->kicks++;
    pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
}

/* ---- start / stop ------------------------------------------------------ */

static void name_thread(pthread_t th, const char *name)
{
#ifdef __linux__
    pthread_setname_np(th, name); /* 15 characters at most */
#else
    (void)th;
    (void)name;
#endif
}

int (*tw__thread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                         void *) = pthread_create;

/* Blocks every signal but the fault signals and SIGPROF in the calling
 * thread, and saves its mask in *old (see "Signals" above). */
static void block_async_signals(sigset_t *old)
{
    static const int deliverable[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                                      SIGTRAP, SIGSYS, SIGPROF};
    sigset_t set;
    sigfillset(&set);
    for (size_t i = 0; i < sizeof deliverable / sizeof deliverable[0]; i++)
        sigdelset(&set, deliverable[i]);
    pthread_sigmask(SIG_SETMASK, &set, old);
}

int tw__runtime_start(tw_timer *t, const struct tw_options *o)
{
    struct tw__runtime *rt = tw__alloc(&t->mem, sizeof(*rt));
    if (!rt)
        return -ENOMEM;
    memset(rt, 0, sizeof(*rt));
    rt->real_clock = o->clock == NULL;
    rt->nworkers = o->workers;
    atomic_init(&rt->target, 0);
    atomic_init(&rt->halt, 0);
    atomic_init(&rt->handed, 0);

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->cv, &ca);
    pthread_cond_init(&rt->done_cv, NULL);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&rt->qmu, NULL);
    pthread_cond_init(&rt->qcv, NULL);
    pthread_cond_init(&rt->qspace, NULL);
    t->rt = rt;

    int rc = 0;
    sigset_t caller_mask;
    block_async_signals(&caller_mask); /* inherited by every thread below */
    if (rt->nworkers) {
        rt->workers = tw__alloc(&t->mem, rt->nworkers * sizeof(pthread_t));
        rt->ring = tw__alloc(&t->mem, QUEUE_CAP * sizeof(struct tw__job));
        if (!rt->workers || !rt->ring)
            rc = -ENOMEM;
        for (uint32_t k = 0; !rc && k < rt->nworkers; k++) {
            if ((rc = -tw__thread_create(&rt->workers[k], NULL, worker_main, t)))
                break;
            char name[16];
            snprintf(name, sizeof name, "tw-worker-%u", k % 1000u);
            name_thread(rt->workers[k], name);
            rt->started++;
        }
    }
    if (!rc && !(rc = -tw__thread_create(&rt->driver, NULL, driver_main, t))) {
        rt->driver_started = 1;
        name_thread(rt->driver, "tw-driver");
    }
    pthread_sigmask(SIG_SETMASK, &caller_mask, NULL);
    if (rc) {
        atomic_store(&t->stopped, 1);
        tw__runtime_free(t);
    }
    return rc;
}

/* tw_stop's body. With drain 0 (tw_destroy's stop) the shards keep their
 * pending tasks, which free_shards (timer.c) then frees with the pool,
 * walking only a shard whose tasks hold memory of their own; the count
 * returned leaves them out. */
static int stop_runtime(tw_timer *t, tw_fn unfired, void *arg, int drain)
{
    struct tw__runtime *rt = t->rt;
    if (atomic_exchange(&t->stopped, 1)) {
        /* Another stop is under way, or done. "Already stopped" is said
         * once it is done: till then its callbacks may still run, and its
         * hand-back is not over. Not from inside a drain of t (that
         * stop's own unfired callbacks, say), which would wait for
         * itself. */
        if (tw__in_callback(t))
            return -EALREADY;
        pthread_mutex_lock(&rt->mu);
        while (!rt->stop_done)
            pthread_cond_wait(&rt->done_cv, &rt->mu);
        pthread_mutex_unlock(&rt->mu);
        return -EALREADY;
    }
    rt->unfired = unfired; /* read by the driver once it sees halt */
    rt->unfired_arg = arg;
    struct tw__drain_ctx c;
    tw__drain_enter(&c, t, arg);
    atomic_store(&rt->halt, 1);
    /* From here no job starts: the driver takes no more tasks and hands
     * back what it holds, and the workers take nothing more from their
     * queue, which is handed back below. Only callbacks already running
     * finish. (The workers stop before the driver is joined: a driver
     * blocked on a full queue wakes, and gives its job back.) */
    pthread_mutex_lock(&rt->qmu);
    rt->wstop = 1;
    pthread_cond_broadcast(&rt->qcv);
    pthread_cond_broadcast(&rt->qspace);
    pthread_mutex_unlock(&rt->qmu);

    pthread_mutex_lock(&rt->mu);
    rt->stopping = 1;
    pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    if (rt->driver_started)
        pthread_join(rt->driver, NULL);
    rt->driver_started = 0;
    for (uint32_t k = 0; k < rt->started; k++)
        pthread_join(rt->workers[k], NULL);
    rt->started = 0;
    while (rt->count) { /* queued, never run */
        struct tw__job j = rt->ring[rt->head];
        rt->head = (rt->head + 1) % QUEUE_CAP;
        rt->count--;
        hand_back(t, &j);
    }

    size_t n = 0;
    for (uint32_t s = 0; drain && s < t->nshards; s++)
        n += tw__drain_shard(t, s, unfired);
    uint64_t total = atomic_load(&rt->handed) + n;
    tw__drain_leave(&c);
    pthread_mutex_lock(&rt->mu);
    rt->stop_done = 1;
    pthread_cond_broadcast(&rt->done_cv);
    pthread_mutex_unlock(&rt->mu);
    return total > INT_MAX ? INT_MAX : (int)total;
}

int tw_stop(tw_timer *t, tw_fn unfired, void *arg)
{
    if (!t || !t->threaded || !t->rt)
        return -EINVAL;
    if (tls_timer == t)
        return -EDEADLK; /* a callback cannot wait for itself */
    return stop_runtime(t, unfired, arg, 1);
}

int tw_wake(tw_timer *t)
{
    if (!t || !t->threaded || !t->rt)
        return -EINVAL;
    if (tls_timer == t)
        return -EDEADLK;
    struct tw__runtime *rt = t->rt;
    pthread_mutex_lock(&rt->mu);
    if (rt->stopping) {
        pthread_mutex_unlock(&rt->mu);
        return -ESHUTDOWN;
    }
    uint64_t req = ++rt->wake_req;
    pthread_cond_signal(&rt->cv);
    while (rt->wake_done < req && !rt->stopping)
        pthread_cond_wait(&rt->done_cv, &rt->mu);
    int rc = rt->wake_done >= req ? 0 : -ESHUTDOWN;
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

void tw__runtime_free(tw_timer *t)
{
    struct tw__runtime *rt = t->rt;
    if (!rt)
        return;
    if (!atomic_load(&t->stopped) || rt->driver_started || rt->started) {
        /* still running (tw_destroy without tw_stop): stop, dropping what
         * is pending */
        atomic_store(&t->stopped, 0);
        stop_runtime(t, NULL, NULL, 0);
    }
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->cv);
    pthread_cond_destroy(&rt->done_cv);
    pthread_mutex_destroy(&rt->qmu);
    pthread_cond_destroy(&rt->qcv);
    pthread_cond_destroy(&rt->qspace);
    tw__free(&t->mem, rt->ring, rt->ring ? QUEUE_CAP * sizeof(struct tw__job) : 0);
    tw__free(&t->mem, rt->workers, rt->workers ? rt->nworkers * sizeof(pthread_t) : 0);
    tw__free(&t->mem, rt, sizeof(*rt));
    t->rt = NULL;
}
