/*
 * presets.h: named sets of `attnlab train` flag values. A preset is a list of
 * "flag=value" strings applied through the same flag table as the command
 * line, so a preset can never set something a user could not.
 */
#ifndef AL_PRESETS_H
#define AL_PRESETS_H

typedef struct al_preset {
    const char *name;
    const char *summary;
    const char *const *values; /* NULL-terminated "flag=value" list */
} al_preset;

const al_preset *al_preset_find(const char *name);
const al_preset *al_preset_list(int *n);

#endif
