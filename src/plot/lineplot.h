/*
 * lineplot.h: x-y plots in the style of figure.h's heatmaps (matplotlib-like
 * axes, DejaVu Sans, PNG/SVG/PDF through cairo, atomic writes): lines with
 * optional shaded bands (e.g. validation loss against training tokens, one
 * line per design, the band spanning the seeds), dashed horizontal reference
 * lines (a baseline), and labelled points with optional vertical error bars
 * (e.g. KV-cache size against validation loss, one point per design).
 *
 * Data structure: an al_lineplot owns copies of every series (x, y and band
 * arrays), reference line and point, with their labels; nothing is laid out
 * until al_lineplot_save, which fixes the axis limits (from the data unless
 * set), picks ticks, measures the text, places the legend in the corner of
 * the axes that covers the fewest data, renders, and writes the file
 * atomically ("<path>.tmp.<pid>", then rename).
 *
 * Colours follow matplotlib's default cycle (tab10) in the order series and
 * points are added; a line and a point added with the same colour index
 * (al_lineplot_color) share a colour. Log axes ignore values <= 0.
 *
 * Every function that can fail returns 0 or -1 (or NULL) with one line in
 * err.
 *
 *     al_lineplot *p = al_lineplot_new("Validation loss", "training tokens (millions)",
 *                                       "loss (nats/byte)", err);
 *     al_lineplot_line(p, "MHA", x, y, n, err);
 *     al_lineplot_hline(p, "unigram baseline", 3.07, err);
 *     int rc = al_lineplot_save(p, "loss.png", err);
 *     al_lineplot_free(p);
 */
#ifndef AL_PLOT_LINEPLOT_H
#define AL_PLOT_LINEPLOT_H

#include "../core/core.h"

typedef enum { AL_AXIS_LINEAR = 0, AL_AXIS_LOG } al_axis_scale;

typedef struct al_lineplot al_lineplot;

/* An empty plot with a title and axis labels (any may be NULL). NULL on
 * error. Default size 5.0 x 3.4 in, PNG at 150 dpi. */
al_lineplot *al_lineplot_new(const char *title, const char *xlabel, const char *ylabel, al_err *err);
void al_lineplot_free(al_lineplot *p);

/* Linear (default) or logarithmic axes. */
void al_lineplot_set_scale(al_lineplot *p, al_axis_scale x, al_axis_scale y);
/* Fixed limits for an axis (lo < hi; log axes: lo > 0); NAN for either
 * end, or never calling this, takes it from the data with a 5 % margin. */
int al_lineplot_set_xlim(al_lineplot *p, double lo, double hi, al_err *err);
int al_lineplot_set_ylim(al_lineplot *p, double lo, double hi, al_err *err);
/* Figure size in inches (2..12 wide, 1.5..10 high) and PNG dpi (50..600). */
int al_lineplot_set_size(al_lineplot *p, double width_in, double height_in, double dpi, al_err *err);
/* Small grey text under the plot (NULL or "": none). */
int al_lineplot_set_footnote(al_lineplot *p, const char *text, al_err *err);

/* Adds a line through n >= 1 points (copied; non-finite points are gaps)
 * with a marker at each point; returns its index (>= 0) or -1. label NULL:
 * not in the legend. */
int al_lineplot_line(al_lineplot *p, const char *label, const double *x, const double *y, int n, al_err *err);
/* A shaded band lo[i]..hi[i] at the line's x (e.g. min..max over seeds). */
int al_lineplot_band(al_lineplot *p, int line, const double *lo, const double *hi, al_err *err);
/* A dashed horizontal reference line across the axes, in the legend. */
int al_lineplot_hline(al_lineplot *p, const char *label, double y, al_err *err);
/* A labelled marker at (x, y); ylo < yhi adds a vertical error bar (NAN:
 * none). The label is written next to the point (not in the legend).
 * Returns its index or -1. */
int al_lineplot_point(al_lineplot *p, const char *label, double x, double y, double ylo, double yhi, al_err *err);
/* Colour (tab10 index, taken modulo 10) of a line or point; by default
 * lines and points each count up from 0 in the order added. */
int al_lineplot_color(al_lineplot *p, int is_point, int index, int color, al_err *err);

/* Marker shapes of points (al_lineplot_point_marker); circles by default. */
typedef enum { AL_MARKER_CIRCLE = 0, AL_MARKER_DIAMOND, AL_MARKER_SQUARE } al_marker;
/* The marker shape of point `index`. */
int al_lineplot_point_marker(al_lineplot *p, int index, al_marker shape, al_err *err);
/* A legend row for a kind of point: a grey marker of `shape` and its label
 * (points themselves are labelled beside them, not in the legend). */
int al_lineplot_marker_key(al_lineplot *p, const char *label, al_marker shape, al_err *err);

/* Renders and writes `path` (.png, .svg or .pdf, any case), atomically. */
int al_lineplot_save(al_lineplot *p, const char *path, al_err *err);

/* After a successful save: the output size and the rectangles of the axes
 * and of the legend box (pixels for PNG, points otherwise; origin top-left).
 * -1 before a save, or for the legend when there is none. */
int al_lineplot_extent(const al_lineplot *p, double *width, double *height);
int al_lineplot_axes_rect(const al_lineplot *p, double *x, double *y, double *w, double *h);
int al_lineplot_legend_rect(const al_lineplot *p, double *x, double *y, double *w, double *h);

#endif
