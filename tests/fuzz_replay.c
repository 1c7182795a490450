/* fuzz_replay.c: runs the fuzz target without libFuzzer (any compiler):
 * over the files named on the command line, or else over a fixed set of
 * generated inputs, so the target is exercised by every `meson test`. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int a = 1; a < argc; a++) {
            FILE *f = fopen(argv[a], "rb");
            if (!f)
                return 2;
            static uint8_t buf[1 << 20];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            LLVMFuzzerTestOneInput(buf, n);
        }
        printf("replayed %d inputs\n", argc - 1);
        return 0;
    }
    static uint8_t buf[8192];
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 200; k++) {
        size_t n = (size_t)(k * 37 % 8192);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("replayed 200 generated inputs\n");
    return 0;
}
