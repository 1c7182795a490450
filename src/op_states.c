/* op_states.c: a dense table of words, one a live purgatory op, that say
 * whether it is completed.
 *
 * Why. A purge visits every entry of every watch list to drop the
 * completed ops, and reads nothing else of an op than that. With the flag
 * only inside the op, each visit was one cold line of an op somewhere in
 * the heap. Under Kafka's TestPurgatoryPerformance at 800,000 requests/s
 * a purge visited ~420,000 entries in 4 to 7 ms, 91% of the time on those
 * loads, and held up the timer thread (whose expirations start purges)
 * for that long; prefetching did not shorten it
 * (benchmarks/results/history.md, "How long a purge holds the timer
 * thread"). Here the words of all live ops sit side by side, 4 bytes
 * each (200,000 ops: 800 KB), and a list entry carries its op's word's
 * address beside the op's, so a compaction reads the lists and this table
 * and touches only the ops it drops. The op keeps its own state word
 * (purgatory.h), which every other step reads and writes: this one is
 * written twice in an op's life (0 when it is made, 1 when it completes),
 * so ops side by side here do not fight over the line.
 *
 * Shape. Chunks of 4096 words, never freed before the table; a directory
 * of chunk pointers, doubled when full, the old one kept (a reader may
 * still hold it; they are freed with the table); a free stack of word
 * indices threaded through the free words themselves (a free word holds
 * the next free index + 1, 0 at the bottom), whose top is one 64-bit word:
 * a tag that every change bumps, so that a pop whose view went stale
 * between its read of the top and its compare-and-swap fails (ABA), and
 * the top index + 1. A new chunk is taken under a mutex, only when the
 * stack is empty: once a 4096 ops.
 *
 * Lifetime. An op may outlive its purgatory (the header promises it can
 * still be read, completed and released), so its word must too: the
 * table counts a reference a word taken plus the purgatory's, and the
 * last release frees it. The table also keeps the allocator, with which
 * a released op frees itself.
 *
 * Costs, honestly: two atomic read-modify-writes on the table's shared
 * line per op made and per op freed (the stack's top and the count), on
 * whatever threads make and free ops; 4 bytes an op at the peak number of
 * live ops, kept until the table goes; and a watch list's entry is 16
 * bytes, not 8. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "op_states.h"

#define TW__ST_BITS 12u
#define TW__ST_CHUNK (1u << TW__ST_BITS)
/* index + 1 must fit in the top's low 32 bits */
#define TW__ST_MAX_CHUNKS ((1u << (32u - TW__ST_BITS)) - 1u)

struct tw__st_dir {
    struct tw__st_dir *older; /* the one this replaced, freed with the table */
    uint32_t cap;
    _Atomic uint32_t *chunk[];
};

struct tw__states {
    /* written by every op made and freed: a line of their own */
    _Atomic uint64_t top;  /* (tag << 32) | (free index + 1); 0 low: empty */
    _Atomic uint64_t refs; /* the creator's, and one a word taken */
    char pad_[48];
    /* read-mostly */
    _Atomic(struct tw__st_dir *) dir;
    struct tw_allocator a;
    pthread_mutex_t grow; /* a new chunk, and the directory's growth */
    uint32_t nchunks;     /* under grow */
};

static void *st_alloc(struct tw__states *t, size_t n)
{
    return t->a.alloc(t->a.ctx, n);
}

void tw__states_free(struct tw__states *t, void *ptr)
{
    t->a.free(t->a.ctx, ptr);
}

/* Word i's address. Any index a thread holds came from the stack (or a
 * chunk it added), after its chunk was in the directory it reads. */
static _Atomic uint32_t *word_at(struct tw__states *t, uint32_t i)
{
    struct tw__st_dir *d = atomic_load_explicit(&t->dir, memory_order_acquire);
    return d->chunk[i >> TW__ST_BITS] + (i & (TW__ST_CHUNK - 1u));
}

int tw__states_create(struct tw__states **out, const struct tw_allocator *a)
{
    struct tw__states *t = a->alloc(a->ctx, sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t, 0, sizeof(*t));
    t->a = *a;
    struct tw__st_dir *d = st_alloc(t, sizeof(*d) + 4 * sizeof(d->chunk[0]));
    if (!d) {
        tw__states_free(t, t);
        return -ENOMEM;
    }
    d->older = NULL;
    d->cap = 4;
    atomic_init(&t->dir, d);
    atomic_init(&t->top, 0);
    atomic_init(&t->refs, 1);
    pthread_mutex_init(&t->grow, NULL);
    *out = t;
    return 0;
}

static void states_free_all(struct tw__states *t)
{
    struct tw__st_dir *d = atomic_load_explicit(&t->dir, memory_order_relaxed);
    for (uint32_t c = 0; c < t->nchunks; c++)
        tw__states_free(t, (void *)d->chunk[c]);
    while (d) {
        struct tw__st_dir *older = d->older;
        tw__states_free(t, d);
        d = older;
    }
    pthread_mutex_destroy(&t->grow);
    tw__states_free(t, t);
}

static void unref(struct tw__states *t)
{
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1)
        states_free_all(t);
}

void tw__states_release(struct tw__states *t)
{
    if (t)
        unref(t);
}

/* Between a pop's read of the top and its exchange: where another thread
 * may pop and push meanwhile, which the tag is for (a pop whose top came
 * back to the same index, its next changed, must fail). A test that
 * compiles this file itself (test_op_states.c) defines TW__ST_TEST_HOOK
 * and does those pops and pushes there, in order, with no thread; the
 * library's build has nothing here. */
#ifdef TW__ST_TEST_HOOK
void tw__st_test_before_swap(struct tw__states *t);
#define BEFORE_SWAP(t) tw__st_test_before_swap(t)
#else
#define BEFORE_SWAP(t) ((void)0)
#endif

/* Pops a free index: 1 (in *idx) or 0 if the stack is empty. */
static int pop(struct tw__states *t, uint32_t *idx)
{
    uint64_t top = atomic_load_explicit(&t->top, memory_order_acquire);
    while ((uint32_t)top) {
        uint32_t i = (uint32_t)top - 1u;
        /* may be stale if another thread pops i first: then the tag has
         * moved and the exchange below fails */
        uint32_t next = atomic_load_explicit(word_at(t, i), memory_order_relaxed);
        uint64_t nt = ((((top >> 32) + 1u) & 0xffffffffu) << 32) | next;
        BEFORE_SWAP(t);
        if (atomic_compare_exchange_weak_explicit(&t->top, &top, nt, memory_order_acquire,
                                                  memory_order_acquire)) {
            *idx = i;
            return 1;
        }
    }
    return 0;
}

/* Pushes the chain first..last (linked through their words already, but
 * last's) onto the stack. */
static void push_chain(struct tw__states *t, uint32_t first, _Atomic uint32_t *last)
{
    uint64_t top = atomic_load_explicit(&t->top, memory_order_relaxed);
    uint64_t nt;
    do {
        atomic_store_explicit(last, (uint32_t)top, memory_order_relaxed);
        nt = ((((top >> 32) + 1u) & 0xffffffffu) << 32) | (first + 1u);
    } while (!atomic_compare_exchange_weak_explicit(&t->top, &top, nt, memory_order_release,
                                                    memory_order_relaxed));
}

/* The stack was empty: a new chunk, its first word for the caller, the
 * rest pushed. Under grow. 0 or -ENOMEM (nothing changed). */
static int add_chunk(struct tw__states *t, uint32_t *idx)
{
    struct tw__st_dir *d = atomic_load_explicit(&t->dir, memory_order_relaxed);
    if (t->nchunks >= TW__ST_MAX_CHUNKS)
        return -ENOMEM;
    _Atomic uint32_t *c = st_alloc(t, TW__ST_CHUNK * sizeof(*c));
    if (!c)
        return -ENOMEM;
    if (t->nchunks == d->cap) {
        uint32_t ncap = d->cap * 2u;
        struct tw__st_dir *nd = st_alloc(t, sizeof(*nd) + (size_t)ncap * sizeof(nd->chunk[0]));
        if (!nd) {
            tw__states_free(t, (void *)c);
            return -ENOMEM;
        }
        nd->older = d;
        nd->cap = ncap;
        memcpy(nd->chunk, d->chunk, (size_t)t->nchunks * sizeof(d->chunk[0]));
        d = nd;
    }
    uint32_t base = t->nchunks << TW__ST_BITS;
    for (uint32_t k = 1; k + 1u < TW__ST_CHUNK; k++)
        atomic_init(&c[k], base + k + 2u); /* the next index + 1 */
    d->chunk[t->nchunks++] = c;
    /* published before any of its indices is pushed (release) */
    atomic_store_explicit(&t->dir, d, memory_order_release);
    push_chain(t, base + 1u, &c[TW__ST_CHUNK - 1u]);
    *idx = base;
    return 0;
}

_Atomic uint32_t *tw__state_word(struct tw__states *t, uint32_t idx)
{
    return word_at(t, idx);
}

int tw__state_get(struct tw__states *t, uint32_t *idx)
{
    uint32_t i;
    if (!pop(t, &i)) {
        pthread_mutex_lock(&t->grow);
        int rc = pop(t, &i) ? 0 : add_chunk(t, &i); /* another may have added one */
        pthread_mutex_unlock(&t->grow);
        if (rc)
            return rc;
    }
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    atomic_store_explicit(word_at(t, i), 0, memory_order_relaxed);
    *idx = i;
    return 0;
}

void tw__state_put(struct tw__states *t, uint32_t idx)
{
    push_chain(t, idx, word_at(t, idx));
    unref(t);
}
