/*
 * lineplot.c: lines, bands, reference lines and labelled points on one pair
 * of axes, rendered through cairo (see lineplot.h for the API).
 *
 * Data structure: struct al_lineplot keeps growing arrays of lines (each with
 * its own copies of x, y and the optional band), reference lines and points.
 * al_lineplot_save resolves the axis limits, then lays out in points (1/72
 * in): margins from the measured tick labels and axis labels, the axes box,
 * the legend in the emptiest corner, point labels placed to avoid each other.
 * PNG output scales by dpi/72. Text and tick placement reuse the heatmap
 * figures' helpers (plot_internal.h), so both kinds of figure look alike.
 */
#include "lineplot.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../io/io.h"
#include "plot_internal.h"


#define TICK_LEN 3.5 /* pt */
#define TICK_PAD 2.0
#define LINE_W 0.8 /* spines and ticks */
#define DATA_W 1.5 /* data lines */
#define MARGIN 8.0
#define MARKER_R 2.2 /* line markers */
#define POINT_R 3.6  /* labelled points */
#define MAX_LABELS 64

/* matplotlib's default colour cycle (tab10). */
static const double tab10[10][3] = {
    {0x1f / 255.0, 0x77 / 255.0, 0xb4 / 255.0}, {0xff / 255.0, 0x7f / 255.0, 0x0e / 255.0},
    {0x2c / 255.0, 0xa0 / 255.0, 0x2c / 255.0}, {0xd6 / 255.0, 0x27 / 255.0, 0x28 / 255.0},
    {0x94 / 255.0, 0x67 / 255.0, 0xbd / 255.0}, {0x8c / 255.0, 0x56 / 255.0, 0x4b / 255.0},
    {0xe3 / 255.0, 0x77 / 255.0, 0xc2 / 255.0}, {0x7f / 255.0, 0x7f / 255.0, 0x7f / 255.0},
    {0xbc / 255.0, 0xbd / 255.0, 0x22 / 255.0}, {0x17 / 255.0, 0xbe / 255.0, 0xcf / 255.0},
};

typedef struct lp_line {
    char *label;
    double *x, *y, *lo, *hi; /* lo/hi NULL: no band */
    int n, color;
} lp_line;

typedef struct lp_hline {
    char *label;
    double y;
} lp_hline;

typedef struct lp_point {
    char *label;
    double x, y, ylo, yhi;
    int color;
    al_marker shape;
} lp_point;

/* A legend row of a marker kind (al_lineplot_marker_key). */
typedef struct lp_key {
    char *label;
    al_marker shape;
} lp_key;

/* A rectangle in points, for overlap tests. */
typedef struct rect {
    double x, y, w, h;
} rect;

struct al_lineplot {
    char *title, *xlabel, *ylabel, *footnote;
    al_axis_scale xs, ys;
    double xlim[2], ylim[2]; /* NAN: from the data */
    double w_in, h_in, dpi;
    lp_line *lines;
    int n_lines, cap_lines;
    lp_hline *hlines;
    int n_hlines, cap_hlines;
    lp_point *points;
    int n_points, cap_points;
    lp_key *keys;
    int n_keys, cap_keys;
    /* after a save */
    int saved, has_legend;
    double out_w, out_h;
    rect axes_out, legend_out;
};

/* Everything al_lineplot_save computes before drawing. */
typedef struct layout {
    double k;    /* output units per point */
    double W, H; /* figure, pt */
    double f_tick, f_label, f_title, f_legend, f_note, f_point;
    rect ax;        /* the axes box */
    al_norm xn, yn; /* resolved limits as norms */
    al_tick xt[AL_MAX_TICKS], yt[AL_MAX_TICKS];
    int nxt, nyt;
    rect legend;
    int legend_rows;
    double legend_text_w;
    rect labels[MAX_LABELS]; /* placed point labels */
    int n_labels;
} layout;

/* ---- construction ---- */


al_lineplot *al_lineplot_new(const char *title, const char *xlabel, const char *ylabel, al_err *err) {
    al_lineplot *p = calloc(1, sizeof *p);
    if (!p) {
        al_errf(err, "line plot: out of memory");
        return NULL;
    }
    int oom = 0;
    p->title = al_pdup_or_null(title, &oom);
    p->xlabel = al_pdup_or_null(xlabel, &oom);
    p->ylabel = al_pdup_or_null(ylabel, &oom);
    p->xlim[0] = p->xlim[1] = p->ylim[0] = p->ylim[1] = NAN;
    p->w_in = 5.0;
    p->h_in = 3.4;
    p->dpi = 150;
    if (oom) {
        al_lineplot_free(p);
        al_errf(err, "line plot: out of memory");
        return NULL;
    }
    return p;
}

void al_lineplot_free(al_lineplot *p) {
    if (!p) return;
    for (int i = 0; i < p->n_lines; i++) {
        lp_line *l = &p->lines[i];
        free(l->label), free(l->x), free(l->y), free(l->lo), free(l->hi);
    }
    for (int i = 0; i < p->n_hlines; i++) free(p->hlines[i].label);
    for (int i = 0; i < p->n_points; i++) free(p->points[i].label);
    for (int i = 0; i < p->n_keys; i++) free(p->keys[i].label);
    free(p->lines), free(p->hlines), free(p->points), free(p->keys);
    free(p->title), free(p->xlabel), free(p->ylabel), free(p->footnote);
    free(p);
}

void al_lineplot_set_scale(al_lineplot *p, al_axis_scale x, al_axis_scale y) {
    if (!p) return;
    p->xs = x == AL_AXIS_LOG ? AL_AXIS_LOG : AL_AXIS_LINEAR;
    p->ys = y == AL_AXIS_LOG ? AL_AXIS_LOG : AL_AXIS_LINEAR;
}

/* Shared checks of set_xlim / set_ylim. */
static int set_lim(double *lim, double lo, double hi, const char *axis, al_err *err) {
    if (!isnan(lo) && !isnan(hi) && !(lo < hi))
        return al_errf(err, "line plot: %s limits %g..%g are not increasing", axis, lo, hi);
    if ((!isnan(lo) && !isfinite(lo)) || (!isnan(hi) && !isfinite(hi)))
        return al_errf(err, "line plot: %s limits must be finite or NAN", axis);
    lim[0] = lo;
    lim[1] = hi;
    return 0;
}

int al_lineplot_set_xlim(al_lineplot *p, double lo, double hi, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    return set_lim(p->xlim, lo, hi, "x", err);
}

int al_lineplot_set_ylim(al_lineplot *p, double lo, double hi, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    return set_lim(p->ylim, lo, hi, "y", err);
}

int al_lineplot_set_size(al_lineplot *p, double width_in, double height_in, double dpi, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (!(width_in >= 2 && width_in <= 12 && height_in >= 1.5 && height_in <= 10))
        return al_errf(err, "line plot: size %g x %g in is outside 2..12 x 1.5..10 in", width_in, height_in);
    if (!(dpi >= 50 && dpi <= 600)) return al_errf(err, "line plot: %g dpi is outside 50..600", dpi);
    p->w_in = width_in;
    p->h_in = height_in;
    p->dpi = dpi;
    return 0;
}

int al_lineplot_set_footnote(al_lineplot *p, const char *text, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    int oom = 0;
    char *d = al_pdup_or_null(text, &oom);
    if (oom) return al_errf(err, "line plot: out of memory");
    free(p->footnote);
    p->footnote = d;
    return 0;
}

/* Grows an array of `size`-byte items to hold one more; -1 when out of memory. */
static int grow(void **arr, int *cap, int n, size_t size) {
    if (n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 8;
    void *a = realloc(*arr, (size_t)nc * size);
    if (!a) return -1;
    *arr = a;
    *cap = nc;
    return 0;
}

/* A malloc'd copy of n doubles. */
static double *copy_doubles(const double *v, int n) {
    double *d = malloc(sizeof(double) * (size_t)n);
    if (d) memcpy(d, v, sizeof(double) * (size_t)n);
    return d;
}

int al_lineplot_line(al_lineplot *p, const char *label, const double *x, const double *y, int n, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (!x || !y || n < 1 || n > 10000000) return al_errf(err, "line plot: a line needs 1 or more points (got %d)", n);
    if (grow((void **)&p->lines, &p->cap_lines, p->n_lines, sizeof *p->lines))
        return al_errf(err, "line plot: out of memory");
    lp_line l = {0};
    int oom = 0;
    l.label = al_pdup_or_null(label, &oom);
    l.x = copy_doubles(x, n);
    l.y = copy_doubles(y, n);
    l.n = n;
    l.color = p->n_lines;
    if (oom || !l.x || !l.y) {
        free(l.label), free(l.x), free(l.y);
        return al_errf(err, "line plot: out of memory");
    }
    p->lines[p->n_lines] = l;
    return p->n_lines++;
}

int al_lineplot_band(al_lineplot *p, int line, const double *lo, const double *hi, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (line < 0 || line >= p->n_lines) return al_errf(err, "line plot: line %d does not exist", line);
    if (!lo || !hi) return al_errf(err, "line plot: a band needs both edges");
    lp_line *l = &p->lines[line];
    double *a = copy_doubles(lo, l->n), *b = copy_doubles(hi, l->n);
    if (!a || !b) {
        free(a), free(b);
        return al_errf(err, "line plot: out of memory");
    }
    free(l->lo), free(l->hi);
    l->lo = a;
    l->hi = b;
    return 0;
}

int al_lineplot_hline(al_lineplot *p, const char *label, double y, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (!isfinite(y)) return al_errf(err, "line plot: reference line at a non-finite y");
    if (grow((void **)&p->hlines, &p->cap_hlines, p->n_hlines, sizeof *p->hlines))
        return al_errf(err, "line plot: out of memory");
    int oom = 0;
    p->hlines[p->n_hlines].label = al_pdup_or_null(label, &oom);
    p->hlines[p->n_hlines].y = y;
    if (oom) return al_errf(err, "line plot: out of memory");
    p->n_hlines++;
    return 0;
}

int al_lineplot_point(al_lineplot *p, const char *label, double x, double y, double ylo, double yhi, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (!isfinite(x) || !isfinite(y)) return al_errf(err, "line plot: point (%g, %g) is not finite", x, y);
    if (grow((void **)&p->points, &p->cap_points, p->n_points, sizeof *p->points))
        return al_errf(err, "line plot: out of memory");
    int oom = 0;
    lp_point q = {al_pdup_or_null(label, &oom), x, y, ylo, yhi, p->n_points};
    if (oom) return al_errf(err, "line plot: out of memory");
    p->points[p->n_points] = q;
    return p->n_points++;
}

int al_lineplot_color(al_lineplot *p, int is_point, int index, int color, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    int n = is_point ? p->n_points : p->n_lines;
    if (index < 0 || index >= n)
        return al_errf(err, "line plot: %s %d does not exist", is_point ? "point" : "line", index);
    color = ((color % 10) + 10) % 10;
    if (is_point)
        p->points[index].color = color;
    else
        p->lines[index].color = color;
    return 0;
}

int al_lineplot_point_marker(al_lineplot *p, int index, al_marker shape, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (index < 0 || index >= p->n_points) return al_errf(err, "line plot: point %d does not exist", index);
    if (shape < AL_MARKER_CIRCLE || shape > AL_MARKER_SQUARE) return al_errf(err, "line plot: unknown marker %d", (int)shape);
    p->points[index].shape = shape;
    return 0;
}

int al_lineplot_marker_key(al_lineplot *p, const char *label, al_marker shape, al_err *err) {
    if (!p) return al_errf(err, "line plot: NULL plot");
    if (!label || !*label) return al_errf(err, "line plot: a marker key needs a label");
    if (shape < AL_MARKER_CIRCLE || shape > AL_MARKER_SQUARE) return al_errf(err, "line plot: unknown marker %d", (int)shape);
    if (grow((void **)&p->keys, &p->cap_keys, p->n_keys, sizeof *p->keys)) return al_errf(err, "line plot: out of memory");
    int oom = 0;
    p->keys[p->n_keys] = (lp_key){al_pdup_or_null(label, &oom), shape};
    if (oom) return al_errf(err, "line plot: out of memory");
    p->n_keys++;
    return 0;
}

/* ---- limits and coordinates ---- */

/* Widens [*lo, *hi] to include v (log axes: only v > 0). */
static void include(double *lo, double *hi, double v, al_axis_scale s) {
    if (!isfinite(v) || (s == AL_AXIS_LOG && v <= 0)) return;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
}

/* Data range of both axes, then a 5 % margin (in log space for log axes)
 * and any fixed limits. */
static int resolve_limits(const al_lineplot *p, layout *L, al_err *err) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < p->n_lines; i++) {
        const lp_line *l = &p->lines[i];
        for (int j = 0; j < l->n; j++) {
            if (!isfinite(l->x[j]) || !isfinite(l->y[j])) continue;
            if (p->xs == AL_AXIS_LOG && l->x[j] <= 0) continue;
            include(&x0, &x1, l->x[j], p->xs);
            include(&y0, &y1, l->y[j], p->ys);
            if (l->lo) include(&y0, &y1, l->lo[j], p->ys);
            if (l->hi) include(&y0, &y1, l->hi[j], p->ys);
        }
    }
    for (int i = 0; i < p->n_hlines; i++) include(&y0, &y1, p->hlines[i].y, p->ys);
    for (int i = 0; i < p->n_points; i++) {
        const lp_point *q = &p->points[i];
        include(&x0, &x1, q->x, p->xs);
        include(&y0, &y1, q->y, p->ys);
        if (q->ylo < q->yhi) {
            include(&y0, &y1, q->ylo, p->ys);
            include(&y0, &y1, q->yhi, p->ys);
        }
    }
    double lim[2][2] = {{x0, x1}, {y0, y1}};
    const double *fixed[2] = {p->xlim, p->ylim};
    const al_axis_scale sc[2] = {p->xs, p->ys};
    for (int a = 0; a < 2; a++) {
        double lo = lim[a][0], hi = lim[a][1];
        int is_log = sc[a] == AL_AXIS_LOG;
        if (!(lo <= hi)) { /* no data on this axis */
            lo = is_log ? 1 : 0;
            hi = is_log ? 10 : 1;
        }
        if (is_log) {
            double l0 = log10(lo), l1 = log10(hi);
            if (l1 - l0 < 1e-9) l0 -= 0.5, l1 += 0.5;
            double m = 0.05 * (l1 - l0);
            lo = pow(10, l0 - m);
            hi = pow(10, l1 + m);
        } else {
            if (hi - lo < 1e-12 * fmax(1, fabs(hi))) {
                double d = lo == 0 ? 1 : 0.1 * fabs(lo);
                lo -= d, hi += d;
            }
            double m = 0.05 * (hi - lo);
            lo -= m, hi += m;
        }
        if (!isnan(fixed[a][0])) lo = fixed[a][0];
        if (!isnan(fixed[a][1])) hi = fixed[a][1];
        if (!(lo < hi) || (is_log && !(lo > 0)))
            return al_errf(err, "line plot: %s limits %g..%g are unusable%s", a ? "y" : "x", lo, hi,
                           is_log ? " on a log axis" : "");
        al_norm n = {is_log ? AL_NORM_LOG : AL_NORM_LINEAR, lo, hi};
        if (a)
            L->yn = n;
        else
            L->xn = n;
    }
    return 0;
}

/* Position of v along a norm, 0..1 (NaN when not drawable). */
static double frac(const al_norm *n, double v) { return al_norm_apply(n, v); }

static double px(const layout *L, double x) { return L->ax.x + frac(&L->xn, x) * L->ax.w; }
static double py(const layout *L, double y) { return L->ax.y + L->ax.h - frac(&L->yn, y) * L->ax.h; }

/* ---- layout ---- */

static int overlaps(rect a, rect b) { return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h; }

static int inside(rect a, rect outer) {
    return a.x >= outer.x && a.y >= outer.y && a.x + a.w <= outer.x + outer.w && a.y + a.h <= outer.y + outer.h;
}

/* x ticks that do not collide: ask for fewer until the widest label plus a
 * gap fits between neighbours. */
static int x_ticks(cairo_t *m, const layout *L, al_tick *out) {
    double f = L->f_tick * 2.2;
    int n = 0;
    for (int tries = 0; tries < 8; tries++) {
        n = al_pticks_colorbar(&L->xn, 0, L->ax.w, f, out);
        double widest = 0, gap = INFINITY;
        for (int i = 0; i < n; i++) widest = fmax(widest, al_ptext_width(m, out[i].label, L->f_tick, 0));
        for (int i = 1; i < n; i++) gap = fmin(gap, (out[i].t - out[i - 1].t) * L->ax.w);
        if (n < 2 || widest + 0.8 * L->f_tick <= gap) break;
        f *= 1.4;
    }
    return n;
}

/* Number of line samples, points and reference-line samples inside r: how
 * much a legend placed there would hide. */
static int covered(const al_lineplot *p, const layout *L, rect r) {
    int c = 0;
    for (int i = 0; i < p->n_lines; i++) {
        const lp_line *l = &p->lines[i];
        for (int j = 0; j < l->n; j++) {
            double a = px(L, l->x[j]), b = py(L, l->y[j]);
            if (isfinite(a) && isfinite(b) && a >= r.x && a <= r.x + r.w && b >= r.y && b <= r.y + r.h) c += 4;
            if (j + 1 < l->n) { /* the segment to the next point, sampled */
                double a2 = px(L, l->x[j + 1]), b2 = py(L, l->y[j + 1]);
                for (int s = 1; s < 8 && isfinite(a) && isfinite(b) && isfinite(a2) && isfinite(b2); s++) {
                    double u = a + (a2 - a) * s / 8.0, v = b + (b2 - b) * s / 8.0;
                    c += u >= r.x && u <= r.x + r.w && v >= r.y && v <= r.y + r.h;
                }
            }
        }
    }
    for (int i = 0; i < p->n_hlines; i++) {
        double v = py(L, p->hlines[i].y);
        if (isfinite(v) && v >= r.y && v <= r.y + r.h) c += 20; /* hiding a reference line is worse than a few points */
    }
    for (int i = 0; i < p->n_points; i++) {
        double a = px(L, p->points[i].x), b = py(L, p->points[i].y);
        if (a >= r.x - 30 && a <= r.x + r.w + 30 && b >= r.y - 8 && b <= r.y + r.h + 8) c += 20;
    }
    return c;
}

/* Legend size and the corner of the axes where it hides the least; outside
 * the axes, on the right, when every corner would hide data. */
static void place_legend(const al_lineplot *p, layout *L, cairo_t *m) {
    L->legend_rows = 0;
    L->legend_text_w = 0;
    for (int i = 0; i < p->n_lines; i++)
        if (p->lines[i].label) {
            L->legend_rows++;
            L->legend_text_w = fmax(L->legend_text_w, al_ptext_width(m, p->lines[i].label, L->f_legend, 0));
        }
    for (int i = 0; i < p->n_hlines; i++)
        if (p->hlines[i].label) {
            L->legend_rows++;
            L->legend_text_w = fmax(L->legend_text_w, al_ptext_width(m, p->hlines[i].label, L->f_legend, 0));
        }
    for (int i = 0; i < p->n_keys; i++) {
        L->legend_rows++;
        L->legend_text_w = fmax(L->legend_text_w, al_ptext_width(m, p->keys[i].label, L->f_legend, 0));
    }
    if (!L->legend_rows) return;
    double w = 5 + 22 + 5 + L->legend_text_w + 6, h = 4 + L->legend_rows * 1.4 * L->f_legend + 3;
    const double inset = 6;
    rect c[4] = {
        {L->ax.x + L->ax.w - inset - w, L->ax.y + inset, w, h},               /* upper right */
        {L->ax.x + inset, L->ax.y + inset, w, h},                             /* upper left */
        {L->ax.x + inset, L->ax.y + L->ax.h - inset - h, w, h},               /* lower left */
        {L->ax.x + L->ax.w - inset - w, L->ax.y + L->ax.h - inset - h, w, h}, /* lower right */
    };
    int best = 0, best_c = -1;
    for (int i = 0; i < 4; i++) {
        int k = covered(p, L, c[i]);
        if (best_c < 0 || k < best_c) best = i, best_c = k;
    }
    L->legend = c[best];
    if (best_c < 6) return; /* a few segment samples may hide; a marker and some line may not */
    /* every corner would hide a marker or the reference line: narrow the
     * axes and put the legend beside them, top-aligned */
    L->ax.w -= w + 10;
    L->nxt = x_ticks(m, L, L->xt);
    L->legend = (rect){L->ax.x + L->ax.w + 10, L->ax.y, w, h};
}

/* Places each point's label beside its marker: right, left, above or below,
 * the first spot inside the axes that overlaps no marker, earlier label or
 * the legend. */
static void place_labels(const al_lineplot *p, layout *L, cairo_t *m) {
    L->n_labels = 0;
    for (int i = 0; i < p->n_points && i < MAX_LABELS; i++) {
        const lp_point *q = &p->points[i];
        double w = q->label ? al_ptext_width(m, q->label, L->f_point, 0) : 0, h = L->f_point;
        double x = px(L, q->x), y = py(L, q->y), d = POINT_R + 3;
        rect cand[6] = {
            {x + d, y - h / 2, w, h}, {x - d - w, y - h / 2, w, h}, {x - w / 2, y - d - h, w, h},
            {x - w / 2, y + d, w, h}, {x + d, y - d - h, w, h},     {x + d, y + d, w, h},
        };
        int pick = -1;
        for (int c = 0; c < 6 && pick < 0; c++) {
            int ok = inside(cand[c], L->ax);
            for (int j = 0; ok && j < L->n_labels; j++) ok = !overlaps(cand[c], L->labels[j]);
            for (int j = 0; ok && j < p->n_points; j++) {
                rect mk = {px(L, p->points[j].x) - POINT_R, py(L, p->points[j].y) - POINT_R, 2 * POINT_R, 2 * POINT_R};
                ok = !overlaps(cand[c], mk);
            }
            if (ok && L->legend_rows) ok = !overlaps(cand[c], L->legend);
            if (ok) pick = c;
        }
        if (pick < 0) { /* nothing is free: the side that stays inside, else the right */
            pick = 0;
            for (int c = 0; c < 4; c++)
                if (inside(cand[c], L->ax)) {
                    pick = c;
                    break;
                }
        }
        L->labels[L->n_labels++] = cand[pick];
    }
}

/* Margins from the measured text, then the axes box, ticks, legend, labels. */
static void compute_layout(const al_lineplot *p, layout *L, cairo_t *m) {
    L->W = p->w_in * 72;
    L->H = p->h_in * 72;
    L->f_tick = 9;
    L->f_label = 10;
    L->f_title = 11;
    L->f_legend = 8.5;
    L->f_note = 8;
    L->f_point = 8.5;
    double top = MARGIN + (p->title ? 1.3 * L->f_title + 6 : 0);
    double bottom = MARGIN + TICK_LEN + TICK_PAD + L->f_tick + (p->xlabel ? 6 + L->f_label : 0) +
                    (p->footnote ? 2.0 * L->f_note : 0);
    L->ax.y = top;
    L->ax.h = L->H - top - bottom;
    L->nyt = al_pticks_colorbar(&L->yn, 0, L->ax.h, L->f_tick, L->yt);
    double ytw = 0;
    for (int i = 0; i < L->nyt; i++) ytw = fmax(ytw, al_ptext_width(m, L->yt[i].label, L->f_tick, 0));
    L->ax.x = MARGIN + (p->ylabel ? L->f_label + 6 : 0) + ytw + TICK_LEN + TICK_PAD;
    L->ax.w = L->W - L->ax.x - MARGIN - 10; /* room for half of the last x tick label */
    L->nxt = x_ticks(m, L, L->xt);
    place_legend(p, L, m);
    place_labels(p, L, m);
}

/* ---- drawing ---- */

static void set_color(cairo_t *cr, int c, double alpha) {
    cairo_set_source_rgba(cr, tab10[c][0], tab10[c][1], tab10[c][2], alpha);
}

/* A filled marker (circle, diamond or square of about the same area) with a
 * thin darker edge. */
static void marker(cairo_t *cr, double x, double y, double r, int color, al_marker shape) {
    cairo_new_sub_path(cr);
    if (shape == AL_MARKER_DIAMOND) {
        const double d = 1.35 * r;
        cairo_move_to(cr, x, y - d), cairo_line_to(cr, x + d, y), cairo_line_to(cr, x, y + d), cairo_line_to(cr, x - d, y);
        cairo_close_path(cr);
    } else if (shape == AL_MARKER_SQUARE) {
        const double h = 0.9 * r;
        cairo_rectangle(cr, x - h, y - h, 2 * h, 2 * h);
    } else {
        cairo_arc(cr, x, y, r, 0, 2 * M_PI);
    }
    set_color(cr, color, 1);
    cairo_fill_preserve(cr);
    cairo_set_source_rgba(cr, 0, 0, 0, 0.6);
    cairo_set_line_width(cr, 0.5);
    cairo_stroke(cr);
}

/* A line's band, its segments (broken at gaps) and markers. */
static void draw_line(cairo_t *cr, const layout *L, const lp_line *l) {
    if (l->lo && l->hi) {
        int open = 0;
        for (int j = 0; j <= l->n; j++) { /* one polygon per run of drawable points */
            int ok = j < l->n && isfinite(px(L, l->x[j])) && isfinite(py(L, l->lo[j])) && isfinite(py(L, l->hi[j]));
            if (ok && !open)
                open = 1, cairo_move_to(cr, px(L, l->x[j]), py(L, l->hi[j]));
            else if (ok)
                cairo_line_to(cr, px(L, l->x[j]), py(L, l->hi[j]));
            if (!ok && open) {
                int k = j - 1;
                while (k >= 0 && isfinite(px(L, l->x[k])) && isfinite(py(L, l->lo[k])) && isfinite(py(L, l->hi[k]))) {
                    cairo_line_to(cr, px(L, l->x[k]), py(L, l->lo[k]));
                    k--;
                }
                cairo_close_path(cr);
                set_color(cr, l->color, 0.18);
                cairo_fill(cr);
                open = 0;
            }
        }
    }
    set_color(cr, l->color, 1);
    cairo_set_line_width(cr, DATA_W);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    int pen = 0;
    for (int j = 0; j < l->n; j++) {
        double a = px(L, l->x[j]), b = py(L, l->y[j]);
        if (!isfinite(a) || !isfinite(b)) {
            pen = 0;
            continue;
        }
        if (pen)
            cairo_line_to(cr, a, b);
        else
            cairo_move_to(cr, a, b);
        pen = 1;
    }
    cairo_stroke(cr);
    for (int j = 0; j < l->n; j++) {
        double a = px(L, l->x[j]), b = py(L, l->y[j]);
        if (isfinite(a) && isfinite(b)) marker(cr, a, b, MARKER_R, l->color, AL_MARKER_CIRCLE);
    }
}

static void dashed(cairo_t *cr, int on) {
    static const double d[] = {5.0, 3.0};
    cairo_set_dash(cr, d, on ? 2 : 0, 0);
}

/* The legend box: a sample of each line (or dashed reference) and its label. */
static void draw_legend(cairo_t *cr, const al_lineplot *p, const layout *L) {
    const rect r = L->legend;
    cairo_rectangle(cr, r.x, r.y, r.w, r.h);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
    cairo_set_line_width(cr, 0.6);
    cairo_stroke(cr);
    double row = 1.4 * L->f_legend, y = r.y + 4 + row / 2;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? p->n_hlines : p->n_lines;
        for (int i = 0; i < n; i++) {
            const char *label = pass ? p->hlines[i].label : p->lines[i].label;
            if (!label) continue;
            double x0 = r.x + 5, x1 = x0 + 22;
            if (pass) {
                cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
                cairo_set_line_width(cr, 1.2);
                dashed(cr, 1);
            } else {
                set_color(cr, p->lines[i].color, 1);
                cairo_set_line_width(cr, DATA_W);
            }
            cairo_move_to(cr, x0, y);
            cairo_line_to(cr, x1, y);
            cairo_stroke(cr);
            dashed(cr, 0);
            if (!pass) marker(cr, (x0 + x1) / 2, y, MARKER_R, p->lines[i].color, AL_MARKER_CIRCLE);
            cairo_set_source_rgb(cr, 0, 0, 0);
            al_ptext_draw(cr, label, x1 + 5, y, L->f_legend, 0, 0, AL_VA_MIDDLE, 0);
            y += row;
        }
    }
    for (int i = 0; i < p->n_keys; i++, y += row) { /* marker kinds: a grey marker, no line */
        const double x1 = r.x + 5 + 22;
        marker(cr, r.x + 5 + 11, y, POINT_R, 7, p->keys[i].shape);
        cairo_set_source_rgb(cr, 0, 0, 0);
        al_ptext_draw(cr, p->keys[i].label, x1 + 5, y, L->f_legend, 0, 0, AL_VA_MIDDLE, 0);
    }
}

/* The whole plot onto cr (already scaled to points). */
static int render(cairo_t *cr, const al_lineplot *p, const layout *L, al_err *err) {
    const rect a = L->ax;
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    /* light grid at the major ticks, behind the data */
    cairo_set_source_rgb(cr, 0.91, 0.91, 0.91);
    cairo_set_line_width(cr, 0.5);
    for (int i = 0; i < L->nxt; i++) {
        double x = a.x + L->xt[i].t * a.w;
        cairo_move_to(cr, x, a.y);
        cairo_line_to(cr, x, a.y + a.h);
    }
    for (int i = 0; i < L->nyt; i++) {
        double y = a.y + a.h - L->yt[i].t * a.h;
        cairo_move_to(cr, a.x, y);
        cairo_line_to(cr, a.x + a.w, y);
    }
    cairo_stroke(cr);

    cairo_save(cr);
    cairo_rectangle(cr, a.x, a.y, a.w, a.h);
    cairo_clip(cr);
    for (int i = 0; i < p->n_hlines; i++) {
        double y = py(L, p->hlines[i].y);
        if (!isfinite(y)) continue;
        cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
        cairo_set_line_width(cr, 1.2);
        dashed(cr, 1);
        cairo_move_to(cr, a.x, y);
        cairo_line_to(cr, a.x + a.w, y);
        cairo_stroke(cr);
        dashed(cr, 0);
    }
    for (int i = 0; i < p->n_lines; i++) draw_line(cr, L, &p->lines[i]);
    for (int i = 0; i < p->n_points; i++) {
        const lp_point *q = &p->points[i];
        double x = px(L, q->x), y = py(L, q->y);
        if (!isfinite(x) || !isfinite(y)) continue;
        if (q->ylo < q->yhi) {
            double y0 = py(L, q->ylo), y1 = py(L, q->yhi);
            if (isfinite(y0) && isfinite(y1)) {
                set_color(cr, q->color, 1);
                cairo_set_line_width(cr, 1.0);
                cairo_move_to(cr, x, y0), cairo_line_to(cr, x, y1);
                cairo_move_to(cr, x - 3, y0), cairo_line_to(cr, x + 3, y0);
                cairo_move_to(cr, x - 3, y1), cairo_line_to(cr, x + 3, y1);
                cairo_stroke(cr);
            }
        }
        marker(cr, x, y, POINT_R, q->color, q->shape);
    }
    cairo_restore(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    for (int i = 0; i < p->n_points && i < L->n_labels; i++)
        if (p->points[i].label)
            al_ptext_draw(cr, p->points[i].label, L->labels[i].x, L->labels[i].y + L->labels[i].h / 2, L->f_point, 0, 0,
                          AL_VA_MIDDLE, 0);
    if (L->legend_rows) draw_legend(cr, p, L);

    /* spines, ticks, tick labels */
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, LINE_W);
    cairo_rectangle(cr, a.x, a.y, a.w, a.h);
    cairo_stroke(cr);
    for (int i = 0; i < L->nxt; i++) {
        double x = a.x + L->xt[i].t * a.w, y = a.y + a.h;
        cairo_move_to(cr, x, y);
        cairo_line_to(cr, x, y + TICK_LEN);
        cairo_stroke(cr);
        al_ptext_draw(cr, L->xt[i].label, x, y + TICK_LEN + TICK_PAD, L->f_tick, 0, 0.5, AL_VA_TOP, 0);
    }
    for (int i = 0; i < L->nyt; i++) {
        double y = a.y + a.h - L->yt[i].t * a.h;
        cairo_move_to(cr, a.x, y);
        cairo_line_to(cr, a.x - TICK_LEN, y);
        cairo_stroke(cr);
        al_ptext_draw(cr, L->yt[i].label, a.x - TICK_LEN - TICK_PAD, y, L->f_tick, 0, 1, AL_VA_MIDDLE, 0);
    }
    double below = a.y + a.h + TICK_LEN + TICK_PAD + L->f_tick;
    if (p->xlabel) al_ptext_draw(cr, p->xlabel, a.x + a.w / 2, below + 6, L->f_label, 0, 0.5, AL_VA_TOP, 0);
    if (p->ylabel) al_ptext_draw(cr, p->ylabel, MARGIN, a.y + a.h / 2, L->f_label, 0, 0.5, AL_VA_TOP, 1);
    if (p->title) al_ptext_draw(cr, p->title, a.x + a.w / 2, MARGIN, L->f_title, 1, 0.5, AL_VA_TOP, 0);
    if (p->footnote) {
        cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
        al_ptext_draw(cr, p->footnote, MARGIN, L->H - MARGIN / 2, L->f_note, 0, 0, AL_VA_BOTTOM, 0);
    }
    cairo_status_t st = cairo_status(cr);
    if (st != CAIRO_STATUS_SUCCESS) return al_errf(err, "line plot: cairo: %s", cairo_status_to_string(st));
    return 0;
}

/* ---- output ---- */

int al_lineplot_save(al_lineplot *p, const char *path, al_err *err) {
    if (!p || !path || !*path) return al_errf(err, "saving plot: no plot or no file name");
    p->saved = 0;
    const int fmt = al_plot_format(path);
    if (fmt < 0) return al_errf(err, "saving plot %s: unknown format (the name must end in .png, .svg or .pdf)", path);
    if (!p->n_lines && !p->n_points && !p->n_hlines) return al_errf(err, "saving plot %s: nothing to plot", path);
    layout L;
    memset(&L, 0, sizeof L);
    if (resolve_limits(p, &L, err)) return al_err_prefix(err, "saving plot %s", path);
    cairo_surface_t *ms = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 4, 4);
    cairo_t *m = cairo_create(ms);
    al_ptext_setup(m);
    compute_layout(p, &L, m);
    cairo_destroy(m);
    cairo_surface_destroy(ms);
    L.k = fmt == FMT_PNG ? p->dpi / 72.0 : 1.0;

    al_plot_sink s;
    memset(&s, 0, sizeof s);
    s.err = err;
    cairo_surface_t *surf;
    if (fmt == FMT_PNG) {
        surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(L.W * L.k), (int)ceil(L.H * L.k));
    } else {
        if (al_afile_open(&s.af, path, err)) return al_err_prefix(err, "saving plot");
        if (fmt == FMT_SVG) {
            surf = cairo_svg_surface_create_for_stream(al_plot_sink_write, &s, L.W, L.H);
            cairo_svg_surface_set_document_unit(surf, CAIRO_SVG_UNIT_PT);
        } else {
            surf = cairo_pdf_surface_create_for_stream(al_plot_sink_write, &s, L.W, L.H);
            cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_CREATOR, "attnlab");
            if (p->title) cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_TITLE, p->title);
        }
    }
    cairo_status_t st = cairo_surface_status(surf);
    int rc = 0;
    if (st != CAIRO_STATUS_SUCCESS) {
        rc = al_errf(err, "saving plot %s: cairo: %s", path, cairo_status_to_string(st));
    } else {
        cairo_t *cr = cairo_create(surf);
        al_ptext_setup(cr);
        cairo_scale(cr, L.k, L.k);
        rc = render(cr, p, &L, err);
        cairo_destroy(cr);
        if (rc) al_err_prefix(err, "saving plot %s", path);
    }
    if (!rc && fmt == FMT_PNG) {
        if (al_afile_open(&s.af, path, err)) {
            cairo_surface_destroy(surf);
            return al_err_prefix(err, "saving plot");
        }
        st = cairo_surface_write_to_png_stream(surf, al_plot_sink_write, &s);
    } else if (!rc) {
        cairo_surface_finish(surf);
        st = cairo_surface_status(surf);
    }
    cairo_surface_destroy(surf);
    if (rc) {
        if (fmt != FMT_PNG) al_afile_abort(&s.af);
        return -1;
    }
    if (al_plot_sink_finish(&s, st, "plot", path, err)) return -1;
    p->saved = 1;
    p->out_w = fmt == FMT_PNG ? ceil(L.W * L.k) : L.W;
    p->out_h = fmt == FMT_PNG ? ceil(L.H * L.k) : L.H;
    p->axes_out = (rect){L.ax.x * L.k, L.ax.y * L.k, L.ax.w * L.k, L.ax.h * L.k};
    p->has_legend = L.legend_rows > 0;
    p->legend_out = (rect){L.legend.x * L.k, L.legend.y * L.k, L.legend.w * L.k, L.legend.h * L.k};
    return 0;
}

int al_lineplot_extent(const al_lineplot *p, double *width, double *height) {
    if (!p || !p->saved) return -1;
    *width = p->out_w;
    *height = p->out_h;
    return 0;
}

int al_lineplot_axes_rect(const al_lineplot *p, double *x, double *y, double *w, double *h) {
    if (!p || !p->saved) return -1;
    *x = p->axes_out.x, *y = p->axes_out.y, *w = p->axes_out.w, *h = p->axes_out.h;
    return 0;
}

int al_lineplot_legend_rect(const al_lineplot *p, double *x, double *y, double *w, double *h) {
    if (!p || !p->saved || !p->has_legend) return -1;
    *x = p->legend_out.x, *y = p->legend_out.y, *w = p->legend_out.w, *h = p->legend_out.h;
    return 0;
}
