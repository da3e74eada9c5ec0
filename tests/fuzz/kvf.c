/*
 * kvf.c (fuzz harness): the KV-frontier cache reader, al_kvf_read_json
 * (src/analysis/kv_frontier.c), which the study runs on each model's
 * kv_frontier.json before deciding what to measure again.
 *
 * Input: the JSON file, read under the key "k". A refusal is one line. What
 * was accepted must be points the study can use as they are: a method name
 * that parses (al_kvf_parse_methods) to the compression the point stores, a
 * measured point with a positive, finite size and a finite loss, a whole
 * count of predictions, held as written. The frontier, its best points and the figure are
 * made from them; written back and read again they give the same JSON text.
 */
#include "fuzz.h"

#include <cJSON.h>
#include <math.h>

#include "analysis/kv_frontier.h"

/* Whether p is a point the study may reuse (see the top comment). */
static int usable(const al_kvf_point *p) {
    al_kvf_method m;
    int n;
    al_err err;
    if (!p->model || al_kvf_parse_methods(p->method, &m, 1, &n, &err) || n != 1) return 0;
    if (m.kv.q.kind != p->kv.q.kind || m.kv.e.method != p->kv.e.method || m.kv.e.budget != p->kv.e.budget) return 0;
    if (!p->ok) return 1;
    return isfinite(p->bytes_per_token) && p->bytes_per_token > 0 && isfinite(p->loss);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "kv_frontier.json", data, size);
    al_kvf f = {0}, g = {0};
    al_err err;
    if (al_kvf_read_json(&f, path, "k", &err)) {
        if (f.n || !err.msg[0] || strchr(err.msg, '\n')) abort(); /* nothing kept; a refusal is one line */
        al_kvf_free(&f);
        return 0;
    }
    for (int i = 0; i < f.n; i++)
        if (!usable(&f.p[i])) abort();
    /* each count held as the file wrote it */
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, "points"), *o;
    int k = 0;
    cJSON_ArrayForEach(o, pts) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "predictions");
        if (k >= f.n || !cJSON_IsNumber(pr) || pr->valuedouble != (double)f.p[k++].predictions) abort();
    }
    if (k != f.n) abort();
    cJSON_Delete(j);
    if (al_kvf_select(&f, &err)) abort();
    for (int t = 0; t < AL_KVF_N_THRESHOLDS; t++) {
        const int b = al_kvf_best_under(&f, al_kvf_thresholds[t]);
        if (b >= f.n || (b >= 0 && !f.p[b].ok)) abort();
    }
    const int bt = al_kvf_best_trade(&f);
    if (bt >= f.n || (bt >= 0 && !f.p[bt].ok)) abort();
    const al_kvf_meta meta = {"none,int4", "k", 16, 32, 32, 48};
    const char *png = fuzz_file(1, "frontier.png", "", 0);
    int n_ok = 0;
    for (int i = 0; i < f.n; i++) n_ok += f.p[i].ok;
    /* the figure: drawn when a point was measured, else refused in one line */
    if (al_kvf_draw(&f, &meta, NULL, png, &err) ? n_ok > 0 || strchr(err.msg, '\n') : n_ok == 0) abort();
    const char *again = fuzz_file(2, "again.json", "", 0);
    if (al_kvf_write_json(&f, &meta, again, &err) || al_kvf_read_json(&g, again, "k", &err) || g.n != f.n) abort();
    if (al_kvf_select(&g, &err)) abort();
    char *a = al_kvf_json_text(&f, &meta), *b = al_kvf_json_text(&g, &meta);
    if (!a || !b || strcmp(a, b)) abort();
    free(a);
    free(b);
    al_kvf_free(&f);
    al_kvf_free(&g);
    return 0;
}
