/* purgatory.h: what purgatory.c (operations, timeouts) and watchers.c
 * (the sharded watch lists) share. Lock order: an op's lock may be held
 * while a shard lock is taken (watching happens under the op lock), never
 * the other way round; releasing a reference under a shard lock is fine
 * (freeing an op takes no lock). */
#ifndef TW_PURGATORY_INTERNAL_H
#define TW_PURGATORY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hash.h"
#include "lock.h"
#include "op_states.h"
#include "twheel_purgatory.h"

struct tw_op {
    tw_purgatory *p;         /* not to be used once p is destroyed (below) */
    /* The table of completion words (op_states.h), which holds the allocator
     * and outlives p while ops live: the caller may hold the op past
     * tw_purgatory_destroy, and its last release must not read p. */
    struct tw__states *states;
    const struct tw_op_ops *ops;
    void *ctx;
    uint64_t timeout_ns;
    /* The op's lock, recursive (try_complete may force_complete): the
     * shard lock (lock.h), its holder's thread and how deep it holds it.
     * Only the holder writes depth; owner is read by others only to see
     * that it is not theirs. */
    struct tw__lock lock;
    uint32_t depth;
    _Atomic uintptr_t owner;
    /* TW__OP_COMPLETED | TW__OP_CANCELLED, and above them the watch lists
     * holding it (TW__OP_LISTED each): one word, so that a completion
     * reads the lists holding it in the step that completes it, and a
     * list that lets it go learns in one step whether that was before. */
    _Atomic uint32_t state;
    _Atomic int submitted;
    /* The op's index in the table of completion words (op_states.c): its
     * word is 1 once it is completed, which is all a compaction reads, so
     * that a purge need not touch the op. */
    uint32_t sidx;
    _Atomic long refs;
    _Atomic tw_id timer_id;  /* pending timeout, 0 if none */
};

/* An op's state bits. COMPLETED is set once, by the one completer.
 * CANCELLED: cancel_key handed the op over, so it will not expire. Both
 * live in one word so that an expiration completes the op only if it
 * was not handed over first (one compare-and-swap), and cancel_key learns
 * from the same word whether it came after a completion; it takes no op
 * lock, so it may be called from a callback holding another op's. */
#define TW__OP_COMPLETED 1u
#define TW__OP_CANCELLED 2u
#define TW__OP_FLAGS 3u
/* One watch list holding the op, counted in its state; at most
 * TW__OP_MAX_LISTED (tw_purgatory_try_complete_else_watch refuses more
 * keys). */
#define TW__OP_LISTED 4u
#define TW__OP_MAX_LISTED (UINT32_MAX / TW__OP_LISTED)

/* tw_op_is_completed for op not NULL, inline: the walks call it on every
 * op, and a call to the exported function goes through the PLT. */
static inline bool tw__op_completed(const tw_op *op)
{
    return atomic_load_explicit(&op->state, memory_order_acquire) & TW__OP_COMPLETED;
}

/* One entry of a watch list: the op (tagged when dead, below) and its
 * word in the states table, which a compaction or a walk's copy reads
 * without touching the op. */
struct tw__went {
    tw_op *op;
    _Atomic uint32_t *done;
};

/* The entry's op is completed: its word is set after its state's
 * COMPLETED bit and its lists' count in `stale` (complete()), so that a
 * compaction that goes by it drops only entries already counted there.
 * A completion not yet in the word leaves its entry for the next one. */
static inline bool tw__went_completed(const struct tw__went *e)
{
    return atomic_load_explicit(e->done, memory_order_acquire) != 0;
}

/* One key's watch list. Each entry holds a reference on its op.
 *
 * A walker (check_and_complete) copies the entries' pointers and tries
 * the ops with no reference of its own: taking and dropping one per op
 * was two of the four atomic instructions of every try, which bound how
 * many requests a second the completions keep up with
 * (benchmarks/results/history.md, "A walk with no reference per op").
 * The list's references keep the ops alive instead, so while a walker
 * holds the list pinned, no entry it may have copied gives up its
 * reference:
 * - an unwatch marks its entry dead (the low bit of the pointer; its
 *   accounting done at once, its reference dropped at the next
 *   compaction);
 * - a compaction moves the dropped entries' references to limbo and
 *   turns the epoch; pins[epoch] counts the walkers that pinned since,
 *   which copied no limbo entry, and pins[!epoch] those from before;
 *   the last of those releases limbo as it unpins. Walkers that never
 *   stop overlapping still let the list be compacted, once an epoch.
 *   With one epoch's walkers still out and limbo full, a compaction
 *   waits for the next chance;
 * - cancel_key detaches the list and hands its live ops over, and the
 *   last walker out releases the references (taken).
 * All of it under the shard lock. */
struct tw__watcher {
    struct tw__watcher *next; /* hash chain */
    uint64_t hash;
    size_t keylen;
    struct tw__went *ents;
    uint32_t n, cap;
    /* A purge's slice that stopped in this list (watchers.c, compact_some)
     * goes on from pr; [pw, pr) are tombstones, dead entries of no op.
     * Both 0 when none did. */
    uint32_t pw, pr;
    uint32_t pins[2];
    tw_op **limbo;
    uint32_t nlimbo;
    uint8_t epoch;
    uint8_t taken; /* TW__TAKEN: by cancel_key; TW__TAKEN_DONE: and handed over */
    unsigned char key[];
};

#define TW__TAKEN 1
#define TW__TAKEN_DONE 2

/* A dead entry: unwatched while pinned. */
static inline int tw__dead(const tw_op *e)
{
    return (int)((uintptr_t)e & 1);
}

static inline tw_op *tw__untag(tw_op *e)
{
    return (tw_op *)((uintptr_t)e & ~(uintptr_t)1);
}

/* What a walker holds while it tries the ops it copied. */
struct tw__pin {
    struct tw__wshard *s;
    struct tw__watcher *w;
    unsigned epoch;
};

struct tw__wshard {
    pthread_mutex_t lock;
    struct tw__watcher **table;
    uint32_t cap, n;
} __attribute__((aligned(64)));

struct tw_purgatory {
    tw_timer *timer;
    struct tw_allocator a;
    int threaded;
    uint32_t nshards;
    struct tw__hash_key hkey; /* the watch keys' hash (hash.h) */
    struct tw__states *states; /* the ops' completion words (op_states.h) */
    struct tw__wshard *shards;
    void *shards_raw;
    size_t shards_bytes;
    uint64_t purge_interval;
    _Atomic uint64_t watched, delayed;
    /* completed entries still listed: exact while no call is under way
     * (below it for a moment where a compaction drops an op whose
     * completion has yet to add its lists: purge_due) */
    _Atomic int64_t stale;
    _Atomic int purging;
    /* the reaper's task is scheduled or running (purgatory.c, reap_fn) */
    _Atomic int reaping;
    /* A purge under way goes on a slice each run of the reaper (reap_fn),
     * or of a completion that could not queue it. pcur is its
     * place, read and written only by the holder of `purging`: the next
     * shard, bucket of the shard's table, and list of the bucket's chain
     * (lists dropped or added meanwhile may shift it: one is then skipped
     * or visited twice, which only saves or costs work). */
    _Atomic int passing;
    struct {
        uint32_t shard, bucket, chain;
    } pcur;
    /* The pace of a pass (purge_step): a slice later than purge_next, on
     * the timer's clock, has a larger budget; purge_took: how long the
     * last slice took, the reaper's wait for its next. Written and read
     * only by the holder of `purging` (its exchange and release order
     * them), so plain. */
    uint64_t purge_next, purge_took;
    /* A slice's visits: TW__PURGE_SLICE (purgatory.c); the model test
     * and its fuzzer make it a few, so that slices stop inside lists. */
    uint32_t purge_slice;
    void (*unfinished)(tw_op *op, void *arg); /* during destroy */
    void *unfinished_arg;
};

void *tw__p_alloc(tw_purgatory *p, size_t size);
void tw__p_free(tw_purgatory *p, void *ptr);

int tw__watchers_init(tw_purgatory *p);
void tw__watchers_destroy(tw_purgatory *p);
/* Adds op to key's list (one reference). 0 or -ENOMEM (nothing added). */
int tw__watch(tw_purgatory *p, tw_op *op, const struct tw_key *key);
/* Removes one entry of op from key's list (undoing tw__watch). */
void tw__unwatch(tw_purgatory *p, tw_op *op, const struct tw_key *key);
/* Copies the pointers of key's live ops that are not completed into buf
 * (cap entries) or, when longer, a new array (*out), and pins the list
 * for them (tw__unpin) when there are any. Returns the count (0: nothing
 * pinned; a list of completed ops only is compacted at once) or
 * -ENOMEM. */
long tw__snapshot(tw_purgatory *p, const void *key, size_t len, tw_op **buf, size_t cap,
                  tw_op ***out, struct tw__pin *pin);
/* Ends a walk: unpins, then compacts the list (drops completed ops),
 * removes it if left empty, or finishes a cancel_key's release. */
void tw__unpin(tw_purgatory *p, const struct tw__pin *pin);
/* Detaches key's list (*sp: its shard) and returns it, or NULL. The
 * caller hands its live entries over, then calls tw__drop_taken. */
struct tw__watcher *tw__take_key(tw_purgatory *p, const void *key, size_t len,
                                 struct tw__wshard **sp);
/* Releases a taken list's references and frees it, now or, while
 * walkers hold it, when the last of them unpins. */
void tw__drop_taken(tw_purgatory *p, struct tw__wshard *s, struct tw__watcher *w);
/* Drops completed ops from every list. */
size_t tw__purge_all(tw_purgatory *p);
/* Drops completed ops from the lists from p->pcur on, until about
 * `budget` entries were visited (a long list is left in the middle, to be
 * gone on with by the next slice) or the last shard is done; the caller
 * holds `purging`. *gone: how many went. Returns true when the pass is
 * over (pcur back at the start). */
bool tw__purge_slice(tw_purgatory *p, uint32_t budget, size_t *gone);

/* The op lost its place in a list: accounting for that. */
void tw__op_unlisted(tw_op *op);
/* n completed ops lost a place in a list each (a compaction's): the
 * purgatory's counts for all of them at once, two atomics a list, not two
 * an entry. Their own counts of lists are left as they are (compact). */
void tw__completed_unlisted(tw_purgatory *p, size_t n);

#endif
