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
 * in a reservation of address space and grows in place, moving nothing;
 * past the reservation, by mremap, which moves its pages rather than its
 * bytes (mem.h); through a user's allocator it copies the array once (at 10^6
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
#include "wrap.h"

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
#define TW__REWOUND 0xFFFFFFFEu      /* the free list's end after a rewind */
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

#define TW__HUGE_NEVER (-1)

/* Free slots the pool holds behind the spare, before the blocks (see "The
 * free list" below): 15, so that they and their count fill one line, and
 * a burst of 16 cancels (the spare and the magazine) is taken whole. */
#define TW__MAG 15u

struct tw__pool {
    struct tw__entry *entries; /* slot 0; sentinels sit before it */
    uint32_t front;     /* sentinels before slot 0 (the block's head) */
    uint32_t used;      /* slots ever handed out: [0, used) are valid */
    uint32_t cap;       /* capacity of the array */
    uint32_t spare;     /* a free slot outside the blocks (TW__NIL: none) */
    uint32_t free_head; /* the free list's head block (below; TW__NIL: none,
                         * TW__REWOUND: only the rewound slots) */
    uint32_t rewound;   /* after a rewind (below), [rewound, used) are free
                         * and in no block while the blocks end in
                         * TW__REWOUND */
    uint32_t max_slots; /* cap on slots (shards divide the id space) */
    uint32_t fault_at;  /* fresh slots below it are resident or need not be
                         * populated: used <= fault_at <= cap (below) */
    uint64_t retired;
    size_t reserved;    /* the block's reservation in bytes (mem.h) */
    uint32_t front_max; /* the front every level's heads take: a pool
                         * whose slots take TW__MAP_MIN or more is given
                         * it whole, so that a level made once the pool
                         * is big does not copy the pool (its heads sit
                         * before slot 0) under a threaded shard's lock;
                         * the room not yet used is never written, so a
                         * mapped block holds no memory for it until a
                         * level's heads are */
    int huge;           /* huge pages (pool.c): 0 not asked for yet, 1
                         * asked for, TW__HUGE_NEVER never (a threaded
                         * shard's pool, and a manual one without
                         * tw_options.huge_pages) */
    /* on a line after the hot fields above (which W1's schedules and
     * cancels read), since only adds that do not follow a cancel of
     * their own read it */
    uint32_t nmag;         /* slots held in mag, 0 to TW__MAG (below) */
    uint32_t mag[TW__MAG]; /* free slots behind the spare, the last
                            * pushed on top */
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
    /* exact division by 9: 9 * this == 1 mod 2^32 */
    return tw__wrap_mul32(r - 1u, 0x38E38E39u);
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

/* The entries before slot 0 that nsent list heads take. */
uint32_t tw__pool_front_for(uint32_t nsent);

/* Makes room for one more slot (doubling). 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow(struct tw__pool *p, struct tw__mem *m);
/* Makes room for `want` slots in all. 0 or -ENOMEM (pool unchanged). */
int tw__pool_grow_to(struct tw__pool *p, struct tw__mem *m, uint64_t want);

TW__POOL_HOT int tw__pool_reserve(struct tw__pool *p, struct tw__mem *m)
{
    /* free_head: blocks, or TW__REWOUND (rewound slots) */
    return (p->spare != TW__NIL || p->nmag || p->free_head != TW__NIL || p->used < p->cap)
               ? 0
               : tw__pool_grow(p, m);
}

#define TW__GEN_PLAIN 1u
#define TW__GEN_EXTRA 2u

/* Populating the pool ahead of its high-water mark.
 *
 * A slot never used before lies on a page no one has touched, and its
 * first write takes a page fault. On the VMs these benchmarks run on a
 * fault costs 1.6 to 14 us (hosts of the same kind differ by that much;
 * the trap, not the zeroing, is what costs), so with 113 slots a 4 KiB
 * page a cold schedule paid 14 to 124 ns for it, more than the rest of
 * the schedule. madvise(MADV_POPULATE_WRITE) makes pages resident without
 * a fault each: 0.6 us a page in 128 KiB calls where touching took 10.
 * So when a fresh slot reaches fault_at the pool populates the next
 * TW__POPULATE bytes and moves fault_at past them: at most that much
 * resident ahead of use (0.13 B a timer at 10^6). A/B on that host (W2,
 * cold, three alternating rounds; benchmarks/results/history.md): a
 * manual schedule 98-102 -> 32-41 ns, a threaded one 217-244 -> 134-150.
 * The fast paths take fresh slots only below fault_at and leave the rest
 * to the general path (tw__pool_fresh), so they test no more than they
 * did when they compared with cap.
 * Only a block the pool mapped itself (mem.h: the default allocator, 1 MiB
 * and up, Linux) is populated: a user's allocator's memory is not ours to
 * advise. For any other block, and once the call fails (kernels before
 * 5.14, or no memory), fault_at is cap and pages fault in one by one, as
 * before, until the pool next grows. In threaded mode the call runs under
 * the shard's lock, as the faults did: one call of ~20-40 us every 3,640
 * fresh slots, in place of 32 faults of 1.6-14 us. */
#define TW__POPULATE ((size_t)128 << 10)

/* Populates from slot fault_at on (see above); fault_at moves past it. */
void tw__pool_populate(struct tw__pool *p);

/* Takes a slot never used (used < cap): generation 0, free. */
TW__POOL_HOT uint32_t tw__pool_fresh(struct tw__pool *p)
{
    if (p->used >= p->fault_at)
        tw__pool_populate(p);
    uint32_t i = p->used++;
    p->entries[i].gen = 0;
    return i;
}

/* The free list: a spare, a magazine, then blocks kept inside free
 * entries.
 *
 * The spare is one free slot held in the pool itself: a push fills it when
 * it is empty, a pop empties it first. A cancel followed by a schedule,
 * the common case (W1), so reuses the slot just freed, still in the cache,
 * at the cost of the plain list it replaced (callgrind: 141 instructions a
 * W1 pair, either way).
 *
 * The magazine is TW__MAG more slots held in the pool, a stack: a pop
 * that finds the spare gone takes its top, and a push that finds the
 * spare taken puts a slot there when the head block (below) is full or
 * there is none. Adds that do not each follow a cancel (a burst of
 * cancels, then a burst of adds: an event loop's batch of replies, then
 * its batch of requests) so take their slots inline, on the fast path
 * (timer.c, insert_fast), from the pool's own line, still in the cache,
 * where the blocks' walk is out of line: callgrind at N = 10^4, a W1b
 * pair (bursts of 16) took 169 instructions against 210, threaded 305
 * against 367.
 * What it costs: W1's pairs take the spare and never reach it (153, as
 * before); a schedule that takes a slot never used tests it first (3
 * instructions), and so does one push in TW__FREE_SLOTS + 1 of a burst
 * of firings, when the head block is full: W2 on a simulated clock 330
 * instructions a timer against 327 (history.md, "A magazine of free
 * slots"). The head block is filled first so that a burst of firings,
 * which pushes a slot each, keeps the push it had; the magazine still
 * takes a burst of cancels whole, as there are no blocks between bursts.
 * Pops take the magazine before the blocks, so the order is last in,
 * first out within each, not across them (test_internal.c,
 * test_free_list_blocks, gives it).
 *
 * Behind it, free slots are kept in blocks: a block's head is a free
 * entry whose link.next names the next block's head, whose link.prev
 * counts the slots it holds (0 to TW__FREE_SLOTS), and whose fn, arg and
 * deadline bytes hold those slots' numbers. A pop takes the head block's
 * last slot, or the head itself when the block is empty; a push stores
 * the slot in the head block, or makes it the new head when the block is
 * full. Every block but the head is full. No memory is added.
 *
 * Why: a pop from a plain list through link.next reads the slot it takes
 * to learn the next one. After a burst of firings the list lies in the
 * order the timers fired, scattered over memory, so each schedule waited
 * on the last one's cache miss, a DRAM load after another (W2 warm on a
 * 2-vCPU EPYC VM: 160 to 167 ns a schedule, against ~26 cold). The head
 * block stays in the cache, so a pop learns its slot without touching it,
 * and prefetches a slot a few pops on (two, at first): 48 to 57 ns a
 * warm schedule in the same A/B runs, W2 warm 0.302-0.316 -> 0.171-0.198
 * CPU s per million fired (benchmarks/results/history.md).
 *
 * The prefetch crosses into the next block, and reaches TW__FREE_SLOTS
 * pops on. Every block below the head is full, so once the next block's
 * line is in, the slots of its pops are known: each pop but a full
 * block's first prefetches one of them, and the line of the block after it
 * (both ends: 36 bytes may span two), which the pops of the next block
 * will read in their turn. A prefetch that stopped at the block's end
 * left 2 of every 7 pops unprefetched and reached the next block's line
 * one pop before it was read: a profile of warm W2 put half of
 * tw_schedule's samples on its first read of the slot. Crossing, three
 * pops on, the adding thread's warm schedules took 43 ns against 63
 * (manual) and 98 against 141 (threaded, tw_schedule_at), medians of six
 * A/B rounds (history.md, "The free list's prefetch crosses blocks");
 * six pops on, with the line two blocks ahead, 31 against 39 (manual)
 * and 40 against 48 (tw_schedule_at), six rounds ("The free list's pop
 * prefetches six pops ahead"). Taken out on the Zen 5 guest where the
 * cancel's prefetches cost time, warm W2's adds took 181.6 ns against
 * 44.3 ("The free list's and the walk's prefetches, taken out again").
 * Only the step to the next block follows a link, once every
 * TW__FREE_SLOTS + 1 pops. The spare prefetches nothing: W1's schedules
 * all take it. The fast path (timer.c, insert_fast) takes the spare, the
 * magazine's top or a slot never used inline, and this walk out of line
 * (its rc 3). */
#define TW__FREE_SLOTS 6u

struct __attribute__((packed, aligned(4))) tw__free_block {
    uint32_t next;  /* the next block's head slot (TW__NIL: none) */
    uint32_t n;     /* slots held below */
    uint32_t gen;   /* the head's own generation, as in any entry */
    uint32_t slot[TW__FREE_SLOTS];
};

_Static_assert(sizeof(struct tw__free_block) == sizeof(struct tw__entry),
               "a free block fills an entry");
/* A block lies over its head slot's entry, and an id's check reads that
 * slot's generation through the entry: the two must be one field. (The
 * size alone cannot tell: aligned(4) rounds a block two bytes short up.) */
_Static_assert(offsetof(struct tw__free_block, gen) == offsetof(struct tw__entry, gen),
               "a block's head keeps its entry's generation in place");
_Static_assert(sizeof(((struct tw__free_block *)0)->gen) == sizeof(((struct tw__entry *)0)->gen),
               "a block's head keeps its entry's whole generation");

TW__POOL_HOT struct tw__free_block *tw__pool_block(const struct tw__pool *p, uint32_t i)
{
    return (struct tw__free_block *)(void *)(p->entries + i);
}

/* Takes the spare: TW__NIL when there is none. */
TW__POOL_HOT uint32_t tw__pool_pop_spare(struct tw__pool *p)
{
    uint32_t s = p->spare;
    p->spare = TW__NIL;
    return s;
}

/* The rewind: when a timer empties, its free slots are taken in address
 * order again.
 *
 * A W2-like burst (schedule 10^6, let them all fire) leaves the free list
 * in the order the timers fired, which is random over the pool, so every
 * schedule of the next burst takes a slot on a line not touched for a
 * while: a miss each, which the prefetch above only partly hides (W2's
 * manual schedules: ~39 ns on that list, ~11 once rewound; history.md,
 * "The free list rewound when the timer empties"). When no slot is in use,
 * that order is worth nothing: tw__pool_rewind forgets it, in O(1), and
 * the next pops take slots 0, 1, 2, ... as fresh ones are taken, which
 * the hardware prefetcher follows. The blocks end in TW__REWOUND, not
 * TW__NIL, while [rewound, used) are left: slots freed after the rewind
 * are pushed in blocks on top as before and popped first (they are the
 * warmer ones), and a pop that reaches TW__REWOUND takes the next
 * rewound slot. The push and the fast paths test nothing more: the
 * blocks' end is a compare with TW__REWOUND where it was one with
 * TW__NIL.
 * Known limits: only a wholly empty timer rewinds (a broker that always
 * holds timers never does; the engine tests for it once an advance, not
 * once a free), not one whose only free slot is the spare (a timer of one
 * task at a time keeps its fast path), and never once a slot has been
 * retired (a rewound slot's
 * generation is kept, and a retired one's wrapped to 0, so it would be
 * reused and its ids reissued). The slots keep their generations: an id
 * of a task gone before the rewind stays stale. */
TW__POOL_HOT uint32_t tw__pool_pop_rewound(struct tw__pool *p)
{
    uint32_t i = p->rewound++;
    if (p->rewound == p->used)
        p->free_head = TW__NIL; /* the blocks' end, reached: nothing above */
    return i;
}

/* Forgets the free list's order: call only when no slot is in use. */
void tw__pool_rewind(struct tw__pool *p);

/* Pops a free slot: TW__NIL when the free list is empty. */
TW__POOL_HOT uint32_t tw__pool_pop(struct tw__pool *p)
{
    uint32_t s = tw__pool_pop_spare(p);
    if (__builtin_expect(s != TW__NIL, 1))
        return s;
    if (p->nmag)
        return p->mag[--p->nmag];
    uint32_t h = p->free_head;
    if (__builtin_expect(h >= TW__REWOUND, 0))
        return h == TW__NIL ? h : tw__pool_pop_rewound(p);
    struct tw__free_block *b = tw__pool_block(p, h);
    uint32_t n = b->n, nx = b->next;
    /* Prefetch the slot TW__FREE_SLOTS pops on. Pops take slot[n - 1]
     * down to slot[0], then the head itself, then the next block's,
     * which is full (every block below the head is), from its
     * slot[TW__FREE_SLOTS - 1] down: so the pop that many on takes the
     * next block's slot[n], but for a full block's first pop, whose is
     * this block's head (in the cache: it is read here). The next
     * block's line was prefetched a block ago (the pops of the block
     * before read their next block, and prefetched the line after it, as
     * these do now): in a steady walk no pop reads a line it has not
     * prefetched. A walk entering the full blocks from a short head
     * block (pushes made it) waits for the next block's line at its
     * first pop, perhaps in part for the line after, and is steady from
     * there on. */
    if (n < TW__FREE_SLOTS && nx < TW__REWOUND) {
        const struct tw__free_block *nb = tw__pool_block(p, nx);
        uint32_t after = nb->next;
        __builtin_prefetch(p->entries + nb->slot[n], 1);
        if (after < TW__REWOUND) { /* both ends: it may span two lines */
            __builtin_prefetch(p->entries + after, 1);
            __builtin_prefetch((const char *)(p->entries + after + 1) - 1, 1);
        }
    }
    if (n == 0) { /* the block is empty: its head is the slot */
        p->free_head = nx;
        return h;
    }
    b->n = n - 1;
    return b->slot[n - 1];
}

/* Pushes free slot i (its generation already moved on). */
TW__POOL_HOT void tw__pool_push(struct tw__pool *p, uint32_t i)
{
    if (__builtin_expect(p->spare == TW__NIL, 1)) {
        p->spare = i;
        return;
    }
    uint32_t h = p->free_head;
    if (__builtin_expect(h < TW__REWOUND, 1)) {
        struct tw__free_block *b = tw__pool_block(p, h);
        uint32_t n = b->n;
        if (__builtin_expect(n < TW__FREE_SLOTS, 1)) {
            b->slot[n] = i;
            b->n = n + 1;
            return;
        }
    }
    if (p->nmag < TW__MAG) {
        p->mag[p->nmag++] = i;
        return;
    }
    struct tw__free_block *b = tw__pool_block(p, i);
    b->next = h;
    b->n = 0;
    p->free_head = i;
}

/* Takes a free slot (one must be reserved) for a task of class cls
 * (TW__GEN_PLAIN or TW__GEN_EXTRA), which its generation then shows. */
TW__POOL_HOT uint32_t tw__pool_take(struct tw__pool *p, uint32_t *gen, uint32_t cls)
{
    uint32_t i = tw__pool_pop(p);
    if (__builtin_expect(i == TW__NIL, 0))
        i = tw__pool_fresh(p);
    *gen = p->entries[i].gen += cls;
    return i;
}

/* Returns a slot; its generation moves to the next multiple of four, so
 * every id naming it is stale from now on. */
TW__POOL_HOT void tw__pool_put(struct tw__pool *p, uint32_t i)
{
    uint32_t *g = &p->entries[i].gen;
    if (__builtin_expect((*g = tw__wrap_add32(*g | 3u, 1u)) == 0, 0)) { /* wrapped: retire */
        p->retired++;
        return;
    }
    tw__pool_push(p, i);
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
