/* intrusive.c: a model of twheel with caller-owned tasks, for W1 and W4.
 *
 * twheel hands out 64-bit ids and keeps every task in its own pool: the
 * id's slot and generation are checked on cancel, so a stale or made-up id
 * is refused (-ENOENT) instead of corrupting a list. That costs
 * instructions on every pair: the pool's free list, the generation bumped
 * on schedule and compared on cancel, the id packed and unpacked.
 *
 * libuv (uv_timer_t), Linux (struct timer_list) and wahern/timeout (struct
 * timeout) take the other contract: the caller embeds the timer in its own
 * object (a request, a connection) and passes its address. Cancel of a
 * task that is not pending is still refused (its link is NULL), but a
 * pointer to freed memory is the caller's bug, not something the library
 * can catch. The task is 40 bytes of the caller's object: two list
 * pointers, the deadline, the callback and its argument.
 *
 * This model keeps everything else twheel's schedule and cancel do, the
 * same way: argument checks, the exact never-early rounding (tickdiv.h's
 * multiply and shift), the level chosen with one table lookup and one
 * compare, buckets of eight lists (the list picked by the task's address,
 * where twheel uses its slot), an occupancy mark when a list starts or
 * empties, and the scheduled and cancelled counters. Levels exist from
 * the start (six of 64 buckets: 2^36 ticks, two years at 1 ms), and there
 * is no delay queue and no advance: nothing ever fires, so the model runs
 * W1, W1r and W4 and is skipped elsewhere. The back end's free list stands
 * in for the caller's own allocation of the objects the tasks live in.
 *
 * Its cancel unlinks at once, as twheel's did when the model was written;
 * twheel's has deferred the unlink since 2026-11-24 (src/wheel.c,
 * "Deferred unlink"), which the model does not copy, and an API of
 * caller-owned tasks cannot: once cancel returns, the caller may free or
 * reuse its object, so nothing may stay linked to it. The deferral needs
 * the library to own the entry, which the ids give it. Compare the model
 * with the floor's eager row; against twheel's figures of since, it
 * says what the ids cost less what the deferral they allow gains.
 *
 * It measures what the ids cost, so that a change of API can be weighed
 * against the W1 targets before it is built. It is not twheel. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "../src/tickdiv.h"
#include "bench.h"

#define IT_BITS 6u
#define IT_SLOTS (1u << IT_BITS)
#define IT_LEVELS 6u
#define IT_SUBS 8u
#define IT_LAST 11u /* lv[] covers every level_of_log2 value (63 / 6 = 10) */

/* it_schedule and it_cancel stand for a library's functions: called, not
 * inlined, and not specialised for their one caller (GCC's noipa), as a
 * call into libtwheel.so cannot be. */
#if defined(__GNUC__) && !defined(__clang__)
#define IT_API __attribute__((noipa))
#else
#define IT_API __attribute__((noinline))
#endif

struct it_link {
    struct it_link *next, *prev;
};

/* What the caller embeds: 40 bytes. link.next == NULL: not pending. */
struct it_task {
    struct it_link link;
    uint64_t deadline;
    void (*fn)(void *);
    void *arg;
};

struct it_wheel {
    uint64_t now_ns, cur; /* the clock at open, and its tick (never moved) */
    uint64_t room;        /* below it, now + delay stays on tickdiv's hot path */
    struct tw__div tick;
    struct {               /* per level, as twheel's struct tw__level */
        uint64_t last;     /* the last tick level k holds */
        struct it_link *base; /* its bucket 0's list 0; NULL past IT_LEVELS */
        uint32_t shift;    /* IT_BITS * k */
    } lv[IT_LAST];
    uint8_t level_of_log2[64];
    uint64_t scheduled, cancelled;
    /* bit j: list j of the bucket holds a task. Nothing here reads it (the
     * model has no advance); it stands for the mark and the bucket queueing
     * twheel does when a list starts or empties, the rare path's cost. */
    uint8_t started[IT_LEVELS][IT_SLOTS];
    struct it_link head[IT_LEVELS * IT_SLOTS * IT_SUBS]; /* level, bucket, list */
    /* the caller's side: the objects the tasks live in */
    struct it_task *tasks, *free;
    size_t cap;
};

static void it_fire(void *arg)
{
    bench_fired(arg);
}

/* Rare: list h was empty and now holds one task, or has just emptied. */
static __attribute__((noinline)) void it_mark(struct it_wheel *w, struct it_link *h, int on)
{
    size_t n = (size_t)(h - w->head);
    uint32_t j = (uint32_t)(n % IT_SUBS), s = (uint32_t)(n / IT_SUBS % IT_SLOTS);
    uint32_t k = (uint32_t)(n / IT_SUBS / IT_SLOTS);
    if (on)
        w->started[k][s] |= (uint8_t)(1u << j);
    else
        w->started[k][s] &= (uint8_t)~(1u << j);
}

/* Schedules task t, owned by the caller and not pending, to call fn(arg)
 * delay_ns from now. 0, -EINVAL (NULL argument), -EBUSY (t is pending) or
 * -ERANGE (past the top level). */
static IT_API int it_schedule(struct it_wheel *w, struct it_task *t, uint64_t delay_ns,
                              void (*fn)(void *), void *arg)
{
    if (__builtin_expect(!w || !t || !fn, 0))
        return -EINVAL;
    if (__builtin_expect(t->link.next != NULL, 0))
        return -EBUSY;
    if (__builtin_expect(delay_ns >= w->room, 0))
        return -ERANGE;
    uint64_t deadline = w->now_ns + delay_ns;
    uint64_t dt = tw__div_ceil_hot(&w->tick, deadline); /* never early: round up */
    uint32_t k = w->level_of_log2[63u - (uint32_t)__builtin_clzll((dt - w->cur) | 1u)];
    k += dt > w->lv[k].last;
    if (__builtin_expect(k >= IT_LEVELS, 0))
        return -ERANGE;
    struct it_link *h = w->lv[k].base + (((dt >> w->lv[k].shift) & (IT_SLOTS - 1u)) * IT_SUBS +
                                         (((uintptr_t)t >> 3) & (IT_SUBS - 1u)));
    t->deadline = deadline;
    t->fn = fn;
    t->arg = arg;
    w->scheduled++;
    struct it_link *tail = h->prev;
    t->link.next = h;
    t->link.prev = tail;
    tail->next = &t->link;
    h->prev = &t->link;
    if (__builtin_expect(tail == h, 0))
        it_mark(w, h, 1);
    return 0;
}

/* Cancels task t. 0, -EINVAL (NULL argument) or -ENOENT (not pending). */
static IT_API int it_cancel(struct it_wheel *w, struct it_task *t)
{
    if (__builtin_expect(!w || !t, 0))
        return -EINVAL;
    struct it_link *n = t->link.next, *p = t->link.prev;
    if (__builtin_expect(!n, 0))
        return -ENOENT;
    p->next = n;
    n->prev = p;
    t->link.next = NULL;
    w->cancelled++;
    if (__builtin_expect(n == p, 0)) /* both the head: the list emptied */
        it_mark(w, n, 0);
    return 0;
}

static int itb_open(struct backend *b, size_t cap, uint64_t now)
{
    struct it_wheel *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->tasks = calloc(cap ? cap : 1, sizeof(*w->tasks)); /* link.next NULL */
    if (!w->tasks) {
        free(w);
        return -ENOMEM;
    }
    for (size_t k = 0; k < cap; k++)
        w->tasks[k].link.prev = k + 1 < cap ? &w->tasks[k + 1].link : NULL;
    w->free = cap ? w->tasks : NULL;
    w->cap = cap;
    tw__div_init(&w->tick, b->tick_ns);
    w->now_ns = now;
    w->cur = now / b->tick_ns;
    w->room = now < w->tick.lim ? w->tick.lim - now : 0;
    for (uint32_t j = 0; j < 64; j++)
        w->level_of_log2[j] = (uint8_t)(j / IT_BITS);
    for (uint32_t k = 0; k < IT_LAST; k++) { /* last: as tw__wheel_level_last */
        uint32_t s = IT_BITS * k;
        uint64_t base = w->cur >> s, top = UINT64_MAX >> s;
        w->lv[k].last = top < IT_SLOTS || base > top - IT_SLOTS ? UINT64_MAX
                                                                  : ((base + IT_SLOTS) << s) - 1;
        w->lv[k].base = k < IT_LEVELS ? &w->head[k * IT_SLOTS * IT_SUBS] : NULL;
        w->lv[k].shift = s;
    }
    for (size_t n = 0; n < IT_LEVELS * IT_SLOTS * IT_SUBS; n++)
        w->head[n].next = w->head[n].prev = &w->head[n];
    b->impl = w;
    return 0;
}

/* The model's figures mean something only if its lists are right: every
 * pending task on a list whose head it links back to, the marks matching
 * the lists. Checked at every close, so that --quick in CI checks it. */
static void it_check(const struct it_wheel *w)
{
    uint64_t linked = 0;
    for (size_t n = 0; n < IT_LEVELS * IT_SLOTS * IT_SUBS; n++) {
        const struct it_link *h = &w->head[n];
        for (const struct it_link *l = h->next; l != h; l = l->next) {
            if (l->next->prev != l)
                abort();
            linked++;
        }
        size_t k = n / IT_SUBS / IT_SLOTS, s = n / IT_SUBS % IT_SLOTS;
        int on = (w->started[k][s] >> (n % IT_SUBS)) & 1;
        if (on != (h->next != h))
            abort();
    }
    if (linked != w->scheduled - w->cancelled)
        abort();
}

static void itb_close(struct backend *b)
{
    struct it_wheel *w = b->impl;
    it_check(w);
    free(w->tasks);
    free(w);
}

static void itb_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct it_wheel *w = b->impl;
    struct it_task *t = w->free; /* the caller's allocation */
    w->free = (struct it_task *)t->link.prev;
    *out = (uint64_t)(uintptr_t)t;
    it_schedule(w, t, delay, it_fire, arg);
}

static void itb_cancel(struct backend *b, uint64_t h)
{
    struct it_wheel *w = b->impl;
    struct it_task *t = (struct it_task *)(uintptr_t)h;
    it_cancel(w, t);
    t->link.prev = (struct it_link *)w->free; /* the caller frees the object */
    w->free = t;
}

static uint64_t itb_bytes(struct backend *b)
{
    struct it_wheel *w = b->impl;
    return sizeof(*w) + w->cap * sizeof(struct it_task);
}

const struct backend_ops be_intrusive = {
    .name = "intrusive",
    .about = "model: twheel's schedule and cancel with caller-owned tasks, no ids (W1, W4)",
    .open = itb_open,
    .close = itb_close,
    .add = itb_add,
    .cancel = itb_cancel,
    .own_bytes = itb_bytes,
    .no_advance = 1,
};
