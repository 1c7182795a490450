/* test_check.c: tw_check itself. Every other test and the fuzzer trust
 * tw_check to fail when the engine's state is wrong, so each of its rules
 * is broken here on purpose, one at a time, in a timer that holds tasks at
 * three levels, a keyed task, a periodic task and a free slot: tw_check
 * must return -EFAULT and name what broke; put back, the timer must check
 * clean again (so the report came from that one change). White-box:
 * linked against the static library to reach the engine. */
#include "helpers.h"

#include <stdio.h>

#include "timer.h"

struct fixture {
    struct fake_clock c;
    tw_timer *t;
    struct tw__engine *e;
    tw_id near, mid, far, keyed, every, freed;
    tw_id mg[TW__MAG]; /* freed after `freed`: the free list's magazine */
    tw_id fr[10];      /* freed after those: two blocks of the free list */
};

static struct tw__entry *entry_of(struct fixture *f, tw_id id)
{
    return tw__pool_entry(&f->e->pool, tw__id_slot(f->t, id));
}

/* The heap position of `mid`'s bucket, the fixture's only one at level 1. */
static uint32_t mid_bucket_pos(struct fixture *f)
{
    for (uint32_t pos = 0; pos < f->e->dq.n; pos++)
        if (f->e->dq.h[pos].bn >> f->e->sbits == 1)
            return pos;
    fail_msg("no level-1 bucket is queued");
    return 0;
}

static int setup(void **state)
{
    static struct fixture f;
    memset(&f, 0, sizeof f);
    struct tw_options o = manual_opts(&f.c, 0, MS, 64);
    assert_int_equal(tw_create(&f.t, &o), 0);
    f.e = &f.t->shards[0].eng;
    assert_int_equal(tw_schedule(f.t, 5 * MS, noop_fn, NULL, &f.near), 0);   /* level 0 */
    assert_int_equal(tw_schedule(f.t, 2 * SEC, noop_fn, NULL, &f.mid), 0);   /* level 1 */
    assert_int_equal(tw_schedule(f.t, 100 * SEC, noop_fn, NULL, &f.far), 0); /* level 2 */
    assert_int_equal(tw_schedule_keyed(f.t, "conn", 4, 10 * MS, noop_fn, NULL, &f.keyed), 0);
    assert_int_equal(tw_schedule_every(f.t, 20 * MS, 20 * MS, TW_FIXED_RATE, noop_fn, NULL,
                                       &f.every), 0);
    assert_int_equal(tw_schedule(f.t, 7 * MS, noop_fn, NULL, &f.freed), 0);
    for (uint32_t k = 0; k < TW__MAG; k++)
        assert_int_equal(tw_schedule(f.t, (30 + (uint64_t)k) * MS, noop_fn, NULL, &f.mg[k]), 0);
    for (int k = 0; k < 10; k++)
        assert_int_equal(tw_schedule(f.t, (8 + (uint64_t)k) * MS, noop_fn, NULL, &f.fr[k]), 0);
    assert_int_equal(tw_cancel(f.t, f.freed), 0); /* the free list's spare */
    /* then the magazine (pool.h), mg[0] .. mg[TW__MAG - 1] */
    for (uint32_t k = 0; k < TW__MAG; k++)
        assert_int_equal(tw_cancel(f.t, f.mg[k]), 0);
    /* then blocks: fr[7] heads one holding fr[8] and fr[9]; below it,
     * fr[0] heads a full one, fr[1] .. fr[6] */
    for (int k = 0; k < 10; k++)
        assert_int_equal(tw_cancel(f.t, f.fr[k]), 0);
    assert_true(f.e->dq.n >= 3);
    /* the last sixteen cancels wait in the ring, still listed (wheel.c,
     * "Deferred unlink"): the timer checks clean so, and once settled */
    assert_check(f.t);
    tw__engine_settle(f.e);
    assert_check(f.t);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tw_destroy(f->t);
    return 0;
}

/* tw_check must fail and its report must contain `what`. */
static void assert_caught(tw_timer *t, const char *what)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *report = open_memstream(&buf, &len);
    assert_non_null(report);
    int rc = tw_check(t, report);
    fclose(report);
    if (!strstr(buf, what))
        fprintf(stderr, "expected \"%s\" in the report:\n%s", what, buf);
    assert_int_equal(rc, -EFAULT);
    assert_non_null(strstr(buf, what));
    assert_int_equal(tw_check(t, NULL), -EFAULT); /* no report: same verdict */
    free(buf);
}

/* Sets `field` to `bad`: tw_check must fail and name `what`. Then puts it
 * back: the timer must check clean again. */
#define BREAK(field, bad, what)              \
    do {                                     \
        __typeof__(field) saved_ = (field);  \
        (field) = (bad);                     \
        assert_caught(f->t, what);           \
        (field) = saved_;                    \
        assert_check(f->t);                  \
    } while (0)

/* A task of the fixture: its slot, its list ref, its generation. */
#define SLOT(id) tw__id_slot(f->t, (id))
#define REF(id) tw__ref(SLOT(id))
#define GEN(id) (*tw__pool_gen(&f->e->pool, SLOT(id)))

static void test_pending_count(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->scheduled, f->e->scheduled + 1, "pending");
}

static void test_heap_order(void **state)
{
    struct fixture *f = *state;
    struct tw__dq_node *h = f->e->dq.h, saved = h[0];
    h[0] = h[1]; /* the root and its child swapped, indices not */
    h[1] = saved;
    assert_caught(f->t, "heap order broken");
    h[1] = h[0];
    h[0] = saved;
    assert_check(f->t);
}

/* A bucket naming the wrong heap position breaks two rules, each checked
 * from its own side: the heap's node does not find its bucket pointing
 * back, and the bucket's position holds another bucket. */
static void test_heap_index(void **state)
{
    struct fixture *f = *state;
    uint32_t *hi = &tw__bucket_at(f->e, f->e->dq.h[0].bn)->heap_index;
    BREAK(*hi, f->e->dq.n - 1, "heap_index");
    *hi = f->e->dq.n - 1;
    assert_caught(f->t, "found at");
    assert_caught(f->t, "bad heap_index");
    *hi = 0;
    assert_check(f->t);
    /* just past the heap's end, where a stale node naming this bucket
     * lies (a pop leaves one): the index alone must be refused */
    assert_true(f->e->dq.cap > f->e->dq.n);
    struct tw__dq_node past = f->e->dq.h[f->e->dq.n];
    f->e->dq.h[f->e->dq.n] = f->e->dq.h[0];
    BREAK(*hi, f->e->dq.n, "bad heap_index");
    f->e->dq.h[f->e->dq.n] = past;
    assert_check(f->t);
}

static void test_list_prev(void **state)
{
    struct fixture *f = *state;
    BREAK(entry_of(f, f->mid)->link.prev, REF(f->far), "prev");
}

static void test_list_loop(void **state)
{
    struct fixture *f = *state;
    /* points at itself */
    BREAK(entry_of(f, f->near)->link.next, REF(f->near), "does not close");
}

/* The rule the header's "never early" rests on, for a task the engine
 * always moves (keyed or periodic: an extra record): a level-0 bucket
 * holds none due after its tick. A plain task may be due after its
 * bucket: tw_reschedule pushes a later deadline in place (wheel.c), and
 * collection looks at its tick before firing it; that is legal, and a
 * plain task so pushed must not fire at its old tick. */
static void test_would_fire_early(void **state)
{
    struct fixture *f = *state;
    struct tw__entry *en = entry_of(f, f->keyed);
    uint64_t saved = en->deadline;
    en->deadline = saved + 3 * MS;
    assert_caught(f->t, "in level-0 bucket");
    en->deadline = saved;
    assert_check(f->t);

    en = entry_of(f, f->near); /* plain, level 0, due at 5 ms */
    uint64_t cascaded = f->e->cascaded;
    en->deadline += 3 * MS;    /* what a push in place leaves */
    assert_check(f->t);
    struct tw_stats st;
    assert_int_equal(tw_advance(f->t, 5 * MS), 0); /* its bucket: not due */
    assert_int_equal(tw_pending(f->t), 5);         /* placed anew */
    assert_true(f->e->cascaded > cascaded);
    assert_check(f->t);
    tw_stats(f->t, &st);
    assert_int_equal(st.fired, 0);
    assert_int_equal(tw_advance(f->t, 7 * MS), 0);
    assert_int_equal(tw_advance(f->t, 8 * MS), 1);
    assert_int_equal(tw_cancel(f->t, f->near), -ENOENT); /* it fired */
    assert_check(f->t);
}

/* The same for a coarse bucket: an extra task outside its bucket's range
 * either way breaks the rule; a plain task only before its start. */
static void test_outside_bucket(void **state)
{
    struct fixture *f = *state;
    tw_id idle;
    assert_int_equal(tw_schedule_keyed(f->t, "idle", 4, 100 * SEC, noop_fn, NULL, &idle), 0);
    struct tw__entry *ex = entry_of(f, idle); /* keyed, level 2 */
    BREAK(ex->deadline, ex->deadline + 1000 * SEC, "outside level-2 bucket");
    /* its bucket's last tick holds it; the first tick past does not */
    uint64_t exp2 = UINT64_MAX, width2 = (uint64_t)1 << (2 * f->e->bits);
    for (uint32_t pos = 0; pos < f->e->dq.n; pos++)
        if (f->e->dq.h[pos].bn >> f->e->sbits == 2)
            exp2 = f->e->dq.h[pos].exp; /* `far` and `idle` share it */
    assert_true(exp2 != UINT64_MAX && tw__ticks_ceil(f->e, ex->deadline) >= exp2);
    uint64_t kept = ex->deadline;
    ex->deadline = (exp2 + width2 - 1) * MS;
    assert_check(f->t);
    ex->deadline = kept;
    BREAK(ex->deadline, (exp2 + width2) * MS, "outside level-2 bucket");
    assert_int_equal(tw_cancel(f->t, idle), 0);
    /* both edges of `mid`'s level-1 bucket, [exp, exp + 64) ticks */
    uint64_t exp = f->e->dq.h[mid_bucket_pos(f)].exp;
    struct tw__entry *en = entry_of(f, f->mid);
    assert_true(tw__ticks_ceil(f->e, en->deadline) >= exp);
    BREAK(en->deadline, (exp - 1) * MS, "outside level-1 bucket");
    uint64_t saved = en->deadline;
    en->deadline = exp * MS; /* the first and the last tick it holds */
    assert_check(f->t);
    en->deadline = (exp + 63) * MS;
    assert_check(f->t);
    en->deadline = (exp + 64) * MS; /* plain: pushed later, legal */
    assert_check(f->t);
    en->deadline = saved;
    /* the plain far task pushed later still checks clean */
    en = entry_of(f, f->far);
    saved = en->deadline;
    en->deadline += 1000 * SEC;
    assert_check(f->t);
    en->deadline = saved;
    assert_check(f->t);
}

static void test_list_mask(void **state)
{
    struct fixture *f = *state;
    struct tw__bucket *b = tw__bucket_at(f->e, f->e->dq.h[0].bn);
    uint32_t saved = b->mask;
    b->mask ^= 1u << (TW__SUBS - 1); /* claim (or deny) a list it lacks */
    if (b->mask == 0)
        b->mask = saved ^ (1u << 0);
    assert_caught(f->t, "list mask");
    b->mask = saved;
    assert_check(f->t);
}

static void test_generation_state(void **state)
{
    struct fixture *f = *state;
    BREAK(GEN(f->freed), GEN(f->freed) | 3u, "of no state");
}

static void test_free_slot_in_use(void **state)
{
    struct fixture *f = *state;
    /* a plain task, on no list: the spare, a slot in the magazine, a
     * block's head, a slot a block holds */
    BREAK(GEN(f->freed), (GEN(f->freed) & ~3u) | 1u, "on the free list but in use");
    BREAK(GEN(f->mg[5]), (GEN(f->mg[5]) & ~3u) | 1u, "on the free list but in use");
    BREAK(GEN(f->fr[0]), (GEN(f->fr[0]) & ~3u) | 1u, "on the free list but in use");
    BREAK(GEN(f->fr[7]), (GEN(f->fr[7]) & ~3u) | 1u, "on the free list but in use");
    BREAK(GEN(f->fr[4]), (GEN(f->fr[4]) & ~3u) | 1u, "on the free list but in use");
}

static void test_listed_but_free(void **state)
{
    struct fixture *f = *state;
    BREAK(GEN(f->mid), GEN(f->mid) & ~3u, "is listed but free");
}

/* The ring of deferred cancels (wheel.c, "Deferred unlink"): two
 * cancels wait in it, still listed. */
static void test_deferred_cancels(void **state)
{
    struct fixture *f = *state;
    tw_id a, b;
    assert_int_equal(tw_schedule(f->t, 30 * MS, noop_fn, NULL, &a), 0);
    assert_int_equal(tw_schedule(f->t, 31 * MS, noop_fn, NULL, &b), 0);
    uint32_t pos = f->e->defer_pos;
    assert_int_equal(tw_cancel(f->t, a), 0);
    assert_int_equal(tw_cancel(f->t, b), 0);
    assert_check(f->t);
    uint32_t *r = f->e->defer;
    uint32_t ka = pos, kb = (pos + 1) & (TW__DEFER - 1u);
    assert_int_equal(r[ka], SLOT(a));
    assert_int_equal(r[kb], SLOT(b));
    BREAK(r[ka], TW__NIL, "is listed but free");                  /* forgotten */
    BREAK(r[ka], SLOT(f->mid), "deferred but it is in use");     /* a live task */
    BREAK(r[ka], SLOT(b), "deferred twice");
    BREAK(r[ka], tw__pool_slots(&f->e->pool), "names slot");
    BREAK(r[kb], TW__NIL, "none just before position");          /* settle's test */
    BREAK(f->e->defer_pos, TW__DEFER, "cancels: position"); /* not settle's message */
    BREAK(GEN(a), 0u, "generation wrapped");
    BREAK(GEN(a), GEN(a) + 1u, "deferred but it is in use");
    BREAK(f->e->pool.spare, SLOT(a), "unlink is deferred"); /* also free */
    /* a deferred cancel gone from its list before its unlink: the ring
     * names two, the lists hold one */
    struct tw__entry *ea = entry_of(f, a);
    uint32_t pr = ea->link.prev, nx = ea->link.next;
    tw__link_at(f->e, pr)->next = nx;
    tw__link_at(f->e, nx)->prev = pr;
    assert_caught(f->t, "2 deferred cancels, 1 found in the lists");
    tw__link_at(f->e, pr)->next = REF(a);
    tw__link_at(f->e, nx)->prev = REF(a);
    assert_check(f->t);
    tw__engine_settle(f->e);
    assert_int_equal(r[ka], TW__NIL);
    assert_int_equal(r[kb], TW__NIL);
    assert_check(f->t);
}

static void test_taken_count(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->taken, f->e->taken + 1, "periodic tasks running or waiting to");
}

/* The keyed and periodic tasks' records (timer.h, struct tw__extra):
 * their count, and the slot each names. */
static void test_extra_records(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->extras, f->e->extras + 1, "extra records counted");
    BREAK(f->e->extras, f->e->extras - 1, "extra records counted");
    struct tw__extra *x = entry_of(f, f->keyed)->arg;
    BREAK(x->slot, SLOT(f->mid), "extra record names slot");
}

static void test_key_map(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->keys.n, f->e->keys.n + 1, "key map");
    struct tw__extra *x = entry_of(f, f->keyed)->arg;
    uint32_t s = 0;
    while (f->e->keys.slots[s] != x)
        s++;
    /* a key gone from the table, its count kept */
    BREAK(f->e->keys.slots[s], NULL, "key map count");
    /* a keyed task the table lost, count and all: a new task of that key
     * would no longer replace it */
    f->e->keys.slots[s] = NULL;
    f->e->keys.n--;
    assert_caught(f->t, "key map holds 0 keys, 1 keyed");
    f->e->keys.n++;
    f->e->keys.slots[s] = x;
    assert_check(f->t);
    /* a key stored where its hash does not lead: lookups miss it */
    BREAK(x->hash, x->hash + 1, "cannot be found by its key");
}

static void test_level_limits(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->lv[1].last, f->e->lv[1].last + 1, "level 1: last tick");
    BREAK(f->e->lv[1].shift, f->e->lv[1].shift + 1, "level 1: last tick");
    BREAK(f->e->lv[1].sb, f->e->lv[1].sb - 2, "level 1: last tick");
}

/* Tasks not yet due on the expired list: a bug, except while a drain is
 * handing them back. */
static void test_expired_list_not_due(void **state)
{
    struct fixture *f = *state;
    /* the edge: `near` on the expired list, due at the current tick (fine)
     * and one tick after it (not) */
    struct tw__entry *en = entry_of(f, f->near);
    uint64_t saved = en->deadline;
    tw__list_unlink(f->e, en);
    tw__list_append(f->e, TW__EXPIRED_SENT, SLOT(f->near), en);
    en->deadline = f->e->cur * MS;
    assert_check(f->t);
    en->deadline = (f->e->cur + 1) * MS;
    assert_caught(f->t, "on the expired list");
    tw__list_unlink(f->e, en);
    en->deadline = saved;
    tw__wheel_place(f->e, SLOT(f->near), en, tw__ticks_ceil(f->e, saved));
    assert_check(f->t);

    tw__wheel_collect_all(f->e);
    assert_caught(f->t, "on the expired list");
    f->e->draining++;
    assert_check(f->t);
    f->e->draining--;
}

static void test_foreign_sentinel(void **state)
{
    struct fixture *f = *state;
    /* another bucket's list head */
    BREAK(entry_of(f, f->near)->link.next, tw__sent(f->e->dq.h[0].bn ^ 1u, 0),
          "reaches foreign sentinel");
}

static void test_ref_not_a_slot(void **state)
{
    struct fixture *f = *state;
    BREAK(entry_of(f, f->near)->link.next, REF(f->near) + 1u, "not a slot's");
    /* the first slot never handed out, its memory (the pool's room past
     * the slots in use) dressed as a copy of near and linked after it:
     * the ref must still be refused */
    struct tw__pool *pl = &f->e->pool;
    uint32_t past = tw__pool_slots(pl);
    assert_true(pl->cap > past);
    struct tw__entry *near = entry_of(f, f->near), saved = *tw__pool_entry(pl, past);
    *tw__pool_entry(pl, past) = *near;
    BREAK(near->link.next, tw__ref(past), "not a slot's");
    *tw__pool_entry(pl, past) = saved;
    assert_check(f->t);
}

static void test_list_tail(void **state)
{
    struct fixture *f = *state;
    struct tw__link *head = tw__link_at(f->e, entry_of(f, f->mid)->link.prev);
    assert_true(head->next == REF(f->mid)); /* mid is its list's only task */
    BREAK(head->prev, REF(f->far), "tail");
}

static void test_heap_names_no_level(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->dq.h[f->e->dq.n - 1].bn, f->e->nlevels << f->e->sbits, "of no level");
}

static void test_bucket_not_queued(void **state)
{
    struct fixture *f = *state;
    BREAK(tw__bucket_at(f->e, f->e->dq.h[0].bn)->heap_index, TW__NOT_QUEUED,
          "holds tasks but is not queued");
}

/* The bucket of `near` (the earliest) loses its only task's list. */
static void test_bucket_queued_but_empty(void **state)
{
    struct fixture *f = *state;
    uint32_t bn = f->e->dq.h[0].bn;
    struct tw__bucket *b = tw__bucket_at(f->e, bn);
    uint32_t j = tw__id_slot(f->t, f->near) & (TW__SUBS - 1);
    assert_int_equal(b->mask, 1u << j);
    struct tw__link *head = tw__link_at(f->e, tw__sent(bn, j)), saved = *head;
    head->next = head->prev = tw__sent(bn, j);
    b->mask = 0;
    assert_caught(f->t, "queued but empty");
    *head = saved;
    b->mask = 1u << j;
    assert_check(f->t);
}

static void test_expiration_does_not_map(void **state)
{
    struct fixture *f = *state;
    BREAK(f->e->dq.h[0].exp, f->e->dq.h[0].exp + 1, "does not map to it");
}

/* The clock moved past `near`'s tick without firing it. */
static void test_expiration_behind_clock(void **state)
{
    struct fixture *f = *state;
    uint64_t cur = f->e->cur;
    struct tw__level lv[TW__MAX_LEVELS];
    memcpy(lv, f->e->lv, sizeof lv);
    tw__wheel_set_cur(f->e, cur + 6);
    assert_caught(f->t, "is behind the clock");
    f->e->cur = cur;
    memcpy(f->e->lv, lv, sizeof lv);
    assert_check(f->t);
}

/* A level-1 bucket's expiration moved a whole wheel of its level ahead:
 * it still maps to the bucket, but lies past what the level may hold. */
static void test_expiration_beyond_span(void **state)
{
    struct fixture *f = *state;
    uint32_t pos = mid_bucket_pos(f);
    uint64_t whole = (uint64_t)(f->e->smask + 1) << f->e->bits; /* 2W blocks of W ticks */
    BREAK(f->e->dq.h[pos].exp, f->e->dq.h[pos].exp + whole, "beyond its level's span");
}

/* A level-1 bucket's expiration off its level's grid (not a multiple of
 * 64 ticks): it still maps to the bucket, and its task lies within it. */
static void test_expiration_off_grid(void **state)
{
    struct fixture *f = *state;
    uint32_t pos = mid_bucket_pos(f);
    BREAK(f->e->dq.h[pos].exp, f->e->dq.h[pos].exp + 1, "does not map to it");
}

/* A manual timer of its own, empty, for a state the fixture cannot reach. */
static tw_timer *empty_timer(struct fake_clock *c, struct tw__engine **e)
{
    struct tw_options o = manual_opts(c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    *e = &t->shards[0].eng;
    return t;
}

/* A bucket above level 0 is due strictly after the clock: the advance that
 * reaches its time cascades it. Made here by moving the clock onto a
 * level-1 bucket's time without collecting it. */
static void test_coarse_bucket_at_clock(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw__engine *e;
    tw_timer *t = empty_timer(&c, &e);
    assert_int_equal(tw_schedule(t, 200 * MS, noop_fn, NULL, NULL), 0); /* level 1, at 192 */
    assert_int_equal(e->dq.n, 1);
    assert_int_equal(e->dq.h[0].exp, 192);
    tw__wheel_set_cur(e, 191);
    assert_check(t);
    tw__wheel_set_cur(e, 192);
    assert_caught(t, "is behind the clock");
    tw_destroy(t);
}

/* A level holds 2W blocks from the current one and no more: two blocks 2W
 * apart would share a bucket. Made here by a task placed at level 1 in
 * block 130 while the current block is 100, and the clock then set back:
 * to block 3, 127 blocks ahead, it checks clean; to block 2, 128 ahead, it
 * is caught. */
static void set_clock_back(struct tw__engine *e, uint64_t cur)
{
    e->cur = cur;
    for (uint32_t k = 0; k < e->max_levels; k++)
        e->lv[k].last = tw__wheel_level_last(e, k, e->cur);
}

static void test_expiration_past_span(void **state)
{
    (void)state;
    struct fake_clock c;
    struct tw__engine *e;
    tw_timer *t = empty_timer(&c, &e);
    assert_int_equal(tw_advance(t, 6400 * MS), 0);
    assert_int_equal(tw_schedule_at(t, 130 * 64 * MS, noop_fn, NULL, NULL), 0);
    assert_int_equal(e->dq.n, 1);
    assert_int_equal(e->dq.h[0].bn >> e->sbits, 1);
    set_clock_back(e, 3 * 64);
    assert_check(t);
    set_clock_back(e, 2 * 64 + 63);
    assert_caught(t, "beyond its level's span");
    set_clock_back(e, 6400);
    assert_check(t);
    tw_destroy(t);
}

/* `near` taken off its list, its slot and the pending count kept: a task
 * lost, which would never fire. */
static void test_task_lost_from_lists(void **state)
{
    struct fixture *f = *state;
    struct tw__entry *en = entry_of(f, f->near);
    tw__list_unlink(f->e, en);
    assert_caught(f->t, "pending");
    f->e->scheduled--; /* the count agrees: only the slot tells */
    assert_caught(f->t, "slots in use");
    f->e->scheduled++;
    tw__wheel_place(f->e, SLOT(f->near), en, tw__ticks_ceil(f->e, en->deadline));
    assert_check(f->t);
}

/* The free slot dropped from the free list: neither used, free nor
 * retired, it would never be handed out again. */
static void test_slot_lost_from_free_list(void **state)
{
    struct fixture *f = *state;
    struct tw__pool *p = &f->e->pool;
    assert_int_equal(p->spare, SLOT(f->freed));
    assert_int_equal(p->free_head, SLOT(f->fr[7]));
    struct tw__free_block *top = tw__pool_block(p, SLOT(f->fr[7]));
    assert_int_equal(top->n, 2);
    assert_int_equal(top->slot[1], SLOT(f->fr[9]));
    assert_int_equal(top->next, SLOT(f->fr[0]));
    BREAK(p->spare, TW__NIL, "retired !=");
    BREAK(top->n, 1, "retired !=");                  /* fr[9] lost */
    BREAK(p->free_head, top->next, "retired !=");    /* the top block lost */
    /* fr[8] twice and fr[9] lost: the total adds up, the bitmap does not */
    BREAK(top->slot[1], SLOT(f->fr[8]), "on the free list twice");
    BREAK(p->spare, SLOT(f->fr[3]), "on the free list twice"); /* `freed` lost */
    /* the magazine: its top lost, or a slot in it twice */
    assert_int_equal(p->nmag, TW__MAG);
    for (uint32_t k = 0; k < TW__MAG; k++)
        assert_int_equal(p->mag[k], SLOT(f->mg[k]));
    BREAK(p->nmag, TW__MAG - 1, "retired !=");
    BREAK(p->mag[2], SLOT(f->mg[9]), "on the free list twice");
    BREAK(p->mag[0], SLOT(f->fr[4]), "on the free list twice");
}

/* `near` moved to another list of its bucket than its slot names. */
static void test_wrong_list(void **state)
{
    struct fixture *f = *state;
    uint32_t bn = f->e->dq.h[0].bn, r = REF(f->near);
    struct tw__bucket *b = tw__bucket_at(f->e, bn);
    uint32_t j = SLOT(f->near) & (TW__SUBS - 1), k = (j + 1) & (TW__SUBS - 1);
    struct tw__link *from = tw__link_at(f->e, tw__sent(bn, j));
    struct tw__link *to = tw__link_at(f->e, tw__sent(bn, k));
    struct tw__link *en = &entry_of(f, f->near)->link;
    assert_true(from->next == r && from->prev == r && to->next == tw__sent(bn, k));
    from->next = from->prev = tw__sent(bn, j);
    to->next = to->prev = r;
    en->next = en->prev = tw__sent(bn, k);
    b->mask = 1u << k;
    assert_caught(f->t, "is in list");
    to->next = to->prev = tw__sent(bn, k);
    from->next = from->prev = r;
    en->next = en->prev = tw__sent(bn, j);
    b->mask = 1u << j;
    assert_check(f->t);
}

static void test_generation_disagrees(void **state)
{
    struct fixture *f = *state;
    /* an extra record's slot, with a plain callback */
    BREAK(entry_of(f, f->keyed)->fn, noop_fn, "disagrees with its callback");
}

static void test_free_list_broken(void **state)
{
    struct fixture *f = *state;
    struct tw__pool *p = &f->e->pool;
    struct tw__free_block *top = tw__pool_block(p, SLOT(f->fr[7]));
    struct tw__free_block *low = tw__pool_block(p, SLOT(f->fr[0]));
    uint32_t beyond = tw__pool_slots(p) + 5;
    BREAK(p->spare, beyond, "free list broken");
    BREAK(p->spare, tw__pool_slots(p), "free list broken"); /* the first never handed out */
    BREAK(p->mag[TW__MAG - 1], beyond, "free list broken");
    BREAK(p->nmag, TW__MAG + 1, "the magazine holds");
    BREAK(p->free_head, beyond, "free list broken");
    BREAK(top->slot[0], beyond, "free list broken");
    BREAK(low->next, beyond, "free list broken");
    BREAK(low->n, TW__FREE_SLOTS + 1, "free list broken");
    BREAK(low->n, TW__FREE_SLOTS - 1, "free list broken"); /* not the head, not full */
    BREAK(low->next, SLOT(f->fr[7]), "free list broken"); /* a cycle */
}

/* A rewound free list (pool.h: the rewind): blocks, then the slots from
 * `rewound` up. Its end moved, its count of slots left off by one either
 * way, or the blocks' end lost: each is caught. Not the fixture: this
 * needs a timer that has emptied. */
static void test_rewound_free_list(void **state)
{
    (void)state;
    struct fixture fx, *f = &fx;
    memset(f, 0, sizeof *f);
    struct tw_options o = manual_opts(&f->c, 0, MS, 64);
    assert_int_equal(tw_create(&f->t, &o), 0);
    f->e = &f->t->shards[0].eng;
    struct tw__pool *p = &f->e->pool;
    enum { N = 20, TAKEN = TW__MAG + 3 }; /* the spare, the magazine, a block */
    tw_id ids[N];
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(f->t, (1 + (uint64_t)k) * MS, noop_fn, NULL, &ids[k]), 0);
    assert_int_equal(tw_advance(f->t, N * MS), N);
    assert_int_equal(p->free_head, TW__REWOUND);
    for (int k = 0; k < TAKEN; k++) /* slots 0 .. TAKEN - 1 */
        assert_int_equal(tw_schedule(f->t, SEC, noop_fn, NULL, &ids[k]), 0);
    /* the spare, then the magazine, then a block on the rewound end */
    for (int k = 1; k < TAKEN; k++)
        assert_int_equal(tw_cancel(f->t, ids[k]), 0);
    tw__engine_settle(f->e); /* the deferred unlinks done, oldest first */
    assert_int_equal(p->spare, SLOT(ids[1]));
    assert_int_equal(p->nmag, TW__MAG);
    assert_int_equal(p->free_head, SLOT(ids[TAKEN - 1]));
    assert_int_equal(p->rewound, TAKEN);
    assert_check(f->t);
    struct tw__free_block *b = tw__pool_block(p, SLOT(ids[TAKEN - 1]));
    assert_int_equal(b->next, TW__REWOUND);
    BREAK(p->rewound, p->used, "ends in the rewound slots");
    BREAK(p->rewound, 0, "on the free list but in use"); /* slot 0 is */
    BREAK(p->rewound, TAKEN + 1, "retired !=");          /* slot TAKEN lost */
    BREAK(b->next, TW__NIL, "retired !=");               /* all of them lost */
    tw_destroy(f->t);
}

/* The bound below which fresh slots are taken (pool.h: populating) out of
 * order with the slots used and the capacity. */
static void test_pool_bounds(void **state)
{
    struct fixture *f = *state;
    struct tw__pool *p = &f->e->pool;
    assert_true(p->used <= p->fault_at && p->fault_at <= p->cap);
    BREAK(p->fault_at, p->used - 1, "populated to");
    BREAK(p->fault_at, p->cap + 1, "populated to");
    /* a reservation smaller than the block; huge pages asked for with no
     * reservation, or a state that is none of the three (pool.c) */
    BREAK(p->reserved, (size_t)1, "a reservation of");
    assert_int_equal(p->reserved, 0);
    size_t block = ((size_t)p->front + p->cap) * sizeof(struct tw__entry);
    BREAK(p->reserved, block - 1, "a reservation of");
    p->reserved = block; /* exactly the block: room enough */
    assert_check(f->t);
    p->reserved = 0;
    BREAK(p->huge, 1, "huge page state");
    BREAK(p->huge, 2, "huge page state");
}

static void test_key_names_dead_task(void **state)
{
    struct fixture *f = *state;
    struct tw__extra *x = entry_of(f, f->keyed)->arg;
    BREAK(x->slot, SLOT(f->freed), "names a dead task");
    /* each of the two signs on its own: a live task that is not this
     * record's, and a free slot that still points at it */
    BREAK(x->slot, SLOT(f->mid), "names a dead task");
    /* the first slot never handed out, dressed as this record's task */
    uint32_t past = tw__pool_slots(&f->e->pool);
    assert_true(f->e->pool.cap > past);
    struct tw__entry *pe = tw__pool_entry(&f->e->pool, past), saved = *pe;
    *pe = *entry_of(f, f->keyed);
    BREAK(x->slot, past, "names a dead task");
    *pe = saved;
    void *arg = entry_of(f, f->freed)->arg;
    entry_of(f, f->freed)->arg = x;
    BREAK(x->slot, SLOT(f->freed), "names a dead task");
    entry_of(f, f->freed)->arg = arg;
    assert_check(f->t);
}

static void test_listed_while_running(void **state)
{
    struct fixture *f = *state;
    BREAK(((struct tw__extra *)entry_of(f, f->every)->arg)->state, TW__X_FIRING,
          "listed while its callback runs");
}

/* A periodic task whose callback runs is in no list, and its links say
 * so (tw__take_job sets both to TW__NIL): from inside the callback, a
 * link left pointing at a list is caught, either one. */
struct stale_links {
    int runs, clean, next_caught, prev_caught;
};

static void check_links_while_running(tw_timer *t, tw_id id, void *arg)
{
    struct stale_links *k = arg;
    struct tw__entry *en = tw__pool_entry(&t->shards[0].eng.pool, tw__id_slot(t, id));
    k->runs++;
    k->clean += tw_check(t, stderr) == 0;
    uint32_t list = en->link.next;
    en->link.next = tw__ref(0); /* slot 0: a task of the same timer */
    k->next_caught += tw_check(t, NULL) == -EFAULT;
    en->link.next = list;
    list = en->link.prev;
    en->link.prev = tw__ref(0);
    k->prev_caught += tw_check(t, NULL) == -EFAULT;
    en->link.prev = list;
}

static void test_links_while_running(void **state)
{
    (void)state;
    struct fake_clock c = { 0 };
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    struct stale_links k = { 0 };
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_schedule(t, 3 * SEC, noop_fn, NULL, NULL), 0); /* slot 0 */
    assert_int_equal(tw_schedule_every(t, 5 * MS, 5 * MS, TW_FIXED_RATE,
                                       check_links_while_running, &k, NULL), 0);
    for (uint64_t ms = 5; ms <= 10; ms += 5) {
        c.now = ms * MS;
        assert_int_equal(tw_advance(t, c.now), 1);
    }
    assert_int_equal(k.runs, 2);
    assert_int_equal(k.clean, 2);
    assert_int_equal(k.next_caught, 2);
    assert_int_equal(k.prev_caught, 2);
    assert_check(t); /* re-armed: linked again, and clean */
    tw_destroy(t);
}

/* tw_check from inside callbacks, on a timer of its own: a periodic task
 * whose callback runs is pending but in no list, and so is one that has
 * cancelled itself there (not pending); a one-shot task firing is in
 * neither. Each must check clean. */
struct in_callback {
    int runs[3], rc[3];
};

static void check_every(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    struct in_callback *k = arg;
    k->rc[0] |= tw_check(t, stderr);
    k->runs[0]++;
}

static void check_quit(tw_timer *t, tw_id id, void *arg)
{
    struct in_callback *k = arg;
    assert_int_equal(tw_cancel(t, id), 0);
    k->rc[1] |= tw_check(t, stderr);
    k->runs[1]++;
}

static void check_once(tw_timer *t, tw_id id, void *arg)
{
    (void)id;
    struct in_callback *k = arg;
    k->rc[2] |= tw_check(t, stderr);
    k->runs[2]++;
}

static void test_check_in_callbacks(void **state)
{
    (void)state;
    struct fake_clock c = { 0 };
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    struct in_callback k = { { 0 }, { 0 } };
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_schedule_every(t, 5 * MS, 5 * MS, TW_FIXED_RATE, check_every, &k,
                                       NULL), 0);
    assert_int_equal(tw_schedule_every(t, 7 * MS, 7 * MS, TW_FIXED_DELAY, check_quit, &k,
                                       NULL), 0);
    assert_int_equal(tw_schedule(t, 6 * MS, check_once, &k, NULL), 0);
    assert_int_equal(tw_schedule(t, 3 * SEC, noop_fn, NULL, NULL), 0); /* a coarse level too */
    for (uint64_t ms = 1; ms <= 20; ms++) {
        c.now = ms * MS;
        assert_true(tw_advance(t, c.now) >= 0);
    }
    assert_int_equal(k.runs[0], 4); /* 5, 10, 15, 20 ms */
    assert_int_equal(k.runs[1], 1);
    assert_int_equal(k.runs[2], 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(k.rc[i], 0);
    assert_int_equal(tw_pending(t), 2);
    assert_check(t);
    tw_destroy(t);
}

/* On a threaded timer the report names the shard that broke: here the
 * third of four, its pending count changed under its lock. */
static void test_report_names_shard(void **state)
{
    (void)state;
    struct atomic_clock c;
    tw_timer *t = mk_fake_sharded(&c, 0, SEC, 4);
    assert_int_equal(t->nshards, 4);
    struct tw__shard *sh = &t->shards[2];
    tw__shard_lock(t, sh);
    sh->eng.scheduled++;
    tw__shard_unlock(t, sh);
    char *buf = NULL;
    size_t len = 0;
    FILE *report = open_memstream(&buf, &len);
    assert_non_null(report);
    assert_int_equal(tw_check(t, report), -EFAULT);
    fclose(report);
    assert_non_null(strstr(buf, "shard 2: pending"));
    assert_null(strstr(buf, "shard 0"));
    free(buf);
    tw__shard_lock(t, sh);
    sh->eng.scheduled--;
    tw__shard_unlock(t, sh);
    assert_check(t);
    tw_destroy(t);
}

/* More failures in one check than a byte counts: 300 free slots marked
 * in use one after another. Each is reported (one line more each time,
 * beside the lines for the counts they upset), and every check fails: a
 * count of failures that wrapped would read "sound" at 256. */
static unsigned report_lines(tw_timer *t, int *rc)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *report = open_memstream(&buf, &len);
    assert_non_null(report);
    *rc = tw_check(t, report);
    fclose(report);
    unsigned n = 0;
    for (size_t k = 0; k < len; k++)
        n += buf[k] == '\n';
    free(buf);
    return n;
}

static void test_failures_past_8_bits(void **state)
{
    (void)state;
    enum { N = 300 };
    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    struct tw__engine *e = &t->shards[0].eng;
    tw_id ids[N];
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, &ids[k]), 0);
    for (int k = 0; k < N; k++)
        assert_int_equal(tw_cancel(t, ids[k]), 0);
    tw__engine_settle(e);
    assert_check(t);
    unsigned first = 0;
    for (int k = 0; k < N; k++) {
        *tw__pool_gen(&e->pool, tw__id_slot(t, ids[k])) |= 1u;
        int rc;
        unsigned lines = report_lines(t, &rc);
        if (k == 0)
            first = lines;
        assert_int_equal(lines, first + (unsigned)k);
        assert_int_equal(rc, -EFAULT);
    }
    assert_true(first + N - 1 > 256);
    for (int k = 0; k < N; k++)
        *tw__pool_gen(&e->pool, tw__id_slot(t, ids[k])) &= ~3u;
    assert_check(t);
    tw_destroy(t);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_pending_count),
        T(test_heap_order),
        T(test_heap_index),
        T(test_list_prev),
        T(test_list_loop),
        T(test_would_fire_early),
        T(test_outside_bucket),
        T(test_list_mask),
        T(test_generation_state),
        T(test_free_slot_in_use),
        T(test_listed_but_free),
        T(test_deferred_cancels),
        T(test_taken_count),
        T(test_extra_records),
        T(test_key_map),
        T(test_level_limits),
        T(test_expired_list_not_due),
        T(test_foreign_sentinel),
        T(test_ref_not_a_slot),
        T(test_list_tail),
        T(test_heap_names_no_level),
        T(test_bucket_not_queued),
        T(test_bucket_queued_but_empty),
        T(test_expiration_does_not_map),
        T(test_expiration_behind_clock),
        T(test_expiration_beyond_span),
        T(test_expiration_off_grid),
        cmocka_unit_test(test_coarse_bucket_at_clock),
        cmocka_unit_test(test_expiration_past_span),
        cmocka_unit_test(test_rewound_free_list),
        cmocka_unit_test(test_failures_past_8_bits),
        T(test_task_lost_from_lists),
        T(test_slot_lost_from_free_list),
        T(test_wrong_list),
        T(test_generation_disagrees),
        T(test_free_list_broken),
        T(test_pool_bounds),
        T(test_key_names_dead_task),
        T(test_listed_while_running),
        T(test_check_in_callbacks),
        cmocka_unit_test(test_links_while_running),
        T(test_report_names_shard),
    };
#undef T
    return cmocka_run_group_tests_name("check", tests, NULL, NULL);
}
