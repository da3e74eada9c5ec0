/*
 * colormap.h: matplotlib-exact colour maps and the norms that turn a data
 * value into a position t in [0, 1] along a map.
 *
 * Data structure: an al_cmap is a 256-entry lookup table, the same table
 * matplotlib builds (Colormap._lut without its three extra under/over/bad
 * rows), kept twice: as doubles (lut) and as bytes (lut8). The byte table
 * is what matplotlib's Colormap.__call__(x, bytes=True) returns, i.e.
 * (lut * 255).astype(uint8): truncation, not rounding. Tables are built
 * once, on first use, from the published anchor data (see colormap.c) and
 * are read-only afterwards, so lookups are thread-safe.
 *
 * Lookup (al_cmap_rgb) follows matplotlib for a float x: index = int(x * N)
 * with x == 1.0 mapping to N - 1, x < 0 to the first entry (the default
 * "under" colour), x > 1 to the last one ("over"), NaN to "bad" (reported to
 * the caller, who paints its own background colour).
 *
 * Norms (al_norm) are plain values: a kind and two limits. Limits of 0 and 0
 * (a zero-initialised norm) or NaN mean "take them from the data"
 * (al_norm_autoscale); a symmetric norm always has vmin = -vmax.
 */
#ifndef AL_PLOT_COLORMAP_H
#define AL_PLOT_COLORMAP_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

#define AL_CMAP_N 256

typedef struct al_cmap {
    const char *name;
    int n;                           /* entries: AL_CMAP_N */
    double lut[AL_CMAP_N][3];        /* matplotlib's float table, 0..1 */
    uint8_t lut8[AL_CMAP_N][3];      /* (lut * 255) truncated, as bytes=True */
} al_cmap;

/* The map called `name` ("viridis", "RdYlBu", "RdYlBu_r", "coolwarm",
 * "coolwarm_r", "viridis_r"), or NULL if there is none by that name. */
const al_cmap *al_cmap_get(const char *name);

/* "viridis, RdYlBu, ..." for error messages. */
const char *al_cmap_names(void);

/* Colour at position t of the map, matplotlib's lookup (see top of file).
 * Returns 0 with rgb written, or 1 (rgb untouched) when t is NaN: "bad". */
int al_cmap_rgb(const al_cmap *cmap, double t, uint8_t rgb[3]);

/* ---- norms ---- */
typedef enum {
    AL_NORM_LINEAR = 0,   /* t = (v - vmin) / (vmax - vmin) */
    AL_NORM_LOG,          /* t = (log10 v - log10 vmin) / (log10 vmax - log10 vmin); v <= 0 is bad */
    AL_NORM_SYMMETRIC     /* linear with vmin = -vmax: diverging maps centred on 0 */
} al_norm_kind;

typedef struct al_norm {
    al_norm_kind kind;
    double vmin, vmax;    /* 0/0 or NaN: from the data (al_norm_autoscale) */
} al_norm;

/* Constructors, so that a caller can write `.norm = al_norm_log(1e-6, 1)`. */
static inline al_norm al_norm_linear(double vmin, double vmax) {
    al_norm n = {AL_NORM_LINEAR, vmin, vmax};
    return n;
}
static inline al_norm al_norm_log(double vmin, double vmax) {
    al_norm n = {AL_NORM_LOG, vmin, vmax};
    return n;
}
/* vmax <= 0 or NaN: max |v| of the data. */
static inline al_norm al_norm_symmetric(double vmax) {
    al_norm n = {AL_NORM_SYMMETRIC, -vmax, vmax};
    return n;
}

/* Fills limits that are unset (see top of file) from count values of v
 * (finite values only; log: positive values only), then checks the norm:
 * vmin < vmax (constant data, vmin == vmax, is widened by +-10 %, +-1
 * around 0, or a decade each way under a log norm), log limits positive.
 * No usable data gives 0..1 (log: 1e-6..1). Errors are one line. */
int al_norm_autoscale(al_norm *norm, const float *v, size_t count, al_err *err);

/* Checks a norm whose limits are set: finite, vmin < vmax, log limits > 0. */
int al_norm_check(const al_norm *norm, al_err *err);

/* Position of value v: may fall outside [0, 1] (under/over); NaN when v is
 * NaN, or not positive under a log norm ("bad"). */
double al_norm_apply(const al_norm *norm, double v);

/* Value -> colour: al_norm_apply then al_cmap_rgb; bad values get `bad`.
 * Returns 1 when the value was bad, else 0. */
int al_norm_rgb(const al_cmap *cmap, const al_norm *norm, double v, const uint8_t bad[3],
                uint8_t rgb[3]);

#endif
