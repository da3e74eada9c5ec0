/*
 * weights.c: the --weights flag of the inference commands (generate, eval,
 * bench decode, bench prefill). f32 (the default) runs attnlab's models on
 * their fp32 arena; bf16 converts its matrices to BF16 once after loading
 * (al_model_weights_bf16), which halves the bytes a decode step reads. A
 * Hugging Face checkpoint always runs in its file dtype: bf16 is accepted
 * for a BF16 checkpoint (nothing to do) and refused for others, since
 * attnlab does not convert a memory-mapped checkpoint.
 */
#include <string.h>

#include "cli.h"
#include "model/model.h"

int cli_weights_check(const char *cmd, const char *weights) {
    if (!strcmp(weights, "f32") || !strcmp(weights, "bf16")) return CLI_OK;
    return cli_usage(cmd, "--weights must be f32 or bf16, got '%s'", weights);
}

int cli_weights_apply(const char *cmd, const char *weights, al_model *m) {
    if (strcmp(weights, "bf16")) return CLI_OK;
    if (m->cfg.task != AL_TASK_LM) return cli_usage(cmd, "--weights bf16 is for language models, not a vision model");
    if (m->mapped) {
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].ndim == 2 && m->dts[i] != AL_DT_BF16)
                return cli_usage(cmd,
                                 "--weights bf16: this Hugging Face checkpoint holds %s matrices, which run as "
                                 "stored (only a BF16 checkpoint takes --weights bf16)",
                                 al_dtype_name(m->dts[i]));
        return CLI_OK; /* a BF16 checkpoint runs in BF16 already */
    }
    al_err err;
    if (al_model_weights_bf16(m, &err)) return cli_fail(cmd, err.msg);
    return CLI_OK;
}
