/* tickdiv.h: nanoseconds to ticks without a hardware divide.
 *
 * Every schedule and every cascade converts a deadline to ticks. A 64-bit
 * `div` costs 20-90 cycles depending on the CPU; the tick is fixed for the
 * life of a timer, so we divide by multiplying with a precomputed
 * reciprocal m = floor((2^64 - 1) / d). The estimate floor(x * m / 2^64)
 * is at most 2 below the true quotient (x < 2^64), so the fix-up loop runs
 * at most twice. Exact for every x and d >= 1. */
#ifndef TW_TICKDIV_H
#define TW_TICKDIV_H

#include <stdint.h>

struct tw__div {
    uint64_t d;
    uint64_t m;
};

static inline void tw__div_init(struct tw__div *v, uint64_t d)
{
    v->d = d;
    v->m = UINT64_MAX / d;
}

static inline uint64_t tw__div_floor(const struct tw__div *v, uint64_t x,
                                     uint64_t *rem)
{
#ifdef __SIZEOF_INT128__
    uint64_t q = (uint64_t)(((unsigned __int128)x * v->m) >> 64);
    uint64_t r = x - q * v->d;
    while (r >= v->d) {
        q++;
        r -= v->d;
    }
#else
    uint64_t q = x / v->d, r = x % v->d;
#endif
    *rem = r;
    return q;
}

/* ceil(x / d), exact, with no overflow for any x. */
static inline uint64_t tw__div_ceil(const struct tw__div *v, uint64_t x)
{
    uint64_t r, q = tw__div_floor(v, x, &r);
    return q + (r != 0);
}

#endif
