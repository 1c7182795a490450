/* test_watchers.c: white-box tests of the purgatory's watch lists
 * (src/watchers.c), linked against the static library: what the public
 * API cannot show (how many lists a purgatory holds), and orders of the
 * lists' internal steps (a walker's snapshot and unpin, cancel_key's take
 * and release) that the API reaches only by a race between threads with
 * no callback in its window, so that no black-box test can hold it
 * there. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "purgatory.h"

#define SEC 1000000000ull

static bool never(tw_op *op)
{
    (void)op;
    return false;
}

static int completions;
static void counted(tw_op *op)
{
    (void)op;
    completions++;
}

static const struct tw_op_ops ops = { never, counted, NULL };

static tw_purgatory *manual_purgatory(void)
{
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer.threaded = 0; /* nothing here needs time to pass */
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    return p;
}

/* An op of p's, waiting, watched under "key" alone. */
static tw_op *watching_key(tw_purgatory *p)
{
    tw_op *op;
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &op), 0);
    const struct tw_key k = { "key", 3 };
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, op, &k, 1), 0);
    return op;
}

/* A walker pins a key's list; the op it copied is completed, and a second
 * walker, finding nothing to try, compacts the list empty, which stays
 * while pinned. cancel_key takes the list (unlinked from its shard,
 * `taken`), and the first walker unpins before cancel_key releases it.
 * The unpin must leave the taken list alone: an empty list no walker
 * holds is otherwise unlinked and freed there, and this one is in no
 * chain (the unlink would walk off its end) and still cancel_key's to
 * release (a use after free). The watchers.c guard: drop_if_empty's
 * `!w->taken`. */
static void test_unpin_leaves_a_taken_list_to_cancel_key(void **state)
{
    (void)state;
    tw_purgatory *p = manual_purgatory();
    tw_op *op = watching_key(p);
    assert_int_equal(tw_purgatory_watched(p), 1);

    tw_op *buf[4], **got;
    struct tw__pin first, second;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &first), 1);
    assert_ptr_equal(got[0], op);
    completions = 0;
    assert_true(tw_op_force_complete(op));
    assert_int_equal(completions, 1);
    /* the second walker: nothing to try, so nothing pinned; the list is
     * compacted to empty (its entry to limbo: the first walker may still
     * read the op) and kept, pinned */
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &second), 0);
    assert_int_equal(tw_purgatory_watched(p), 0);

    struct tw__wshard *s;
    struct tw__watcher *w = tw__take_key(p, "key", 3, &s);
    assert_non_null(w);
    assert_int_equal(w->n, 0);
    assert_int_equal(w->nlimbo, 1);
    assert_int_equal(w->taken, TW__TAKEN);
    uint32_t lists = s->n;

    tw__unpin(p, &first); /* the epoch's last walker: limbo goes */
    assert_int_equal(w->nlimbo, 0);
    assert_int_equal(w->taken, TW__TAKEN); /* still cancel_key's */
    assert_int_equal(s->n, lists);         /* not unlinked a second time */

    tw__drop_taken(p, s, w); /* cancel_key's release: frees it */
    assert_null(tw__take_key(p, "key", 3, &s));
    assert_int_equal(tw_purgatory_cancel_key(p, "key", 3, NULL, NULL), 0);
    assert_int_equal(tw_purgatory_watched(p), 0);
    assert_int_equal(completions, 1);
    tw_op_release(op);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* Watch lists, all shards. */
static uint32_t lists(const tw_purgatory *p)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < p->nshards; k++)
        n += p->shards[k].n;
    return n;
}

/* An event on a key whose ops have all completed elsewhere finds nothing
 * to try: the list is compacted and, empty, removed at once. Left for a
 * purge, it would wait for one started by the count of completed entries
 * still listed, which an emptied list no longer adds to: where each op
 * watches one key and its key's event completes it, no purge starts, and
 * every key's list would stay. */
static void test_event_with_nothing_to_try_removes_the_list(void **state)
{
    (void)state;
    tw_purgatory *p = manual_purgatory();
    tw_op *a, *b;
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &a), 0);
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &b), 0);
    const struct tw_key k = { "key", 3 }, other = { "other", 5 };
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, a, &k, 1), 0);
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, b, &other, 1), 0);
    assert_int_equal(lists(p), 2);
    assert_true(tw_op_force_complete(a)); /* still listed, completed */
    assert_int_equal(tw_purgatory_watched(p), 2);

    assert_int_equal(tw_purgatory_check_and_complete(p, "key", 3), 0);
    assert_int_equal(lists(p), 1); /* "key"'s is gone, "other"'s stays */
    assert_int_equal(tw_purgatory_watched(p), 1);
    struct tw__wshard *s;
    assert_null(tw__take_key(p, "key", 3, &s));

    tw_op_release(a);
    tw_op_release(b);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A purge meets a list a walker holds, emptied by completions: its
 * entries go to limbo (the walker may still read their ops) and the list
 * stays until the walker unpins, which releases limbo and removes it.
 * Removed by the purge, the walker's unpin would write to freed memory. */
static void test_purge_keeps_an_emptied_list_a_walker_holds(void **state)
{
    (void)state;
    tw_purgatory *p = manual_purgatory();
    tw_op *op = watching_key(p);
    tw_op *buf[4], **got;
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &pin), 1);
    assert_true(tw_op_force_complete(op));
    assert_int_equal(tw_purgatory_purge(p), 1);
    assert_int_equal(lists(p), 1); /* held: kept, empty */
    assert_int_equal(pin.w->n, 0);
    assert_int_equal(pin.w->nlimbo, 1);
    tw__unpin(p, &pin);
    assert_int_equal(lists(p), 0);
    tw_op_release(op);
    /* and a purge's slice likewise */
    op = watching_key(p);
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &pin), 1);
    assert_true(tw_op_force_complete(op));
    size_t gone;
    p->pcur.shard = p->pcur.bucket = p->pcur.chain = 0;
    assert_true(tw__purge_slice(p, UINT32_MAX, &gone));
    assert_int_equal(gone, 1);
    assert_int_equal(lists(p), 1);
    assert_int_equal(pin.w->n, 0);
    tw__unpin(p, &pin);
    assert_int_equal(lists(p), 0);
    tw_op_release(op);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* An allocator hook that, once armed, has another thread complete
 * `victim` from inside the allocation of `want` bytes, waiting for it,
 * and gives that block a canary word past its end. The completion runs
 * on a thread of its own, as it would in a server: the header forbids a
 * hook to call back into the purgatory, and on the hook's own thread the
 * op's lock would be taken under the list's, the reverse of the order the
 * library takes them in (which ThreadSanitizer's deadlock detector, in
 * CI's build whose locks are all pthread mutexes, reports as a cycle). */
#define CANARY ((tw_op *)(uintptr_t)0x5ca1ab1eu)
struct hook {
    tw_op *victim;
    size_t want;
    tw_op **block; /* the armed allocation */
    int refuse;    /* or, once armed, the allocation of `want` refused */
};

static void *force_complete_thread(void *op)
{
    return tw_op_force_complete(op) ? op : NULL;
}

static void *hook_alloc(void *ctx, size_t size)
{
    struct hook *h = ctx;
    if (h->refuse && size == h->want) {
        h->refuse = 0;
        return NULL;
    }
    if (!h->victim || size != h->want)
        return malloc(size);
    tw_op *v = h->victim;
    h->victim = NULL;
    pthread_t th;
    void *won = NULL;
    assert_int_equal(pthread_create(&th, NULL, force_complete_thread, v), 0);
    assert_int_equal(pthread_join(th, &won), 0);
    assert_ptr_equal(won, v); /* it completed v (and not a second time) */
    h->block = malloc(size + sizeof(tw_op *));
    if (h->block)
        h->block[size / sizeof(tw_op *)] = CANARY;
    return h->block;
}

static void hook_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

/* A manual purgatory whose allocations go through the hook h. */
static tw_purgatory *hooked_purgatory(struct hook *h)
{
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer.threaded = 0;
    o.timer.allocator = (struct tw_allocator){ hook_alloc, hook_free, h };
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    return p;
}

/* A compaction of a held list counts its completed entries, allocates a
 * limbo of that many, then moves them: an op completed between the count
 * and the move (another thread's completion, which takes no shard lock)
 * stays in the list till the next compaction. Moved too, it would be
 * written past limbo's end. */
static void test_compaction_moves_no_more_than_it_counted(void **state)
{
    (void)state;
    struct hook h = { 0 };
    tw_purgatory *p = hooked_purgatory(&h);
    tw_op *a, *b, *v;
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &a), 0);
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &b), 0);
    assert_int_equal(tw_op_create(p, &ops, NULL, 3600 * SEC, &v), 0);
    const struct tw_key k = { "key", 3 };
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, a, &k, 1), 0);
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, b, &k, 1), 0);
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, v, &k, 1), 0);
    tw_op *buf[4], **got;
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &pin), 3);
    assert_true(tw_op_force_complete(a));
    h.victim = v; /* completed as limbo for a alone is allocated */
    h.want = sizeof(tw_op *);
    assert_int_equal(tw_purgatory_purge(p), 1);
    assert_null(h.victim);
    assert_ptr_equal(pin.w->limbo, h.block);
    assert_int_equal(pin.w->nlimbo, 1);
    assert_ptr_equal(h.block[1], CANARY);
    assert_int_equal(pin.w->n, 2); /* b, and v till next time */
    tw__unpin(p, &pin); /* compacts, no walker out: v goes */
    assert_int_equal(tw_purgatory_watched(p), 1);
    assert_int_equal(tw_purgatory_purge(p), 0);
    tw_op_release(a);
    tw_op_release(b);
    tw_op_release(v);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A compaction of a held list that finds nothing to drop changes
 * nothing: no limbo (not even an empty one) and no turn of the epoch.
 * Turned, the walker out would count as the epoch before's, and the list
 * would hold an empty limbo until it left: a compaction meanwhile, with
 * an op to drop, would be refused (limbo is held), and the op would stay
 * listed. The watchers.c guard: compact_some's `!k`. */
static void test_held_compaction_with_nothing_to_drop_turns_nothing(void **state)
{
    (void)state;
    tw_purgatory *p = manual_purgatory();
    tw_op *a = watching_key(p), *b = watching_key(p);
    tw_op *buf[4], **got;
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, 4, &got, &pin), 2);
    unsigned epoch = pin.w->epoch;
    assert_int_equal(tw_purgatory_purge(p), 0); /* nothing completed */
    assert_null(pin.w->limbo);
    assert_int_equal(pin.w->epoch, epoch);
    assert_true(tw_op_force_complete(a));
    assert_int_equal(tw_purgatory_purge(p), 1); /* a goes, to limbo */
    assert_int_equal(pin.w->nlimbo, 1);
    assert_int_equal(pin.w->epoch, epoch ^ 1);
    assert_int_equal(tw_purgatory_watched(p), 1);
    tw__unpin(p, &pin); /* the epoch's last walker: limbo let go */
    assert_null(pin.w->limbo);
    assert_int_equal(tw_purgatory_watched(p), 1);
    tw_op_release(a);
    tw_op_release(b);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A held list's compaction counts every completed entry, however many:
 * 70,000 completed under a walker all go to limbo in one purge (a count
 * of 8 or 16 bits would take 70,000 for 112 or 4,464 and leave the rest
 * listed). */
static void test_held_compaction_counts_every_completed_entry(void **state)
{
    (void)state;
    enum { N = 70000 };
    tw_purgatory *p = manual_purgatory();
    tw_op **op = malloc(N * sizeof(*op)), **buf = malloc(N * sizeof(*buf)), **got;
    assert_non_null(op);
    assert_non_null(buf);
    for (int i = 0; i < N; i++)
        op[i] = watching_key(p);
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, N, &got, &pin), N);
    assert_ptr_equal(got, buf);
    for (int i = 0; i < N; i++)
        assert_true(tw_op_force_complete(op[i]));
    assert_int_equal(tw_purgatory_purge(p), N);
    assert_int_equal(pin.w->nlimbo, N);
    assert_int_equal(pin.w->n, 0);
    assert_int_equal(tw_purgatory_watched(p), 0);
    tw__unpin(p, &pin);
    for (int i = 0; i < N; i++)
        tw_op_release(op[i]);
    tw_purgatory_destroy(p, NULL, NULL);
    free(op);
    free(buf);
}

/* Key "key"'s list, and where a purge's cursor finds it. */
static struct tw__watcher *find_list(tw_purgatory *p, uint32_t *shard, uint32_t *bucket,
                                     uint32_t *chain)
{
    for (uint32_t k = 0; k < p->nshards; k++) {
        struct tw__wshard *s = &p->shards[k];
        for (uint32_t b = 0; b < s->cap; b++) {
            uint32_t c = 0;
            for (struct tw__watcher *w = s->table[b]; w; w = w->next, c++)
                if (w->keylen == 3 && !memcmp(w->key, "key", 3)) {
                    *shard = k;
                    *bucket = b;
                    *chain = c;
                    return w;
                }
        }
    }
    return NULL;
}

/* n ops watching "key" alone (into op), the even ones completed; their
 * list, and where a purge's cursor finds it. */
static struct tw__watcher *evens_completed(tw_purgatory *p, tw_op **op, int n, uint32_t *k,
                                           uint32_t *b, uint32_t *c)
{
    for (int i = 0; i < n; i++)
        op[i] = watching_key(p);
    for (int i = 0; i < n; i += 2)
        assert_true(tw_op_force_complete(op[i])); /* the even ones stale */
    return find_list(p, k, b, c);
}

/* A slice of `budget` visits from "key"'s list on (the shard's lock counts
 * one, then each entry one: 1 + n goes through n entries of the list).
 * Returns how many went. */
static size_t slice_at_key(tw_purgatory *p, uint32_t budget)
{
    uint32_t k = 0, b = 0, c = 0;
    assert_non_null(find_list(p, &k, &b, &c));
    p->pcur.shard = k;
    p->pcur.bucket = b;
    p->pcur.chain = c;
    size_t gone = 99;
    assert_false(tw__purge_slice(p, budget, &gone));
    return gone;
}

static bool tomb(const struct tw__went *e)
{
    return tw__dead(e->op) && !tw__untag(e->op) && tw__went_completed(e);
}

/* A slice that goes through a whole list counts each entry it looked
 * at, however many: with a budget of exactly a list of 300 (the lock,
 * each entry, the list), the slice drops its 300 completed ops and stops
 * where the list was. Counted in 8 bits, the 300 would be 44, and the
 * slice would go on past its budget, through the empty buckets after. */
static void test_slice_counts_every_entry_of_a_long_list(void **state)
{
    (void)state;
    enum { N = 300 };
    tw_purgatory *p = manual_purgatory();
    tw_op *op[N];
    for (int i = 0; i < N; i++)
        op[i] = watching_key(p);
    for (int i = 0; i < N; i++)
        assert_true(tw_op_force_complete(op[i]));
    uint32_t k = 0, b = 0, c = 0;
    assert_non_null(find_list(p, &k, &b, &c));
    assert_int_equal(slice_at_key(p, 1 + N + 1), N);
    assert_int_equal(tw_purgatory_watched(p), 0);
    /* the emptied list dropped: the cursor names its place, now the next's */
    assert_int_equal(p->pcur.shard, k);
    assert_int_equal(p->pcur.bucket, b);
    assert_int_equal(p->pcur.chain, c);
    for (int i = 0; i < N; i++)
        tw_op_release(op[i]);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A slice that stops in a long list leaves the entries it moved as
 * tombstones, [pw, pr), and everything else where it was, in order: a
 * walk skips them, an unwatch before them moves them down with the rest,
 * the next slice goes on from pr (filling tombstones with what it keeps),
 * cancel_key hands over no tombstone, and a whole compaction (the
 * public purge, or a walk's) drops them, and goes from 0. */
static void test_slice_leaves_tombstones_and_goes_on(void **state)
{
    (void)state;
    enum { N = 100 };
    tw_purgatory *p = manual_purgatory();
    tw_op *op[N];
    uint32_t k = 0, b = 0, c = 0;
    struct tw__watcher *w = evens_completed(p, op, N, &k, &b, &c);

    /* entries 0..19: ten go, ten stay at 0..9, 10..19 are tombstones */
    assert_int_equal(slice_at_key(p, 1 + 20), 10);
    assert_int_equal(tw_purgatory_watched(p), N - 10);
    assert_int_equal(w->n, N);
    assert_int_equal(w->pw, 10);
    assert_int_equal(w->pr, 20);
    for (int i = 0; i < 10; i++)
        assert_ptr_equal(w->ents[i].op, op[2 * i + 1]);
    for (int i = 10; i < 20; i++)
        assert_true(tomb(&w->ents[i]));
    for (int i = 20; i < N; i++)
        assert_ptr_equal(w->ents[i].op, op[i]);
    assert_int_equal(p->pcur.chain, c); /* stopped in the list */

    /* a walk copies the 50 live ones, in order */
    tw_op *buf[N], **got;
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, N, &got, &pin), N / 2);
    for (int i = 0; i < N / 2; i++)
        assert_ptr_equal(got[i], op[2 * i + 1]);
    /* pinned, the slice does the list whole (its dropped references in
     * limbo), tombstones too */
    size_t gone;
    assert_false(tw__purge_slice(p, 1 + 20, &gone));
    assert_int_equal(gone, 40);
    assert_int_equal(w->nlimbo, 40);
    assert_int_equal(w->n, N / 2);
    assert_int_equal(w->pw, 0);
    assert_int_equal(w->pr, 0);
    tw__unpin(p, &pin);
    assert_int_equal(tw_purgatory_watched(p), N / 2);
    for (int i = 0; i < N; i++)
        tw_op_release(op[i]);

    /* again, then an unwatch before the tombstones, the next slice, and
     * cancel_key on a list stopped in */
    tw_op *q[N];
    for (int i = 0; i < N / 2; i++)
        assert_true(tw_op_force_complete(tw__untag(w->ents[i].op))); /* all stale now */
    assert_int_equal(tw_purgatory_purge(p), N / 2); /* the key's list is gone */
    assert_null(find_list(p, &k, &b, &c));
    for (int i = 0; i < N; i++)
        q[i] = watching_key(p);
    for (int i = 0; i < N; i += 2)
        assert_true(tw_op_force_complete(q[i]));
    w = find_list(p, &k, &b, &c);
    assert_int_equal(slice_at_key(p, 1 + 20), 10);
    const struct tw_key key = { "key", 3 };
    tw__unwatch(p, q[1], &key); /* entry 0 */
    assert_int_equal(w->n, N - 1);
    assert_int_equal(w->pw, 9);
    assert_int_equal(w->pr, 19);
    for (int i = 9; i < 19; i++)
        assert_true(tomb(&w->ents[i]));
    assert_ptr_equal(w->ents[19].op, q[20]);
    /* the next slice goes on from 19: 20..39 of q, ten go, ten fill */
    assert_int_equal(slice_at_key(p, 1 + 20), 10);
    assert_int_equal(w->pw, 19);
    assert_int_equal(w->pr, 39);
    for (int i = 0; i < 19; i++)
        assert_ptr_equal(w->ents[i].op, q[2 * i + 3]);
    for (int i = 19; i < 39; i++)
        assert_true(tomb(&w->ents[i]));
    assert_int_equal(tw_purgatory_watched(p), N - 1 - 20);
    /* cancel_key hands over every op listed but no tombstone: the 49
     * live ones and the 30 completed ones the slices have not reached */
    assert_int_equal(tw_purgatory_cancel_key(p, "key", 3, NULL, NULL), N - 1 - 20);
    assert_int_equal(tw_purgatory_watched(p), 0);
    for (int i = 0; i < N; i++)
        tw_op_release(q[i]);

    /* an unwatch of the first entry with no slice stopped in the list
     * leaves no mark; then a whole purge after a slice goes from 0, and
     * drops what completed before pw since; then a list stopped in is
     * destroyed with its ops still held */
    for (int i = 0; i < N; i++)
        q[i] = watching_key(p);
    w = find_list(p, &k, &b, &c);
    tw__unwatch(p, q[0], &key);
    assert_int_equal(w->n, N - 1);
    assert_int_equal(w->pw, 0);
    assert_int_equal(w->pr, 0);
    for (int i = 2; i < N; i += 2)
        assert_true(tw_op_force_complete(q[i])); /* 49: q[2] ... q[98] */
    assert_int_equal(slice_at_key(p, 1 + 20), 10); /* q[1] ... q[20] */
    assert_int_equal(w->pw, 10);
    assert_ptr_equal(w->ents[0].op, q[1]);
    assert_true(tw_op_force_complete(q[1])); /* before pw */
    assert_int_equal(tw_purgatory_purge(p), 1 + 49 - 10);
    assert_int_equal(w->n, N / 2 - 1);
    assert_int_equal(w->pr, 0);
    for (int i = 0; i < N / 2 - 1; i++)
        assert_ptr_equal(w->ents[i].op, q[2 * i + 3]);
    for (int i = 3; i < N; i += 2)
        assert_true(tw_op_force_complete(q[i]));
    assert_int_equal(slice_at_key(p, 1 + 20), 20);
    assert_int_equal(w->pr, 20);
    tw_purgatory_destroy(p, NULL, NULL);
    for (int i = 0; i < N; i++)
        tw_op_release(q[i]);
}

/* A slice that stops past 65,535 entries into a list keeps its place
 * whole: of 70,000 entries, the even ones completed, a slice through the
 * first 66,000 leaves the 33,000 it kept at 0 and tombstones from there
 * to 66,000, and the next slice goes on from 66,000 and closes the list
 * up, the odd ones in order. Held in 16 or 8 bits, the marks would name
 * other entries (464 for 66,000), and the next slice would write what it
 * keeps over entries still listed. */
static void test_slice_stops_past_16_bits_into_a_list(void **state)
{
    (void)state;
    enum { N = 70000, STOP = 66000 };
    tw_purgatory *p = manual_purgatory();
    tw_op **op = malloc(N * sizeof(*op));
    assert_non_null(op);
    uint32_t k = 0, b = 0, c = 0;
    struct tw__watcher *w = evens_completed(p, op, N, &k, &b, &c);
    assert_int_equal(slice_at_key(p, 1 + STOP), STOP / 2);
    assert_int_equal(w->pw, STOP / 2);
    assert_int_equal(w->pr, STOP);
    assert_int_equal(w->n, N);
    assert_true(tomb(&w->ents[STOP / 2]));
    assert_true(tomb(&w->ents[STOP - 1]));
    assert_ptr_equal(w->ents[STOP].op, op[STOP]);
    assert_int_equal(slice_at_key(p, 1 + (N - STOP) + 1), (N - STOP) / 2);
    assert_int_equal(w->n, N / 2);
    assert_int_equal(w->pr, 0);
    for (int i = 0; i < N / 2; i++)
        assert_ptr_equal(w->ents[i].op, op[2 * i + 1]);
    assert_int_equal(tw_purgatory_watched(p), N / 2);
    tw_purgatory_destroy(p, NULL, NULL);
    for (int i = 0; i < N; i++)
        tw_op_release(op[i]);
    free(op);
}

/* 65,536 walkers out on one list hold it: the op completed under them
 * goes to limbo, not away, and limbo is released by the last of them
 * only. Counted in 16 or 8 bits, 65,536 walkers would be none: the
 * purge would drop the op's reference while they may still read it. */
static void test_walkers_past_16_bits_hold_the_list(void **state)
{
    (void)state;
    enum { WALKERS = 65536 };
    tw_purgatory *p = manual_purgatory();
    tw_op *a = watching_key(p), *b = watching_key(p);
    tw_op *buf[2], **got;
    struct tw__pin pin;
    for (int i = 0; i < WALKERS; i++) {
        assert_int_equal(tw__snapshot(p, "key", 3, buf, 2, &got, &pin), 2);
        assert_ptr_equal(got, buf);
    }
    struct tw__watcher *w = pin.w;
    assert_true(tw_op_force_complete(a));
    assert_int_equal(tw_purgatory_purge(p), 1);
    assert_int_equal(w->n, 1);
    assert_int_equal(w->nlimbo, 1);
    assert_ptr_equal(w->limbo[0], a);
    for (int i = 0; i < WALKERS - 1; i++)
        tw__unpin(p, &pin);
    assert_non_null(w->limbo); /* one walker still out */
    tw__unpin(p, &pin);
    assert_null(w->limbo);
    assert_int_equal(w->nlimbo, 0);
    assert_ptr_equal(w->ents[0].op, b);
    tw_op_release(a);
    tw_op_release(b);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* A slice that comes back to a list it stopped in, now held by a walker,
 * and cannot have limbo for it (no memory) leaves the list as it is and
 * goes on: stopping there, every slice would stop there until the walker
 * left, and no other list would be purged meanwhile. */
static void test_slice_passes_a_held_list_it_cannot_compact(void **state)
{
    (void)state;
    enum { N = 40 };
    struct hook h = { 0 };
    tw_purgatory *p = hooked_purgatory(&h);
    tw_op *op[N];
    uint32_t k = 0, b = 0, c = 0;
    struct tw__watcher *w = evens_completed(p, op, N, &k, &b, &c);
    assert_int_equal(slice_at_key(p, 1 + 10), 5);
    assert_int_equal(w->pr, 10);
    tw_op *buf[N], **got;
    struct tw__pin pin;
    assert_int_equal(tw__snapshot(p, "key", 3, buf, N, &got, &pin), N / 2);
    h.want = 15 * sizeof(tw_op *); /* limbo for the 15 completed past pr */
    h.refuse = 1;
    p->pcur.shard = k;
    p->pcur.bucket = b;
    p->pcur.chain = c;
    size_t gone;
    assert_true(tw__purge_slice(p, UINT32_MAX, &gone)); /* on to the end */
    assert_int_equal(h.refuse, 0); /* limbo was asked for */
    assert_int_equal(gone, 0);
    assert_int_equal(w->n, N);
    assert_int_equal(w->pr, 10);
    tw__unpin(p, &pin); /* no walker: compacted whole */
    assert_int_equal(w->n, N / 2);
    assert_int_equal(w->pr, 0);
    assert_int_equal(tw_purgatory_watched(p), N / 2);
    for (int i = 0; i < N; i++)
        tw_op_release(op[i]);
    tw_purgatory_destroy(p, NULL, NULL);
}

/* The entries listed (*all) and the completed ones among them, counted
 * by walking every list: what the purgatory's `watched` and `stale` must
 * say when no thread is inside it. */
static int64_t stale_listed(const tw_purgatory *p, int64_t *all)
{
    int64_t n = 0;
    *all = 0;
    for (uint32_t k = 0; k < p->nshards; k++) {
        const struct tw__wshard *s = &p->shards[k];
        for (uint32_t b = 0; b < s->cap; b++)
            for (const struct tw__watcher *w = s->table[b]; w; w = w->next)
                for (uint32_t i = 0; i < w->n; i++) {
                    *all += !tw__dead(w->ents[i].op);
                    n += !tw__dead(w->ents[i].op) && tw__went_completed(&w->ents[i]);
                }
    }
    return n;
}

#define RACE_OPS 2000
#define RACE_ROUNDS 100

struct race {
    tw_purgatory *p;
    tw_op *ops[RACE_OPS];
    atomic_int done;
    pthread_mutex_t mu; /* a quarter of the ops completed: go */
    pthread_cond_t cv;
    int go;
};

static void *purger(void *arg)
{
    struct race *r = arg;
    size_t gone;
    for (unsigned i = 0; !atomic_load(&r->done); i++) {
        /* whole purges, and slices of a few entries that stop in the
         * middle of a list (the purgatory's own never run here) */
        if (i % 4 == 0)
            tw_purgatory_purge(r->p);
        else
            tw__purge_slice(r->p, 7, &gone);
        sched_yield(); /* valgrind runs one thread at a time: let the others */
    }
    return NULL;
}

/* cancel_key on one of the keys once a quarter of the ops are completed:
 * it lets the rest go from that list as they are being completed (it
 * sleeps till then: a spin would starve the others under valgrind, which
 * runs one thread at a time) */
static void *canceller(void *arg)
{
    struct race *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->go)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    tw_purgatory_cancel_key(r->p, "c", 1, NULL, NULL);
    return NULL;
}

/* Ops completed while another thread compacts their lists (whole, and in
 * slices that stop in the middle of one) and a third
 * lets one key's list go (cancel_key): a compaction sees an op's
 * COMPLETED bit as soon as its completion sets it, and may drop the op
 * from a list before the completion has counted the lists it is in.
 * `stale` must come out exact all the same, once the threads are done: a
 * count that drifted below the truth each time the two met would hold
 * purges back for good (and one above, start them needlessly). Before
 * the op's flags and its count of lists were one word, it drifted in the
 * first round. */
static void test_stale_exact_when_completion_meets_compaction(void **state)
{
    (void)state;
    struct race r = { 0 };
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.purge_interval = UINT64_MAX; /* purges by the purger alone */
    o.shards = 4; /* a purge's walk of the shards short, its passes many */
    assert_int_equal(tw_purgatory_create(&r.p, &o), 0);
    const struct tw_key keys[3] = { { "a", 1 }, { "b", 1 }, { "c", 1 } };
    for (int round = 0; round < RACE_ROUNDS; round++) {
        for (int i = 0; i < RACE_OPS; i++) {
            assert_int_equal(tw_op_create(r.p, &ops, NULL, 3600 * SEC, &r.ops[i]), 0);
            assert_int_equal(tw_purgatory_try_complete_else_watch(r.p, r.ops[i], keys, 3), 0);
        }
        atomic_store(&r.done, 0);
        r.go = 0;
        pthread_t t, c;
        assert_int_equal(pthread_create(&t, NULL, purger, &r), 0);
        assert_int_equal(pthread_create(&c, NULL, canceller, &r), 0);
        for (int i = 0; i < RACE_OPS; i++) {
            assert_true(tw_op_force_complete(r.ops[i]));
            if (i + 1 == RACE_OPS / 4) {
                pthread_mutex_lock(&r.mu);
                r.go = 1;
                pthread_cond_signal(&r.cv);
                pthread_mutex_unlock(&r.mu);
            }
        }
        atomic_store(&r.done, 1);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(pthread_join(c, NULL), 0);
        int64_t listed;
        assert_int_equal(atomic_load(&r.p->stale), stale_listed(r.p, &listed));
        assert_int_equal(tw_purgatory_watched(r.p), listed);
        tw_purgatory_purge(r.p);
        assert_int_equal(atomic_load(&r.p->stale), 0);
        assert_int_equal(tw_purgatory_watched(r.p), 0);
        for (int i = 0; i < RACE_OPS; i++)
            tw_op_release(r.ops[i]);
    }
    tw_purgatory_destroy(r.p, NULL, NULL);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unpin_leaves_a_taken_list_to_cancel_key),
        cmocka_unit_test(test_event_with_nothing_to_try_removes_the_list),
        cmocka_unit_test(test_purge_keeps_an_emptied_list_a_walker_holds),
        cmocka_unit_test(test_compaction_moves_no_more_than_it_counted),
        cmocka_unit_test(test_held_compaction_with_nothing_to_drop_turns_nothing),
        cmocka_unit_test(test_held_compaction_counts_every_completed_entry),
        cmocka_unit_test(test_slice_counts_every_entry_of_a_long_list),
        cmocka_unit_test(test_stale_exact_when_completion_meets_compaction),
        cmocka_unit_test(test_slice_leaves_tombstones_and_goes_on),
        cmocka_unit_test(test_slice_stops_past_16_bits_into_a_list),
        cmocka_unit_test(test_walkers_past_16_bits_hold_the_list),
        cmocka_unit_test(test_slice_passes_a_held_list_it_cannot_compact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
