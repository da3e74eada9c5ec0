/*
 * figure.h: figures made of a grid of heatmap panels, written as PNG, SVG or
 * PDF through cairo. The library knows nothing of models: it draws float
 * matrices with a colour map, a norm, titles, axis labels, ticks and colour
 * bars, looking like a matplotlib imshow + colorbar figure in a paper.
 *
 * Data structure: an al_figure owns rows x cols panels (row-major index).
 * Each panel holds a copy of its matrix (rows x cols floats, row-major),
 * its strings, an optional greyscale background image, and a style
 * (al_heat_style, deep-copied) that starts as the figure's default style.
 * Nothing is laid out until al_figure_save, which resolves colour maps and
 * norms, measures the text, places every panel on one shared geometry (so
 * panels line up), renders, and writes the file atomically.
 *
 * Conventions (docs/figures.md):
 *   - Cells are square; row 0 is drawn at the top (imshow's origin="upper")
 *     unless style.origin_lower; x runs along columns, y along rows; ticks
 *     sit at cell centres and are labelled with 0-based indices.
 *   - Pixels are nearest-neighbour, never smoothed. A matrix larger than the
 *     panel's pixel size is first reduced block by block (block maximum or
 *     block mean, style.pool; the default is the maximum under a log norm,
 *     where sparse peaks must stay visible, and the mean otherwise), and the
 *     figure says so in a footnote.
 *   - Bad values (NaN, and values <= 0 under a log norm) are painted in the
 *     background colour (white).
 *   - Sizes: heatmaps 2.0 in on the longer side by default, PNG at 150 dpi,
 *     text in DejaVu Sans at 9-13 pt; the figure grows with its panels, so
 *     2 to 8 panels stay legible.
 *
 * Every function that can fail returns 0 or -1 with one line in err.
 *
 * A typical use ("5 panels in a row, HxH each, RdYlBu_r from -1 to 1, a colour
 * bar per panel, titles, both axes 'Head Index'"):
 *
 *     al_heat_style st = {.cmap = "RdYlBu_r", .norm = al_norm_linear(-1, 1),
 *                         .xlabel = "Head Index", .ylabel = "Head Index", .cbar_step = 0.25};
 *     al_figure *f = al_figure_new(1, 5, &st, err);
 *     for (int i = 0; f && i < 5; i++) al_figure_panel(f, i, titles[i], sim[i], H, H, err);
 *     int rc = f ? al_figure_save(f, "similarity.png", err) : -1;
 *     al_figure_free(f);
 */
#ifndef AL_PLOT_FIGURE_H
#define AL_PLOT_FIGURE_H

#include "../core/core.h"
#include "colormap.h"

typedef enum {
    AL_CBAR_EACH = 0,   /* a colour bar right of every panel (default) */
    AL_CBAR_SHARED,     /* one bar right of the grid; limits span every panel */
    AL_CBAR_NONE
} al_cbar_mode;

typedef enum {
    AL_POOL_AUTO = 0,   /* max under a log norm, mean otherwise */
    AL_POOL_MAX,        /* block maximum: keeps isolated peaks */
    AL_POOL_MEAN        /* block mean of the finite values */
} al_pool;

/* How a panel looks. Zero-initialised fields take the defaults in brackets;
 * strings are copied by the figure. */
typedef struct al_heat_style {
    const char *cmap;        /* colour map name [viridis]; see al_cmap_names() */
    al_norm norm;            /* scale and limits [linear, from the data] */
    const char *xlabel;      /* axis labels [none] */
    const char *ylabel;
    const char *cbar_label;  /* text along the colour bar [none] */
    double cbar_step;        /* tick spacing on a linear colour bar [automatic] */
    al_pool pool;            /* reduction of matrices larger than the panel [AUTO] */
    int origin_lower;        /* 1: row 0 at the bottom [0: at the top] */
    int hide_ticks;          /* 1: no axis ticks or tick labels [0] */
    double overlay_alpha;    /* heatmap opacity over a background image [0.6] */
} al_heat_style;

typedef struct al_figure al_figure;

/* A figure of rows x cols empty panels (1..16 each way), each starting with
 * `style` (NULL: all defaults). NULL on error. */
al_figure *al_figure_new(int rows, int cols, const al_heat_style *style, al_err *err);
void al_figure_free(al_figure *fig);

/* Title over the whole figure (NULL or "": none). */
int al_figure_set_title(al_figure *fig, const char *title, al_err *err);
void al_figure_set_cbar(al_figure *fig, al_cbar_mode mode);
/* Heatmap side in inches (0.8..8, default 2.0) and PNG resolution (50..600,
 * default 150). Fonts are in points (their printed size does not depend on
 * dpi) and scale gently with the heatmap side (square root, 0.85..1.3x). */
int al_figure_set_size(al_figure *fig, double panel_inches, double dpi, al_err *err);
/* Footnote under the figure. NULL (default): automatic, describing any
 * block reduction of large matrices; "": none. */
int al_figure_set_footnote(al_figure *fig, const char *text, al_err *err);
/* Text drawn before the automatic footnote (ignored once al_figure_set_footnote
 * set one); NULL or "": none. The whole footnote is cut at 1023 bytes. */
int al_figure_set_footnote_lead(al_figure *fig, const char *text, al_err *err);

/* Fills panel `index` (row-major, 0-based) with a rows x cols row-major
 * matrix (copied) and a title (NULL: none). Panels left empty are not drawn. */
int al_figure_panel(al_figure *fig, int index, const char *title, const float *data, int rows, int cols,
                    al_err *err);
/* Replaces the panel's style (a copy of the figure's until then). */
int al_figure_panel_style(al_figure *fig, int index, const al_heat_style *style, al_err *err);
/* Second, smaller line under the title (e.g. "effective rank 12.3"). */
int al_figure_panel_subtitle(al_figure *fig, int index, const char *subtitle, al_err *err);
/* Greyscale image (rows x cols, copied, scaled min..max to black..white)
 * drawn under the heatmap, which is then blended at style.overlay_alpha:
 * e.g. a 28 x 28 input image under a 14 x 14 patch-attention grid. Both
 * cover the same square. */
int al_figure_panel_background(al_figure *fig, int index, const float *image, int rows, int cols,
                               al_err *err);

/* Renders and writes `path`; the format follows the extension (.png, .svg,
 * .pdf, any case). Written to "<path>.tmp.<pid>" and renamed, so a failure
 * never leaves a partial file. */
int al_figure_save(al_figure *fig, const char *path, al_err *err);

/* After a successful save: the output's size and a panel's heatmap rectangle
 * (pixels for PNG, points for SVG/PDF; origin top-left). -1 if the panel is
 * empty or nothing was saved yet. */
int al_figure_extent(const al_figure *fig, double *width, double *height);
int al_figure_heat_rect(const al_figure *fig, int index, double *x, double *y, double *w, double *h);
/* After a save: how large matrices were reduced for display ("" if none),
 * e.g. "Display: 4096x4096 matrices reduced to 300x300 pixels by block maximum". */
const char *al_figure_pool_note(const al_figure *fig);

#endif
