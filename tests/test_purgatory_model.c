/* test_purgatory_model.c: the purgatory against a reference model. A
 * seeded PRNG drives thousands of random steps on a manual purgatory (ops
 * created, submitted under 0 to 3 keys, repeated keys included, completed
 * by a key's event or by force_complete, keys cancelled, lists purged, the
 * clock advanced so that timeouts expire, ops released while still listed
 * or pending), with allocations failing now and then. After every step
 * each op's callbacks, tries and state, every return code and the two
 * counts must be the model's; at the end, destroy must hand back exactly
 * the ops still waiting on a timeout, and nothing may leak. Half the
 * seeds run on a threaded timer driven by tw_wake.
 *
 * Built with -DTW_PURGATORY_FUZZ, the same run is a libFuzzer target
 * (fuzz_purgatory) and, through fuzz_replay.c, a replay of generated
 * inputs and of its corpus on every compiler: each choice is then a byte
 * of the input, and the run ends with the input. A disagreement with the
 * model aborts (CMOCKA_TEST_ABORT). Two in three threaded seeds (half
 * the fuzzer's threaded inputs) give the timer two workers: expirations
 * and the reaper then run there, beside each other, and the test waits
 * for the expirations each advance made due. */
#include "helpers.h"

#include <pthread.h>

#include <stdbool.h>

#include "twheel_purgatory.h"
#include "purgatory.h" /* purge_slice */

#define MAXOPS 1000
#define NKEYS 6
#define MAXENT 4096

/* What the callbacks see: the real side. */
struct rec {
    int need;      /* completable from this try on (0: when `flag`) */
    int flag;
    int tries, completed, expired, expired_early, handed_cancel, handed_destroy;
};

/* The model of one op. */
struct mop {
    tw_op *op; /* while the test holds it */
    int submitted, completed, expired, tries, delayed;
    uint64_t timeout, due;
};

/* How often each outcome came up, over all seeds: the run must reach
 * every one, or it proves nothing about it. */
enum { O_SUBMIT_FIRST, O_SUBMIT_SECOND, O_SUBMIT_WAIT, O_SUBMIT_DONE_BEFORE, O_SUBMIT_TWICE,
       O_SUBMIT_NOMEM, O_CHECK_DONE, O_CHECK_NOMEM, O_FORCE, O_CANCELLED, O_PURGED, O_EXPIRED,
       O_RELEASED_LISTED, O_HANDED, O_AUTOPURGED, O_EXPIRED_ON_WORKERS, NOUTCOMES };
static long outcome[NOUTCOMES];
#ifndef TW_PURGATORY_FUZZ /* printed by the cmocka test only */
static const char *outcome_name[NOUTCOMES] = {
    "completed by the first try", "completed by the second try", "watched and delayed",
    "submitted already completed", "submitted twice (refused)", "submit out of memory",
    "completed by an event", "event out of memory", "force-completed", "handed over by cancel_key",
    "purged", "expired", "released while listed", "handed back by destroy",
    "steps after a purge by itself", "expired on a worker",
};
#endif

static struct rec recs[MAXOPS];
static struct mop m[MAXOPS];
static int nops;
/* each key's list: op indices in watch order, completed entries too */
static int lists[NKEYS][MAXENT];
static int nlist[NKEYS];
static const char *keyname[NKEYS] = { "a", "bb", "ccc", "topic-0", "topic-1", "k" };

static bool try_fn(tw_op *op)
{
    struct rec *r = tw_op_ctx(op);
    r->tries++;
    bool ready = r->need ? r->tries >= r->need : r->flag;
    return ready && tw_op_force_complete(op);
}

static void complete_fn(tw_op *op)
{
    ((struct rec *)tw_op_ctx(op))->completed++;
}

/* on_expire calls, over the run: with workers the test waits for its
 * count (the release here orders the callbacks' writes to recs before
 * the test's reads of them) */
static _Atomic long expirations;

static void expire_fn(tw_op *op)
{
    struct rec *r = tw_op_ctx(op);
    if (!r->completed)
        r->expired_early++;
    r->expired++;
    atomic_fetch_add_explicit(&expirations, 1, memory_order_release);
}

/* The threaded runs' waits: a short sleep, then look again. */
static void nap(long ns)
{
    struct timespec ts = { 0, ns };
    nanosleep(&ts, NULL);
}

/* Waits until `expirations` reaches `want` (workers run them after tw_wake
 * returns; on the driver they have run by then). A minute is ample for
 * the slowest build (valgrind); reaching it fails the run. */
static long wait_expirations(long want)
{
    long n;
    for (int i = 0; (n = atomic_load_explicit(&expirations, memory_order_acquire)) < want &&
                    i < 1200000;
         i++)
        nap(50000);
    return n;
}

static const struct tw_op_ops ops = { try_fn, complete_fn, expire_fn };

static void on_cancel(tw_op *op, void *arg)
{
    (void)arg;
    ((struct rec *)tw_op_ctx(op))->handed_cancel++;
}

static void on_unfinished(tw_op *op, void *arg)
{
    (void)arg;
    assert_false(tw_op_is_completed(op));
    ((struct rec *)tw_op_ctx(op))->handed_destroy++;
}

/* Where the run's choices come from: a seeded PRNG or, for the fuzzer,
 * the input's bytes, one per choice (out: the input is used up). */
struct src {
    uint64_t s;
    const uint8_t *d;
    size_t n, at;
    int out;
};

static uint64_t rng(struct src *c)
{
    if (c->d) {
        if (c->at < c->n)
            return c->d[c->at++];
        c->out = 1;
        return 0;
    }
    uint64_t z = (c->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The model's try: as try_fn decides. */
static bool model_try(int i)
{
    m[i].tries++;
    bool ready = recs[i].need ? m[i].tries >= recs[i].need : recs[i].flag;
    if (ready)
        m[i].completed = 1, m[i].delayed = 0;
    return ready;
}

static void drop_completed(int k)
{
    int n = 0;
    for (int e = 0; e < nlist[k]; e++)
        if (!m[lists[k][e]].completed)
            lists[k][n++] = lists[k][e];
    nlist[k] = n;
}

/* An op's entries in key k's list that are not completed: with purges
 * of their own (`autop`) the model knows the lists only up to the
 * completed entries that a purge's slice may have dropped. */
static int live_in(int k)
{
    int n = 0;
    for (int e = 0; e < nlist[k]; e++)
        n += !m[lists[k][e]].completed;
    return n;
}

static void check_all(tw_purgatory *p, int autop, int threaded)
{
    uint64_t entries = 0, live = 0, delayed = 0;
    for (int k = 0; k < NKEYS; k++) {
        entries += (uint64_t)nlist[k];
        live += (uint64_t)live_in(k);
    }
    for (int i = 0; i < nops; i++) {
        delayed += (uint64_t)m[i].delayed;
        assert_int_equal(recs[i].tries, m[i].tries);
        assert_int_equal(recs[i].completed, m[i].completed);
        assert_int_equal(recs[i].expired, m[i].expired);
        assert_int_equal(recs[i].expired_early, 0);
        if (m[i].op)
            assert_int_equal(tw_op_is_completed(m[i].op), m[i].completed);
    }
    if (autop) {
        assert_in_range(tw_purgatory_watched(p), live, entries);
        outcome[O_AUTOPURGED] += tw_purgatory_watched(p) < entries;
    } else
        assert_int_equal(tw_purgatory_watched(p), entries);
    assert_int_equal(tw_purgatory_delayed(p), delayed);
    /* and, purging by itself, perhaps the reaper's task. Threaded, that
     * task may run while the count is taken (on the driver whenever it
     * comes due, or on a worker) and schedule itself again, from that
     * thread, onto a shard not yet counted: tw_pending takes each shard's
     * lock in turn (twheel.h: off by the operations in flight), and counts
     * it twice. That lasts as long as the count; a task too many that
     * stays does not, so the count is taken again, for up to a second,
     * until it is within the bound. */
    size_t pending = tw_pending(tw_purgatory_timer(p));
    for (int i = 0; threaded && autop && pending > delayed + 1 && i < 20000; i++) {
        nap(50000);
        pending = tw_pending(tw_purgatory_timer(p));
    }
    assert_in_range(pending, delayed, delayed + (autop != 0));
}

/* The counting allocator behind a lock, for threaded runs: the reaper
 * frees on the driver (or a worker) whenever it comes due, beside the
 * test's own allocations (the allocator hook must be thread-safe:
 * twheel.h). */
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static void *locked_alloc(void *ctx, size_t size)
{
    pthread_mutex_lock(&alloc_lock);
    void *p = count_alloc_fn(ctx, size);
    pthread_mutex_unlock(&alloc_lock);
    return p;
}

static void locked_free(void *ctx, void *p)
{
    pthread_mutex_lock(&alloc_lock);
    count_free_fn(ctx, p);
    pthread_mutex_unlock(&alloc_lock);
}

/* Arms (or, with 0, disarms) the allocation that fails, under the same
 * lock: threaded, the driver or a worker may allocate meanwhile (the
 * reaper's task scheduled again onto a full pool), reading fail_at. That
 * allocation may then take the failure meant for the test's call, which
 * both sides allow for; an unlocked write would be a data race. */
static void arm_failure(struct count_alloc *a, long at)
{
    pthread_mutex_lock(&alloc_lock);
    a->fail_at = at;
    pthread_mutex_unlock(&alloc_lock);
}

/* One run of up to `steps` steps: returns the number run. Threaded, the
 * purgatory's timer runs on an atomic clock the model sets, and its
 * driver fires on tw_wake (callbacks on the driver: they have run when
 * tw_wake returns; on two workers in most threaded runs, and the test
 * then waits for the expirations that were due), so the run stays
 * deterministic but for the purges; the driver, waking by itself
 * meanwhile, finds nothing due on the clock that stands still.
 * With `autop` the purgatory purges by itself too (a purge_interval of
 * 4, and slices of 3 to 10 visits, which stop inside lists and spread a
 * pass over many runs of its reaper, a task on its timer: one an advance
 * in manual mode, each as the clock advances with a slice as many times
 * larger; threaded, on the driver whenever it comes due, which the clock
 * standing still does not stop), and the model, which does not follow the
 * slices, checks the counts that completed entries still listed make up
 * to within what a purge may have dropped already. */
static int run(struct src *src, int steps, int threaded, int workers, int autop)
{
    struct count_alloc a = { 0 };
    struct fake_clock c;
    struct atomic_clock ac;
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer = manual_opts(&c, 0, MS, (rng(src) & 1) ? 64 : 4);
    if (threaded) {
        atomic_store(&ac.now, 0);
        atomic_store(&ac.reads, 0);
        o.timer.clock = atomic_clock_read;
        o.timer.clock_ctx = &ac;
        o.timer.threaded = 1;
        /* one choice for both, so that the inputs' other bytes keep
         * their meaning: 1, 2 or 4 shards; callbacks on the driver or on
         * two workers (workers < 0: as the choice says) */
        uint64_t r = rng(src);
        o.timer.shards = 1u << (r % 3);
        o.timer.workers = workers >= 0 ? (uint32_t)workers : (r / 3) % 2 ? 2 : 0;
    }
    o.timer.allocator = threaded ? (struct tw_allocator){ locked_alloc, locked_free, &a }
                                 : counting(&a);
    static const uint32_t shards[] = { 1, 4, 512 };
    o.shards = shards[rng(src) % 3];
    o.purge_interval = autop ? 4 : (uint64_t)1 << 40; /* else purges only when asked */
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    if (autop)
        p->purge_slice = 3 + (uint32_t)(autop % 8);
    static const unsigned char hkey[16] = "purgatory model";
    assert_int_equal(tw_purgatory_set_hash_key(p, hkey), 0); /* seeds replay exactly */
    memset(recs, 0, sizeof recs);
    memset(m, 0, sizeof m);
    memset(nlist, 0, sizeof nlist);
    nops = 0;
    int step, burst = 0; /* steps left of a burst on the hot key */
    for (step = 0; step < steps && !src->out; step++) {
        int i = nops ? (int)(rng(src) % (uint64_t)nops) : 0;
        int k = rng(src) & 1 ? 0 : (int)(rng(src) % NKEYS); /* "a" is hot: its list grows long */
        const char *key = keyname[k];
        /* step kinds, weighted: 0 create, 1-2 submit, 3 event, 4 force,
         * 5 cancel_key, 6 purge, 7-8 advance, 9 release */
        static const int kind[20] = { 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 5, 6, 7, 7, 8, 8, 9, 9, 9 };
        int what = kind[rng(src) % 20];
        if ((what == 1 || what == 2) && m[i].submitted && nops && rng(src) % 4)
            i = nops - 1; /* mostly submit the newest op, not one already in */
        if (what == 5 && k == 0 && rng(src) % 4)
            what = 6; /* the hot key is rarely cancelled, so its list grows */
        if (burst) /* create, then submit it under the hot key alone */
            what = burst-- & 1 ? 0 : 1;
        else if (what == 0 && nops + 80 <= MAXOPS && rng(src) % 40 == 0)
            burst = 2 * 80; /* a burst of requests for one partition */
        switch (what) {
        case 0: /* create */
            if (nops == MAXOPS)
                break;
            i = nops++;
            recs[i].need = burst || rng(src) % 2 ? 0 : 1 + (int)(rng(src) % 6);
            /* short timeouts expire within a few advances; long ones let
             * the lists grow past a check's 64-entry snapshot buffer */
            m[i].timeout = (burst || rng(src) & 1 ? 100 + rng(src) % 2000 : 1 + rng(src) % 50) * MS;
            assert_int_equal(tw_op_create(p, &ops, &recs[i], m[i].timeout, &m[i].op), 0);
            break;
        case 1:
        case 2: { /* submit under 0 to 3 keys, maybe with an allocation failing */
            if (burst)
                i = nops - 1;
            if (!m[i].op)
                break;
            int nk = burst ? 1 : (int)(rng(src) % 4), ks[3];
            struct tw_key tk[3];
            for (int j = 0; j < nk; j++) {
                ks[j] = burst || rng(src) & 1 ? 0 : (int)(rng(src) % NKEYS);
                tk[j] = (struct tw_key){ keyname[ks[j]], strlen(keyname[ks[j]]) };
            }
            if (rng(src) % 6 == 0)
                arm_failure(&a, 1 + (long)(rng(src) % 4));
            int rc = tw_purgatory_try_complete_else_watch(p, m[i].op, nk ? tk : NULL,
                                                          (size_t)nk);
            arm_failure(&a, 0);
            if (m[i].submitted) {
                assert_int_equal(rc, -EINVAL);
                outcome[O_SUBMIT_TWICE]++;
                break;
            }
            if (m[i].completed) { /* completed before: not ours */
                assert_int_equal(rc, 0);
                m[i].submitted = 1;
                outcome[O_SUBMIT_DONE_BEFORE]++;
                break;
            }
            if (model_try(i)) {
                assert_int_equal(rc, 1);
                m[i].submitted = 1;
                outcome[O_SUBMIT_FIRST]++;
                break;
            }
            if (rc == -ENOMEM) { /* the watch failed, or the schedule */
                outcome[O_SUBMIT_NOMEM]++;
                assert_true(recs[i].tries == m[i].tries || recs[i].tries == m[i].tries + 1);
                m[i].tries = recs[i].tries;
                assert_false(tw_op_is_completed(m[i].op)); /* nor did a try */
                break; /* not submitted: nothing listed (check_all) */
            }
            m[i].submitted = 1;
            for (int j = 0; j < nk; j++)
                lists[ks[j]][nlist[ks[j]]++] = i;
            if (model_try(i)) {
                assert_int_equal(rc, 1);
                outcome[O_SUBMIT_SECOND]++;
                break;
            }
            assert_int_equal(rc, 0);
            outcome[O_SUBMIT_WAIT]++;
            m[i].delayed = 1;
            m[i].due = tw_now(tw_purgatory_timer(p)) + m[i].timeout; /* on the ms grid */
            break;
        }
        case 3: { /* an event on a key */
            if (nops)
                recs[i].flag = rng(src) % 6 == 0; /* and an op's readiness changes */
            int inject = rng(src) % 8 == 0;
            if (inject)
                arm_failure(&a, 1);
            int rc = tw_purgatory_check_and_complete(p, key, strlen(key));
            arm_failure(&a, 0);
            if (inject && rc == -ENOMEM) {
                outcome[O_CHECK_NOMEM]++;
                break; /* nothing tried (check_all sees the tries) */
            }
            int done = 0;
            for (int e = 0; e < nlist[k]; e++) {
                int j = lists[k][e];
                if (!m[j].completed && model_try(j))
                    done++;
            }
            drop_completed(k);
            assert_int_equal(rc, done);
            outcome[O_CHECK_DONE] += done;
            break;
        }
        case 4: /* force_complete */
            if (!m[i].op)
                break;
            outcome[O_FORCE] += !m[i].completed;
            assert_int_equal(tw_op_force_complete(m[i].op), !m[i].completed);
            m[i].completed = 1;
            m[i].delayed = 0;
            break;
        case 5: { /* cancel_key */
            int before[MAXOPS];
            const int made = nops;
            for (int j = 0; j < made; j++)
                before[j] = recs[j].handed_cancel;
            size_t n = tw_purgatory_cancel_key(p, key, strlen(key), on_cancel, NULL);
            if (autop)
                assert_in_range(n, live_in(k), nlist[k]);
            else
                assert_int_equal(n, nlist[k]);
            for (int e = 0; e < nlist[k]; e++) {
                /* a completed op a purge dropped is not handed over */
                before[lists[k][e]] += !autop || !m[lists[k][e]].completed;
                m[lists[k][e]].delayed = 0;
            }
            for (int j = 0; j < made; j++) {
                if (autop && m[j].completed) /* handed over or not, as above */
                    assert_in_range(recs[j].handed_cancel, before[j], before[j] + nlist[k]);
                else
                    assert_int_equal(recs[j].handed_cancel, before[j]);
            }
            outcome[O_CANCELLED] += (long)n;
            nlist[k] = 0;
            break;
        }
        case 6: { /* purge */
            size_t want = 0;
            for (int kk = 0; kk < NKEYS; kk++) {
                int n0 = nlist[kk];
                drop_completed(kk);
                want += (size_t)(n0 - nlist[kk]);
            }
            if (autop)
                assert_in_range(tw_purgatory_purge(p), 0, want);
            else
                assert_int_equal(tw_purgatory_purge(p), want);
            outcome[O_PURGED] += (long)want;
            break;
        }
        case 7:
        case 8: { /* time passes: timeouts expire */
            tw_timer *t = tw_purgatory_timer(p);
            uint64_t now = tw_now(t) + (rng(src) % 20) * MS;
            int want = 0;
            for (int j = 0; j < nops; j++) {
                if (m[j].delayed && m[j].due <= now) {
                    m[j].delayed = 0;
                    m[j].completed = 1;
                    m[j].expired = 1;
                    want++;
                }
            }
            if (threaded) {
                long before = atomic_load(&expirations);
                atomic_store(&ac.now, now);
                assert_int_equal(tw_wake(t), 0);
                assert_int_equal(wait_expirations(before + want) - before, want);
                if (o.timer.workers) { /* and no more than that come */
                    nap(200000);
                    assert_int_equal(atomic_load(&expirations) - before, want);
                    outcome[O_EXPIRED_ON_WORKERS] += want;
                }
            } else {
                c.now = now;
                /* the timeouts due, and perhaps the reaper (check_all
                 * checks which ops expired) */
                assert_in_range(tw_advance(t, now), want, want + (autop != 0));
            }
            outcome[O_EXPIRED] += want;
            break;
        }
        case 9: /* the test lets go of an op, listed or pending or not */
            if (m[i].op && rng(src) % 3 == 0) {
                for (int kk = 0; kk < NKEYS; kk++)
                    for (int e = 0; e < nlist[kk]; e++)
                        outcome[O_RELEASED_LISTED] += lists[kk][e] == i;
                tw_op_release(m[i].op);
                m[i].op = NULL;
            }
            break;
        }
        check_all(p, autop, threaded);
    }
    /* destroy hands back exactly the ops still waiting on a timeout */
    tw_purgatory_destroy(p, on_unfinished, NULL);
    for (int i = 0; i < nops; i++) {
        assert_int_equal(recs[i].handed_destroy, m[i].delayed);
        outcome[O_HANDED] += m[i].delayed;
        assert_int_equal(recs[i].completed, m[i].completed); /* none run */
        if (m[i].op)
            tw_op_release(m[i].op);
    }
    assert_int_equal(a.live, 0);
    return step;
}

#ifdef TW_PURGATORY_FUZZ
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    setenv("CMOCKA_TEST_ABORT", "1", 1); /* outside a test: abort, not exit */
    struct src src = { 0, data + 1, size - 1, 0, 0 };
    /* the first byte: one input in eight runs threaded (a driver thread
     * each, and for half of those two workers: slower); and half of them
     * purge by themselves too */
    run(&src, 4096, data[0] % 8 == 0, -1, data[0] & 8 ? 1 + (data[0] >> 4) : 0);
    return 0;
}
#else
static int run_seed(uint64_t seed, int steps, int threaded, int workers, int autop)
{
    struct src src = { seed, NULL, 0, 0, 0 };
    return run(&src, steps, threaded, workers, autop);
}

static void test_purgatory_model(void **state)
{
    (void)state;
    const char *env = getenv("TW_MODEL_SEEDS");
    int seeds = env ? atoi(env) : 40;
    long total = 0;
    for (int sd = 1; sd <= seeds; sd++)
        total += run_seed(0xC0FFEEull * (uint64_t)sd, 3000, sd % 2 == 0, /* half threaded */
                          sd % 6 == 4 ? 0 : 2, /* two in three of those on workers */
                          sd % 4 >= 2 ? sd : 0); /* half purging by themselves */
    assert_true(total == (long)seeds * 3000);
    for (int o = 0; o < NOUTCOMES; o++) {
        printf("%-30s %ld\n", outcome_name[o], outcome[o]);
        assert_true(outcome[o] > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purgatory_model),
    };
    return cmocka_run_group_tests_name("purgatory_model", tests, NULL, NULL);
}
#endif
