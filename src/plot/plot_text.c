/*
 * plot_text.c: text and ticks for figures (see plot_internal.h).
 *
 * Data structure: none kept; text is walked segment by segment (plain runs
 * and superscript runs) straight from the caller's string, measuring or
 * drawing each run with cairo's toy text API in DejaVu Sans. Tick helpers
 * fill caller-provided al_tick arrays.
 */
#include "plot_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUP_SCALE 0.70   /* superscript size relative to the text */
#define SUP_RAISE 0.42   /* superscript baseline shift, in text sizes */
#define MINUS_UTF8 "\xe2\x88\x92"

void al_ptext_setup(cairo_t *cr) {
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_hint_style(fo, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);
    cairo_set_font_options(cr, fo);
    cairo_font_options_destroy(fo);
}

/* Selects the figure font at a size and weight. */
static void use_font(cairo_t *cr, double size, int bold) {
    cairo_select_font_face(cr, AL_PLOT_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* Measures (and, if draw, shows at the current point's baseline y) one run
 * of text; returns its advance. */
static double run(cairo_t *cr, const char *s, double size, int bold, int draw, double x, double y) {
    if (!*s) return 0;
    cairo_text_extents_t e;
    use_font(cr, size, bold);
    cairo_text_extents(cr, s, &e);
    if (draw) {
        cairo_move_to(cr, x, y);
        cairo_show_text(cr, s);
    }
    return e.x_advance;
}

/* True for a byte that continues a bare "^" superscript: digits, signs,
 * dots, and the bytes of U+2212. */
static int sup_char(const char *p) {
    if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == '.') return 1;
    return strncmp(p, MINUS_UTF8, 3) == 0;
}

/* A run of text being collected byte by byte; put() draws (or measures) a
 * full buffer at a character boundary and starts over, so text of any
 * length is shown whole. */
typedef struct run_buf {
    char b[512];
    size_t n;
    double size, y; /* font size and baseline of the run */
} run_buf;

/* Replaces each byte of s that is not part of a well-formed UTF-8 character
 * (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF)
 * with '?'. cairo refuses a whole string for one such byte, and a label may
 * carry a directory's name, which Linux lets be any bytes. */
static void utf8_mend(char *s) {
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        const int n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
        unsigned cp = n == 1 ? *p : n == 2 ? *p & 0x1Fu : n == 3 ? *p & 0x0Fu : *p & 0x07u;
        int ok = n > 0;
        for (int k = 1; ok && k < n; k++) { /* a NUL is no continuation byte: never read past it */
            ok = (p[k] & 0xC0) == 0x80;
            cp = cp << 6 | (p[k] & 0x3Fu);
        }
        static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (ok && (cp < least[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) ok = 0;
        if (ok) p += n;
        else *p++ = '?';
    }
}

/* Draws (or measures) what r holds at x and empties it; returns its advance. */
static double flush(cairo_t *cr, run_buf *r, int bold, int draw, double x) {
    r->b[r->n] = 0;
    r->n = 0;
    utf8_mend(r->b);
    return run(cr, r->b, r->size, bold, draw, x, r->y);
}

/* Appends byte c to r; returns the advance of a full run drawn first (0 if none). */
static double put(cairo_t *cr, run_buf *r, char c, int bold, int draw, double x) {
    double w = 0;
    const int starts_char = ((unsigned char)c & 0xC0) != 0x80;
    /* room for a UTF-8 character and the NUL (malformed text: for the NUL) */
    if ((r->n + 4 >= sizeof r->b && starts_char) || r->n + 1 >= sizeof r->b) w = flush(cr, r, bold, draw, x);
    r->b[r->n++] = c;
    return w;
}

/* Appends the n bytes at c to r (put, byte by byte); returns the advance drawn. */
static double put_n(cairo_t *cr, run_buf *r, const char *c, size_t n, int bold, int draw, double x) {
    double w = 0;
    for (size_t k = 0; k < n; k++) w += put(cr, r, c[k], bold, draw, x + w);
    return w;
}

/* Walks s: plain runs at `size`, superscripts smaller and raised. Returns
 * the total advance; draws from baseline (x, y) when draw is set. */
static double walk(cairo_t *cr, const char *s, double size, int bold, int draw, double x, double y) {
    run_buf plain = {.size = size, .y = y}, sup = {.size = size * SUP_SCALE, .y = y - SUP_RAISE * size};
    double w = 0;
    for (const char *p = s;;) {
        if (*p == '^' && (p[1] == '{' || sup_char(p + 1))) {
            w += flush(cr, &plain, bold, draw, x + w);
            if (p[1] == '{') {
                for (p += 2; *p && *p != '}'; p++)
                    w += *p == '-' ? put_n(cr, &sup, MINUS_UTF8, 3, bold, draw, x + w)
                                   : put(cr, &sup, *p, bold, draw, x + w);
                if (*p == '}') p++;
            } else {
                for (p++; *p && sup_char(p);) { /* '-' becomes U+2212; a U+2212 given is kept whole */
                    const int minus = *p == '-';
                    const size_t k = !minus && strncmp(p, MINUS_UTF8, 3) == 0 ? 3 : 1;
                    w += put_n(cr, &sup, minus ? MINUS_UTF8 : p, minus ? 3 : k, bold, draw, x + w);
                    p += k;
                }
            }
            w += flush(cr, &sup, bold, draw, x + w);
            continue;
        }
        if (!*p) break;
        w += put(cr, &plain, *p, bold, draw, x + w);
        p++;
    }
    w += flush(cr, &plain, bold, draw, x + w);
    return w;
}

double al_ptext_width(cairo_t *cr, const char *s, double size, int bold) {
    if (!s || !*s) return 0;
    return walk(cr, s, size, bold, 0, 0, 0);
}

void al_ptext_draw(cairo_t *cr, const char *s, double x, double y, double size, int bold, double halign,
                   int valign, int rotate) {
    if (!s || !*s) return;
    double w = al_ptext_width(cr, s, size, bold);
    double by = 0;
    switch (valign) {
    case AL_VA_MIDDLE: by = 0.5 * 0.73 * size; break;
    case AL_VA_TOP: by = AL_TEXT_ASCENT * size; break;
    case AL_VA_BOTTOM: by = -AL_TEXT_DESCENT * size; break;
    default: by = 0;
    }
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (rotate) cairo_rotate(cr, -M_PI / 2);
    walk(cr, s, size, bold, 1, -halign * w, by);
    cairo_restore(cr);
}

void al_pformat_number(char *buf, size_t len, double v, int decimals) {
    char tmp[64];
    al_strfmt(tmp, sizeof tmp, "%.*f", decimals, v); /* a label: a huge value is cut, marked */
    const char *p = tmp;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
        for (const char *q = p; *q; q++)  /* "-0.00": no sign */
            if (*q >= '1' && *q <= '9') goto keep;
        neg = 0;
    }
keep:
    al_strfmt(buf, len, "%s%s", neg ? MINUS_UTF8 : "", p);
}

/* Decimals needed to print multiples of step exactly (0.25 -> 2, 5 -> 0). */
static int step_decimals(double step) {
    for (int d = 0; d <= 10; d++) {
        double x = step * pow(10.0, d);
        if (fabs(x - nearbyint(x)) < 1e-6 * (x > 1 ? x : 1)) return d;
    }
    return 10;
}

/* The most ticks a bar of `length` points can carry with labels of `font`
 * points stacked along it (and never more than `cap`). */
static int max_ticks(double length, double font, double spacing, int cap) {
    int n = (int)floor(length / (font * spacing)) + 1;
    if (n > cap) n = cap;
    return n < 2 ? 2 : n;
}

/* Linear-bar ticks at multiples of s within [vmin, vmax]; returns the count. */
static int linear_ticks(const al_norm *nm, double s, al_tick *out) {
    double lo = nm->vmin, hi = nm->vmax, range = hi - lo;
    long i0 = (long)ceil(lo / s - 1e-9), i1 = (long)floor(hi / s + 1e-9);
    int dec = step_decimals(s), n = 0;
    for (long i = i0; i <= i1 && n < AL_MAX_TICKS; i++) {
        double v = (double)i * s;
        double t = (v - lo) / range;
        if (t < 0) t = 0;
        if (t > 1) t = 1;
        out[n].t = t;
        al_pformat_number(out[n].label, sizeof out[n].label, v, dec);
        n++;
    }
    return n;
}

/* Short label for an arbitrary value (the ends of a narrow log bar). */
static void format_general(char *buf, size_t len, double v) {
    char tmp[48];
    snprintf(tmp, sizeof tmp, "%.2g", v);
    char *e = strchr(tmp, 'e');
    if (e) {  /* 3e-07 -> 3x10^{-7} */
        int ex = atoi(e + 1);
        *e = 0;
        al_strfmt(buf, len, "%s\xc3\x97" "10^{%d}", tmp, ex);
    } else {
        al_pformat_number(buf, len, v, step_decimals(v < 0 ? -v : v));
    }
}

int al_pticks_colorbar(const al_norm *nm, double step, double length, double font, al_tick *out) {
    if (nm->kind == AL_NORM_LOG) {
        double l0 = log10(nm->vmin), l1 = log10(nm->vmax);
        int d0 = (int)ceil(l0 - 1e-9), d1 = (int)floor(l1 + 1e-9);
        int count = d1 - d0 + 1;
        if (count < 2) {  /* inside one decade: label the ends */
            out[0].t = 0;
            format_general(out[0].label, sizeof out[0].label, nm->vmin);
            out[1].t = 1;
            format_general(out[1].label, sizeof out[1].label, nm->vmax);
            return 2;
        }
        int maxn = max_ticks(length, font, 1.7, AL_MAX_TICKS), stride = 1;
        while ((count + stride - 1) / stride > maxn) stride++;
        int n = 0;
        for (int d = d0; d <= d1 && n < AL_MAX_TICKS; d += stride) {
            out[n].t = (d - l0) / (l1 - l0);
            snprintf(out[n].label, sizeof out[n].label, "10^{%d}", d);
            n++;
        }
        return n;
    }
    double range = nm->vmax - nm->vmin;
    int maxn = max_ticks(length, font, 1.6, 9);
    double s = step;
    if (s > 0) {
        while (length * s / range < font * 1.15) s *= 2;  /* requested step too dense to read */
    } else {
        static const double mult[] = {1, 2, 2.5, 5};
        int k = (int)floor(log10(range / maxn)) - 1;
        for (s = 0; s == 0; k++)
            for (int j = 0; j < 4; j++) {
                double c = mult[j] * pow(10.0, k);
                long cnt = (long)floor(nm->vmax / c + 1e-9) - (long)ceil(nm->vmin / c - 1e-9) + 1;
                if (cnt <= maxn && cnt >= 2) {
                    s = c;
                    break;
                }
            }
    }
    return linear_ticks(nm, s, out);
}

int al_pticks_index_step(cairo_t *cr, int n, double length, double font, int across) {
    if (n <= 1) return 1;
    char widest[24];
    snprintf(widest, sizeof widest, "%d", n - 1);
    double need = across ? al_ptext_width(cr, widest, font, 0) + 0.6 * font : 1.5 * font;
    double cell = length / n;
    static const int tenths[] = {10, 20, 25, 50};  /* 1, 2, 2.5, 5 x 10^k, integers only */
    for (long p = 1; p <= 100000000L; p *= 10)
        for (int j = 0; j < 4; j++) {
            if ((tenths[j] * p) % 10) continue;
            long s = tenths[j] * p / 10;
            long count = (n - 1) / s + 1;
            if (s * cell >= need && count <= 10) return (int)(s < n ? s : n);
        }
    return n;
}

int al_pticks_index_fill(int n, int step, al_tick *out) {
    int k = 0;
    for (int i = 0; i < n && k < AL_MAX_TICKS; i += step) {
        out[k].t = (i + 0.5) / n;
        snprintf(out[k].label, sizeof out[k].label, "%d", i);
        k++;
    }
    return k;
}

char *al_pdup_or_null(const char *s, int *oom) {
    if (!s || !*s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}
