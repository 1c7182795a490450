/* twheel-purgatory-bench: Kafka's TestPurgatoryPerformance, ported, and
 * a harder variant of it that walks the watch lists.
 *
 * Requests arrive at a target rate (Poisson: exponential gaps). Each
 * watches `keys` keys and is submitted with try_complete_else_watch. It
 * becomes completable after a log-normal latency (given by its p50 and
 * p75, as Kafka's test does); a completion queue (a second twheel timer)
 * then completes it. Whatever is not complete by `timeout` expires.
 *
 * Two ways to complete, one per mode:
 *   - by default (the walk), each request draws its own keys from the key
 *     space, and its completion marks it completable and calls
 *     check_and_complete on each of its keys: every op watched there is
 *     tried, as a broker's event on a key does (a produce's replicas
 *     caught up on its partition). This is not what Kafka's test does.
 *   - --kafka is Kafka's test as it is written: the keys are drawn once,
 *     so every request watches the same ones, and the completion queue
 *     completes the request's own op (its forceComplete()): no list is
 *     walked. The lists grow with every pending request, and completed
 *     ops leave them by purge_interval's purges.
 *
 * Reported per target rate: the achieved enqueue rate, CPU time per
 * request (the whole process: generator, purgatory, timers, completion
 * queue), peak RSS, and how many completed vs expired. The rate at which
 * "achieved" stops following "target" is where the adding falls behind;
 * Kafka's published figure for timeout 200 ms, p50 200 ms, p75 400 ms,
 * 3 keys was about 105,000 requests/s.
 *
 * The adding is not the whole job: a request whose latency is under the
 * timeout should complete, and does only if its completion runs before
 * the timeout. The completions run on one thread (the completion queue's
 * driver), and each tries every op watched under each of its keys, so
 * they can fall behind while the adding keeps up. Two more columns say
 * whether they did: "missed", the requests that expired although their
 * latency was under the timeout (a few are expected, where the two fall
 * within a tick of each other), and the completion queue's lateness at
 * p99 (how long after its latency a request's completion ran). The last,
 * "exp p99", is how late the expirations ran at p99 (after the op's
 * creation plus its timeout): the purgatory's own timer, whose thread
 * runs the purges too (its reaper's task; the completions only ask for
 * it). "stale max" is the most the completed entries
 * still listed came to, as a share of all listed, over samples taken
 * every 1,024 requests while they are added: a purge is due once they are
 * an eighth (12.5%) and past purge_interval, and the header's bound on the
 * memory they hold is that share, give or take what completes while a
 * purge's slices go round.
 *
 * --tick-ms and --workers set the purgatory's own timer (its tick, 1 ms by
 * default; its worker threads, none by default: expirations and the
 * reaper then share the driver), to see what the reaper costs the
 * expirations with a coarser tick, where it runs less often and longer,
 * and with workers, where it runs beside them. --purge-interval sets the
 * purgatory's (by default the library's, 1000 as Kafka's); "never"
 * leaves every completed entry listed: no purge and no reaper, the
 * control for what it costs.
 *
 *   twheel-purgatory-bench [--quick] [--kafka] [--rates 50000,100000,...]
 *       [--seconds S] [--keys K] [--key-space N] [--timeout-ms T]
 *       [--p50-ms A] [--p75-ms B] [--tick-ms M] [--workers W]
 *       [--purge-interval N|never]
 *
 * Every number is read whole and within its range, or the program stops
 * with a message and exit status 2 before it runs a rate.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "twheel.h"
#include "twheel_purgatory.h"

#define MS 1000000ull

static struct {
    double seconds;
    int keys, key_space;
    uint64_t timeout_ms;
    double p50_ms, p75_ms;
    const char *rates;
    int kafka; /* Kafka's test as written: shared keys, no walk */
    double tick_ms;    /* the purgatory's timer's tick */
    uint32_t workers;  /* and its workers */
    uint64_t purge_interval; /* the purgatory's default unless given */
} cfg = { 2.0, 3, 100, 200, 200, 400, "25000,50000,100000,200000,400000,800000", 0, 1.0, 0, 0 };

struct fake_req {
    _Atomic int completable;
    int keys[8];
    int nkeys;
    int should_complete; /* its latency is under the timeout */
    uint64_t due_ns;     /* when its completion is due */
    uint64_t late_ns;    /* how late its completion ran (the driver's write) */
    uint64_t made_ns;    /* when its op was made: its timeout counts from here */
    uint64_t exp_late_ns; /* expired: how late (at least 1), else 0 */
    tw_op *op;
};

static _Atomic long completed_n, expired_n, missed_n;
/* The peak share of completed entries among those listed, sampled by the
 * generator: every entry of a live op is listed (one per key, a key drawn
 * twice twice), so the rest of tw_purgatory_watched are completed ops'. An
 * op counts as live here until its on_complete has counted it (an expiry
 * runs on_complete too), a little after it completed, so a sample may
 * understate the completed entries by those of the few ops completing at
 * that moment. */
static double stale_max;
static tw_purgatory *purg;
/* "key-0" .. "key-<key_space - 1>", made once: a request names its keys
 * from here, so the generator's own work per request is a few random
 * draws and one clock read, and the CPU a request is mostly the
 * purgatory's (three snprintf and two clock reads more a request, before
 * ca67509, took ~8% of the samples under --kafka at 800,000/s) */
static struct tw_key *key_names;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) /* (0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* A key of the key space. urand() is 1.0 once in 2^53 draws (its top
 * value rounds up), which would name a key past key_names' end. */
static int draw_key(void)
{
    int k = (int)(urand() * cfg.key_space);
    return k < cfg.key_space ? k : cfg.key_space - 1;
}

static bool try_fn(tw_op *op)
{
    struct fake_req *r = tw_op_ctx(op);
    return atomic_load(&r->completable) && tw_op_force_complete(op);
}

static void complete_fn(tw_op *op)
{
    (void)op;
    atomic_fetch_add(&completed_n, 1);
}

static void expire_fn(tw_op *op)
{
    struct fake_req *r = tw_op_ctx(op);
    atomic_fetch_add(&expired_n, 1);
    uint64_t now = now_ns(), due = r->made_ns + cfg.timeout_ms * MS;
    r->exp_late_ns = now > due ? now - due : 1;
    if (r->should_complete)
        atomic_fetch_add(&missed_n, 1);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static const struct tw_op_ops ops = { try_fn, complete_fn, expire_fn };

/* The completion queue: the request's latency has passed. */
static void completion_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    struct fake_req *r = arg;
    uint64_t now = now_ns();
    r->late_ns = now > r->due_ns ? now - r->due_ns : 0;
    atomic_store(&r->completable, 1);
    if (cfg.kafka) /* Kafka's CompletionQueue: operation.forceComplete() */
        tw_op_force_complete(r->op);
    for (int k = 0; k < r->nkeys && !cfg.kafka; k++)
        tw_purgatory_check_and_complete(purg, key_names[r->keys[k]].data,
                                        key_names[r->keys[k]].len);
    tw_op_release(r->op);
}

static void run(double rate)
{
    size_t n = (size_t)(rate * cfg.seconds);
    struct fake_req *reqs = calloc(n, sizeof(*reqs));
    if (!reqs)
        exit(1);
    atomic_store(&completed_n, 0);
    atomic_store(&expired_n, 0);
    atomic_store(&missed_n, 0);
    stale_max = 0;
    struct tw_purgatory_options po;
    tw_purgatory_options_init(&po);
    po.timer.tick_ns = (uint64_t)(cfg.tick_ms * 1e6);
    po.timer.workers = cfg.workers;
    po.purge_interval = cfg.purge_interval;
    int rc = tw_purgatory_create(&purg, &po);
    if (rc) {
        fprintf(stderr, "twheel-purgatory-bench: cannot make the purgatory (tick %g ms, %u "
                        "workers): %s\n", cfg.tick_ms, (unsigned)cfg.workers, strerror(-rc));
        exit(1);
    }
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    tw_timer *completions;
    if (tw_create(&completions, &o))
        exit(1);
    double mu = log(cfg.p50_ms), sigma = (log(cfg.p75_ms) - log(cfg.p50_ms)) / 0.6744897501960817;

    int shared[8] = { 0 }; /* --kafka: one draw of keys for the whole run */
    for (int k = 0; k < cfg.keys; k++)
        shared[k] = draw_key();

    double c0 = cpu_s();
    uint64_t start = now_ns(), due = start;
    for (size_t i = 0; i < n; i++) {
        due += (uint64_t)(-log(urand()) / rate * 1e9); /* Poisson arrivals */
        uint64_t now = now_ns();
        if (due > now + 1000000) { /* ahead by more than 1 ms: wait */
            struct timespec ts = { 0, (long)(due - now) };
            nanosleep(&ts, NULL);
            now = now_ns();
        }
        struct fake_req *r = &reqs[i];
        r->nkeys = cfg.keys;
        struct tw_key keys[8];
        for (int k = 0; k < cfg.keys; k++) {
            r->keys[k] = cfg.kafka ? shared[k] : draw_key();
            keys[k] = key_names[r->keys[k]];
        }
        /* log-normal latency: z from Box-Muller */
        double z = sqrt(-2 * log(urand())) * cos(2 * M_PI * urand());
        uint64_t latency = (uint64_t)(exp(mu + sigma * z) * 1e6);
        /* set before the op is made: its expiry, on another thread, reads it */
        r->should_complete = latency < cfg.timeout_ms * MS;
        /* both from the one clock read before the op is made: its timeout
         * counts from a moment no earlier, so neither lateness is
         * understated */
        r->due_ns = now + latency;
        r->made_ns = now;
        tw_op_create(purg, &ops, r, cfg.timeout_ms * MS, &r->op);
        tw_purgatory_try_complete_else_watch(purg, r->op, keys, (size_t)cfg.keys);
        if (r->should_complete) /* else it will expire first */
            tw_schedule(completions, latency, completion_fn, r, NULL);
        else
            tw_op_release(r->op);
        if ((i & 1023) == 1023) {
            long live = (long)(i + 1) - atomic_load(&completed_n); /* expired too */
            double listed = (double)tw_purgatory_watched(purg);
            double stale = listed - (double)live * cfg.keys;
            if (listed > 0 && stale / listed > stale_max)
                stale_max = stale / listed;
        }
    }
    uint64_t enq_end = now_ns();
    double achieved = (double)n / ((double)(enq_end - start) / 1e9);
    /* let everything settle: completions and timeouts */
    while (tw_purgatory_delayed(purg) || tw_pending(completions))
        usleep(2000);
    double c1 = cpu_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* Both lateness figures are read once the driver that wrote them has
     * stopped (its join orders their writes before these reads): the
     * completion queue's, and the purgatory's (its expirations). */
    tw_destroy(completions);
    unsigned long long watched = (unsigned long long)tw_purgatory_watched(purg);
    tw_purgatory_destroy(purg, NULL, NULL);
    uint64_t *late = malloc(n * sizeof(*late));
    if (!late)
        exit(1);
    size_t nl = 0, ne = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].should_complete)
            late[nl++] = reqs[i].late_ns;
    qsort(late, nl, sizeof(*late), cmp_u64);
    double p99 = nl ? (double)late[(nl * 99) / 100] / 1e6 : 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].exp_late_ns)
            late[ne++] = reqs[i].exp_late_ns;
    qsort(late, ne, sizeof(*late), cmp_u64);
    double exp99 = ne ? (double)late[(ne * 99) / 100] / 1e6 : 0;
    free(late);
    printf("%10.0f %12.0f %10.2f %12.1f %10ld %10ld %8llu %8ld %9.1f %9.1f %9.1f%%\n", rate,
           achieved, (c1 - c0) * 1e6 / (double)n, (double)ru.ru_maxrss / 1024.0,
           atomic_load(&completed_n), atomic_load(&expired_n), watched, atomic_load(&missed_n), p99,
           exp99, stale_max * 100);
    fflush(stdout);
    free(reqs);
}

/* An option's number, read whole or refused: a typo must not run another
 * benchmark than the one asked for (atoi made "--purge-interval nevr" a
 * purge_interval of 0, and "--keys 12" fell back to 3 without a word). */
static double arg_num(const char *opt, const char *s, double lo, double hi, int whole)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo && v <= hi) || (whole && v != floor(v))) {
        fprintf(stderr, "twheel-purgatory-bench: %s takes %s from %g to %g, not '%s'\n", opt,
                whole ? "a whole number" : "a number", lo, hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    struct tw_purgatory_options defaults;
    tw_purgatory_options_init(&defaults);
    cfg.purge_interval = defaults.purge_interval;
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--quick")) {
            cfg.seconds = 0.3;
            cfg.rates = "50000,200000";
        } else if (!strcmp(argv[k], "--kafka")) {
            cfg.kafka = 1;
        } else if (!strcmp(argv[k], "--rates") && k + 1 < argc) {
            cfg.rates = argv[++k];
        } else if (!strcmp(argv[k], "--seconds") && k + 1 < argc) {
            cfg.seconds = arg_num("--seconds", argv[++k], 0.001, 1e6, 0);
        } else if (!strcmp(argv[k], "--keys") && k + 1 < argc) {
            cfg.keys = (int)arg_num("--keys", argv[++k], 1, 8, 1);
        } else if (!strcmp(argv[k], "--key-space") && k + 1 < argc) {
            cfg.key_space = (int)arg_num("--key-space", argv[++k], 1, 1e7, 1);
        } else if (!strcmp(argv[k], "--timeout-ms") && k + 1 < argc) {
            cfg.timeout_ms = (uint64_t)arg_num("--timeout-ms", argv[++k], 1, 1e9, 1);
        } else if (!strcmp(argv[k], "--p50-ms") && k + 1 < argc) {
            cfg.p50_ms = arg_num("--p50-ms", argv[++k], 0, 1e9, 0);
        } else if (!strcmp(argv[k], "--p75-ms") && k + 1 < argc) {
            cfg.p75_ms = arg_num("--p75-ms", argv[++k], 0, 1e9, 0);
        } else if (!strcmp(argv[k], "--tick-ms") && k + 1 < argc) {
            cfg.tick_ms = arg_num("--tick-ms", argv[++k], 1e-6, 1e9, 0);
        } else if (!strcmp(argv[k], "--workers") && k + 1 < argc) {
            cfg.workers = (uint32_t)arg_num("--workers", argv[++k], 0, 1024, 1);
        } else if (!strcmp(argv[k], "--purge-interval") && k + 1 < argc) {
            k++;
            cfg.purge_interval =
                strcmp(argv[k], "never")
                    ? (uint64_t)arg_num("--purge-interval", argv[k], 0, 1e15, 1)
                    : UINT64_MAX;
        } else {
            fprintf(stderr, "usage: twheel-purgatory-bench [--quick] [--kafka] [--rates a,b]\n"
                            "  [--seconds S] [--keys K] [--key-space N] [--timeout-ms T]\n"
                            "  [--p50-ms A] [--p75-ms B] [--tick-ms M] [--workers W]\n"
                            "  [--purge-interval N|never]\n");
            return 2;
        }
    }
    char *name_buf = malloc((size_t)cfg.key_space * 16);
    key_names = malloc((size_t)cfg.key_space * sizeof(*key_names));
    if (!name_buf || !key_names) {
        free(name_buf);
        free(key_names);
        return 1;
    }
    for (int k = 0; k < cfg.key_space; k++) {
        int len = snprintf(name_buf + (size_t)k * 16, 16, "key-%d", k);
        key_names[k] = (struct tw_key){ name_buf + (size_t)k * 16, (size_t)len };
    }
    printf("purgatory: timeout %llu ms, latency p50 %.0f ms p75 %.0f ms, %d keys of %d, %.1f s per rate\n",
           (unsigned long long)cfg.timeout_ms, cfg.p50_ms, cfg.p75_ms, cfg.keys, cfg.key_space,
           cfg.seconds);
    if (cfg.workers)
        printf("its timer: tick %g ms, callbacks on %u workers\n", cfg.tick_ms,
               (unsigned)cfg.workers);
    else
        printf("its timer: tick %g ms, callbacks on the driver\n", cfg.tick_ms);
    if (cfg.purge_interval == UINT64_MAX)
        printf("purge_interval: never (no purge, no reaper)\n");
    else if (cfg.purge_interval != defaults.purge_interval)
        printf("purge_interval: %llu\n", (unsigned long long)cfg.purge_interval);
    printf("%s\n", cfg.kafka ? "completions: --kafka, Kafka's test as written (the same keys for every "
                               "request; each op completed by itself, no list walked)"
                             : "completions: the walk (each request's own keys; check_and_complete on "
                               "each, trying every op watched there)");
    printf("%10s %12s %10s %12s %10s %10s %8s %8s %9s %9s %10s\n", "target/s", "achieved/s",
           "CPU us/req", "peak RSS MB", "completed", "expired", "watched", "missed", "late p99",
           "exp p99", "stale max");
    /* every rate read before the first runs, so that a typo in the last
     * is refused at once, not after the others have run */
    double rates[64];
    int nrates = 0;
    char *list = strdup(cfg.rates);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (nrates == 64) {
            fprintf(stderr, "twheel-purgatory-bench: --rates takes at most 64 rates\n");
            exit(2);
        }
        rates[nrates++] = arg_num("--rates", tok, 1, 1e9, 0);
    }
    free(list);
    for (int i = 0; i < nrates; i++)
        run(rates[i]);
    free(key_names);
    free(name_buf);
    return 0;
}
