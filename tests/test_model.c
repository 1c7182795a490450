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
        total += model_run(&src, 3000, 2); /* half of them threaded */
    }
    assert_true(total >= (long)seeds * 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_model),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
