/* test_hash.c: the hash of user keys (src/hash.h). SipHash is checked
 * against the reference implementation's published vectors (2-4, whose
 * code 1-3 shares) and against another implementation's 1-3 output. Then
 * the reason it is keyed: keys crafted to collide under one hash key
 * (found here by brute force, as an attacker would offline) must fall
 * apart under another, in a timer's key map and across a purgatory's
 * shards alike, and each timer and purgatory must draw its own key.
 * White-box: linked against the static library. The instances' keys are
 * overwritten with fixed ones where a test needs them, so that every
 * figure asserted here is the same on every run. */
#include "helpers.h"

#include "twheel_purgatory.h"

#include "hash.h"
#include "purgatory.h"
#include "timer.h"

/* The reference vectors use the key 00 01 .. 0f. */
static struct tw__hash_key ref_key(void)
{
    unsigned char b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)i;
    struct tw__hash_key k;
    tw__hash_key_from_bytes(&k, b); /* also checks how bytes become a key */
    return k;
}

static void test_siphash24_reference_vectors(void **state)
{
    (void)state;
    /* veorq/SipHash's vectors.h: message 00 01 .. (len-1), for the lengths
     * that take each path (empty, a tail only, one word, a word and a
     * tail, many words). */
    static const struct {
        size_t len;
        uint64_t h;
    } v[] = {
        { 0, 0x726fdb47dd0e0e31ull },  { 1, 0x74f839c593dc67fdull },
        { 7, 0xab0200f58b01d137ull },  { 8, 0x93f5f5799a932462ull },
        { 15, 0xa129ca6149be45e5ull }, { 63, 0x958a324ceb064572ull },
    };
    struct tw__hash_key k = ref_key();
    unsigned char msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        assert_int_equal(tw__siphash24(&k, msg, v[i].len), v[i].h);
}

/* Bytes of 0x80 and up, which the published vectors (00 .. 3f) never
 * hold: a byte widened through int would spill into the higher bits. The
 * figures are tests/siphash_ref.py's, a SipHash written from the paper
 * that gives every other figure of this file's first two tests. */
static void test_siphash_high_bytes(void **state)
{
    (void)state;
    struct tw__hash_key k = ref_key();
    unsigned char msg[15]; /* ff fe .. f1: a word and a 7-byte tail */
    for (int i = 0; i < 15; i++)
        msg[i] = (unsigned char)(0xff - i);
    assert_int_equal(tw__siphash24(&k, msg, 15), 0x3709d8375309fb8cull);
    assert_int_equal(tw__siphash24(&k, msg, 7), 0x8d2b24fa51917090ull);
    assert_int_equal(tw__key_hash(&k, msg, 15), 0xf730e5d1f505db50ull);
}

/* A message longer than 16 bits of length (70,000 bytes, byte i being
 * i ^ (i >> 8)): every word is taken, not the first 4,464 bytes (70,000
 * less 2^16, whose last length byte is the same). Figures from
 * tests/siphash_ref.py. */
static void test_siphash_past_16_bits_of_length(void **state)
{
    (void)state;
    enum { LEN = 70000 };
    struct tw__hash_key k = ref_key();
    unsigned char *msg = malloc(LEN);
    assert_non_null(msg);
    for (size_t i = 0; i < LEN; i++)
        msg[i] = (unsigned char)(i ^ (i >> 8));
    assert_int_equal(tw__siphash24(&k, msg, LEN), 0xd0d9dfb47362f5b5ull);
    assert_int_equal(tw__key_hash(&k, msg, LEN), 0x4c46192aea72b1eeull);
    free(msg);
}

static void test_siphash13_matches_another_implementation(void **state)
{
    (void)state;
    /* SipHash-1-3 under the zero key, as the Rust crate
     * digest-sip_hash-core's tests give it. */
    struct tw__hash_key z = { 0, 0 };
    assert_int_equal(tw__key_hash(&z, "", 0), 0xd1fba762150c532cull);
    assert_int_equal(tw__key_hash(&z, "siphash", 7), 0x8264ceeccb16bcbeull);
    assert_int_equal(tw__key_hash(&z, "digest-sip_hash", 15), 0xce31007e34130c0aull);
    /* and it is not 2-4 */
    assert_int_not_equal(tw__key_hash(&z, "siphash", 7), tw__siphash24(&z, "siphash", 7));
}

enum { NCRAFT = 32 };

/* NCRAFT keys "c<n>" whose hash under k agrees on the bits in mask (with
 * the first one found): what an attacker who knew k would send. */
static void craft(const struct tw__hash_key *k, uint64_t mask, char out[NCRAFT][16])
{
    int found = 0;
    uint64_t want = 0;
    for (unsigned n = 0; found < NCRAFT; n++) {
        char buf[16];
        snprintf(buf, sizeof buf, "c%u", n);
        uint64_t h = tw__key_hash(k, buf, strlen(buf)) & mask;
        if (found == 0)
            want = h;
        if (h == want)
            memcpy(out[found++], buf, sizeof buf);
    }
}

/* Two fixed hash keys, as a user would pass them to tw_set_hash_key. */
static const unsigned char BYTES_A[16] = "0123456789abcde", BYTES_B[16] = "fedcba987654321";
static struct tw__hash_key KEY_A, KEY_B;

static int setup_keys(void **state)
{
    (void)state;
    tw__hash_key_from_bytes(&KEY_A, BYTES_A);
    tw__hash_key_from_bytes(&KEY_B, BYTES_B);
    return 0;
}

/* The largest number of the crafted keys that share one value of
 * hash & mask under k. */
static int worst_pileup(const struct tw__hash_key *k, uint64_t mask, char keys[NCRAFT][16])
{
    int worst = 0;
    for (int i = 0; i < NCRAFT; i++) {
        uint64_t hi = tw__key_hash(k, keys[i], strlen(keys[i])) & mask;
        int same = 0;
        for (int j = 0; j < NCRAFT; j++)
            same += (tw__key_hash(k, keys[j], strlen(keys[j])) & mask) == hi;
        if (same > worst)
            worst = same;
    }
    return worst;
}

static void test_collisions_do_not_carry_over(void **state)
{
    (void)state;
    static char keys[NCRAFT][16];
    const uint64_t mask = 0xfff; /* a 4096-slot table */
    craft(&KEY_A, mask, keys);
    assert_int_equal(worst_pileup(&KEY_A, mask, keys), NCRAFT);
    /* 32 keys in 4096 slots: an unkeyed hash would pile all 32 up here */
    assert_true(worst_pileup(&KEY_B, mask, keys) <= 2);
}

/* The longest distance from a key's home slot to where it sits in a
 * timer's key map (0: every key at home). */
static uint32_t worst_displacement(tw_timer *t)
{
    const struct tw__keymap *m = &t->shards[0].eng.keys;
    uint32_t worst = 0;
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->slots[i]) {
            uint32_t d = (i - ((uint32_t)m->slots[i]->hash & (m->cap - 1))) & (m->cap - 1);
            worst = d > worst ? d : worst;
        }
    return worst;
}

static tw_timer *timer_with_key(struct fake_clock *c, const unsigned char k[16])
{
    struct tw_options o = manual_opts(c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    assert_int_equal(tw_set_hash_key(t, k), 0);
    return t;
}

/* Keys crafted against timer a's key fill one probe run of its map, every
 * lookup walking it; timer b, with its own key, keeps them near home. */
static void test_timer_key_map_uses_its_own_key(void **state)
{
    (void)state;
    static char keys[NCRAFT][16];
    craft(&KEY_A, 63, keys); /* 32 keys make a 64-slot map */
    struct fake_clock c = { 0 };
    tw_timer *a = timer_with_key(&c, BYTES_A), *b = timer_with_key(&c, BYTES_B);
    for (int i = 0; i < NCRAFT; i++) {
        assert_int_equal(tw_schedule_keyed(a, keys[i], strlen(keys[i]), SEC, noop_fn, NULL, NULL), 0);
        assert_int_equal(tw_schedule_keyed(b, keys[i], strlen(keys[i]), SEC, noop_fn, NULL, NULL), 0);
    }
    assert_int_equal(a->shards[0].eng.keys.cap, 64);
    assert_int_equal(worst_displacement(a), NCRAFT - 1);
    assert_true(worst_displacement(b) <= 3);
    for (int i = 0; i < NCRAFT; i++) { /* every key still found in both */
        assert_int_equal(tw_cancel_keyed(a, keys[i], strlen(keys[i])), 0);
        assert_int_equal(tw_cancel_keyed(b, keys[i], strlen(keys[i])), 0);
    }
    assert_int_equal(tw_check(a, stderr), 0);
    assert_int_equal(tw_check(b, stderr), 0);
    tw_destroy(a);
    tw_destroy(b);
}

static bool never(tw_op *op)
{
    (void)op;
    return false;
}

static void nothing(tw_op *op)
{
    (void)op;
}

static const struct tw_op_ops never_ops = { never, nothing, NULL };

static tw_purgatory *purgatory_with_key(struct fake_clock *c, const unsigned char k[16])
{
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer = manual_opts(c, 0, MS, 64);
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    assert_int_equal(tw_purgatory_set_hash_key(p, k), 0);
    return p;
}

static uint32_t busiest_shard(tw_purgatory *p)
{
    uint32_t worst = 0;
    for (uint32_t s = 0; s < p->nshards; s++)
        worst = p->shards[s].n > worst ? p->shards[s].n : worst;
    return worst;
}

/* Keys crafted to share one of purgatory a's 512 shards (one lock, one
 * chain table) spread over b's. */
static void test_purgatory_shards_use_its_own_key(void **state)
{
    (void)state;
    static char keys[NCRAFT][16];
    craft(&KEY_A, (uint64_t)511 << 40, keys); /* the bits that pick a shard */
    struct fake_clock c = { 0 };
    tw_purgatory *a = purgatory_with_key(&c, BYTES_A), *b = purgatory_with_key(&c, BYTES_B);
    assert_int_equal(a->nshards, 512);
    tw_op *op[2];
    tw_purgatory *pp[2] = { a, b };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(tw_op_create(pp[k], &never_ops, NULL, SEC, &op[k]), 0);
        struct tw_key wk[NCRAFT];
        for (int i = 0; i < NCRAFT; i++)
            wk[i] = (struct tw_key){ keys[i], strlen(keys[i]) };
        assert_int_equal(tw_purgatory_try_complete_else_watch(pp[k], op[k], wk, NCRAFT), 0);
    }
    assert_int_equal(busiest_shard(a), NCRAFT);
    assert_true(busiest_shard(b) <= 2);
    assert_int_equal(tw_purgatory_watched(a), NCRAFT);
    assert_int_equal(tw_purgatory_watched(b), NCRAFT);
    for (int k = 0; k < 2; k++) {
        assert_true(tw_op_force_complete(op[k]));
        tw_op_release(op[k]);
        tw_purgatory_destroy(pp[k], NULL, NULL);
    }
}

/* The setters refuse while keys are placed under the current hash, and
 * change nothing then: every key is still found. */
static void test_set_hash_key_refused_while_keys_are_placed(void **state)
{
    (void)state;
    struct fake_clock c = { 0 };
    tw_timer *t = timer_with_key(&c, BYTES_A);
    assert_int_equal(tw_set_hash_key(NULL, BYTES_B), -EINVAL);
    assert_int_equal(tw_set_hash_key(t, NULL), -EINVAL);
    assert_int_equal(tw_schedule(t, SEC, noop_fn, NULL, NULL), 0); /* unkeyed: no bar */
    assert_int_equal(tw_set_hash_key(t, BYTES_A), 0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, SEC, noop_fn, NULL, NULL), 0);
    assert_int_equal(tw_set_hash_key(t, BYTES_B), -EBUSY);
    assert_int_equal(t->hkey.k0, KEY_A.k0);
    assert_int_equal(t->hkey.k1, KEY_A.k1);
    assert_int_equal(tw_cancel_keyed(t, "k", 1), 0); /* still found */
    assert_int_equal(tw_set_hash_key(t, BYTES_B), 0);
    assert_int_equal(t->hkey.k0, KEY_B.k0);
    assert_int_equal(tw_schedule_keyed(t, "k", 1, SEC, noop_fn, NULL, NULL), 0);
    assert_int_equal(tw_advance(t, 2 * SEC), 2); /* fired: the key is gone */
    assert_int_equal(tw_set_hash_key(t, BYTES_A), 0);
    tw_destroy(t);

    /* threaded (four shards or more): a key on any shard bars it */
    struct atomic_clock ac;
    t = mk_fake(&ac, 0);
    for (int k = 0; k < 8; k++) {
        char key[8];
        snprintf(key, sizeof key, "t%d", k);
        assert_int_equal(tw_set_hash_key(t, BYTES_A), 0);
        assert_int_equal(tw_schedule_keyed(t, key, strlen(key), SEC, noop_fn, NULL, NULL), 0);
        assert_int_equal(tw_set_hash_key(t, BYTES_B), -EBUSY);
        assert_int_equal(tw_cancel_keyed(t, key, strlen(key)), 0);
    }
    tw_destroy(t);

    tw_purgatory *p = purgatory_with_key(&c, BYTES_A);
    assert_int_equal(tw_purgatory_set_hash_key(NULL, BYTES_B), -EINVAL);
    assert_int_equal(tw_purgatory_set_hash_key(p, NULL), -EINVAL);
    tw_op *op;
    assert_int_equal(tw_op_create(p, &never_ops, NULL, SEC, &op), 0);
    struct tw_key wk = { "w", 1 };
    assert_int_equal(tw_purgatory_try_complete_else_watch(p, op, &wk, 1), 0);
    assert_int_equal(tw_purgatory_set_hash_key(p, BYTES_B), -EBUSY);
    assert_int_equal(p->hkey.k0, KEY_A.k0);
    assert_int_equal(tw_purgatory_cancel_key(p, "w", 1, NULL, NULL), 1); /* still found */
    assert_int_equal(tw_purgatory_set_hash_key(p, BYTES_B), 0);
    assert_int_equal(p->hkey.k1, KEY_B.k1);
    tw_op_release(op);
    tw_purgatory_destroy(p, NULL, NULL);
}

static int same_key(const struct tw__hash_key *x, const struct tw__hash_key *y)
{
    return x->k0 == y->k0 && x->k1 == y->k1;
}

#ifdef TW_TEST_WRAP_GETRANDOM
/* The library's getrandom, wrapped at link time (tests/meson.build):
 * refused with EAGAIN (what GRND_NONBLOCK gives before the pool is ready)
 * while refuse_getrandom is set, and counted. */
static int refuse_getrandom, getrandom_calls;
ssize_t __real_getrandom(void *buf, size_t len, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags)
{
    getrandom_calls++;
    if (refuse_getrandom) {
        errno = EAGAIN;
        return -1;
    }
    return __real_getrandom(buf, len, flags);
}
#endif

/* Every timer and purgatory draws its own key: from getrandom, or from
 * the fallback, which must differ from call to call as well. */
static void test_every_instance_draws_its_own_key(void **state)
{
    (void)state;
    struct fake_clock c = { 0 };
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t1, *t2;
    assert_int_equal(tw_create(&t1, &o), 0);
    assert_int_equal(tw_create(&t2, &o), 0);
    tw_purgatory *p1, *p2;
    assert_int_equal(tw_purgatory_create(&p1, NULL), 0);
    assert_int_equal(tw_purgatory_create(&p2, NULL), 0);
    const struct tw__hash_key *k[6] = { &t1->hkey, &t2->hkey, &p1->hkey, &p2->hkey,
                                        &p1->timer->hkey, &p2->timer->hkey };
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            assert_false(same_key(k[i], k[j]));
    struct tw__hash_key f1, f2, r;
    tw__hash_key_fallback(&f1);
    tw__hash_key_fallback(&f2);
    tw__hash_key_init(&r);
    assert_false(same_key(&f1, &f2));
    assert_false(same_key(&f1, &r));
    assert_false(f1.k0 == f1.k1);
#ifdef TW_TEST_WRAP_GETRANDOM
    /* getrandom refused: each instance falls back, and still draws a key
     * of its own (the keys start as memory that held a key: filled with
     * one pattern first, so a key left as it was would repeat) */
    refuse_getrandom = 1;
    int calls = getrandom_calls;
    struct tw__hash_key g[3];
    memset(g, 0x5a, sizeof g);
    tw_timer *t3;
    assert_int_equal(tw_create(&t3, &o), 0);
    for (int i = 0; i < 3; i++)
        tw__hash_key_init(&g[i]);
    refuse_getrandom = 0;
    assert_int_equal(getrandom_calls - calls, 4);
    const struct tw__hash_key *kk[5] = { &g[0], &g[1], &g[2], &t3->hkey, &f1 };
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++) { /* each half drawn: neither repeats */
            assert_false(kk[i]->k0 == kk[j]->k0);
            assert_false(kk[i]->k1 == kk[j]->k1);
        }
    assert_false(g[0].k0 == g[0].k1);
    tw_destroy(t3);
#endif
    tw_purgatory_destroy(p1, NULL, NULL);
    tw_purgatory_destroy(p2, NULL, NULL);
    tw_destroy(t1);
    tw_destroy(t2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siphash24_reference_vectors),
        cmocka_unit_test(test_siphash_high_bytes),
        cmocka_unit_test(test_siphash_past_16_bits_of_length),
        cmocka_unit_test(test_siphash13_matches_another_implementation),
        cmocka_unit_test(test_collisions_do_not_carry_over),
        cmocka_unit_test(test_timer_key_map_uses_its_own_key),
        cmocka_unit_test(test_purgatory_shards_use_its_own_key),
        cmocka_unit_test(test_set_hash_key_refused_while_keys_are_placed),
        cmocka_unit_test(test_every_instance_draws_its_own_key),
    };
    return cmocka_run_group_tests(tests, setup_keys, NULL);
}
