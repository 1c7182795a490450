/* floor.c: what W1 costs on this machine with no timer library at all.
 *
 * The W1 target at 10^6 pending timers is a ratio to the heap
 * (5x), and the heap's cost there is mostly DRAM latency, which differs
 * from machine to machine. These measurements say where the floor is on
 * the machine at hand, in the same process run as the heap:
 *
 * - one dependent load from a random line of a 256 MB array (what a cache
 *   miss costs when nothing overlaps it), and one clock read on its own;
 * - the W1 loop itself (same delays, same victims, same handle array) on
 *   bare timer lists written inline in the loop: 36-byte entries like
 *   twheel's, a bucket per delay (four levels of 64, eight lists a bucket,
 *   as twheel has), the id's generation compared, and nothing else: no
 *   call, no argument check, no exact rounding, no level limits, no
 *   counters, no delay queue. Cancel unlinks at once (what twheel did
 *   until 2026-11-24);
 * - the same with the unlink deferred (what twheel does now): cancel
 *   unlinks the task cancelled 16 cancels before, whose own line is in
 *   the cache by then (until 2026-11-30 it also prefetched the
 *   neighbours, as twheel's did);
 * - the same with one clock read per add, as the W1+clock loop makes it
 *   (the peers' figures in the issue include one);
 * - the same again with a lock taken and released around each add and
 *   each cancel, as the threaded API's shard lock is (src/lock.h: a
 *   compare-and-swap to take it, an exchange to release it, never
 *   contended here): what any design pays at 10^6 for being callable from
 *   any thread with a lock per operation, before its own work. A locked
 *   instruction is a full barrier on x86: the stores before it must drain
 *   and no later load may pass it, so fewer of the pairs' cache misses
 *   overlap;
 * - the same with FLOOR_PAD_NOPS no-op instructions per pair, which do no work
 *   but take their place in the CPU's out-of-order window: at 10^6 a
 *   pair waits on DRAM misses, and how many pairs' misses overlap depends
 *   on how many instructions a pair takes. The pad is about what twheel's
 *   pair takes beyond this loop's (benchmarks/callgrind.sh counts both),
 *   so this row is twheel's instruction count on the floor's memory work;
 * - the same with lazy cancel: cancel only marks the entry dead, and when
 *   dead entries reach the live ones, every list is rebuilt in one pass in
 *   slot order, which frees them. This skips the two neighbour writes that
 *   cancel otherwise makes, at the price of up to twice the slots;
 * - the same on array buckets (the other suggestion): a bucket is
 *   a growable array of slot numbers, the entry keeps its bucket and its
 *   position, and cancel moves the bucket's last element into the hole
 *   (one write into the array in place of two into neighbours). The arrays
 *   cost 4 bytes a timer plus their growth slack;
 * - lazy cancel with the generations moved out of the entries into an
 *   array of their own (4 bytes a slot), so that cancel reads and writes
 *   only that array and never the entry: the one design here whose
 *   cancel need not load a line of the entry array (the model keeps the
 *   36-byte entry, its generation word unused; the design itself would
 *   need 32 bytes). Measured twice, with the rebuild run when the dead
 *   reach the live (up to 2 slots per timer, as the lazy lists above) and
 *   when they reach an eighth of the live (1.125 slots, about what the W4
 *   target of 40 bytes allows).
 *
 * A library call cannot be cheaper than the same work written inline, so
 * these bound from below what a list- or array-based design can reach
 * here. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define FL_LISTS 2048u /* 4 levels x 64 buckets x 8 lists */
#define FL_STR2(x) #x
#define FL_STR(x) FL_STR2(x)
#define FL_NIL 0xFFFFFFFFu
#define FL_DEFER 16u /* twheel's TW__DEFER */

/* Every helper below takes `split` (and the loop `lazy`, `read_clock`,
 * `pad`) as a constant at each call and is forced inline, so each timed
 * loop is compiled for one model alone, with no test per iteration. */
#define FL_INLINE static inline __attribute__((always_inline))

struct __attribute__((packed, aligned(4))) fl_entry {
    uint32_t next, prev;
    uint32_t gen; /* gen & 3: 0 free, 1 live, 2 dead (lazy); unused when
                     the generations are apart (split) */
    void *fn, *arg;
    uint64_t deadline;
};

struct fl {
    struct fl_entry *e; /* [0, FL_LISTS) are list heads */
    uint32_t *gens;     /* split: the generations, apart from the entries */
    uint32_t used, cap, free_head, live, dead;
    uint32_t shift;     /* lazy: rebuild when dead >= live >> shift */
    uint32_t ring[FL_DEFER], rpos; /* defer: cancelled, still linked */
};

/* The bucket of a deadline (1 ms ticks, relative to time 0): four levels
 * of 64 buckets, as twheel places it. */
static inline uint32_t fl_bucket(uint64_t deadline)
{
    uint64_t dt = (deadline + 999999) / 1000000;
    uint32_t lvl = (uint32_t)(63 - __builtin_clzll(dt | 1)) / 6;
    if (lvl > 3)
        lvl = 3;
    return lvl * 64 + ((uint32_t)(dt >> (6 * lvl)) & 63);
}

/* Its list: list i % 8 of the bucket. */
static inline uint32_t fl_list(uint64_t deadline, uint32_t i)
{
    return (fl_bucket(deadline) << 3) | (i & 7);
}

/* Slot i's generation: in its entry, or in the array apart. */
FL_INLINE uint32_t *fl_gen(struct fl *f, uint32_t i, int split)
{
    return split ? &f->gens[i] : &f->e[i].gen;
}

static inline void fl_append(struct fl *f, uint32_t h, uint32_t i)
{
    struct fl_entry *e = f->e;
    uint32_t tail = e[h].prev;
    e[i].next = h;
    e[i].prev = tail;
    e[tail].next = i;
    e[h].prev = i;
}

FL_INLINE uint64_t fl_add(struct fl *f, uint64_t delay, void *arg, int split)
{
    uint32_t i = f->free_head;
    if (i != FL_NIL)
        f->free_head = f->e[i].next;
    else if (f->used < f->cap)
        i = f->used++;
    else
        abort(); /* sized by the caller: cannot happen */
    uint32_t *g = fl_gen(f, i, split);
    uint32_t gen = *g = (*g & ~3u) + 1;
    struct fl_entry *en = &f->e[i];
    en->deadline = delay;
    en->fn = (void *)fl_bucket;
    en->arg = arg;
    fl_append(f, fl_list(delay, i), i);
    f->live++;
    return (uint64_t)gen << 32 | i;
}

FL_INLINE void fl_cancel_eager(struct fl *f, uint64_t id)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    struct fl_entry *e = f->e;
    if (i >= f->used || e[i].gen != gen)
        return;
    uint32_t n = e[i].next, p = e[i].prev;
    e[p].next = n;
    e[n].prev = p;
    e[i].gen = gen + 3; /* free: the next multiple of 4 */
    e[i].next = f->free_head;
    f->free_head = i;
    f->live--;
}

/* Deferred unlink (twheel's since 2026-11-24; src/wheel.c): cancel marks
 * the entry free (its id refused from now) and queues it; the unlink is
 * done FL_DEFER cancels later, reading the links as they are then, from
 * a line that has come in meanwhile. No prefetch of the neighbours, as
 * twheel's cancel has none since 2026-11-30 (history.md, "The cancel
 * prefetches nothing"). */
FL_INLINE void fl_cancel_defer(struct fl *f, uint64_t id)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    struct fl_entry *e = f->e;
    if (i >= f->used || e[i].gen != gen)
        return;
    e[i].gen = gen + 3;
    uint32_t old = f->ring[f->rpos];
    f->ring[f->rpos] = i;
    f->rpos = (f->rpos + 1) & (FL_DEFER - 1);
    f->live--;
    if (old == FL_NIL)
        return;
    uint32_t n = e[old].next, p = e[old].prev;
    e[p].next = n;
    e[n].prev = p;
    e[old].next = f->free_head;
    f->free_head = old;
}

/* Lazy cancel's reclaim: every list rebuilt in slot order, the dead freed
 * (the free list comes out in slot order too). */
FL_INLINE void fl_rebuild(struct fl *f, int split)
{
    struct fl_entry *e = f->e;
    for (uint32_t h = 0; h < FL_LISTS; h++)
        e[h].next = e[h].prev = h;
    f->free_head = FL_NIL;
    for (uint32_t i = f->used; i-- > FL_LISTS;) {
        uint32_t *g = fl_gen(f, i, split);
        if ((*g & 3) == 1) {
            fl_append(f, fl_list(e[i].deadline, i), i);
            continue;
        }
        if ((*g & 3) == 2)
            *g += 2;
        e[i].next = f->free_head;
        f->free_head = i;
    }
    f->dead = 0;
}

/* With split, this touches the generation array and never the entry. */
FL_INLINE void fl_cancel_lazy(struct fl *f, uint64_t id, int split)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    if (i >= f->used || *fl_gen(f, i, split) != gen)
        return;
    *fl_gen(f, i, split) = gen + 1; /* dead, still listed */
    f->live--;
    if (++f->dead >= f->live >> f->shift)
        fl_rebuild(f, split);
}

static volatile uint64_t clock_sink;
static uint64_t fl_dummy;
static _Atomic uint32_t fl_lockword;

/* Taken and released as tw__lock and tw__unlock do it, uncontended. */
FL_INLINE void fl_lock(void)
{
    uint32_t free_ = 0;
    while (!atomic_compare_exchange_strong_explicit(&fl_lockword, &free_, 1,
                                                    memory_order_acquire,
                                                    memory_order_relaxed))
        free_ = 0;
}

FL_INLINE void fl_unlock(void)
{
    if (atomic_exchange_explicit(&fl_lockword, 0, memory_order_release) != 1)
        abort(); /* one thread: it cannot have had a waiter */
}

/* The timed W1 loop on one model (every flag a constant at its call). */
FL_INLINE void fl_w1(struct fl *f, const struct w1_input *in, uint64_t *handles,
                     int lazy, int split, int read_clock, int pad, int lock, int defer)
{
    for (size_t k = 0; k < in->m; k++) {
        uint32_t v = in->victims[k];
        if (lock)
            fl_lock();
        if (defer)
            fl_cancel_defer(f, handles[v]);
        else if (lazy)
            fl_cancel_lazy(f, handles[v], split);
        else
            fl_cancel_eager(f, handles[v]);
        if (lock)
            fl_unlock();
        if (read_clock) /* as the W1+clock loop reads it */
            clock_sink = bench_now_ns();
        if (pad)
            __asm__ volatile(".rept " FL_STR(FLOOR_PAD_NOPS) "\n\tnop\n\t.endr");
        if (lock)
            fl_lock();
        handles[v] = fl_add(f, in->delays[k], &fl_dummy, split);
        if (lock)
            fl_unlock();
    }
}

/* The two eager loops out of line, so that benchmarks/callgrind.sh can
 * count their instructions alone (one call per run, not per pair). */
void floor_loop_eager(struct fl *f, const struct w1_input *in, uint64_t *handles);
void floor_loop_eager_pad(struct fl *f, const struct w1_input *in, uint64_t *handles);

__attribute__((noinline)) void floor_loop_eager(struct fl *f, const struct w1_input *in,
                                                uint64_t *handles)
{
    fl_w1(f, in, handles, 0, 0, 0, 0, 0, 0);
}

__attribute__((noinline)) void floor_loop_eager_pad(struct fl *f, const struct w1_input *in,
                                                    uint64_t *handles)
{
    fl_w1(f, in, handles, 0, 0, 0, 1, 0, 0);
}

double floor_w1_ns(const struct w1_input *in, enum floor_model model,
                   double *slots_per_timer)
{
    int lazy = model == FLOOR_LAZY || model == FLOOR_SPLIT || model == FLOOR_SPLIT_8;
    int split = model == FLOOR_SPLIT || model == FLOOR_SPLIT_8;
    struct fl f = { 0 };
    f.shift = model == FLOOR_SPLIT_8 ? 3 : 0;
    f.cap = FL_LISTS + (uint32_t)(in->n + (lazy ? (in->n >> f.shift) + 2 : 0)) +
            (model == FLOOR_DEFER ? FL_DEFER : 0);
    for (uint32_t r = 0; r < FL_DEFER; r++)
        f.ring[r] = FL_NIL;
    f.used = FL_LISTS;
    f.free_head = FL_NIL;
    f.e = calloc(f.cap, sizeof *f.e);
    f.gens = split ? calloc(f.cap, sizeof *f.gens) : NULL;
    uint64_t *handles = malloc(in->n * sizeof(uint64_t));
    if (!f.e || (split && !f.gens) || !handles)
        abort();
    for (uint32_t h = 0; h < FL_LISTS; h++)
        f.e[h].next = f.e[h].prev = h;
    for (size_t k = 0; k < in->n; k++)
        handles[k] = fl_add(&f, in->prefill[k], &fl_dummy, split);
    double t0 = bench_thread_cpu();
    switch (model) {
    case FLOOR_EAGER:
        floor_loop_eager(&f, in, handles);
        break;
    case FLOOR_EAGER_PAD:
        floor_loop_eager_pad(&f, in, handles);
        break;
    case FLOOR_EAGER_CLOCK:
        fl_w1(&f, in, handles, 0, 0, 1, 0, 0, 0);
        break;
    case FLOOR_EAGER_LOCKED:
        fl_w1(&f, in, handles, 0, 0, 1, 0, 1, 0);
        break;
    case FLOOR_LAZY:
        fl_w1(&f, in, handles, 1, 0, 0, 0, 0, 0);
        break;
    case FLOOR_DEFER:
        fl_w1(&f, in, handles, 0, 0, 0, 0, 0, 1);
        break;
    case FLOOR_SPLIT:
    case FLOOR_SPLIT_8:
        fl_w1(&f, in, handles, 1, 1, 0, 0, 0, 0);
        break;
    }
    double t1 = bench_thread_cpu();
    if (f.live != in->n)
        abort(); /* every cancel found its timer */
    if (slots_per_timer)
        *slots_per_timer = (double)(f.used - FL_LISTS) / (double)in->n;
    free(handles);
    free(f.gens);
    free(f.e);
    return (t1 - t0) * 1e9 / (double)in->m;
}

/* ---- array buckets ---------------------------------------------------- */

#define FA_BUCKETS 256u /* 4 levels x 64 */

struct __attribute__((packed, aligned(4))) fa_entry {
    uint32_t gen, pos, bucket; /* pos: in its bucket, or the free list's next */
    void *fn, *arg;
    uint64_t deadline;
};

struct fa_vec {
    uint32_t *slot;
    uint32_t n, cap;
};

struct fa {
    struct fa_entry *e;
    struct fa_vec b[FA_BUCKETS];
    uint32_t used, cap, free_head, live;
};

static __attribute__((noinline)) void fa_grow(struct fa_vec *v)
{
    v->cap = v->cap ? 2 * v->cap : 16;
    if (!(v->slot = realloc(v->slot, v->cap * sizeof *v->slot)))
        abort();
}

static inline uint64_t fa_add(struct fa *f, uint64_t delay, void *arg)
{
    uint32_t i = f->free_head;
    if (i != FL_NIL)
        f->free_head = f->e[i].pos;
    else if (f->used < f->cap)
        i = f->used++;
    else
        abort(); /* sized by the caller: cannot happen */
    struct fa_entry *en = &f->e[i];
    uint32_t gen = en->gen = (en->gen & ~3u) + 1;
    en->deadline = delay;
    en->fn = (void *)fa_add;
    en->arg = arg;
    uint32_t b = fl_bucket(delay);
    struct fa_vec *v = &f->b[b];
    if (v->n == v->cap)
        fa_grow(v);
    v->slot[v->n] = i;
    en->pos = v->n++;
    en->bucket = b;
    f->live++;
    return (uint64_t)gen << 32 | i;
}

static inline void fa_cancel(struct fa *f, uint64_t id)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    struct fa_entry *e = f->e;
    if (i >= f->used || e[i].gen != gen)
        return;
    struct fa_vec *v = &f->b[e[i].bucket];
    uint32_t pos = e[i].pos, last = v->slot[--v->n];
    v->slot[pos] = last; /* the bucket's last element fills the hole */
    e[last].pos = pos;
    e[i].gen = gen + 3;
    e[i].pos = f->free_head;
    f->free_head = i;
    f->live--;
}

double floor_w1_array_ns(const struct w1_input *in, double *array_bytes_per_timer)
{
    struct fa f = { 0 };
    f.cap = (uint32_t)in->n;
    f.free_head = FL_NIL;
    f.e = calloc(f.cap, sizeof *f.e);
    uint64_t *handles = malloc(in->n * sizeof(uint64_t));
    if (!f.e || !handles)
        abort();
    for (size_t k = 0; k < in->n; k++)
        handles[k] = fa_add(&f, in->prefill[k], &fl_dummy);
    double t0 = bench_thread_cpu();
    for (size_t k = 0; k < in->m; k++) {
        uint32_t v = in->victims[k];
        fa_cancel(&f, handles[v]);
        handles[v] = fa_add(&f, in->delays[k], &fl_dummy);
    }
    double t1 = bench_thread_cpu();
    if (f.live != in->n)
        abort(); /* every cancel found its timer */
    size_t cap = 0;
    for (uint32_t b = 0; b < FA_BUCKETS; b++) {
        cap += f.b[b].cap;
        free(f.b[b].slot);
    }
    if (array_bytes_per_timer)
        *array_bytes_per_timer = (double)(cap * sizeof(uint32_t)) / (double)in->n;
    free(handles);
    free(f.e);
    return (t1 - t0) * 1e9 / (double)in->m;
}

double floor_dram_ns(size_t bytes, size_t steps)
{
    /* one 64-byte line per element, chained in a random order into one
     * cycle, so every load depends on the one before */
    size_t n = bytes / 64;
    uint32_t *next = malloc(n * 64);
    uint32_t *perm = malloc(n * sizeof(uint32_t));
    if (!next || !perm)
        abort();
    for (size_t k = 0; k < n; k++)
        perm[k] = (uint32_t)k;
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (size_t k = n - 1; k > 0; k--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t j = s % k;
        uint32_t t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
    }
    for (size_t k = 0; k < n; k++)
        next[(size_t)perm[k] * 16] = perm[(k + 1) % n];
    free(perm);
    uint32_t p = 0;
    for (size_t k = 0; k < n / 4; k++) /* warm the page tables */
        p = next[(size_t)p * 16];
    double t0 = bench_thread_cpu();
    for (size_t k = 0; k < steps; k++)
        p = next[(size_t)p * 16];
    double t1 = bench_thread_cpu();
    volatile uint32_t sink = p;
    (void)sink;
    free(next);
    return (t1 - t0) * 1e9 / (double)steps;
}

double floor_clock_ns(size_t steps)
{
    double t0 = bench_thread_cpu();
    for (size_t k = 0; k < steps; k++)
        clock_sink = bench_now_ns();
    double t1 = bench_thread_cpu();
    return (t1 - t0) * 1e9 / (double)steps;
}
