/*
 * plot_out.c: writing a cairo surface to a file atomically, shared by the
 * heatmap figures and the line plots: the format from the extension, a write
 * callback into al_afile, and the commit-or-remove ending.
 */
#include <string.h>
#include <strings.h>

#include "plot_internal.h"

int al_plot_format(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot) return -1;
    if (strcasecmp(dot, ".png") == 0) return FMT_PNG;
    if (strcasecmp(dot, ".svg") == 0) return FMT_SVG;
    if (strcasecmp(dot, ".pdf") == 0) return FMT_PDF;
    return -1;
}

cairo_status_t al_plot_sink_write(void *closure, const unsigned char *data, unsigned int len) {
    al_plot_sink *s = closure;
    if (s->failed) return CAIRO_STATUS_WRITE_ERROR;
    if (al_afile_write(&s->af, data, len, s->err) != 0) {
        s->failed = 1;
        return CAIRO_STATUS_WRITE_ERROR;
    }
    return CAIRO_STATUS_SUCCESS;
}

int al_plot_sink_finish(al_plot_sink *s, cairo_status_t st, const char *what, const char *path, al_err *err) {
    if (s->failed) {
        al_afile_abort(&s->af);
        return al_err_prefix(err, "saving %s", what);
    }
    if (st != CAIRO_STATUS_SUCCESS) {
        al_afile_abort(&s->af);
        return al_errf(err, "saving %s %s: cairo: %s", what, path, cairo_status_to_string(st));
    }
    if (al_afile_commit(&s->af, err) != 0) {
        al_afile_abort(&s->af);
        return al_err_prefix(err, "saving %s", what);
    }
    return 0;
}
