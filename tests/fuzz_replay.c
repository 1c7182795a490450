/* fuzz_replay.c: runs the fuzz target without libFuzzer (any compiler), so
 * that every `meson test` exercises it: over the files and directories
 * named on the command line (a directory: every file in it, in name
 * order, so a run is reproducible), or else over a fixed set of generated
 * inputs. The target aborts on any disagreement with its model; the file
 * being replayed is named first, so a failure says which.
 * TW_CORPUS_STRIDE=n replays every n-th file of a directory only (the
 * valgrind setup sets it: memcheck runs the model ~100x slower). */
#define _DEFAULT_SOURCE /* scandir, alphasort */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* MemorySanitizer (clang 14) intercepts stat but not stat64, which glibc
 * 2.33 and later call under _FILE_OFFSET_BITS=64 (meson's default): the
 * struct stat it fills would read as uninitialised. Mark it written. */
#if defined(__has_feature)
#if __has_feature(memory_sanitizer)
#include <sanitizer/msan_interface.h>
#define MSAN_WRITTEN(p, n) __msan_unpoison((p), (n))
#endif
#endif
#ifndef MSAN_WRITTEN
#define MSAN_WRITTEN(p, n) ((void)0)
#endif

static int stat_path(const char *path, struct stat *st)
{
    int rc = stat(path, st);
    if (rc == 0)
        MSAN_WRITTEN(st, sizeof *st);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[1 << 20]; /* longer inputs are cut, as -max_len would */

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "%s: read error\n", path);
        return -1;
    }
    printf("%s (%zu bytes)\n", path, n);
    fflush(stdout); /* named before it runs: an abort loses no output */
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

static long stride = 1; /* TW_CORPUS_STRIDE */

/* returns how many files it replayed, or -1 */
static long replay_path(const char *path)
{
    struct stat st;
    if (stat_path(path, &st)) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path) ? -1 : 1;
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        perror(path);
        return -1;
    }
    long done = 0, seen = 0;
    for (int i = 0; i < n; i++) {
        char full[4096];
        if (done >= 0 && names[i]->d_name[0] != '.' && seen++ % stride == 0) {
            snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            if (stat_path(full, &st) || !S_ISREG(st.st_mode))
                ; /* not a file: skipped */
            else if (replay_file(full))
                done = -1;
            else
                done++;
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    const char *env = getenv("TW_CORPUS_STRIDE");
    if (env && (stride = strtol(env, NULL, 10)) < 1)
        stride = 1;
    if (argc > 1) {
        long total = 0;
        for (int a = 1; a < argc; a++) {
            long n = replay_path(argv[a]);
            if (n < 0)
                return 2;
            total += n;
        }
        if (!total) {
            fprintf(stderr, "no input found\n");
            return 2;
        }
        if (stride > 1)
            printf("replayed %ld inputs (one file in %ld of a directory)\n", total, stride);
        else
            printf("replayed %ld inputs\n", total);
        return 0;
    }
    static uint8_t gen[8192];
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 200; k++) {
        size_t n = (size_t)(k * 37 % 8192);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            gen[i] = (uint8_t)x;
        }
        LLVMFuzzerTestOneInput(gen, n);
    }
    printf("replayed 200 generated inputs\n");
    return 0;
}
