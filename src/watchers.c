/* watchers.c: the purgatory's watch lists, sharded by key hash with one
 * lock per shard (Kafka uses 512 shards). Each shard is a chained hash
 * table of keys; each key holds an array of op references, each beside
 * its op's completion word (op_states.c). Nothing here runs user code, so a
 * shard lock is never held while try_complete or on_complete runs. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "extra.h"
#include "purgatory.h"

static struct tw__wshard *shard_of(tw_purgatory *p, uint64_t h)
{
    return &p->shards[(h >> 40) & (p->nshards - 1)];
}

static struct tw__watcher **slot_of(struct tw__wshard *s, uint64_t h, const void *key,
                                    size_t len)
{
    if (!s->cap)
        return NULL;
    struct tw__watcher **w = &s->table[h & (s->cap - 1)];
    while (*w && ((*w)->hash != h || (*w)->keylen != len || memcmp((*w)->key, key, len) != 0))
        w = &(*w)->next;
    return w;
}

/* Locks key's shard (*sp; the caller unlocks it) and returns key's list,
 * or NULL. *hp, if hp is not NULL: the key's hash. */
static struct tw__watcher *lock_key(tw_purgatory *p, const void *key, size_t len,
                                    struct tw__wshard **sp, uint64_t *hp)
{
    uint64_t h = tw__key_hash(&p->hkey, key, len);
    struct tw__wshard *s = shard_of(p, h);
    pthread_mutex_lock(&s->lock);
    struct tw__watcher **slot = slot_of(s, h, key, len);
    *sp = s;
    if (hp)
        *hp = h;
    return slot ? *slot : NULL;
}

static void unlink_watcher(struct tw__wshard *s, struct tw__watcher *w)
{
    struct tw__watcher **pp = &s->table[w->hash & (s->cap - 1)];
    while (*pp != w)
        pp = &(*pp)->next;
    *pp = w->next;
    s->n--;
}

static bool pinned(const struct tw__watcher *w)
{
    return w->pins[0] || w->pins[1];
}

static void free_watcher(tw_purgatory *p, struct tw__watcher *w)
{
    tw__p_free(p, w->limbo);
    tw__p_free(p, w->ents);
    tw__p_free(p, w);
}

/* A key whose list is left empty is removed, unless a walker holds it;
 * under its shard lock. */
static void drop_if_empty(tw_purgatory *p, struct tw__wshard *s, struct tw__watcher *w)
{
    if (w && !w->n && !pinned(w) && !w->taken) {
        unlink_watcher(s, w);
        free_watcher(p, w);
    }
}

/* The last walker of the epoch before is out: limbo's references go. */
static void release_limbo(tw_purgatory *p, struct tw__watcher *w)
{
    for (uint32_t i = 0; i < w->nlimbo; i++)
        tw_op_release(w->limbo[i]);
    tw__p_free(p, w->limbo);
    w->limbo = NULL;
    w->nlimbo = 0;
}

/* A compaction's releases, each some drops after its op was dropped.
 * A release is a locked decrement of the op's count, on a line that is
 * cold (the compaction read the op's completion word in the table of
 * them, not the op), and no later load may pass a locked instruction: released at
 * once, the drops' misses came one after another, and were most of a
 * purge. Each op's lines are prefetched as it is dropped and released
 * TW__RELEASE_LAG drops later, when they are in. */
#define TW__RELEASE_LAG 16u

struct lagged {
    tw_op *ring[TW__RELEASE_LAG];
    uint32_t n;
};

static inline void lagged_release(struct lagged *l, tw_op *op)
{
    __builtin_prefetch((char *)op + offsetof(struct tw_op, states), 1);
    __builtin_prefetch((char *)op + offsetof(struct tw_op, refs), 1);
    uint32_t k = l->n & (TW__RELEASE_LAG - 1u);
    if (l->n++ >= TW__RELEASE_LAG)
        tw_op_release(l->ring[k]);
    l->ring[k] = op;
}

static void lagged_flush(struct lagged *l)
{
    uint32_t from = l->n > TW__RELEASE_LAG ? l->n - TW__RELEASE_LAG : 0;
    for (uint32_t i = from; i < l->n; i++)
        tw_op_release(l->ring[i & (TW__RELEASE_LAG - 1u)]);
}

/* What a purge's slice leaves where it moved entries from, in a list it
 * stopped in the middle of: a dead entry of no op (each reader of the
 * entries skips dead ones) whose word reads completed. */
static _Atomic uint32_t tomb_word = 1;
#define TW__TOMB ((tw_op *)(uintptr_t)1)

/* Drops completed ops and dead entries from one list; under its shard
 * lock. With no walker out their references go at once; a purge's slice
 * (resume) goes on from where the last stopped in it (w->pr), and through
 * `most` entries at most: one stopped short leaves the entries it moved as
 * tombstones, [w->pw, w->pr), which keeps the rest where they are, so
 * that nothing else need know. With walkers of this epoch only, the whole
 * list is done, tombstones too, and the dropped references go to limbo
 * and the epoch turns; if limbo cannot be had (walkers of both epochs
 * out, or no memory), nothing changes: a compaction only saves work, and
 * a later one does it. *seen, if not NULL: the entries looked at.
 * Returns how many completed ops left the list. */
static size_t compact_some(tw_purgatory *p, struct tw__watcher *w, bool resume,
                           uint32_t most, uint32_t *seen)
{
    if (seen)
        *seen = 0;
    if (w->taken)
        return 0; /* cancel_key is reading the entries */
    bool held = pinned(w);
    uint32_t k = 0;
    tw_op **limbo = NULL;
    if (held) {
        /* limbo is held exactly while walkers of the epoch before are out:
         * a turn now would count them as this epoch's */
        if (w->limbo)
            return 0;
        for (uint32_t i = 0; i < w->n; i++)
            k += w->ents[i].op != TW__TOMB &&
                 (tw__dead(w->ents[i].op) || tw__went_completed(&w->ents[i]));
        if (!k || !(limbo = tw__p_alloc(p, (size_t)k * sizeof(*limbo))))
            return 0;
    }
    uint32_t from = 0, keep = 0, j = 0;
    if (resume && !held && w->pr) {
        from = w->pr;
        keep = w->pw;
    }
    uint32_t end = held || most >= w->n - from ? w->n : from + most;
    size_t gone = 0;
    struct lagged lag;
    lag.n = 0;
    for (uint32_t i = from; i < end; i++) {
        struct tw__went e = w->ents[i];
        if (e.op == TW__TOMB)
            continue;
        bool dead = tw__dead(e.op);
        /* an op completed since the count above stays till next time */
        if ((!dead && !tw__went_completed(&e)) || (held && j == k)) {
            w->ents[keep++] = e;
            continue;
        }
        /* A completed op's count of lists is read no more (its
         * completion read it in the step that completed it): left as it
         * is. The purgatory's counts go once for the whole list, below. */
        gone += !dead;
        if (held)
            limbo[j++] = tw__untag(e.op);
        else
            lagged_release(&lag, tw__untag(e.op));
    }
    lagged_flush(&lag);
    if (seen)
        *seen = end - from;
    if (end == w->n) {
        w->n = keep;
        w->pw = w->pr = 0;
    } else {
        /* [keep, from) are tombstones already */
        for (uint32_t i = keep > from ? keep : from; i < end; i++)
            w->ents[i] = (struct tw__went){ TW__TOMB, &tomb_word };
        w->pw = keep;
        w->pr = end;
    }
    tw__completed_unlisted(p, gone);
    if (held) {
        w->limbo = limbo;
        w->nlimbo = j;
        w->epoch ^= 1;
    }
    return gone;
}

/* The whole list, tombstones too. */
static size_t compact(tw_purgatory *p, struct tw__watcher *w)
{
    return compact_some(p, w, false, UINT32_MAX, NULL);
}

int tw__watchers_init(tw_purgatory *p)
{
    p->shards_bytes = (size_t)p->nshards * sizeof(struct tw__wshard) + 63;
    p->shards_raw = tw__p_alloc(p, p->shards_bytes);
    if (!p->shards_raw)
        return -ENOMEM;
    p->shards = (struct tw__wshard *)(((uintptr_t)p->shards_raw + 63) & ~(uintptr_t)63);
    memset(p->shards, 0, (size_t)p->nshards * sizeof(struct tw__wshard));
    for (uint32_t k = 0; k < p->nshards; k++)
        pthread_mutex_init(&p->shards[k].lock, NULL);
    return 0;
}

int tw_purgatory_set_hash_key(tw_purgatory *p, const unsigned char key[16])
{
    if (!p || !key)
        return -EINVAL;
    int rc = 0;
    for (uint32_t k = 0; k < p->nshards && !rc; k++) {
        pthread_mutex_lock(&p->shards[k].lock);
        rc = p->shards[k].n ? -EBUSY : 0; /* keys placed under the old hash */
        pthread_mutex_unlock(&p->shards[k].lock);
    }
    if (!rc)
        tw__hash_key_from_bytes(&p->hkey, key);
    return rc;
}

void tw__watchers_destroy(tw_purgatory *p)
{
    for (uint32_t k = 0; k < p->nshards; k++) {
        struct tw__wshard *s = &p->shards[k];
        for (uint32_t b = 0; b < s->cap; b++) {
            struct tw__watcher *w = s->table[b];
            while (w) {
                struct tw__watcher *next = w->next;
                /* no walker is out (that would be a use after destroy) */
                for (uint32_t i = 0; i < w->n; i++) {
                    if (!tw__dead(w->ents[i].op))
                        tw__op_unlisted(w->ents[i].op);
                    tw_op_release(tw__untag(w->ents[i].op));
                }
                release_limbo(p, w);
                free_watcher(p, w);
                w = next;
            }
        }
        tw__p_free(p, s->table);
        pthread_mutex_destroy(&s->lock);
    }
    tw__p_free(p, p->shards_raw);
}

/* Grows the shard's table at load 1. 0 or -ENOMEM (table unchanged). */
static int table_reserve(tw_purgatory *p, struct tw__wshard *s)
{
    if (s->n < s->cap)
        return 0;
    if (s->cap > UINT32_MAX / 2 || (size_t)s->cap * 2 > SIZE_MAX / sizeof(*s->table))
        return -ENOMEM; /* doubling would wrap: no address space holds it */
    uint32_t ncap = s->cap ? s->cap * 2 : 8;
    struct tw__watcher **t = tw__p_alloc(p, (size_t)ncap * sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t, 0, (size_t)ncap * sizeof(*t));
    for (uint32_t b = 0; b < s->cap; b++) {
        for (struct tw__watcher *w = s->table[b], *next; w; w = next) {
            next = w->next;
            w->next = t[w->hash & (ncap - 1)];
            t[w->hash & (ncap - 1)] = w;
        }
    }
    tw__p_free(p, s->table);
    s->table = t;
    s->cap = ncap;
    return 0;
}

int tw__watch(tw_purgatory *p, tw_op *op, const struct tw_key *key)
{
    struct tw__wshard *s;
    uint64_t h;
    int rc = -ENOMEM;
    struct tw__watcher *w = lock_key(p, key->data, key->len, &s, &h);
    if (!w) {
        if (table_reserve(p, s))
            goto out;
        w = tw__p_alloc(p, sizeof(*w) + key->len);
        if (!w)
            goto out;
        memset(w, 0, sizeof(*w));
        w->hash = h;
        w->keylen = key->len;
        memcpy(w->key, key->data, key->len);
        w->next = s->table[h & (s->cap - 1)];
        s->table[h & (s->cap - 1)] = w;
        s->n++;
    }
    if (w->n == w->cap) {
        /* Doubling 2^31 entries (or, on a 32-bit target, 2^29 pointers)
         * would wrap; no real list gets there, but a wrapped size would
         * be a heap overflow, so it is refused as out of memory. */
        if (w->cap > UINT32_MAX / 2 || (size_t)w->cap * 2 > SIZE_MAX / sizeof(*w->ents))
            goto out; /* the list is full, so not new: nothing to take back */
        uint32_t ncap = w->cap ? w->cap * 2 : 4;
        struct tw__went *ents = tw__p_alloc(p, (size_t)ncap * sizeof(*ents));
        if (!ents) {
            drop_if_empty(p, s, w); /* created just now: take it back */
            goto out;
        }
        if (w->n)
            memcpy(ents, w->ents, w->n * sizeof(*ents));
        tw__p_free(p, w->ents);
        w->ents = ents;
        w->cap = ncap;
    }
    tw_op_retain(op);
    w->ents[w->n++] = (struct tw__went){ op, tw__state_word(op->states, op->sidx) };
    atomic_fetch_add(&op->state, TW__OP_LISTED); /* under the op lock */
    atomic_fetch_add(&p->watched, 1);
    rc = 0;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void tw__unwatch(tw_purgatory *p, tw_op *op, const struct tw_key *key)
{
    struct tw__wshard *s;
    struct tw__watcher *w = lock_key(p, key->data, key->len, &s, NULL);
    for (uint32_t k = w ? w->n : 0; k > 0; k--) {
        uint32_t i = k - 1;
        if (w->ents[i].op == op) { /* a dead entry's pointer is tagged: never equal */
            tw__op_unlisted(op);
            if (pinned(w)) { /* a walker may have copied it: the reference stays */
                w->ents[i].op = (tw_op *)((uintptr_t)op | 1);
                break;
            }
            memmove(&w->ents[i], &w->ents[i + 1], (w->n - i - 1) * sizeof(*w->ents));
            w->n--;
            if (i < w->pw) { /* a purge's tombstones moved down with the rest */
                w->pw--;
                w->pr--;
            }
            tw_op_release(op);
            break;
        }
    }
    drop_if_empty(p, s, w);
    pthread_mutex_unlock(&s->lock);
}

long tw__snapshot(tw_purgatory *p, const void *key, size_t len, tw_op **buf, size_t cap,
                  tw_op ***out, struct tw__pin *pin)
{
    struct tw__wshard *s;
    *out = buf;
    struct tw__watcher *w = lock_key(p, key, len, &s, NULL);
    long n = w ? (long)w->n : 0;
    if ((size_t)n > cap && !(*out = tw__p_alloc(p, (size_t)n * sizeof(tw_op *)))) {
        pthread_mutex_unlock(&s->lock);
        *out = buf;
        return -ENOMEM;
    }
    long m = 0; /* completed ops are only compacted away: not copied */
    for (long i = 0; i < n; i++) {
        const struct tw__went *e = &w->ents[i];
        if (!tw__dead(e->op) && !tw__went_completed(e)) {
            /* The walker will take each op's lock, a locked instruction
             * that no later load passes: fetched now, their misses
             * overlap here instead of coming one after another there
             * (the copy no longer reads the op for its state). */
            __builtin_prefetch((char *)e->op + offsetof(struct tw_op, lock), 1);
            __builtin_prefetch((char *)e->op + offsetof(struct tw_op, state), 1);
            (*out)[m++] = e->op;
        }
    }
    if (m) {
        pin->s = s;
        pin->w = w;
        pin->epoch = w->epoch;
        w->pins[w->epoch]++;
    } else if (w) { /* nothing to try: compacted now */
        compact(p, w);
        drop_if_empty(p, s, w);
    }
    pthread_mutex_unlock(&s->lock);
    if (!m && *out != buf) {
        tw__p_free(p, *out);
        *out = buf;
    }
    return m;
}

/* A taken list's references, all of them; w is then freed. */
static void release_taken(tw_purgatory *p, struct tw__watcher *w)
{
    for (uint32_t i = 0; i < w->n; i++)
        tw_op_release(tw__untag(w->ents[i].op));
    release_limbo(p, w);
    free_watcher(p, w);
}

void tw__unpin(tw_purgatory *p, const struct tw__pin *pin)
{
    struct tw__wshard *s = pin->s;
    struct tw__watcher *w = pin->w;
    pthread_mutex_lock(&s->lock);
    if (!--w->pins[pin->epoch] && pin->epoch != w->epoch)
        release_limbo(p, w); /* the epoch's last walker */
    if (!pinned(w) && w->taken == TW__TAKEN_DONE) {
        pthread_mutex_unlock(&s->lock); /* detached: nobody else can reach it */
        release_taken(p, w);
        return;
    }
    compact(p, w);
    drop_if_empty(p, s, w);
    pthread_mutex_unlock(&s->lock);
}

struct tw__watcher *tw__take_key(tw_purgatory *p, const void *key, size_t len,
                                 struct tw__wshard **sp)
{
    struct tw__watcher *w = lock_key(p, key, len, sp, NULL);
    if (w) {
        unlink_watcher(*sp, w);
        w->taken = TW__TAKEN;
    }
    pthread_mutex_unlock(&(*sp)->lock);
    return w;
}

void tw__drop_taken(tw_purgatory *p, struct tw__wshard *s, struct tw__watcher *w)
{
    pthread_mutex_lock(&s->lock);
    bool held = pinned(w);
    w->taken = TW__TAKEN_DONE;
    pthread_mutex_unlock(&s->lock);
    if (!held) /* else the last walker out does it (tw__unpin) */
        release_taken(p, w);
}

/* A slice's visits: each entry, each list, and each bucket and shard
 * looked at (so that a table of empty buckets is bounded too). */
bool tw__purge_slice(tw_purgatory *p, uint32_t budget, size_t *gone)
{
    uint32_t seen = 0;
    *gone = 0;
    while (seen < budget) {
        struct tw__wshard *s = &p->shards[p->pcur.shard];
        pthread_mutex_lock(&s->lock);
        seen++;
        while (seen < budget && p->pcur.bucket < s->cap) {
            struct tw__watcher **pp = &s->table[p->pcur.bucket];
            for (uint32_t c = 0; *pp && c < p->pcur.chain; c++)
                pp = &(*pp)->next;
            struct tw__watcher *w = *pp;
            if (!w) {
                seen++;
                p->pcur.bucket++;
                p->pcur.chain = 0;
                continue;
            }
            /* at least one entry, so that a list is never passed over */
            uint32_t looked;
            *gone += compact_some(p, w, true, budget - seen, &looked);
            seen += looked + 1;
            if (w->pr && !pinned(w))
                break; /* stopped in this list: the next slice goes on there */
            if (!w->n && !pinned(w)) {
                *pp = w->next; /* the next list takes its place */
                s->n--;
                free_watcher(p, w);
            } else {
                p->pcur.chain++;
            }
        }
        bool shard_done = p->pcur.bucket >= s->cap;
        pthread_mutex_unlock(&s->lock);
        if (!shard_done)
            break;
        p->pcur.bucket = p->pcur.chain = 0;
        if (++p->pcur.shard == p->nshards) {
            p->pcur.shard = 0;
            return true;
        }
    }
    return false;
}

size_t tw__purge_all(tw_purgatory *p)
{
    size_t gone = 0;
    for (uint32_t k = 0; k < p->nshards; k++) {
        struct tw__wshard *s = &p->shards[k];
        pthread_mutex_lock(&s->lock);
        for (uint32_t b = 0; b < s->cap; b++) {
            struct tw__watcher **pp = &s->table[b];
            while (*pp) {
                struct tw__watcher *w = *pp;
                gone += compact(p, w);
                if (!w->n && !pinned(w)) {
                    *pp = w->next;
                    s->n--;
                    free_watcher(p, w);
                } else {
                    pp = &w->next;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    return gone;
}
