/*
 * registry.c: which implementation serves which KV design. Adding a design
 * is one line here plus its file.
 */
#include "attn.h"

const al_attn_ops *al_attn_ops_for(const al_config *c) {
    switch (c->attention) {
    case AL_ATTN_MHA:
    case AL_ATTN_GQA:
    case AL_ATTN_MQA: return &al_attn_gqa_ops;
    case AL_ATTN_LRKV: return &al_attn_lrkv_ops;
    case AL_ATTN_MLA: return &al_attn_mla_ops;
    default: return NULL;
    }
}
