/* pool.h: task entries, their generations, and the free list.
 *
 * An entry is 32 bytes: the deadline, the callback and its argument (what a
 * task is) and two 32-bit list links (what O(1) cancel needs). Its
 * generation lives in a separate array of the same slab, so a slot costs
 * 36 bytes and an entry stays one half of a cache line. Lists are indexed,
 * not pointer-linked, which is what makes 32 bytes possible.
 *
 * Slabs hold TW__SLAB_SLOTS slots and never move: growth allocates one new
 * slab (and, rarely, a bigger slab directory), so no schedule ever copies
 * the pool.
 *
 * Generations: even = free, odd = in use. Allocation and free each add one,
 * so an id (generation << 32 | slot) matches its slot only while that task
 * lives. A slot whose generation would wrap is retired instead of reused:
 * no id is ever reissued. */
#ifndef TW_POOL_H
#define TW_POOL_H

#include <stdint.h>

#include "mem.h"
#include "twheel.h"

#define TW__SLAB_SHIFT 10u
#define TW__SLAB_SLOTS (1u << TW__SLAB_SHIFT)
#define TW__SLAB_MASK (TW__SLAB_SLOTS - 1u)

/* Index space shared by entries and list sentinels. */
#define TW__SENT 0x80000000u         /* set on sentinel (list head) indices */
#define TW__NIL 0xFFFFFFFFu          /* no element */
#define TW__EXPIRED_SENT 0xFFFFFFFEu /* the expired list's sentinel */
#define TW__MAX_SLOTS (TW__SENT - TW__SLAB_SLOTS)

struct tw__link {
    uint32_t next, prev;
};

struct tw__entry {
    uint64_t deadline; /* ns */
    tw_fn fn;
    void *arg;
    struct tw__link link;
};

_Static_assert(sizeof(struct tw__entry) == 32, "entry must stay 32 bytes");

#define TW__SLAB_BYTES \
    (TW__SLAB_SLOTS * (sizeof(struct tw__entry) + sizeof(uint32_t)))

struct tw__pool {
    unsigned char **slabs; /* directory */
    uint32_t nslabs, cap;  /* slabs used, directory capacity */
    uint32_t free_head;    /* free list through link.next */
    uint32_t nfree;
    uint32_t max_slots;    /* cap on slots (shards divide the id space) */
    uint64_t retired;
};

static inline struct tw__entry *tw__pool_entry(const struct tw__pool *p,
                                               uint32_t i)
{
    return (struct tw__entry *)p->slabs[i >> TW__SLAB_SHIFT] +
           (i & TW__SLAB_MASK);
}

static inline uint32_t *tw__pool_gen(const struct tw__pool *p, uint32_t i)
{
    return (uint32_t *)(p->slabs[i >> TW__SLAB_SHIFT] +
                        TW__SLAB_SLOTS * sizeof(struct tw__entry)) +
           (i & TW__SLAB_MASK);
}

static inline uint32_t tw__pool_slots(const struct tw__pool *p)
{
    return p->nslabs << TW__SLAB_SHIFT;
}

/* Makes sure one slot is free. 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow(struct tw__pool *p, struct tw__mem *m);

static inline int tw__pool_reserve(struct tw__pool *p, struct tw__mem *m)
{
    return p->nfree ? 0 : tw__pool_grow(p, m);
}

/* Takes a free slot (one must be reserved) and makes its generation odd. */
static inline uint32_t tw__pool_take(struct tw__pool *p, uint32_t *gen)
{
    uint32_t i = p->free_head;
    p->free_head = tw__pool_entry(p, i)->link.next;
    p->nfree--;
    *gen = ++*tw__pool_gen(p, i);
    return i;
}

/* Returns a slot; its generation becomes even, so every id naming it is
 * stale from now on. */
static inline void tw__pool_put(struct tw__pool *p, uint32_t i)
{
    uint32_t *g = tw__pool_gen(p, i);
    if (++*g == 0) { /* wrapped: retire rather than reissue ids */
        p->retired++;
        return;
    }
    tw__pool_entry(p, i)->link.next = p->free_head;
    p->free_head = i;
    p->nfree++;
}

/* The slot named by id if that task is alive, else TW__NIL. */
static inline uint32_t tw__pool_lookup(const struct tw__pool *p, uint32_t i,
                                       uint32_t gen)
{
    if (i >= tw__pool_slots(p) || !(gen & 1u) || *tw__pool_gen(p, i) != gen)
        return TW__NIL;
    return i;
}

void tw__pool_destroy(struct tw__pool *p, struct tw__mem *m);

#endif
