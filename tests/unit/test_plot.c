/*
 * test_plot.c: colour maps (exact matplotlib bytes), norms, and figures:
 * PNG/SVG/PDF output, pixel checks on known cells, text presence, block
 * reduction of large matrices, overlays, errors and atomic writes. It also
 * renders the three seed figures (head similarity, per-layer attention maps
 * on a log scale, polynomial vs softmax attention) and a vision overlay into
 * its temporary directory; set AL_PLOT_EXAMPLES=<dir> to keep copies there
 * for looking at them.
 *
 * Expected colour bytes: matplotlib itself is not available here, so they
 * were computed by restating matplotlib's own construction in plain Python
 * (double arithmetic, no numpy): colors._create_lookup_table(256, data) on
 * the segment data of _cm.py (_RdYlBu_data via LinearSegmentedColormap.
 * from_list, i.e. anchors at numpy.linspace(0, 1, 11); _coolwarm_data at
 * i/32; the _r maps from LinearSegmentedColormap.reversed(), which mirrors
 * the segments), _viridis_data of _cm_listed.py taken as is, then bytes as
 * Colormap.__call__(x, bytes=True) makes them: index int(x * 256) (x = 1 ->
 * 255), (lut * 255).astype(uint8), a truncation. The viridis table was also
 * cross-checked entry by entry against an independently published list of
 * its 256 rounded hex colours (#440154 ... #fde725).
 */
#include <cairo.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io.h"
#include "plot/colormap.h"
#include "plot/figure.h"
#include "test.h"

static char tmpdir[512];

typedef struct known {
    int index;          /* table index; looked up at t = (index + 0.5) / 256 */
    uint8_t rgb[3];
} known;

/* Checks table bytes at known indices, both straight from lut8 and through
 * al_cmap_rgb at the middle of each index's interval. */
static void check_map(const char *name, const known *k, int n) {
    const al_cmap *c = al_cmap_get(name);
    CHECK_MSG(c != NULL, "colour map %s missing", name);
    if (!c) return;
    CHECK(c->n == 256);
    for (int i = 0; i < n; i++) {
        const uint8_t *b = c->lut8[k[i].index];
        CHECK_MSG(b[0] == k[i].rgb[0] && b[1] == k[i].rgb[1] && b[2] == k[i].rgb[2],
                  "%s[%d] = (%d, %d, %d), expected (%d, %d, %d)", name, k[i].index, b[0], b[1], b[2], k[i].rgb[0],
                  k[i].rgb[1], k[i].rgb[2]);
        uint8_t rgb[3];
        CHECK(al_cmap_rgb(c, (k[i].index + 0.5) / 256.0, rgb) == 0);
        CHECK(memcmp(rgb, b, 3) == 0);
    }
}

/* FNV-1a over all 768 bytes of a table: pins every entry, not just samples. */
static uint32_t table_hash(const al_cmap *c) {
    uint32_t h = 0x811c9dc5u;
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 3; k++) {
            h ^= c->lut8[i][k];
            h *= 0x01000193u;
        }
    return h;
}

static void test_colormaps(void) {
    /* Byte values from the Python restatement described at the top. Index 0
     * and 255 are the anchors themselves: viridis (0.267004, 0.004874,
     * 0.329415) * 255 = (68.09, 1.24, 84.00) -> (68, 1, 84); (0.993248,
     * 0.906157, 0.143936) -> (253, 231, 36); RdYlBu's ends are ColorBrewer's
     * 165,0,38 and 49,54,149; coolwarm's (0.2298057, 0.298717966,
     * 0.753683153) -> (58, 76, 192) and (0.705673158, 0.01555616,
     * 0.150232812) -> (179, 3, 38), one below the rounded hex #b40426 because
     * matplotlib truncates. Index 128 is where x = 0.5 lands. */
    static const known viridis[] = {{0, {68, 1, 84}},      {1, {68, 2, 85}},      {51, {64, 67, 135}},
                                    {64, {58, 82, 139}},   {127, {32, 143, 140}}, {128, {32, 144, 140}},
                                    {192, {94, 201, 97}},  {254, {250, 230, 34}}, {255, {253, 231, 36}}};
    /* RdYlBu index 51 is anchor 2 (x = 0.2 * 255 = 51.00000000000001 in
     * double): 244, 109, 67 exactly. */
    static const known rdylbu[] = {{0, {165, 0, 38}},      {1, {166, 1, 38}},     {51, {244, 109, 67}},
                                   {64, {248, 142, 82}},   {127, {254, 254, 190}}, {128, {254, 254, 192}},
                                   {192, {141, 193, 220}}, {254, {49, 56, 150}},   {255, {49, 54, 149}}};
    /* RdYlBu_r index 187 is (250, 152, 87): reading RdYlBu backwards would
     * give blue 86 (86.99999999999999 truncated), so this pins the reversal
     * to matplotlib's mirrored segments. */
    static const known rdylbu_r[] = {{0, {49, 54, 149}},     {1, {49, 56, 150}},     {51, {116, 173, 209}},
                                     {64, {144, 195, 221}},  {127, {254, 254, 192}}, {128, {254, 254, 190}},
                                     {187, {250, 152, 87}},  {192, {248, 139, 81}},  {254, {166, 1, 38}},
                                     {255, {165, 0, 38}}};
    static const known coolwarm[] = {{0, {58, 76, 192}},     {1, {59, 77, 193}},     {51, {123, 158, 248}},
                                     {64, {141, 175, 253}},  {127, {220, 220, 221}}, {128, {221, 220, 219}},
                                     {192, {243, 152, 121}}, {254, {181, 8, 39}},    {255, {179, 3, 38}}};
    check_map("viridis", viridis, (int)(sizeof viridis / sizeof *viridis));
    check_map("RdYlBu", rdylbu, (int)(sizeof rdylbu / sizeof *rdylbu));
    check_map("RdYlBu_r", rdylbu_r, (int)(sizeof rdylbu_r / sizeof *rdylbu_r));
    check_map("coolwarm", coolwarm, (int)(sizeof coolwarm / sizeof *coolwarm));

    /* Whole tables, hashed the same way in the Python restatement. */
    CHECK_MSG(table_hash(al_cmap_get("viridis")) == 0xd8e85622u, "viridis hash %08x", table_hash(al_cmap_get("viridis")));
    CHECK_MSG(table_hash(al_cmap_get("RdYlBu")) == 0x34df9120u, "RdYlBu hash %08x", table_hash(al_cmap_get("RdYlBu")));
    CHECK_MSG(table_hash(al_cmap_get("RdYlBu_r")) == 0xf7112cb1u, "RdYlBu_r hash %08x", table_hash(al_cmap_get("RdYlBu_r")));
    CHECK_MSG(table_hash(al_cmap_get("coolwarm")) == 0xe19776feu, "coolwarm hash %08x", table_hash(al_cmap_get("coolwarm")));

    /* The float table of a listed map is its data, unchanged. */
    const al_cmap *v = al_cmap_get("viridis");
    CHECK(v->lut[0][0] == 0.267004 && v->lut[0][1] == 0.004874 && v->lut[0][2] == 0.329415);
    CHECK(v->lut[255][0] == 0.993248 && v->lut[255][1] == 0.906157 && v->lut[255][2] == 0.143936);
    const al_cmap *vr = al_cmap_get("viridis_r");
    CHECK(vr && memcmp(vr->lut8[0], v->lut8[255], 3) == 0 && memcmp(vr->lut8[255], v->lut8[0], 3) == 0);

    /* Lookup rules of Colormap.__call__: int(x * N), 1.0 -> last, under and
     * over -> the ends, NaN -> bad (not written). */
    uint8_t rgb[3] = {1, 2, 3};
    CHECK(al_cmap_rgb(v, 0.0, rgb) == 0 && rgb[0] == 68 && rgb[1] == 1 && rgb[2] == 84);
    CHECK(al_cmap_rgb(v, 1.0, rgb) == 0 && rgb[0] == 253 && rgb[1] == 231 && rgb[2] == 36);
    CHECK(al_cmap_rgb(v, 0.5, rgb) == 0 && rgb[0] == 32 && rgb[1] == 144 && rgb[2] == 140);
    CHECK(al_cmap_rgb(v, 127.999 / 256, rgb) == 0 && rgb[1] == 143);  /* still index 127 */
    CHECK(al_cmap_rgb(v, -3.0, rgb) == 0 && rgb[0] == 68 && rgb[2] == 84);
    CHECK(al_cmap_rgb(v, 7.0, rgb) == 0 && rgb[0] == 253 && rgb[2] == 36);
    memset(rgb, 7, 3);
    CHECK(al_cmap_rgb(v, NAN, rgb) == 1 && rgb[0] == 7);
    CHECK(al_cmap_get("jet") == NULL && al_cmap_get(NULL) == NULL);
    CHECK(strstr(al_cmap_names(), "RdYlBu_r") != NULL);
}

static void test_norms(void) {
    al_err err = {{0}};
    al_norm n = al_norm_linear(-1, 1);
    CHECK(al_norm_check(&n, &err) == 0);
    CHECK_CLOSE(al_norm_apply(&n, 0), 0.5, 1e-15);
    CHECK_CLOSE(al_norm_apply(&n, -1), 0.0, 1e-15);
    CHECK_CLOSE(al_norm_apply(&n, 1), 1.0, 1e-15);
    CHECK_CLOSE(al_norm_apply(&n, 2), 1.5, 1e-15);
    CHECK(isnan(al_norm_apply(&n, NAN)));

    al_norm lg = al_norm_log(1e-6, 1);
    CHECK(al_norm_check(&lg, &err) == 0);
    CHECK_CLOSE(al_norm_apply(&lg, 1e-3), 0.5, 1e-12);
    CHECK_CLOSE(al_norm_apply(&lg, 1e-6), 0.0, 1e-12);
    CHECK(isnan(al_norm_apply(&lg, 0.0)));
    CHECK(isnan(al_norm_apply(&lg, -2.0)));
    const al_cmap *v = al_cmap_get("viridis");
    const uint8_t white[3] = {255, 255, 255};
    uint8_t rgb[3];
    CHECK(al_norm_rgb(v, &lg, 0.0, white, rgb) == 1 && rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255);
    CHECK(al_norm_rgb(v, &lg, -1.0, white, rgb) == 1 && rgb[0] == 255);
    CHECK(al_norm_rgb(v, &lg, 1.0, white, rgb) == 0 && rgb[0] == 253 && rgb[1] == 231 && rgb[2] == 36);
    CHECK(al_norm_rgb(v, &lg, 1e-9, white, rgb) == 0 && rgb[0] == 68);  /* under, not bad */

    al_norm badlog = al_norm_log(0, 1);
    err.msg[0] = 0;
    CHECK(al_norm_check(&badlog, &err) == -1 && strstr(err.msg, "positive") && !strchr(err.msg, '\n'));
    al_norm inverted = al_norm_linear(1, -1);
    CHECK(al_norm_check(&inverted, &err) == -1);

    const float data[] = {0.0f, 1e-4f, 0.5f, -3.0f, NAN};
    al_norm a = al_norm_log(NAN, NAN);
    CHECK(al_norm_autoscale(&a, data, 5, &err) == 0);
    CHECK_CLOSE(a.vmin, 1e-4, 1e-6);
    CHECK_CLOSE(a.vmax, 0.5, 1e-7);
    al_norm z = {0};  /* zero-initialised: linear, limits from the data */
    CHECK(al_norm_autoscale(&z, data, 5, &err) == 0 && z.kind == AL_NORM_LINEAR && z.vmin == -3.0 && z.vmax == 0.5f);
    al_norm s = al_norm_symmetric(0);
    CHECK(al_norm_autoscale(&s, data, 5, &err) == 0 && s.vmax == 3.0 && s.vmin == -3.0);
    CHECK_CLOSE(al_norm_apply(&s, 0), 0.5, 1e-15);
    al_norm fixed = al_norm_symmetric(2);
    CHECK(al_norm_autoscale(&fixed, data, 5, &err) == 0 && fixed.vmin == -2 && fixed.vmax == 2);
    const float flat[] = {0.25f, 0.25f};
    al_norm f2 = {0};
    CHECK(al_norm_autoscale(&f2, flat, 2, &err) == 0 && f2.vmin < 0.25 && f2.vmax > 0.25);
}

/* ---- PNG reading helpers ---- */

typedef struct png {
    cairo_surface_t *s;
    int w, h, stride;
    unsigned char *d;
} png;

static int png_open(png *p, const char *path) {
    p->s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(p->s);
        p->s = NULL;
        return -1;
    }
    cairo_surface_flush(p->s);
    p->w = cairo_image_surface_get_width(p->s);
    p->h = cairo_image_surface_get_height(p->s);
    p->stride = cairo_image_surface_get_stride(p->s);
    p->d = cairo_image_surface_get_data(p->s);
    return 0;
}

static void png_close(png *p) {
    if (p->s) cairo_surface_destroy(p->s);
    p->s = NULL;
}

static void px(const png *p, int x, int y, uint8_t rgb[3]) {
    uint32_t v = *(const uint32_t *)(p->d + (size_t)y * p->stride + 4 * (size_t)x);
    rgb[0] = (uint8_t)(v >> 16);
    rgb[1] = (uint8_t)(v >> 8);
    rgb[2] = (uint8_t)v;
}

/* Luminance variance over the whole image: 0 for a blank page. */
static double png_variance(const png *p) {
    double s = 0, s2 = 0, n = (double)p->w * p->h;
    for (int y = 0; y < p->h; y++)
        for (int x = 0; x < p->w; x++) {
            uint8_t c[3];
            px(p, x, y, c);
            double l = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2];
            s += l;
            s2 += l * l;
        }
    return s2 / n - (s / n) * (s / n);
}

/* Dark pixels (all channels < 100) inside a rectangle: text is there. */
static int dark_pixels(const png *p, int x0, int y0, int x1, int y1) {
    int n = 0;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > p->w) x1 = p->w;
    if (y1 > p->h) y1 = p->h;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            uint8_t c[3];
            px(p, x, y, c);
            if (c[0] < 100 && c[1] < 100 && c[2] < 100) n++;
        }
    return n;
}

/* Colour at the centre of data cell (r, c) of panel `index` of the last
 * saved figure, read from the PNG. */
static void cell_px(const al_figure *f, const png *p, int index, int rows, int cols, int r, int c, uint8_t rgb[3]) {
    double x, y, w, h;
    if (al_figure_heat_rect(f, index, &x, &y, &w, &h) != 0) {
        memset(rgb, 0, 3);
        return;
    }
    int X = (int)(x + (c + 0.5) * w / cols), Y = (int)(y + (r + 0.5) * h / rows);
    px(p, X, Y, rgb);
}

/* True if the NUL-free string s occurs in the first len bytes of data. */
static int has_bytes(const char *data, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(data + i, s, n) == 0) return 1;
    return 0;
}

static int same(const uint8_t *a, const uint8_t *b) { return a[0] == b[0] && a[1] == b[1] && a[2] == b[2]; }

static char *path_in(const char *name) {
    static char buf[8][768];
    static int k = 0;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", tmpdir, name);
    return b;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Copies a rendered example to $AL_PLOT_EXAMPLES when set. */
static void keep_example(const char *path, const char *name) {
    const char *dir = getenv("AL_PLOT_EXAMPLES");
    if (!dir || !*dir) return;
    char *data;
    size_t len;
    al_err err;
    char out[768];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    if (al_read_file(path, &data, &len, &err) == 0) {
        al_write_file_atomic(out, data, len, &err);
        free(data);
    }
}

/* No "*.tmp.*" file may be left in the test directory. */
static int stray_temp_files(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

/* ---- figures ---- */

static void test_three_panels(void) {
    al_err err = {{0}};
    enum { N = 8 };
    float a[N * N], b[N * N], c[N * N];
    for (int r = 0; r < N; r++)
        for (int k = 0; k < N; k++) {
            a[r * N + k] = k < N / 2 ? -1.0f : 1.0f;            /* left blue, right red under RdYlBu_r */
            b[r * N + k] = (float)pow(10.0, -(double)r);       /* decades down the rows */
            c[r * N + k] = (float)(k - 3.5) / 3.5f;            /* ramp */
        }
    b[0 * N + 7] = 0.0f;  /* log: bad -> background */
    c[2 * N + 2] = NAN;   /* bad -> background */
    al_heat_style st = {.cmap = "RdYlBu_r", .norm = al_norm_linear(-1, 1), .xlabel = "Head Index",
                        .ylabel = "Head Index", .cbar_step = 0.25};
    al_figure *f = al_figure_new(1, 3, &st, &err);
    CHECK(f != NULL);
    if (!f) return;
    CHECK(al_figure_set_title(f, "Known Title", &err) == 0);
    CHECK(al_figure_panel(f, 0, "Diverging", a, N, N, &err) == 0);
    CHECK(al_figure_panel(f, 1, "Log scale", b, N, N, &err) == 0);
    CHECK(al_figure_panel(f, 2, "Coolwarm", c, N, N, &err) == 0);
    al_heat_style lg = {.cmap = "viridis", .norm = al_norm_log(1e-6, 1), .xlabel = "Key position",
                        .ylabel = "Query position"};
    CHECK(al_figure_panel_style(f, 1, &lg, &err) == 0);
    al_heat_style cw = {.cmap = "coolwarm", .norm = al_norm_symmetric(1)};
    CHECK(al_figure_panel_style(f, 2, &cw, &err) == 0);
    CHECK(al_figure_panel_subtitle(f, 0, "effective rank 7.9", &err) == 0);

    const char *pngp = path_in("three.png"), *svgp = path_in("three.svg"), *pdfp = path_in("three.pdf");
    CHECK_MSG(al_figure_save(f, pngp, &err) == 0, "%s", err.msg);
    double W = 0, H = 0;
    CHECK(al_figure_extent(f, &W, &H) == 0);
    png p = {0};
    CHECK(png_open(&p, pngp) == 0);
    if (p.s) {
        CHECK_MSG(p.w == (int)W && p.h == (int)H, "png %dx%d, figure says %gx%g", p.w, p.h, W, H);
        CHECK(p.w > 1000 && p.w < 3000 && p.h > 300 && p.h < 900);  /* 3 panels of ~3.3 in at 150 dpi */
        CHECK(png_variance(&p) > 100);
        uint8_t rgb[3];
        const al_cmap *rb = al_cmap_get("RdYlBu_r"), *vi = al_cmap_get("viridis"), *co = al_cmap_get("coolwarm");
        cell_px(f, &p, 0, N, N, 3, 1, rgb);
        CHECK_MSG(same(rgb, rb->lut8[0]), "panel 0 (3,1) = %d,%d,%d", rgb[0], rgb[1], rgb[2]);
        cell_px(f, &p, 0, N, N, 3, 6, rgb);
        CHECK_MSG(same(rgb, rb->lut8[255]), "panel 0 (3,6) = %d,%d,%d", rgb[0], rgb[1], rgb[2]);
        /* log: row r holds 10^-r; t = (6 - r) / 6 -> index int(t * 256) */
        for (int r = 0; r <= 6; r++) {
            double t = (6.0 - r) / 6.0;
            int idx = t >= 1 ? 255 : (int)(t * 256);
            cell_px(f, &p, 1, N, N, r, 2, rgb);
            CHECK_MSG(same(rgb, vi->lut8[idx]), "log row %d: %d,%d,%d vs index %d", r, rgb[0], rgb[1], rgb[2], idx);
        }
        cell_px(f, &p, 1, N, N, 0, 7, rgb);
        CHECK_MSG(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255, "zero under log norm: %d,%d,%d", rgb[0], rgb[1], rgb[2]);
        cell_px(f, &p, 1, N, N, 7, 4, rgb);  /* 1e-7 < vmin: under -> first colour */
        CHECK(same(rgb, vi->lut8[0]));
        cell_px(f, &p, 2, N, N, 2, 2, rgb);
        CHECK(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255);
        cell_px(f, &p, 2, N, N, 5, 0, rgb);  /* -1 */
        CHECK(same(rgb, co->lut8[0]));
        cell_px(f, &p, 2, N, N, 5, 7, rgb);  /* +1 */
        CHECK(same(rgb, co->lut8[255]));
        /* titles are real text: dark pixels over the heatmaps and at the top */
        double x, y, w, h;
        CHECK(al_figure_heat_rect(f, 0, &x, &y, &w, &h) == 0);
        CHECK(dark_pixels(&p, (int)x, (int)(y - 30), (int)(x + w), (int)(y - 2)) > 20);
        CHECK(dark_pixels(&p, (int)(p.w * 0.4), 0, (int)(p.w * 0.6), (int)(y - 40)) > 20);
        /* y tick labels left of the heatmap, x tick labels under it */
        CHECK(dark_pixels(&p, (int)(x - 30), (int)y, (int)x - 3, (int)(y + h)) > 20);
        CHECK(dark_pixels(&p, (int)x, (int)(y + h + 3), (int)(x + w), (int)(y + h + 30)) > 20);
        /* colour bar right of panel 0, as tall as the heatmap: device row r
         * from its top shows t = 1 - (r + 0.5) / h */
        for (int r = 2; r < (int)h - 2; r += 37) {
            double t = 1.0 - (r + 0.5) / h;
            px(&p, (int)(x + w + 20), (int)y + r, rgb);
            CHECK_MSG(same(rgb, rb->lut8[(int)(t * 256)]), "colour bar row %d: %d,%d,%d", r, rgb[0], rgb[1], rgb[2]);
        }
        png_close(&p);
    }
    keep_example(pngp, "three_panels.png");

    CHECK_MSG(al_figure_save(f, svgp, &err) == 0, "%s", err.msg);
    CHECK_MSG(al_figure_save(f, pdfp, &err) == 0, "%s", err.msg);
    char *data;
    size_t len;
    if (al_read_file(svgp, &data, &len, &err) == 0) {
        CHECK(len > 1000 && strstr(data, "<svg") != NULL && strstr(data, "<image") != NULL);
        CHECK(strstr(data, "glyph") != NULL);  /* text is drawn as glyph outlines */
        free(data);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    if (al_read_file(pdfp, &data, &len, &err) == 0) {
        CHECK(len > 1000 && memcmp(data, "%PDF-", 5) == 0);
        CHECK(has_bytes(data, len, "Known Title"));  /* document title metadata */
        CHECK(has_bytes(data, len, "/Interpolate false"));  /* crisp cells */
        free(data);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    CHECK(al_figure_save(f, path_in("UPPER.PNG"), &err) == 0);
    CHECK(stray_temp_files() == 0);
    al_figure_free(f);
}

static void test_errors(void) {
    al_err err = {{0}};
    float m[4] = {0, 1, 2, 3};
    al_figure *f = al_figure_new(1, 1, NULL, &err);
    CHECK(f != NULL);
    if (!f) return;
    CHECK(al_figure_save(f, path_in("empty.png"), &err) == -1 && strstr(err.msg, "no panel"));
    CHECK(al_figure_panel(f, 1, "x", m, 2, 2, &err) == -1 && !strchr(err.msg, '\n'));
    CHECK(al_figure_panel(f, 0, "x", m, 0, 2, &err) == -1);
    CHECK(al_figure_panel(f, 0, "x", m, 2, 2, &err) == 0);

    err.msg[0] = 0;
    CHECK(al_figure_save(f, "/nonexistent-dir-al/x.png", &err) == -1);
    CHECK_MSG(strstr(err.msg, "/nonexistent-dir-al/x.png") && !strchr(err.msg, '\n'), "%s", err.msg);
    err.msg[0] = 0;
    CHECK(al_figure_save(f, "/nonexistent-dir-al/x.pdf", &err) == -1 && err.msg[0] && !strchr(err.msg, '\n'));
    /* parent is a regular file */
    const char *plain = path_in("plain.txt");
    CHECK(al_write_file_atomic(plain, "x", 1, &err) == 0);
    char under[800];
    snprintf(under, sizeof under, "%s/fig.svg", plain);
    err.msg[0] = 0;
    CHECK(al_figure_save(f, under, &err) == -1 && err.msg[0] && !strchr(err.msg, '\n'));

    err.msg[0] = 0;
    CHECK(al_figure_save(f, path_in("fig.jpg"), &err) == -1);
    CHECK_MSG(strstr(err.msg, ".png") && !strchr(err.msg, '\n'), "%s", err.msg);
    CHECK(al_figure_save(f, path_in("noextension"), &err) == -1);
    CHECK(file_size(path_in("fig.jpg")) < 0 && file_size(path_in("noextension")) < 0);

    al_heat_style bad = {.cmap = "jet"};
    CHECK(al_figure_panel_style(f, 0, &bad, &err) == 0);
    CHECK(al_figure_save(f, path_in("jet.png"), &err) == -1 && strstr(err.msg, "jet") && !strchr(err.msg, '\n'));
    al_heat_style badnorm = {.norm = al_norm_log(-1, 1)};
    CHECK(al_figure_panel_style(f, 0, &badnorm, &err) == 0);
    CHECK(al_figure_save(f, path_in("lognorm.png"), &err) == -1 && strstr(err.msg, "positive"));
    al_heat_style badalpha = {.overlay_alpha = 2};
    CHECK(al_figure_panel_style(f, 0, &badalpha, &err) == -1);
    CHECK(file_size(path_in("jet.png")) < 0 && file_size(path_in("lognorm.png")) < 0);
    CHECK(al_figure_set_size(f, 0.1, 150, &err) == -1 && al_figure_set_size(f, 2, 5000, &err) == -1);
    CHECK(al_figure_new(0, 3, NULL, &err) == NULL && err.msg[0]);

    /* an existing file is replaced whole, never left half-written */
    const char *keep = path_in("keep.png");
    al_heat_style ok = {0};
    CHECK(al_figure_panel_style(f, 0, &ok, &err) == 0);
    CHECK(al_figure_save(f, keep, &err) == 0);
    long size1 = file_size(keep);
    CHECK(size1 > 100);
    CHECK(al_figure_panel_style(f, 0, &bad, &err) == 0);
    CHECK(al_figure_save(f, keep, &err) == -1);
    CHECK(file_size(keep) == size1);
    CHECK(stray_temp_files() == 0);

    /* without a colour bar the figure is narrower */
    double w1, h1, w2, h2;
    CHECK(al_figure_panel_style(f, 0, &ok, &err) == 0);
    CHECK(al_figure_save(f, keep, &err) == 0 && al_figure_extent(f, &w1, &h1) == 0);
    al_figure_set_cbar(f, AL_CBAR_NONE);
    CHECK(al_figure_save(f, keep, &err) == 0 && al_figure_extent(f, &w2, &h2) == 0);
    CHECK(w2 < w1 && h2 == h1);
    al_figure_free(f);
}

/* A 4096 x 4096 matrix with one spike: block maximum keeps it visible at
 * its place; block mean would dilute it below the colour bar's top. */
static void test_pooling(void) {
    al_err err = {{0}};
    enum { T = 4096 };
    float *m = calloc((size_t)T * T, sizeof *m);
    CHECK(m != NULL);
    if (!m) return;
    const int sr = 1000, sc = 3000;
    m[(size_t)sr * T + sc] = 1.0f;
    al_heat_style st = {.cmap = "viridis", .norm = al_norm_log(1e-6, 1)};
    al_figure *f = al_figure_new(1, 2, &st, &err);
    CHECK(al_figure_panel(f, 0, "max", m, T, T, &err) == 0);
    CHECK(al_figure_panel(f, 1, "mean", m, T, T, &err) == 0);
    al_heat_style mean = st;
    mean.pool = AL_POOL_MEAN;
    CHECK(al_figure_panel_style(f, 1, &mean, &err) == 0);
    free(m);
    const char *pp = path_in("pool.png");
    CHECK_MSG(al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    CHECK_MSG(strstr(al_figure_pool_note(f), "4096") && strstr(al_figure_pool_note(f), "maximum or mean"), "%s",
              al_figure_pool_note(f));
    double x, y, w, h;
    png p = {0};
    if (al_figure_heat_rect(f, 0, &x, &y, &w, &h) == 0 && png_open(&p, pp) == 0) {
        CHECK(w == 300 && h == 300);  /* 2.0 in at 150 dpi: one pixel per block */
        int bi = -1, bj = -1;         /* the block holding the spike */
        for (int i = 0; i < (int)h; i++)
            if ((int64_t)i * T / (int)h <= sr && (int64_t)(i + 1) * T / (int)h > sr) bi = i;
        for (int j = 0; j < (int)w; j++)
            if ((int64_t)j * T / (int)w <= sc && (int64_t)(j + 1) * T / (int)w > sc) bj = j;
        uint8_t rgb[3];
        px(&p, (int)x + bj, (int)y + bi, rgb);
        const al_cmap *v = al_cmap_get("viridis");
        CHECK_MSG(same(rgb, v->lut8[255]), "spike pixel %d,%d,%d", rgb[0], rgb[1], rgb[2]);
        px(&p, (int)x + bj + 3, (int)y + bi, rgb);  /* zeros around it: background */
        CHECK(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255);
        double x2, y2, w2, h2;
        CHECK(al_figure_heat_rect(f, 1, &x2, &y2, &w2, &h2) == 0);
        px(&p, (int)x2 + bj, (int)y2 + bi, rgb);
        CHECK(!same(rgb, v->lut8[255]) && !(rgb[0] == 255 && rgb[1] == 255));
        /* footnote states the reduction: dark-grey text in the bottom rows */
        CHECK(dark_pixels(&p, 0, p.h - 25, p.w / 2, p.h) > 10);
        png_close(&p);
    } else {
        CHECK(0);
    }
    /* the caller's footnote replaces the automatic one: "" none (the figure
     * loses the footnote's line), a text of its own in its place, NULL the
     * automatic one again */
    double w0, h0, w1, h1;
    CHECK(al_figure_extent(f, &w0, &h0) == 0);
    CHECK(al_figure_set_footnote(f, "", &err) == 0 && al_figure_save(f, pp, &err) == 0);
    CHECK(al_figure_extent(f, &w1, &h1) == 0 && h1 < h0);
    CHECK(al_figure_set_footnote(f, "a note of the caller's", &err) == 0 && al_figure_save(f, pp, &err) == 0);
    CHECK(al_figure_extent(f, &w1, &h1) == 0 && h1 == h0);
    if (png_open(&p, pp) == 0) {
        CHECK(dark_pixels(&p, 0, p.h - 25, p.w / 2, p.h) > 10);
        png_close(&p);
    } else {
        CHECK(0);
    }
    CHECK(al_figure_set_footnote(f, NULL, &err) == 0 && al_figure_save(f, pp, &err) == 0);
    CHECK(al_figure_extent(f, &w1, &h1) == 0 && h1 == h0 && w1 == w0);
    CHECK(al_figure_set_footnote(NULL, "x", &err) == -1);
    al_figure_free(f);
}

/* Overlay: a 28 x 28 greyscale image under a 14 x 14 heatmap at alpha 0.5. */
static void test_overlay(void) {
    al_err err = {{0}};
    float img[28 * 28], att[14 * 14];
    for (int i = 0; i < 28; i++)
        for (int j = 0; j < 28; j++) img[i * 28 + j] = j < 14 ? 0.0f : 1.0f;  /* black left, white right */
    for (int i = 0; i < 14 * 14; i++) att[i] = 1.0f;                          /* top colour everywhere */
    att[0] = NAN;                                                             /* bad: image only */
    al_heat_style st = {.cmap = "viridis", .norm = al_norm_linear(0, 1), .overlay_alpha = 0.5, .hide_ticks = 1};
    al_figure *f = al_figure_new(1, 1, &st, &err);
    CHECK(al_figure_panel(f, 0, "CLS attention", att, 14, 14, &err) == 0);
    CHECK(al_figure_panel_background(f, 0, img, 28, 28, &err) == 0);
    const char *pp = path_in("overlay.png");
    CHECK_MSG(al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    png p = {0};
    if (png_open(&p, pp) == 0) {
        uint8_t rgb[3];
        const uint8_t *top = al_cmap_get("viridis")->lut8[255];
        cell_px(f, &p, 0, 14, 14, 7, 3, rgb);  /* over black */
        for (int k = 0; k < 3; k++) CHECK_MSG(abs(rgb[k] - (int)lround(0.5 * top[k])) <= 1, "over black ch%d %d", k, rgb[k]);
        cell_px(f, &p, 0, 14, 14, 7, 10, rgb);  /* over white */
        for (int k = 0; k < 3; k++)
            CHECK_MSG(abs(rgb[k] - (int)lround(0.5 * top[k] + 127.5)) <= 1, "over white ch%d %d", k, rgb[k]);
        cell_px(f, &p, 0, 14, 14, 0, 0, rgb);  /* NaN: the image shows through */
        CHECK(rgb[0] == 0 && rgb[1] == 0 && rgb[2] == 0);
        png_close(&p);
    }
    CHECK(al_figure_save(f, path_in("overlay.pdf"), &err) == 0);
    keep_example(pp, "overlay.png");
    al_figure_free(f);
}

/* ---- the seed figures, on synthetic data ---- */

/* Deterministic noise in [-1, 1]. */
static float noise(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32767.5f - 1.0f;
}

/* Seed 000: five 18 x 18 head-similarity panels, RdYlBu_r -1..1, own bars. */
static void example_similarity(void) {
    enum { H = 18 };
    static const char *titles[5] = {"Standard MHA", "LRKV (r=64)", "GQA", "MQA", "MLA"};
    static const char *ranks[5] = {"effective rank 16.9", "effective rank 15.2", "effective rank 12.4",
                                   "effective rank 9.8", "effective rank 16.1"};
    float s[5][H * H];
    unsigned seed = 7;
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++) {
                float v = 0.12f * noise(&seed);
                if (k == 1 && abs(i - j) == 1) v = 0.45f;
                if (k == 1 && i > 9 && j < 8 && (i + j) % 2 == 0) v = 0.3f;
                if (k == 2 && i / 3 == j / 3) v = 0.55f;
                if (k == 2 && i < 6 && j > 11) v = -0.25f;
                if (k == 3 && i > 11 && j < 6) v = -0.5f;
                if (k == 4 && abs(i - j) == 2) v = 0.8f;
                if (k == 4 && i < 5 && j > 12) v = -0.4f;
                if (i == j) v = k == 3 ? 0.6f : k == 2 ? 0.85f : 1.0f;
                s[k][i * H + j] = v;
            }
    al_err err = {{0}};
    al_heat_style st = {.cmap = "RdYlBu_r", .norm = al_norm_linear(-1, 1), .xlabel = "Head Index",
                        .ylabel = "Head Index", .cbar_step = 0.25};
    al_figure *f = al_figure_new(1, 5, &st, &err);
    for (int i = 0; f && i < 5; i++) {
        CHECK(al_figure_panel(f, i, titles[i], s[i], H, H, &err) == 0);
        CHECK(al_figure_panel_subtitle(f, i, ranks[i], &err) == 0);
    }
    const char *pp = path_in("seed000_similarity.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    double x, y, w, h;
    CHECK(al_figure_heat_rect(f, 4, &x, &y, &w, &h) == 0 && w == 288 && h == 288);  /* 16 px per cell */
    png p = {0};
    if (png_open(&p, pp) == 0) {
        uint8_t rgb[3];
        cell_px(f, &p, 4, H, H, 5, 5, rgb);  /* diagonal +1: darkest red */
        CHECK(same(rgb, al_cmap_get("RdYlBu_r")->lut8[255]));
        png_close(&p);
    }
    CHECK(al_figure_save(f, path_in("seed000_similarity.svg"), &err) == 0);
    keep_example(pp, "seed000_similarity.png");
    al_figure_free(f);
}

/* Seed 001: 2 x 2 causal attention maps, 256 positions, log 1e-6..1. The
 * matrix is [key][query]: x = output (query) position, y = input (key). */
static void example_attention(void) {
    enum { T = 256 };
    static const char *titles[4] = {"Layer 0 Head 0", "Layer 0 Head 15", "Layer 15 Head 0", "Layer 31 Head 0"};
    float *a = malloc(sizeof(float) * 4 * T * T);
    if (!a) return;
    for (int h = 0; h < 4; h++) {
        float *m = a + (size_t)h * T * T;
        for (int q = 0; q < T; q++) {
            double sum = 0;
            for (int k = 0; k < T; k++) {
                double v = 0;
                if (k <= q) {
                    int d = q - k;
                    if (h == 0) v = exp(-0.05 * d);
                    if (h == 1) v = (k % 32 < 3 ? 1.0 : 1e-3) * exp(-0.01 * d);
                    if (h == 2) v = ((k / 16 + q / 16) % 2 ? 1.0 : 1e-3) * exp(-0.002 * d);
                    if (h == 3) v = (k == 0 ? 50.0 : 1e-2) * exp(-0.001 * d);
                }
                m[(size_t)k * T + q] = (float)v;
                sum += v;
            }
            for (int k = 0; k <= q; k++) m[(size_t)k * T + q] /= (float)sum;
        }
    }
    al_err err = {{0}};
    al_heat_style st = {.cmap = "viridis", .norm = al_norm_log(1e-6, 1), .xlabel = "Output (query) position",
                        .ylabel = "Input (key) position"};
    al_figure *f = al_figure_new(2, 2, &st, &err);
    for (int h = 0; f && h < 4; h++) CHECK(al_figure_panel(f, h, titles[h], a + (size_t)h * T * T, T, T, &err) == 0);
    free(a);
    const char *pp = path_in("seed001_attention.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    png p = {0};
    if (png_open(&p, pp) == 0) {
        uint8_t rgb[3];
        cell_px(f, &p, 0, T, T, 200, 100, rgb);  /* key > query: masked, background */
        CHECK(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255);
        CHECK(png_variance(&p) > 100);
        png_close(&p);
    }
    CHECK(al_figure_save(f, path_in("seed001_attention.pdf"), &err) == 0);
    keep_example(pp, "seed001_attention.png");
    al_figure_free(f);
}

/* Seed 004: polynomial (signed, symmetric range) vs softmax attention over
 * a 14 x 14 patch grid, each with its own colour bar and range. */
static void example_poly_softmax(void) {
    enum { G = 14 };
    float poly[G * G], soft[G * G];
    for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++) {
            double x = (j + 0.5) / G, y = (i + 0.5) / G;
            poly[i * G + j] = (float)(0.02 * sin(9 * x) * cos(7 * y) * (1 - 0.5 * x));
            double e = exp(-((x - 0.85) * (x - 0.85) + (y - 0.15) * (y - 0.15)) / 0.02);
            soft[i * G + j] = (float)(0.025 + e);
        }
    for (int i = 0; i < G * G; i++) soft[i] = (float)(0.02 + 0.18 * (soft[i] - 0.025));
    al_err err = {{0}};
    al_heat_style sp = {.cmap = "viridis", .norm = al_norm_symmetric(0)};
    al_heat_style ss = {.cmap = "viridis"};
    al_figure *f = al_figure_new(1, 2, &sp, &err);
    CHECK(al_figure_panel(f, 0, "Attention with (1/14)x^3", poly, G, G, &err) == 0);
    CHECK(al_figure_panel(f, 1, "Attention with softmax", soft, G, G, &err) == 0);
    CHECK(al_figure_panel_style(f, 1, &ss, &err) == 0);
    const char *pp = path_in("seed004_poly_softmax.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    keep_example(pp, "seed004_poly_softmax.png");
    al_figure_free(f);
}

/* Vision: a 28 x 28 input image (a ring, like a handwritten zero) under the
 * CLS token's attention over the 14 x 14 patch grid, next to the attention
 * alone. */
static void example_vision(void) {
    float img[28 * 28], att[14 * 14];
    for (int i = 0; i < 28; i++)
        for (int j = 0; j < 28; j++) {
            double r = hypot(i - 13.5, (j - 13.5) * 1.3);
            img[i * 28 + j] = (float)exp(-(r - 8) * (r - 8) / 4.0);
        }
    double z = 0;
    for (int i = 0; i < 14; i++)
        for (int j = 0; j < 14; j++) {
            double r = hypot(i - 6.5, (j - 6.5) * 1.3);
            double v = exp(-(r - 4) * (r - 4) / 1.5) * (1 + 0.8 * (i < 7)) + 0.05;
            att[i * 14 + j] = (float)v;
            z += v;
        }
    for (int i = 0; i < 14 * 14; i++) att[i] = (float)(att[i] / z);
    al_err err = {{0}};
    al_heat_style st = {.cmap = "viridis", .overlay_alpha = 0.55, .cbar_label = "attention"};
    al_figure *f = al_figure_new(1, 2, &st, &err);
    CHECK(al_figure_panel(f, 0, "CLS attention over the input", att, 14, 14, &err) == 0);
    CHECK(al_figure_panel_background(f, 0, img, 28, 28, &err) == 0);
    CHECK(al_figure_panel(f, 1, "CLS attention, 14\xc3\x97" "14 patches", att, 14, 14, &err) == 0);
    const char *pp = path_in("vision.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    CHECK(al_figure_save(f, path_in("vision.svg"), &err) == 0);
    keep_example(pp, "vision_overlay.png");
    al_figure_free(f);
}

/* Eight panels in a row with a shared colour bar and a figure title: the
 * widest layout the brief asks to stay legible. */
static void example_eight(void) {
    enum { H = 12 };
    float m[8][H * H];
    unsigned seed = 3;
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < H * H; i++) m[k][i] = noise(&seed) * (k + 1) / 8.0f;
    al_err err = {{0}};
    al_heat_style st = {.cmap = "coolwarm", .norm = al_norm_symmetric(0), .xlabel = "Key", .ylabel = "Query"};
    al_figure *f = al_figure_new(1, 8, &st, &err);
    char title[32];
    for (int k = 0; f && k < 8; k++) {
        snprintf(title, sizeof title, "Head %d", k);
        CHECK(al_figure_panel(f, k, title, m[k], H, H, &err) == 0);
    }
    al_figure_set_cbar(f, AL_CBAR_SHARED);
    CHECK(al_figure_set_title(f, "Attention logits, layer 3", &err) == 0);
    const char *pp = path_in("eight.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    keep_example(pp, "eight_shared.png");
    al_figure_free(f);
}

/* Layout edge cases: a long sequence (reduced for display, footnote), a
 * non-square matrix drawn with row 0 at the bottom, a colour-bar label, a
 * title too long for its panel (shrunk to fit), and an empty grid slot. */
static void example_edge_cases(void) {
    enum { T = 1200, R = 64, C = 256 };
    float *a = malloc(sizeof(float) * T * T), *b = malloc(sizeof(float) * R * C);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    for (int k = 0; k < T; k++)
        for (int q = 0; q < T; q++) a[(size_t)k * T + q] = k <= q ? (float)(exp(-0.01 * (q - k)) / (q + 1)) : 0.0f;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) b[i * C + j] = (float)(sin(j * 0.05) * cos(i * 0.1));
    al_err err = {{0}};
    al_heat_style sa = {.cmap = "viridis", .norm = al_norm_log(1e-6, 1), .xlabel = "Output (query) position",
                        .ylabel = "Input (key) position", .cbar_label = "attention weight"};
    al_heat_style sb = {.cmap = "RdYlBu_r", .norm = al_norm_symmetric(0), .xlabel = "Position",
                        .ylabel = "Channel", .origin_lower = 1, .cbar_label = "activation"};
    al_figure *f = al_figure_new(2, 2, &sa, &err);
    CHECK(al_figure_panel(f, 0, "Layer 0 Head 0", a, T, T, &err) == 0);
    CHECK(al_figure_panel(f, 1, "A rather long panel title that cannot fit over one panel", a, T, T, &err) == 0);
    CHECK(al_figure_panel(f, 2, "Non-square, origin lower", b, R, C, &err) == 0);
    CHECK(al_figure_panel_style(f, 2, &sb, &err) == 0);
    free(a);
    free(b);
    const char *pp = path_in("edge.png");
    CHECK_MSG(f && al_figure_save(f, pp, &err) == 0, "%s", err.msg);
    CHECK(strstr(al_figure_pool_note(f), "1200") != NULL);
    CHECK(al_figure_save(f, path_in("edge.svg"), &err) == 0);
    keep_example(pp, "edge_cases.png");
    al_figure_free(f);
}

/* Removes the test directory's files and the directory. */
static void cleanup(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        unlink(path_in(e->d_name));
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

/* Frees cairo's and fontconfig's process-wide caches, so the sanitizer
 * build's leak check (make test) sees only this program's own memory.
 * fontconfig is reached through cairo's own link (dlopen of the already
 * loaded library), since the test links only cairo. */
static void release_font_caches(void) {
    cairo_debug_reset_static_data();
    void *fc = dlopen("libfontconfig.so.1", RTLD_LAZY);
    if (!fc) return;
    void (*fini)(void);
    *(void **)&fini = dlsym(fc, "FcFini");
    if (fini) fini();
    dlclose(fc);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/al_plot_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_colormaps();
    test_norms();
    test_three_panels();
    test_errors();
    test_pooling();
    test_overlay();
    example_similarity();
    example_attention();
    example_poly_softmax();
    example_vision();
    example_eight();
    example_edge_cases();
    release_font_caches();
    if (!getenv("AL_PLOT_KEEP")) cleanup();
    else fprintf(stderr, "outputs kept in %s\n", tmpdir);
    return TEST_EXIT();
}
