/*
 * kv_flags.c: the quantised-cache flags shared by `eval` and `bench decode`
 * (cli.h): their rows, whether any was given, and their check against the
 * model's cache (attn/kvq.h) as one-line usage errors.
 */
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
