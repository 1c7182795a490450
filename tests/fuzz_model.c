/* fuzz_model.c: libFuzzer target driving the reference model (model.h)
 * from fuzz input. Any disagreement with the model aborts. */
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct msrc src = { data, size, 0 };
    model_run(&src, 4096);
    return 0;
}
