/*
 * plot_internal.h: helpers shared by the files of src/plot/ (not a public
 * API): text with superscripts through cairo's toy text API, and tick
 * placement/labelling for axes and colour bars.
 *
 * Text markup: "^{...}" raises its contents as a superscript, and so does
 * "^" followed by a run of digits, signs or dots ("x^3", "10^-6"); an ASCII
 * '-' inside a superscript becomes a real minus sign (U+2212). All lengths
 * are in the current user units (points); font metrics are unhinted so the
 * layout is the same for PNG, SVG and PDF.
 */
#ifndef AL_PLOT_INTERNAL_H
#define AL_PLOT_INTERNAL_H

#include <cairo.h>

#include "colormap.h"

#define AL_PLOT_FONT "DejaVu Sans"

/* Vertical anchors for al_ptext_draw. */
enum { AL_VA_BASELINE = 0, AL_VA_MIDDLE, AL_VA_TOP, AL_VA_BOTTOM };

/* Ink extents used for placing text, as fractions of the font size (DejaVu
 * Sans: cap/digit height ~0.73 em, descender ~0.24 em). */
#define AL_TEXT_ASCENT 0.76
#define AL_TEXT_DESCENT 0.24

/* Sets unhinted metrics and greyscale antialiasing on cr. */
void al_ptext_setup(cairo_t *cr);
/* Advance width of s (markup applied) at `size` points. */
double al_ptext_width(cairo_t *cr, const char *s, double size, int bold);
/* Draws s with its anchor at (x, y): halign 0 = left, 0.5 = centre, 1 =
 * right; valign one of AL_VA_*. rotate = 1 turns it 90 degrees counter-
 * clockwise about the anchor (a y-axis label reading bottom to top). */
void al_ptext_draw(cairo_t *cr, const char *s, double x, double y, double size, int bold, double halign,
                   int valign, int rotate);

/* One tick: position along the axis in [0, 1] (0 = start) and its label. */
typedef struct al_tick {
    double t;
    char label[48];
} al_tick;
enum { AL_MAX_TICKS = 24 };

/* Colour-bar ticks for a resolved norm on a bar `length` points long with
 * labels of `font` points: linear/symmetric at multiples of `step` (0: a
 * nice step from 1, 2, 2.5, 5 x 10^k), log at decades labelled 10^k.
 * Returns the tick count (<= AL_MAX_TICKS). */
int al_pticks_colorbar(const al_norm *norm, double step, double length, double font, al_tick *out);

/* Integer index ticks for an axis of n cells spanning `length` points, with
 * labels of `font` points; `across` = 1 for a horizontal axis (labels side
 * by side), 0 for a vertical one (labels stacked). Returns the step chosen;
 * al_pticks_index_fill writes the ticks for a given step. */
int al_pticks_index_step(cairo_t *cr, int n, double length, double font, int across);
int al_pticks_index_fill(int n, int step, al_tick *out);

/* Formats v with `decimals` digits after the point, with a real minus sign
 * (U+2212) and no "-0". */
void al_pformat_number(char *buf, size_t len, double v, int decimals);

/* strdup that maps NULL and "" to NULL (an unset label); sets *oom on
 * allocation failure, so a builder can check once at the end. */
char *al_pdup_or_null(const char *s, int *oom);

/* ---- output shared by figure.c and lineplot.c (plot_out.c) ---- */
#include "../io/io.h"

enum { FMT_PNG, FMT_SVG, FMT_PDF };

/* Format from the file name's extension (.png, .svg, .pdf, any case), or -1. */
int al_plot_format(const char *path);

/* cairo's write callback into an atomic file; the first failure latches
 * (al_afile keeps its one-line message in err). */
typedef struct al_plot_sink {
    al_afile af;
    al_err *err;
    int failed;
} al_plot_sink;
cairo_status_t al_plot_sink_write(void *closure, const unsigned char *data, unsigned int len);
/* Ends a write: commit when everything went well, else remove the temp file;
 * errors are one line starting "saving <what>". */
int al_plot_sink_finish(al_plot_sink *s, cairo_status_t st, const char *what, const char *path, al_err *err);

#endif
