/* backends.c: the timer implementations twheel-bench compares.
 *
 * - twheel, manual mode and threaded mode (and, in W2 only, threaded mode
 *   through tw_schedule_at);
 * - an index-tracked binary min-heap (what libuv, libevent and Java's
 *   ScheduledThreadPoolExecutor use), written here as a strong baseline:
 *   deadlines are stored in the heap array itself, so a comparison does
 *   not chase a pointer;
 * - a single-level hashed wheel with rounds (Netty's HashedWheelTimer:
 *   512 buckets, the bucket of every tick walked and each task's rounds
 *   counted down), also written here;
 * - libevent and libuv when their development packages are present. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "twheel.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- twheel ----------------------------------------------------------- */

static void tw_fire(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    bench_fired(arg);
}

int bench_huge_pages;

static int twm_open_mode(struct backend *b, size_t cap, int threaded)
{
    struct tw_options o;
    tw_options_init(&o);
    o.capacity = cap; /* the same room the other back ends are given */
    o.tick_ns = b->tick_ns;
    o.threaded = threaded;
    o.huge_pages = !threaded && bench_huge_pages; /* manual only (twheel.h) */
    tw_timer *t;
    int rc = tw_create(&t, &o);
    if (rc)
        return rc;
    b->impl = t;
    return 0;
}

static int twm_open(struct backend *b, size_t cap, uint64_t now)
{
    (void)now;
    return twm_open_mode(b, cap, 0);
}

static int twt_open(struct backend *b, size_t cap, uint64_t now)
{
    (void)now;
    return twm_open_mode(b, cap, 1);
}

static void twm_close(struct backend *b)
{
    tw_destroy(b->impl);
}

static void twm_drop(struct backend *b)
{
    tw_drain(b->impl, NULL, NULL);
}

static void twm_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    /* a tail call: the id is written straight to where the caller keeps it */
    tw_schedule(b->impl, delay, tw_fire, arg, out);
}

static void twm_cancel(struct backend *b, uint64_t h)
{
    tw_cancel(b->impl, h);
}

static void twm_push(struct backend *b, uint64_t h, uint64_t delay)
{
    tw_reschedule(b->impl, h, delay);
}

static size_t twm_advance(struct backend *b, uint64_t now)
{
    int n = tw_advance(b->impl, now);
    return n > 0 ? (size_t)n : 0;
}

static uint64_t twm_next(struct backend *b)
{
    uint64_t d;
    return tw_next_deadline(b->impl, &d) == 0 ? d : UINT64_MAX;
}

static uint64_t twm_bytes(struct backend *b)
{
    struct tw_stats s;
    tw_stats(b->impl, &s);
    return s.memory_bytes;
}

static uint64_t twm_wakeups(struct backend *b)
{
    struct tw_stats s;
    tw_stats(b->impl, &s);
    return s.advances;
}

static size_t twt_advance(struct backend *b, uint64_t now)
{
    (void)b;
    (void)now;
    return 0; /* the driver thread fires */
}

static uint64_t twt_next(struct backend *b)
{
    (void)b;
    return UINT64_MAX;
}

const struct backend_ops be_twheel = {
    "twheel", "twheel, manual mode (the caller advances the clock)", 0, 0,
    twm_open, twm_close, twm_add, twm_cancel, twm_advance, twm_next, twm_bytes,
    twm_wakeups, 1, 0, twm_drop, twm_push,
};

const struct backend_ops be_twheel_threaded = {
    "twheel-thr", "twheel, threaded mode (driver thread, locked API)", 1, 1,
    twt_open, twm_close, twm_add, twm_cancel, twt_advance, twt_next, twm_bytes,
    twm_wakeups, 0, 0, twm_drop,
};

/* W2 only, where a timer's argument is its deadline (bench.c): the
 * threaded API given that deadline with tw_schedule_at, so the library
 * reads no clock of its own, as a caller that already has the time would
 * call it. Set against twheel-thr, it measures what the threaded
 * tw_schedule's own clock read costs. Not in the back-end table. */
static void twa_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    (void)delay;
    tw_schedule_at(b->impl, (uint64_t)(uintptr_t)arg, tw_fire, arg, out);
}

const struct backend_ops be_twheel_threaded_at = {
    "twheel-at", "twheel, threaded mode, tw_schedule_at (W2 only)", 1, 1,
    twt_open, twm_close, twa_add, twm_cancel, twt_advance, twt_next, twm_bytes,
    twm_wakeups,
};

/* ---- binary heap ------------------------------------------------------ */

/* The heaps and the hashed wheel take a node from their free list, or else
 * the next one never used (as twheel's pool takes its slots): a free list
 * threaded through every node at open would page all of them in before
 * the measurement, where twheel's first touch of each page falls inside
 * it (W2's adds: ~10 us a page fault on some VMs). */
#define NODE_NIL 0xFFFFFFFFu

struct hent {
    uint64_t deadline;
    uint32_t node;
    uint32_t seq; /* FIFO among equal deadlines */
};

struct hnode {
    void (*cb)(void *);
    void *arg;
    uint32_t pos; /* index in the heap array */
    uint32_t next_free;
};

struct heap {
    struct hent *h;
    struct hnode *nodes;
    uint32_t n, free_head, seq, fresh; /* fresh: nodes never used */
    uint64_t now, wakeups, cap;
};

static inline int hless(const struct hent *a, const struct hent *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static inline void hset(struct heap *q, uint32_t pos, struct hent e)
{
    q->h[pos] = e;
    q->nodes[e.node].pos = pos;
}

static void hup(struct heap *q, uint32_t pos)
{
    struct hent e = q->h[pos];
    while (pos) {
        uint32_t p = (pos - 1) / 2;
        if (!hless(&e, &q->h[p]))
            break;
        hset(q, pos, q->h[p]);
        pos = p;
    }
    hset(q, pos, e);
}

static void hdown(struct heap *q, uint32_t pos)
{
    struct hent e = q->h[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && hless(&q->h[c + 1], &q->h[c]))
            c++;
        if (!hless(&q->h[c], &e))
            break;
        hset(q, pos, q->h[c]);
        pos = c;
    }
    hset(q, pos, e);
}

static void hremove(struct heap *q, uint32_t pos)
{
    struct hent last = q->h[--q->n];
    if (pos == q->n)
        return;
    q->h[pos] = last;
    q->nodes[last.node].pos = pos;
    if (pos && hless(&last, &q->h[(pos - 1) / 2]))
        hup(q, pos);
    else
        hdown(q, pos);
}

static int heap_open(struct backend *b, size_t cap, uint64_t now)
{
    struct heap *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->cap = cap;
    q->h = malloc(cap * sizeof(*q->h));
    q->nodes = malloc(cap * sizeof(*q->nodes));
    if (!q->h || !q->nodes) {
        free(q->h);
        free(q->nodes);
        free(q);
        return -ENOMEM;
    }
    q->free_head = NODE_NIL; /* nodes are taken lazily, in heap_add */
    q->now = now;
    b->impl = q;
    return 0;
}

static void heap_close(struct backend *b)
{
    struct heap *q = b->impl;
    free(q->h);
    free(q->nodes);
    free(q);
}

static void heap_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct heap *q = b->impl;
    uint32_t k = q->free_head;
    if (k != NODE_NIL)
        q->free_head = q->nodes[k].next_free;
    else
        k = q->fresh++;
    q->nodes[k].cb = bench_fired;
    q->nodes[k].arg = arg;
    uint64_t d = q->now + delay;
    q->h[q->n] = (struct hent){ d < delay ? UINT64_MAX : d, k, q->seq++ };
    hup(q, q->n++);
    *out = k;
}

static void heap_cancel(struct backend *b, uint64_t h)
{
    struct heap *q = b->impl;
    uint32_t k = (uint32_t)h;
    hremove(q, q->nodes[k].pos);
    q->nodes[k].next_free = q->free_head;
    q->free_head = k;
}

static void heap_push(struct backend *b, uint64_t h, uint64_t delay)
{
    struct heap *q = b->impl;
    uint32_t pos = q->nodes[(uint32_t)h].pos;
    uint64_t d = q->now + delay;
    struct hent e = { d < delay ? UINT64_MAX : d, (uint32_t)h, q->seq++ };
    int later = hless(&q->h[pos], &e);
    q->h[pos] = e;
    if (later)
        hdown(q, pos);
    else
        hup(q, pos);
}

static size_t heap_advance(struct backend *b, uint64_t now)
{
    struct heap *q = b->impl;
    size_t n = 0;
    if (now > q->now)
        q->now = now;
    q->wakeups++;
    while (q->n && q->h[0].deadline <= q->now) {
        uint32_t k = q->h[0].node;
        hremove(q, 0);
        struct hnode nd = q->nodes[k];
        q->nodes[k].next_free = q->free_head;
        q->free_head = k;
        nd.cb(nd.arg);
        n++;
    }
    return n;
}

static uint64_t heap_next(struct backend *b)
{
    struct heap *q = b->impl;
    return q->n ? q->h[0].deadline : UINT64_MAX;
}

static uint64_t heap_bytes(struct backend *b)
{
    struct heap *q = b->impl;
    return q->cap * (sizeof(struct hent) + sizeof(struct hnode));
}

static uint64_t heap_wakeups(struct backend *b)
{
    return ((struct heap *)b->impl)->wakeups;
}

const struct backend_ops be_heap_inline = {
    "heap-inline", "binary min-heap, deadlines inline in the array (stronger than the peers)", 0, 0,
    heap_open, heap_close, heap_add, heap_cancel, heap_advance, heap_next,
    heap_bytes, heap_wakeups, 1, 0, NULL, heap_push,
};

/* ---- binary heap of node pointers (the peers' design) ------------------ */

/* What libevent (min_heap of struct event *), Java's STPE (array of task
 * references, deadline in the task) and libuv (deadline in the handle)
 * do: the heap holds pointers and every comparison reads the node. */
struct pnode {
    uint64_t deadline;
    uint64_t seq;
    void (*cb)(void *);
    void *arg;
    uint32_t pos;
    uint32_t next_free;
};

struct pheap {
    struct pnode **h;
    struct pnode *nodes;
    uint32_t n, free_head, fresh; /* fresh: nodes never used */
    uint64_t seq, now, wakeups, cap;
};

static inline int pless(const struct pnode *a, const struct pnode *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void pup(struct pheap *q, uint32_t pos)
{
    struct pnode *e = q->h[pos];
    while (pos) {
        uint32_t p = (pos - 1) / 2;
        if (!pless(e, q->h[p]))
            break;
        q->h[pos] = q->h[p];
        q->h[pos]->pos = pos;
        pos = p;
    }
    q->h[pos] = e;
    e->pos = pos;
}

static void pdown(struct pheap *q, uint32_t pos)
{
    struct pnode *e = q->h[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && pless(q->h[c + 1], q->h[c]))
            c++;
        if (!pless(q->h[c], e))
            break;
        q->h[pos] = q->h[c];
        q->h[pos]->pos = pos;
        pos = c;
    }
    q->h[pos] = e;
    e->pos = pos;
}

static void premove(struct pheap *q, uint32_t pos)
{
    struct pnode *last = q->h[--q->n];
    if (pos == q->n)
        return;
    q->h[pos] = last;
    last->pos = pos;
    if (pos && pless(last, q->h[(pos - 1) / 2]))
        pup(q, pos);
    else
        pdown(q, pos);
}

static int pheap_open(struct backend *b, size_t cap, uint64_t now)
{
    struct pheap *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->cap = cap;
    q->h = malloc(cap * sizeof(*q->h));
    q->nodes = malloc(cap * sizeof(*q->nodes));
    if (!q->h || !q->nodes) {
        free(q->h);
        free(q->nodes);
        free(q);
        return -ENOMEM;
    }
    q->free_head = NODE_NIL; /* nodes are taken lazily, as in heap_add */
    q->now = now;
    b->impl = q;
    return 0;
}

static void pheap_close(struct backend *b)
{
    struct pheap *q = b->impl;
    free(q->h);
    free(q->nodes);
    free(q);
}

static void pheap_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct pheap *q = b->impl;
    uint32_t k = q->free_head;
    if (k != NODE_NIL)
        q->free_head = q->nodes[k].next_free;
    else
        k = q->fresh++;
    struct pnode *nd = &q->nodes[k];
    uint64_t d = q->now + delay;
    nd->deadline = d < delay ? UINT64_MAX : d;
    nd->seq = q->seq++;
    nd->cb = bench_fired;
    nd->arg = arg;
    q->h[q->n] = nd;
    pup(q, q->n++);
    *out = k;
}

static void pheap_cancel(struct backend *b, uint64_t h)
{
    struct pheap *q = b->impl;
    uint32_t k = (uint32_t)h;
    premove(q, q->nodes[k].pos);
    q->nodes[k].next_free = q->free_head;
    q->free_head = k;
}

static void pheap_push(struct backend *b, uint64_t h, uint64_t delay)
{
    struct pheap *q = b->impl;
    struct pnode *nd = &q->nodes[(uint32_t)h];
    uint64_t d = q->now + delay, old = nd->deadline;
    nd->deadline = d < delay ? UINT64_MAX : d;
    nd->seq = q->seq++;
    if (nd->deadline >= old)
        pdown(q, nd->pos);
    else
        pup(q, nd->pos);
}

static size_t pheap_advance(struct backend *b, uint64_t now)
{
    struct pheap *q = b->impl;
    size_t n = 0;
    if (now > q->now)
        q->now = now;
    q->wakeups++;
    while (q->n && q->h[0]->deadline <= q->now) {
        struct pnode *nd = q->h[0];
        premove(q, 0);
        uint32_t k = (uint32_t)(nd - q->nodes);
        void (*cb)(void *) = nd->cb;
        void *arg = nd->arg;
        nd->next_free = q->free_head;
        q->free_head = k;
        cb(arg);
        n++;
    }
    return n;
}

static uint64_t pheap_next(struct backend *b)
{
    struct pheap *q = b->impl;
    return q->n ? q->h[0]->deadline : UINT64_MAX;
}

static uint64_t pheap_bytes(struct backend *b)
{
    struct pheap *q = b->impl;
    return q->cap * (sizeof(struct pnode *) + sizeof(struct pnode));
}

static uint64_t pheap_wakeups(struct backend *b)
{
    return ((struct pheap *)b->impl)->wakeups;
}

const struct backend_ops be_heap = {
    "heap", "binary min-heap of node pointers (libevent/JDK STPE design): the baseline", 0, 0,
    pheap_open, pheap_close, pheap_add, pheap_cancel, pheap_advance, pheap_next,
    pheap_bytes, pheap_wakeups, 1, 0, NULL, pheap_push,
};

/* ---- hashed wheel with rounds (Netty) ---------------------------------- */

#define HW_SLOTS 512u

struct hwnode {
    uint64_t deadline;
    int64_t rounds;
    void *arg;
    uint32_t next, prev; /* index links; HW_NIL ends */
    uint32_t slot;
    uint32_t pad;
};

#define HW_NIL 0xFFFFFFFFu

struct hwheel {
    struct hwnode *nodes;
    uint32_t heads[HW_SLOTS];
    uint32_t free_head, fresh; /* fresh: nodes never used */
    uint64_t start, tick, ticks_done, wakeups, cap;
};

static int hw_open(struct backend *b, size_t cap, uint64_t now)
{
    struct hwheel *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->nodes = malloc(cap * sizeof(*w->nodes));
    if (!w->nodes) {
        free(w);
        return -ENOMEM;
    }
    w->free_head = HW_NIL; /* nodes are taken lazily, as in heap_add */
    for (uint32_t s = 0; s < HW_SLOTS; s++)
        w->heads[s] = HW_NIL;
    w->start = now;
    w->tick = b->tick_ns;
    w->cap = cap;
    b->impl = w;
    return 0;
}

static void hw_close(struct backend *b)
{
    struct hwheel *w = b->impl;
    free(w->nodes);
    free(w);
}

static void hw_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct hwheel *w = b->impl;
    uint32_t k = w->free_head;
    if (k != HW_NIL)
        w->free_head = w->nodes[k].next;
    else
        k = w->fresh++;
    struct hwnode *n = &w->nodes[k];
    /* Netty: calculated = deadline / tick; rounds = (calculated - tick) /
     * wheel; the slot is max(calculated, tick) & mask. */
    uint64_t rel = w->ticks_done * w->tick + delay;
    uint64_t calc = (rel + w->tick - 1) / w->tick;
    if (calc < w->ticks_done)
        calc = w->ticks_done;
    n->deadline = w->start + rel;
    n->rounds = (int64_t)((calc - w->ticks_done) / HW_SLOTS);
    n->arg = arg;
    n->slot = (uint32_t)(calc & (HW_SLOTS - 1));
    n->prev = HW_NIL;
    n->next = w->heads[n->slot];
    if (n->next != HW_NIL)
        w->nodes[n->next].prev = k;
    w->heads[n->slot] = k;
    *out = k;
}

static void hw_unlink(struct hwheel *w, uint32_t k)
{
    struct hwnode *n = &w->nodes[k];
    if (n->prev != HW_NIL)
        w->nodes[n->prev].next = n->next;
    else
        w->heads[n->slot] = n->next;
    if (n->next != HW_NIL)
        w->nodes[n->next].prev = n->prev;
}

static void hw_cancel(struct backend *b, uint64_t h)
{
    struct hwheel *w = b->impl;
    uint32_t k = (uint32_t)h;
    hw_unlink(w, k);
    w->nodes[k].next = w->free_head;
    w->free_head = k;
}

static size_t hw_advance(struct backend *b, uint64_t now)
{
    struct hwheel *w = b->impl;
    size_t fired = 0;
    w->wakeups++;
    /* every tick up to now, one after the other, as Netty's worker does */
    while (w->start + (w->ticks_done + 1) * w->tick <= now) {
        uint32_t s = (uint32_t)(w->ticks_done & (HW_SLOTS - 1));
        for (uint32_t k = w->heads[s]; k != HW_NIL;) {
            struct hwnode *n = &w->nodes[k];
            uint32_t next = n->next;
            if (n->rounds <= 0) {
                void *arg = n->arg;
                hw_unlink(w, k);
                n->next = w->free_head;
                w->free_head = k;
                bench_fired(arg);
                fired++;
            } else {
                n->rounds--;
            }
            k = next;
        }
        w->ticks_done++;
    }
    return fired;
}

static uint64_t hw_next(struct backend *b)
{
    struct hwheel *w = b->impl;
    return w->start + (w->ticks_done + 1) * w->tick; /* it wakes every tick */
}

static uint64_t hw_bytes(struct backend *b)
{
    struct hwheel *w = b->impl;
    return w->cap * sizeof(struct hwnode) + sizeof(*w);
}

static uint64_t hw_wakeups(struct backend *b)
{
    return ((struct hwheel *)b->impl)->wakeups;
}

const struct backend_ops be_hashed = {
    "hashed", "single-level hashed wheel with rounds (Netty design), 512 slots", 0, 0,
    hw_open, hw_close, hw_add, hw_cancel, hw_advance, hw_next, hw_bytes, hw_wakeups, 1,
};

/* ---- libevent ----------------------------------------------------------- */
#ifdef HAVE_LIBEVENT
#include <event2/event.h>
#include <event2/event_struct.h>

struct lev {
    struct event_base *base;
    struct event *evs;
    void **args;
    uint32_t *free;
    uint32_t nfree, fresh; /* fresh: events never used */
};

static struct lev *lev_current;

static void lev_cb(evutil_socket_t fd, short what, void *p)
{
    (void)fd;
    (void)what;
    uint32_t k = (uint32_t)(uintptr_t)p;
    lev_current->free[lev_current->nfree++] = k;
    bench_fired(lev_current->args[k]);
}

static void lev_close_impl(struct lev *l)
{
    event_base_free(l->base); /* pending timers are dropped with the base */
    free(l->evs);
    free(l->args);
    free(l->free);
    free(l);
}

static int lev_open(struct backend *b, size_t cap, uint64_t now)
{
    (void)now;
    struct lev *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    if (!(l->base = event_base_new())) {
        free(l);
        return -ENOMEM;
    }
    l->evs = calloc(cap, sizeof(*l->evs));
    l->args = calloc(cap, sizeof(*l->args));
    l->free = malloc(cap * sizeof(*l->free));
    if (!l->evs || !l->args || !l->free) {
        lev_close_impl(l);
        return -ENOMEM;
    }
    lev_current = l; /* events are taken lazily, as in heap_add */
    b->impl = l;
    return 0;
}

static void lev_close(struct backend *b)
{
    lev_close_impl(b->impl);
}

static void lev_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct lev *l = b->impl;
    uint32_t k = l->nfree ? l->free[--l->nfree] : l->fresh++;
    l->args[k] = arg;
    evtimer_assign(&l->evs[k], l->base, lev_cb, (void *)(uintptr_t)k);
    struct timeval tv = { (time_t)(delay / 1000000000u),
                          (suseconds_t)((delay % 1000000000u) / 1000u) };
    evtimer_add(&l->evs[k], &tv);
    *out = k;
}

static void lev_cancel(struct backend *b, uint64_t h)
{
    struct lev *l = b->impl;
    evtimer_del(&l->evs[(uint32_t)h]);
    l->free[l->nfree++] = (uint32_t)h;
}

static size_t lev_advance(struct backend *b, uint64_t now)
{
    (void)now;
    struct lev *l = b->impl;
    event_base_loop(l->base, EVLOOP_ONCE);
    return 0;
}

static uint64_t lev_next(struct backend *b)
{
    (void)b;
    return 0; /* it sleeps inside its own loop */
}

static uint64_t zero_bytes(struct backend *b)
{
    (void)b;
    return 0;
}

const struct backend_ops be_libevent = {
    "libevent", "libevent 2.1 evtimer_add/evtimer_del (min-heap)", 0, 1,
    lev_open, lev_close, lev_add, lev_cancel, lev_advance, lev_next, zero_bytes,
    NULL,
};
#else
const struct backend_ops be_libevent = { "libevent", NULL, 0, 0, NULL, NULL, NULL,
                                         NULL, NULL, NULL, NULL, NULL };
#endif

/* ---- libuv ------------------------------------------------------------- */
#ifdef HAVE_LIBUV
#include <uv.h>

struct luv {
    uv_loop_t loop;
    uv_timer_t *timers;
    uint32_t *free;
    uint32_t nfree, fresh; /* fresh: handles never used (nor initialised) */
    size_t cap;
};

static void luv_cb(uv_timer_t *h)
{
    struct luv *l = h->loop->data;
    l->free[l->nfree++] = (uint32_t)(h - l->timers);
    bench_fired(h->data);
}

static int luv_open(struct backend *b, size_t cap, uint64_t now)
{
    (void)now;
    struct luv *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    if (uv_loop_init(&l->loop)) {
        free(l);
        return -ENOMEM;
    }
    l->loop.data = l;
    l->timers = calloc(cap, sizeof(*l->timers));
    l->free = malloc(cap * sizeof(*l->free));
    if (!l->timers || !l->free) {
        uv_loop_close(&l->loop);
        free(l->timers);
        free(l->free);
        free(l);
        return -ENOMEM;
    }
    l->cap = cap; /* handles are initialised on first use, as in heap_add */
    b->impl = l;
    return 0;
}

static void luv_close(struct backend *b)
{
    struct luv *l = b->impl;
    for (size_t k = 0; k < l->fresh; k++)
        uv_close((uv_handle_t *)&l->timers[k], NULL);
    uv_run(&l->loop, UV_RUN_DEFAULT);
    uv_loop_close(&l->loop);
    free(l->timers);
    free(l->free);
    free(l);
}

static void luv_add(struct backend *b, uint64_t delay, void *arg, uint64_t *out)
{
    struct luv *l = b->impl;
    uint32_t k;
    if (l->nfree)
        k = l->free[--l->nfree];
    else
        uv_timer_init(&l->loop, &l->timers[k = l->fresh++]);
    l->timers[k].data = arg;
    uv_timer_start(&l->timers[k], luv_cb, (delay + 999999) / 1000000, 0);
    *out = k;
}

static void luv_cancel(struct backend *b, uint64_t h)
{
    struct luv *l = b->impl;
    uv_timer_stop(&l->timers[(uint32_t)h]);
    l->free[l->nfree++] = (uint32_t)h;
}

static size_t luv_advance(struct backend *b, uint64_t now)
{
    (void)now;
    struct luv *l = b->impl;
    uv_run(&l->loop, UV_RUN_ONCE);
    return 0;
}

static uint64_t luv_next(struct backend *b)
{
    (void)b;
    return 0;
}

static uint64_t luv_zero(struct backend *b)
{
    (void)b;
    return 0;
}

const struct backend_ops be_libuv = {
    "libuv", "libuv 1.44 uv_timer_start/uv_timer_stop (min-heap, ms)", 0, 0,
    luv_open, luv_close, luv_add, luv_cancel, luv_advance, luv_next, luv_zero, NULL,
};
#else
const struct backend_ops be_libuv = { "libuv", NULL, 0, 0, NULL, NULL, NULL,
                                      NULL, NULL, NULL, NULL, NULL };
#endif
