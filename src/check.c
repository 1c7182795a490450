/* check.c: tw_check, the invariant checker that tests and fuzzers call.
 *
 * It re-derives everything the engine relies on from scratch: the heap's
 * order and back-pointers, each bucket's list, each task's placement (the
 * never-early rule in particular), the free list, the counts, the keys. */
#include <errno.h>
#include <stdlib.h>

#include "timer.h"

struct ctx {
    FILE *out;
    int bad;
    uint32_t shard;
    const struct tw__engine *e; /* the engine being checked */
    uint64_t dead_listed;       /* deferred cancels found in the lists */
};

/* Whether slot i waits in the engine's ring of deferred cancels. */
static int deferred(const struct tw__engine *e, uint32_t i)
{
    for (uint32_t k = 0; k < TW__DEFER; k++)
        if (e->defer[k] == i)
            return 1;
    return 0;
}

#define FAIL(c, ...)                                                     \
    do {                                                                 \
        (c)->bad++;                                                      \
        if ((c)->out) {                                                  \
            fprintf((c)->out, "tw_check: shard %u: ", (c)->shard);       \
            fprintf((c)->out, __VA_ARGS__);                              \
            fputc('\n', (c)->out);                                       \
        }                                                                \
    } while (0)

/* One slot on the free list: in range, and free. Returns -1 when the walk
 * must stop (a slot out of range, or more slots than the pool holds). */
static int free_slot(struct ctx *c, const struct tw__pool *p, uint32_t i,
                     uint64_t *count, uint64_t limit, uint64_t *seen)
{
    if (i >= tw__pool_slots(p) || ++*count > limit) {
        FAIL(c, "free list broken at %u", i);
        return -1;
    }
    if (*tw__pool_gen(p, i) & 3u)
        FAIL(c, "slot %u is on the free list but in use", i);
    if (deferred(c->e, i))
        FAIL(c, "slot %u is on the free list but its unlink is deferred", i);
    if (seen && (seen[i / 64] & (1ull << (i % 64))))
        FAIL(c, "slot %u is on the free list twice", i);
    if (seen)
        seen[i / 64] |= 1ull << (i % 64);
    return 0;
}

/* Walks a list; returns the number of live entries, checking links and
 * calling on_entry for each; a deferred cancel (still listed, its
 * generation stale) is counted in c->dead_listed instead. Stops (and
 * reports) after `limit` steps. */
static uint64_t walk(struct ctx *c, struct tw__engine *e, uint32_t self,
                     uint64_t limit, void (*on_entry)(struct ctx *, struct tw__engine *,
                                                      uint32_t, void *),
                     void *data)
{
    uint64_t n = 0, steps = 0;
    uint32_t prev = self;
    for (uint32_t r = tw__link_at(e, self)->next; r != self;) {
        if (r & TW__SENT) {
            FAIL(c, "list %#x reaches foreign sentinel %#x", self, r);
            return n;
        }
        uint32_t i = tw__ref_slot(r);
        if (i >= tw__pool_slots(&e->pool) || tw__ref(i) != r) {
            FAIL(c, "list %#x holds ref %u, not a slot's", self, r);
            return n;
        }
        if (++steps > limit) {
            FAIL(c, "list %#x does not close", self);
            return n;
        }
        struct tw__entry *en = tw__pool_entry(&e->pool, i);
        if (en->link.prev != prev)
            FAIL(c, "slot %u: prev %u, expected %u", i, en->link.prev, prev);
        if (!(*tw__pool_gen(&e->pool, i) & 3u)) {
            if (deferred(e, i))
                c->dead_listed++;
            else
                FAIL(c, "slot %u is listed but free", i);
            prev = r;
            r = en->link.next;
            continue;
        }
        n++;
        if (on_entry)
            on_entry(c, e, i, data);
        prev = r;
        r = en->link.next;
    }
    if (tw__link_at(e, self)->prev != prev)
        FAIL(c, "list %#x: tail %u, expected %u", self, tw__link_at(e, self)->prev, prev);
    return n;
}

struct placement {
    uint32_t level;
    uint64_t exp;
    uint64_t keyed;
    uint32_t sub;
};

static void check_placed(struct ctx *c, struct tw__engine *e, uint32_t i, void *data)
{
    struct placement *p = data;
    struct tw__entry *en = tw__pool_entry(&e->pool, i);
    uint64_t dt = tw__ticks_ceil(e, en->deadline);
    if (tw__is_extra(en)) {
        struct tw__extra *x = en->arg;
        if (x->slot != i)
            FAIL(c, "slot %u: extra record names slot %u", i, x->slot);
        if (x->state != TW__X_IDLE)
            FAIL(c, "slot %u: listed while its callback runs", i);
        if (x->key)
            p->keyed++;
    }
    if (p->level == UINT32_MAX) { /* expired list: due (a drain: anything) */
        if (dt > e->cur && !e->draining)
            FAIL(c, "slot %u: due tick %llu on the expired list at tick %llu", i,
                 (unsigned long long)dt, (unsigned long long)e->cur);
        return;
    }
    if ((i & (TW__SUBS - 1)) != p->sub)
        FAIL(c, "slot %u is in list %u of its bucket", i, p->sub);
    /* A plain task whose deadline tw_reschedule pushed later stays in its
     * bucket, and may be due after it ends (wheel.c, "Pushing a deadline
     * later"): only the bucket's start binds it. Collection looks at each
     * task's tick before it fires it, so that is what keeps it from firing
     * early. Other tasks are always moved, and sit in the bucket that
     * holds their tick, but for a periodic task once held short of a
     * tick past every level made (tw__wheel_place), whose bucket, too,
     * binds it only by its start. */
    int pushed = !tw__is_extra(en) || ((struct tw__extra *)en->arg)->held;
    if (p->level == 0) {
        if (dt > p->exp && !pushed)
            FAIL(c, "slot %u: due tick %llu in level-0 bucket of tick %llu", i,
                 (unsigned long long)dt, (unsigned long long)p->exp);
        return;
    }
    uint64_t width = (uint64_t)1 << (e->bits * p->level);
    if (dt < p->exp || (dt - p->exp >= width && !pushed))
        FAIL(c, "slot %u: due tick %llu outside level-%u bucket [%llu, +%llu)", i,
             (unsigned long long)dt, p->level, (unsigned long long)p->exp,
             (unsigned long long)width);
}

static void check_engine(struct ctx *c, tw_timer *t, struct tw__engine *e)
{
    uint64_t limit = (uint64_t)tw__pool_slots(&e->pool) + 1;
    uint64_t listed = 0, keyed = 0;

    /* the deferred cancels (wheel.c, "Deferred unlink"): slots in range,
     * each once, their generations a cancel's (free, never the wrapped 0:
     * that slot is retired at once), each still in a list (the walks
     * below count them), none on the free list */
    c->e = e;
    c->dead_listed = 0;
    uint32_t ndefer = 0;
    if (e->defer_pos >= TW__DEFER)
        FAIL(c, "deferred cancels: position %u of %u", e->defer_pos, TW__DEFER);
    for (uint32_t k = 0; k < TW__DEFER; k++) {
        uint32_t i = e->defer[k];
        if (i == TW__NIL)
            continue;
        ndefer++;
        if (i >= tw__pool_slots(&e->pool)) {
            FAIL(c, "deferred cancel %u names slot %u of %u", k, i, tw__pool_slots(&e->pool));
            continue;
        }
        if (*tw__pool_gen(&e->pool, i) & 3u)
            FAIL(c, "slot %u: its cancel is deferred but it is in use", i);
        else if (!*tw__pool_gen(&e->pool, i))
            FAIL(c, "slot %u: its cancel is deferred but its generation wrapped", i);
        for (uint32_t q = 0; q < k; q++)
            if (e->defer[q] == i)
                FAIL(c, "slot %u is deferred twice", i);
    }
    /* tw__engine_settle's test */
    if (ndefer && !tw__engine_deferring(e))
        FAIL(c, "%u deferred cancels, but none just before position %u", ndefer,
             e->defer_pos);

    /* the delay queue */
    for (uint32_t pos = 0; pos < e->dq.n; pos++) {
        const struct tw__dq_node *nd = &e->dq.h[pos];
        if (pos && tw__dq_less(nd, &e->dq.h[(pos - 1) / 2]))
            FAIL(c, "heap order broken at %u", pos);
        if ((nd->bn >> e->sbits) >= e->nlevels) {
            FAIL(c, "heap %u names bucket %u of no level", pos, nd->bn);
            continue;
        }
        if (tw__bucket_at(e, nd->bn)->heap_index != pos)
            FAIL(c, "bucket %u: heap_index %u, found at %u", nd->bn,
                 tw__bucket_at(e, nd->bn)->heap_index, pos);
    }

    /* the levels' limits follow the clock */
    for (uint32_t k = 0; k < e->max_levels; k++)
        if (e->lv[k].last != tw__wheel_level_last(e, k, e->cur) ||
            e->lv[k].shift != e->bits * k || e->lv[k].sb != tw__sent(k << e->sbits, 0))
            FAIL(c, "level %u: last tick %llu (expected %llu), shift %u, first head %#x",
                 k, (unsigned long long)e->lv[k].last,
                 (unsigned long long)tw__wheel_level_last(e, k, e->cur), e->lv[k].shift,
                 e->lv[k].sb);

    /* every bucket */
    for (uint32_t k = 0; k < e->nlevels; k++) {
        uint32_t shift = e->bits * k;
        for (uint32_t s = 0; s <= e->smask; s++) {
            uint32_t bn = (k << e->sbits) | s;
            struct tw__bucket *b = &e->level[k][s];
            uint32_t mask = 0;
            for (uint32_t j = 0; j < TW__SUBS; j++)
                mask |= (uint32_t)(tw__link_at(e, tw__sent(bn, j))->next !=
                                   tw__sent(bn, j)) << j;
            if (mask != b->mask)
                FAIL(c, "bucket %u: list mask %#x, lists say %#x", bn, b->mask, mask);
            int empty = mask == 0;
            if (b->heap_index == TW__NOT_QUEUED) {
                if (!empty)
                    FAIL(c, "bucket %u holds tasks but is not queued", bn);
                continue;
            }
            if (b->heap_index >= e->dq.n || e->dq.h[b->heap_index].bn != bn) {
                FAIL(c, "bucket %u: bad heap_index %u", bn, b->heap_index);
                continue;
            }
            if (empty)
                FAIL(c, "bucket %u is queued but empty", bn);
            uint64_t exp = e->dq.h[b->heap_index].exp;
            if (((exp >> shift) & e->smask) != s || ((exp >> shift) << shift) != exp)
                FAIL(c, "bucket %u: expiration %llu does not map to it", bn,
                     (unsigned long long)exp);
            if (k == 0 ? exp < e->cur : exp <= e->cur) {
                FAIL(c, "bucket %u: expiration %llu is behind the clock %llu", bn,
                     (unsigned long long)exp, (unsigned long long)e->cur);
            } else if ((exp >> shift) - (e->cur >> shift) >= 2u * (uint64_t)e->wsize) {
                /* fewer than 2W blocks ahead, so that no two blocks in use
                 * share a bucket (the distance is taken only from a bucket
                 * ahead of the clock: it would wrap from one behind) */
                FAIL(c, "bucket %u: expiration %llu beyond its level's span", bn,
                     (unsigned long long)exp);
            }
            struct placement p = { k, exp, 0, 0 };
            for (uint32_t j = 0; j < TW__SUBS; j++) {
                p.sub = j;
                listed += walk(c, e, tw__sent(bn, j), limit, check_placed, &p);
            }
            keyed += p.keyed;
        }
    }
    struct placement px = { UINT32_MAX, 0, 0, 0 };
    listed += walk(c, e, TW__EXPIRED_SENT, limit, check_placed, &px);
    keyed += px.keyed;

    /* slots: allocated = listed + running periodic tasks */
    uint64_t allocated = 0, running = 0, running_live = 0, freecount = 0, extras = 0;
    for (uint32_t i = 0; i < tw__pool_slots(&e->pool); i++) {
        uint32_t g = *tw__pool_gen(&e->pool, i);
        struct tw__entry *en = tw__pool_entry(&e->pool, i);
        if ((g & 3u) == 3u)
            FAIL(c, "slot %u: generation %#x of no state", i, g);
        if (!(g & 3u))
            continue;
        allocated++;
        if (((g & 3u) == TW__GEN_EXTRA) != (en->fn == tw__extra_marker))
            FAIL(c, "slot %u: generation %#x disagrees with its callback", i, g);
        extras += (uint64_t)tw__is_extra(en);
        if (tw__is_extra(en) && ((struct tw__extra *)en->arg)->state != TW__X_IDLE) {
            running++;
            running_live += (uint64_t)tw__extra_live(en->arg);
            /* taken out of its list to fire (tw__take_job): links to
             * nowhere until it is placed again, so that no stale link
             * points into a list it has left */
            if (en->link.next != TW__NIL || en->link.prev != TW__NIL)
                FAIL(c, "slot %u: its callback runs, but its links name %#x and %#x", i,
                     en->link.next, en->link.prev);
        }
    }
    if (extras != e->extras)
        FAIL(c, "%llu slots hold keyed or periodic tasks, %llu extra records counted",
             (unsigned long long)extras, (unsigned long long)e->extras);
    if (running != e->taken)
        FAIL(c, "%llu periodic tasks running or waiting to, %u counted",
             (unsigned long long)running, e->taken);
    if (allocated != listed + running)
        FAIL(c, "%llu slots in use, %llu listed, %llu running", (unsigned long long)allocated,
             (unsigned long long)listed, (unsigned long long)running);
    if (tw__engine_pending(e) != listed + running_live)
        FAIL(c, "pending %llu, but %llu tasks live", (unsigned long long)tw__engine_pending(e),
             (unsigned long long)(listed + running_live));
    /* the free list (pool.h): the spare, the magazine, then each block's
     * head and the slots it holds, then any rewound slots. A slot listed
     * twice (a double free) is caught by the count below, and, when
     * another is lost with it, by a bitmap of the slots seen: plain
     * malloc, not the timer's allocator, whose tests count its calls;
     * without memory for it that one test is skipped. */
    const struct tw__pool *pl = &e->pool;
    uint64_t *freeseen = calloc(((size_t)tw__pool_slots(pl) + 63) / 64 + 1, sizeof(uint64_t));
    if (pl->spare != TW__NIL)
        free_slot(c, pl, pl->spare, &freecount, limit, freeseen);
    if (pl->nmag > TW__MAG)
        FAIL(c, "free list broken: the magazine holds %u slots", pl->nmag);
    for (uint32_t k = 0; k < pl->nmag && k < TW__MAG; k++)
        if (free_slot(c, pl, pl->mag[k], &freecount, limit, freeseen))
            break;
    uint32_t h = pl->free_head;
    while (h < TW__REWOUND) {
        if (free_slot(c, pl, h, &freecount, limit, freeseen))
            break;
        const struct tw__free_block *b = tw__pool_block(pl, h);
        /* only the head block may be less than full (pool.h) */
        if (b->n > TW__FREE_SLOTS || (h != pl->free_head && b->n != TW__FREE_SLOTS)) {
            FAIL(c, "free list broken at block %u: it holds %u slots", h, b->n);
            break;
        }
        uint32_t k = 0;
        while (k < b->n && !free_slot(c, pl, b->slot[k], &freecount, limit, freeseen))
            k++;
        if (k < b->n)
            break;
        h = b->next;
    }
    /* after a rewind, the blocks end in TW__REWOUND while slots from
     * `rewound` up are left, and those follow in order */
    if (h == TW__REWOUND) {
        if (pl->rewound >= pl->used)
            FAIL(c, "free list ends in the rewound slots, but %u of %u are left",
                 pl->rewound, pl->used);
        for (uint32_t i = pl->rewound; i < pl->used; i++)
            if (free_slot(c, pl, i, &freecount, limit, freeseen))
                break;
    }
    free(freeseen);
    if (c->dead_listed != ndefer)
        FAIL(c, "%u deferred cancels, %llu found in the lists", ndefer,
             (unsigned long long)c->dead_listed);
    if (allocated + freecount + ndefer + e->pool.retired != tw__pool_slots(&e->pool))
        FAIL(c, "slots: %llu used + %llu free + %u deferred + %llu retired != %u",
             (unsigned long long)allocated, (unsigned long long)freecount, ndefer,
             (unsigned long long)e->pool.retired, tw__pool_slots(&e->pool));

    /* fresh slots are taken only below fault_at, and that stays in the
     * pool (pool.h) */
    if (pl->used > pl->fault_at || pl->fault_at > pl->cap)
        FAIL(c, "pool: %u used, populated to %u, capacity %u", pl->used, pl->fault_at, pl->cap);
    /* a reservation holds the block it was made for (mem.h) */
    if (pl->reserved && pl->reserved < ((size_t)pl->front + pl->cap) * sizeof(struct tw__entry))
        FAIL(c, "pool: a reservation of %zu bytes under its %u slots", pl->reserved, pl->cap);
    /* huge pages are asked for over a reservation only (pool.c) */
    if (pl->huge != 0 && pl->huge != TW__HUGE_NEVER && !(pl->huge == 1 && pl->reserved))
        FAIL(c, "pool: huge page state %d with a reservation of %zu bytes", pl->huge,
             pl->reserved);

    /* keys: every key names a live keyed task, and every such task is in */
    if (e->keys.n != keyed)
        FAIL(c, "key map holds %u keys, %llu keyed tasks listed", e->keys.n,
             (unsigned long long)keyed);
    uint32_t seen = 0;
    for (uint32_t s = 0; s < e->keys.cap; s++) {
        struct tw__extra *x = e->keys.slots[s];
        if (!x)
            continue;
        seen++;
        if (x->slot >= tw__pool_slots(&e->pool) ||
            tw__pool_entry(&e->pool, x->slot)->arg != x ||
            !(*tw__pool_gen(&e->pool, x->slot) & 3u))
            FAIL(c, "key map entry %u names a dead task", s);
        else if (tw__keymap_find(e, x->key, x->keylen, x->hash) != x)
            FAIL(c, "key map entry %u cannot be found by its key", s);
    }
    if (seen != e->keys.n)
        FAIL(c, "key map count %u, %u present", e->keys.n, seen);
    (void)t;
}

int tw_check(tw_timer *t, FILE *report)
{
    if (!t)
        return -EINVAL;
    struct ctx c = { report, 0, 0 };
    for (uint32_t s = 0; s < t->nshards; s++) {
        c.shard = s;
        tw__shard_lock(t, &t->shards[s]);
        check_engine(&c, t, &t->shards[s].eng);
        tw__shard_unlock(t, &t->shards[s]);
    }
    return c.bad ? -EFAULT : 0;
}
