/*
 * registry.c: the list of KV designs (AL_ATTN_DESIGNS in attn.h) and the
 * look-ups over it. Adding a design is one line in that list plus its file.
 */
#include <stdio.h>
#include <string.h>

#include "attn.h"

#define AL_ATTN_PTR_(e, ops) &ops,
static const al_attn_ops *const designs[AL_ATTN_COUNT] = {AL_ATTN_DESIGNS(AL_ATTN_PTR_)};
#undef AL_ATTN_PTR_

const al_attn_ops *al_attn_design(int k) { return k >= 0 && k < AL_ATTN_COUNT ? designs[k] : NULL; }

const al_attn_ops *al_attn_ops_for(const al_config *c) { return al_attn_design(c->attention); }

const char *al_attn_name(int k) { return k >= 0 && k < AL_ATTN_COUNT ? designs[k]->name : "?"; }

int al_attn_from_name(const char *s, int *k) {
    for (int i = 0; s && i < AL_ATTN_COUNT; i++)
        if (!strcmp(s, designs[i]->name)) return *k = i, 0;
    return -1;
}

const char *al_attn_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < AL_ATTN_COUNT && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i == 0 ? "" : i + 1 < AL_ATTN_COUNT ? ", " : " or ",
                               designs[i]->name);
    return buf;
}

void al_attn_head_widths(const al_config *c, int *dk, int *dv) {
    const al_attn_ops *d = al_attn_ops_for(c);
    if (d && d->head_widths) d->head_widths(c, dk, dv);
    else *dk = *dv = c->head_dim;
}

void al_attn_cache_formula(const al_config *c, char *buf, size_t cap) {
    const al_attn_ops *d = al_attn_ops_for(c);
    if (d && d->cache_formula) d->cache_formula(c, buf, cap);
    else snprintf(buf, cap, "%zu values", d ? d->cache_values_per_token(c) : (size_t)0);
}

void al_attn_describe(const al_config *c, char *buf, size_t cap) {
    const al_attn_ops *d = al_attn_ops_for(c);
    if (d && d->describe) d->describe(c, buf, cap);
    else snprintf(buf, cap, "%s attention (%d heads, head dim %d)", al_attn_name(c->attention), c->num_heads, c->head_dim);
}

void al_attn_figure_title(const al_config *c, char *buf, size_t cap) {
    const al_attn_ops *d = al_attn_ops_for(c);
    if (d && d->figure_title) d->figure_title(c, buf, cap);
    else snprintf(buf, cap, "%s", d ? d->title : "?");
}
