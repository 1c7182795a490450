/* pool.h: task entries, their generations, and the free list.
 *
 * An entry is 36 bytes: the deadline, the callback and its argument (what a
 * task is), two 32-bit list links (what O(1) cancel needs) and the 32-bit
 * generation that makes ids safe. Lists are indexed, not pointer-linked,
 * which is what keeps an entry at 36 bytes. The generation sits inside the
 * entry on purpose: a cancel of a random timer among millions then costs
 * one cache miss, not two (measured: 160 -> ~100 ns per W1 pair at 10^6
 * with the generation in a parallel array, which saved 4 bytes a slot).
 *
 * The array is contiguous, so reaching slot i is one multiply-add, and
 * following a list link none (links hold refs, below): the schedule and
 * cancel paths touch up to five slots each, and a slab directory costs
 * five instructions more per touch. The price is known and bounded: when
 * the pool outgrows its capacity it doubles (amortised O(1) per schedule).
 * With the default allocator a block of 1 MiB or more is mapped directly
 * and grows by mremap, which moves its pages rather than its bytes
 * (mem.h); through a user's allocator it copies the array once (at 10^6
 * slots one ~36 MB copy, ~10 ms). Nothing moves while the pool stays under
 * its high-water mark, so a warm timer never pays it again. The list heads
 * of the wheel's buckets sit in the same block, in front of slot 0
 * (below), so making a new level copies the block once, whatever the
 * allocator: at most once per level in a timer's life.
 * Slots never used are not touched, so unused capacity costs address
 * space, not resident memory.
 *
 * Generations: the low two bits give the slot's state: 0 free, 1 a plain
 * task, 2 a task with an extra record (keyed or periodic); 3 is never
 * used. Freeing moves on to the next multiple of four, so an id
 * (generation << 32 | slot) matches its slot only while that task lives,
 * and the id itself tells cancel whether the task is plain: the fast path
 * reads no more of the entry than its links and generation. The encoding
 * is chosen so that, once the id's generation equals the slot's, one bit
 * (bit 0) sends cancel down the plain path; a free slot (0) and an extra
 * task (2) share the rare branch, where bit 1 tells them apart. A slot whose
 * generation would wrap is retired instead of reused: no id is ever
 * reissued. */
#ifndef TW_POOL_H
#define TW_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "mem.h"
#include "twheel.h"

#define TW__POOL_HOT static inline __attribute__((always_inline))

/* Two number spaces. A slot (0, 1, 2, ...) is what ids, the free list and
 * the generation checks use. A ref is what list links hold: the byte
 * offset of a link from slot 0, in 4-byte units, plus one. Slot i has ref
 * 9i + 1 (36 bytes = 9 units); list heads (sentinels) are bare 8-byte
 * links laid out in front of slot 0, at refs -3, -5, -7, ... (read as
 * uint32: 0xFFFFFFFD downwards). So following a link, whichever it names,
 * is one addressing mode, entries + 4 * (int32_t)ref - 4, with no
 * multiply: unlinking and appending need no "is this a list head?" test
 * and no scaling (slot links cost two LEAs per link followed; measured
 * under callgrind: 3 instructions fewer per W1 pair, 2 of them in
 * cancel). -1 (TW__NIL) names nothing; if followed, it reaches the 8
 * spare bytes just before slot 0. Slots stop where a ref would reach the
 * sign bit. */
#define TW__SENT 0x80000000u         /* set on sentinel (list head) refs */
#define TW__NIL 0xFFFFFFFFu          /* no element */
#define TW__EXPIRED_SENT 0xFFFFFFFDu /* the expired list's sentinel */
/* Slots stop where a ref would reach the sign bit ((2^31 - 2) / 9), and
 * where the pool's bytes would pass half of what size_t can count: that
 * second bound is the lower one on 32-bit targets (59,652,323 slots, a
 * 2 GiB pool), where the sizes below would otherwise wrap. */
#define TW__REF_SLOTS 238609294u
#define TW__MAX_SLOTS                                                          \
    (SIZE_MAX / 72 < TW__REF_SLOTS ? (uint32_t)(SIZE_MAX / 72) : TW__REF_SLOTS)
#define TW__POOL_MIN 256u            /* first capacity */

struct tw__link {
    uint32_t next, prev;
};

/* 36 bytes, 4-byte aligned: the three 8-byte fields sit at offsets 12, 20
 * and 28, so they are not 8-byte aligned. x86-64 and AArch64 load and store
 * those at full speed unless one crosses a cache line (each does at one
 * position in 16). A 40-byte entry would span two lines as often as this
 * one does (at half the positions, either way: the walks of wheel.c
 * prefetch both ends), and W1 and W2 measured the same within noise;
 * packing saves a tenth of the pool (W4: 40.2 -> 36.2 B per timer), and
 * reaching slot i is still two instructions (i * 9 * 4). Cancel reads
 * link and gen only: those 12 bytes share one cache line at 14 of every
 * 16 positions. No code takes the address of a packed 8-byte field. */
struct __attribute__((packed, aligned(4))) tw__entry {
    struct tw__link link;
    uint32_t gen;      /* low two bits: 0 free, 1 plain task, 2 extra */
    /* On a 32-bit target the two pointers are padded to 8 bytes, so that
     * an entry is 36 bytes (9 ref units) everywhere and the ref arithmetic
     * above has one form. That wastes 8 bytes a slot there; a 28-byte
     * entry would need refs in units of 7. */
#if UINTPTR_MAX > 0xFFFFFFFFu
    tw_fn fn;
    void *arg;
#else
    tw_fn fn;
    uint32_t fn_pad_;
    void *arg;
    uint32_t arg_pad_;
#endif
    uint64_t deadline; /* ns */
};

_Static_assert(sizeof(struct tw__entry) == 36, "entry must stay 36 bytes");

struct tw__pool {
    struct tw__entry *entries; /* slot 0; sentinels sit before it */
    uint32_t front;     /* sentinels before slot 0 (the block's head) */
    uint32_t used;      /* slots ever handed out: [0, used) are valid */
    uint32_t cap;       /* capacity of the array */
    uint32_t free_head; /* free list through link.next (TW__NIL: none) */
    uint32_t max_slots; /* cap on slots (shards divide the id space) */
    uint64_t retired;
};

TW__POOL_HOT struct tw__entry *tw__pool_entry(const struct tw__pool *p, uint32_t i)
{
    return p->entries + i;
}

/* The ref of slot i, and the slot of an entry's ref. */
TW__POOL_HOT uint32_t tw__ref(uint32_t i)
{
    return 9u * i + 1u;
}

TW__POOL_HOT uint32_t tw__ref_slot(uint32_t r)
{
    return (r - 1u) * 0x38E38E39u; /* exact division by 9: 9 * this == 1 mod 2^32 */
}

TW__POOL_HOT uint32_t *tw__pool_gen(const struct tw__pool *p, uint32_t i)
{
    return &p->entries[i].gen;
}

TW__POOL_HOT uint32_t tw__pool_slots(const struct tw__pool *p)
{
    return p->used;
}

/* The link that ref r names, an entry's or a list head's. */
TW__POOL_HOT struct tw__link *tw__pool_link(const struct tw__pool *p, uint32_t r)
{
    return (struct tw__link *)((char *)p->entries + 4 * (int64_t)(int32_t)r - 4);
}

/* The entry that ref r names (r must name an entry). */
TW__POOL_HOT struct tw__entry *tw__ref_entry(const struct tw__pool *p, uint32_t r)
{
    return (struct tw__entry *)tw__pool_link(p, r);
}

/* Makes room for `nsent` list heads in all (refs down to -1 - 2 * nsent;
 * new ones uninitialised), moving the block: every entry pointer taken
 * before is stale. 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow_front(struct tw__pool *p, struct tw__mem *m, uint32_t nsent);

/* Makes room for one more slot (doubling). 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow(struct tw__pool *p, struct tw__mem *m);
/* Makes room for `want` slots in all. 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow_to(struct tw__pool *p, struct tw__mem *m, uint64_t want);

TW__POOL_HOT int tw__pool_reserve(struct tw__pool *p, struct tw__mem *m)
{
    return (p->free_head != TW__NIL || p->used < p->cap) ? 0 : tw__pool_grow(p, m);
}

#define TW__GEN_PLAIN 1u
#define TW__GEN_EXTRA 2u

/* Takes a free slot (one must be reserved) for a task of class cls
 * (TW__GEN_PLAIN or TW__GEN_EXTRA), which its generation then shows. */
TW__POOL_HOT uint32_t tw__pool_take(struct tw__pool *p, uint32_t *gen, uint32_t cls)
{
    uint32_t i = p->free_head;
    if (__builtin_expect(i != TW__NIL, 1)) {
        p->free_head = p->entries[i].link.next;
    } else {
        i = p->used++; /* a slot never used: generation 0, free */
        p->entries[i].gen = 0;
    }
    *gen = p->entries[i].gen += cls;
    return i;
}

/* Returns a slot; its generation moves to the next multiple of four, so
 * every id naming it is stale from now on. */
TW__POOL_HOT void tw__pool_put(struct tw__pool *p, uint32_t i)
{
    uint32_t *g = &p->entries[i].gen;
    if (__builtin_expect((*g = (*g | 3u) + 1u) == 0, 0)) { /* wrapped: retire */
        p->retired++;
        return;
    }
    p->entries[i].link.next = p->free_head;
    p->free_head = i;
}

/* The slot named by (i, gen) if that task is alive, else TW__NIL. */
TW__POOL_HOT uint32_t tw__pool_lookup(const struct tw__pool *p, uint32_t i,
                                      uint32_t gen)
{
    if (i >= p->used || !(gen & 3u) || p->entries[i].gen != gen)
        return TW__NIL;
    return i;
}

void tw__pool_destroy(struct tw__pool *p, struct tw__mem *m);

#endif
