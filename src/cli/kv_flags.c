/*
 * kv_flags.c: the quantised-cache and eviction flags shared by `eval` and
 * `bench decode` (cli.h): their rows, whether any was given, and their check
 * against the model's cache (attn/kvq.h, attn/kve.h) as one-line usage
 * errors.
 */
#include <limits.h>
#include <string.h>

#include "cli.h"
#include "model/model.h"

int cli_kvq_args(cli_kvq_flags *f, al_arg *args) {
    *f = (cli_kvq_flags){"none", "channel", 32, 32};
    args[0] = (al_arg){"kv-quant", ARG_STRING, &f->quant,
                       "KV cache quantisation: none, int8, int4 or int2 (KIVI: keys per channel, values per token)"};
    args[1] = (al_arg){"kv-group", ARG_INT, &f->group,
                       "quantised cache: tokens per key block and channels per value group (default 32, at most a "
                       "head's width)"};
    args[2] = (al_arg){"kv-residual", ARG_INT, &f->residual, "quantised cache: newest tokens kept unquantised (default 32)"};
    args[3] = (al_arg){"kv-latent", ARG_STRING, &f->latent,
                       "quantised MLA cache: its latent c~ per channel (default) or per token"};
    return CLI_KVQ_ARGS;
}

int cli_kvq_given(al_arg *args, int n) {
    static const char *const names[CLI_KVQ_ARGS] = {"kv-quant", "kv-group", "kv-residual", "kv-latent"};
    for (int i = 0; i < CLI_KVQ_ARGS; i++)
        if (cli_find(args, n, names[i])->seen) return 1;
    return 0;
}

int cli_kvq_resolve(const char *cmd, const cli_kvq_flags *f, const struct al_model *m, al_kvq_opts *out) {
    const int kind = al_kvq_from_name(f->quant);
    if (kind < 0) return cli_usage(cmd, "--kv-quant must be none, int8, int4 or int2, got '%s'", f->quant);
    if (strcmp(f->latent, "channel") && strcmp(f->latent, "token"))
        return cli_usage(cmd, "--kv-latent must be channel or token, got '%s'", f->latent);
    if (f->group < 1 || f->group > 256) return cli_usage(cmd, "--kv-group must be in 1..256, got %ld", f->group);
    if (f->residual < 0 || f->residual > 1000000000L)
        return cli_usage(cmd, "--kv-residual must not be negative, got %ld", f->residual);
    *out = (al_kvq_opts){(al_kvq_kind)kind, (int)f->group, (int)f->residual,
                         strcmp(f->latent, "token") ? AL_KVQ_LATENT_CHANNEL : AL_KVQ_LATENT_TOKEN};
    if (kind == AL_KVQ_NONE) return 0;
    al_kv_seg segs[AL_KV_MAX_SEGS];
    al_err err;
    if (!m->attn->cache_segments) return cli_usage(cmd, "%s attention has no quantised KV cache", m->attn->name);
    const int nseg = m->attn->cache_segments(&m->cfg, out->latent, segs);
    if (al_kvq_check(out, segs, nseg, &err)) return cli_usage(cmd, "%s", err.msg);
    return 0;
}

int cli_kve_args(cli_kve_flags *f, al_arg *args) {
    *f = (cli_kve_flags){"none", "uniform", 0.5, LONG_MIN, 0}; /* LONG_MIN: the method's default sinks */
    args[0] = (al_arg){"kv-evict", ARG_STRING, &f->evict,
                       "KV cache eviction: none, window (sinks + recent), h2o (sinks + recent + heavy hitters) or "
                       "snapkv (the prompt's keys voted by its last queries)"};
    args[1] = (al_arg){"kv-budget", ARG_DOUBLE, &f->budget,
                       "eviction: positions kept, a fraction in (0, 1] of those seen or a count >= 2 (default 0.5)"};
    args[2] = (al_arg){"kv-sinks", ARG_INT, &f->sinks, "eviction: first positions always kept (default 4; snapkv 0)"};
    args[3] = (al_arg){"kv-prompt", ARG_INT, &f->prompt, "snapkv: the prompt's tokens (default half the window)"};
    args[4] = (al_arg){"kv-layer-budget", ARG_STRING, &f->layer_budget,
                       "eviction: uniform (default) or pyramid (more in lower layers, same total)"};
    return CLI_KVE_ARGS;
}

int cli_kve_given(al_arg *args, int n) {
    static const char *const names[CLI_KVE_ARGS] = {"kv-evict", "kv-budget", "kv-sinks", "kv-prompt",
                                                    "kv-layer-budget"};
    for (int i = 0; i < CLI_KVE_ARGS; i++)
        if (cli_find(args, n, names[i])->seen) return 1;
    return 0;
}

int cli_kve_resolve(const char *cmd, const cli_kve_flags *f, const al_kvq_opts *q, int T, al_kve_opts *out) {
    const int method = al_kve_from_name(f->evict);
    if (method < 0) return cli_usage(cmd, "--kv-evict must be none, window, h2o or snapkv, got '%s'", f->evict);
    if (strcmp(f->layer_budget, "uniform") && strcmp(f->layer_budget, "pyramid"))
        return cli_usage(cmd, "--kv-layer-budget must be uniform or pyramid, got '%s'", f->layer_budget);
    if ((f->sinks < 0 && f->sinks != LONG_MIN) || f->sinks > 1000000000L) return cli_usage(cmd, "--kv-sinks must not be negative, got %ld", f->sinks);
    if (f->prompt < 0 || f->prompt > 1000000000L)
        return cli_usage(cmd, "--kv-prompt must be in 1..%d (inside the %d-token window), got %ld", T, T, f->prompt);
    const int sinks = f->sinks >= 0 ? (int)f->sinks : method == AL_KVE_SNAPKV ? 0 : 4;
    *out = (al_kve_opts){(al_kve_method)method, f->budget, sinks, (int)f->prompt,
                         strcmp(f->layer_budget, "pyramid") ? AL_KVE_UNIFORM : AL_KVE_PYRAMID};
    al_err err;
    (void)q;
    if (al_kve_check(out, T, &err)) return cli_usage(cmd, "%s", err.msg);
    return 0;
}
