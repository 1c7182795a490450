/* test_model.c: the reference model (model.h) driven by seeded PRNGs:
 * thousands of random schedule / periodic / keyed / cancel / reschedule /
 * drain / advance steps per seed, with allocations failing now and then,
 * over several wheel geometries, manual and threaded, every one checked. */
#include "helpers.h"
#include "model.h"

static void test_random_model(void **state)
{
    (void)state;
    const char *env = getenv("TW_MODEL_SEEDS");
    int seeds = env ? atoi(env) : 40;
    long total = 0;
    for (int s = 1; s <= seeds; s++) {
        struct msrc src = { NULL, 0, 0x9E3779B97F4A7C15ull * (uint64_t)s };
        total += model_run(&src, 3000, 2, 0); /* half of them threaded */
    }
    assert_true(total >= (long)seeds * 3000);
}

/* The largest wheels, 1024 and 4096 slots a level (10 and 12 bits: 64 is
 * a multiple of neither, so the top level is a partial one), which the
 * seeds above never pick: fewer, shorter runs, as tw_check, run at every
 * step, reads every list head of every level made (up to 393,216 at
 * 4096). */
static void test_random_model_big_wheels(void **state)
{
    (void)state;
    const char *env = getenv("TW_MODEL_SEEDS");
    int seeds = env ? atoi(env) / 4 + 1 : 8;
    long total = 0;
    for (int s = 1; s <= seeds; s++) {
        struct msrc src = { NULL, 0, 0xD1B54A32D192ED03ull * (uint64_t)s };
        total += model_run(&src, 600, 2, s & 1 ? 4096 : 1024);
    }
    assert_true(total >= (long)seeds * 600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_random_model_big_wheels),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
