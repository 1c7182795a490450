/* bench.h: the back-end table of twheel-bench.
 *
 * Every back end runs the same workloads through these function pointers
 * (as wahern/timeout's bench does), in the same process run, with the same
 * seeded delays. A handle is whatever the back end needs to cancel a timer
 * (an id, an index, a pointer), carried in a uint64_t. */
#ifndef TW_BENCH_H
#define TW_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Called by every back end when a timer fires. */
void bench_fired(void *arg);

struct backend;

struct backend_ops {
    const char *name;
    const char *about;
    int realtime_only; /* 1: drives itself in real time (threaded, loops) */
    int clock_per_add; /* 1: delays count from a clock read at each add;
                          0: from the back end's own time (open time) */
    /* cap: the most timers pending at once. now: the start time (ns). */
    int (*open)(struct backend *b, size_t cap, uint64_t now);
    void (*close)(struct backend *b);
    /* Schedule arg to fire delay_ns after the back end's notion of now;
     * the handle for cancel goes to *handle. */
    void (*add)(struct backend *b, uint64_t delay_ns, void *arg, uint64_t *handle);
    void (*cancel)(struct backend *b, uint64_t handle);
    /* Manual drive: fire what is due at now; the next time work is due
     * (UINT64_MAX if none). Loops (libevent, libuv) run one iteration of
     * their own loop instead and ignore now. */
    size_t (*advance)(struct backend *b, uint64_t now);
    uint64_t (*next)(struct backend *b);
    /* Bytes the back end itself says it holds (0 if it cannot tell). */
    uint64_t (*own_bytes)(struct backend *b);
    /* Engine wake-ups counted by the back end (0 if it cannot tell). */
    uint64_t (*wakeups)(struct backend *b);
    /* 1: advance honours any now, even one ahead of the real clock, so
     * W2 can also run on a simulated clock (the loops ignore now). */
    int sim_clock;
    /* 1: a model of schedule and cancel alone (no advance, no next):
     * runs W1, W1r and W4 only. */
    int no_advance;
    /* Drops every pending timer unfired and keeps the back end (twheel:
     * tw_drain with no callback); NULL where the back end has no such
     * call. W4 times it. */
    void (*drop)(struct backend *b);
    /* Moves a pending timer to delay_ns after the back end's notion of
     * now, keeping its handle (twheel: tw_reschedule; the heaps: the key
     * changed in place and sifted). NULL where the back end has no such
     * call: W6 then cancels and adds. */
    void (*push)(struct backend *b, uint64_t handle, uint64_t delay_ns);
};

struct backend {
    const struct backend_ops *ops;
    void *impl;
    uint64_t tick_ns;
};

extern const struct backend_ops be_twheel, be_twheel_threaded, be_heap,
    be_heap_inline, be_hashed, be_intrusive, be_libevent, be_libuv;
/* W2 only (its add takes the argument as the absolute deadline): run
 * after twheel-thr, not listed in the back-end table. */
extern const struct backend_ops be_twheel_threaded_at;
/* --huge-pages: manual twheel opened with tw_options.huge_pages = 1 */
extern int bench_huge_pages;

uint64_t bench_now_ns(void);
double bench_thread_cpu(void); /* this thread's CPU time, s */

/* W1's input: the same delays and victims for every back end. */
struct w1_input {
    size_t n, m;
    uint64_t *prefill;  /* n delays */
    uint64_t *delays;   /* m delays */
    uint32_t *victims;  /* m indices in [0, n) (W1b: distinct within each
                           burst of W1B_GROUP), or k in [1, 1000] (W1r) */
};

/* W1's three forms (w1_input, w1_once) */
enum { W1_PLAIN, W1_RECENT /* W1r */, W1_BURST /* W1b */ };
#define W1B_GROUP 16 /* W1b: cancels in a burst, then as many adds */

/* floor.c: W1 with no timer library (bare lists written inline), ns per
 * pair, on one model of cancel. *slots_per_timer: the slots the model came
 * to hold per pending timer. */
enum floor_model {
    FLOOR_EAGER,       /* cancel unlinks at once (twheel until 2026-11-24) */
    FLOOR_EAGER_CLOCK, /* the same, with one bench_now_ns() per add */
    FLOOR_EAGER_LOCKED, /* the same, and a lock around each add and cancel */
    FLOOR_EAGER_PAD,   /* the same, with FLOOR_PAD_NOPS no-ops per pair */
    FLOOR_LAZY,        /* cancel marks the entry dead; a rebuild reclaims
                          when the dead reach the live */
    FLOOR_SPLIT,       /* lazy, with the generations in their own array:
                          cancel touches 4 bytes of it, not the entry */
    FLOOR_SPLIT_8,     /* the same, rebuilt at an eighth of the live */
    FLOOR_DEFER,       /* the unlink deferred by 16 cancels, the neighbours
                          prefetched meanwhile (what twheel does) */
};
#define FLOOR_PAD_NOPS 50 /* about twheel's instructions per W1 pair beyond
                             the bare loop's (benchmarks/callgrind.sh) */
double floor_w1_ns(const struct w1_input *in, enum floor_model model,
                   double *slots_per_timer);
/* The same on array buckets (cancel moves the bucket's last element into
 * the hole); *array_bytes_per_timer: the arrays' capacity, bytes per
 * pending timer. */
double floor_w1_array_ns(const struct w1_input *in, double *array_bytes_per_timer);
/* One dependent load from a random line of a `bytes`-sized array, ns. */
double floor_dram_ns(size_t bytes, size_t steps);
/* One bench_now_ns() on its own, back to back, ns. */
double floor_clock_ns(size_t steps);

#endif
