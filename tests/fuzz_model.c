/* fuzz_model.c: libFuzzer target driving the reference model (model.h)
 * from fuzz input. Any disagreement with the model aborts. */
#include "model.h"

/* fuzz_model_threaded is this file built with TW_FUZZ_THREADED_ONE_IN=1:
 * every input on a threaded timer. */
#ifndef TW_FUZZ_THREADED_ONE_IN
#define TW_FUZZ_THREADED_ONE_IN 32
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct msrc src = { data, size, 0 };
    /* A threaded run costs tens of manual ones (a driver thread, a round
     * trip to it at every advance, and a driver that re-reads a clock
     * that stands still between the model's steps), so one input in 32
     * is threaded. The fuzzer keeps those that reach new code, so they
     * still take more of its time than that: 60 s run ~50,000 inputs,
     * against ~280,000 with no threaded ones. */
    model_run(&src, 4096, TW_FUZZ_THREADED_ONE_IN, 0);
    return 0;
}
