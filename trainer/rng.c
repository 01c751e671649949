/*  rng.c - xoshiro256** with splitmix64 seeding; the state is four words,
    saved in checkpoints so a resumed run draws the same numbers. */
#include <math.h>

#include "common/util.h"
#include "trainer/trn.h"

void trn_rng_seed(trn_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = util_splitmix64(&x);
}

static inline uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t trn_rng_next(trn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

double trn_rng_uniform(trn_rng *r)
{
    return (double)(trn_rng_next(r) >> 11) * 0x1.0p-53;
}

double trn_rng_normal(trn_rng *r)
{
    double u1 = trn_rng_uniform(r), u2 = trn_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void trn_rng_perm(trn_rng *r, int *perm, int n)
{
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(trn_rng_next(r) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
