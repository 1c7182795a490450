/* test_op_states.c: white-box tests of the purgatory ops' table of
 * completion words (src/op_states.c, which this test compiles itself with
 * TW__ST_TEST_HOOK: a hook between a pop's read of the stack's top and its
 * exchange): words handed out once each and reused, the table's growth
 * (chunks and its directory, to 257 chunks) and what it allocates, each
 * allocation refused in turn with nothing changed, the table outliving
 * its creator while words are out, a pop whose view of the top went
 * stale (ABA), threads taking and giving back words at once
 * (ThreadSanitizer in CI), and two threads that find a new table empty at
 * once. */
#include "helpers.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

#include "op_states.h"

#define CHUNK 4096u

static struct tw__states *mk(struct count_alloc *a)
{
    struct tw_allocator al = counting(a);
    struct tw__states *t;
    assert_int_equal(tw__states_create(&t, &al), 0);
    return t;
}

/* The counting allocator, with the size of each allocation in turn (but
 * the chunks', with skip_chunks). */
struct size_log {
    struct count_alloc a;
    size_t size[16];
    int n;
    bool skip_chunks;
};

static void *size_log_fn(void *ctx, size_t size)
{
    struct size_log *l = ctx;
    if (l->n < 16 && !(l->skip_chunks && size == CHUNK * sizeof(uint32_t)))
        l->size[l->n++] = size;
    return count_alloc_fn(&l->a, size);
}

static void size_log_free(void *ctx, void *ptr)
{
    count_free_fn(&((struct size_log *)ctx)->a, ptr);
}

/* Five chunks' words, each handed out once and reading 0; each its own
 * (a value written to one shows in no other); the fifth chunk doubles the
 * directory (the first holds four: the second is four pointers larger),
 * the old one kept; given back and taken again, no allocation, the last
 * given back the first taken. */
static void test_words_once_each_then_reused(void **state)
{
    (void)state;
    struct size_log log = { 0 };
    struct tw_allocator al = { size_log_fn, size_log_free, &log };
    struct tw__states *t;
    assert_int_equal(tw__states_create(&t, &al), 0);
    assert_int_equal(log.a.live, 2); /* the table and its directory */
    const uint32_t n = 5 * CHUNK;
    uint32_t *idx = malloc(n * sizeof(*idx));
    unsigned char *seen = calloc(n, 1);
    assert_non_null(idx);
    assert_non_null(seen);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(tw__state_get(t, &idx[i]), 0);
        assert_true(idx[i] < n);
        assert_int_equal(seen[idx[i]]++, 0);
        assert_int_equal(atomic_load(tw__state_word(t, idx[i])), 0);
        atomic_store(tw__state_word(t, idx[i]), i + 7);
    }
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(atomic_load(tw__state_word(t, idx[i])), i + 7);
    assert_int_equal(log.a.live, 1 + 2 + 5); /* the table, two directories, five chunks */
    /* the table, its directory, four chunks, the fifth, then its directory */
    assert_int_equal(log.n, 8);
    for (int k = 2; k < 7; k++)
        assert_int_equal(log.size[k], CHUNK * sizeof(uint32_t));
    assert_int_equal(log.size[7], log.size[1] + 4 * sizeof(void *));
    long allocs = log.a.allocs;
    for (uint32_t i = 0; i < n; i++)
        tw__state_put(t, idx[i]);
    uint32_t again;
    assert_int_equal(tw__state_get(t, &again), 0);
    assert_int_equal(again, idx[n - 1]);
    assert_int_equal(atomic_load(tw__state_word(t, again)), 0);
    memset(seen, 0, n);
    seen[again] = 1;
    for (uint32_t i = 1; i < n; i++) {
        assert_int_equal(tw__state_get(t, &idx[i]), 0);
        assert_int_equal(seen[idx[i]]++, 0);
    }
    assert_int_equal(log.a.allocs, allocs);
    idx[0] = again;
    for (uint32_t i = 0; i < n; i++)
        tw__state_put(t, idx[i]);
    tw__states_release(t);
    assert_int_equal(log.a.live, 0);
    free(idx);
    free(seen);
}

/* The creator's release leaves the table to the words still out; the
 * last of them frees it. */
static void test_table_outlives_its_creator(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct tw__states *t = mk(&a);
    uint32_t i, j;
    assert_int_equal(tw__state_get(t, &i), 0);
    assert_int_equal(tw__state_get(t, &j), 0);
    assert_int_not_equal(i, j);
    tw__states_release(t);
    assert_int_equal(a.live, 3);
    atomic_store(tw__state_word(t, j), 1); /* still its holder's */
    tw__state_put(t, i);
    assert_int_equal(a.live, 3);
    assert_int_equal(atomic_load(tw__state_word(t, j)), 1);
    tw__state_put(t, j);
    assert_int_equal(a.live, 0);
}

/* Each allocation a new chunk needs, refused: -ENOMEM, nothing allocated
 * or taken (the table goes with its creator's release alone), and the
 * next try succeeds. First the first chunk; then, with four chunks' words
 * out, the fifth chunk and then the directory it needs. */
static void test_refused_allocations_change_nothing(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct tw__states *t = mk(&a);
    uint32_t i;
    a.fail_at = 1;
    assert_int_equal(tw__state_get(t, &i), -ENOMEM);
    assert_int_equal(a.live, 2);
    assert_int_equal(tw__state_get(t, &i), 0);
    tw__state_put(t, i);

    const uint32_t n = 4 * CHUNK;
    uint32_t *idx = malloc(n * sizeof(*idx));
    assert_non_null(idx);
    for (uint32_t k = 0; k < n; k++)
        assert_int_equal(tw__state_get(t, &idx[k]), 0);
    assert_int_equal(a.live, 2 + 4);
    for (long at = 1; at <= 2; at++) { /* the chunk, then the directory */
        a.fail_at = at;
        assert_int_equal(tw__state_get(t, &i), -ENOMEM);
        assert_int_equal(a.live, 2 + 4);
        a.fail_at = 0;
    }
    assert_int_equal(tw__state_get(t, &i), 0);
    assert_int_equal(a.live, 1 + 2 + 5);
    tw__state_put(t, i);
    for (uint32_t k = 0; k < n; k++)
        tw__state_put(t, idx[k]);
    free(idx);
    tw__states_release(t);
    assert_int_equal(a.live, 0);

    /* the table itself, and its first directory */
    for (long at = 1; at <= 2; at++) {
        struct count_alloc b = { .fail_at = at };
        struct tw_allocator al = counting(&b);
        struct tw__states *u = NULL;
        assert_int_equal(tw__states_create(&u, &al), -ENOMEM);
        assert_null(u);
        assert_int_equal(b.live, 0);
    }
}

/* The words of 257 chunks (more than a million ops live), each handed out
 * once, given back and taken again with no allocation. Their indices
 * pass 16 bits, and the directory doubles seven times: each new one's
 * size is that of 8, 16, ..., 512 chunk pointers (checked against the
 * first's, of 4), never a size that wrapped. */
#define MANY_CHUNKS 257u

static void test_words_of_many_chunks(void **state)
{
    (void)state;
    struct size_log log = { .skip_chunks = true };
    struct tw_allocator al = { size_log_fn, size_log_free, &log };
    struct tw__states *t;
    assert_int_equal(tw__states_create(&t, &al), 0);
    const uint32_t n = MANY_CHUNKS * CHUNK;
    uint32_t *idx = malloc(n * sizeof(*idx));
    unsigned char *seen = calloc(n, 1);
    assert_non_null(idx);
    assert_non_null(seen);
    for (int round = 0; round < 2; round++) {
        long allocs = log.a.allocs;
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(tw__state_get(t, &idx[i]), 0);
            assert_true(idx[i] < n);
            assert_int_equal(seen[idx[i]]++, 0);
        }
        if (round == 1)
            assert_int_equal(log.a.allocs, allocs);
        for (uint32_t i = 0; i < n; i++)
            tw__state_put(t, idx[i]);
        memset(seen, 0, n);
    }
    /* the table, then directories of 4, 8, ..., 512 chunks */
    assert_int_equal(log.n, 1 + 8);
    for (int k = 2; k < log.n; k++)
        assert_int_equal(log.size[k] - log.size[1],
                         ((size_t)4 << (k - 1)) * sizeof(void *) - 4 * sizeof(void *));
    assert_int_equal(log.a.live, 1 + 8 + MANY_CHUNKS);
    tw__states_release(t);
    assert_int_equal(log.a.live, 0);
    free(idx);
    free(seen);
}

/* op_states.c calls this between a pop's read of the top and its
 * exchange (this test compiles it with TW__ST_TEST_HOOK): it runs
 * `meanwhile` once, disarmed first, as another thread would run between
 * the two. */
void tw__st_test_before_swap(struct tw__states *t);
static void (*meanwhile)(struct tw__states *t);

/* Another's turn, as a script: "p" pops a word (the first, the top the
 * interrupted pop read), "a" pushes that first word back, "h" pushes a
 * spare word (taken before), "q" pops one back into the spares; a count
 * before a letter repeats it. */
#define SPARES 40
static const char *script;
static uint32_t popped[8], spare[SPARES];
static int npopped, nspare;

static void run_script(struct tw__states *t)
{
    for (const char *c = script; *c; c++) {
        int n = 1;
        if (*c >= '0' && *c <= '9')
            for (n = 0; *c >= '0' && *c <= '9'; c++)
                n = n * 10 + (*c - '0');
        while (n--) {
            switch (*c) {
            case 'p':
                assert_true(npopped < 8);
                assert_int_equal(tw__state_get(t, &popped[npopped++]), 0);
                break;
            case 'a':
                tw__state_put(t, popped[0]);
                break;
            case 'h':
                assert_true(nspare > 0);
                tw__state_put(t, spare[--nspare]);
                break;
            default:
                assert_int_equal(*c, 'q');
                assert_true(nspare < SPARES);
                assert_int_equal(tw__state_get(t, &spare[nspare++]), 0);
            }
        }
    }
}

void tw__st_test_before_swap(struct tw__states *t)
{
    void (*f)(struct tw__states *) = meanwhile;
    if (f) { /* (only then written: the racing threads below only read it) */
        meanwhile = NULL;
        f(t);
    }
}

/* The case the stack's tag is for (ABA): a pop reads the top, index i,
 * whose next is j; before its exchange another pops i and j, pushes what
 * it likes and pushes i back last, or pops back what it pushed above i.
 * The top is index i again, its next no longer j. The exchange must fail
 * and the pop read again: it takes i, and the next pop none of the words
 * the other holds. With the tag lost the exchange succeeds and makes j
 * the top. Each script runs after each of six openings (the last changes
 * before the read: 31 pops in a row, then 0 to 40 words taken and given
 * back in a row), so that a tag that moves wrongly, back where it was
 * after as many pushes as pops, or stuck after a few dozen pops or pushes
 * in a row, is caught by one of them. */
static void test_stale_pop_fails_its_exchange(void **state)
{
    (void)state;
    static const char *const scripts[] = {
        "ppa",        /* the classic: pop i and j, push i */
        "ppha",       /* as many pushes as pops */
        "pp30ha",     /* 31 pushes in a row */
        "ppa31h31q",  /* i back, then 31 pushes and 31 pops above it */
    };
    static const int opening[] = { 0, 1, 2, 3, 5, 40 };
    struct count_alloc a = { 0 };
    struct tw__states *t = mk(&a);
    uint32_t got, next, w[40];
    for (size_t s = 0; s < sizeof(scripts) / sizeof(scripts[0]); s++) {
        for (size_t o = 0; o < sizeof(opening) / sizeof(opening[0]); o++) {
            for (nspare = 0; nspare < 31; nspare++)
                assert_int_equal(tw__state_get(t, &spare[nspare]), 0);
            for (int k = 0; k < opening[o]; k++)
                assert_int_equal(tw__state_get(t, &w[k]), 0);
            for (int k = opening[o] - 1; k >= 0; k--)
                tw__state_put(t, w[k]);
            script = scripts[s];
            npopped = 0;
            meanwhile = run_script;
            assert_int_equal(tw__state_get(t, &got), 0);
            assert_null(meanwhile); /* it ran */
            assert_int_equal(got, popped[0]);
            assert_int_equal(tw__state_get(t, &next), 0);
            assert_int_not_equal(next, got);
            for (int k = 1; k < npopped; k++)
                assert_int_not_equal(next, popped[k]);
            for (int k = 0; k < nspare; k++)
                assert_int_not_equal(next, spare[k]);
            tw__state_put(t, next);
            for (int k = 1; k < npopped; k++)
                tw__state_put(t, popped[k]);
            tw__state_put(t, got);
            while (nspare)
                tw__state_put(t, spare[--nspare]);
        }
    }
    assert_int_equal(a.live, 3);
    tw__states_release(t);
    assert_int_equal(a.live, 0);
}

/* Threads take and give back words at once, each holding up to 64 at a
 * time: no word is ever held by two (each holder marks it), and the words
 * come back to be taken again. The counting allocator is called only
 * under the table's mutex (a new chunk) and at the end. */
#define RACE_THREADS 4
#define RACE_ROUNDS 100000
#define RACE_HELD 64
#define RACE_MAX (RACE_THREADS * RACE_HELD + 2 * CHUNK)

struct race {
    struct tw__states *t;
    _Atomic int owner[RACE_MAX];
    _Atomic long twice;
    _Atomic long out_of_range;
};

struct racer {
    struct race *r;
    int id;
};

static void *racer(void *arg)
{
    struct racer *me = arg;
    struct race *r = me->r;
    uint32_t held[RACE_HELD];
    unsigned n = 0, seed = (unsigned)me->id * 2654435761u + 1u;
    for (int k = 0; k < RACE_ROUNDS; k++) {
        seed = seed * 1103515245u + 12345u;
        if (n == RACE_HELD || (n && (seed >> 16) % 2)) {
            unsigned pick = (seed >> 8) % n;
            uint32_t i = held[pick];
            held[pick] = held[--n];
            atomic_store(&r->owner[i], 0);
            tw__state_put(r->t, i);
        } else {
            uint32_t i;
            if (tw__state_get(r->t, &i) != 0)
                continue;
            if (i >= RACE_MAX) {
                atomic_fetch_add(&r->out_of_range, 1);
                tw__state_put(r->t, i);
                continue;
            }
            if (atomic_exchange(&r->owner[i], me->id + 1) != 0)
                atomic_fetch_add(&r->twice, 1);
            atomic_store(tw__state_word(r->t, i), (uint32_t)me->id + 1);
            held[n++] = i;
        }
    }
    while (n) {
        uint32_t i = held[--n];
        atomic_store(&r->owner[i], 0);
        tw__state_put(r->t, i);
    }
    return NULL;
}

static void test_threads_take_and_give_back_at_once(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct race *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->t = mk(&a);
    pthread_t th[RACE_THREADS];
    struct racer rs[RACE_THREADS];
    for (int k = 0; k < RACE_THREADS; k++) {
        rs[k] = (struct racer){ r, k };
        assert_int_equal(pthread_create(&th[k], NULL, racer, &rs[k]), 0);
    }
    for (int k = 0; k < RACE_THREADS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    assert_int_equal(atomic_load(&r->twice), 0);
    /* at most RACE_THREADS * RACE_HELD out at once: one chunk's worth (a
     * thread that found the stack empty pops again under the mutex) */
    assert_int_equal(atomic_load(&r->out_of_range), 0);
    assert_int_equal(a.live, 2 + 1);
    tw__states_release(r->t);
    assert_int_equal(a.live, 0);
    free(r);
}

/* A word written and read over and over by its holder, as an op's
 * completion does from any thread, while another thread takes the words
 * of 33 chunks, which grows the directory four times: the holder's
 * address of its word is read through whatever directory it finds, and
 * must read and keep what it wrote. (Under ThreadSanitizer, CI's stage, a
 * directory published or read without its release and acquire is a
 * race between the growing thread's copy of the pointers and the
 * holder's read of them: the holder's word came from a pop long before,
 * which orders nothing of the growth.) */
struct holder {
    struct tw__states *t;
    uint32_t idx;
    _Atomic int stop;
    _Atomic long rounds;
    long wrong;
    uint32_t last;
};

static void *holder_fn(void *arg)
{
    struct holder *h = arg;
    uint32_t v = 0;
    while (!atomic_load(&h->stop)) {
        _Atomic uint32_t *w = tw__state_word(h->t, h->idx);
        atomic_store_explicit(w, ++v, memory_order_release);
        if (atomic_load_explicit(w, memory_order_acquire) != v)
            h->wrong++;
        atomic_fetch_add(&h->rounds, 1);
    }
    h->last = v;
    return NULL;
}

static void test_word_held_while_the_directory_grows(void **state)
{
    (void)state;
    struct count_alloc a = { 0 };
    struct holder h = { .t = mk(&a) };
    assert_int_equal(tw__state_get(h.t, &h.idx), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, holder_fn, &h), 0);
    while (atomic_load(&h.rounds) == 0)
        sched_yield();
    const uint32_t n = 33 * CHUNK - 1;
    uint32_t *idx = malloc(n * sizeof(*idx));
    assert_non_null(idx);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(tw__state_get(h.t, &idx[i]), 0);
    long seen = atomic_load(&h.rounds);
    while (atomic_load(&h.rounds) < seen + 100) /* still going after it */
        sched_yield();
    atomic_store(&h.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(h.wrong, 0);
    assert_int_equal(atomic_load(tw__state_word(h.t, h.idx)), h.last);
    assert_int_equal(a.live, 1 + 5 + 33); /* the table, five directories, 33 chunks */
    for (uint32_t i = 0; i < n; i++)
        tw__state_put(h.t, idx[i]);
    tw__state_put(h.t, h.idx);
    tw__states_release(h.t);
    assert_int_equal(a.live, 0);
    free(idx);
}

/* The creator's release and two holders' on threads of their own, in
 * any order, the last freeing the table: each holder writes its word
 * after all three have met, then gives it back. What a holder wrote
 * must come before the free, whichever thread frees (under
 * ThreadSanitizer, a count of references dropped without its
 * acquire and release is a race between a word's write and the free).
 * 200 rounds, so that each is the last in some. */
#define LAST_ROUNDS 200

struct last_holder {
    struct tw__states *t;
    _Atomic int *met; /* how many of the three are there */
    int rc;
};

static void meet(_Atomic int *met)
{
    atomic_fetch_add(met, 1);
    while (atomic_load(met) < 3)
        sched_yield();
}

static void *last_holder_fn(void *arg)
{
    struct last_holder *h = arg;
    uint32_t i;
    h->rc = tw__state_get(h->t, &i);
    meet(h->met);
    if (h->rc == 0) {
        atomic_store_explicit(tw__state_word(h->t, i), 1, memory_order_relaxed);
        tw__state_put(h->t, i);
    }
    return NULL;
}

static void test_last_release_on_any_thread_frees(void **state)
{
    (void)state;
    for (int round = 0; round < LAST_ROUNDS; round++) {
        struct count_alloc a = { 0 };
        struct tw__states *t = mk(&a);
        _Atomic int met = 0;
        struct last_holder hs[2] = { { t, &met, -1 }, { t, &met, -1 } };
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&th[k], NULL, last_holder_fn, &hs[k]), 0);
        meet(&met);
        tw__states_release(t);
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_join(th[k], NULL), 0);
        assert_int_equal(hs[0].rc, 0);
        assert_int_equal(hs[1].rc, 0);
        assert_int_equal(a.live, 0);
        assert_int_equal(a.frees, 3); /* the table, its directory, its chunk */
    }
}

/* Two threads that find a new table empty at once: each spins until the
 * other is there, then takes a word. One adds the first chunk under the
 * table's mutex; the other, having found the stack empty too, waits
 * there and pops a word of that chunk. Each gets a word (0, not an
 * error), the two differ, and only one chunk was added. The threads meet
 * in most rounds on two CPUs or more, so a round that does not (one got
 * there first) costs nothing but its time. */
#define MEET_ROUNDS 500

struct meet {
    struct tw__states *t;
    _Atomic int ready;
};

struct taker {
    struct meet *m;
    int rc;
    uint32_t idx;
};

static void *meet_taker(void *arg)
{
    struct taker *me = arg;
    atomic_fetch_add(&me->m->ready, 1);
    while (atomic_load(&me->m->ready) < 2)
        ;
    me->rc = tw__state_get(me->m->t, &me->idx);
    return NULL;
}

static void test_first_takers_meet_at_the_lock(void **state)
{
    (void)state;
    for (int round = 0; round < MEET_ROUNDS; round++) {
        struct count_alloc a = { 0 };
        struct meet m = { .t = mk(&a) };
        struct taker tk[2] = { { &m, -1, 0 }, { &m, -1, 0 } };
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&th[k], NULL, meet_taker, &tk[k]), 0);
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_join(th[k], NULL), 0);
        assert_int_equal(tk[0].rc, 0);
        assert_int_equal(tk[1].rc, 0);
        assert_int_not_equal(tk[0].idx, tk[1].idx);
        assert_true(tk[0].idx < CHUNK && tk[1].idx < CHUNK);
        assert_int_equal(a.live, 2 + 1); /* the table, its directory, one chunk */
        tw__state_put(m.t, tk[0].idx);
        tw__state_put(m.t, tk[1].idx);
        tw__states_release(m.t);
        assert_int_equal(a.live, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words_once_each_then_reused),
        cmocka_unit_test(test_table_outlives_its_creator),
        cmocka_unit_test(test_refused_allocations_change_nothing),
        cmocka_unit_test(test_words_of_many_chunks),
        cmocka_unit_test(test_stale_pop_fails_its_exchange),
        cmocka_unit_test(test_threads_take_and_give_back_at_once),
        cmocka_unit_test(test_word_held_while_the_directory_grows),
        cmocka_unit_test(test_last_release_on_any_thread_frees),
        cmocka_unit_test(test_first_takers_meet_at_the_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
