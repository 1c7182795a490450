/* test_big_key.c: keys of more than 2 GiB, which the API accepts (up to
 * UINT32_MAX bytes) and a keyed task's record holds as a uint32_t length;
 * a key of UINT32_MAX bytes, the longest; and a purgatory's watch key
 * past 4 GiB (its keys have no bound but size_t's).
 *
 * A length past 2^31 is where a signed type would go wrong: read back
 * as negative, or widened with its sign, it would no longer equal the
 * caller's size_t, and the task under the key would be lost to
 * tw_cancel_keyed and to replacement. Nothing smaller reaches that bit.
 *
 * The caller's key is a private anonymous mapping that is never written
 * but for a few bytes: reading it maps the kernel's zero page, so it
 * costs address space, not memory. The timer's copy is real: 2 GiB
 * resident while a task holds the key (one at a time here), 4 GiB for the
 * longest key. Each call hashes the key whole (SipHash, about a second a
 * call on a 2-vCPU VM for 2 GiB).
 *
 * Skipped where it cannot run or has nothing to find: a 32-bit target
 * (no 2 GiB allocation), less than 6 GiB of memory available, valgrind
 * (its shadow of 2 GiB and its pace: the valgrind setup leaves the `big`
 * suite out), and ThreadSanitizer (the test starts no thread, and each
 * hash of the key took it half a minute, 3 minutes in all). The longest
 * key's test and the purgatory's also skip themselves below 10 GiB
 * available. Under MemorySanitizer, whose shadow doubles what the copies
 * hold, the bounds are 12 and 20 GiB. */
#include "helpers.h"
#include "twheel_purgatory.h"

#include <sys/mman.h>

#define BIG ((size_t)1 << 31) /* the top bit of a uint32_t length */

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* MemorySanitizer shadows every byte the timer copies with one of its
 * own: the memory each test needs doubles. */
#if defined(__has_feature)
#if __has_feature(memory_sanitizer)
#define MEM_NEED(gib) ((uint64_t)(gib) << 31)
#endif
#endif
#ifndef MEM_NEED
#define MEM_NEED(gib) ((uint64_t)(gib) << 30)
#endif

/* MemAvailable in bytes, or 0 if /proc/meminfo does not say. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* 2^32 + 4096 bytes (every test's key: the purgatory's, past 4 GiB, is
 * the longest), zero but where a test sets a byte, which it puts back */
static unsigned char *big_key;
static size_t big_map_len;

static int setup(void **state)
{
    (void)state;
    big_map_len = (size_t)UINT32_MAX + 4097; /* 2^32 + 4096 */
    void *p = mmap(NULL, big_map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    big_key = p;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    munmap(big_key, big_map_len);
    big_key = NULL;
    return 0;
}

/* The end of each test, with nothing pending: the timer gave back its
 * copies of the key (it holds under 1 GiB), passes its check, and is
 * destroyed; the key's last byte, which the test set, is put back. */
static void finish(tw_timer *t, size_t len)
{
    struct tw_stats s;
    tw_stats(t, &s);
    assert_true(s.memory_bytes < (1ull << 30));
    assert_check(t);
    tw_destroy(t);
    big_key[len - 1] = 0;
}

/* One task under a key of 2^31 + 5 bytes: found by an equal key, not by
 * one a byte shorter (its prefix) or one that differs in its last byte;
 * replaced under it, fired once, and cancelled under it. */
static void test_key_past_2_gib(void **state)
{
    (void)state;
    const size_t len = BIG + 5;
    big_key[len - 1] = 'k'; /* the one byte that tells the keys apart */

    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    int fired = 0;
    tw_id first, second;
    assert_int_equal(tw_schedule_keyed(t, big_key, len, 10 * MS, count_fn, &fired, &first), 0);
    assert_int_equal(tw_pending(t), 1);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_true(s.memory_bytes > len); /* the timer holds a copy */

    /* a prefix of the key, and the key with its last byte changed, are
     * other keys: no task under them, and the task stays */
    assert_int_equal(tw_cancel_keyed(t, big_key, len - 1), -ENOENT);
    big_key[len - 1] = 'j';
    assert_int_equal(tw_cancel_keyed(t, big_key, len), -ENOENT);
    big_key[len - 1] = 'k';
    assert_int_equal(tw_pending(t), 1);

    /* the same key again replaces the task: the first id is gone */
    assert_int_equal(tw_schedule_keyed(t, big_key, len, 20 * MS, count_fn, &fired, &second), 0);
    assert_true(second != first);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_cancel(t, first), -ENOENT);
    assert_check(t);
    uint64_t when;
    assert_int_equal(tw_deadline(t, second, &when), 0);
    assert_int_equal(when, 20 * MS);

    /* it fires once, at its deadline, and takes its key's copy with it */
    c.now = 20 * MS;
    assert_int_equal(tw_advance(t, c.now), 1);
    assert_int_equal(fired, 1);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel_keyed(t, big_key, len), -ENOENT);

    /* and a task under it is cancelled by it */
    assert_int_equal(tw_schedule_keyed(t, big_key, len, 10 * MS, count_fn, &fired, NULL), 0);
    assert_int_equal(tw_cancel_keyed(t, big_key, len), 0);
    assert_int_equal(tw_pending(t), 0);
    c.now = 60 * MS;
    assert_int_equal(tw_advance(t, c.now), 0);
    assert_int_equal(fired, 1);
    finish(t, len);
}

/* A key of UINT32_MAX bytes, the most a record's uint32_t length holds
 * and the longest the header accepts ("above UINT32_MAX" is refused): a
 * bound written `<` for `<=`, or a length cut short on its way into the
 * record, would refuse or lose it. One byte more is refused, and leaves
 * the task under the key as it was; the key, not its prefix, cancels it. */
static void test_key_of_uint32_max_bytes(void **state)
{
    (void)state;
    if (mem_available() < MEM_NEED(10)) {
        printf("skipped: less than %llu GiB available\n",
               (unsigned long long)(MEM_NEED(10) >> 30));
        skip();
    }
    const size_t len = UINT32_MAX;
    big_key[len - 1] = 'm';

    struct fake_clock c;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    int fired = 0;
    tw_id id;
    assert_int_equal(tw_schedule_keyed(t, big_key, len, 10 * MS, count_fn, &fired, &id), 0);
    assert_int_equal(tw_pending(t), 1);
    struct tw_stats s;
    tw_stats(t, &s);
    assert_true(s.memory_bytes > len); /* the timer holds the whole key */

    /* one byte more: refused, and the task under the key is untouched */
    assert_int_equal(tw_schedule_keyed(t, big_key, len + 1, 5 * MS, count_fn, &fired, NULL),
                     -EINVAL);
    assert_int_equal(tw_pending(t), 1);
    uint64_t when;
    assert_int_equal(tw_deadline(t, id, &when), 0);
    assert_int_equal(when, 10 * MS);

    /* its prefix is another key; the key itself cancels the task */
    assert_int_equal(tw_cancel_keyed(t, big_key, len - 1), -ENOENT);
    assert_int_equal(tw_pending(t), 1);
    assert_int_equal(tw_cancel_keyed(t, big_key, len), 0);
    assert_int_equal(tw_pending(t), 0);
    assert_int_equal(tw_cancel(t, id), -ENOENT);
    c.now = 20 * MS;
    assert_int_equal(tw_advance(t, c.now), 0);
    assert_int_equal(fired, 0);
    finish(t, len);
}

/* A purgatory's watch key past 4 GiB (2^32 + 5 bytes): the purgatory's
 * keys have no bound of their own (size_t all the way), so a length cut
 * to 32 bits anywhere (5 here) would find the ops under the key's first
 * 5 bytes, or lose them under the whole key. Two ops watch the key; the
 * key with its last byte changed, or cut to 5 bytes, finds neither; an
 * event on the whole key completes the one that is ready, once, and
 * tw_purgatory_cancel_key by the whole key (not by 5 bytes) hands the
 * other over. Skipped below 10 GiB available: the purgatory's copy of the
 * key is 4 GiB resident. */
struct big_op {
    int ready, completed, handed;
};

static bool big_try(tw_op *op)
{
    struct big_op *b = tw_op_ctx(op);
    return b->ready && tw_op_force_complete(op);
}

static void big_complete(tw_op *op)
{
    struct big_op *b = tw_op_ctx(op);
    b->completed++;
}

static void big_handed(tw_op *op, void *arg)
{
    struct big_op *b = tw_op_ctx(op);
    (void)arg;
    b->handed++;
}

static void test_purgatory_key_past_4_gib(void **state)
{
    (void)state;
    if (mem_available() < MEM_NEED(10)) {
        printf("skipped: less than %llu GiB available\n",
               (unsigned long long)(MEM_NEED(10) >> 30));
        skip();
    }
    const size_t len = (size_t)UINT32_MAX + 6; /* 2^32 + 5 */
    big_key[len - 1] = 'p';

    static const struct tw_op_ops ops = { big_try, big_complete, NULL };
    struct fake_clock c;
    struct tw_purgatory_options o;
    tw_purgatory_options_init(&o);
    o.timer = manual_opts(&c, 0, MS, 64);
    tw_purgatory *p;
    assert_int_equal(tw_purgatory_create(&p, &o), 0);
    struct big_op b[2] = { { 0 }, { 0 } };
    tw_op *op[2];
    struct tw_key k = { big_key, len };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tw_op_create(p, &ops, &b[i], 10 * SEC, &op[i]), 0);
        assert_int_equal(tw_purgatory_try_complete_else_watch(p, op[i], &k, 1), 0);
    }
    assert_int_equal(tw_purgatory_watched(p), 2);

    /* the length cut to 32 bits, and the key with its last byte changed,
     * are other keys: nothing under them, nothing tried */
    b[0].ready = 1;
    assert_int_equal(tw_purgatory_check_and_complete(p, big_key, len & UINT32_MAX), 0);
    big_key[len - 1] = 'q';
    assert_int_equal(tw_purgatory_check_and_complete(p, big_key, len), 0);
    big_key[len - 1] = 'p';
    assert_int_equal(b[0].completed, 0);
    assert_int_equal(tw_purgatory_watched(p), 2);

    /* the key itself: the ready op completes, once, and leaves the list */
    assert_int_equal(tw_purgatory_check_and_complete(p, big_key, len), 1);
    assert_int_equal(b[0].completed, 1);
    assert_int_equal(tw_purgatory_watched(p), 1);
    assert_int_equal(tw_purgatory_delayed(p), 1);

    /* the other is handed over by the whole key, not by its first bytes */
    assert_int_equal(tw_purgatory_cancel_key(p, big_key, len & UINT32_MAX, big_handed, NULL), 0);
    assert_int_equal(tw_purgatory_cancel_key(p, big_key, len, big_handed, NULL), 1);
    assert_int_equal(b[1].handed, 1);
    assert_int_equal(b[1].completed, 0);
    assert_int_equal(b[0].handed, 0);
    assert_int_equal(tw_purgatory_watched(p), 0);
    assert_int_equal(tw_purgatory_delayed(p), 0);
    for (int i = 0; i < 2; i++)
        tw_op_release(op[i]);
    tw_purgatory_destroy(p, NULL, NULL);
    big_key[len - 1] = 0;
}

int main(void)
{
    const char *why = UNDER_TSAN ? "ThreadSanitizer"
                      : sizeof(size_t) < 8 ? "a 32-bit target"
                      : NULL;
    if (why) {
        printf("skipped: %s\n", why);
        return 77; /* meson's "skipped" */
    }
    if (mem_available() < MEM_NEED(6)) {
        printf("skipped: less than %llu GiB available\n",
               (unsigned long long)(MEM_NEED(6) >> 30));
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_past_2_gib),
        cmocka_unit_test(test_key_of_uint32_max_bytes),
        cmocka_unit_test(test_purgatory_key_past_4_gib),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
