/*
 * kvq_internal.h: the quantised-cache decode kernels (kvq_kern.h, built as
 * _avx512, _avx2 and _generic) that decode.c dispatches to. One work item:
 * heads [g pg, (g+1) pg) of KV group g against positions [j0, j0 + n) of the
 * quantised part (whole blocks), the cache view v giving the key and value
 * column ranges as for an unquantised cache.
 *   al_kvq_scores_*: S[i][j - j0] = scale * q_i . key_j (raw scores)
 *   al_kvq_values_*: P[i][0 .. dv + dv2) = sum_j S[i][j - j0] value_j
 */
#ifndef AL_KVQ_INTERNAL_H
#define AL_KVQ_INTERNAL_H

#include "attn.h"
#include "kvq.h"

#define AL_KVQ_SET_DECL(sfx)                                                                                       \
    void al_kvq_scores_##sfx(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg,     \
                             const float *Q, int ldq, int j0, int n, float *S, int lds);                          \
    void al_kvq_values_##sfx(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg,     \
                             int j0, int n, const float *S, int lds, float *P, int ldp);
AL_KVQ_SET_DECL(avx512)
AL_KVQ_SET_DECL(avx2)
AL_KVQ_SET_DECL(generic)
#undef AL_KVQ_SET_DECL

#endif
