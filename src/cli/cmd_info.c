/*
 * cmd_info.c: `attnlab info`: what a model is and what it costs: parameters,
 * FLOPs per token, and KV-cache bytes per token by the design's closed form
 * next to the bytes a decoder actually allocates for a given context; the
 * weights' dtype and bytes (for a memory-mapped Hugging Face checkpoint: how
 * much is used in place from the files and how much was copied) and the
 * resident memory after loading. For a vision model: parameters, patches and
 * FLOPs per image (no cache: a ViT does not decode).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/ceiling.h"
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

/* The closed form of attention.md 3.6 for this design, in words. */
static void cache_formula(const al_config *c, char *buf, size_t cap) {
    switch (c->attention) {
    case AL_ATTN_MLA:
        snprintf(buf, cap, "d_c %d + d_r %d (latent + shared RoPE key)", c->kv_lora_rank, c->qk_rope_head_dim);
        break;
    case AL_ATTN_LRKV:
        snprintf(buf, cap, "2 x (d_h %d + %d heads x r %d) (shared K/V + per-head latents)", c->head_dim, c->num_heads,
                 c->lrkv_rank);
        break;
    default: snprintf(buf, cap, "2 x %d KV heads x %d", c->num_kv_heads, c->head_dim);
    }
}

/* The design in one line (shared by both tasks). */
static void design_line(const al_config *c) {
    if (c->attention == AL_ATTN_MLA)
        printf("design      mla attention (%d heads; d_c %d, q rank %d, key dims %d + %d RoPE, value dims %d), %s scores\n",
               c->num_heads, c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim,
               al_score_name(c->score));
    else if (c->attention == AL_ATTN_LRKV)
        printf("design      lrkv attention (%d heads, head dim %d, rank %d), %s scores\n", c->num_heads, c->head_dim,
               c->lrkv_rank, al_score_name(c->score));
    else
        printf("design      %s attention (%d query heads, %d KV heads, head dim %d), %s scores\n",
               al_attn_name(c->attention), c->num_heads, c->num_kv_heads, c->head_dim, al_score_name(c->score));
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
    if (json) {
        printf("{\"model\":\"%s\",\"task\":\"vision\",\"attention\":\"%s\",\"score\":\"%s\",\"layers\":%d,"
               "\"hidden\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"kv_lora_rank\":%d,\"q_lora_rank\":%d,"
               "\"qk_nope_head_dim\":%d,\"qk_rope_head_dim\":%d,\"v_head_dim\":%d,\"lrkv_rank\":%d,"
               "\"intermediate\":%d,\"image_size\":%d,\"patch_size\":%d,\"channels\":%d,\"num_labels\":%d,"
               "\"patches\":%d,\"sequence\":%d,\"score_n\":%d,\"params\":%zu,\"params_embedding\":%zu,"
               "\"params_blocks\":%zu,\"params_head\":%zu,\"fwd_flops_per_image\":%.6g,"
               "\"train_flops_per_image\":%.6g}\n",
               model_dir, al_attn_name(c->attention), al_score_name(c->score), c->num_layers, c->hidden_size,
               c->num_heads, c->num_kv_heads, c->head_dim, c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim,
               c->qk_rope_head_dim, c->v_head_dim, c->lrkv_rank, c->intermediate_size, c->image_size, c->patch_size,
               c->num_channels, c->num_labels, P, P + 1, c->score_n, total, embed, total - embed - head, head, fwd,
               3 * fwd);
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
    return 0;
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
    /* the MHA of the same heads; its head width is MLA's value width (MLA's
     * key width qk_nope + qk_rope includes the extra RoPE part) */
    int mha_dh = c->attention == AL_ATTN_MLA ? c->v_head_dim : c->head_dim;
    size_t mha_vpt = 2 * (size_t)c->num_heads * mha_dh;
    size_t bytes_per_token = vpt * al_dtype_size(kv_dt) * (size_t)c->num_layers;
    size_t formula_bytes = bytes_per_token * (size_t)T;
    double ratio = (double)vpt / (double)mha_vpt;
    double fwd = al_model_fwd_flops_per_token(&m, T);
    if (json) {
        printf("{\"model\":\"%s\",\"attention\":\"%s\",\"score\":\"%s\",\"layers\":%d,\"hidden\":%d,\"heads\":%d,"
               "\"kv_heads\":%d,\"head_dim\":%d,\"kv_lora_rank\":%d,\"q_lora_rank\":%d,\"qk_nope_head_dim\":%d,"
               "\"qk_rope_head_dim\":%d,\"v_head_dim\":%d,\"lrkv_rank\":%d,\"intermediate\":%d,\"tied\":%s,\"params\":%zu,"
               "\"params_non_embedding\":%zu,\"fwd_flops_per_token\":%.6g,\"train_flops_per_token\":%.6g,"
               "\"context\":%d,\"kv_values_per_token_per_layer\":%zu,\"kv_bytes_per_token\":%zu,"
               "\"kv_ratio_to_mha\":%.6f,\"kv_dtype\":\"%s\",\"kv_bytes_formula\":%zu,\"kv_bytes_allocated\":%zu,"
               "\"architecture\":\"%s\","
               "\"vocab\":%d,\"max_context\":%d,\"mapped\":%s,\"dtype\":\"%s\",\"weight_bytes\":%zu,"
               "\"mapped_bytes\":%zu,\"copied_bytes\":%zu,\"rss_bytes\":%ld,\"rss_file_bytes\":%ld,"
               "\"rss_anon_bytes\":%ld}\n",
               model_dir, al_attn_name(c->attention), al_score_name(c->score), c->num_layers, c->hidden_size,
               c->num_heads, c->num_kv_heads, c->head_dim, c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim,
               c->qk_rope_head_dim, c->v_head_dim, c->lrkv_rank, c->intermediate_size,
               c->tie_word_embeddings ? "true" : "false", total, total - embed, fwd, 3 * fwd, T, vpt, bytes_per_token,
               ratio, al_dtype_name(kv_dt), formula_bytes, dec.cache_bytes, al_config_architecture(c), c->vocab_size,
               al_config_max_context(c), m.mapped ? "true" : "false", weights_dtype(&m), al_model_weight_bytes(&m),
               m.mapped_bytes, m.copied_bytes, rss, rss_file, rss_anon);
    } else {
        printf("model       %s\n", model_dir);
        design_line(c);
        printf("shape       %d layers, hidden %d, SwiGLU %d, vocab %d, %s head, max context %d\n", c->num_layers,
               c->hidden_size, c->intermediate_size, c->vocab_size, c->tie_word_embeddings ? "tied" : "untied",
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
        cache_formula(c, formula, sizeof formula);
        printf("KV cache    %zu values per token per layer = %s: %.2f%% of MHA's 2 x %d heads x %d = %zu\n", vpt,
               formula, 100 * ratio, c->num_heads, mha_dh, mha_vpt);
        printf("            %zu bytes per token (%s, %d layers); %zu bytes for %d tokens; allocated %zu\n",
               bytes_per_token, kv_dt == AL_DT_BF16 ? "bfloat16" : "float32", c->num_layers, formula_bytes, T,
               dec.cache_bytes);
    }
    al_decoder_free(&dec);
    al_model_free(&m);
    return 0;
}
