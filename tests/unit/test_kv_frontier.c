/*
 * test_kv_frontier.c: the KV-cache frontier (src/analysis/kv_frontier.c):
 *  - method lists: the documented spellings parse into the right options,
 *    bad ones are refused with one line naming the item;
 *  - the sweep on a tiny random MHA model: the uncompressed point's loss
 *    equals plain eval's (al_eval_ids) within 1e-4; the bytes per token of
 *    int8/int4/int2 points equal the decoder's closed form written out here
 *    (codes + fp16 scales of the quantised positions, fp32 residual rows, per
 *    window); % of MHA fp32; h2o at 0.5 holds ceil(len / 2) positions of
 *    each window;
 *  - the frontier on made-up points: Pareto set, lower convex hull in log
 *    bytes, best under a threshold, best loss x bytes;
 *  - the writers: JSON read back equal (and refused for another key), CSV
 *    rows, the figure a PNG.
 */
#include <string.h>
#include <unistd.h>

#include "analysis/kv_frontier.h"
#include "testutil.h"
#include "train/train.h"

static void test_parse(void) {
    al_kvf_method m[AL_KVF_MAX_METHODS];
    int n;
    al_err err;
    CHECK(al_kvf_parse_methods(AL_KVF_DEFAULT_METHODS, m, AL_KVF_MAX_METHODS, &n, &err) == 0 && n == 8);
    CHECK(!strcmp(m[0].name, "none") && m[0].kv.q.kind == AL_KVQ_NONE && m[0].kv.e.method == AL_KVE_NONE);
    CHECK(m[3].kv.q.kind == AL_KVQ_INT2 && m[3].kv.e.method == AL_KVE_NONE);
    CHECK(m[5].kv.e.method == AL_KVE_H2O && m[5].kv.e.budget == 0.25 && m[5].kv.q.kind == AL_KVQ_NONE);
    CHECK(m[6].kv.e.method == AL_KVE_WINDOW && m[6].kv.e.budget == 0.5);
    CHECK(!strcmp(m[7].name, "h2o:0.5+int2") && m[7].kv.e.method == AL_KVE_H2O && m[7].kv.q.kind == AL_KVQ_INT2);
    CHECK(al_kvf_parse_methods("int4+snapkv:64", m, AL_KVF_MAX_METHODS, &n, &err) == 0 && n == 1 &&
          m[0].kv.e.method == AL_KVE_SNAPKV && m[0].kv.e.budget == 64 && m[0].kv.q.kind == AL_KVQ_INT4);
    static const struct {
        const char *list, *why;
    } bad[] = {{"int3", "'int3'"},           {"h2o:0", "budget '0'"},       {"h2o:1.5", "budget '1.5'"},
               {"h2o:2.5", "budget '2.5'"},  {"h2o", "'h2o' is not"},       {"lru:0.5", "'lru' is not"},
               {"int4+int2", "more than one quantisation"}, {"h2o:0.5+window:0.5", "more than one eviction"},
               {"int4,,int2", "empty item"}, {"int4,int4", "listed twice"}, {"", "empty method list"},
               {"int4+", "empty part"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = al_kvf_parse_methods(bad[i].list, m, AL_KVF_MAX_METHODS, &n, &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, bad[i].why) && !strchr(err.msg, '\n'), "'%s': rc %d, '%s'", bad[i].list,
                  rc, rc ? err.msg : "");
    }
    CHECK(al_kvf_parse_methods("none,int8,int4", m, 2, &n, &err) == -1 && strstr(err.msg, "more than 2 methods"));
}

static int ceil_bytes(int w, int bits) { return (w * bits + 7) / 8; }

static void test_sweep(void) {
    const int L = 2, H = 4, G = 2, dh = 8, T = 16, N = 4, R = 2, n_ids = 41;
    const al_config c = tu_config(32, 48, L, H, G, dh, T);
    al_model m;
    if (tu_make_model(&m, &c, 7, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    int ids[64];
    al_rng rng;
    al_rng_seed(&rng, 3);
    tu_random_tokens(ids, n_ids, &rng);
    al_err err;
    /* plain eval of the same windows */
    al_acts a;
    double plain = NAN;
    size_t count = 0;
    CHECK(al_acts_create_infer(&a, &m, 2, T, NULL, 0, &err) == 0);
    CHECK(al_eval_ids(&m, &a, ids, (size_t)n_ids, 0, &plain, &count, &err) == 0 && count == (size_t)n_ids - 1);
    al_acts_free(&a);

    al_kvf_method meth[8];
    int n_meth;
    CHECK(al_kvf_parse_methods("none,int8,int4,int2,h2o:0.5", meth, 8, &n_meth, &err) == 0 && n_meth == 5);
    al_kvf_opts o = al_kvf_opts_default();
    o.context = T, o.group = N, o.residual = R;
    CHECK(al_kvf_check(&m, meth, n_meth, &o, &err) == 0);
    al_kvf_opts bad = o;
    bad.group = 3; /* does not divide a value head of 8 */
    CHECK(al_kvf_check(&m, meth, n_meth, &bad, &err) == -1 && strstr(err.msg, "does not divide"));
    al_kvf f = {0};
    CHECK(al_kvf_sweep(&f, &m, "dir/tiny", NULL, ids, (size_t)n_ids, meth, n_meth, &o, &err) == 0 && f.n == 5);
    if (f.n != 5) {
        al_kvf_free(&f);
        al_model_free(&m);
        return;
    }
    const double fp32 = 2.0 * G * dh * 4 * L, mha = 2.0 * H * dh * 4 * L;
    const al_kvf_point *none = &f.p[0];
    CHECK(none->ok && !strcmp(none->design, "gqa") && !strcmp(none->label, "GQA") && !strcmp(none->model, "dir/tiny"));
    CHECK_MSG(fabs(none->loss - plain) < 1e-4, "decode-path loss %.7f, plain eval %.7f", none->loss, plain);
    CHECK(none->bytes_per_token == fp32 && none->fp32_bytes_per_token == fp32 && none->predictions == 40);
    CHECK_CLOSE(none->pct_of_mha_fp32, 100.0 * fp32 / mha, 1e-12);
    CHECK_CLOSE(none->perplexity, exp(none->loss), 1e-12);
    for (int k = 1; k <= 3; k++) {
        const al_kvf_point *p = &f.p[k];
        const int b = 8 >> (k - 1);
        /* per quantised position per layer: key cells (one per KV head), value cells of N channels, their fp16
         * pairs, the key channels' pairs per block of N tokens */
        const double per = G * ceil_bytes(dh, b) + G * (dh / N) * ceil_bytes(N, b) + 4.0 * G * (dh / N) +
                           4.0 * G * dh / N;
        double held = 0;
        for (int w0 = 0; w0 < n_ids - 1; w0 += T) {
            const int len = n_ids - 1 - w0 < T ? n_ids - 1 - w0 : T, qn = len > R ? (len - R) / N * N : 0;
            held += L * (qn * per + (len - qn) * 2.0 * G * dh * 4);
        }
        CHECK_MSG(p->ok && fabs(p->bytes_per_token - held / 40) < 1e-9, "int%d: %.6f bytes/token, closed form %.6f", b,
                  p->bytes_per_token, held / 40);
        CHECK(p->bytes_per_token < fp32 && fabs(p->loss - plain) < 0.1 * plain);
        CHECK_CLOSE(p->pct_of_mha_fp32, 100.0 * p->bytes_per_token / mha, 1e-12);
    }
    CHECK(f.p[1].bytes_per_token > f.p[2].bytes_per_token && f.p[2].bytes_per_token > f.p[3].bytes_per_token);
    /* h2o at half the positions seen: each window ends holding ceil(len / 2) positions of the plain cache */
    const al_kvf_point *ev = &f.p[4];
    double held = 0;
    for (int w0 = 0; w0 < n_ids - 1; w0 += T) {
        const int len = n_ids - 1 - w0 < T ? n_ids - 1 - w0 : T;
        held += (double)((len + 1) / 2) * fp32;
    }
    CHECK_MSG(ev->ok, "h2o:0.5 refused: %s", ev->why);
    CHECK_MSG(fabs(ev->bytes_per_token - held / 40) < 1e-9, "h2o:0.5: %.6f bytes/token, closed form %.6f",
              ev->bytes_per_token, held / 40);
    CHECK(isfinite(ev->loss) && ev->loss > 0 && fabs(ev->loss - plain) < 0.2 * plain);
    /* an eviction the rules refuse (a budget between 1 and 2) is a point with its reason, and the sweep goes on */
    al_kvf_method odd[2] = {meth[4], meth[0]};
    odd[0].kv.e.budget = 1.5;
    CHECK(al_kvf_sweep(&f, &m, "dir/tiny", NULL, ids, (size_t)n_ids, odd, 2, &o, &err) == 0 && f.n == 7);
    if (f.n == 7) {
        CHECK_MSG(!f.p[5].ok && strstr(f.p[5].why, "--kv-budget") && isnan(f.p[5].loss), "%s", f.p[5].why);
        CHECK(f.p[6].ok && f.p[6].loss == f.p[0].loss); /* f.p may have moved: no pointer kept across the sweep */
    }
    al_kvf_free(&f);
    al_model_free(&m);
}

/* a made-up measured point (its compression the method's, as a sweep sets it) */
static al_kvf_point pt(const char *label, const char *method, double bytes, double loss) {
    al_kvf_point p = {.model = (char *)"m", .ok = 1, .bytes_per_token = bytes, .loss = loss,
                      .pct_of_mha_fp32 = bytes / 10.0, .perplexity = exp(loss), .predictions = 8};
    al_kvf_method m;
    int n;
    al_err err;
    CHECK(al_kvf_parse_methods(method, &m, 1, &n, &err) == 0 && n == 1);
    p.kv = m.kv;
    al_strfmt(p.label, sizeof p.label, "%s", label);
    al_strfmt(p.design, sizeof p.design, "mha");
    al_strfmt(p.method, sizeof p.method, "%s", method);
    return p;
}

static void test_select_and_write(void) {
    al_kvf f = {0};
    al_err err;
    /* bytes, loss: 1000/2.0 (none), 500/2.0 (int8: dominates none), 300/2.1, 200/2.5 (above the chord
     * 300-100 in log bytes), 100/2.6, 150/3.0 (dominated) */
    const al_kvf_point pts[] = {pt("A", "none", 1000, 2.0), pt("A", "int8", 500, 2.0), pt("A", "int4", 300, 2.1),
                                pt("B", "none", 200, 2.5),  pt("B", "int2", 100, 2.6), pt("B", "int4", 150, 3.0)};
    for (int i = 0; i < 6; i++) CHECK(al_kvf_add(&f, &pts[i], &err) == 0);
    al_kvf_point r = pt("B", "h2o:0.5", NAN, NAN);
    r.ok = 0;
    al_strfmt(r.why, sizeof r.why, "not implemented, \"yet\"");
    r.kv.e.method = AL_KVE_H2O, r.kv.e.budget = 0.5;
    CHECK(al_kvf_add(&f, &r, &err) == 0);
    CHECK(al_kvf_select(&f, &err) == 0);
    static const int pareto[] = {0, 1, 1, 1, 1, 0, 0};
    for (int i = 0; i < 7; i++) CHECK_MSG(f.p[i].pareto == pareto[i], "point %d pareto %d", i, f.p[i].pareto);
    /* hull in (ln bytes, loss): 100/2.6, 300/2.1, 500/2.0; 200/2.5 lies above the chord from 100 to 300 */
    static const int hull[] = {0, 1, 1, 0, 1, 0, 0};
    for (int i = 0; i < 7; i++) CHECK_MSG(f.p[i].hull == hull[i], "point %d hull %d", i, f.p[i].hull);
    CHECK(al_kvf_best_under(&f, 100) == 0 || al_kvf_best_under(&f, 100) == 1); /* equal losses */
    CHECK(al_kvf_best_under(&f, 30) == 2 && al_kvf_best_under(&f, 20) == 3 && al_kvf_best_under(&f, 15) == 4);
    CHECK(al_kvf_best_under(&f, 5) == -1);
    CHECK(al_kvf_best_trade(&f) == 4); /* 260 nats x bytes */

    char dir[] = "/tmp/al_kvf_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char png[64], json[64], csv[64];
    snprintf(png, sizeof png, "%s/fr.png", dir);
    snprintf(json, sizeof json, "%s/fr.json", dir);
    snprintf(csv, sizeof csv, "%s/fr.csv", dir);
    const al_kvf_meta meta = {"none,int8", "key 1", 16, 4, 2, 8};
    CHECK(al_kvf_write_data(&f, &meta, png, &err) == 0 && al_kvf_draw(&f, &meta, "t", png, &err) == 0);
    al_kvf back = {0};
    CHECK(al_kvf_read_json(&back, json, "key 2", &err) == -1 && back.n == 0);
    CHECK(al_kvf_read_json(&back, json, "key 1", &err) == 0 && back.n == 7);
    for (int i = 0; i < back.n && i < 7; i++) {
        CHECK(!strcmp(back.p[i].label, f.p[i].label) && !strcmp(back.p[i].method, f.p[i].method));
        CHECK(back.p[i].ok == f.p[i].ok && back.p[i].kv.e.method == f.p[i].kv.e.method);
        CHECK(f.p[i].ok ? back.p[i].loss == f.p[i].loss && back.p[i].bytes_per_token == f.p[i].bytes_per_token
                        : isnan(back.p[i].loss) && !strcmp(back.p[i].why, f.p[i].why));
    }
    char *text;
    size_t len;
    CHECK(al_read_file(csv, &text, &len, &err) == 0);
    if (text) {
        int lines = 0;
        for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
        CHECK(lines == 8 && !strncmp(text, "model,design,method,quant,evict,budget,bytes_per_token,", 55));
        CHECK(strstr(text, "\nm,mha,h2o:0.5,none,h2o,0.5,,,,,0,refused\n") != NULL);
        free(text);
    }
    CHECK(al_read_file(png, &text, &len, &err) == 0 && len > 8 && !memcmp(text, "\x89PNG\r\n\x1a\n", 8));
    free(text);
    /* a cache whose point the writer could not have written is refused whole, in one line: a count past size_t
     * (undefined to convert), a measured size of 0 (drawn on a log axis), a method that is not the point's
     * compression (a study would reuse it under that name) */
    static const char *const edits[][2] = {{"\"predictions\":\t8", "\"predictions\":\t1e300"},
                                           {"\"bytes_per_token\":\t500,", "\"bytes_per_token\":\t0,"},
                                           {"\"quant\":\t\"int8\"", "\"quant\":\t\"int4\""}};
    for (int e = 0; e < 3; e++) {
        al_kvf bad = {0};
        CHECK(al_read_file(json, &text, &len, &err) == 0);
        char *at = text ? strstr(text, edits[e][0]) : NULL;
        CHECK_MSG(at != NULL, "edit %d: '%s' not in the written cache", e, edits[e][0]);
        if (at) {
            char *edited = al_sprintf("%.*s%s%s", (int)(at - text), text, edits[e][1], at + strlen(edits[e][0]));
            CHECK(edited && al_write_file_atomic(json, edited, strlen(edited), &err) == 0);
            CHECK_MSG(al_kvf_read_json(&bad, json, "key 1", &err) == -1 && bad.n == 0 && strstr(err.msg, "malformed"),
                      "edit %d accepted (%d points)", e, bad.n);
            free(edited);
            CHECK(al_write_file_atomic(json, text, len, &err) == 0);
        }
        free(text);
        al_kvf_free(&bad);
    }
    unlink(png), unlink(json), unlink(csv), rmdir(dir);
    al_kvf_free(&back);
    al_kvf_free(&f);
}

int main(void) {
    test_parse();
    test_sweep();
    test_select_and_write();
    return TEST_EXIT();
}
