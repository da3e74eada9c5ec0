/*
 * test_lineplot.c: line and labelled-point plots (src/plot/lineplot.c):
 * a PNG of the expected pixel size that is not blank, carries its lines'
 * colours, and has legend text inside the reported legend box; labelled
 * points with error bars; marker shapes (a diamond is drawn with other
 * pixels than a circle) and a legend of marker kinds (grey markers and text
 * inside the legend box); log axes; SVG and PDF output; errors (unknown
 * format, nothing to plot, bad limits, an unwritable path) leave no file
 * and no temporary file behind. Set AL_PLOT_EXAMPLES=<dir> to keep copies
 * of the figures for looking at them.
 */
#include <cairo.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plot/lineplot.h"
#include "test.h"

static char tmpdir[512];

/* Pixels of an RGB24 PNG surface as (r, g, b). */
static void pixel(cairo_surface_t *s, int x, int y, int rgb[3]) {
    const unsigned char *d = cairo_image_surface_get_data(s);
    uint32_t v = *(const uint32_t *)(d + (size_t)y * cairo_image_surface_get_stride(s) + 4 * (size_t)x);
    rgb[0] = (v >> 16) & 255, rgb[1] = (v >> 8) & 255, rgb[2] = v & 255;
}

/* Counts pixels in a rectangle that satisfy a predicate on their colour. */
static long count_px(cairo_surface_t *s, double x, double y, double w, double h, int (*pred)(const int *, const void *),
                     const void *arg) {
    int W = cairo_image_surface_get_width(s), H = cairo_image_surface_get_height(s);
    long n = 0;
    for (int j = (int)y; j < (int)(y + h) && j < H; j++)
        for (int i = (int)x; i < (int)(x + w) && i < W; i++) {
            int c[3];
            if (i < 0 || j < 0) continue;
            pixel(s, i, j, c);
            n += pred(c, arg);
        }
    return n;
}

static int not_white(const int *c, const void *a) {
    (void)a;
    return c[0] < 250 || c[1] < 250 || c[2] < 250;
}
static int dark(const int *c, const void *a) {
    (void)a;
    return c[0] + c[1] + c[2] < 250;
}
/* within 12 of the colour a points to */
static int near_color(const int *c, const void *a) {
    const int *t = a;
    return abs(c[0] - t[0]) <= 12 && abs(c[1] - t[1]) <= 12 && abs(c[2] - t[2]) <= 12;
}

/* No "*.tmp.*" file left in tmpdir. */
static int no_tmp_files(void) {
    DIR *d = opendir(tmpdir);
    int ok = 1;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) ok = 0;
    if (d) closedir(d);
    return ok;
}

/* Copies a file to $AL_PLOT_EXAMPLES when set. */
static void keep(const char *path, const char *name) {
    const char *dir = getenv("AL_PLOT_EXAMPLES");
    if (!dir || !*dir) return;
    char dst[1024];
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *in = fopen(path, "rb"), *out = fopen(dst, "wb");
    char buf[8192];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
}

/* Loss curves: three lines (one with a band), a dashed baseline, a legend. */
static void test_lines_png(void) {
    al_err err;
    char path[600];
    snprintf(path, sizeof path, "%s/loss.png", tmpdir);
    al_lineplot *p = al_lineplot_new("Validation loss", "training tokens (millions)", "loss (nats/byte)", &err);
    CHECK(p != NULL);
    if (!p) return;
    double x[6], y[3][6], lo[6], hi[6];
    for (int i = 0; i < 6; i++) {
        x[i] = 0.05 * (i + 1);
        for (int k = 0; k < 3; k++) y[k][i] = 2.8 - 0.9 * log1p(4.0 * i) / log1p(20.0) - 0.05 * k;
        lo[i] = y[0][i] - 0.03;
        hi[i] = y[0][i] + 0.03;
    }
    static const char *names[3] = {"MHA", "GQA", "LRKV (r=14)"};
    for (int k = 0; k < 3; k++) CHECK(al_lineplot_line(p, names[k], x, y[k], 6, &err) == k);
    CHECK(al_lineplot_band(p, 0, lo, hi, &err) == 0);
    CHECK(al_lineplot_hline(p, "unigram baseline", 3.07, &err) == 0);
    CHECK(al_lineplot_set_footnote(p, "1 seed per design", &err) == 0);
    int rc = al_lineplot_save(p, path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    double W = 0, H = 0, ax, ay, aw, ah, lx, ly, lw, lh;
    CHECK(al_lineplot_extent(p, &W, &H) == 0);
    CHECK(W == 750 && H == 510); /* 5.0 x 3.4 in at 150 dpi */
    CHECK(al_lineplot_axes_rect(p, &ax, &ay, &aw, &ah) == 0);
    CHECK(al_lineplot_legend_rect(p, &lx, &ly, &lw, &lh) == 0);
    /* inside the axes, or beside them on the right; always inside the figure */
    CHECK_MSG(ly >= ay && ly + lh <= ay + ah && lx + lw <= W && (lx >= ax || lx >= ax + aw),
              "legend %g,%g %gx%g misplaced (axes %g,%g %gx%g)", lx, ly, lw, lh, ax, ay, aw, ah);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    CHECK(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS);
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
        CHECK(cairo_image_surface_get_width(s) == 750 && cairo_image_surface_get_height(s) == 510);
        long ink = count_px(s, ax + 2, ay + 2, aw - 4, ah - 4, not_white, NULL);
        CHECK_MSG(ink > 2000, "axes nearly blank: %ld coloured pixels", ink);
        long text = count_px(s, lx + 30, ly + 2, lw - 32, lh - 4, dark, NULL);
        CHECK_MSG(text > 60, "legend text area: %ld dark pixels", text);
        static const int blue[3] = {0x1f, 0x77, 0xb4}, orange[3] = {0xff, 0x7f, 0x0e}, green[3] = {0x2c, 0xa0, 0x2c};
        CHECK(count_px(s, ax, ay, aw, ah, near_color, blue) > 50);
        CHECK(count_px(s, ax, ay, aw, ah, near_color, orange) > 50);
        CHECK(count_px(s, ax, ay, aw, ah, near_color, green) > 50);
        /* tick labels below the axes and the y label left of it are drawn */
        CHECK(count_px(s, ax, ay + ah + 6, aw, 20, dark, NULL) > 30);
        CHECK(count_px(s, 0, ay, 45, ah, dark, NULL) > 30);
    }
    cairo_surface_destroy(s);
    keep(path, "lineplot_loss.png");
    al_lineplot_free(p);
}

/* KV cache vs loss: labelled points with error bars, in PNG, SVG and PDF. */
static void test_points(void) {
    al_err err;
    al_lineplot *p = al_lineplot_new("KV cache vs validation loss", "KV cache (% of MHA)", "validation loss", &err);
    static const char *names[5] = {"MHA", "GQA", "MQA", "MLA", "LRKV"};
    static const double kv[5] = {100, 50, 12.5, 12.5, 56.25}, loss[5] = {2.10, 2.12, 2.19, 2.15, 2.09};
    for (int i = 0; i < 5; i++)
        CHECK(al_lineplot_point(p, names[i], kv[i], loss[i], loss[i] - 0.01, loss[i] + 0.01, &err) == i);
    CHECK(al_lineplot_point(p, "bad", NAN, 1, NAN, NAN, &err) == -1);
    static const char *ext[3] = {"png", "svg", "pdf"}, *magic[3] = {"\x89PNG", "<?xml", "%PDF"};
    for (int e = 0; e < 3; e++) {
        char path[600], name[64];
        snprintf(path, sizeof path, "%s/kv.%s", tmpdir, ext[e]);
        int rc = al_lineplot_save(p, path, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        FILE *f = fopen(path, "rb");
        char head[8] = {0};
        CHECK(f && fread(head, 1, 5, f) >= 4);
        if (f) fclose(f);
        CHECK_MSG(!strncmp(head, magic[e], strlen(magic[e])), "%s does not start as a %s file", path, ext[e]);
        snprintf(name, sizeof name, "lineplot_kv.%s", ext[e]);
        keep(path, name);
    }
    double lx, ly, lw, lh;
    CHECK(al_lineplot_legend_rect(p, &lx, &ly, &lw, &lh) == -1); /* points only: no legend */
    char path[600];
    snprintf(path, sizeof path, "%s/kv.png", tmpdir);
    al_lineplot_save(p, path, &err);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    double ax, ay, aw, ah;
    CHECK(al_lineplot_axes_rect(p, &ax, &ay, &aw, &ah) == 0);
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
        static const int red[3] = {0xd6, 0x27, 0x28};
        CHECK(count_px(s, ax, ay, aw, ah, near_color, red) > 20); /* the fourth point's marker */
        CHECK(count_px(s, ax, ay, aw, ah, dark, NULL) > 100);     /* labels */
    }
    cairo_surface_destroy(s);
    al_lineplot_free(p);
}

/* Pixels of tab10 blue in the axes of a two-point plot whose first point
 * has `shape` (the second, orange, is a square), and the legend box of its
 * marker keys (keys: add them). */
static long marker_pixels(al_marker shape, int keys, double legend[4]) {
    al_err err;
    char path[600];
    snprintf(path, sizeof path, "%s/markers.png", tmpdir);
    al_lineplot *p = al_lineplot_new("markers", "x", "y", &err);
    CHECK(al_lineplot_point(p, NULL, 1, 1, NAN, NAN, &err) == 0);
    CHECK(al_lineplot_point(p, NULL, 2, 2, NAN, NAN, &err) == 1);
    CHECK(al_lineplot_point_marker(p, 0, shape, &err) == 0);
    CHECK(al_lineplot_point_marker(p, 1, AL_MARKER_SQUARE, &err) == 0);
    if (keys) {
        CHECK(al_lineplot_marker_key(p, "from scratch", AL_MARKER_CIRCLE, &err) == 0);
        CHECK(al_lineplot_marker_key(p, "converted", AL_MARKER_DIAMOND, &err) == 0);
    }
    int rc = al_lineplot_save(p, path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    keep(path, keys ? "lineplot_marker_keys.png" : "lineplot_markers.png");
    double ax, ay, aw, ah;
    CHECK(al_lineplot_axes_rect(p, &ax, &ay, &aw, &ah) == 0);
    CHECK((al_lineplot_legend_rect(p, &legend[0], &legend[1], &legend[2], &legend[3]) == 0) == keys);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    long n = -1;
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
        static const int blue[3] = {0x1f, 0x77, 0xb4}, grey[3] = {0x7f, 0x7f, 0x7f};
        n = count_px(s, ax, ay, aw, ah, near_color, blue);
        if (keys) {
            CHECK(count_px(s, legend[0], legend[1], legend[2], legend[3], near_color, grey) > 20); /* two markers */
            CHECK(count_px(s, legend[0], legend[1], legend[2], legend[3], dark, NULL) > 50);       /* two labels */
        }
    }
    cairo_surface_destroy(s);
    al_lineplot_free(p);
    return n;
}

/* Marker shapes and marker keys; their errors. */
static void test_markers(void) {
    double legend[4];
    const long circle = marker_pixels(AL_MARKER_CIRCLE, 0, legend), diamond = marker_pixels(AL_MARKER_DIAMOND, 0, legend);
    CHECK_MSG(circle > 20 && diamond > 20 && labs(circle - diamond) > 3, "circle %ld px, diamond %ld px", circle, diamond);
    CHECK(marker_pixels(AL_MARKER_DIAMOND, 1, legend) == diamond); /* the legend lies outside the markers */
    al_err err;
    al_lineplot *p = al_lineplot_new(NULL, NULL, NULL, &err);
    CHECK(al_lineplot_point_marker(p, 0, AL_MARKER_DIAMOND, &err) == -1);
    CHECK(al_lineplot_point(p, NULL, 1, 1, NAN, NAN, &err) == 0);
    CHECK(al_lineplot_point_marker(p, 0, (al_marker)7, &err) == -1);
    CHECK(al_lineplot_marker_key(p, "", AL_MARKER_SQUARE, &err) == -1);
    CHECK(al_lineplot_marker_key(p, "k", (al_marker)-1, &err) == -1);
    al_lineplot_free(p);
}

/* Log axes skip non-positive values; fixed limits; size. */
static void test_log_axes(void) {
    al_err err;
    char path[600];
    snprintf(path, sizeof path, "%s/log.png", tmpdir);
    al_lineplot *p = al_lineplot_new(NULL, "tokens", "loss", &err);
    double x[5] = {0, 1e3, 1e4, 1e5, 1e6}, y[5] = {5, 3, 2.5, -1, 2.1};
    CHECK(al_lineplot_line(p, "run", x, y, 5, &err) == 0);
    al_lineplot_set_scale(p, AL_AXIS_LOG, AL_AXIS_LOG);
    CHECK(al_lineplot_set_size(p, 4, 3, 100, &err) == 0);
    int rc = al_lineplot_save(p, path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    double W, H;
    CHECK(al_lineplot_extent(p, &W, &H) == 0 && W == 400 && H == 300);
    CHECK(al_lineplot_set_ylim(p, 0, 3, &err) == 0); /* 0 on a log axis: refused at save */
    CHECK(al_lineplot_save(p, path, &err) == -1);
    CHECK(strstr(err.msg, "log") != NULL);
    CHECK(al_lineplot_set_ylim(p, 3, 1, &err) == -1);
    CHECK(al_lineplot_set_size(p, 40, 3, 100, &err) == -1);
    keep(path, "lineplot_log.png");
    al_lineplot_free(p);
}

/* Errors: unknown format, nothing to plot, unwritable path: no file, no temp. */
static void test_errors(void) {
    al_err err;
    char path[600];
    al_lineplot *p = al_lineplot_new("t", NULL, NULL, &err);
    snprintf(path, sizeof path, "%s/empty.png", tmpdir);
    CHECK(al_lineplot_save(p, path, &err) == -1);
    CHECK(strstr(err.msg, "nothing to plot") != NULL);
    CHECK(access(path, F_OK) != 0);
    double x = 1, y = 2;
    CHECK(al_lineplot_line(p, "a", &x, &y, 0, &err) == -1);
    CHECK(al_lineplot_line(p, "a", &x, &y, 1, &err) == 0);
    CHECK(al_lineplot_band(p, 3, &x, &y, &err) == -1);
    CHECK(al_lineplot_hline(p, "inf", INFINITY, &err) == -1);
    snprintf(path, sizeof path, "%s/plot.gif", tmpdir);
    CHECK(al_lineplot_save(p, path, &err) == -1);
    CHECK(strstr(err.msg, "unknown format") != NULL);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/no/such/dir/plot.png", tmpdir);
    CHECK(al_lineplot_save(p, path, &err) == -1);
    CHECK(strchr(err.msg, '\n') == NULL);
    snprintf(path, sizeof path, "%s/no/such/dir/plot.svg", tmpdir);
    CHECK(al_lineplot_save(p, path, &err) == -1);
    CHECK(no_tmp_files());
    double W, H;
    CHECK(al_lineplot_extent(p, &W, &H) == -1);
    al_lineplot_free(p);
    al_lineplot_free(NULL);
}

/* Labels that are not valid UTF-8 (a directory's name may be any bytes):
 * drawn with '?' for the bad bytes, where cairo alone refuses the figure. */
static void test_bad_utf8(void) {
    al_err err;
    char path[600];
    snprintf(path, sizeof path, "%s/bad_utf8.png", tmpdir);
    al_lineplot *p = al_lineplot_new("title \xff", "x \xc0\xaf (overlong)", "y \xed\xa0\x80 (surrogate)", &err);
    CHECK(p != NULL);
    const double x[2] = {1, 2}, y[2] = {1, 2};
    CHECK(al_lineplot_line(p, "MHA (run\xe2\x82)", x, y, 2, &err) == 0);
    CHECK(al_lineplot_point(p, "\xf4\x90\x80\x80 past U+10FFFF, \xce\xbb fine", 1.5, 1.5, NAN, NAN, &err) == 0);
    const int rc = al_lineplot_save(p, path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    al_lineplot_free(p);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/al_test_lineplot.%d", (int)getpid());
    mkdir(tmpdir, 0777);
    test_lines_png();
    test_points();
    test_markers();
    test_log_axes();
    test_errors();
    test_bad_utf8();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_EXIT();
}
