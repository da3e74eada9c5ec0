/*
 * cmd_info.c: `attnlab info`: what a model is and what it costs: parameters,
 * FLOPs per token, and KV-cache bytes per token by the design's closed form
 * next to the bytes a decoder actually allocates for a given context; the
 * weights' dtype and bytes (for a memory-mapped Hugging Face checkpoint: how
 * much is used in place from the files and how much was copied) and the
 * resident memory after loading. For a vision model: parameters, patches and
 * FLOPs per image (no cache: a ViT does not decode).
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ceiling.h"
#include "io/io.h"
#include "model/model.h"

/* The dtype(s) of the matrices: "BF16", "F32", or "mixed". */
static const char *weights_dtype(const al_model *m) {
    if (!m->dts) return "F32";
    int first = -1;
    for (int i = 0; i < m->n_params; i++) {
        if (m->params[i].ndim != 2) continue;
        if (first < 0) first = (int)m->dts[i];
        else if (first != (int)m->dts[i]) return "mixed";
    }
    return first < 0 ? "F32" : al_dtype_name((al_dtype)first);
}

/* The design in one line (shared by both tasks): the design's own words. */
/* The MLP part of the shape line: "SwiGLU 2048", "GeGLU 16384", or for a
 * mixture of experts its dense width, experts, top-k and shared experts. */
static void mlp_text(char *buf, size_t cap, const al_config *c) {
    const char *glu = c->mlp_act == AL_ACT_GELU_TANH ? "GeGLU" : "SwiGLU";
    if (c->n_routed_experts <= 0) {
        al_strfmt(buf, cap, "%s %d", glu, c->intermediate_size);
        return;
    }
    al_strfmt(buf, cap, "%s %d (dense layers), MoE %d experts x %d, top %d, %d shared", glu, c->intermediate_size,
              c->n_routed_experts, c->moe_intermediate_size, c->num_experts_per_tok, c->n_shared_experts);
}

static void design_line(const al_config *c) {
    char text[256];
    al_attn_describe(c, text, sizeof text);
    printf("design      %s, %s scores\n", text, al_score_name(c->score));
}

/* Prints one JSON object: the config's view (al_config_view) plus `extra`'s
 * members (info's own numbers, built since mark), then frees extra. Returns
 * 0, or 1 when out of memory (message printed). */
static int print_json(const char *cmd, const al_config *c, cJSON *extra, unsigned long mark) {
    cJSON *root = cJSON_CreateObject();
    int bad = !root || !extra || al_config_view(c, root);
    while (!bad && extra->child) {
        cJSON *item = cJSON_DetachItemViaPointer(extra, extra->child);
        cJSON_DeleteItemFromObjectCaseSensitive(root, item->string); /* info's number wins over the view's */
        bad = !al_json_add(root, item->string, item);
    }
    char *text = bad ? NULL : al_json_print(root, 0, mark);
    cJSON_Delete(root);
    cJSON_Delete(extra);
    if (!text) return cli_fail(cmd, "out of memory");
    printf("%s\n", text);
    free(text);
    return 0;
}

/* A vision model: its shape, parameters split by part, patches and FLOPs. */
static int info_vision(const char *model_dir, al_model *m, int json) {
    const al_config *c = &m->cfg;
    const int P = al_config_num_patches(c);
    size_t total = 0, embed = 0, head = 0;
    for (int i = 0; i < m->n_params; i++) {
        total += m->params[i].numel;
        if (!strncmp(m->params[i].name, "vit.", 4)) embed += m->params[i].numel;
        if (!strncmp(m->params[i].name, "classifier.", 11)) head += m->params[i].numel;
    }
    const double fwd = al_vit_fwd_flops_per_image(m);
    int rc = 0;
    if (json) {
        const unsigned long mark = al_json_mark();
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model_dir);
        cJSON_AddNumberToObject(j, "patches", P);
        cJSON_AddNumberToObject(j, "sequence", P + 1);
        cJSON_AddNumberToObject(j, "params", (double)total);
        cJSON_AddNumberToObject(j, "params_embedding", (double)embed);
        cJSON_AddNumberToObject(j, "params_blocks", (double)(total - embed - head));
        cJSON_AddNumberToObject(j, "params_head", (double)head);
        cJSON_AddNumberToObject(j, "fwd_flops_per_image", fwd);
        cJSON_AddNumberToObject(j, "train_flops_per_image", 3 * fwd);
        rc = print_json("info", c, j, mark);
    } else {
        printf("model       %s\n", model_dir);
        printf("task        vision transformer: %d x %d x %d images, %d x %d patches -> %d patches + CLS, %d classes\n",
               c->num_channels, c->image_size, c->image_size, c->patch_size, c->patch_size, P, c->num_labels);
        design_line(c);
        if (c->score != AL_SCORE_SOFTMAX) printf("            score N = %d (bidirectional)\n", c->score_n);
        printf("shape       %d layers, hidden %d, SwiGLU %d, bidirectional attention over %d tokens\n", c->num_layers,
               c->hidden_size, c->intermediate_size, P + 1);
        printf("parameters  %zu (embedding %zu, blocks %zu, classifier %zu)\n", total, embed, total - embed - head, head);
        printf("FLOPs/image %.4g forward, %.4g training\n", fwd, 3 * fwd);
        printf("KV cache    none (a ViT classifies whole images; it does not decode)\n");
    }
    al_model_free(m);
    return rc;
}

int cmd_info(int argc, char **argv) {
    const char *cmd = "info";
    const char *model_dir = NULL, *kv_dtype = "f32";
    long context = 0;
    int json = 0;
    al_arg args[] = {
        {"model", ARG_STRING, &model_dir, "model directory"},
        {"context", ARG_INT, &context,
         "context for FLOPs and cache allocation (default: max_position_embeddings; Hugging Face checkpoints: at most 4096)"},
        {"kv-dtype", ARG_STRING, &kv_dtype, "KV cache values the bytes are counted in: f32 or bf16"},
        {"json", ARG_FLAG, &json, "print one JSON object"},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model DIR [--context T] [--kv-dtype bf16] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir) return cli_usage(cmd, "--model DIR is required");
    al_dtype kv_dt;
    if ((rc = cli_kv_dtype(cmd, kv_dtype, &kv_dt))) return rc;
    al_err err;
    al_model m;
    if (al_model_load(&m, model_dir, NULL, &err)) return cli_fail(cmd, err.msg);
    if (m.cfg.task == AL_TASK_VISION) {
        if (cli_find(args, n, "context")->seen) {
            al_model_free(&m);
            return cli_usage(cmd, "--context does not apply to a vision model (its sequence is 1 + patches)");
        }
        return info_vision(model_dir, &m, json);
    }
    const al_config *c = &m.cfg;
    long rss, rss_anon, rss_file;
    al_rss_now(&rss, &rss_anon, &rss_file); /* after loading, before the cache */
    int T = context > 0 ? (int)context : al_config_max_context(c);
    if (context <= 0 && c->hf != AL_HF_NONE && T > 4096) T = 4096; /* the cache is allocated: keep it modest */
    al_decoder dec;
    if (al_decoder_create_kv(&dec, &m, T, kv_dt, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    size_t total = 0;
    for (int i = 0; i < m.n_params; i++) total += m.params[i].numel;
    size_t embed = (size_t)c->vocab_size * c->hidden_size;
    size_t vpt = m.attn->cache_values_per_token(c);
    /* the MHA of the same heads, with the design's value width (MLA's key
     * width qk_nope + qk_rope includes the extra RoPE part) */
    int dk, mha_dh;
    al_attn_head_widths(c, &dk, &mha_dh);
    size_t mha_vpt = 2 * (size_t)c->num_heads * mha_dh;
    size_t bytes_per_token = vpt * al_dtype_size(kv_dt) * (size_t)c->num_layers;
    size_t formula_bytes = bytes_per_token * (size_t)T;
    double ratio = (double)vpt / (double)mha_vpt;
    double fwd = al_model_fwd_flops_per_token(&m, T);
    if (json) {
        const unsigned long mark = al_json_mark();
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model_dir);
        cJSON_AddNumberToObject(j, "params", (double)total);
        cJSON_AddNumberToObject(j, "params_non_embedding", (double)(total - embed));
        cJSON_AddNumberToObject(j, "fwd_flops_per_token", fwd);
        cJSON_AddNumberToObject(j, "train_flops_per_token", 3 * fwd);
        cJSON_AddNumberToObject(j, "context", T);
        cJSON_AddNumberToObject(j, "kv_values_per_token_per_layer", (double)vpt);
        cJSON_AddNumberToObject(j, "kv_bytes_per_token", (double)bytes_per_token);
        cJSON_AddNumberToObject(j, "kv_ratio_to_mha", ratio);
        cJSON_AddStringToObject(j, "kv_dtype", al_dtype_name(kv_dt));
        cJSON_AddNumberToObject(j, "kv_bytes_formula", (double)formula_bytes);
        cJSON_AddNumberToObject(j, "kv_bytes_allocated", (double)dec.cache_bytes);
        cJSON_AddStringToObject(j, "architecture", al_config_architecture(c));
        cJSON_AddNumberToObject(j, "max_context", al_config_max_context(c));
        cJSON_AddBoolToObject(j, "mapped", m.mapped);
        cJSON_AddStringToObject(j, "dtype", weights_dtype(&m));
        cJSON_AddNumberToObject(j, "weight_bytes", (double)al_model_weight_bytes(&m));
        cJSON_AddNumberToObject(j, "mapped_bytes", (double)m.mapped_bytes);
        cJSON_AddNumberToObject(j, "copied_bytes", (double)m.copied_bytes);
        cJSON_AddNumberToObject(j, "rss_bytes", (double)rss);
        cJSON_AddNumberToObject(j, "rss_file_bytes", (double)rss_file);
        cJSON_AddNumberToObject(j, "rss_anon_bytes", (double)rss_anon);
        rc = print_json(cmd, c, j, mark);
    } else {
        printf("model       %s\n", model_dir);
        design_line(c);
        char mlp[160];
        mlp_text(mlp, sizeof mlp, c);
        printf("shape       %d layers, hidden %d, %s, vocab %d, %s head, max context %d\n", c->num_layers,
               c->hidden_size, mlp, c->vocab_size, c->tie_word_embeddings ? "tied" : "untied",
               c->max_position);
        printf("parameters  %zu (%zu without the embedding)\n", total, total - embed);
        if (m.mapped)
            printf("weights     %s %s, %zu bytes: %zu used in place from the memory-mapped files, %zu copied "
                   "(1-D tensors as float32)\n",
                   al_config_architecture(c), weights_dtype(&m), al_model_weight_bytes(&m), m.mapped_bytes,
                   m.copied_bytes);
        else
            printf("weights     float32 arena, %zu bytes\n", al_model_weight_bytes(&m));
        if (c->sliding_window > 0)
            printf("context     limited to the sliding_window %d (attnlab runs contexts where the window cannot matter)\n",
                   c->sliding_window);
        printf("resident    %.1f MB after loading (%.1f MB file pages, %.1f MB anonymous)\n", rss / 1e6, rss_file / 1e6,
               rss_anon / 1e6);
        printf("FLOPs/token %.4g forward, %.4g training (context %d)\n", fwd, 3 * fwd, T);
        char formula[160];
        al_attn_cache_formula(c, formula, sizeof formula);
        printf("KV cache    %zu values per token per layer = %s: %.2f%% of MHA's 2 x %d heads x %d = %zu\n", vpt,
               formula, 100 * ratio, c->num_heads, mha_dh, mha_vpt);
        printf("            %zu bytes per token (%s, %d layers); %zu bytes for %d tokens; allocated %zu\n",
               bytes_per_token, kv_dt == AL_DT_BF16 ? "bfloat16" : "float32", c->num_layers, formula_bytes, T,
               dec.cache_bytes);
    }
    al_decoder_free(&dec);
    al_model_free(&m);
    return rc;
}
