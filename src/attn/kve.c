/*
 * kve.c: the names of the eviction policies (kve.h).
 */
#include <string.h>

#include "kve.h"

#define AL_KVE_NAME_(e, s) s,
static const char *const kve_names[AL_KVE_COUNT] = {AL_KVE_METHODS(AL_KVE_NAME_)};
#undef AL_KVE_NAME_

/* the method named s, or -1 */
int al_kve_from_name(const char *s) {
    for (int i = 0; s && i < AL_KVE_COUNT; i++)
        if (!strcmp(s, kve_names[i])) return i;
    return -1;
}

/* m's name ("?" for an unknown value) */
const char *al_kve_name(al_kve_method m) { return (unsigned)m < AL_KVE_COUNT ? kve_names[m] : "?"; }
