/* test_tickdiv.c: the nanosecond-to-tick division (src/tickdiv.h) against
 * the hardware divide. Every deadline goes through it, and "never early"
 * rests on its ceiling being exact, so both of its paths are checked: the
 * multiply-and-shift path (x <= lim) and the general one, at their
 * boundary, at multiples of d and one either side, and at random. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tickdiv.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void check_one(const struct tw__div *v, uint64_t x)
{
    uint64_t d = v->d;
    uint64_t want = x / d + (x % d != 0);
    uint64_t got = tw__div_ceil(v, x);
    if (got != want)
        fail_msg("ceil(%llu / %llu): got %llu, want %llu", (unsigned long long)x,
                 (unsigned long long)d, (unsigned long long)got, (unsigned long long)want);
    uint64_t r, q = tw__div_floor(v, x, &r);
    assert_true(q == x / d && r == x % d);
}

static void check_divisor(uint64_t d)
{
    struct tw__div v;
    tw__div_init(&v, d);
    const uint64_t edges[] = {0, 1, 2, d - 1, d, d + 1, 2 * d - 1, 2 * d, 2 * d + 1,
                              v.lim, v.lim + 1, v.lim - 1, (1ull << 63) - 1,
                              1ull << 63, UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - d};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
        check_one(&v, edges[k]);
    for (int k = 0; k < 2000; k++) {
        uint64_t x = rnd() >> (rnd() % 64); /* every magnitude */
        check_one(&v, x);
        /* multiples of d and their neighbours, where a ceiling turns */
        uint64_t q = x / d;
        if (q && q <= UINT64_MAX / d) {
            check_one(&v, q * d);
            check_one(&v, q * d - 1);
            if (q * d < UINT64_MAX)
                check_one(&v, q * d + 1);
        }
    }
}

/* The ticks a timer is likely to be built with. */
static void test_common_ticks(void **state)
{
    (void)state;
    const uint64_t ds[] = {1, 2, 3, 7, 10, 1000, 1024, 999983, 1000000, 1048576,
                           10000000, 100000000, 1000000000, 60000000000ull};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
        check_divisor(ds[k]);
}

/* Powers of two and their neighbours up to the edge of the hot path
 * (d = 2^62) and past it. */
static void test_powers_of_two(void **state)
{
    (void)state;
    for (int s = 1; s < 64; s++) {
        uint64_t p = 1ull << s;
        check_divisor(p - 1);
        check_divisor(p);
        check_divisor(p + 1);
    }
    check_divisor(UINT64_MAX);
}

static void test_random_divisors(void **state)
{
    (void)state;
    for (int k = 0; k < 300; k++) {
        uint64_t d = rnd() >> (rnd() % 64);
        check_divisor(d ? d : 1);
    }
}

/* The hot path really is taken for the deadlines that matter (the next
 * 292 years in ns), so the figures published for it are about this code. */
static void test_hot_path_range(void **state)
{
    (void)state;
    struct tw__div v;
    /* exactly where x + d - 1 reaches 2^63 (tickdiv.h), on every target:
     * a 32-bit one divides in hardware, but keeps the same limit so that
     * tw_schedule's fast path covers the same deadlines */
    tw__div_init(&v, 1000000);
    assert_true(v.lim == (1ull << 63) - 1000000);
    tw__div_init(&v, 1ull << 62);
    assert_true(v.lim == 1ull << 62);
    tw__div_init(&v, (1ull << 62) + 1);
    assert_true(v.lim == 0);
    tw__div_init(&v, 1);
    assert_true(v.lim == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_common_ticks),
        cmocka_unit_test(test_powers_of_two),
        cmocka_unit_test(test_random_divisors),
        cmocka_unit_test(test_hot_path_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
