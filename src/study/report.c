/*
 * report.c: the reports of `attnlab study`: report.json (every number,
 * schema in docs/study.md), report.md and report.html (the same findings and
 * tables, with the figures referenced relatively so the page opens from
 * disk).
 *
 * The findings are written from the numbers by fixed rules, so the text never
 * claims more than the data resolve: with one seed a difference in loss
 * below 2 % counts as unresolved (run-to-run variation of models this small
 * and this briefly trained is of that order: at the quick budget two runs of
 * one seed that differ only in their sums' rounding end up to about 2 %
 * apart, docs/study.md, "Session 40"); with several seeds a
 * difference is resolved only when the designs' ranges over the seeds do not
 * overlap. Vision accuracies use the binomial standard error of the test set
 * (one seed) or the same range rule.
 */
#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "attnlab.h"
#include "study.h"

#define NOISE_PCT 2.0 /* one seed: loss differences below this are not resolved */
enum { MAX_FINDINGS = 16 };

/* ---- text (al_text, core.h) ---- */

/* Appends ", " or " and " before item i of a list of n. */
static void text_sep(al_text *b, int i, int n) {
    if (i > 0) al_text_printf(b, "%s", i == n - 1 ? " and " : ", ");
}

/* Text with &, <, >, " escaped for HTML. */
static void text_html(al_text *b, const char *t) {
    for (; *t; t++) {
        switch (*t) {
        case '&': al_text_printf(b, "&amp;"); break;
        case '<': al_text_printf(b, "&lt;"); break;
        case '>': al_text_printf(b, "&gt;"); break;
        case '"': al_text_printf(b, "&quot;"); break;
        default: al_text_printf(b, "%c", *t);
        }
    }
}

/* ---- aggregation ---- */

/* Per design (language models) or per score function (vision): the values
 * of one quantity over the seeds. */
typedef struct design_stats {
    al_stat loss, bpb, tps, erank_u, erank_p; /* tps: the runs' median training throughput */
    const al_study_lm_run *first; /* shapes and caches are the same for every seed */
    double delta_pct;             /* mean loss vs MHA's */
    int resolved;                 /* vs MHA */
} design_stats;

typedef struct vit_stats {
    al_stat acc, loss, ips, erank_u, erank_p;
    const al_study_vit_run *first;
} vit_stats;

/* Whether two designs' losses differ by more than the noise rule allows. */
static int resolved(const al_stat *a, const al_stat *b) {
    if (a->n <= 1 || b->n <= 1) return fabs(a->mean - b->mean) > NOISE_PCT / 100.0 * b->mean;
    return a->min > b->max || b->min > a->max;
}

/* The statistics of each design over its runs (at most AL_STUDY_MAX_SEEDS:
 * one per seed). */
static void lm_stats(const al_study_results *r, design_stats *d) {
    double v[6][AL_STUDY_MAX_SEEDS];
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        int n = 0;
        memset(&d[k], 0, sizeof d[k]);
        for (int i = 0; i < r->n_lm; i++) {
            const al_study_lm_run *x = &r->lm[i];
            if (x->design != k || n >= AL_STUDY_MAX_SEEDS) continue;
            if (!d[k].first) d[k].first = x;
            v[0][n] = x->m.val_loss, v[1][n] = x->m.val_bpb, v[2][n] = x->train_tokens_per_s;
            v[4][n] = x->m.erank_uncentered_pct, v[5][n] = x->m.erank_pca_pct;
            n++;
        }
        d[k].loss = al_stat_of(v[0], n), d[k].bpb = al_stat_of(v[1], n), d[k].tps = al_stat_of(v[2], n);
        d[k].erank_u = al_stat_of(v[4], n), d[k].erank_p = al_stat_of(v[5], n);
    }
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        d[k].delta_pct = 100.0 * (d[k].loss.mean - d[0].loss.mean) / d[0].loss.mean;
        d[k].resolved = k > 0 && d[k].first && d[0].first && resolved(&d[k].loss, &d[0].loss);
    }
}

/* The same for the two ViTs (softmax, poly). */
static void vit_stats_of(const al_study_results *r, vit_stats *s) {
    double v[5][AL_STUDY_MAX_SEEDS];
    for (int k = 0; k < 2; k++) {
        int n = 0;
        memset(&s[k], 0, sizeof s[k]);
        for (int i = 0; i < r->n_vit; i++) {
            const al_study_vit_run *x = &r->vit[i];
            if (x->poly != k || n >= AL_STUDY_MAX_SEEDS) continue;
            if (!s[k].first) s[k].first = x;
            v[0][n] = x->m.accuracy, v[1][n] = x->m.test_loss, v[2][n] = x->train_images_per_s;
            v[3][n] = x->m.erank_uncentered_pct, v[4][n] = x->m.erank_pca_pct;
            n++;
        }
        s[k].acc = al_stat_of(v[0], n), s[k].loss = al_stat_of(v[1], n), s[k].ips = al_stat_of(v[2], n);
        s[k].erank_u = al_stat_of(v[3], n), s[k].erank_p = al_stat_of(v[4], n);
    }
}

/* "2.013" for one seed; for several "2.013 (2.010-2.017)" (range), or with
 * sd set "2.013 \u00b1 0.004 (2.010-2.017)" (sample standard deviation and range). */
static void fmt_stat(char *buf, size_t cap, const al_stat *s, int decimals, double scale, int sd) {
    if (s->n <= 0)
        al_strfmt(buf, cap, "-");
    else if (s->n == 1)
        al_strfmt(buf, cap, "%.*f", decimals, s->mean * scale);
    else if (sd)
        al_strfmt(buf, cap, "%.*f \xc2\xb1 %.*f (%.*f\xe2\x80\x93%.*f)", decimals, s->mean * scale, decimals,
                  s->std * scale, decimals, s->min * scale, decimals, s->max * scale);
    else
        al_strfmt(buf, cap, "%.*f (%.*f\xe2\x80\x93%.*f)", decimals, s->mean * scale, decimals, s->min * scale,
                  decimals, s->max * scale);
}

/* A count for text: 900, 154k, 3.1M. */
static void fmt_count(char *buf, size_t cap, double v) {
    if (v < 10000)
        al_strfmt(buf, cap, "%.0f", v);
    else if (v < 1e6)
        al_strfmt(buf, cap, "%.0fk", v / 1e3);
    else
        al_strfmt(buf, cap, "%.1fM", v / 1e6);
}

/* ---- findings ---- */

/* The findings, each a whole sentence or paragraph of any length. */
typedef struct findings {
    char *text[MAX_FINDINGS]; /* malloc'd */
    int n;
    int oom;      /* a finding or a list in one could not be written whole */
    int too_many; /* more than MAX_FINDINGS (a program error) */
} findings;

static void add_finding(findings *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_finding(findings *f, const char *fmt, ...) {
    if (f->n >= MAX_FINDINGS) {
        f->too_many = 1;
        return;
    }
    al_text b = {0};
    va_list ap;
    va_start(ap, fmt);
    al_text_vprintf(&b, fmt, ap);
    va_end(ap);
    if (b.oom || !b.s) {
        f->oom = 1;
        free(b.s);
        return;
    }
    f->text[f->n++] = b.s;
}

/* Frees a list that went into findings, noting if it was cut short. */
static void list_done(findings *f, al_text *list) {
    f->oom |= list->oom;
    free(list->s);
}

static void findings_free(findings *f) {
    for (int i = 0; i < f->n; i++) free(f->text[i]);
}

/* Validation loss, best first (order: the designs present, n of them, by mean loss). */
static void finding_ranking(const design_stats *d, const int *order, int n, int n_seeds, findings *f) {
    al_text rank = {0};
    for (int i = 0; i < n; i++) {
        char s[96];
        fmt_stat(s, sizeof s, &d[order[i]].loss, 3, 1, 0);
        text_sep(&rank, i, n);
        al_text_printf(&rank, "%s %s", al_study_design_title(order[i]), s);
    }
    add_finding(f, "Validation loss in nats/byte, best first%s: %s.",
                n_seeds > 1 ? " (mean over seeds, range in brackets)" : "", al_text_str(&rank));
    list_done(f, &rank);
}

/* Every design against MHA, with the resolution rule. */
static void finding_vs_mha(const design_stats *d, int n_seeds, findings *f) {
    al_text deltas = {0}, unres = {0}, res = {0}, tail = {0};
    int n_un = 0, n_res = 0;
    for (int k = 1; k < AL_STUDY_DESIGNS; k++) {
        if (!d[k].first) continue;
        al_text_printf(&deltas, "%s%s %+.1f %%", deltas.len ? ", " : "", al_study_design_title(k), d[k].delta_pct);
        al_text *dst = d[k].resolved ? &res : &unres;
        al_text_printf(dst, "%s%s", dst->len ? ", " : "", al_study_design_title(k));
        if (d[k].resolved)
            n_res++;
        else
            n_un++;
    }
    if (n_seeds == 1) {
        if (n_un)
            al_text_printf(&tail, " Not resolved: %s %s within 2 %% of MHA and cannot be told apart from it here.",
                           al_text_str(&unres), n_un == 1 ? "is" : "are");
        if (n_res)
            al_text_printf(&tail,
                           " %s %s by more than 2 %%, but one seed cannot rule out noise for %s either; the standard "
                           "budget measures the spread over 3 seeds.",
                           al_text_str(&res), n_res == 1 ? "differs" : "differ", n_res == 1 ? "it" : "them");
        add_finding(f,
                    "Against MHA: %s. With one seed per design, differences under ~%.0f %% are within run-to-run noise "
                    "at this scale and are not resolved.%s",
                    al_text_str(&deltas), NOISE_PCT, al_text_str(&tail));
    } else {
        al_text_printf(&tail, "%s%s%s%s%s", n_res ? " Resolved: " : "", n_res ? al_text_str(&res) : "",
                       n_res ? "." : "", n_un ? " Not resolved (ranges overlap): " : "",
                       n_un ? al_text_str(&unres) : "");
        add_finding(f,
                    "Against MHA: %s (means over %d seeds). A difference counts as resolved only when the two designs' "
                    "ranges over the seeds do not overlap.%s%s",
                    al_text_str(&deltas), n_seeds, al_text_str(&tail), n_un ? "." : "");
    }
    list_done(f, &deltas);
    list_done(f, &unres);
    list_done(f, &res);
    list_done(f, &tail);
}

/* The LRKV paper's claims (needs LRKV and MQA; order as finding_ranking's). */
static void finding_paper(const design_stats *d, const int *order, int n, int n_seeds, findings *f) {
    char lrkv[400], mqa[400]; /* fixed sentences around a few numbers and design titles */
    if (!d[4].resolved)
        al_strfmt(lrkv, sizeof lrkv,
                  "is within noise of MHA (%+.1f %%): consistent with \"matches\", and no evidence that it beats it",
                  d[4].delta_pct);
    else if (n_seeds == 1)
        al_strfmt(lrkv, sizeof lrkv, "is %.1f %% %s than MHA, beyond the 2 %% threshold but from one seed%s",
                  fabs(d[4].delta_pct), d[4].delta_pct < 0 ? "better" : "worse",
                  d[4].delta_pct < 0 ? "" : ": this run does not reproduce the paper's result");
    else if (d[4].delta_pct < 0)
        al_strfmt(lrkv, sizeof lrkv, "beats MHA by a resolved margin (%+.1f %%), as the paper reports", d[4].delta_pct);
    else
        al_strfmt(lrkv, sizeof lrkv,
                  "is worse than MHA by a resolved margin (%+.1f %%), unlike the paper (whose models are far larger "
                  "and trained far longer)",
                  d[4].delta_pct);
    int worst = order[n - 1];
    if (worst != 2) {
        al_strfmt(mqa, sizeof mqa, "MQA is not the worst here: %s has the highest loss", al_study_design_title(worst));
    } else {
        al_text close = {0};
        for (int k = 0; k < AL_STUDY_DESIGNS; k++)
            if (k != 2 && d[k].first && !resolved(&d[2].loss, &d[k].loss))
                al_text_printf(&close, "%s%s", close.len ? ", " : "", al_study_design_title(k));
        if (close.len)
            al_strfmt(mqa, sizeof mqa, "MQA has the highest loss, as in the paper, but is not resolved from %s",
                      al_text_str(&close));
        else
            al_strfmt(mqa, sizeof mqa, "MQA has the highest loss, as in the paper, %s",
                      n_seeds == 1 ? "more than 2 % above every other design (one seed)"
                                   : "resolved against every other design");
        list_done(f, &close);
    }
    add_finding(f,
                "The LRKV paper's claim: LRKV at about half the cache matches or beats MHA, and MQA is worst. Here "
                "LRKV (%.4g %% of the MHA cache) %s. %s.",
                d[4].first->m.kv_pct_of_mha, lrkv, mqa);
}

/* Cache per token, decode speed and training throughput of the n designs present. */
static void finding_cache_speed(const al_study_results *r, const design_stats *d, int n, findings *f) {
    const al_study_budget *b = r->budget;
    al_text kv = {0}, dec = {0}, tps = {0};
    for (int k = 0, i = 0; k < AL_STUDY_DESIGNS; k++) {
        if (!d[k].first) continue;
        text_sep(&kv, i, n);
        text_sep(&dec, i, n);
        text_sep(&tps, i, n);
        al_text_printf(&kv, "%s %zu B (%.4g %%)", al_study_design_title(k), d[k].first->m.kv_bytes_per_token,
                       d[k].first->m.kv_pct_of_mha);
        al_text_printf(&dec, "%s %.0f", al_study_design_title(k), r->speed[k].decode_tokens_per_s);
        al_text_printf(&tps, "%s %.0f", al_study_design_title(k), r->speed[k].train_tokens_per_s);
        i++;
    }
    add_finding(f, "KV cache per token (float32, all %d layers): %s.", d[0].first->cfg.num_layers, al_text_str(&kv));
    add_finding(
        f,
        "Decode speed at a %d-token context (one thread), tokens/s: %s. Training throughput at batch %d x %d, tokens/s: %s. "
        "Both measured side by side after training (best of %d interleaved rounds, so every design had the same "
        "chances of a quiet machine); on a machine shared with other work, differences under ~10-20 %% are still "
        "noise.",
        b->decode_context, al_text_str(&dec), r->lm_opts.batch, r->lm_opts.context, al_text_str(&tps), b->speed_rounds);
    list_done(f, &kv);
    list_done(f, &dec);
    list_done(f, &tps);
}

/* Head diversity: the effective ranks of the n designs present. */
static void finding_heads(const design_stats *d, int n, findings *f) {
    al_text er = {0};
    for (int k = 0, i = 0; k < AL_STUDY_DESIGNS; k++) {
        if (!d[k].first) continue;
        text_sep(&er, i++, n);
        al_text_printf(&er, "%s %.1f/%.1f", al_study_design_title(k), d[k].erank_u.mean, d[k].erank_p.mean);
    }
    double emin = INFINITY, emax = -INFINITY;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++)
        if (d[k].first) emin = fmin(emin, d[k].erank_u.mean), emax = fmax(emax, d[k].erank_u.mean);
    char order_note[300] = ""; /* a fixed sentence */
    if (emax - emin < 1.0)
        al_strfmt(order_note, sizeof order_note,
                  " All designs are within 1 point of each other: no design's heads stand out as more or less diverse.");
    else if (d[0].first && d[2].first && d[3].first)
        al_strfmt(order_note, sizeof order_note,
                  " The uncentered order of MHA, MLA and MQA %s the paper's MHA > MLA > MQA "
                  "(at 128M: 95.4, 83.9, 72.6 %%).",
                  d[0].erank_u.mean > d[3].erank_u.mean && d[3].erank_u.mean > d[2].erank_u.mean ? "matches"
                                                                                                 : "differs from");
    add_finding(f,
                "Head diversity, effective rank of the layer-averaged head-similarity matrix as %% of the %d heads "
                "(uncentered/PCA-based): %s.%s These models are small and briefly trained: read the ranks as "
                "descriptive.",
                d[0].first->cfg.num_heads, al_text_str(&er), order_note);
    list_done(f, &er);
}

static void lm_findings(const al_study_results *r, const design_stats *d, findings *f) {
    const al_study_budget *b = r->budget;
    const int n_seeds = r->n_seeds;
    const double tokens = (double)r->lm_opts.batch * r->lm_opts.context * r->lm_opts.steps;
    int have = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) have += d[k].first != NULL;
    if (have < AL_STUDY_DESIGNS) {
        add_finding(f, "Only %d of the %d language models are in this report; comparisons below cover those.", have,
                    AL_STUDY_DESIGNS);
        if (!d[0].first) return;
    }
    char tok[32];
    fmt_count(tok, sizeof tok, tokens);
    add_finding(f,
                "Scale: five language models of about %.1fM parameters each, trained on %s bytes (%d steps of %d x %d) "
                "with %d seed%s per design (%s budget). The numbers compare the designs at this small scale and short "
                "training, where they say how fast each design learns at least as much as what it can reach; they "
                "are not a replication of the LRKV paper's 128M/2.5B results.",
                d[0].first->m.params / 1e6, tok, r->lm_opts.steps, r->lm_opts.batch, r->lm_opts.context, n_seeds,
                n_seeds == 1 ? "" : "s", b->name);

    /* against the unigram baseline */
    double lo = INFINITY, hi = -INFINITY;
    int above = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        if (!d[k].first) continue;
        lo = fmin(lo, d[k].loss.mean), hi = fmax(hi, d[k].loss.mean);
        above += d[k].loss.max >= r->unigram.val_cross_entropy;
    }
    const double U = r->unigram.val_cross_entropy;
    if (!above)
        add_finding(
            f,
            "Every language model ends below the unigram baseline: validation loss %.3f\xe2\x80\x93%.3f nats/byte "
            "(%.3f\xe2\x80\x93%.3f bits/byte) against %.3f nats/byte (%.3f bits/byte) for byte frequencies alone, "
            "%.0f\xe2\x80\x93%.0f %% lower. The models learned more than which bytes are common.",
            lo, hi, lo / M_LN2, hi / M_LN2, U, U / M_LN2, 100 * (U - hi) / U, 100 * (U - lo) / U);
    else
        add_finding(
            f,
            "Not every run is below the unigram baseline (%.3f nats/byte): %d design%s reach it or worse. These "
            "models are undertrained; a longer budget is needed before comparing designs.",
            U, above, above == 1 ? "" : "s");

    /* ranking */
    int order[AL_STUDY_DESIGNS], n = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++)
        if (d[k].first) order[n++] = k;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && d[order[j]].loss.mean < d[order[j - 1]].loss.mean; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    finding_ranking(d, order, n, n_seeds, f);
    finding_vs_mha(d, n_seeds, f);
    if (d[4].first && d[2].first) finding_paper(d, order, n, n_seeds, f);
    finding_cache_speed(r, d, n, f);
    finding_heads(d, n, f);
}

static void vit_findings(const al_study_results *r, const vit_stats *v, findings *f) {
    if (r->vision_note[0]) {
        add_finding(f, "Vision: %s", r->vision_note);
        if (!v[0].first || !v[1].first) return;
    }
    if (!v[0].first || !v[1].first) return;
    const int N = v[0].first->m.test_images;
    /* "Attention with (1/14)x^3" -> "(1/14)x^3" */
    const char *poly = v[1].first->title;
    if (!strncmp(poly, "Attention with ", 15)) poly += 15;
    double p0 = v[0].acc.mean, p1 = v[1].acc.mean;
    char a0[96], a1[96], rule[400]; /* rule: a fixed sentence around two numbers */
    fmt_stat(a0, sizeof a0, &v[0].acc, 1, 100, 0);
    fmt_stat(a1, sizeof a1, &v[1].acc, 1, 100, 0);
    int res;
    if (r->n_seeds == 1 || v[0].acc.n <= 1) {
        double se = sqrt(p0 * (1 - p0) / N + p1 * (1 - p1) / N);
        res = fabs(p0 - p1) > 2 * se;
        al_strfmt(rule, sizeof rule,
                  "with %d test images the standard error of the difference is %.1f points, so the difference is %s "
                  "(two standard errors), from one seed",
                  N, 100 * se, res ? "resolved" : "not resolved");
    } else {
        res = v[0].acc.min > v[1].acc.max || v[1].acc.min > v[0].acc.max;
        al_strfmt(rule, sizeof rule, "over %d seeds the ranges %s", v[0].acc.n,
                  res ? "do not overlap: the difference is resolved" : "overlap: the difference is not resolved");
    }
    add_finding(f,
                "Vision (Fashion-MNIST, %d test images, a %d-layer ViT of %.0fk parameters): test accuracy %s %% with "
                "softmax and %s %% with %s; %s. The polynomial-attention paper reports the two as comparable.",
                N, v[0].first->cfg.num_layers, v[0].first->m.params / 1e3, a0, a1, poly, rule);
    if (isfinite(r->cls.min[0]))
        add_finding(
            f,
            "CLS-token attention (layer %d, head %d, test image %d): softmax weights %.3g..%.3g, all positive and "
            "summing to 1; (1/14)x^3 weights %.3g..%.3g, signed and unnormalised. The paper's figure shows about "
            "0.025..0.2 and -0.02..0.02.",
            r->cls.layer, r->cls.head, r->cls.image, r->cls.min[0], r->cls.max[0], r->cls.min[1], r->cls.max[1]);
}

/* ---- the KV frontier (kvfront.c measures it) ---- */

/* The loss of point i against its design's uncompressed point, in % (NAN
 * when that point is missing). */
static double kv_delta_pct(const al_kvf *f, int i) {
    for (int k = 0; k < f->n; k++)
        if (f->p[k].ok && !strcmp(f->p[k].design, f->p[i].design) && !strcmp(f->p[k].method, "none"))
            return 100.0 * (f->p[i].loss - f->p[k].loss) / f->p[k].loss;
    return NAN;
}

/* "MLA int2 (37.8 bytes/token = 7.38 % of MHA fp32, loss 2.1234)" */
static void kv_point_text(al_text *b, const al_kvf_point *p) {
    al_text_printf(b, "%s %s (%.1f bytes/token = %.3g %% of MHA fp32, loss %.4f)", p->label, p->method,
                   p->bytes_per_token, p->pct_of_mha_fp32, p->loss);
}

/* What the frontier says, by fixed rules: the lowest loss under each bytes
 * threshold (where it changes), the lower convex hull, the best loss x bytes
 * trade, the noise caveat, the methods the library refused. */
static void kv_conclusion(const al_study_results *r, al_text *b) {
    const al_kvf *f = &r->kv;
    al_text_printf(b, "Lowest loss per byte at this scale: ");
    for (int t = 0, last = -1, n = 0; t < AL_KVF_N_THRESHOLDS; t++) {
        const int i = al_kvf_best_under(f, al_kvf_thresholds[t]);
        if (i < 0 || i == last) continue;
        al_text_printf(b, "%sat most %g %% of the MHA fp32 cache, ", n++ ? "; " : "", al_kvf_thresholds[t]);
        kv_point_text(b, &f->p[i]);
        last = i;
    }
    al_text_printf(b, ". The lower convex hull in (log bytes, loss), the trades worth making, from most bytes to "
                      "fewest: ");
    for (int i = 0, n = 0, last = -1; i < f->n; i++) { /* each round: the largest hull point below the last */
        int next = -1;
        for (int k = 0; k < f->n; k++)
            if (f->p[k].hull && (last < 0 || f->p[k].bytes_per_token < f->p[last].bytes_per_token) &&
                (next < 0 || f->p[k].bytes_per_token > f->p[next].bytes_per_token))
                next = k;
        if (next < 0) break;
        al_text_printf(b, "%s%s %s", n++ ? " \xe2\x86\x92 " : "", f->p[next].label, f->p[next].method);
        last = next;
    }
    const int bt = al_kvf_best_trade(f);
    if (bt >= 0) {
        al_text_printf(b, ". Best loss x bytes trade: ");
        kv_point_text(b, &f->p[bt]);
    }
    al_text_printf(b,
                   ". Across designs, loss differences under %.0f %% are within one seed's run-to-run noise (see "
                   "above); within a design the compressions are compared on the same model and text.",
                   NOISE_PCT);
    int n_ref = 0, why = -1;
    for (int i = 0; i < f->n; i++) {
        if (f->p[i].ok) continue;
        int seen = 0; /* each refused method once */
        for (int k = 0; k < i; k++) seen |= !f->p[k].ok && !strcmp(f->p[k].method, f->p[i].method);
        if (seen) continue;
        al_text_printf(b, "%s%s", n_ref++ ? ", " : " Not measured, refused by the library: ", f->p[i].method);
        why = i;
    }
    if (why >= 0) al_text_printf(b, " (%s).", f->p[why].why);
}

/* report.json's kv_frontier: settings, measured points, refusals, the
 * frontier's picks and the conclusion. */
static cJSON *kv_json(const al_study_results *r) {
    const al_kvf *f = &r->kv;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", f->n ? "done" : "skipped");
    if (!f->n) return o;
    cJSON_AddStringToObject(o, "figure", r->kv_figure.file);
    cJSON *dd = cJSON_AddArrayToObject(o, "data");
    for (int j = 0; j < 2; j++) al_json_push(dd, cJSON_CreateString(r->kv_figure.data[j]));
    cJSON_AddStringToObject(o, "caption", r->kv_figure.caption);
    cJSON_AddStringToObject(o, "methods", AL_KVF_STUDY_METHODS);
    cJSON_AddNumberToObject(o, "context", r->kv_context);
    cJSON_AddNumberToObject(o, "tokens", r->kv_tokens);
    cJSON_AddNumberToObject(o, "kv_group", r->kv_group);
    cJSON_AddNumberToObject(o, "kv_residual", r->kv_residual);
    cJSON *pts = cJSON_AddArrayToObject(o, "points"), *ref = cJSON_AddArrayToObject(o, "refused");
    for (int i = 0; i < f->n; i++) {
        const al_kvf_point *p = &f->p[i];
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "design", p->design);
        cJSON_AddStringToObject(q, "method", p->method);
        if (!p->ok) {
            cJSON_AddStringToObject(q, "why", p->why);
            al_json_push(ref, q);
            continue;
        }
        const double delta = kv_delta_pct(f, i);
        cJSON_AddNumberToObject(q, "bytes_per_token", p->bytes_per_token);
        cJSON_AddNumberToObject(q, "pct_of_mha_fp32", p->pct_of_mha_fp32);
        cJSON_AddNumberToObject(q, "loss", p->loss);
        cJSON_AddNumberToObject(q, "perplexity", p->perplexity);
        if (isfinite(delta)) cJSON_AddNumberToObject(q, "delta_vs_uncompressed_pct", delta);
        cJSON_AddBoolToObject(q, "pareto", p->pareto);
        cJSON_AddBoolToObject(q, "hull", p->hull);
        al_json_push(pts, q);
    }
    cJSON *bu = cJSON_AddArrayToObject(o, "best_under");
    for (int t = 0; t < AL_KVF_N_THRESHOLDS; t++) {
        const int i = al_kvf_best_under(f, al_kvf_thresholds[t]);
        if (i < 0) continue;
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "max_pct_of_mha_fp32", al_kvf_thresholds[t]);
        cJSON_AddStringToObject(q, "design", f->p[i].design);
        cJSON_AddStringToObject(q, "method", f->p[i].method);
        cJSON_AddNumberToObject(q, "loss", f->p[i].loss);
        cJSON_AddNumberToObject(q, "bytes_per_token", f->p[i].bytes_per_token);
        al_json_push(bu, q);
    }
    const int bt = al_kvf_best_trade(f);
    if (bt >= 0) {
        cJSON *q = cJSON_AddObjectToObject(o, "best_trade");
        cJSON_AddStringToObject(q, "design", f->p[bt].design);
        cJSON_AddStringToObject(q, "method", f->p[bt].method);
        cJSON_AddNumberToObject(q, "loss", f->p[bt].loss);
        cJSON_AddNumberToObject(q, "bytes_per_token", f->p[bt].bytes_per_token);
    }
    al_text c = {0};
    kv_conclusion(r, &c);
    /* a conclusion that ran out of memory is an item not made: al_json_print then refuses the report */
    al_json_add(o, "conclusion", c.oom ? NULL : cJSON_CreateString(al_text_str(&c)));
    free(c.s);
    return o;
}

/* ---- report.json ---- */

static cJSON *stat_json(const al_stat *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "mean", s->mean);
    cJSON_AddNumberToObject(o, "min", s->min);
    cJSON_AddNumberToObject(o, "max", s->max);
    cJSON_AddNumberToObject(o, "std", s->std);
    cJSON_AddNumberToObject(o, "n", s->n);
    return o;
}

/* The config's JSON view (al_config_view: one key per field that applies),
 * plus the patches of a vision model. NULL when out of memory. */
/* The precision the study's runs trained in (every run has the plan's; a
 * study without language models reports its ViTs'). */
static al_precision study_precision(const al_study_results *r) {
    return r->n_lm ? r->lm_opts.precision : r->vit_opts.precision;
}

static cJSON *config_json(const al_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o || al_config_view(c, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    if (c->task == AL_TASK_VISION) cJSON_AddNumberToObject(o, "patches", al_config_num_patches(c));
    return o;
}

static cJSON *train_json(const al_train_opts *o, int vision) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "batch", o->batch);
    if (!vision) cJSON_AddNumberToObject(t, "context", o->context);
    cJSON_AddNumberToObject(t, "steps", o->steps);
    cJSON_AddNumberToObject(t, "warmup", o->warmup);
    cJSON_AddNumberToObject(t, "lr", o->lr);
    cJSON_AddNumberToObject(t, "min_lr_ratio", o->min_lr_ratio);
    cJSON_AddNumberToObject(t, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(t, "grad_clip", o->grad_clip);
    cJSON_AddNumberToObject(t, "eval_every", o->eval_every);
    if (vision) {
        cJSON_AddNumberToObject(t, "train_images", o->train_subset);
        cJSON_AddNumberToObject(t, "eval_images", o->eval_images);
        cJSON_AddNumberToObject(t, "images_per_run", (double)o->batch * o->steps);
    } else {
        cJSON_AddNumberToObject(t, "eval_tokens", o->eval_tokens);
        cJSON_AddNumberToObject(t, "val_fraction", o->val_fraction);
        cJSON_AddNumberToObject(t, "tokens_per_run", (double)o->batch * o->context * o->steps);
    }
    return t;
}

/* ---- conversions (study --conversions) ---- */

/* One design's conversions summarised over seeds (report.json, report.md). */
typedef struct conv_stats {
    int design, n;
    double kv_pct_of_mha;
    al_stat source, converted, uptrained, scratch, scratch_long;
} conv_stats;

/* The designs' conversions in design order; returns how many designs. */
static int conv_stats_of(const al_study_results *r, conv_stats out[AL_STUDY_DESIGNS]) {
    int n = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        double v[5][AL_STUDY_MAX_SEEDS];
        int c = 0;
        conv_stats *s = &out[n];
        for (int i = 0; i < r->n_conv && c < AL_STUDY_MAX_SEEDS; i++) {
            const al_study_conversion *x = &r->conv[i];
            if (x->design != k) continue;
            s->kv_pct_of_mha = x->kv_pct_of_mha;
            v[0][c] = x->loss_source, v[1][c] = x->loss_converted, v[2][c] = x->loss_uptrained;
            v[3][c] = x->loss_scratch, v[4][c] = x->loss_scratch_long;
            c++;
        }
        if (!c) continue;
        s->design = k, s->n = c;
        s->source = al_stat_of(v[0], c), s->converted = al_stat_of(v[1], c), s->uptrained = al_stat_of(v[2], c);
        s->scratch = al_stat_of(v[3], c), s->scratch_long = al_stat_of(v[4], c);
        n++;
    }
    return n;
}

/* report.json's "conversions" block: the steps, per design the summary over
 * seeds, and every conversion. */
static void conversions_json(const al_study_results *r, cJSON *root) {
    conv_stats cs[AL_STUDY_DESIGNS];
    const int n = conv_stats_of(r, cs);
    cJSON *cj = cJSON_AddObjectToObject(root, "conversions");
    cJSON_AddNumberToObject(cj, "source_steps", r->conv_source_steps);
    cJSON_AddNumberToObject(cj, "uptrain_steps", r->conv_uptrain_steps);
    cJSON_AddNumberToObject(cj, "scratch_steps", r->conv_long_steps);
    cJSON *des = cJSON_AddArrayToObject(cj, "designs");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", al_study_design(cs[i].design));
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", cs[i].kv_pct_of_mha);
        al_json_add(o, "loss_source", stat_json(&cs[i].source));
        al_json_add(o, "loss_converted", stat_json(&cs[i].converted));
        al_json_add(o, "loss_uptrained", stat_json(&cs[i].uptrained));
        al_json_add(o, "loss_scratch", stat_json(&cs[i].scratch));
        al_json_add(o, "loss_scratch_same_steps", stat_json(&cs[i].scratch_long));
        al_json_push(des, o);
    }
    cJSON *runs = cJSON_AddArrayToObject(cj, "runs");
    for (int i = 0; i < r->n_conv; i++) {
        const al_study_conversion *x = &r->conv[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", al_study_design(x->design));
        cJSON_AddNumberToObject(o, "seed", (double)x->seed);
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", x->kv_pct_of_mha);
        cJSON_AddNumberToObject(o, "loss_source", x->loss_source);
        cJSON_AddNumberToObject(o, "loss_converted", x->loss_converted);
        cJSON_AddNumberToObject(o, "loss_uptrained", x->loss_uptrained);
        cJSON_AddNumberToObject(o, "loss_scratch", x->loss_scratch);
        cJSON_AddNumberToObject(o, "loss_scratch_same_steps", x->loss_scratch_long);
        cJSON_AddStringToObject(o, "converted_dir", x->converted_dir);
        cJSON_AddStringToObject(o, "uptrained_dir", x->uptrained_dir);
        cJSON_AddStringToObject(o, "scratch_same_steps_dir", x->scratch_long_dir);
        al_json_push(runs, o);
    }
}

static char *report_json(const al_study_results *r, const design_stats *d, const vit_stats *v, const findings *f) {
    const unsigned long mark = al_json_mark();
    const al_study_budget *b = r->budget;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlab.study/1");
    cJSON_AddStringToObject(root, "attnlab_version", AL_VERSION);
    cJSON_AddStringToObject(root, "created_utc", r->created);
    cJSON_AddNumberToObject(root, "wall_seconds", r->wall_s);
    cJSON *bj = cJSON_AddObjectToObject(root, "budget");
    cJSON_AddStringToObject(bj, "name", b->name);
    cJSON_AddStringToObject(bj, "summary", b->summary);
    cJSON_AddNumberToObject(bj, "seeds", r->n_seeds);
    cJSON_AddNumberToObject(bj, "final_eval_tokens", (double)b->lm_final_eval_tokens);
    cJSON_AddNumberToObject(bj, "decode_context", b->decode_context);
    cJSON_AddNumberToObject(bj, "decode_tokens", b->decode_tokens);
    cJSON_AddNumberToObject(bj, "speed_rounds", b->speed_rounds);
    cJSON_AddNumberToObject(bj, "speed_steps", b->speed_steps);
    cJSON_AddNumberToObject(bj, "attnmap_tokens", b->attnmap_tokens);
    cJSON *mj = cJSON_AddObjectToObject(root, "machine");
    cJSON_AddNumberToObject(mj, "threads", r->threads);
    cJSON_AddStringToObject(mj, "blas_kernels", r->blas_kernels ? r->blas_kernels : "");
    cJSON_AddStringToObject(mj, "bf16_engine", al_precision_engine());
    cJSON_AddStringToObject(root, "precision", al_precision_name(study_precision(r)));
    cJSON *seeds = cJSON_AddArrayToObject(root, "seeds");
    for (int i = 0; i < r->n_seeds; i++) al_json_push(seeds, cJSON_CreateNumber((double)r->seeds[i]));
    cJSON *cj = cJSON_AddObjectToObject(root, "corpus");
    cJSON_AddStringToObject(cj, "path", r->corpus_path);
    cJSON_AddNumberToObject(cj, "bytes", (double)r->corpus_bytes);
    cJSON_AddNumberToObject(cj, "train_bytes", (double)r->train_bytes);
    cJSON_AddNumberToObject(cj, "val_bytes", (double)r->val_bytes);
    cJSON_AddNumberToObject(cj, "unigram_entropy_nats", r->unigram.train_entropy);
    cJSON_AddNumberToObject(cj, "unigram_entropy_bits", r->unigram.train_entropy / M_LN2);
    cJSON_AddNumberToObject(cj, "unigram_val_loss_nats", r->unigram.val_cross_entropy);
    cJSON_AddNumberToObject(cj, "unigram_val_bpb", r->unigram.val_cross_entropy / M_LN2);

    cJSON *lm = cJSON_AddObjectToObject(root, "language_models");
    al_json_add(lm, "settings", train_json(&r->lm_opts, 0));
    cJSON *res = cJSON_AddObjectToObject(lm, "resolution");
    if (r->n_seeds == 1) {
        cJSON_AddStringToObject(res, "rule",
                                "one seed: loss differences below threshold_pct of MHA's are not resolved");
        cJSON_AddNumberToObject(res, "threshold_pct", NOISE_PCT);
    } else {
        cJSON_AddStringToObject(res, "rule",
                                "several seeds: resolved when the designs' [min, max] over seeds do not overlap");
        cJSON_AddNullToObject(res, "threshold_pct");
    }
    cJSON *des = cJSON_AddArrayToObject(lm, "designs");
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        if (!d[k].first) continue;
        const al_study_lm_run *x = d[k].first;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", al_study_design(k));
        cJSON_AddStringToObject(o, "title", al_study_design_title(k));
        cJSON_AddNumberToObject(o, "params", (double)x->m.params);
        cJSON_AddNumberToObject(o, "kv_values_per_token_per_layer", (double)x->m.kv_values);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)x->m.kv_bytes_per_token);
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", x->m.kv_pct_of_mha);
        cJSON_AddNumberToObject(o, "seeds", d[k].loss.n);
        al_json_add(o, "val_loss", stat_json(&d[k].loss));
        al_json_add(o, "val_bpb", stat_json(&d[k].bpb));
        cJSON_AddNumberToObject(o, "train_tokens_per_s", r->speed[k].train_tokens_per_s);
        cJSON_AddNumberToObject(o, "decode_tokens_per_s", r->speed[k].decode_tokens_per_s);
        al_json_add(o, "train_tokens_per_s_runs", stat_json(&d[k].tps));
        al_json_add(o, "erank_uncentered_pct", stat_json(&d[k].erank_u));
        al_json_add(o, "erank_pca_pct", stat_json(&d[k].erank_p));
        cJSON_AddNumberToObject(o, "delta_vs_mha_pct", d[k].delta_pct);
        cJSON_AddBoolToObject(o, "resolved_vs_mha", d[k].resolved);
        al_json_add(o, "config", config_json(&x->cfg));
        al_json_push(des, o);
    }
    cJSON *runs = cJSON_AddArrayToObject(lm, "runs");
    for (int i = 0; i < r->n_lm; i++) {
        const al_study_lm_run *x = &r->lm[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", al_study_design(x->design));
        cJSON_AddNumberToObject(o, "seed", (double)x->seed);
        cJSON_AddStringToObject(o, "precision", al_precision_name(x->precision));
        cJSON_AddStringToObject(o, "dir", x->dir);
        cJSON_AddNumberToObject(o, "params", (double)x->m.params);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)x->m.kv_bytes_per_token);
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", x->m.kv_pct_of_mha);
        cJSON_AddNumberToObject(o, "val_loss", x->m.val_loss);
        cJSON_AddNumberToObject(o, "val_bpb", x->m.val_bpb);
        cJSON_AddNumberToObject(o, "val_tokens", (double)x->m.val_tokens);
        cJSON_AddNumberToObject(o, "train_tokens_per_s", x->train_tokens_per_s);
        cJSON_AddNumberToObject(o, "train_seconds", x->train_seconds);
        cJSON_AddNumberToObject(o, "erank_uncentered_pct", x->m.erank_uncentered_pct);
        cJSON_AddNumberToObject(o, "erank_pca_pct", x->m.erank_pca_pct);
        cJSON_AddNumberToObject(o, "mean_offdiag_similarity", x->m.mean_offdiag);
        cJSON *cv = cJSON_AddObjectToObject(o, "curve");
        cJSON *st = cJSON_AddArrayToObject(cv, "step"), *tk = cJSON_AddArrayToObject(cv, "tokens"),
              *vl = cJSON_AddArrayToObject(cv, "val_loss");
        for (int j = 0; j < x->log.n; j++) {
            al_json_push(st, cJSON_CreateNumber(x->log.step[j]));
            al_json_push(tk,
                                 cJSON_CreateNumber((double)x->log.step[j] * r->lm_opts.batch * r->lm_opts.context));
            al_json_push(vl, cJSON_CreateNumber(x->log.val_loss[j]));
        }
        al_json_push(runs, o);
    }

    cJSON *vj = cJSON_AddObjectToObject(root, "vision");
    cJSON_AddStringToObject(vj, "status", r->n_vit ? "done" : "skipped");
    cJSON_AddStringToObject(vj, "note", r->vision_note);
    cJSON_AddStringToObject(vj, "images", r->images_path);
    if (r->n_vit) al_json_add(vj, "settings", train_json(&r->vit_opts, 1));
    cJSON *vm = cJSON_AddArrayToObject(vj, "models");
    for (int k = 0; k < 2; k++) {
        if (!v[k].first) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "score", k ? "poly" : "softmax");
        cJSON_AddStringToObject(o, "title", v[k].first->title);
        cJSON_AddNumberToObject(o, "params", (double)v[k].first->m.params);
        cJSON_AddNumberToObject(o, "test_images", v[k].first->m.test_images);
        al_json_add(o, "accuracy", stat_json(&v[k].acc));
        al_json_add(o, "test_loss", stat_json(&v[k].loss));
        al_json_add(o, "train_images_per_s", stat_json(&v[k].ips));
        al_json_add(o, "erank_uncentered_pct", stat_json(&v[k].erank_u));
        al_json_add(o, "erank_pca_pct", stat_json(&v[k].erank_p));
        al_json_add(o, "config", config_json(&v[k].first->cfg));
        al_json_push(vm, o);
    }
    cJSON *vr = cJSON_AddArrayToObject(vj, "runs");
    for (int i = 0; i < r->n_vit; i++) {
        const al_study_vit_run *x = &r->vit[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "score", x->poly ? "poly" : "softmax");
        cJSON_AddNumberToObject(o, "seed", (double)x->seed);
        cJSON_AddStringToObject(o, "precision", al_precision_name(x->precision));
        cJSON_AddStringToObject(o, "dir", x->dir);
        cJSON_AddNumberToObject(o, "params", (double)x->m.params);
        cJSON_AddNumberToObject(o, "accuracy", x->m.accuracy);
        cJSON_AddNumberToObject(o, "test_loss", x->m.test_loss);
        cJSON_AddNumberToObject(o, "test_images", x->m.test_images);
        cJSON_AddNumberToObject(o, "train_images_per_s", x->train_images_per_s);
        cJSON_AddNumberToObject(o, "train_seconds", x->train_seconds);
        cJSON_AddNumberToObject(o, "erank_uncentered_pct", x->m.erank_uncentered_pct);
        cJSON_AddNumberToObject(o, "erank_pca_pct", x->m.erank_pca_pct);
        cJSON *cv = cJSON_AddObjectToObject(o, "curve");
        cJSON *st = cJSON_AddArrayToObject(cv, "step"), *im = cJSON_AddArrayToObject(cv, "images"),
              *vl = cJSON_AddArrayToObject(cv, "val_loss"), *va = cJSON_AddArrayToObject(cv, "val_accuracy");
        for (int j = 0; j < x->log.n; j++) {
            al_json_push(st, cJSON_CreateNumber(x->log.step[j]));
            al_json_push(im, cJSON_CreateNumber((double)x->log.step[j] * r->vit_opts.batch));
            al_json_push(vl, cJSON_CreateNumber(x->log.val_loss[j]));
            al_json_push(va, cJSON_CreateNumber(x->log.val_acc[j]));
        }
        al_json_push(vr, o);
    }
    if (r->n_vit && isfinite(r->cls.min[0])) {
        cJSON *ca = cJSON_AddObjectToObject(vj, "cls_attention");
        cJSON_AddNumberToObject(ca, "layer", r->cls.layer);
        cJSON_AddNumberToObject(ca, "head", r->cls.head);
        cJSON_AddNumberToObject(ca, "image", r->cls.image);
        cJSON_AddNumberToObject(ca, "label", r->cls.label);
        for (int k = 0; k < 2; k++) {
            cJSON *o = cJSON_AddObjectToObject(ca, k ? "poly" : "softmax");
            cJSON_AddNumberToObject(o, "min", r->cls.min[k]);
            cJSON_AddNumberToObject(o, "max", r->cls.max[k]);
        }
    }
    al_json_add(root, "kv_frontier", kv_json(r));
    if (r->n_conv) conversions_json(r, root);
    cJSON *fig = cJSON_AddArrayToObject(root, "figures");
    for (int i = 0; i < r->n_figures; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", r->figures[i].file);
        cJSON *dd = cJSON_AddArrayToObject(o, "data");
        for (int j = 0; j < 3; j++)
            if (r->figures[i].data[j][0]) al_json_push(dd, cJSON_CreateString(r->figures[i].data[j]));
        cJSON_AddStringToObject(o, "caption", r->figures[i].caption);
        al_json_push(fig, o);
    }
    cJSON *fj = cJSON_AddArrayToObject(root, "findings");
    for (int i = 0; i < f->n; i++) al_json_push(fj, cJSON_CreateString(f->text[i]));
    char *text = al_json_print(root, 1, mark);
    cJSON_Delete(root);
    return text;
}

/* ---- report.md and report.html: one writer, two markups ---- */

typedef struct doc {
    al_text b;
    int html;
} doc;

static void d_text(doc *d, const char *t) {
    if (d->html)
        text_html(&d->b, t);
    else
        al_text_printf(&d->b, "%s", t);
}

static void d_heading(doc *d, int level, const char *t) {
    if (d->html) {
        al_text_printf(&d->b, "<h%d>", level);
        text_html(&d->b, t);
        al_text_printf(&d->b, "</h%d>\n", level);
    } else {
        al_text_printf(&d->b, "\n%.*s %s\n\n", level, "######", t);
    }
}

static void d_para(doc *d, const char *t) {
    al_text_printf(&d->b, d->html ? "<p>" : "");
    d_text(d, t);
    al_text_printf(&d->b, d->html ? "</p>\n" : "\n\n");
}

/* A table: header cells, then rows via d_row; cells separated by '\t'. */
static void d_row(doc *d, const char *cells, int header) {
    char *copy = strdup(cells);
    if (!copy) {
        d->b.oom = 1;
        return;
    }
    int n = 0;
    al_text_printf(&d->b, d->html ? "<tr>" : "|");
    for (char *c = copy, *tab; c; c = tab ? tab + 1 : NULL, n++) {
        tab = strchr(c, '\t');
        if (tab) *tab = 0;
        if (d->html) {
            al_text_printf(&d->b, header ? "<th>" : "<td>");
            text_html(&d->b, c);
            al_text_printf(&d->b, header ? "</th>" : "</td>");
        } else {
            al_text_printf(&d->b, " %s |", c);
        }
    }
    al_text_printf(&d->b, d->html ? "</tr>\n" : "\n");
    if (header && !d->html) {
        al_text_printf(&d->b, "|");
        for (int i = 0; i < n; i++) al_text_printf(&d->b, "---|");
        al_text_printf(&d->b, "\n");
    }
    free(copy);
}

enum { D_PARA, D_ROW, D_HEADER_ROW };
/* A paragraph (D_PARA) or a table row (d_row) of printf-style text, of any length. */
static void d_printf(doc *d, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void d_printf(doc *d, int kind, const char *fmt, ...) {
    al_text t = {0};
    va_list ap;
    va_start(ap, fmt);
    al_text_vprintf(&t, fmt, ap);
    va_end(ap);
    if (t.oom)
        d->b.oom = 1;
    else if (kind == D_PARA)
        d_para(d, al_text_str(&t));
    else
        d_row(d, al_text_str(&t), kind == D_HEADER_ROW);
    free(t.s);
}

static void d_table_begin(doc *d) { al_text_printf(&d->b, d->html ? "<table>\n" : ""); }
static void d_table_end(doc *d) { al_text_printf(&d->b, d->html ? "</table>\n" : "\n"); }

static void d_figure(doc *d, const al_study_figure *f) {
    if (d->html) {
        al_text_printf(&d->b, "<figure><a href=\"%s\"><img src=\"%s\" alt=\"", f->file, f->file);
        text_html(&d->b, f->file);
        al_text_printf(&d->b, "\"></a><figcaption><b>%s</b>: ", f->file);
        text_html(&d->b, f->caption);
        al_text_printf(&d->b, " Data: ");
        for (int j = 0; j < 3; j++)
            if (f->data[j][0]) al_text_printf(&d->b, "%s<a href=\"%s\">%s</a>", j ? ", " : "", f->data[j], f->data[j]);
        al_text_printf(&d->b, ".</figcaption></figure>\n");
    } else {
        al_text_printf(&d->b, "![%s](%s)\n\n*%s*: %s Data: ", f->file, f->file, f->file, f->caption);
        for (int j = 0, listed = 0; j < 3; j++)
            if (f->data[j][0]) al_text_printf(&d->b, "%s%s", listed++ ? ", " : "", f->data[j]);
        al_text_printf(&d->b, ".\n\n");
    }
}

/* The KV frontier's section: settings, the points' table, the conclusion,
 * the figure. */
static void kv_section(doc *d, const al_study_results *r) {
    const al_kvf *f = &r->kv;
    d_heading(d, 2, "KV-cache compression: quality per byte");
    if (!f->n) {
        d_para(d, "Not measured.");
        return;
    }
    d_printf(d, D_PARA,
             "Each design's first-seed model scores the first %d predictions of the validation split through the real "
             "decode path (windows of %d decoded token by token from an empty cache) with each compression of %s "
             "(KIVI int: group %d, residual %d; h2o: heavy hitters by accumulated attention, with %s the kept "
             "entries quantised, MiniKV-style). Bytes per token are what the cache held, fp16 scales and the fp32 "
             "residual included; %% of MHA fp32 is against the MHA cache of the same heads and head width. "
             "docs/kvlab.md.",
             r->kv_tokens, r->kv_context, AL_KVF_STUDY_METHODS, r->kv_group, r->kv_residual, "+int2");
    d_table_begin(d);
    d_row(d, "design\tcompression\tKV bytes/token\t% of MHA fp32\tloss (nats/byte)\tvs uncompressed\tfrontier", 1);
    for (int i = 0; i < f->n; i++) {
        const al_kvf_point *p = &f->p[i];
        if (!p->ok) continue;
        const double delta = kv_delta_pct(f, i);
        char dl[32] = "-";
        if (isfinite(delta) && strcmp(p->method, "none"))
            al_strfmt(dl, sizeof dl, fabs(delta) < 0.005 ? "0.00 %%" : "%+.2f %%", delta); /* no "-0.00" */
        d_printf(d, D_ROW, "%s\t%s\t%.1f\t%.3g\t%.4f\t%s\t%s", p->label, p->method, p->bytes_per_token,
                 p->pct_of_mha_fp32, p->loss, dl, p->hull ? "hull" : p->pareto ? "Pareto" : "");
    }
    d_table_end(d);
    al_text c = {0};
    kv_conclusion(r, &c);
    if (c.oom) d->b.oom = 1;
    else d_para(d, al_text_str(&c));
    free(c.s);
    d_figure(d, &r->kv_figure);
}

/* The conversions' section (study --conversions): a table of the losses
 * and one sentence per design. */
static void conversions_doc(doc *d, const al_study_results *r) {
    conv_stats cs[AL_STUDY_DESIGNS];
    const int n = conv_stats_of(r, cs);
    const int n0 = r->conv_source_steps, nu = r->conv_uptrain_steps, nl = r->conv_long_steps;
    char s[5][96];
    d_heading(d, 2, "Converted from MHA vs trained from scratch");
    d_printf(d, D_PARA,
             "Each design converted from the MHA run of the same seed (as `attnlab convert` does: GQA/MQA by "
             "mean-pooling key and value heads, MLA by partial RoPE and a joint SVD into the latent, LRKV by a "
             "shared map and low-rank residuals; calibrated on the start of the training split), then uptrained "
             "for %d steps (a tenth of the MHA run's %d, at least 10; fresh optimizer, half the peak learning rate, "
             "warmup and intervals scaled by a tenth), against the same design trained from scratch for %d steps (the same total) "
             "and for the comparison's %d. A converted model keeps MHA's SwiGLU width, where the from-scratch "
             "presets adjust it to match parameters. Validation loss in nats/byte as above.",
             nu, n0, nl, n0);
    d_table_begin(d);
    d_printf(d, D_HEADER_ROW,
             "design	KV %% of MHA	after conversion	after uptraining (%d steps)	from scratch (%d steps)	from "
             "scratch (%d steps)	MHA source (%d steps)",
             nu, nl, n0, n0);
    for (int i = 0; i < n; i++) {
        fmt_stat(s[0], sizeof s[0], &cs[i].converted, 4, 1, 1);
        fmt_stat(s[1], sizeof s[1], &cs[i].uptrained, 4, 1, 1);
        fmt_stat(s[2], sizeof s[2], &cs[i].scratch_long, 4, 1, 1);
        fmt_stat(s[3], sizeof s[3], &cs[i].scratch, 4, 1, 1);
        fmt_stat(s[4], sizeof s[4], &cs[i].source, 4, 1, 1);
        d_printf(d, D_ROW, "%s	%.4g	%s	%s	%s	%s	%s", al_study_design_title(cs[i].design), cs[i].kv_pct_of_mha,
                 s[0], s[1], s[2], s[3], s[4]);
    }
    d_table_end(d);
    al_text_printf(&d->b, d->html ? "<ul>\n" : "");
    for (int i = 0; i < n; i++) {
        const conv_stats *c = &cs[i];
        const double gap = c->uptrained.mean - c->scratch_long.mean;
        al_text_printf(&d->b, d->html ? "<li>" : "- ");
        al_text t = {0};
        al_text_printf(&t,
                       "%s (%.4g %% of MHA's cache): conversion changes the loss by %+.4f nats/byte from the MHA "
                       "source's (%.4f to %.4f); %d steps of uptraining bring it to %.4f, %.4f %s the same design "
                       "trained from scratch for %d steps (%.4f)%s.",
                       al_study_design_title(c->design), c->kv_pct_of_mha, c->converted.mean - c->source.mean,
                       c->source.mean, c->converted.mean, nu, c->uptrained.mean, fabs(gap),
                       gap <= 0 ? "below" : "above", nl, c->scratch_long.mean, c->n > 1 ? " (means over seeds)" : "");
        if (t.oom) d->b.oom = 1;
        else d_text(d, al_text_str(&t));
        free(t.s);
        al_text_printf(&d->b, d->html ? "</li>\n" : "\n");
    }
    al_text_printf(&d->b, d->html ? "</ul>\n" : "\n");
}

static void write_doc(doc *d, const al_study_results *r, const design_stats *ds, const vit_stats *vs,
                      const findings *f) {
    const al_study_budget *b = r->budget;
    char s1[96], s2[96], s3[96]; /* a number with its range, or a count */
    if (d->html)
        al_text_printf(&d->b,
                       "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>attnlab study: "
                       "five KV designs and two score functions</title>\n<style>\nbody{font-family:'DejaVu "
                       "Sans',Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;"
                       "line-height:1.45}\ntable{border-collapse:collapse;margin:1em 0;font-size:0.92em}\n"
                       "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}\nth{background:#f3f3f3}\n"
                       "td:first-child,th:first-child{text-align:left}\nfigure{margin:1.5em 0}\nfigure "
                       "img{max-width:100%%;border:1px solid #eee}\nfigcaption{font-size:0.9em;color:#444}\n"
                       "li{margin:0.4em 0}\ncode{background:#f5f5f5;padding:1px 4px}\n</style></head><body>\n");
    d_heading(d, 1, "attnlab study: five KV designs and two score functions");
    d_printf(d, D_PARA,
             "Budget %s (%s); %d seed%s; attnlab %s; %s; %d thread%s, OpenBLAS %s kernels; matrix products in %s "
             "(bf16 engine: %s); this invocation took %.0f s.",
             b->name, b->summary, r->n_seeds, r->n_seeds == 1 ? "" : "s", AL_VERSION, r->created, r->threads,
             r->threads == 1 ? "" : "s", r->blas_kernels ? r->blas_kernels : "?",
             al_precision_name(study_precision(r)), al_precision_engine(), r->wall_s);

    d_heading(d, 2, "What the numbers show");
    al_text_printf(&d->b, d->html ? "<ul>\n" : "");
    for (int i = 0; i < f->n; i++) {
        al_text_printf(&d->b, d->html ? "<li>" : "- ");
        d_text(d, f->text[i]);
        al_text_printf(&d->b, d->html ? "</li>\n" : "\n");
    }
    al_text_printf(&d->b, d->html ? "</ul>\n" : "\n");

    d_heading(d, 2, "Language models: the five KV designs");
    fmt_count(s3, sizeof s3, (double)r->lm_opts.batch * r->lm_opts.context * r->lm_opts.steps);
    d_printf(d, D_PARA,
             "Corpus %s: %zu bytes, the last %zu held out for validation. Unigram baseline: entropy of the byte "
             "frequencies %.4f nats/byte (%.4f bits/byte); on the validation split %.4f nats/byte (%.4f bits/byte). "
             "Every model: %d layers, hidden %d, %d query heads, context %d; %d steps of batch %d (%s training "
             "bytes), lr %g, %d warmup steps, cosine to %g of the peak; validation loss over %zu bytes.",
             r->corpus_path, r->corpus_bytes, r->val_bytes, r->unigram.train_entropy, r->unigram.train_entropy / M_LN2,
             r->unigram.val_cross_entropy, r->unigram.val_cross_entropy / M_LN2, r->lm_opts.model.num_layers,
             r->lm_opts.model.hidden_size, r->lm_opts.model.num_heads, r->lm_opts.context, r->lm_opts.steps,
             r->lm_opts.batch, s3, r->lm_opts.lr, r->lm_opts.warmup, r->lm_opts.min_lr_ratio,
             ds[0].first ? ds[0].first->m.val_tokens : (size_t)0);
    d_table_begin(d);
    d_printf(
        d, D_HEADER_ROW,
        "design\tparams\tKV bytes/token\t%% of MHA\tval loss (nats/byte)\tbits/byte\tvs MHA\ttrain tokens/s\tdecode "
        "tokens/s @ %d (1 thread)\terank uncentered %%\terank PCA %%",
        b->decode_context);
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        if (!ds[k].first) continue;
        const al_lm_measure *m = &ds[k].first->m;
        fmt_stat(s1, sizeof s1, &ds[k].loss, 4, 1, 1);
        fmt_stat(s2, sizeof s2, &ds[k].bpb, 4, 1, 1);
        al_strfmt(s3, sizeof s3, k == 0 ? "-" : "%+.2f %%%s", ds[k].delta_pct, ds[k].resolved ? "" : " (n.r.)");
        d_printf(d, D_ROW, "%s\t%zu\t%zu\t%.4g\t%s\t%s\t%s\t%.0f\t%.0f\t%.1f\t%.1f", al_study_design_title(k),
                 m->params, m->kv_bytes_per_token, m->kv_pct_of_mha, s1, s2, s3, r->speed[k].train_tokens_per_s,
                 r->speed[k].decode_tokens_per_s, ds[k].erank_u.mean, ds[k].erank_p.mean);
    }
    d_table_end(d);
    d_para(d, r->n_seeds == 1
                  ? "n.r.: not resolved (under 2 % with one seed). Speeds: the best of the interleaved benchmark "
                    "rounds after training."
                  : "Values: mean \xc2\xb1 sample standard deviation over seeds (min\xe2\x80\x93max). n.r.: "
                    "not resolved (ranges over seeds overlap). Speeds: the best of the interleaved benchmark rounds "
                    "after training (first seed's models). Ranks: means over seeds.");
    if (r->n_seeds > 1) {
        d_heading(d, 3, "Every run");
        d_table_begin(d);
        d_row(d, "design\tseed\tval loss\tbits/byte\ttrain tokens/s (median of the run)\terank uncentered %\tdirectory", 1);
        for (int i = 0; i < r->n_lm; i++) {
            const al_study_lm_run *x = &r->lm[i];
            d_printf(d, D_ROW, "%s\t%llu\t%.4f\t%.4f\t%.0f\t%.1f\t%s", al_study_design_title(x->design),
                     (unsigned long long)x->seed, x->m.val_loss, x->m.val_bpb, x->train_tokens_per_s,
                     x->m.erank_uncentered_pct, x->dir);
        }
        d_table_end(d);
    }

    kv_section(d, r);

    d_heading(d, 2, "Vision: softmax vs polynomial attention");
    if (r->vit_opts.train_subset) al_strfmt(s3, sizeof s3, "the first %d", r->vit_opts.train_subset);
    else al_strfmt(s3, sizeof s3, "all");
    if (r->n_vit) {
        d_printf(
            d, D_PARA,
            "Fashion-MNIST (%s), 28 x 28 images in 2 x 2 patches (196 patches + CLS). ViT: %d layers, hidden %d, %d "
            "heads; %d steps of %d images (%s training images), lr %g. Accuracy over %d test images.",
            r->images_path, r->vit_opts.model.num_layers, r->vit_opts.model.hidden_size, r->vit_opts.model.num_heads,
            r->vit_opts.steps, r->vit_opts.batch, s3, r->vit_opts.lr, vs[0].first ? vs[0].first->m.test_images : 0);
        d_table_begin(d);
        d_row(d, "model\tparams\ttest accuracy %\ttest loss\ttrain images/s\terank uncentered %\terank PCA %", 1);
        for (int k = 0; k < 2; k++) {
            if (!vs[k].first) continue;
            fmt_stat(s1, sizeof s1, &vs[k].acc, 2, 100, 1);
            fmt_stat(s2, sizeof s2, &vs[k].loss, 4, 1, 1);
            d_printf(d, D_ROW, "%s\t%zu\t%s\t%s\t%.0f\t%.1f\t%.1f", vs[k].first->title, vs[k].first->m.params, s1, s2,
                     vs[k].ips.mean, vs[k].erank_u.mean, vs[k].erank_p.mean);
        }
        d_table_end(d);
    } else {
        d_para(d, r->vision_note[0] ? r->vision_note : "Not run.");
    }

    if (r->n_conv) conversions_doc(d, r);
    d_heading(d, 2, "Figures");
    for (int i = 0; i < r->n_figures; i++) d_figure(d, &r->figures[i]);

    d_heading(d, 2, "Files and reproduction");
    d_printf(d, D_PARA,
             "Checkpoints (config.json, model.safetensors, train_state.safetensors, log.jsonl, measure.json) are in "
             "runs/<design>-seed<seed>/ and runs/vit-<score>-seed<seed>/. report.json holds every number above "
             "(schema in docs/study.md). Rerunning `attnlab study --out %s --budget %s` skips finished runs and "
             "rewrites the reports. One run by hand: `attnlab train --preset mha --context %d --batch %d --steps %d "
             "--warmup %d --lr %g --eval-every %d --eval-tokens %d --seed %llu --out DIR`.",
             r->out, b->name, r->lm_opts.context, r->lm_opts.batch, r->lm_opts.steps, r->lm_opts.warmup, r->lm_opts.lr,
             r->lm_opts.eval_every, r->lm_opts.eval_tokens, (unsigned long long)r->lm_opts.seed);
    if (d->html) al_text_printf(&d->b, "</body></html>\n");
}

/* Writes text[0..len) to DIR/NAME atomically. */
static int write_report(const char *dir, const char *name, const char *text, size_t len, al_err *err) {
    char *path = al_study_join(dir, name, err);
    if (!path) return -1;
    int rc = al_write_file_atomic(path, text, len, err);
    free(path);
    return rc;
}

int al_study_write_reports(const al_study_results *r, al_err *err) {
    design_stats ds[AL_STUDY_DESIGNS];
    vit_stats vs[2];
    findings f = {0};
    lm_stats(r, ds);
    vit_stats_of(r, vs);
    lm_findings(r, ds, &f);
    vit_findings(r, vs, &f);
    int rc = f.oom        ? al_errf(err, "out of memory")
             : f.too_many ? al_errf(err, "more than %d findings", MAX_FINDINGS)
                          : 0;
    char *json = rc ? NULL : report_json(r, ds, vs, &f);
    if (!rc) rc = json ? write_report(r->out, "report.json", json, strlen(json), err) : al_errf(err, "out of memory");
    free(json);
    for (int html = 0; html < 2 && !rc; html++) {
        doc d = {{0}, html};
        write_doc(&d, r, ds, vs, &f);
        rc = d.b.oom ? al_errf(err, "out of memory")
                     : write_report(r->out, html ? "report.html" : "report.md", d.b.s, d.b.len, err);
        free(d.b.s);
    }
    findings_free(&f);
    return rc;
}
