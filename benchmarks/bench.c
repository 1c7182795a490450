/* twheel-bench: twheel against a binary heap, a Netty-style hashed wheel,
 * libevent and libuv, on fixed workloads, in one process run.
 *
 *   W1  churn: N pending (delays 1 s .. 1 h); M x (cancel a random pending
 *       timer + add one). ns per pair, swept over N.
 *   W1r realistic churn: as W1, but the timer cancelled is the one added
 *       k operations ago, k uniform in [1, 1000] (requests that complete).
 *   W1b burst churn (not one of the issue's workloads): as W1, in
 *       bursts of 16 cancels (16 distinct victims), then 16 adds, as
 *       requests that complete in bursts leave them: most adds do not
 *       follow a cancel. At N = 10^4 and 10^6.
 *   W2  expire-all: 10^6 timers, delays 0 .. 2 s (--quick: 10^5 over
 *       0.2 s, as many a tick), driven in real time until all fired.
 *       CPU s per million fired (adds included), lateness; threaded
 *       twheel twice, through tw_schedule (it reads the clock)
 *       and through tw_schedule_at ("twheel-at": given the deadline the
 *       benchmark read). Each run in a child process of its own, cold (a
 *       back end just opened: its adds page its memory in) and then warm
 *       ("W2warm": on an instance that has run W2 once already, one timer
 *       held through both, as a server's timer never empties; with
 *       --w2-emptied, "W2emptied" again with none held); each row
 *       the median of --reps runs, its lateness extremes the worst of
 *       them, beside the vCPU time the hypervisor stole meanwhile; then
 *       what a fresh page of memory costs on this host (the
 *       gap between cold and warm, where it is the host's). Then the
 *       same on a simulated clock (1 ms steps, no sleeping; "W2sim",
 *       --only w2sim for this alone): the back end's own work and its
 *       longest advance (each the median of --reps runs), and what one
 *       sleep costs. With --w2sim-pause, once more for each pause
 *       given, the thread spinning (or sleeping) that long after each
 *       advance: the advances' CPU, which rises with the time away.
 *   W3  idle long horizon: 10^5 timers over 1 min .. 24 h, 10 s of wall
 *       time. CPU (the median of --reps windows) and wake-ups (the most
 *       in any window), beside the same window slept with no back end
 *       (what the machine charges for the sleep alone), the windows in turn.
 *   W4  memory: resident bytes per pending timer at N = 10^6 (measured in
 *       a child process), and the back end's own accounting.
 *   W5  producers: 1, 2 and 8 threads scheduling and cancelling through
 *       twheel's threaded API, on the default shards and then on one
 *       shard (every thread on one lock). Aggregate ops/s, the median of
 *       --reps runs.
 *   W6  idle timeouts (not one of the issue's five): 10^6 connections with
 *       10 s idle timers on a simulated clock, 2*10^7 touches each pushing
 *       one to now + 10 s, advances included. ns per touch.
 *   floor  W1 at 10^6 with no timer library: bare lists written inline in
 *       the loop (floor.c), eager and lazy cancel, the same on array
 *       buckets, lazy cancel with the generations in their own array, and
 *       one dependent DRAM load, beside the heap. Where any list or array
 *       design's floor sits here.
 *
 * Figures are ratios to the heap measured in the same run: these machines
 * are shared and noisy, so only same-run ratios mean much. For the same
 * reason every workload's runs but W4's go in turn, every back end's (in
 * W5 every thread count's) k-th before any one's (k+1)-th
 * (medians_in_turn), and every run of every workload takes a process of
 * its own, so that no run inherits another's memory or threads
 * (w1_in_child). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "twheel.h"

#define SEC 1000000000ull
#define MS 1000000ull

static const struct backend_ops *all_backends[] = {
    &be_twheel, &be_twheel_threaded, &be_heap, &be_heap_inline, &be_hashed,
    &be_intrusive, &be_libevent, &be_libuv,
};
#define NBACKENDS (sizeof(all_backends) / sizeof(all_backends[0]))

static struct {
    int quick;
    const char *only;     /* comma list of workloads, NULL = all */
    const char *backends; /* comma list, NULL = all */
    const char *out;      /* output prefix */
    int reps;
    long callgrind_n;     /* --callgrind N: only the W1 loop */
    long callgrind_w2_n;  /* --callgrind-w2 N: only W2 on a simulated clock */
    int callgrind_burst;  /* --callgrind-w1b N: --callgrind's, on W1b */
    size_t w1_n;          /* --n N: W1 at this N only (and W1+clock, W1r) */
    int w2_emptied;       /* --w2-emptied: W2 warm once more, no timer held */
    long pause_us[4];     /* --w2sim-pause: W2sim once more each pause, µs */
    int pause_slept[4];   /* each spun, or slept ("1000s") */
    int npauses;
    FILE *csv;
    int plot_w1, plot_w2; /* this run wrote the plot's data */
} cfg = { .out = "twheel-bench", .reps = 3 };

/* ---- utilities -------------------------------------------------------- */

static void progress(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

double bench_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double process_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long voluntary_switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = { (time_t)(t / SEC), (long)(t % SEC) };
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* the high 64 bits of a * b */
static inline uint64_t mul_hi(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else /* 32-bit targets: the same value from four 32-bit products */
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t mid = (al * bl >> 32) + (uint32_t)(ah * bl) + (uint32_t)(al * bh);
    return ah * bh + (ah * bl >> 32) + (al * bh >> 32) + (mid >> 32);
#endif
}

/* uniform in [lo, hi) without a division (the same draws on every
 * target) */
static inline uint64_t uniform(uint64_t lo, uint64_t hi)
{
    return lo + mul_hi(rng(), hi - lo);
}

/* The next name of a comma-separated list at *p, its length in *len;
 * NULL at the end. */
static const char *list_next(const char **p, size_t *len)
{
    const char *name = *p;
    if (!name)
        return NULL;
    const char *e = strchr(name, ',');
    *len = e ? (size_t)(e - name) : strlen(name);
    *p = e ? e + 1 : NULL;
    return name;
}

static int is_name(const char *s, size_t len, const char *name)
{
    return strlen(name) == len && !strncmp(s, name, len);
}

static int selected(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t len;
    for (const char *p = list, *s; (s = list_next(&p, &len));)
        if (is_name(s, len, name))
            return 1;
    return 0;
}

/* Built in, and opens here (threaded twheel may be unavailable). */
static int available(const struct backend_ops *ops)
{
    static const struct backend_ops *seen[NBACKENDS];
    static int ok[NBACKENDS];
    for (size_t k = 0; k < NBACKENDS; k++) {
        if (seen[k] == ops)
            return ok[k];
        if (!seen[k]) {
            seen[k] = ops;
            struct backend b = { ops, NULL, MS };
            ok[k] = ops->open && ops->open(&b, 16, bench_now_ns()) == 0;
            if (ok[k])
                ops->close(&b);
            return ok[k];
        }
    }
    return 0;
}

static int open_backend(struct backend *b, const struct backend_ops *ops, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->ops = ops;
    b->tick_ns = MS;
    return ops->open(b, cap, bench_now_ns());
}

static void csv_row(const char *w, const char *be, uint64_t n, const char *metric,
                    double value, double ratio)
{
    if (cfg.csv)
        fprintf(cfg.csv, "%s,%s,%" PRIu64 ",%s,%.6g,%.6g\n", w, be, n, metric, value, ratio);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- firing bookkeeping --------------------------------------------- */

static int64_t *g_late;      /* per firing: lateness (ns), may be negative */
static size_t g_fired;
static uint64_t g_dummy;
/* A back end that fires on its own thread posts g_done at the g_want-th
 * firing, so the benchmark's thread can block until then. Polling for it
 * instead woke that thread every few ms, and each wake-up's CPU (tens of
 * us on a VM) was charged to the back end's W2 figure. */
static size_t g_want = SIZE_MAX;
static sem_t g_done;

/* In W2 a timer's argument is its deadline itself, not a pointer to it:
 * reading a deadline from a table in firing order would add a cache miss
 * per firing to every back end's figure. */
static uint8_t *g_closed; /* W6: per connection, whether its timer fired */

void bench_fired(void *arg)
{
    if (g_closed) { /* W6: the argument is the connection's index */
        g_closed[(uintptr_t)arg] = 1;
        g_fired++;
        return;
    }
    if (!g_late) {
        g_fired++;
        return;
    }
    g_late[g_fired++] = (int64_t)(bench_now_ns() - (uint64_t)(uintptr_t)arg);
    if (g_fired == g_want)
        sem_post(&g_done);
}

/* ---- runs in processes of their own ----------------------------------- */

/* This program, which every workload's runs re-run in a process of their
 * own (w1_in_child says why). */
static char self_exe[512];

/* A back end by name (twheel-at too), or NULL if it is unknown or not
 * built. */
static const struct backend_ops *find_backend(const char *name)
{
    if (!strcmp(name, be_twheel_threaded_at.name))
        return &be_twheel_threaded_at;
    for (size_t b = 0; b < NBACKENDS; b++)
        if (!strcmp(all_backends[b]->name, name))
            return all_backends[b]->open ? all_backends[b] : NULL;
    return NULL;
}

/* Runs this program with `args` in a process of its own and reads k
 * figures from what it prints, into out. Exits twheel-bench if the child
 * fails or gives fewer, or a first figure that is not positive: that is
 * a bug, not noise. (W2's and W4's children print more than figures, and
 * read their own.) */
static void child_figures(const char *args, double *out, int k)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s", self_exe, args);
    fflush(stdout);
    FILE *pf = popen(cmd, "r");
    int got = 0;
    while (pf && got < k && fscanf(pf, "%lf", &out[got]) == 1)
        got++;
    int status = pf ? pclose(pf) : -1;
    if (got < k || status != 0 || !(out[0] > 0)) {
        fprintf(stderr, "twheel-bench: '%s' gave no figure\n", args);
        exit(1);
    }
}

/* ---- W1: churn ---------------------------------------------------------- */

static void w1_make(struct w1_input *in, size_t n, size_t m, int kind)
{
    int realistic = kind == W1_RECENT;
    in->n = n;
    in->m = m;
    in->prefill = malloc(n * sizeof(uint64_t));
    in->delays = malloc(m * sizeof(uint64_t));
    in->victims = malloc(m * sizeof(uint32_t));
    if (!in->prefill || !in->delays || !in->victims)
        abort();
    rng_state = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t k = 0; k < n; k++)
        in->prefill[k] = uniform(SEC, 3600 * SEC);
    for (size_t k = 0; k < m; k++) {
        in->delays[k] = uniform(SEC, 3600 * SEC);
        in->victims[k] = realistic ? (uint32_t)uniform(1, 1001) : (uint32_t)uniform(0, n);
    }
    /* W1b: a burst cancels its victims before it adds any, so a victim
     * must not come twice in one burst (the heap would free a node
     * twice): a repeat is drawn again (n > W1B_GROUP) */
    for (size_t k = 0; kind == W1_BURST && n > W1B_GROUP && k < m; k++)
        for (size_t j = k - k % W1B_GROUP; j < k; j++)
            if (in->victims[j] == in->victims[k]) {
                in->victims[k] = (uint32_t)uniform(0, n);
                j = k - k % W1B_GROUP - 1; /* look at the whole group again */
            }
}

static void w1_free(struct w1_input *in)
{
    free(in->prefill);
    free(in->delays);
    free(in->victims);
}

static volatile uint64_t clock_sink;
static uint64_t handle_sink; /* handles nobody cancels */

void w1_loop(struct backend *b, uint64_t *handles, const struct w1_input *in, int read_clock);
void w1r_loop(struct backend *b, const struct w1_input *in);
void w1b_loop(struct backend *b, uint64_t *handles, const struct w1_input *in);

/* The timed loop (named so that callgrind can count only it). */
__attribute__((noinline)) void w1_loop(struct backend *b, uint64_t *handles,
                                       const struct w1_input *in, int read_clock)
{
    const struct backend_ops *ops = b->ops;
    for (size_t i = 0; i < in->m; i++) {
        uint32_t v = in->victims[i];
        ops->cancel(b, handles[v]);
        if (read_clock)
            clock_sink = bench_now_ns();
        ops->add(b, in->delays[i], &g_dummy, &handles[v]);
    }
}

/* W1r: ring of the last 1024 adds; cancel the one added k ago (or the
 * nearest older one still pending). */
__attribute__((noinline)) void w1r_loop(struct backend *b, const struct w1_input *in)
{
    static uint64_t ring[1024];
    static uint8_t live[1024];
    memset(live, 0, sizeof live);
    const struct backend_ops *ops = b->ops;
    for (size_t i = 0; i < in->m; i++) {
        uint32_t pos = (uint32_t)i & 1023;
        ops->add(b, in->delays[i], &g_dummy, &ring[pos]);
        live[pos] = 1;
        for (uint32_t k = in->victims[i]; k < 1024; k++) {
            uint32_t p = (pos - k) & 1023;
            if (k <= i && live[p]) {
                ops->cancel(b, ring[p]);
                live[p] = 0;
                break;
            }
        }
    }
}

/* W1b: m / W1B_GROUP bursts; each cancels its victims, then adds as
 * many (named, as w1_loop, for callgrind). */
__attribute__((noinline)) void w1b_loop(struct backend *b, uint64_t *handles,
                                        const struct w1_input *in)
{
    const struct backend_ops *ops = b->ops;
    for (size_t i = 0; i + W1B_GROUP <= in->m; i += W1B_GROUP) {
        for (size_t j = 0; j < W1B_GROUP; j++)
            ops->cancel(b, handles[in->victims[i + j]]);
        for (size_t j = 0; j < W1B_GROUP; j++)
            ops->add(b, in->delays[i + j], &g_dummy, &handles[in->victims[i + j]]);
    }
}

/* One W1 (W1r, W1b) measurement: ns per pair, thread CPU. */
static double w1_once(const struct backend_ops *ops, const struct w1_input *in,
                      int kind, int read_clock)
{
    struct backend b;
    uint64_t *handles = malloc(in->n * sizeof(uint64_t));
    int realistic = kind == W1_RECENT;
    size_t cap = in->n + (realistic ? in->m : 0) + 2048;
    if (!handles || open_backend(&b, ops, cap))
        abort();
    for (size_t k = 0; k < in->n; k++)
        ops->add(&b, in->prefill[k], &g_dummy, &handles[k]);
    double t0 = bench_thread_cpu();
    if (realistic)
        w1r_loop(&b, in);
    else if (kind == W1_BURST)
        w1b_loop(&b, handles, in);
    else
        w1_loop(&b, handles, in, read_clock);
    double t1 = bench_thread_cpu();
    ops->close(&b);
    free(handles);
    return (t1 - t0) * 1e9 / (double)in->m;
}

/* The child's side of w1_in_child: the same seeded input, made anew, and
 * one run; prints ns per pair. */
static int w1_child(const char *name, size_t n, size_t m, int kind, int read_clock)
{
    const struct backend_ops *ops = find_backend(name);
    if (!ops)
        return 1;
    struct w1_input in;
    w1_make(&in, n, m, kind);
    printf("%.9g\n", w1_once(ops, &in, kind, read_clock));
    w1_free(&in);
    return 0;
}

/* One W1 (or W1r) run in a fresh process (exec, not just fork), as every
 * workload's runs are (the others point here for why). A run in the process of the runs before it inherits their
 * leavings: the allocator's free lists and the pages they hold, the
 * kernel's choice of the next pages, and whatever the host does with
 * memory a guest has just freed. On the Zen 5 guest twheel at 10^6 took
 * 120 to 124 ns a pair alone and 136 to 155 just after a heap's run in
 * the same process (history.md, "A full run at ac3ed8e"). In a process
 * of its own every run starts from the same state, whichever back end ran
 * before it: there twheel took 122 and 133 alone, 129 and 132 after the
 * heap's run (history.md, "Each W1 run in a process of its own"). The
 * cost: each run makes its input anew (a few tenths of a second at 10^7)
 * and pays an exec. */
static double w1_in_child(const struct backend_ops *ops, size_t n, size_t m, int realistic,
                          int read_clock)
{
    char args[256];
    snprintf(args, sizeof args, "--w1-child %s %zu %zu %d %d %d", ops->name, n, m, realistic,
             read_clock, bench_huge_pages);
    double v;
    child_figures(args, &v, 1);
    return v;
}

struct result {
    const char *be;
    double v;
};

static void print_ratios(const char *workload, const char *metric, uint64_t n,
                         struct result *r, int nr, const char *unit, int lower_better)
{
    double heap = 0;
    for (int k = 0; k < nr; k++)
        if (!strcmp(r[k].be, "heap"))
            heap = r[k].v;
    printf("  %-10s", workload);
    for (int k = 0; k < nr; k++) {
        double ratio = heap > 0 && r[k].v > 0 ? (lower_better ? heap / r[k].v : r[k].v / heap) : 0;
        csv_row(workload, r[k].be, n, metric, r[k].v, ratio);
    }
    printf("\n");
    for (int k = 0; k < nr; k++) {
        double ratio = heap > 0 && r[k].v > 0 ? (lower_better ? heap / r[k].v : r[k].v / heap) : 0;
        printf(r[k].v < 10 ? "    %-11s %12.3f %-10s" : "    %-11s %12.1f %-10s", r[k].be,
               r[k].v, unit);
        if (ratio > 0 && strcmp(r[k].be, "heap"))
            printf("  %5.2fx %s than the heap", ratio >= 1 ? ratio : 1 / ratio,
                   ratio >= 1 ? "better" : "worse");
        printf("\n");
    }
}

/* One timed run of a workload on be[i]: its figure. */
typedef double (*rep_fn)(const struct backend_ops *ops, int i, void *ctx);

/* The median of `reps` runs of `once` on each of the nb back ends be[],
 * into r, run rep by rep: every back end's k-th run before any back end's
 * (k+1)-th. These guests share their cores, and a slow spell of the host
 * can last minutes. Run back end by back end, it falls on the three runs
 * of whichever back ends run during it, and moves their ratios. Run in
 * turn, it falls on all back ends alike, and a median drops a spell that
 * catches one run of each. (In the full run at c120e57, run back end by
 * back end, the two heaps, the hashed wheel and the intrusive model,
 * measured after twheel at 10^6, took 1.4 to 1.6 times as long as in the
 * full run half an hour later, and twheel took the same: 3.78x the heap
 * there, 2.44x then.) Every run also takes a process of its own
 * (w1_in_child): in one process, a run was moved by the one before it. */
static void medians_in_turn(const struct backend_ops *const *be, int nb, int reps,
                            const char *label, rep_fn once, void *ctx, struct result *r)
{
    double v[NBACKENDS][9];
    for (int k = 0; k < reps; k++)
        for (int i = 0; i < nb; i++) {
            progress("%s %s rep %d...\r", label, be[i]->name, k + 1);
            v[i][k] = once(be[i], i, ctx);
        }
    progress("%60s\r", "");
    for (int i = 0; i < nb; i++) {
        r[i].be = be[i]->name;
        r[i].v = median(v[i], reps);
    }
}

struct w1_ctx {
    size_t n, m;
    int realistic, read_clock;
};

static double w1_rep(const struct backend_ops *ops, int i, void *ctx)
{
    const struct w1_ctx *c = ctx;
    (void)i;
    return w1_in_child(ops, c->n, c->m, c->realistic, c->read_clock);
}

/* Runs W1 (or W1r) at N = n with m pairs on every selected manual back
 * end, each run in a process of its own: the median of the repetitions,
 * into r. Returns how many back ends ran. */
static int w1_all(size_t n, size_t m, int realistic, int read_clock, int reps,
                  const char *label, struct result *r)
{
    const struct backend_ops *be[NBACKENDS];
    int nb = 0;
    for (size_t b = 0; b < NBACKENDS; b++)
        if (available(all_backends[b]) && selected(cfg.backends, all_backends[b]->name) &&
            !all_backends[b]->realtime_only)
            be[nb++] = all_backends[b];
    struct w1_ctx c = { n, m, realistic, read_clock };
    medians_in_turn(be, nb, reps, label, w1_rep, &c, r);
    return nb;
}

static void run_w1(void)
{
    static const size_t sweep_full[] = { 1000, 10000, 100000, 1000000, 10000000 };
    static const size_t sweep_quick[] = { 1000, 10000, 100000 };
    const size_t *sweep = cfg.quick ? sweep_quick : sweep_full;
    int nsweep = cfg.quick ? 3 : 5;
    const size_t one[1] = { cfg.w1_n }; /* --n: that N alone */
    if (cfg.w1_n) {
        sweep = one;
        nsweep = 1;
    }
    size_t m = cfg.quick ? 200000 : 5000000;
    int reps = cfg.quick ? 1 : cfg.reps;

    printf("\nW1 churn: N pending (1 s .. 1 h), M = %zu x (cancel random + add), ns per pair "
           "(thread CPU, median of %d,\n  each run in a process of its own)\n", m, reps);
    FILE *plot = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s-w1.dat", cfg.out);
    plot = fopen(path, "w");
    if (plot) {
        cfg.plot_w1 = 1;
        fprintf(plot, "N"); /* a plain header: gnuplot's columnhead reads it */
        for (size_t b = 0; b < NBACKENDS; b++)
            if (available(all_backends[b]) && selected(cfg.backends, all_backends[b]->name) &&
                !all_backends[b]->realtime_only)
                fprintf(plot, " %s", all_backends[b]->name);
        fprintf(plot, "\n");
    }
    for (int s = 0; s < nsweep; s++) {
        struct result r[NBACKENDS];
        char label[32];
        snprintf(label, sizeof label, "N=%zu", sweep[s]);
        int nr = w1_all(sweep[s], m, 0, 0, reps, label, r);
        if (plot) {
            fprintf(plot, "%zu", sweep[s]);
            for (int k = 0; k < nr; k++)
                fprintf(plot, " %.2f", r[k].v);
            fprintf(plot, "\n");
        }
        print_ratios(label, "ns_per_pair", sweep[s], r, nr, "ns/pair", 1);
    }
    if (plot)
        fclose(plot);

    /* with one CLOCK_MONOTONIC read per add, as the peers pay it */
    size_t n_clock = cfg.w1_n ? cfg.w1_n : cfg.quick ? 10000 : 1000000;
    struct result r[NBACKENDS];
    int nr = w1_all(n_clock, m, 0, 1, reps, "W1+clock", r);
    printf("\nW1 with one clock_gettime(CLOCK_MONOTONIC) per add, N = %zu:\n", n_clock);
    print_ratios("W1+clock", "ns_per_pair_clock", n_clock, r, nr, "ns/pair", 1);
    /* and what the threaded API pays: it reads the clock itself */
    if (available(&be_twheel_threaded) && selected(cfg.backends, "twheel-thr")) {
        double v[9];
        for (int k = 0; k < reps; k++)
            v[k] = w1_in_child(&be_twheel_threaded, n_clock, m, 0, 0);
        double thr = median(v, reps);
        printf("    %-11s %12.1f ns/pair   (threaded API: its own clock read + shard lock)\n",
               "twheel-thr", thr);
        csv_row("W1+clock", "twheel-thr", n_clock, "ns_per_pair_clock", thr, 0);
    }

    /* W1r */
    size_t n_r = cfg.quick ? 10000 : 1000000;
    nr = w1_all(n_r, m, 1, 0, reps, "W1r", r);
    printf("\nW1r realistic churn (cancel the timer added k ops ago, k in [1, 1000]), N = %zu:\n", n_r);
    print_ratios("W1r", "ns_per_pair", n_r, r, nr, "ns/pair", 1);

    /* W1b */
    static const size_t nb_full[] = { 10000, 1000000 }, nb_quick[] = { 10000 };
    const size_t *nbs = cfg.w1_n ? one : cfg.quick ? nb_quick : nb_full;
    int nnb = cfg.w1_n || cfg.quick ? 1 : 2;
    printf("\nW1b burst churn (not one of the issue's workloads): W1 in bursts of %d "
           "cancels, then %d adds\n  (most adds do not follow a cancel); ns per pair:\n",
           W1B_GROUP, W1B_GROUP);
    for (int k = 0; k < nnb; k++) {
        char label[32];
        snprintf(label, sizeof label, "W1b N=%zu", nbs[k]);
        nr = w1_all(nbs[k], m, W1_BURST, 0, reps, label, r);
        print_ratios(label, "ns_per_pair", nbs[k], r, nr, "ns/pair", 1);
    }
}

/* ---- W1 floor: no library at all (floor.c) ---------------------------- */

/* The floor's loops, by the name its child process takes (floor_child). */
enum floor_kind {
    FK_HEAP, FK_EAGER, FK_DEFER, FK_PAD, FK_LAZY, FK_ARRAY, FK_SPLIT, FK_SPLIT_8,
    FK_HEAP_CLOCK, FK_EAGER_CLOCK, FK_EAGER_LOCKED, FK_COUNT
};

/* One run of a floor loop: ns per pair; *extra gets its slots a timer
 * (the lazy loops) or its arrays' bytes a timer (array buckets). */
static double floor_once(int kind, const struct w1_input *in, double *extra)
{
    switch (kind) {
    case FK_HEAP: return w1_once(&be_heap, in, 0, 0);
    case FK_EAGER: return floor_w1_ns(in, FLOOR_EAGER, NULL);
    case FK_DEFER: return floor_w1_ns(in, FLOOR_DEFER, NULL);
    case FK_PAD: return floor_w1_ns(in, FLOOR_EAGER_PAD, NULL);
    case FK_LAZY: return floor_w1_ns(in, FLOOR_LAZY, extra);
    case FK_ARRAY: return floor_w1_array_ns(in, extra);
    case FK_SPLIT: return floor_w1_ns(in, FLOOR_SPLIT, extra);
    case FK_SPLIT_8: return floor_w1_ns(in, FLOOR_SPLIT_8, extra);
    case FK_HEAP_CLOCK: return w1_once(&be_heap, in, 0, 1);
    case FK_EAGER_CLOCK: return floor_w1_ns(in, FLOOR_EAGER_CLOCK, NULL);
    default: return floor_w1_ns(in, FLOOR_EAGER_LOCKED, NULL);
    }
}

/* The child's side of floor_in_child: prints ns per pair and the extra. */
static int floor_child(int kind, size_t n, size_t m)
{
    if (kind < 0 || kind >= FK_COUNT)
        return 1;
    struct w1_input in;
    w1_make(&in, n, m, 0);
    double extra = 0, v = floor_once(kind, &in, &extra);
    printf("%.9g %.9g\n", v, extra);
    w1_free(&in);
    return 0;
}

/* One floor run in a process of its own, as W1's (w1_in_child says why):
 * ns per pair; *extra as floor_once's. */
static double floor_in_child(int kind, size_t n, size_t m, double *extra)
{
    char args[128];
    snprintf(args, sizeof args, "--floor-child %d %zu %zu", kind, n, m);
    double v[2];
    child_figures(args, v, 2);
    *extra = v[1];
    return v[0];
}

static void run_floor(void)
{
    size_t n = cfg.w1_n ? cfg.w1_n : cfg.quick ? 10000 : 1000000;
    size_t m = cfg.quick ? 200000 : 5000000;
    int reps = cfg.quick ? 1 : cfg.reps;
    double v[FK_COUNT][9], x[FK_COUNT] = { 0 };
    /* in turn, as W1's (medians_in_turn), each in a process of its own */
    for (int k = 0; k < reps; k++) {
        progress("W1 floor rep %d...\r", k + 1);
        for (int f = 0; f < FK_COUNT; f++)
            v[f][k] = floor_in_child(f, n, m, &x[f]);
    }
    double *heap = v[FK_HEAP], *eager = v[FK_EAGER], *defer = v[FK_DEFER], *pad = v[FK_PAD],
           *lazy = v[FK_LAZY], *array = v[FK_ARRAY], *split0 = v[FK_SPLIT],
           *split3 = v[FK_SPLIT_8], *heap_c = v[FK_HEAP_CLOCK], *eager_c = v[FK_EAGER_CLOCK],
           *locked = v[FK_EAGER_LOCKED];
    double slots = x[FK_LAZY], array_b = x[FK_ARRAY], split0_s = x[FK_SPLIT],
           split3_s = x[FK_SPLIT_8];
    double clock_ns = floor_clock_ns(cfg.quick ? 1000000 : 10000000);
    unsigned dram_mb = cfg.quick ? 32 : 256;
    double dram = floor_dram_ns((size_t)dram_mb << 20, cfg.quick ? 1000000 : 10000000);
    progress("%60s\r", "");
    double h = median(heap, reps), e = median(eager, reps), l = median(lazy, reps);
    double a = median(array, reps), hc = median(heap_c, reps), ec = median(eager_c, reps);
    printf("\nW1 floor, N = %zu: the W1 loop with no timer library (bare lists written\n"
           "inline: no call, no checks but the id's generation, no rounding, no counters)\n", n);
    printf("    one dependent load, random, %3u MB %8.1f ns\n", dram_mb, dram);
    printf("    %-34s %8.1f ns/pair\n", "heap (through the back-end table)", h);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap\n",
           "bare lists, unlink on cancel", e, h / e);
    double dfr = median(defer, reps);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap\n",
           "bare lists, unlink deferred", dfr, h / dfr);
    double p = median(pad, reps);
    char padname[64];
    snprintf(padname, sizeof padname, "the same + %d no-ops a pair", FLOOR_PAD_NOPS);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap\n", padname, p, h / p);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap (%.2f slots/timer)\n",
           "bare lists, lazy cancel", l, h / l, slots);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap (arrays %.1f B/timer)\n",
           "bare array buckets, swap-remove", a, h / a, array_b);
    double s0 = median(split0, reps), s3 = median(split3, reps);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap (%.2f slots/timer)\n",
           "lazy, generations apart", s0, h / s0, split0_s);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap (%.2f slots/timer)\n",
           "lazy, generations apart, 1/8 dead", s3, h / s3, split3_s);
    printf("    5x the heap would be %.1f ns/pair\n", h / 5);
    printf("  with one clock read per add (as W1+clock; one read alone: %.1f ns)\n", clock_ns);
    printf("    %-34s %8.1f ns/pair\n", "heap (through the back-end table)", hc);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap\n",
           "bare lists, unlink on cancel", ec, hc / ec);
    double lk = median(locked, reps);
    printf("    %-34s %8.1f ns/pair  %5.2fx better than the heap\n",
           "the same + a lock around each op", lk, hc / lk);
    printf("    5x the heap would be %.1f ns/pair\n", hc / 5);
    csv_row("W1floor", "dram-load", n, "ns", dram, 0);
    csv_row("W1floor", "heap", n, "ns_per_pair", h, 1);
    csv_row("W1floor", "bare-eager", n, "ns_per_pair", e, h / e);
    csv_row("W1floor", "bare-deferred", n, "ns_per_pair", dfr, h / dfr);
    csv_row("W1floor", "bare-eager+nops", n, "ns_per_pair", p, h / p);
    csv_row("W1floor", "bare-lazy", n, "ns_per_pair", l, h / l);
    csv_row("W1floor", "bare-array", n, "ns_per_pair", a, h / a);
    csv_row("W1floor", "lazy-split", n, "ns_per_pair", s0, h / s0);
    csv_row("W1floor", "lazy-split-1/8", n, "ns_per_pair", s3, h / s3);
    csv_row("W1floor", "clock-read", n, "ns", clock_ns, 0);
    csv_row("W1floor+clock", "heap", n, "ns_per_pair", hc, 1);
    csv_row("W1floor+clock", "bare-eager", n, "ns_per_pair", ec, hc / ec);
    csv_row("W1floor+clock", "bare-eager+lock", n, "ns_per_pair", lk, hc / lk);
}

/* ---- W2: expire-all --------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

struct w2_out {
    double cpu_per_million;
    double add_ns; /* CPU per add, page faults of fresh memory included */
    double adder_ns; /* the adding thread's own share of add_ns: for a back
                      * end with a thread of its own, add_ns also holds the
                      * firings that thread ran while the adds went on */
    int64_t p50, p99, max, min;
};

static void drive_until(struct backend *b, size_t want, uint64_t limit_ns)
{
    const struct backend_ops *ops = b->ops;
    uint64_t stop = bench_now_ns() + limit_ns;
    if (ops->realtime_only) {
        /* The firings run on the back end's thread: wait for the last one
         * (or the limit); the caller reads g_fired after closing it. */
        struct timespec ts = { (time_t)(stop / SEC), (long)(stop % SEC) };
        while (sem_clockwait(&g_done, CLOCK_MONOTONIC, &ts) && errno == EINTR)
            ;
        return;
    }
    while (g_fired < want && bench_now_ns() < stop) {
        uint64_t next = ops->next(b);
        if (next == UINT64_MAX)
            break;
        if (next > 0) {
            uint64_t now = bench_now_ns();
            if (next > now)
                sleep_until(next < stop ? next : stop);
        }
        ops->advance(b, bench_now_ns());
    }
}

/* The benchmark reads the clock once every W2_READ_EVERY adds of a back
 * end that reads it at each add (below). */
#define W2_READ_EVERY 32

/* W2's delays are uniform in [0, w2_span()): 2 s, and with --quick,
 * which adds a tenth of the timers, a tenth of the span, so that as many
 * timers fall due in each 1 ms tick as in the full run. */
static uint64_t w2_span(void)
{
    return cfg.quick ? 2 * SEC / 10 : 2 * SEC;
}

/* W2's adds. Each back end counts a delay from its own time: a clock read
 * at the add (libevent, threaded twheel) or its current time, base (manual
 * twheel, the heaps, the hashed wheel, libuv's cached loop time). The
 * deadline recorded, against which lateness is measured and never-early
 * checked, is never later than the back end's own: base, or for a back end
 * that reads the clock, the benchmark's last read, taken before the add
 * (and given to twheel-at as its deadline). That read is taken once every
 * W2_READ_EVERY adds, not at each: a read per add would charge these rows
 * alone ~20-30 ns of the benchmark's own per add (the other rows' deadlines
 * cost nothing), and 32 adds take a few microseconds, so a recorded
 * deadline is that much earlier than the back end's, a few thousandths of
 * the 1 ms tick (more if the thread is preempted among them, as it could
 * be between a read and its add before). */
static void w2_adds(struct backend *b, const uint64_t *delays, size_t n, uint64_t base)
{
    const struct backend_ops *ops = b->ops;
    uint64_t from = base;
    for (size_t k = 0; k < n; k++) {
        if (ops->clock_per_add && k % W2_READ_EVERY == 0)
            from = bench_now_ns();
        uint64_t deadline = from + delays[k];
        ops->add(b, delays[k], (void *)(uintptr_t)deadline, &handle_sink);
    }
}

/* One W2 run. Cold (W2_COLD): on a back end just opened, whose memory no
 * add has touched yet, so the adds page it in (every back end takes its
 * nodes lazily: backends.c). Warm (W2_WARM): the same workload run once
 * first, untimed, on the same instance, as in a server that has been up a
 * while: its memory resident, its free list in the order the first run's
 * timers fired. A server's timer is never empty, so one timer, due in an
 * hour, is held through both runs: twheel rewinds the free list of a timer
 * that empties (src/pool.h), and without it the warm run would measure
 * that case instead, as W2_EMPTIED does (--w2-emptied). */
enum { W2_COLD, W2_WARM, W2_EMPTIED };
static const char *const w2_label[] = { "W2", "W2warm", "W2emptied" };

static int w2_once(const struct backend_ops *ops, size_t n, int warm, struct w2_out *o)
{
    struct backend b;
    int rc = -1;
    g_late = malloc(n * sizeof(int64_t));
    uint64_t *delays = malloc(n * sizeof(uint64_t));
    if (!g_late || !delays)
        abort();
    memset(g_late, 0, n * sizeof(int64_t)); /* no page faults while firing */
    rng_state = 0xC0FFEEull;
    for (size_t k = 0; k < n; k++)
        delays[k] = uniform(0, w2_span());
    g_fired = 0;
    uint64_t base = bench_now_ns(); /* read before open: never after it */
    if (open_backend(&b, ops, n + 16))
        goto out;
    g_want = ops->realtime_only ? n : SIZE_MAX;
    sem_init(&g_done, 0, 0);
    /* a warm-up that did not fire everything is not timed on: what is
     * left of it would fire into the timed run */
    int timed = 1;
    if (warm) {
        /* never fires: g_fired counts the others. Not in libevent and
         * libuv, whose loop iteration after the warm-up (below) would
         * sleep until it; neither does anything when it empties. */
        if (warm == W2_WARM && ops != &be_libevent && ops != &be_libuv)
            ops->add(&b, 3600 * SEC, (void *)(uintptr_t)(base + 3600 * SEC), &handle_sink);
        w2_adds(&b, delays, n, base);
        drive_until(&b, n, 30 * SEC);
        timed = g_fired == n;
        /* the back end's time moves to a new base (a loop's one iteration
         * reads its clock after base: its deadlines are never earlier than
         * the ones recorded) */
        base = bench_now_ns();
        ops->advance(&b, base);
        g_fired = 0;
    }
    double c0 = process_cpu(), c1 = c0;
    if (timed) {
        double a0 = bench_thread_cpu();
        w2_adds(&b, delays, n, base);
        o->add_ns = (process_cpu() - c0) * 1e9 / (double)n;
        o->adder_ns = (bench_thread_cpu() - a0) * 1e9 / (double)n;
        drive_until(&b, n, 30 * SEC);
        c1 = process_cpu();
    }
    ops->close(&b); /* joins a back end's own thread: g_fired is final */
    g_want = SIZE_MAX;
    sem_destroy(&g_done);
    size_t fired = g_fired;
    if (timed) {
        qsort(g_late, fired, sizeof(int64_t), cmp_i64);
        o->cpu_per_million = (c1 - c0) * 1e6 / (double)n;
        o->min = fired ? g_late[0] : 0;
        o->p50 = fired ? g_late[fired / 2] : 0;
        o->p99 = fired ? g_late[(size_t)((double)fired * 0.99)] : 0;
        o->max = fired ? g_late[fired - 1] : 0;
        rc = fired == n ? 0 : -1;
    }
out:
    free(g_late);
    free(delays);
    g_late = NULL;
    return rc;
}

/* twheel-at (W2 only) runs with twheel-thr, or on its own name. */
static int at_selected(void)
{
    return available(&be_twheel_threaded) && selected(cfg.only, "w2") &&
           (selected(cfg.backends, be_twheel_threaded.name) ||
            selected(cfg.backends, be_twheel_threaded_at.name));
}

/* The child side of W2: one run, its figures on one line. */
static int w2_child(const char *name, size_t n, int warm)
{
    const struct backend_ops *ops = find_backend(name);
    if (!ops)
        return 1;
    struct w2_out o = { 0 };
    int ok = w2_once(ops, n, warm, &o) == 0;
    printf("%d %.9g %.9g %.9g %lld %lld %lld %lld\n", ok, o.cpu_per_million, o.add_ns,
           o.adder_ns, (long long)o.p50, (long long)o.p99, (long long)o.max, (long long)o.min);
    return 0;
}

/* One W2 run in a fresh process (exec, not just fork), as W4's: memory
 * that earlier workloads freed stays with this process, paged in, and a
 * back end on malloc would get it back while twheel maps its pool anew,
 * so the adds of one would page memory in and the other's not. Returns 1
 * when the run fired every timer. */
static int w2_in_child(const struct backend_ops *ops, size_t n, int warm, struct w2_out *o)
{
    char cmd[1024];
    /* --quick's shorter span (w2_span), and --huge-pages: a child is a
     * new process, and knows only what its command line says */
    snprintf(cmd, sizeof cmd, "'%s' --w2-child %s %zu %d %d %d", self_exe, ops->name, n, warm,
             cfg.quick, bench_huge_pages);
    fflush(stdout);
    FILE *pf = popen(cmd, "r");
    int ok = 0;
    long long p50, p99, max, min;
    if (pf && fscanf(pf, "%d %lf %lf %lf %lld %lld %lld %lld", &ok, &o->cpu_per_million,
                     &o->add_ns, &o->adder_ns, &p50, &p99, &max, &min) == 8) {
        o->p50 = p50;
        o->p99 = p99;
        o->max = max;
        o->min = min;
    } else {
        ok = 0;
    }
    if (pf)
        pclose(pf);
    return ok;
}

/* The hypervisor's steal time so far, in ms summed over this guest's
 * vCPUs: time a vCPU had work and the host ran something else (the
 * eighth figure of /proc/stat's "cpu" line, in clock ticks). A timer due
 * then fires late whatever its driver does: W2's rows print what was
 * stolen while they ran, beside their lateness. -1 where there is no such
 * figure (not Linux). */
static double steal_ms(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8];
    int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                     &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return got == 8 && hz > 0 ? (double)v[7] * 1e3 / (double)hz : -1;
}

/* One W2 row: `reps` runs of a back end, each in a child of its own. A
 * one-off run on these VMs can be off by half (a burst on the host during
 * the 2 s of firing), so the row is the median of the runs, figure by
 * figure, as W1's are; but the extremes are the worst of all the runs: the
 * largest max lateness and the smallest min (a timer that fired early in
 * any run shows). The rows' runs go in turn, as W1's (medians_in_turn). */
struct w2_row {
    const struct backend_ops *ops;
    double cpu[9], add[9], adder[9], p50[9], p99[9];
    int64_t max, min;
    int nok;       /* runs that finished */
    double stolen; /* ms stolen during the row's runs; < 0: not known */
};

static void w2_run(struct w2_row *row, size_t n, int warm, int k, int reps)
{
    progress("%s %s, run %d of %d...\r", w2_label[warm], row->ops->name, k + 1, reps);
    double steal0 = steal_ms();
    struct w2_out one = { 0 };
    int ok = w2_in_child(row->ops, n, warm, &one);
    double steal1 = steal_ms();
    if (steal0 < 0 || steal1 < 0)
        row->stolen = -1;
    else if (row->stolen >= 0)
        row->stolen += steal1 - steal0;
    if (!ok)
        return;
    int j = row->nok++;
    row->cpu[j] = one.cpu_per_million;
    row->add[j] = one.add_ns;
    row->adder[j] = one.adder_ns;
    row->p50[j] = (double)one.p50;
    row->p99[j] = (double)one.p99;
    if (!j || one.max > row->max)
        row->max = one.max;
    if (!j || one.min < row->min)
        row->min = one.min;
}

/* Prints a row's line, writes its CSV and plot rows; returns its CPU.
 * (Its figures are sorted in place, for their medians.) */
static double w2_print(struct w2_row *row, size_t n, int warm, int reps, FILE *plot)
{
    const char *w = w2_label[warm], *name = row->ops->name;
    struct w2_out o = { 0 };
    int nok = row->nok, ok = nok == reps;
    if (nok) {
        o.cpu_per_million = median(row->cpu, nok);
        o.add_ns = median(row->add, nok);
        o.adder_ns = median(row->adder, nok);
        o.p50 = (int64_t)median(row->p50, nok);
        o.p99 = (int64_t)median(row->p99, nok);
        o.max = row->max;
        o.min = row->min;
    }
    char st[32] = "-";
    if (row->stolen >= 0)
        snprintf(st, sizeof st, "%.0f", row->stolen);
    printf("    %-11s %14.3f %8.1f %8.1f %10.3f %10.3f %10.3f %10.3f %8s%s\n", name,
           o.cpu_per_million, o.add_ns, o.adder_ns, (double)o.p50 / 1e6, (double)o.p99 / 1e6, (double)o.max / 1e6, (double)o.min / 1e6,
           st, ok ? (o.min < 0 ? "  fired EARLY" : "") : "  DID NOT FINISH");
    if (row->stolen >= 0)
        csv_row(w, name, n, "host_steal_ms", row->stolen, 0);
    csv_row(w, name, n, "late_p50_ns", (double)o.p50, 0);
    csv_row(w, name, n, "late_p99_ns", (double)o.p99, 0);
    csv_row(w, name, n, "late_max_ns", (double)o.max, 0);
    csv_row(w, name, n, "late_min_ns", (double)o.min, 0);
    csv_row(w, name, n, "add_ns", o.add_ns, 0);
    csv_row(w, name, n, "adder_thread_ns", o.adder_ns, 0);
    if (plot)
        fprintf(plot, "%s %.4f %.4f %.4f\n", name, (double)o.p50 / 1e6,
                (double)o.p99 / 1e6, (double)o.max / 1e6);
    return o.cpu_per_million;
}

/* What fresh memory costs a process on the host at hand, per page:
 * faulted in by a first write, and made resident ahead by
 * madvise(MADV_POPULATE_WRITE) (what twheel's pool does, 128 KiB a call)
 * with the time its first write then still takes. On most hosts that
 * first write is free; on some paravirtualised ones (a hypervisor that
 * backs guest memory lazily, or takes back what the guest frees) it costs
 * microseconds the guest cannot see as a fault. Cold W2 pays it, at most,
 * for every page its back ends' memory takes (less for pages the host
 * still backs); warm W2 reuses memory and does not.
 * Thread CPU, 16 MiB each way, the median of 3. */
struct page_cost {
    double fault_us, populate_us, first_write_us; /* < 0: not measured */
};

static struct page_cost fresh_page_cost(void)
{
    const size_t size = (size_t)16 << 20, chunk = (size_t)128 << 10;
    const long psz = sysconf(_SC_PAGESIZE);
    const double pages = (double)size / (double)psz;
    double f[3], pop[3], w[3];
    struct page_cost c = { -1, -1, -1 };
    for (int rep = 0; rep < 3; rep++) {
        volatile char *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return c;
        double t0 = bench_thread_cpu();
        for (size_t o = 0; o < size; o += (size_t)psz)
            m[o] = 1;
        f[rep] = (bench_thread_cpu() - t0) * 1e6 / pages;
        munmap((void *)m, size);
        pop[rep] = w[rep] = -1;
#ifdef MADV_POPULATE_WRITE
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return c;
        int ok = 1;
        t0 = bench_thread_cpu();
        for (size_t o = 0; ok && o < size; o += chunk)
            ok = madvise((void *)(m + o), chunk, MADV_POPULATE_WRITE) == 0;
        double t1 = bench_thread_cpu();
        for (size_t o = 0; ok && o < size; o += (size_t)psz)
            m[o] = 2;
        if (ok) { /* else a kernel before 5.14: not measured */
            pop[rep] = (t1 - t0) * 1e6 / pages;
            w[rep] = (bench_thread_cpu() - t1) * 1e6 / pages;
        }
        munmap((void *)m, size);
#else
        (void)chunk;
#endif
    }
    c.fault_us = median(f, 3);
    c.populate_us = median(pop, 3);
    c.first_write_us = median(w, 3);
    return c;
}

/* The lateness an idle driver would give W2's timers on this host: the
 * floor under threaded W2's, measured with no timer at all. A thread
 * sleeps as twheel's driver does (to an absolute deadline, the next 1 ms
 * tick, with 1 ns of timer slack: src/runtime.c), over W2's span; at each
 * wake-up every tick passed is due, and the next sleep is to the tick
 * after the wake-up. Timers due uniformly in time (20 a ms, each tick's
 * at the middles of its twentieths) fire at the first wake-up at or after
 * their tick: their lateness is weighted by time, as W2's is, so that a
 * stall of the host's of 5 ms makes 5 ms of timers late, not one sleep of
 * two thousand. The p99 target of one tick + 1 ms holds here only where
 * the host wakes a sleeping thread in time. */
#define IDLE_PER_MS 20

struct idle_driver {
    uint64_t span;
    int64_t p50, p99, max;
};

static void *idle_driver_thread(void *arg)
{
    struct idle_driver *o = arg;
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    size_t ticks = (size_t)(o->span / MS), n = ticks * IDLE_PER_MS, k = 0;
    int64_t *late = malloc(n * sizeof(int64_t));
    if (!late)
        return NULL;
    uint64_t t0 = bench_now_ns(), tick = 1; /* tick j is due at t0 + j ms */
    while (tick <= ticks) {
        sleep_until(t0 + tick * MS);
        uint64_t w = bench_now_ns();
        for (; tick <= ticks && t0 + tick * MS <= w; tick++)
            for (int j = 0; j < IDLE_PER_MS; j++) {
                /* a timer due at the middle of the j-th twentieth of
                 * (tick - 1, tick] ms, rounded up to tick */
                uint64_t due = t0 + (tick - 1) * MS + (2 * (uint64_t)j + 1) * MS / (2 * IDLE_PER_MS);
                late[k++] = (int64_t)(w - due);
            }
    }
    qsort(late, k, sizeof(int64_t), cmp_i64);
    o->p50 = late[k / 2];
    o->p99 = late[k * 99 / 100];
    o->max = late[k - 1];
    free(late);
    return NULL;
}

static void run_w2(void)
{
    size_t n = cfg.quick ? 100000 : 1000000;
    char path[512];
    snprintf(path, sizeof path, "%s-w2.dat", cfg.out);
    FILE *plot = fopen(path, "w"); /* the cold run's lateness */
    if (plot) {
        cfg.plot_w2 = 1;
        fprintf(plot, "backend p50_ms p99_ms max_ms\n");
    }
    int reps = cfg.quick ? 1 : cfg.reps;
    for (int warm = W2_COLD; warm <= (cfg.w2_emptied ? W2_EMPTIED : W2_WARM); warm++) {
        if (warm == W2_COLD)
            printf("\nW2 expire-all: %zu timers, delays 0 .. %g s, real time until all fired,\n"
                   "  on a back end just opened (its adds page its memory in)\n", n,
                   (double)w2_span() / 1e9);
        else if (warm == W2_WARM)
            printf("\nW2 warm: the same, on a back end that has run W2 once already (untimed),\n"
                   "  one timer due in an hour held through both, as a server's never empties\n");
        else
            printf("\nW2 emptied: warm, with no timer held: the back end empties between the runs\n");
        printf("  the median of %d run(s), each in a fresh process; max and min: the worst of them\n",
               reps);
        printf("  add ns: process CPU per add (a back end's own thread, firing meanwhile, "
               "included); adder: the adding thread's alone\n");
        printf("  stolen: ms of vCPU time the hypervisor took from this guest over the row's runs "
               "(/proc/stat):\n  a timer due then fires late whatever the back end does\n");
        printf("    %-11s %14s %8s %8s %10s %10s %10s %10s %8s\n", "", "CPU s/million", "add ns",
               "adder", "late p50", "p99", "max", "min (ms)", "stolen");
        struct w2_row rows[NBACKENDS + 1];
        int nr = 0;
        for (size_t b = 0; b < NBACKENDS; b++) {
            const struct backend_ops *ops = all_backends[b];
            if (!available(ops) || ops->no_advance)
                continue;
            if (selected(cfg.backends, ops->name))
                rows[nr++] = (struct w2_row){ .ops = ops };
            /* what the threaded tw_schedule's own clock read costs: the
             * same adds through tw_schedule_at, given the deadline the
             * benchmark has just read (with twheel-thr, or on its own
             * name) */
            if (ops == &be_twheel_threaded && at_selected())
                rows[nr++] = (struct w2_row){ .ops = &be_twheel_threaded_at };
        }
        for (int k = 0; k < reps; k++)
            for (int i = 0; i < nr; i++)
                w2_run(&rows[i], n, warm, k, reps);
        progress("%60s\r", "");
        struct result r[NBACKENDS + 1];
        for (int i = 0; i < nr; i++) {
            r[i].be = rows[i].ops->name;
            r[i].v = w2_print(&rows[i], n, warm, reps, warm ? NULL : plot);
        }
        print_ratios(w2_label[warm], "cpu_s_per_million", n, r, nr, "CPU s/M", 1);
    }
    if (plot)
        fclose(plot);
    /* a timer's share of twheel's pool: its slot, by the engine's own
     * accounting (W4) */
    double slot = 36;
    tw_timer *t;
    struct tw_stats st;
    if (tw_create(&t, NULL) == 0) {
        tw_stats(t, &st);
        slot = (double)st.entry_bytes;
        tw_destroy(t);
    }
    struct page_cost pc = fresh_page_cost();
    long psz = sysconf(_SC_PAGESIZE);
    printf("  fresh memory here, a %ld-byte page: faulted in by a first write %.2f us of CPU;\n",
           psz, pc.fault_us);
    if (pc.populate_us >= 0)
        printf("  made resident ahead (MADV_POPULATE_WRITE) %.2f us, and its first write then %.2f us\n"
               "  more: up to %.1f ns a twheel timer (%.0f bytes) in cold W2's adds (less where the\n"
               "  host still backs the pages the kernel hands out); warm W2 reuses its memory\n",
               pc.populate_us, pc.first_write_us,
               (pc.populate_us + pc.first_write_us) * 1e3 * slot / (double)psz, slot);
    struct idle_driver id = { w2_span(), -1, -1, -1 };
    pthread_t th;
    double steal0 = steal_ms();
    if (pthread_create(&th, NULL, idle_driver_thread, &id) == 0)
        pthread_join(th, NULL);
    double steal1 = steal_ms();
    if (id.p50 >= 0) {
        printf("  an idle driver here (a thread sleeping to each 1 ms tick as twheel's does, no\n"
               "  timer, over %g s) would make timers due uniformly late by p50 %.3f, p99 %.3f,\n"
               "  max %.3f ms: the host's floor under threaded twheel's lateness above",
               (double)id.span / 1e9, (double)id.p50 / 1e6, (double)id.p99 / 1e6,
               (double)id.max / 1e6);
        if (steal0 >= 0 && steal1 >= 0)
            printf(" (%.0f ms\n  stolen meanwhile; a row above that had more may be later than this floor)",
                   steal1 - steal0);
        printf("\n");
        csv_row("W2", "idle-driver", 0, "late_p50_ns", (double)id.p50, 0);
        csv_row("W2", "idle-driver", 0, "late_p99_ns", (double)id.p99, 0);
        csv_row("W2", "idle-driver", 0, "late_max_ns", (double)id.max, 0);
    }
    csv_row("W2", "page", 0, "fault_us", pc.fault_us, 0);
    csv_row("W2", "page", 0, "populate_us", pc.populate_us, 0);
    csv_row("W2", "page", 0, "populated_first_write_us", pc.first_write_us, 0);
}

uint64_t w2_sim_loop(const struct backend_ops *ops, struct backend *be, const uint64_t *delays,
                     size_t n, uint64_t base, int timed);

/* W2 on a simulated clock, the part measured: n adds, then advances 1 ms
 * at a time until all have fired (a back end still short of n a second
 * after the span has lost timers: the caller checks g_fired). Out of line
 * and named, so that callgrind can count only it (benchmarks/callgrind.sh,
 * which passes timed = 0). Returns the longest advance in thread CPU ns
 * when timed, thread CPU and not wall time: a preemption of this thread
 * (a shared VM's steal) is not the back end's work, and one such pause in
 * ~2,000 advances used to set the figure. */
__attribute__((noinline)) uint64_t w2_sim_loop(const struct backend_ops *ops, struct backend *be,
                                               const uint64_t *delays, size_t n, uint64_t base,
                                               int timed)
{
    for (size_t k = 0; k < n; k++)
        ops->add(be, delays[k], &g_dummy, &handle_sink);
    uint64_t longest = 0;
    for (uint64_t t = base + MS; g_fired < n && t < base + w2_span() + SEC; t += MS) {
        double w0 = timed ? bench_thread_cpu() : 0;
        ops->advance(be, t);
        if (!timed)
            continue;
        uint64_t w = (uint64_t)((bench_thread_cpu() - w0) * 1e9);
        if (w > longest)
            longest = w;
    }
    return longest;
}

/* W2's delays, seeded as every W2 run seeds them. */
static uint64_t *w2_delays(size_t n)
{
    uint64_t *delays = malloc(n * sizeof(uint64_t));
    if (!delays)
        abort();
    rng_state = 0xC0FFEEull; /* W2's delays */
    for (size_t k = 0; k < n; k++)
        delays[k] = uniform(0, w2_span());
    return delays;
}

/* W2 on a simulated clock: the same timers, advanced 1 ms at a time with
 * no sleeping, so what is left is the back end's own work with the caches
 * as warm as the workload leaves them. Set against W2 above, it shows how
 * much of W2's CPU is the wake-ups themselves (their CPU, measured here
 * too, and the caches the machine cools while the loop sleeps). The
 * longest single advance (in thread CPU time) is how long a back end
 * keeps due timers waiting while it works (for a wheel whose coarse
 * buckets cascade whole, the tick that cascades one). */
/* The selected back ends that run on a simulated clock (W2's simulated
 * runs, W6), into be; returns how many. */
static int sim_clock_backends(const struct backend_ops **be)
{
    int nb = 0;
    for (size_t b = 0; b < NBACKENDS; b++)
        if (available(all_backends[b]) && selected(cfg.backends, all_backends[b]->name) &&
            all_backends[b]->sim_clock)
            be[nb++] = all_backends[b];
    return nb;
}

/* A child's simulated-clock back end, by name, opened for W2's n timers,
 * with their delays and the clock's start, and no timer fired yet (g_late
 * is NULL: firings are only counted). 0, or 1 if it cannot be. */
static int w2sim_open(const char *name, size_t n, const struct backend_ops **ops,
                      struct backend *be, uint64_t **delays, uint64_t *base)
{
    *ops = find_backend(name);
    if (!*ops || !(*ops)->sim_clock)
        return 1;
    *delays = w2_delays(n);
    *base = bench_now_ns();
    if (open_backend(be, *ops, n + 16)) {
        free(*delays);
        return 1;
    }
    g_fired = 0;
    return 0;
}

/* The child's side of one W2 run on a simulated clock: prints CPU s per
 * million, the longest advance (ns) and the timers fired. */
static int w2sim_child(const char *name, size_t n)
{
    const struct backend_ops *ops;
    struct backend be;
    uint64_t *delays, base;
    if (w2sim_open(name, n, &ops, &be, &delays, &base))
        return 1;
    double a0 = process_cpu();
    uint64_t longest = w2_sim_loop(ops, &be, delays, n, base, 1);
    double cpu = (process_cpu() - a0) * 1e6 / (double)n;
    printf("%.9g %" PRIu64 " %zu\n", cpu, longest, (size_t)g_fired);
    ops->close(&be);
    free(delays);
    return 0;
}

struct w2sim_ctx {
    size_t n;
    double longest[NBACKENDS][9]; /* by back end and run */
    int runs[NBACKENDS];
    int short_of_n[NBACKENDS];  /* a run that did not fire all n */
};

/* One W2 run on a simulated clock in a process of its own, as W1's
 * (w1_in_child says why). */
static double w2sim_rep(const struct backend_ops *ops, int i, void *ctx)
{
    struct w2sim_ctx *c = ctx;
    char args[256];
    snprintf(args, sizeof args, "--w2sim-child %s %zu %d %d", ops->name, c->n, cfg.quick,
             bench_huge_pages);
    double v[3];
    child_figures(args, v, 3);
    c->longest[i][c->runs[i]++] = v[1];
    if ((size_t)v[2] != c->n)
        c->short_of_n[i] = 1;
    return v[0];
}

static void run_w2_sim(void)
{
    size_t n = cfg.quick ? 100000 : 1000000;
    int reps = cfg.quick ? 1 : cfg.reps;
    int sleeps = cfg.quick ? 50 : 500;
    double c0 = process_cpu();
    for (int k = 0; k < sleeps; k++) {
        struct timespec ts = { 0, (long)MS };
        nanosleep(&ts, NULL);
    }
    double sleep_us = (process_cpu() - c0) * 1e6 / sleeps;
    printf("\nW2 on a simulated clock: the same %zu timers, advanced 1 ms at a time, no sleeping\n"
           "  (each run in a process of its own, in turn; each figure the median of %d)\n", n,
           reps);
    printf("    %-11s %14s %16s\n", "", "CPU s/million", "longest advance (CPU)");
    const struct backend_ops *be[NBACKENDS];
    int nb = sim_clock_backends(be);
    struct w2sim_ctx c = { .n = n };
    struct result r[NBACKENDS];
    medians_in_turn(be, nb, reps, "W2 simulated", w2sim_rep, &c, r);
    for (int i = 0; i < nb; i++) {
        /* the median, not the most: thread CPU still counts the time the
         * hypervisor takes the vCPU away, and one such spell in one run
         * would set the most */
        double longest = median(c.longest[i], c.runs[i]);
        printf("    %-11s %14.3f %13.3f ms%s\n", be[i]->name, r[i].v, longest / 1e6,
               c.short_of_n[i] ? "  DID NOT FINISH" : "");
        csv_row("W2sim", be[i]->name, n, "longest_advance_ns", longest, 0);
    }
    print_ratios("W2sim", "cpu_s_per_million", n, r, nb, "CPU s/M", 1);
    double w2_wakes = (double)(w2_span() / MS); /* one per 1 ms tick over W2's span */
    printf("  one 1 ms sleep and its wake-up cost %.1f us of CPU here; W2 above sleeps\n"
           "  about once per ms for %g s: %.3f CPU s per million timers for the sleeps alone\n",
           sleep_us, (double)w2_span() / 1e9, sleep_us * w2_wakes / (double)n);
    csv_row("W2sim", "sleep", n, "cpu_us_per_sleep", sleep_us, 0);
}

/* ---- W3: idle long horizon -------------------------------------------- */

/* One W3 window on a back end just opened; returns the process CPU (ms)
 * and sets the voluntary context switches and the engine's own wake-ups
 * (-1: it has no count). */
static double w3_once(const struct backend_ops *ops, size_t n, uint64_t window,
                      long *switches, int64_t *wakeups)
{
    struct backend be;
    if (open_backend(&be, ops, n + 16))
        return -1;
    rng_state = 0xBADC0DEull;
    for (size_t k = 0; k < n; k++)
        ops->add(&be, uniform(60 * SEC, 86400 * SEC), &g_dummy, &handle_sink);
    uint64_t w0 = ops->wakeups ? ops->wakeups(&be) : 0;
    uint64_t end = bench_now_ns() + window;
    /* self-sleeping loops: a timer at the window's end wakes them */
    int self_sleeping = !ops->realtime_only && ops->next(&be) == 0;
    if (self_sleeping)
        ops->add(&be, window, &g_dummy, &handle_sink);
    long v0 = voluntary_switches();
    double c0 = process_cpu();
    g_fired = 0;
    while (bench_now_ns() < end) {
        if (ops->realtime_only) {
            sleep_until(end);
            break;
        }
        uint64_t next = ops->next(&be);
        if (next != 0) {
            sleep_until(next < end ? next : end);
            if (bench_now_ns() >= end)
                break;
        }
        ops->advance(&be, bench_now_ns());
        /* Woken before the window's end by its timer: libuv counts a
         * delay from its loop's cached time, read before the prefill, so
         * that timer comes due early, and the next run of the loop would
         * sleep to the first prefilled timer (a minute) instead. One more
         * timer for what is left of the window. (No prefilled timer fires
         * in it: any firing is the window's.) */
        uint64_t now = bench_now_ns();
        if (self_sleeping && g_fired && now < end) {
            g_fired = 0;
            ops->add(&be, end - now, &g_dummy, &handle_sink);
        }
    }
    double c1 = process_cpu();
    *switches = voluntary_switches() - v0;
    *wakeups = ops->wakeups ? (int64_t)(ops->wakeups(&be) - w0) : -1;
    ops->close(&be);
    return (c1 - c0) * 1e3;
}

/* The child's side of one W3 window: back end `name`, or with "sleep"
 * none, the window slept through. Prints the process CPU (ms), the
 * voluntary switches and the engine's wake-ups (-1: no count). */
static int w3_child(const char *name, size_t n, uint64_t window)
{
    long sw = 0;
    int64_t wk = -1;
    double c;
    if (!strcmp(name, "sleep")) {
        long v0 = voluntary_switches();
        double c0 = process_cpu();
        sleep_until(bench_now_ns() + window);
        c = (process_cpu() - c0) * 1e3;
        sw = voluntary_switches() - v0;
    } else {
        const struct backend_ops *ops = find_backend(name);
        if (!ops || (c = w3_once(ops, n, window, &sw, &wk)) < 0)
            return 1;
    }
    printf("%.9g %ld %" PRId64 "\n", c, sw, wk);
    return 0;
}

/* One W3 window in a process of its own, as W1's (w1_in_child says why):
 * its CPU and switches are then the window's alone, with nothing that
 * ran before it (a thread, memory to give back) in the process. */
static double w3_in_child(const char *name, size_t n, uint64_t window, long *switches,
                          int64_t *wakeups)
{
    char args[256];
    snprintf(args, sizeof args, "--w3-child %s %zu %" PRIu64 " %d", name, n, window,
             bench_huge_pages);
    double v[3];
    child_figures(args, v, 3);
    *switches = (long)v[1];
    *wakeups = (int64_t)v[2];
    return v[0];
}

/* W3, `reps` windows per back end, each in a process of its own, in
 * turn (medians_in_turn says why). The CPU is the median: for a back end
 * that sleeps through the window it is what the VM charges for one long
 * sleep, 0.05 to 1.4 ms from one window to the next here, with no work in
 * it. The wake-ups and switches are the most any window saw: one wake-up
 * in any of them is one too many. */
static void run_w3(void)
{
    size_t n = 100000;
    uint64_t window = cfg.quick ? SEC / 2 : 10 * SEC;
    int reps = cfg.quick ? 1 : cfg.reps;
    printf("\nW3 idle: %zu timers over 1 min .. 24 h, %.1f s of wall time\n", n,
           (double)window / 1e9);
    printf("  CPU: the median of %d window(s); switches and wake-ups: the most in any\n", reps);
    printf("    %-11s %12s %14s %16s\n", "", "CPU ms", "vol. switches", "engine wake-ups");
    /* Row 0 is the control: the same window with no back end, one sleep
     * through it. A back end that sleeps through the window as well costs
     * what that row does, and on a VM that is not always near zero. */
    const char *names[NBACKENDS + 1] = { "sleep" };
    int nb = 1;
    for (size_t b = 0; b < NBACKENDS; b++) {
        const struct backend_ops *ops = all_backends[b];
        if (available(ops) && selected(cfg.backends, ops->name) && !ops->no_advance)
            names[nb++] = ops->name;
    }
    double cpu[NBACKENDS + 1][9];
    long sw[NBACKENDS + 1] = { 0 };
    int64_t wk[NBACKENDS + 1];
    for (int i = 0; i < nb; i++)
        wk[i] = -1;
    for (int k = 0; k < reps; k++)
        for (int i = 0; i < nb; i++) {
            progress("W3 %s, window %d of %d...\r", names[i], k + 1, reps);
            long s1;
            int64_t w1;
            cpu[i][k] = w3_in_child(names[i], n, window, &s1, &w1);
            if (s1 > sw[i])
                sw[i] = s1;
            if (w1 > wk[i])
                wk[i] = w1;
        }
    progress("%60s\r", "");
    for (int i = 0; i < nb; i++) {
        double c = median(cpu[i], reps);
        char wks[24] = "-";
        if (i > 0 && wk[i] < 0)
            snprintf(wks, sizeof wks, "n/a");
        else if (i > 0)
            snprintf(wks, sizeof wks, "%" PRId64, wk[i]);
        printf("    %-11s %12.3f %14ld %16s\n", i ? names[i] : "sleep alone", c, sw[i], wks);
        csv_row("W3", i ? names[i] : "sleep-alone", n, "cpu_ms", c, 0);
        if (i == 0)
            continue;
        csv_row("W3", names[i], n, "voluntary_switches", (double)sw[i], 0);
        if (wk[i] >= 0)
            csv_row("W3", names[i], n, "engine_wakeups", (double)wk[i], 0);
    }
}

/* ---- W4: memory ------------------------------------------------------- */

/* The child side of W4: print RSS growth and own accounting per timer. */
static int w4_child(const char *name, size_t n)
{
    const struct backend_ops *ops = find_backend(name);
    if (!ops)
        return 1;
    uint64_t *delays = malloc(n * sizeof(uint64_t));
    if (!delays)
        return 1;
    rng_state = 0xFEEDull;
    for (size_t k = 0; k < n; k++)
        delays[k] = uniform(SEC, 3600 * SEC);
    struct backend be;
    uint64_t before = rss_bytes();
    if (open_backend(&be, ops, n + 16)) {
        free(delays);
        return 1;
    }
    for (size_t k = 0; k < n; k++)
        ops->add(&be, delays[k], &g_dummy, &handle_sink);
    uint64_t after = rss_bytes();
    double own = (double)ops->own_bytes(&be) / (double)n;
    /* every timer dropped and the back end kept (where it can): then the
     * same timers again, for the close */
    double drop = -1;
    if (ops->drop) {
        double d0 = bench_thread_cpu();
        ops->drop(&be);
        drop = (bench_thread_cpu() - d0) * 1e9 / (double)n;
        for (size_t k = 0; k < n; k++)
            ops->add(&be, delays[k], &g_dummy, &handle_sink);
    }
    /* the teardown with every timer still pending: what a server pays to
     * close a timer it never emptied */
    double c0 = bench_thread_cpu();
    ops->close(&be);
    double c1 = bench_thread_cpu();
    printf("%.3f %.3f %.3f %.3f\n", (double)(after - before) / (double)n, own,
           (c1 - c0) * 1e9 / (double)n, drop);
    free(delays);
    return 0;
}

static void run_w4(void)
{
    size_t n = cfg.quick ? 100000 : 1000000;
    printf("\nW4 memory: %zu pending timers (1 s .. 1 h); RSS growth in a fresh child process\n", n);
    printf("  close: thread CPU to close the back end with them all pending, ns per timer;\n"
           "  drop: to drop them all and keep it (twheel: tw_drain with no callback)\n");
    printf("    %-11s %14s %16s %16s %15s\n", "", "RSS B/timer", "own B/timer", "close ns/timer",
           "drop ns/timer");
    struct result r[NBACKENDS], rc[NBACKENDS];
    int nr = 0;
    for (size_t b = 0; b < NBACKENDS; b++) {
        const struct backend_ops *ops = all_backends[b];
        if (!available(ops) || !selected(cfg.backends, ops->name))
            continue;
        /* a fresh process (exec, not just fork): freed memory this
         * process still holds would otherwise be reused unseen */
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' --w4-child %s %zu %d", self_exe, ops->name, n,
                 bench_huge_pages);
        double res[4] = { 0, 0, 0, -1 };
        fflush(stdout);
        FILE *pf = popen(cmd, "r");
        if (!pf || fscanf(pf, "%lf %lf %lf %lf", &res[0], &res[1], &res[2], &res[3]) != 4) {
            res[0] = res[1] = res[2] = 0;
            res[3] = -1;
        }
        if (pf)
            pclose(pf);
        char drops[24] = "-";
        if (res[3] >= 0) {
            snprintf(drops, sizeof drops, "%.1f", res[3]);
            csv_row("W4", ops->name, n, "drop_ns_per_timer", res[3], 0);
        }
        printf("    %-11s %14.1f %16.1f %16.1f %15s\n", ops->name, res[0], res[1], res[2], drops);
        r[nr].be = rc[nr].be = ops->name;
        rc[nr].v = res[2];
        r[nr++].v = res[0];
        csv_row("W4", ops->name, n, "own_bytes_per_timer", res[1], 0);
    }
    print_ratios("W4", "rss_bytes_per_timer", n, r, nr, "B/timer", 1);
    print_ratios("W4close", "close_ns_per_timer", n, rc, nr, "ns/timer", 1);
}

/* ---- W5: producers through the threaded API --------------------------- */

struct w5_arg {
    tw_timer *t;
    size_t ops;
    uint64_t seed;
    uint64_t stall; /* out: the longest this thread took over W5_STRIDE pairs, ns */
};

/* W5 reads the clock once every W5_STRIDE pairs (~0.1 ns a pair), to
 * find the longest any thread went without finishing that many: a lock
 * that lets one thread sleep while another runs alone can raise the pairs
 * a second and still leave a caller waiting a long time, which the total
 * does not show. (With more threads than CPUs, the scheduler's time slices
 * show here too.) */
#define W5_STRIDE 256u

static void w5_noop(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    (void)arg;
}

static void *w5_thread(void *p)
{
    struct w5_arg *a = p;
    enum { WINDOW = 1024 };
    tw_id ids[WINDOW] = { 0 };
    uint64_t x = a->seed, last = bench_now_ns(), stall = 0;
    for (size_t i = 0; i < a->ops; i++) {
        if (i % W5_STRIDE == W5_STRIDE - 1) {
            uint64_t now = bench_now_ns();
            if (now - last > stall)
                stall = now - last;
            last = now;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t slot = i % WINDOW;
        if (ids[slot])
            tw_cancel(a->t, ids[slot]);
        tw_schedule(a->t, SEC + x % (3600 * SEC), w5_noop, NULL, &ids[slot]);
    }
    for (size_t k = 0; k < WINDOW; k++)
        if (ids[k])
            tw_cancel(a->t, ids[k]);
    a->stall = stall;
    return NULL;
}

/* One W5 run: returns pairs a second (0 on failure), and the longest
 * stall of any thread (w5_arg) in *stall. */
static double w5_once(int threads, size_t per_thread, uint32_t shards, uint64_t *stall)
{
    *stall = 0;
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    o.shards = shards;
    tw_timer *t;
    if (tw_create(&t, &o))
        return 0;
    /* a background of pending timers, as in a broker */
    for (int k = 0; k < 100000; k++)
        tw_schedule(t, SEC + (uint64_t)k * 36 * MS, w5_noop, NULL, NULL);
    pthread_t th[64];
    struct w5_arg args[64];
    uint64_t t0 = bench_now_ns();
    for (int k = 0; k < threads; k++) {
        args[k] = (struct w5_arg){ t, per_thread, 0x1234567ull * (uint64_t)(k + 1), 0 };
        pthread_create(&th[k], NULL, w5_thread, &args[k]);
    }
    for (int k = 0; k < threads; k++)
        pthread_join(th[k], NULL);
    uint64_t t1 = bench_now_ns();
    tw_destroy(t);
    for (int k = 0; k < threads; k++)
        if (args[k].stall > *stall)
            *stall = args[k].stall;
    /* an operation = one schedule + one cancel */
    return (double)threads * (double)per_thread / ((double)(t1 - t0) / 1e9);
}

/* The child's side of a W5 run: prints pairs a second and the longest
 * stall in ms. */
static int w5_child(int threads, size_t per_thread, uint32_t shards)
{
    if (threads < 1 || threads > 64)
        return 1;
    uint64_t stall;
    double v = w5_once(threads, per_thread, shards, &stall);
    if (!(v > 0))
        return 1;
    printf("%.9g %.6f\n", v, (double)stall / 1e6);
    return 0;
}

/* One W5 run in a process of its own, as W1's (w1_in_child says why):
 * pairs a second, and the longest stall in ms in *stall_ms. */
static double w5_in_child(int threads, size_t per_thread, uint32_t shards, double *stall_ms)
{
    char args[128];
    snprintf(args, sizeof args, "--w5-child %d %zu %u", threads, per_thread, shards);
    double v[2];
    child_figures(args, v, 2);
    *stall_ms = v[1];
    return v[0];
}

/* One cache line's round trip between two CPUs: two threads pinned to the
 * first two CPUs this process may use pass a counter back and forth
 * through one line, and this is the time a round (two transfers of the
 * line) takes, the median of three runs of `rounds`. On one shard, W5's
 * threads pass the lock's and the wheel's lines between the CPUs on
 * nearly every operation, so those rows follow this figure, and a guest
 * can see it change within minutes as the host places its vCPUs
 * (results/history.md, "One contended shard follows the host"). Returns
 * the ns, or -1 with fewer than two CPUs or no way to pin a thread. Only
 * the two threads are pinned, never the caller: W5's children inherit
 * its mask. */
struct rt_side {
    unsigned rounds;
    double ns; /* out, the pinging side */
};
static struct {
    _Alignas(64) _Atomic unsigned long seq;
} rt_line;
static _Alignas(64) _Atomic int rt_stop; /* a line of its own, read-only while timed */

static void *rt_echo(void *p)
{
    struct rt_side *a = p;
    for (unsigned long i = 1; i <= a->rounds; i++) {
        while (atomic_load_explicit(&rt_line.seq, memory_order_acquire) != 2 * i - 1)
            if (atomic_load_explicit(&rt_stop, memory_order_relaxed))
                return NULL;
        atomic_store_explicit(&rt_line.seq, 2 * i, memory_order_release);
    }
    return NULL;
}

static void *rt_ping(void *p)
{
    struct rt_side *a = p;
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 1; i <= a->rounds; i++) {
        atomic_store_explicit(&rt_line.seq, 2 * i - 1, memory_order_release);
        while (atomic_load_explicit(&rt_line.seq, memory_order_acquire) != 2 * i)
            ;
    }
    a->ns = (double)(bench_now_ns() - t0) / a->rounds;
    return NULL;
}

/* A thread created on one CPU (pthread_create fails if it cannot be). */
static int rt_start(pthread_t *th, int cpu, void *(*fn)(void *), struct rt_side *side)
{
    pthread_attr_t at;
    if (pthread_attr_init(&at))
        return -1;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    int rc = pthread_attr_setaffinity_np(&at, sizeof one, &one);
    if (!rc)
        rc = pthread_create(th, &at, fn, side);
    pthread_attr_destroy(&at);
    return rc ? -1 : 0;
}

static double line_round_trip_ns(unsigned rounds)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return -1;
    int cpu[2], found = 0;
    for (int k = 0; k < CPU_SETSIZE && found < 2; k++)
        if (CPU_ISSET(k, &allowed))
            cpu[found++] = k;
    if (found < 2)
        return -1;
    double v[3];
    for (int r = 0; r < 3; r++) {
        struct rt_side ping = { rounds, 0 }, echo = { rounds, 0 };
        atomic_store(&rt_line.seq, 0);
        atomic_store(&rt_stop, 0);
        pthread_t te, tp;
        if (rt_start(&te, cpu[1], rt_echo, &echo))
            return -1;
        if (rt_start(&tp, cpu[0], rt_ping, &ping)) {
            atomic_store(&rt_stop, 1); /* the echo would wait for ever */
            pthread_join(te, NULL);
            return -1;
        }
        pthread_join(tp, NULL);
        pthread_join(te, NULL);
        v[r] = ping.ns;
    }
    return median(v, 3);
}

static void run_w5(void)
{
    if (!available(&be_twheel_threaded) || !selected(cfg.backends, "twheel-thr")) {
        printf("\nW5 producers: skipped (no threaded twheel)\n");
        return;
    }
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    tw_timer *probe;
    if (tw_create(&probe, &o)) {
        printf("\nW5 producers: skipped (threaded mode unavailable)\n");
        return;
    }
    tw_destroy(probe);
    size_t total = cfg.quick ? 400000 : 8000000;
    int reps = cfg.quick ? 1 : cfg.reps;
    printf("\nW5 producers: threads scheduling + cancelling through the threaded API "
           "(%zu pairs in all, wall time, median of %d)\n"
           "  longest stall: the longest any thread took over %u pairs, in any run\n",
           total, reps, W5_STRIDE);
    /* The default shards (each thread on its own lock, mostly), then one
     * shard: every thread on one lock, the worst case for contention. */
    static const uint32_t shard_counts[] = { 0, 1 };
    static const int counts[] = { 1, 2, 8 };
    for (int s = 0; s < 2; s++) {
        uint32_t shards = shard_counts[s];
        printf(shards ? "  one shard (every thread on one lock)\n"
                      : "  default shards (four per CPU)\n");
        unsigned rt_rounds = cfg.quick ? 20000 : 200000;
        double rt_before = shards ? line_round_trip_ns(rt_rounds) : 0;
        double base = 0, two = 0;
        double v[3][9]; /* the counts' runs in turn, as W1's (medians_in_turn) */
        double stall[3] = { 0 }; /* the longest of any run, ms */
        for (int k = 0; k < reps; k++)
            for (int c = 0; c < 3; c++) {
                progress("W5 %d threads rep %d...\r", counts[c], k + 1);
                double st;
                v[c][k] = w5_in_child(counts[c], total / (size_t)counts[c], shards, &st);
                if (st > stall[c])
                    stall[c] = st;
            }
        progress("%60s\r", "");
        for (int c = 0; c < 3; c++) {
            double m = median(v[c], reps);
            if (c == 0)
                base = m;
            if (counts[c] == 2)
                two = m;
            printf("    %d thread%s %12.2f M pairs/s   %.2fx one thread   longest stall %7.3f ms\n",
                   counts[c], counts[c] > 1 ? "s" : " ", m / 1e6, m / base, stall[c]);
            if (counts[c] == 8 && two > 0)
                printf("              8 threads / 2 threads = %.2fx\n", m / two);
            char name[32];
            snprintf(name, sizeof name, shards ? "%d-threads-1-shard" : "%d-threads", counts[c]);
            csv_row("W5", name, (uint64_t)counts[c], "pairs_per_s", m, m / base);
            csv_row("W5", name, (uint64_t)counts[c], "longest_stall_ms", stall[c], 0);
        }
        if (shards) {
            double rt_after = line_round_trip_ns(rt_rounds);
            if (rt_before > 0 && rt_after > 0) {
                printf("    one cache line's round trip between two CPUs: %.1f ns before these "
                       "runs, %.1f after\n",
                       rt_before, rt_after);
                csv_row("W5", "line-round-trip", 2, "ns_before", rt_before, 0);
                csv_row("W5", "line-round-trip", 2, "ns_after", rt_after, 0);
            } else {
                printf("    one cache line's round trip between two CPUs: not measured "
                       "(fewer than two CPUs, or no way to pin a thread)\n");
            }
        }
    }
}

/* ---- W6: idle timeouts pushed later ---------------------------------- */

/* Not one of the issue's five workloads: added with tw_reschedule's push
 * in place (wheel.c, "Pushing a deadline later"), to measure it where it
 * matters, a server's idle timeouts. N connections, each with an idle
 * timer of 10 s; on a simulated clock moved 1 ms at a time, connections
 * picked at random are touched, each 0.5 times a second on average (5
 * touches per timeout), and a touch pushes the connection's timer to now
 * + 10 s. A timer that fires (e^-5: 0.7% of them per 10 s) closes its
 * connection, and the next touch of it opens a new one (a fresh timer).
 * The timers start as they would stand in that steady state: 10 s less
 * the time since the last touch, drawn exponentially. 20 million touches,
 * 40 s of simulated time: every timer's old deadline comes due in it
 * several times over, so a back end that moves the push's work into its
 * advance pays it here too. Reported: ns per touch, thread CPU of the
 * whole loop, advances included. A back end with no push (the hashed
 * wheel: Netty has none) cancels and adds. */
#define W6_T (10 * SEC)

struct w6_input {
    size_t n, m, per_ms;
    uint64_t *prefill; /* n delays */
    uint32_t *victims; /* m connections */
};

void w6_loop(struct backend *b, uint64_t *h, const struct w6_input *in, uint64_t now);

/* The timed loop (named so that callgrind can count only it:
 * `valgrind --tool=callgrind --toggle-collect=w6_loop twheel-bench --quick
 * --only w6 --backends twheel`). */
__attribute__((noinline)) void w6_loop(struct backend *b, uint64_t *h, const struct w6_input *in,
                                       uint64_t now)
{
    const struct backend_ops *ops = b->ops;
    for (size_t i = 0; i < in->m;) {
        now += MS;
        ops->advance(b, now);
        for (size_t j = 0; j < in->per_ms && i < in->m; j++, i++) {
            uint32_t v = in->victims[i];
            if (g_closed[v]) {
                g_closed[v] = 0;
                ops->add(b, W6_T, (void *)(uintptr_t)v, &h[v]);
            } else if (ops->push) {
                ops->push(b, h[v], W6_T);
            } else {
                ops->cancel(b, h[v]);
                ops->add(b, W6_T, (void *)(uintptr_t)v, &h[v]);
            }
        }
    }
}

static double w6_once(const struct backend_ops *ops, const struct w6_input *in, size_t *fired)
{
    struct backend b;
    uint64_t *h = malloc(in->n * sizeof(uint64_t));
    g_closed = calloc(in->n, 1);
    if (!h || !g_closed || open_backend(&b, ops, in->n + 16))
        abort();
    uint64_t now = bench_now_ns(); /* not before the back end's own start */
    for (size_t k = 0; k < in->n; k++)
        ops->add(&b, in->prefill[k], (void *)(uintptr_t)k, &h[k]);
    g_fired = 0;
    double t0 = bench_thread_cpu();
    w6_loop(&b, h, in, now);
    double t1 = bench_thread_cpu();
    *fired = g_fired;
    ops->close(&b);
    free(g_closed);
    g_closed = NULL;
    free(h);
    return (t1 - t0) * 1e9 / (double)in->m;
}

/* W6's input for n connections, seeded as every W6 run seeds it. */
static void w6_make(struct w6_input *in, size_t n)
{
    in->n = n;
    in->m = 20 * n;
    in->per_ms = n / 2000; /* 0.5 touches a second a connection */
    in->prefill = malloc(in->n * sizeof(uint64_t));
    in->victims = malloc(in->m * sizeof(uint32_t));
    if (!in->prefill || !in->victims)
        abort();
    rng_state = 0x1D1Eull;
    for (size_t k = 0; k < in->n; k++) {
        double since;
        do /* time since the last touch: exponential, rate 0.5/s */
            since = -log((double)(rng() >> 11) * 0x1p-53 + 0x1p-54) * 2.0 * (double)SEC;
        while (since >= (double)W6_T);
        in->prefill[k] = W6_T - (uint64_t)since;
    }
    for (size_t k = 0; k < in->m; k++)
        in->victims[k] = (uint32_t)uniform(0, in->n);
}

static void w6_free(struct w6_input *in)
{
    free(in->prefill);
    free(in->victims);
}

/* The child's side of a W6 run: the input made anew, one run; prints ns
 * per touch and the timers fired. */
static int w6_child(const char *name, size_t n)
{
    const struct backend_ops *ops = find_backend(name);
    if (!ops)
        return 1;
    struct w6_input in;
    w6_make(&in, n);
    size_t fired = 0;
    double ns = w6_once(ops, &in, &fired);
    printf("%.9g %zu\n", ns, fired);
    w6_free(&in);
    return 0;
}

struct w6_ctx {
    size_t n;
    size_t fired[NBACKENDS]; /* by the back end's place in medians_in_turn */
};

/* One W6 run in a process of its own, as W1's (w1_in_child says why). */
static double w6_rep(const struct backend_ops *ops, int i, void *ctx)
{
    struct w6_ctx *c = ctx;
    char args[256];
    snprintf(args, sizeof args, "--w6-child %s %zu %d", ops->name, c->n, bench_huge_pages);
    double v[2];
    child_figures(args, v, 2);
    c->fired[i] = (size_t)v[1];
    return v[0];
}

static void run_w6(void)
{
    /* the parent needs only the sizes: each child makes the input */
    struct w6_input in = { .n = cfg.quick ? 100000 : 1000000 };
    in.m = 20 * in.n;
    in.per_ms = in.n / 2000;
    int reps = cfg.quick ? 1 : cfg.reps;
    printf("\nW6 idle timeouts (added with the push in place; not one of the issue's five): "
           "%zu connections, 10 s idle timers, %zu touches (each pushes one to now + 10 s) "
           "over %zu s simulated, advanced 1 ms at a time; ns per touch, advances included "
           "(thread CPU, median of %d)\n",
           in.n, in.m, in.m / in.per_ms / 1000, reps);
    const struct backend_ops *be[NBACKENDS];
    int nb = sim_clock_backends(be);
    struct w6_ctx c = { in.n, { 0 } };
    struct result r[NBACKENDS];
    medians_in_turn(be, nb, reps, "W6", w6_rep, &c, r);
    for (int i = 0; i < nb; i++) {
        printf("    %-11s fired %zu (%.2f%% of the touches)%s\n", be[i]->name, c.fired[i],
               100.0 * (double)c.fired[i] / (double)in.m,
               be[i]->push ? "" : "; no push: cancel + add");
        csv_row("W6", be[i]->name, in.n, "fired", (double)c.fired[i], 0);
    }
    print_ratios("W6", "ns_per_touch", in.n, r, nb, "ns/touch", 1);
}

/* ---- plots ------------------------------------------------------------ */

/* One line naming the host, so that every full run's output says what kind
 * of machine made it: the figures move with the host (a page fault cost
 * 1.5 us on one AMD EPYC guest and 12 us on another), and earlier runs
 * that did not write the CPU down could only be matched by such costs. */
static void print_host(void)
{
    char model[128] = "", family[16] = "", mnum[16] = "", line[512];
    int guest = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!model[0] && !strncmp(line, "model name", 10))
            snprintf(model, sizeof model, "%s", v);
        else if (!family[0] && !strncmp(line, "cpu family", 10))
            snprintf(family, sizeof family, "%s", v);
        else if (!mnum[0] && !strncmp(line, "model\t", 6))
            snprintf(mnum, sizeof mnum, "%s", v);
        else if (!strncmp(line, "flags", 5) && strstr(v, " hypervisor"))
            guest = 1;
        if (!strncmp(line, "flags", 5))
            break; /* the first CPU's lines are enough */
    }
    if (f)
        fclose(f);
    struct utsname u;
    if (uname(&u) != 0) {
        snprintf(u.sysname, sizeof u.sysname, "kernel unknown");
        u.release[0] = 0;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("host: %s", model[0] ? model : "CPU unknown");
    if (family[0])
        printf(" (family %s, model %s)", family, mnum[0] ? mnum : "?");
    printf(", %ld CPUs online, %s %s\n", cpus, u.sysname, u.release);
    if (guest)
        printf("  a virtual machine (the CPU's hypervisor flag): the host's other guests share its caches and DRAM\n");
    /* The same in the CSV, so that a run's figures carry their host: the
     * CPU's model name and the kernel as the rows' labels (the backend
     * column; commas and quotes made spaces, as csv_row does not quote),
     * the numbers as values; a figure not found is left out. */
    char label[sizeof model + sizeof u.sysname + sizeof u.release + 8];
    snprintf(label, sizeof label, "%s; %s %s", model[0] ? model : "CPU unknown", u.sysname,
             u.release);
    for (char *c = label; *c; c++)
        if (*c == ',' || *c == '"')
            *c = ' ';
    char *end;
    long fam = strtol(family, &end, 10);
    if (family[0] && !*end)
        csv_row("host", label, 0, "cpu_family", (double)fam, 0);
    long mod = strtol(mnum, &end, 10);
    if (mnum[0] && !*end)
        csv_row("host", label, 0, "cpu_model", (double)mod, 0);
    csv_row("host", label, 0, "cpus_online", (double)cpus, 0);
    csv_row("host", label, 0, "virtual_machine", guest, 0);
}

/* Plots what this run measured (a file left by an earlier run is not
 * plotted): the W1 sweep and W2's cold lateness. */
static void make_plots(void)
{
    if (!cfg.plot_w1 && !cfg.plot_w2)
        return;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("\n(gnuplot not installed: no plots; data in %s-w*.dat)\n", cfg.out);
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s.gp", cfg.out);
    FILE *g = fopen(path, "w");
    if (!g)
        return;
    fprintf(g, "set terminal pngcairo size 900,560 noenhanced\n");
    if (cfg.plot_w1)
        fprintf(g,
                "set output '%s-w1.png'\n"
                "set title 'W1 churn: ns per (cancel + add) vs pending timers'\n"
                "set logscale xy\nset format x '10^%%L'\nset xlabel 'pending timers N'\n"
                "set ylabel 'ns per pair (thread CPU)'\n"
                "set key top left\nset grid\n"
                "plot for [i=2:*] '%s-w1.dat' using 1:i with linespoints lw 2 title columnhead(i)\n",
                cfg.out, cfg.out);
    if (cfg.plot_w2)
        fprintf(g,
                "set output '%s-w2.png'\n"
                "unset logscale\nset logscale y\nset grid\n"
                "set title 'W2 expire-all, cold: firing lateness (ms; p50 and p99 the median run, max the worst)'\n"
                "set style data histograms\nset style fill solid 0.8\nset boxwidth 0.9\n"
                "set xlabel ''\nset xtics nomirror rotate by -20 left offset -1.5,0\nset bmargin 5\n"
                "set ylabel 'lateness ms (log)'\nset key top left\n"
                /* skip the header row (an empty cluster otherwise); '' does
                 * not carry the skip over, so each column says it */
                "plot '%s-w2.dat' skip 1 using 2:xtic(1) title 'p50' noenhanced, "
                "'' skip 1 using 3 title 'p99', '' skip 1 using 4 title 'max'\n",
                cfg.out, cfg.out);
    fclose(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null", path);
    if (system(cmd) != 0)
        return;
    printf("\nplots:");
    if (cfg.plot_w1)
        printf(" %s-w1.png", cfg.out);
    if (cfg.plot_w2)
        printf(" %s-w2.png", cfg.out);
    printf("\n");
}

/* W2 on a simulated clock with the thread away from the timers for a
 * while after each advance: pause_ns of wall time spent spinning on the
 * clock, so that neither a sleep's own CPU nor the scheduler's enters,
 * or, when slept, in nanosleep, as W2 in real time spends it (its
 * advances' CPU then also pays for whatever the sleep and the wake-up
 * evict). The walk is the same as w2_sim_loop's; what the
 * pause adds to the advances' CPU is what their next walk pays for the
 * caches and the TLB having served something else meanwhile: on a shared
 * VM, other tenants, who fill the L3 whether this thread sleeps or spins.
 * It is the part of W2 in real time (whose advances are ~1 ms apart) that
 * the simulated clock leaves out (README, "Why the misses stand").
 * Prints the advances' thread CPU and the adds', each in s per million,
 * and the timers fired. */
static int w2pause_child(const char *name, size_t n, uint64_t pause_ns, int slept)
{
    const struct backend_ops *ops;
    struct backend be;
    uint64_t *delays, base;
    if (w2sim_open(name, n, &ops, &be, &delays, &base))
        return 1;
    double a0 = bench_thread_cpu();
    for (size_t k = 0; k < n; k++)
        ops->add(&be, delays[k], &g_dummy, &handle_sink);
    double adds = bench_thread_cpu() - a0, advances = 0;
    for (uint64_t t = base + MS; g_fired < n && t < base + w2_span() + SEC; t += MS) {
        double w0 = bench_thread_cpu();
        ops->advance(&be, t);
        advances += bench_thread_cpu() - w0;
        if (slept) {
            struct timespec ts = { (time_t)(pause_ns / SEC), (long)(pause_ns % SEC) };
            while (nanosleep(&ts, &ts) && errno == EINTR)
                ;
        }
        else {
            for (uint64_t until = bench_now_ns() + pause_ns; bench_now_ns() < until;)
                ;
        }
    }
    printf("%.9g %.9g %zu\n", advances * 1e6 / (double)n, adds * 1e6 / (double)n,
           (size_t)g_fired);
    ops->close(&be);
    free(delays);
    return 0;
}

/* --w2sim-pause: W2 on a simulated clock once for each pause given, every
 * pause and back end in turn, each run in a process of its own. */
static void run_w2_pause(void)
{
    size_t n = cfg.quick ? 100000 : 1000000;
    int reps = cfg.quick ? 1 : cfg.reps, np = cfg.npauses;
    const struct backend_ops *be[NBACKENDS];
    int nb = sim_clock_backends(be);
    static double adv[4][NBACKENDS][9], add[NBACKENDS][4 * 9];
    int short_of_n[NBACKENDS] = { 0 };
    for (int k = 0; k < reps; k++)
        for (int p = 0; p < np; p++)
            for (int i = 0; i < nb; i++) {
                progress("W2 paused %ld us%s %s rep %d...\r", cfg.pause_us[p],
                         cfg.pause_slept[p] ? " slept" : "", be[i]->name, k + 1);
                char args[256];
                snprintf(args, sizeof args, "--w2pause-child %s %zu %d %d %ld %d", be[i]->name, n,
                         cfg.quick, bench_huge_pages, cfg.pause_us[p], cfg.pause_slept[p]);
                double v[3];
                child_figures(args, v, 3);
                adv[p][i][k] = v[0];
                add[i][k * np + p] = v[1];
                if ((size_t)v[2] != n)
                    short_of_n[i] = 1;
            }
    progress("%60s\r", "");
    printf("\nW2 on a simulated clock with a pause after each advance (--w2sim-pause): the same\n"
           "  %zu timers, advanced 1 ms at a time, the thread spinning on the clock (or,\n"
           "  where marked s, sleeping) for the pause after each; the advances' thread CPU in\n"
           "  s per million fired, the adds' apart (every pause and back end in turn; each\n"
           "  figure the median of %d)\n",
           n, reps);
    printf("    %-11s", "pause (us)");
    for (int p = 0; p < np; p++)
        printf(" %8ld%c", cfg.pause_us[p], cfg.pause_slept[p] ? 's' : ' ');
    printf("   adds   ");
    if (np > 1)
        printf(" advances over the first pause's");
    printf("\n");
    for (int i = 0; i < nb; i++) {
        double first = median(adv[0][i], reps);
        printf("    %-11s", be[i]->name);
        for (int p = 0; p < np; p++) {
            double m = median(adv[p][i], reps);
            printf(" %9.3f", m);
            char metric[64];
            snprintf(metric, sizeof metric, "advance_cpu_s_per_million_pause_%ldus%s",
                     cfg.pause_us[p], cfg.pause_slept[p] ? "_slept" : "");
            csv_row("W2pause", be[i]->name, n, metric, m, 0);
        }
        double a = median(add[i], reps * np);
        printf(" %7.3f  ", a);
        csv_row("W2pause", be[i]->name, n, "add_cpu_s_per_million", a, 0);
        for (int p = 1; p < np; p++)
            printf(" %5.2fx", median(adv[p][i], reps) / first);
        printf("%s\n", short_of_n[i] ? "  DID NOT FINISH" : "");
    }
}

/* ---- main ------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: twheel-bench [--quick] [--only w1,w1r,floor,w2,w2sim,w3,w4,w5,w6]\n"
            "                    [--backends a,b]\n"
            "                    [--reps N (1..9, default 3)] [--out PREFIX] [--callgrind N]\n"
            "                    [--callgrind-w2 N] [--callgrind-w1b N]\n"
            "                    [--n N]  (W1 at this N only) [--w2-emptied]\n"
            "                    [--huge-pages]  (manual twheel with tw_options.huge_pages)\n"
            "                    [--w2sim-pause US[,US...]]  (W2sim again, spinning US us\n"
            "                     after each advance, or sleeping for USs; up to 4 pauses,\n"
            "                     0..100000)\n");
    exit(2);
}

/* An option's whole number from lo to hi, or the usage: atol read
 * "--n 1e6" as 1 and ran W1 at N = 1. */
static long whole_arg(const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        usage();
    return (long)v;
}

/* --w2sim-pause's list: 1 to 4 whole numbers of µs, each 0..100000,
 * comma-separated, each spun or, with an s after it, slept. */
static void pauses_arg(const char *list)
{
    char buf[128], *save = NULL;
    size_t len = strlen(list);
    /* strtok_r skips empty fields: "5," and ",5" would pass */
    if (!len || len >= sizeof buf || list[0] == ',' || list[len - 1] == ',' || strstr(list, ",,"))
        usage();
    strcpy(buf, list);
    cfg.npauses = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (cfg.npauses == 4)
            usage();
        size_t tl = strlen(t);
        cfg.pause_slept[cfg.npauses] = tl > 1 && t[tl - 1] == 's';
        if (cfg.pause_slept[cfg.npauses])
            t[tl - 1] = 0;
        cfg.pause_us[cfg.npauses++] = whole_arg(t, 0, 100000);
    }
    if (!cfg.npauses)
        usage();
}

static int is_backend(const char *s, size_t len)
{
    int ok = is_name(s, len, be_twheel_threaded_at.name) || is_name(s, len, "floor");
    for (size_t b = 0; b < NBACKENDS && !ok; b++)
        ok = is_name(s, len, all_backends[b]->name);
    return ok;
}

static int is_workload(const char *s, size_t len)
{
    static const char *const known[] = { "w1", "w1r", "floor", "w2", "w2sim", "w3", "w4", "w5",
                                         "w6" };
    int ok = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0] && !ok; k++)
        ok = is_name(s, len, known[k]);
    return ok;
}

/* Every name in --backends and --only must be one twheel-bench knows: a
 * typo would otherwise leave its rows out without a word. */
static int names_known(const char *list, const char *what, int (*known)(const char *, size_t))
{
    size_t len;
    for (const char *p = list, *s; (s = list_next(&p, &len));) {
        if (!known(s, len)) {
            fprintf(stderr, "twheel-bench: unknown %s '%.*s'\n", what, (int)len, s);
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[len > 0 ? len : 0] = 0;
    if (argc == 5 && !strcmp(argv[1], "--w4-child")) {
        bench_huge_pages = atoi(argv[4]) != 0;
        return w4_child(argv[2], (size_t)atol(argv[3]));
    }
    if (argc == 8 && !strcmp(argv[1], "--w1-child")) {
        bench_huge_pages = atoi(argv[7]) != 0;
        int kind = atoi(argv[5]); /* W1_PLAIN, W1_RECENT or W1_BURST */
        if (kind < W1_PLAIN || kind > W1_BURST)
            return 1;
        return w1_child(argv[2], (size_t)atol(argv[3]), (size_t)atol(argv[4]), kind,
                        atoi(argv[6]) != 0);
    }
    if (argc == 6 && !strcmp(argv[1], "--w2sim-child")) {
        cfg.quick = atoi(argv[4]) != 0; /* W2's span (w2_span) */
        bench_huge_pages = atoi(argv[5]) != 0;
        return w2sim_child(argv[2], (size_t)atol(argv[3]));
    }
    if (argc == 8 && !strcmp(argv[1], "--w2pause-child")) {
        cfg.quick = atoi(argv[4]) != 0; /* W2's span (w2_span) */
        bench_huge_pages = atoi(argv[5]) != 0;
        return w2pause_child(argv[2], (size_t)atol(argv[3]), (uint64_t)atol(argv[6]) * 1000u,
                             atoi(argv[7]) != 0);
    }
    if (argc == 6 && !strcmp(argv[1], "--w3-child")) {
        bench_huge_pages = atoi(argv[5]) != 0;
        return w3_child(argv[2], (size_t)atol(argv[3]), (uint64_t)atoll(argv[4]));
    }
    if (argc == 5 && !strcmp(argv[1], "--w5-child"))
        return w5_child(atoi(argv[2]), (size_t)atol(argv[3]), (uint32_t)atoi(argv[4]));
    if (argc == 5 && !strcmp(argv[1], "--w6-child")) {
        bench_huge_pages = atoi(argv[4]) != 0;
        return w6_child(argv[2], (size_t)atol(argv[3]));
    }
    if (argc == 5 && !strcmp(argv[1], "--floor-child"))
        return floor_child(atoi(argv[2]), (size_t)atol(argv[3]), (size_t)atol(argv[4]));
    if (argc == 7 && !strcmp(argv[1], "--w2-child")) {
        cfg.quick = atoi(argv[5]) != 0;
        bench_huge_pages = atoi(argv[6]) != 0;
        return w2_child(argv[2], (size_t)atol(argv[3]), (int)((unsigned)atoi(argv[4]) % 3u));
    }
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--quick"))
            cfg.quick = 1;
        else if (!strcmp(argv[k], "--only") && k + 1 < argc)
            cfg.only = argv[++k];
        else if (!strcmp(argv[k], "--backends") && k + 1 < argc)
            cfg.backends = argv[++k];
        else if (!strcmp(argv[k], "--out") && k + 1 < argc)
            cfg.out = argv[++k];
        else if (!strcmp(argv[k], "--reps") && k + 1 < argc)
            cfg.reps = (int)whole_arg(argv[++k], 1, 9);
        else if (!strcmp(argv[k], "--n") && k + 1 < argc)
            cfg.w1_n = (size_t)whole_arg(argv[++k], 1, 1000000000L);
        else if (!strcmp(argv[k], "--w2-emptied"))
            cfg.w2_emptied = 1;
        else if (!strcmp(argv[k], "--huge-pages"))
            bench_huge_pages = 1;
        else if (!strcmp(argv[k], "--w2sim-pause") && k + 1 < argc)
            pauses_arg(argv[++k]);
        else if (!strcmp(argv[k], "--callgrind") && k + 1 < argc)
            cfg.callgrind_n = whole_arg(argv[++k], 1, 1000000000L);
        else if (!strcmp(argv[k], "--callgrind-w2") && k + 1 < argc)
            cfg.callgrind_w2_n = whole_arg(argv[++k], 1, 1000000000L);
        else if (!strcmp(argv[k], "--callgrind-w1b") && k + 1 < argc) {
            cfg.callgrind_n = whole_arg(argv[++k], W1B_GROUP + 1, 1000000000L);
            cfg.callgrind_burst = 1;
        }
        else
            usage();
    }
    if ((cfg.backends && !names_known(cfg.backends, "back end", is_backend)) ||
        (cfg.only && !names_known(cfg.only, "workload", is_workload)))
        usage();
    if (cfg.npauses && !selected(cfg.only, "w2") && !selected(cfg.only, "w2sim")) {
        fprintf(stderr, "twheel-bench: --w2sim-pause runs with w2 or w2sim only\n");
        usage();
    }

    if (cfg.callgrind_n > 0) {
        /* Only the W1 loop (--callgrind-w1b: W1b's, w1b_loop), for
         * instruction counting under callgrind (benchmarks/callgrind.sh):
         * N pending, 10^5 pairs. */
        struct w1_input in;
        int kind = cfg.callgrind_burst ? W1_BURST : W1_PLAIN;
        w1_make(&in, (size_t)cfg.callgrind_n, 100000, kind);
        for (size_t b = 0; b < NBACKENDS; b++)
            if (available(all_backends[b]) && selected(cfg.backends, all_backends[b]->name))
                w1_once(all_backends[b], &in, kind, 0);
        if (selected(cfg.backends, "floor")) { /* the bare eager loop, and padded */
            floor_w1_ns(&in, FLOOR_EAGER, NULL);
            floor_w1_ns(&in, FLOOR_EAGER_PAD, NULL);
        }
        w1_free(&in);
        return 0;
    }
    if (cfg.callgrind_w2_n > 0) {
        /* Only W2 on a simulated clock (w2_sim_loop), for counting under
         * callgrind (benchmarks/callgrind.sh): N adds, all fired. */
        size_t n = (size_t)cfg.callgrind_w2_n;
        uint64_t *delays = w2_delays(n);
        int rc = 0;
        for (size_t b = 0; b < NBACKENDS; b++) {
            const struct backend_ops *ops = all_backends[b];
            struct backend be;
            if (!available(ops) || !selected(cfg.backends, ops->name) || !ops->sim_clock ||
                open_backend(&be, ops, n + 16))
                continue;
            g_fired = 0;
            w2_sim_loop(ops, &be, delays, n, bench_now_ns(), 0);
            if (g_fired != n) {
                fprintf(stderr, "twheel-bench: %s fired %zu of %zu\n", ops->name, (size_t)g_fired, n);
                rc = 1;
            }
            ops->close(&be);
        }
        free(delays);
        return rc;
    }

    char path[512];
    snprintf(path, sizeof path, "%s.csv", cfg.out);
    cfg.csv = fopen(path, "w");
    if (cfg.csv)
        fprintf(cfg.csv, "workload,backend,n,metric,value,ratio_to_heap\n");

    printf("twheel-bench%s: back ends:", cfg.quick ? " --quick" : "");
    for (size_t b = 0; b < NBACKENDS; b++)
        if (selected(cfg.backends, all_backends[b]->name))
            printf(" %s%s", all_backends[b]->name, available(all_backends[b]) ? "" : " (SKIPPED: not built)");
    if (at_selected())
        printf(" %s", be_twheel_threaded_at.name);
    printf("\n");
    for (size_t b = 0; b < NBACKENDS; b++)
        if (available(all_backends[b]) && selected(cfg.backends, all_backends[b]->name))
            printf("  %-11s %s\n", all_backends[b]->name, all_backends[b]->about);
    if (at_selected())
        printf("  %-11s %s\n", be_twheel_threaded_at.name, be_twheel_threaded_at.about);
    printf("ratios are to the heap in this run; tick 1 ms for the wheels\n");
    print_host();
    if (bench_huge_pages)
        printf("manual twheel asks for huge pages (--huge-pages: tw_options.huge_pages = 1)\n");

    if (selected(cfg.only, "w1") || selected(cfg.only, "w1r"))
        run_w1();
    if (selected(cfg.only, "floor") && selected(cfg.backends, "heap"))
        run_floor();
    if (selected(cfg.only, "w2"))
        run_w2();
    if (selected(cfg.only, "w2") || selected(cfg.only, "w2sim")) /* w2sim: this alone */
        run_w2_sim();
    if (cfg.npauses) /* with w2 or w2sim among --only, checked above */
        run_w2_pause();
    if (selected(cfg.only, "w3"))
        run_w3();
    if (selected(cfg.only, "w4"))
        run_w4();
    if (selected(cfg.only, "w5"))
        run_w5();
    if (selected(cfg.only, "w6"))
        run_w6();
    if (cfg.csv)
        fclose(cfg.csv);
    printf("\ncsv: %s.csv\n", cfg.out);
    make_plots();
    return 0;
}
