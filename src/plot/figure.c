/*
 * figure.c: the figure object, its layout, rendering through cairo and the
 * atomic write (see figure.h for the API and conventions).
 *
 * Data structure: struct al_figure holds the grid size, a default style,
 * figure-level strings and options, and an array of rows x cols panels.
 * A panel owns copies of its matrix, background image and strings. During
 * al_figure_save each used panel is "resolved" (colour map looked up, norm
 * limits fixed, display grid size chosen, ticks picked) and a `layout`
 * gives every panel the same margins, so heatmaps, titles and colour bars
 * line up across the grid. Layout is computed in points (1/72 in); PNG
 * output scales by dpi/72 and snaps each heatmap to whole device pixels,
 * which it fills itself (nearest-neighbour) so colours land exactly.
 */
#include "figure.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../io/io.h"
#include "plot_internal.h"

enum { MAX_GRID = 16 };

#define TICK_LEN 3.5         /* tick mark length, pt */
#define TICK_PAD 2.0         /* tick mark to label, pt */
#define LINE_W 0.8           /* spines and ticks, pt */
#define MARGIN 8.0           /* around the figure, pt */
#define VECTOR_DPI 300.0     /* pixel budget of heatmaps in SVG/PDF */
#define VECTOR_MAX_PX 1200   /* and its cap per side */

typedef struct panel {
    int used;
    char *title, *subtitle;
    float *data;
    int rows, cols;
    float *bg;
    int bg_rows, bg_cols;
    al_heat_style style;  /* strings owned */
    /* resolved by al_figure_save */
    const al_cmap *cmap;
    al_norm norm;
    al_pool pool;
    int px_w, px_h;       /* heatmap size in device pixels at the figure's dpi */
    double hw, hh;        /* heatmap size, pt */
    int grid_r, grid_c;   /* display grid after block reduction */
    int budget_w, budget_h; /* pixel budget of the heatmap in this output */
    int xstep, ystep;     /* index tick steps */
    al_tick cticks[AL_MAX_TICKS];
    int n_cticks;
    double out_x, out_y, out_w, out_h;  /* heatmap rectangle in output units */
} panel;

struct al_figure {
    int rows, cols;
    panel *p;
    al_heat_style style;  /* default for new panels; strings owned */
    char *title;
    char *footnote;
    int footnote_set;
    al_cbar_mode cbar;
    double panel_in, dpi;
    int saved;
    double out_w, out_h;
    char note[256];
    char *footnote_lead;  /* al_figure_set_footnote_lead: written before the automatic footnote */
    char foot[1024];      /* the footnote drawn: lead and automatic note, composed at layout */
};

/* Sizes of everything around the heatmaps, shared by all panels. */
typedef struct layout {
    double k;                 /* output units per point */
    double f_tick, f_label, f_title, f_sub, f_fig, f_note;
    double S;                 /* side of the box every heatmap is placed in */
    double left, right, top, bottom;
    double cell_w, cell_h;
    double cb_gap, cb_w;
    double cbtick_w;          /* widest colour-bar tick label (per-panel bars) */
    double title_h, foot_h;
    double shared_w, shared_cbtick_w;
    double W, H;
    int any_title, any_sub, any_xlabel, any_ylabel, any_ticks, any_cblabel;
    al_norm shared_norm;
    const al_cmap *shared_cmap;
    al_tick shared_ticks[AL_MAX_TICKS];
    int n_shared_ticks;
} layout;

/* ---- small helpers ---- */


static void style_free(al_heat_style *s) {
    free((char *)s->cmap);
    free((char *)s->xlabel);
    free((char *)s->ylabel);
    free((char *)s->cbar_label);
    memset(s, 0, sizeof *s);
}

/* Deep copy of a style (its strings duplicated); src NULL gives defaults. */
static int style_copy(al_heat_style *dst, const al_heat_style *src, al_err *err) {
    al_heat_style d = {0};
    if (src) {
        int oom = 0;
        d = *src;
        d.cmap = al_pdup_or_null(src->cmap, &oom);
        d.xlabel = al_pdup_or_null(src->xlabel, &oom);
        d.ylabel = al_pdup_or_null(src->ylabel, &oom);
        d.cbar_label = al_pdup_or_null(src->cbar_label, &oom);
        if (oom) {
            style_free(&d);
            return al_errf(err, "figure style: out of memory");
        }
        if (src->overlay_alpha < 0 || src->overlay_alpha > 1) {
            style_free(&d);
            return al_errf(err, "figure style: overlay_alpha must be in [0, 1] (got %g)", src->overlay_alpha);
        }
        if (src->cbar_step < 0 || !isfinite(src->cbar_step)) {
            style_free(&d);
            return al_errf(err, "figure style: cbar_step must be >= 0 (got %g)", src->cbar_step);
        }
    }
    style_free(dst);
    *dst = d;
    return 0;
}

static void panel_clear(panel *p) {
    free(p->title);
    free(p->subtitle);
    free(p->data);
    free(p->bg);
    style_free(&p->style);
    memset(p, 0, sizeof *p);
}

/* Bounds check shared by the panel setters. */
static panel *get_panel(al_figure *fig, int index, al_err *err) {
    if (!fig) {
        al_errf(err, "figure: NULL figure");
        return NULL;
    }
    if (index < 0 || index >= fig->rows * fig->cols) {
        al_errf(err, "figure: panel %d does not exist (the grid has %d x %d panels)", index, fig->rows, fig->cols);
        return NULL;
    }
    return &fig->p[index];
}

/* Replaces *slot with a copy of s (NULL/"" clears). */
static int set_string(char **slot, const char *s, al_err *err) {
    int oom = 0;
    char *d = al_pdup_or_null(s, &oom);
    if (oom) return al_errf(err, "figure: out of memory");
    free(*slot);
    *slot = d;
    return 0;
}

/* Copies a rows x cols float matrix after checking its shape. */
static float *copy_matrix(const float *m, int rows, int cols, const char *what, al_err *err) {
    if (!m) {
        al_errf(err, "figure: %s: no data", what);
        return NULL;
    }
    if (rows < 1 || cols < 1 || rows > 1000000 || cols > 1000000 || (int64_t)rows * cols > ((int64_t)1 << 31)) {
        al_errf(err, "figure: %s: bad shape %d x %d", what, rows, cols);
        return NULL;
    }
    size_t n = (size_t)rows * (size_t)cols;
    float *d = malloc(n * sizeof *d);
    if (!d) {
        al_errf(err, "figure: %s: out of memory for %d x %d values", what, rows, cols);
        return NULL;
    }
    memcpy(d, m, n * sizeof *d);
    return d;
}

/* ---- public setters ---- */

al_figure *al_figure_new(int rows, int cols, const al_heat_style *style, al_err *err) {
    if (rows < 1 || cols < 1 || rows > MAX_GRID || cols > MAX_GRID) {
        al_errf(err, "figure: grid of %d x %d panels (each side must be 1..%d)", rows, cols, MAX_GRID);
        return NULL;
    }
    al_figure *f = calloc(1, sizeof *f);
    if (f) f->p = calloc((size_t)rows * (size_t)cols, sizeof *f->p);
    if (!f || !f->p) {
        free(f);
        al_errf(err, "figure: out of memory");
        return NULL;
    }
    f->rows = rows;
    f->cols = cols;
    f->panel_in = 2.0;
    f->dpi = 150;
    if (style_copy(&f->style, style, err) != 0) {
        al_figure_free(f);
        return NULL;
    }
    for (int i = 0; i < rows * cols; i++)
        if (style_copy(&f->p[i].style, &f->style, err) != 0) {
            al_figure_free(f);
            return NULL;
        }
    return f;
}

void al_figure_free(al_figure *fig) {
    if (!fig) return;
    if (fig->p)
        for (int i = 0; i < fig->rows * fig->cols; i++) panel_clear(&fig->p[i]);
    free(fig->p);
    style_free(&fig->style);
    free(fig->title);
    free(fig->footnote);
    free(fig->footnote_lead);
    free(fig);
}

int al_figure_set_title(al_figure *fig, const char *title, al_err *err) {
    if (!fig) return al_errf(err, "figure: NULL figure");
    return set_string(&fig->title, title, err);
}

void al_figure_set_cbar(al_figure *fig, al_cbar_mode mode) {
    if (fig && (mode == AL_CBAR_EACH || mode == AL_CBAR_SHARED || mode == AL_CBAR_NONE)) fig->cbar = mode;
}

int al_figure_set_size(al_figure *fig, double panel_inches, double dpi, al_err *err) {
    if (!fig) return al_errf(err, "figure: NULL figure");
    if (!(panel_inches >= 0.8 && panel_inches <= 8))
        return al_errf(err, "figure: panel size %g in is outside 0.8..8 in", panel_inches);
    if (!(dpi >= 50 && dpi <= 600)) return al_errf(err, "figure: %g dpi is outside 50..600", dpi);
    fig->panel_in = panel_inches;
    fig->dpi = dpi;
    return 0;
}

int al_figure_set_footnote(al_figure *fig, const char *text, al_err *err) {
    if (!fig) return al_errf(err, "figure: NULL figure");
    if (!text) {
        free(fig->footnote);
        fig->footnote = NULL;
        fig->footnote_set = 0;
        return 0;
    }
    fig->footnote_set = 1;
    return set_string(&fig->footnote, text, err);
}

int al_figure_panel(al_figure *fig, int index, const char *title, const float *data, int rows, int cols,
                    al_err *err) {
    panel *p = get_panel(fig, index, err);
    if (!p) return -1;
    char what[32];
    snprintf(what, sizeof what, "panel %d", index);
    float *d = copy_matrix(data, rows, cols, what, err);
    if (!d) return -1;
    if (set_string(&p->title, title, err) != 0) {
        free(d);
        return -1;
    }
    free(p->data);
    p->data = d;
    p->rows = rows;
    p->cols = cols;
    p->used = 1;
    return 0;
}

int al_figure_panel_style(al_figure *fig, int index, const al_heat_style *style, al_err *err) {
    panel *p = get_panel(fig, index, err);
    if (!p) return -1;
    return style_copy(&p->style, style ? style : &fig->style, err);
}

int al_figure_panel_subtitle(al_figure *fig, int index, const char *subtitle, al_err *err) {
    panel *p = get_panel(fig, index, err);
    if (!p) return -1;
    return set_string(&p->subtitle, subtitle, err);
}

int al_figure_panel_background(al_figure *fig, int index, const float *image, int rows, int cols,
                               al_err *err) {
    panel *p = get_panel(fig, index, err);
    if (!p) return -1;
    char what[48];
    snprintf(what, sizeof what, "panel %d background", index);
    float *d = copy_matrix(image, rows, cols, what, err);
    if (!d) return -1;
    free(p->bg);
    p->bg = d;
    p->bg_rows = rows;
    p->bg_cols = cols;
    return 0;
}

int al_figure_extent(const al_figure *fig, double *width, double *height) {
    if (!fig || !fig->saved) return -1;
    *width = fig->out_w;
    *height = fig->out_h;
    return 0;
}

int al_figure_heat_rect(const al_figure *fig, int index, double *x, double *y, double *w, double *h) {
    if (!fig || !fig->saved || index < 0 || index >= fig->rows * fig->cols || !fig->p[index].used) return -1;
    const panel *p = &fig->p[index];
    *x = p->out_x;
    *y = p->out_y;
    *w = p->out_w;
    *h = p->out_h;
    return 0;
}

const char *al_figure_pool_note(const al_figure *fig) { return fig ? fig->note : ""; }

int al_figure_set_footnote_lead(al_figure *fig, const char *text, al_err *err) {
    if (!fig) return al_errf(err, "figure: NULL figure");
    return set_string(&fig->footnote_lead, text, err);
}

/* The footnote to draw: a set footnote, else the lead (if any) followed by
 * the automatic note of block reductions. */
static const char *footnote_text(al_figure *fig) {
    if (fig->footnote_set) return fig->footnote;
    if (!fig->footnote_lead || !*fig->footnote_lead) return fig->note;
    snprintf(fig->foot, sizeof fig->foot, "%s%s%s", fig->footnote_lead, fig->note[0] ? " " : "", fig->note);
    return fig->foot;
}

/* ---- resolving panels ---- */

/* Names a panel in error messages: `panel 2 ("GQA")`. */
static void panel_name(const al_figure *fig, int i, char *buf, size_t n) {
    const panel *p = &fig->p[i];
    if (p->title) snprintf(buf, n, "panel %d (\"%.60s\")", i, p->title);
    else snprintf(buf, n, "panel %d", i);
}

/* Looks up the colour map, fixes the norm's limits from the data, and picks
 * the reduction for large matrices. */
static int resolve_panel(al_figure *fig, int i, al_err *err) {
    panel *p = &fig->p[i];
    char name[96];
    panel_name(fig, i, name, sizeof name);
    const char *cm = p->style.cmap ? p->style.cmap : "viridis";
    p->cmap = al_cmap_get(cm);
    if (!p->cmap) return al_errf(err, "%s: unknown colour map '%s' (known: %s)", name, cm, al_cmap_names());
    p->norm = p->style.norm;
    if (al_norm_autoscale(&p->norm, p->data, (size_t)p->rows * (size_t)p->cols, err) != 0)
        return al_err_prefix(err, "%s", name);
    p->pool = p->style.pool;
    if (p->pool == AL_POOL_AUTO) p->pool = p->norm.kind == AL_NORM_LOG ? AL_POOL_MAX : AL_POOL_MEAN;
    if (p->pool != AL_POOL_MAX && p->pool != AL_POOL_MEAN) return al_errf(err, "%s: unknown pooling %d", name, (int)p->pool);
    return 0;
}

/* One norm for a shared colour bar: the first panel's kind and map; unset
 * limits become the union of every panel's data range. */
static int resolve_shared(al_figure *fig, layout *L, al_err *err) {
    int first = -1;
    for (int i = 0; i < fig->rows * fig->cols; i++)
        if (fig->p[i].used) {
            first = i;
            break;
        }
    const panel *f0 = &fig->p[first];
    al_norm tmpl = f0->style.norm, out = tmpl;
    int have = 0;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        al_norm n = tmpl;
        if (al_norm_autoscale(&n, p->data, (size_t)p->rows * (size_t)p->cols, err) != 0)
            return al_err_prefix(err, "shared colour bar");
        if (!have) out = n;
        else {
            if (n.vmin < out.vmin) out.vmin = n.vmin;
            if (n.vmax > out.vmax) out.vmax = n.vmax;
        }
        have = 1;
    }
    L->shared_norm = out;
    L->shared_cmap = f0->cmap;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        p->norm = out;
        p->cmap = f0->cmap;
        if (p->style.pool == AL_POOL_AUTO) p->pool = out.kind == AL_NORM_LOG ? AL_POOL_MAX : AL_POOL_MEAN;
    }
    return 0;
}

/* Heatmap size in device pixels: the panel budget B = side x dpi, cells
 * square. When every panel has the same shape and a whole number of pixels
 * per cell fits in at least 85 % of B, that integer scale is used, so all
 * cells get the same size; otherwise the longer side gets B pixels. */
static void size_heatmaps(al_figure *fig, layout *L) {
    int B = (int)lround(fig->panel_in * fig->dpi);
    int same = 1, r0 = -1, c0 = -1;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        if (r0 < 0) r0 = p->rows, c0 = p->cols;
        else if (p->rows != r0 || p->cols != c0) same = 0;
    }
    double kpx = fig->dpi / 72.0;
    L->S = 0;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        int M = p->rows > p->cols ? p->rows : p->cols;
        int m = B / M;
        if (same && m >= 1 && m * M >= 0.85 * B) {
            p->px_w = m * p->cols;
            p->px_h = m * p->rows;
        } else {
            p->px_w = (int)lround((double)B * p->cols / M);
            p->px_h = (int)lround((double)B * p->rows / M);
        }
        if (p->px_w < 1) p->px_w = 1;
        if (p->px_h < 1) p->px_h = 1;
        p->hw = p->px_w / kpx;
        p->hh = p->px_h / kpx;
        if (p->hw > L->S) L->S = p->hw;
        if (p->hh > L->S) L->S = p->hh;
    }
}

/* Display grid of each panel for this output: the matrix itself when it
 * fits the pixel budget, else blocks reduced to the budget. Also writes the
 * figure's note describing any reduction. */
static void choose_grids(al_figure *fig, int fmt) {
    fig->note[0] = 0;
    int pooled = 0, same = 1, R0 = 0, C0 = 0, r0 = 0, c0 = 0;
    al_pool mode0 = AL_POOL_MAX;
    int mixed_mode = 0;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        int bw = p->px_w, bh = p->px_h;
        if (fmt != FMT_PNG) {
            bw = (int)ceil(p->hw * VECTOR_DPI / 72.0);
            bh = (int)ceil(p->hh * VECTOR_DPI / 72.0);
            if (bw > VECTOR_MAX_PX) bw = VECTOR_MAX_PX;
            if (bh > VECTOR_MAX_PX) bh = VECTOR_MAX_PX;
        }
        p->budget_w = bw;
        p->budget_h = bh;
        p->grid_c = p->cols < bw ? p->cols : bw;
        p->grid_r = p->rows < bh ? p->rows : bh;
        if (p->grid_c < p->cols || p->grid_r < p->rows) {
            if (!pooled) {
                R0 = p->rows, C0 = p->cols, r0 = p->grid_r, c0 = p->grid_c, mode0 = p->pool;
            } else {
                if (p->rows != R0 || p->cols != C0 || p->grid_r != r0 || p->grid_c != c0) same = 0;
                if (p->pool != mode0) mixed_mode = 1;
            }
            pooled++;
        }
    }
    if (!pooled) return;
    const char *how = mixed_mode ? "block maximum or mean" : mode0 == AL_POOL_MAX ? "block maximum" : "block mean";
    if (same)
        snprintf(fig->note, sizeof fig->note, "Display only: %d\xc3\x97%d matrices reduced to %d\xc3\x97%d cells by %s.",
                 R0, C0, r0, c0, how);
    else
        snprintf(fig->note, sizeof fig->note, "Display only: matrices larger than a panel reduced to its pixel grid by %s.", how);
}

/* Reduces a rows x cols matrix to gr x gc blocks (block i covers rows
 * [i*rows/gr, (i+1)*rows/gr)); NaNs are skipped, an all-NaN block is NaN.
 * Returns NULL when no reduction is needed or memory is short (*oom). */
static float *reduce(const panel *p, int *oom) {
    int R = p->rows, C = p->cols, gr = p->grid_r, gc = p->grid_c;
    if (gr == R && gc == C) return NULL;
    float *g = malloc((size_t)gr * (size_t)gc * sizeof *g);
    if (!g) {
        *oom = 1;
        return NULL;
    }
    for (int i = 0; i < gr; i++) {
        int64_t r0 = (int64_t)i * R / gr, r1 = (int64_t)(i + 1) * R / gr;
        for (int j = 0; j < gc; j++) {
            int64_t c0 = (int64_t)j * C / gc, c1 = (int64_t)(j + 1) * C / gc;
            double acc = p->pool == AL_POOL_MAX ? -INFINITY : 0;
            int64_t n = 0;
            for (int64_t r = r0; r < r1; r++) {
                const float *row = p->data + r * C;
                for (int64_t c = c0; c < c1; c++) {
                    float v = row[c];
                    if (isnan(v)) continue;
                    if (p->pool == AL_POOL_MAX) {
                        if (v > acc) acc = v;
                    } else {
                        acc += v;
                    }
                    n++;
                }
            }
            g[(size_t)i * gc + j] = n == 0 ? NAN : p->pool == AL_POOL_MAX ? (float)acc : (float)(acc / (double)n);
        }
    }
    return g;
}

/* ---- layout ---- */

/* Picks ticks for every panel and sizes the shared margins. */
static void compute_layout(al_figure *fig, layout *L, cairo_t *m) {
    double fs = 10.0 * fmin(1.3, fmax(0.85, sqrt(fig->panel_in / 2.0)));
    L->f_tick = 0.9 * fs;
    L->f_label = fs;
    L->f_title = 1.1 * fs;
    L->f_sub = 0.9 * fs;
    L->f_fig = 1.3 * fs;
    L->f_note = 0.8 * fs;
    L->cb_gap = fmin(12, fmax(6, 0.06 * L->S));
    L->cb_w = fmin(12, fmax(7, 0.06 * L->S));
    double ytick_w = 0;
    L->cbtick_w = 0;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        panel *p = &fig->p[i];
        if (!p->used) continue;
        if (p->title) L->any_title = 1;
        if (p->subtitle) L->any_sub = 1;
        if (p->style.xlabel) L->any_xlabel = 1;
        if (p->style.ylabel) L->any_ylabel = 1;
        if (p->style.cbar_label) L->any_cblabel = 1;
        if (!p->style.hide_ticks) {
            L->any_ticks = 1;
            p->xstep = al_pticks_index_step(m, p->cols, p->hw, L->f_tick, 1);
            p->ystep = al_pticks_index_step(m, p->rows, p->hh, L->f_tick, 0);
            if (p->rows == p->cols) {  /* a square matrix gets the same ticks on both axes */
                int s = p->xstep > p->ystep ? p->xstep : p->ystep;
                p->xstep = p->ystep = s;
            }
            al_tick t[AL_MAX_TICKS];
            int n = al_pticks_index_fill(p->rows, p->ystep, t);
            for (int k = 0; k < n; k++) ytick_w = fmax(ytick_w, al_ptext_width(m, t[k].label, L->f_tick, 0));
        }
        if (fig->cbar == AL_CBAR_EACH) {
            p->n_cticks = al_pticks_colorbar(&p->norm, p->style.cbar_step, p->hh, L->f_tick, p->cticks);
            for (int k = 0; k < p->n_cticks; k++)
                L->cbtick_w = fmax(L->cbtick_w, al_ptext_width(m, p->cticks[k].label, L->f_tick, 0));
        }
    }
    L->left = 4 + (L->any_ylabel ? L->f_label + 5 : 0) + (L->any_ticks ? ytick_w + TICK_LEN + TICK_PAD : 0);
    L->top = 4 + (L->any_title ? 1.3 * L->f_title : 0) + (L->any_sub ? 1.25 * L->f_sub : 0) +
             (L->any_title || L->any_sub ? 4 : 0);
    L->bottom = (L->any_ticks ? TICK_LEN + TICK_PAD + L->f_tick : 0) + (L->any_xlabel ? 5 + L->f_label : 0) + 8;
    if (fig->cbar == AL_CBAR_EACH)
        L->right = L->cb_gap + L->cb_w + TICK_LEN + TICK_PAD + L->cbtick_w + (L->any_cblabel ? 6 + L->f_label : 0) + 14;
    else
        L->right = 12;
    L->cell_w = L->left + L->S + L->right;
    L->cell_h = L->top + L->S + L->bottom;
    L->shared_w = 0;
    if (fig->cbar == AL_CBAR_SHARED) {
        double len = (fig->rows - 1) * L->cell_h + L->S;
        L->n_shared_ticks = al_pticks_colorbar(&L->shared_norm, fig->style.cbar_step, len, L->f_tick, L->shared_ticks);
        L->shared_cbtick_w = 0;
        for (int k = 0; k < L->n_shared_ticks; k++)
            L->shared_cbtick_w = fmax(L->shared_cbtick_w, al_ptext_width(m, L->shared_ticks[k].label, L->f_tick, 0));
        L->shared_w = L->cb_w + TICK_LEN + TICK_PAD + L->shared_cbtick_w + (fig->style.cbar_label ? 6 + L->f_label : 0) + 12;
    }
    L->title_h = fig->title ? 1.7 * L->f_fig : 0;
    const char *foot = footnote_text(fig);
    L->foot_h = foot && *foot ? 2.0 * L->f_note : 0;
    L->W = 2 * MARGIN + fig->cols * L->cell_w + L->shared_w;
    L->H = MARGIN + L->title_h + fig->rows * L->cell_h + L->foot_h + MARGIN / 2;
    /* the footnote and figure title must fit across: widen if needed */
    double need = fmax(al_ptext_width(m, fig->title, L->f_fig, 1), al_ptext_width(m, foot, L->f_note, 0)) + 2 * MARGIN;
    if (need > L->W) L->W = need;
}

/* ---- drawing ---- */

/* Packs an opaque colour for a CAIRO_FORMAT_RGB24/ARGB32 pixel. */
static uint32_t pack(const uint8_t c[3]) { return 0xff000000u | (uint32_t)c[0] << 16 | (uint32_t)c[1] << 8 | c[2]; }

/* Colours of a display grid: rgb per cell plus a bad flag (bad cells get
 * the background, white). */
static void colour_grid(const panel *p, const float *g, uint8_t *rgb, uint8_t *bad) {
    static const uint8_t white[3] = {255, 255, 255};
    size_t n = (size_t)p->grid_r * (size_t)p->grid_c;
    for (size_t i = 0; i < n; i++) bad[i] = (uint8_t)al_norm_rgb(p->cmap, &p->norm, g[i], white, rgb + 3 * i);
}

/* Finite min..max of the panel's background image, which is scaled from
 * black to white; a constant (or empty) image comes out white. */
static void bg_range(const panel *p, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < (size_t)p->bg_rows * p->bg_cols; i++)
        if (isfinite(p->bg[i])) {
            if (p->bg[i] < *lo) *lo = p->bg[i];
            if (p->bg[i] > *hi) *hi = p->bg[i];
        }
    if (!isfinite(*hi)) *lo = 0, *hi = 1;
    if (!(*lo < *hi)) *lo = *hi - 1;
}

/* Grey level (0..255) of background pixel (i, j); non-finite is white. */
static double bg_grey(const panel *p, int i, int j, double lo, double hi) {
    float v = p->bg[(size_t)i * p->bg_cols + j];
    if (!isfinite(v)) return 255;
    double t = (v - lo) / (hi - lo);
    return 255.0 * (t < 0 ? 0 : t > 1 ? 1 : t);
}

/* Whole number of image pixels per cell so that n cells fill about
 * `budget` pixels (at least 1). Vector images are upscaled this way because
 * not every viewer honours "no interpolation" (cairo's SVG output has no
 * way to ask for it), and smoothing then only touches a cell's outermost
 * pixel, so cells stay crisp. */
static int whole_factor(int n, int budget) {
    int f = budget / n;
    return f < 1 ? 1 : f;
}

/* Paints an image of W x H pixels onto the rectangle (x, y, w, h), nearest
 * filter, at opacity a. */
static void paint_scaled(cairo_t *cr, cairo_surface_t *img, double x, double y, double w, double h, int W, int H,
                         double a) {
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_scale(cr, w / W, h / H);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);
    cairo_rectangle(cr, 0, 0, W, H);
    cairo_clip(cr);
    cairo_paint_with_alpha(cr, a);
    cairo_restore(cr);
}

/* Draws a panel's heatmap (and background image) into its rectangle.
 * PNG: builds an image of exactly the rectangle's device pixels, each pixel
 * the colour of the display cell under its centre, and paints it 1:1.
 * Vector: the display grid upscaled by whole factors to about 300 dpi,
 * painted with the nearest filter (PDF /Interpolate false). */
static int draw_heat(cairo_t *cr, const panel *p, const layout *L, int fmt, double hx, double hy, al_err *err) {
    int oom = 0;
    float *red = reduce(p, &oom);
    const float *g = red ? red : p->data;
    size_t n = (size_t)p->grid_r * (size_t)p->grid_c;
    uint8_t *rgb = malloc(3 * n), *bad = malloc(n);
    if (oom || !rgb || !bad) {
        free(red);
        free(rgb);
        free(bad);
        return al_errf(err, "figure: out of memory for a %d x %d heatmap", p->grid_r, p->grid_c);
    }
    colour_grid(p, g, rgb, bad);
    free(red);
    double a = p->bg ? (p->style.overlay_alpha > 0 ? p->style.overlay_alpha : 0.6) : 1.0;
    double lo = 0, hi = 1;
    if (p->bg) bg_range(p, &lo, &hi);
    int flip = p->style.origin_lower;
    int rc = 0;
    if (fmt == FMT_PNG) {
        int W = p->px_w, H = p->px_h;
        cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
        if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
            rc = al_errf(err, "figure: cairo: %s", cairo_status_to_string(cairo_surface_status(img)));
        } else {
            cairo_surface_flush(img);
            unsigned char *base = cairo_image_surface_get_data(img);
            int stride = cairo_image_surface_get_stride(img);
            for (int y = 0; y < H; y++) {
                int yy = flip ? H - 1 - y : y;
                int ci = (int)(((int64_t)2 * yy + 1) * p->grid_r / (2 * (int64_t)H));
                int bi = p->bg ? (int)(((int64_t)2 * yy + 1) * p->bg_rows / (2 * (int64_t)H)) : 0;
                uint32_t *row = (uint32_t *)(base + (size_t)y * stride);
                for (int x = 0; x < W; x++) {
                    int cj = (int)(((int64_t)2 * x + 1) * p->grid_c / (2 * (int64_t)W));
                    size_t c = (size_t)ci * p->grid_c + cj;
                    if (!p->bg) {
                        row[x] = pack(rgb + 3 * c);
                        continue;
                    }
                    int bj = (int)(((int64_t)2 * x + 1) * p->bg_cols / (2 * (int64_t)W));
                    double grey = bg_grey(p, bi, bj, lo, hi);
                    uint8_t o[3];
                    for (int k = 0; k < 3; k++) {
                        double v = bad[c] ? grey : a * rgb[3 * c + k] + (1 - a) * grey;
                        o[k] = (uint8_t)lround(v);
                    }
                    row[x] = pack(o);
                }
            }
            cairo_surface_mark_dirty(img);
            cairo_save(cr);
            cairo_identity_matrix(cr);
            cairo_set_source_surface(cr, img, lround(hx * L->k), lround(hy * L->k));
            cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
            cairo_rectangle(cr, lround(hx * L->k), lround(hy * L->k), W, H);
            cairo_fill(cr);
            cairo_restore(cr);
        }
        cairo_surface_destroy(img);
    } else {
        if (p->bg) {  /* greyscale image first, same square */
            int fx = whole_factor(p->bg_cols, p->budget_w), fy = whole_factor(p->bg_rows, p->budget_h);
            int W = p->bg_cols * fx, H = p->bg_rows * fy;
            cairo_surface_t *bgs = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
            if (cairo_surface_status(bgs) == CAIRO_STATUS_SUCCESS) {
                cairo_surface_flush(bgs);
                unsigned char *base = cairo_image_surface_get_data(bgs);
                int stride = cairo_image_surface_get_stride(bgs);
                for (int y = 0; y < H; y++) {
                    int i = (flip ? H - 1 - y : y) / fy;
                    uint32_t *row = (uint32_t *)(base + (size_t)y * stride);
                    for (int x = 0; x < W; x++) {
                        uint8_t v = (uint8_t)lround(bg_grey(p, i, x / fx, lo, hi));
                        uint8_t c3[3] = {v, v, v};
                        row[x] = pack(c3);
                    }
                }
                cairo_surface_mark_dirty(bgs);
                paint_scaled(cr, bgs, hx, hy, p->hw, p->hh, W, H, 1.0);
            } else {
                rc = al_errf(err, "figure: cairo: %s", cairo_status_to_string(cairo_surface_status(bgs)));
            }
            cairo_surface_destroy(bgs);
        }
        int fx = whole_factor(p->grid_c, p->budget_w), fy = whole_factor(p->grid_r, p->budget_h);
        int W = p->grid_c * fx, H = p->grid_r * fy;
        cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, W, H);
        if (rc == 0 && cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
            cairo_surface_flush(img);
            unsigned char *base = cairo_image_surface_get_data(img);
            int stride = cairo_image_surface_get_stride(img);
            for (int y = 0; y < H; y++) {
                int i = (flip ? H - 1 - y : y) / fy;
                uint32_t *row = (uint32_t *)(base + (size_t)y * stride);
                for (int x = 0; x < W; x++) {
                    size_t c = (size_t)i * p->grid_c + x / fx;
                    row[x] = bad[c] && p->bg ? 0u : pack(rgb + 3 * c);  /* premultiplied: 0 = transparent */
                }
            }
            cairo_surface_mark_dirty(img);
            paint_scaled(cr, img, hx, hy, p->hw, p->hh, W, H, a);
        } else if (rc == 0) {
            rc = al_errf(err, "figure: cairo: %s", cairo_status_to_string(cairo_surface_status(img)));
        }
        cairo_surface_destroy(img);
    }
    free(rgb);
    free(bad);
    return rc;
}

/* Draws text centred at (x, y), shrunk (down to 60 %) to fit `avail`
 * points along its direction; rotate as in al_ptext_draw. */
static void draw_fitted(cairo_t *cr, const char *s, double x, double y, double size, int bold, double avail, int valign,
                        int rotate) {
    double w = al_ptext_width(cr, s, size, bold);
    if (w > avail && avail > 0) size *= fmax(0.6, avail / w);
    al_ptext_draw(cr, s, x, y, size, bold, 0.5, valign, rotate);
}

/* Draws a vertical colour bar at (x, y, w, h) (points) with its ticks,
 * labels and optional label; 0 at the bottom, 1 at the top. PNG bars are
 * filled per device row for exact colours; vector bars are one image row
 * per table entry. Fails (cairo's reason in err) when the bar's image
 * cannot be had, rather than save a figure without it. */
static int draw_cbar(cairo_t *cr, const layout *L, int fmt, const al_cmap *cm, double x, double y, double w,
                     double h, const al_tick *ticks, int nt, double tick_w, const char *label, al_err *err) {
    cairo_surface_t *img;
    if (fmt == FMT_PNG) {
        long x0 = lround(x * L->k), y0 = lround(y * L->k), x1 = lround((x + w) * L->k), y1 = lround((y + h) * L->k);
        int W = (int)(x1 - x0), H = (int)(y1 - y0);
        if (W < 1) W = 1;
        if (H < 1) H = 1;
        img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
        if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
            cairo_surface_flush(img);
            unsigned char *base = cairo_image_surface_get_data(img);
            int stride = cairo_image_surface_get_stride(img);
            for (int r = 0; r < H; r++) {
                uint8_t c[3];
                al_cmap_rgb(cm, 1.0 - (r + 0.5) / H, c);
                uint32_t *row = (uint32_t *)(base + (size_t)r * stride);
                for (int k = 0; k < W; k++) row[k] = pack(c);
            }
            cairo_surface_mark_dirty(img);
            cairo_save(cr);
            cairo_identity_matrix(cr);
            cairo_set_source_surface(cr, img, x0, y0);
            cairo_rectangle(cr, x0, y0, W, H);
            cairo_fill(cr);
            cairo_restore(cr);
        }
    } else {
        img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 8, cm->n);
        if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
            cairo_surface_flush(img);
            unsigned char *base = cairo_image_surface_get_data(img);
            int stride = cairo_image_surface_get_stride(img);
            for (int r = 0; r < cm->n; r++)
                for (int k = 0; k < 8; k++) ((uint32_t *)(base + (size_t)r * stride))[k] = pack(cm->lut8[cm->n - 1 - r]);
            cairo_surface_mark_dirty(img);
            paint_scaled(cr, img, x, y, w, h, 8, cm->n, 1.0);
        }
    }
    const cairo_status_t st = cairo_surface_status(img);
    cairo_surface_destroy(img);
    if (st != CAIRO_STATUS_SUCCESS) return al_errf(err, "figure: colour bar: cairo: %s", cairo_status_to_string(st));
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.6);
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
    cairo_set_line_width(cr, LINE_W);
    for (int k = 0; k < nt; k++) {
        double ty = y + h * (1.0 - ticks[k].t);
        cairo_move_to(cr, x + w, ty);
        cairo_line_to(cr, x + w + TICK_LEN, ty);
        cairo_stroke(cr);
        al_ptext_draw(cr, ticks[k].label, x + w + TICK_LEN + TICK_PAD, ty, L->f_tick, 0, 0, AL_VA_MIDDLE, 0);
    }
    if (label) draw_fitted(cr, label, x + w + TICK_LEN + TICK_PAD + tick_w + 6, y + h / 2, L->f_label, 0, h + 2 * L->f_tick, AL_VA_TOP, 1);
    return 0;
}


/* Draws one panel whose cell starts at (ox, oy) points. */
static int draw_panel(cairo_t *cr, al_figure *fig, panel *p, const layout *L, int fmt, double ox, double oy,
                      al_err *err) {
    /* centred in the shared box, as matplotlib centres an equal-aspect axes */
    double hx = ox + L->left + (L->S - p->hw) / 2, hy = oy + L->top + (L->S - p->hh) / 2;
    if (fmt == FMT_PNG) {  /* whole device pixels, so the image lands 1:1 */
        hx = lround(hx * L->k) / L->k;
        hy = lround(hy * L->k) / L->k;
    }
    if (draw_heat(cr, p, L, fmt, hx, hy, err) != 0) return -1;
    p->out_x = fmt == FMT_PNG ? lround(hx * L->k) : hx;
    p->out_y = fmt == FMT_PNG ? lround(hy * L->k) : hy;
    p->out_w = fmt == FMT_PNG ? p->px_w : p->hw;
    p->out_h = fmt == FMT_PNG ? p->px_h : p->hh;

    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, LINE_W);
    cairo_rectangle(cr, hx - LINE_W / 2, hy - LINE_W / 2, p->hw + LINE_W, p->hh + LINE_W);
    cairo_stroke(cr);
    double below = hy + p->hh + LINE_W / 2;
    if (!p->style.hide_ticks) {
        al_tick t[AL_MAX_TICKS];
        int n = al_pticks_index_fill(p->cols, p->xstep, t);
        for (int k = 0; k < n; k++) {
            double tx = hx + t[k].t * p->hw;
            cairo_move_to(cr, tx, below);
            cairo_line_to(cr, tx, below + TICK_LEN);
            cairo_stroke(cr);
            al_ptext_draw(cr, t[k].label, tx, below + TICK_LEN + TICK_PAD, L->f_tick, 0, 0.5, AL_VA_TOP, 0);
        }
        n = al_pticks_index_fill(p->rows, p->ystep, t);
        for (int k = 0; k < n; k++) {
            double ty = p->style.origin_lower ? hy + (1 - t[k].t) * p->hh : hy + t[k].t * p->hh;
            double lx = hx - LINE_W / 2;
            cairo_move_to(cr, lx, ty);
            cairo_line_to(cr, lx - TICK_LEN, ty);
            cairo_stroke(cr);
            al_ptext_draw(cr, t[k].label, lx - TICK_LEN - TICK_PAD, ty, L->f_tick, 0, 1, AL_VA_MIDDLE, 0);
        }
        below += TICK_LEN + TICK_PAD + L->f_tick;
    }
    /* text centred on the heatmap may use the cell's width symmetrically */
    double cx = hx + p->hw / 2, avail = 2 * fmin(cx - ox, ox + L->cell_w - cx) - 4;
    if (p->style.xlabel) draw_fitted(cr, p->style.xlabel, cx, below + 5, L->f_label, 0, avail, AL_VA_TOP, 0);
    if (p->style.ylabel)
        draw_fitted(cr, p->style.ylabel, ox + 4, hy + p->hh / 2, L->f_label, 0, p->hh + L->bottom, AL_VA_TOP, 1);
    double ty = hy - 5;
    if (p->subtitle) draw_fitted(cr, p->subtitle, cx, ty, L->f_sub, 0, avail, AL_VA_BOTTOM, 0);
    if (L->any_sub) ty -= 1.25 * L->f_sub;  /* titles line up across panels */
    if (p->title) draw_fitted(cr, p->title, cx, ty, L->f_title, 0, avail, AL_VA_BOTTOM, 0);
    if (fig->cbar == AL_CBAR_EACH)
        return draw_cbar(cr, L, fmt, p->cmap, hx + p->hw + L->cb_gap, hy, L->cb_w, p->hh, p->cticks, p->n_cticks,
                         L->cbtick_w, p->style.cbar_label, err);
    return 0;
}

/* Renders the whole figure onto cr (already scaled to points). */
static int render(cairo_t *cr, al_figure *fig, layout *L, int fmt, al_err *err) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    double grid_w = fig->cols * L->cell_w;
    if (fig->title) draw_fitted(cr, fig->title, MARGIN + grid_w / 2, MARGIN, L->f_fig, 1, grid_w, AL_VA_TOP, 0);
    for (int r = 0; r < fig->rows; r++)
        for (int c = 0; c < fig->cols; c++) {
            panel *p = &fig->p[r * fig->cols + c];
            if (!p->used) continue;
            double ox = MARGIN + c * L->cell_w, oy = MARGIN + L->title_h + r * L->cell_h;
            if (draw_panel(cr, fig, p, L, fmt, ox, oy, err) != 0) return -1;
        }
    if (fig->cbar == AL_CBAR_SHARED) {
        double x = MARGIN + grid_w, y = MARGIN + L->title_h + L->top, h = (fig->rows - 1) * L->cell_h + L->S;
        if (fmt == FMT_PNG) y = lround(y * L->k) / L->k;
        if (draw_cbar(cr, L, fmt, L->shared_cmap, x, y, L->cb_w, h, L->shared_ticks, L->n_shared_ticks,
                      L->shared_cbtick_w, fig->style.cbar_label, err))
            return -1;
    }
    const char *foot = footnote_text(fig);
    if (foot && *foot) {
        cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
        al_ptext_draw(cr, foot, MARGIN, L->H - MARGIN / 2 - 0.4 * L->f_note, L->f_note, 0, 0, AL_VA_BOTTOM, 0);
    }
    cairo_status_t st = cairo_status(cr);
    if (st != CAIRO_STATUS_SUCCESS) return al_errf(err, "figure: cairo: %s", cairo_status_to_string(st));
    return 0;
}

/* ---- output ---- */

int al_figure_save(al_figure *fig, const char *path, al_err *err) {
    if (!fig || !path || !*path) return al_errf(err, "saving figure: no figure or no file name");
    fig->saved = 0;
    int fmt = al_plot_format(path);
    if (fmt < 0) return al_errf(err, "saving figure %s: unknown format (the name must end in .png, .svg or .pdf)", path);
    int used = 0;
    for (int i = 0; i < fig->rows * fig->cols; i++) {
        if (!fig->p[i].used) continue;
        used++;
        if (resolve_panel(fig, i, err) != 0) return al_err_prefix(err, "saving figure %s", path);
    }
    if (!used) return al_errf(err, "saving figure %s: no panel has data", path);
    layout L;
    memset(&L, 0, sizeof L);
    if (fig->cbar == AL_CBAR_SHARED && resolve_shared(fig, &L, err) != 0)
        return al_err_prefix(err, "saving figure %s", path);
    size_heatmaps(fig, &L);
    choose_grids(fig, fmt);
    L.k = fmt == FMT_PNG ? fig->dpi / 72.0 : 1.0;

    cairo_surface_t *ms = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 4, 4);
    cairo_t *m = cairo_create(ms);
    al_ptext_setup(m);
    compute_layout(fig, &L, m);
    cairo_status_t mst = cairo_status(m);
    cairo_destroy(m);
    cairo_surface_destroy(ms);
    if (mst != CAIRO_STATUS_SUCCESS) return al_errf(err, "saving figure %s: cairo: %s", path, cairo_status_to_string(mst));

    al_plot_sink s;
    memset(&s, 0, sizeof s);
    s.err = err;
    cairo_surface_t *surf;
    int rc = 0;
    if (fmt == FMT_PNG) {
        int W = (int)ceil(L.W * L.k), H = (int)ceil(L.H * L.k);
        if ((int64_t)W * H > ((int64_t)1 << 28))
            return al_errf(err, "saving figure %s: %d x %d pixels is too large", path, W, H);
        surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
        fig->out_w = W;
        fig->out_h = H;
    } else {
        if (al_afile_open(&s.af, path, err) != 0) return al_err_prefix(err, "saving figure");
        if (fmt == FMT_SVG) {
            surf = cairo_svg_surface_create_for_stream(al_plot_sink_write, &s, L.W, L.H);
            cairo_svg_surface_set_document_unit(surf, CAIRO_SVG_UNIT_PT);
        } else {
            surf = cairo_pdf_surface_create_for_stream(al_plot_sink_write, &s, L.W, L.H);
            cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_CREATOR, "attnlab");
            if (fig->title) cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_TITLE, fig->title);
        }
        fig->out_w = L.W;
        fig->out_h = L.H;
    }
    cairo_status_t st = cairo_surface_status(surf);
    if (st != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(surf);
        if (fmt != FMT_PNG) al_afile_abort(&s.af);
        return al_errf(err, "saving figure %s: cairo: %s", path, cairo_status_to_string(st));
    }
    cairo_t *cr = cairo_create(surf);
    al_ptext_setup(cr);
    cairo_scale(cr, L.k, L.k);
    rc = render(cr, fig, &L, fmt, err);
    cairo_destroy(cr);
    if (rc != 0) {
        cairo_surface_destroy(surf);
        if (fmt != FMT_PNG) al_afile_abort(&s.af);
        return al_err_prefix(err, "saving figure %s", path);
    }
    if (fmt == FMT_PNG) {
        if (al_afile_open(&s.af, path, err) != 0) {
            cairo_surface_destroy(surf);
            return al_err_prefix(err, "saving figure");
        }
        st = cairo_surface_write_to_png_stream(surf, al_plot_sink_write, &s);
    } else {
        cairo_surface_finish(surf);
        st = cairo_surface_status(surf);
    }
    cairo_surface_destroy(surf);
    if (al_plot_sink_finish(&s, st, "figure", path, err) != 0) return -1;
    fig->saved = 1;
    return 0;
}
