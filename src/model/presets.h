/*
 * presets.h: named configurations of `attnlab train` (docs/presets.md), as
 * typed values: the model fields a preset sets (an al_config whose zero
 * fields are "not set", plus the design by name) and its training schedule
 * (zero: not set). Applied below the user's own flags, and resolved with
 * al_config_resolve like anything a user gives.
 */
#ifndef AL_PRESETS_H
#define AL_PRESETS_H

#include "config.h"

typedef struct al_preset_train {
    int context, batch, steps, warmup, eval_every, save_every, eval_tokens;
    double lr;
} al_preset_train;

typedef struct al_preset {
    const char *name;
    const char *summary;
    const char *attention; /* the design's name, NULL: from the head counts */
    al_config model;       /* fields set: nonzero (bytes), the others zero */
    al_preset_train train;
} al_preset;

const al_preset *al_preset_find(const char *name);
/* "tiny, small, ...": the names for messages, into buf (returns buf). */
const char *al_preset_names(char *buf, size_t cap);
/* Copies the preset's model fields into c where given[i] is 0 (indexes of
 * al_config_field_at), and marks them given. */
void al_preset_apply(const al_preset *p, al_config *c, unsigned char *given);

#endif
