/*
 * test_hf.c: Hugging Face checkpoints in C (src/model/hf.c, src/io/ckpt.c,
 * the HF side of config.c):
 *   - the same weights as attnlab's own fp32 arena model and as an HF
 *     checkpoint (tensors in name order, so q/k/v are apart; F32, BF16, F16;
 *     Llama GQA and DeepseekV2 MLA with and without query compression) give
 *     the same logits through the mapped path, forward and decode;
 *   - decode == forward on the mapped model;
 *   - the mapping is used in place: every matrix view lies inside a mapped
 *     file, only 1-D tensors are on the heap (as fp32), and running a forward
 *     over a 25 MB BF16 model grows the resident set by file pages, not by
 *     anonymous memory (skipped under AddressSanitizer, whose shadow memory
 *     blurs the figures);
 *   - inference activations give the training forward's logits bit for bit;
 *   - a mapped model refuses gradients and saving;
 *   - config.json of each family: refusals by name, Mistral's window,
 *     Qwen2's biases, vocabularies; llama3 RoPE frequencies by hand;
 *   - the releases' config.json (Gemma-2B, Qwen3-0.6B, DeepSeek-V2-Lite,
 *     published values) parse into their behaviours and lay out parameter
 *     tables of the published sizes; YaRN frequencies of Lite by hand; what
 *     is still unsupported is refused by name;
 *   - Gemma's GeGLU kernel against the formula in double.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ceiling.h"
#include "io/io.h"
#include "model/model.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

/* ---- writing an HF checkpoint from an arena model ---- */

static const al_model *sort_model;
static int by_name(const void *a, const void *b) {
    return strcmp(sort_model->params[*(const int *)a].name, sort_model->params[*(const int *)b].name);
}

/* dir/model.safetensors with every tensor of m in dtype dt, in name order
 * (as the safetensors library writes them), and dir/config.json = cfg_json. */
static int write_hf(const char *dir, const al_model *m, const char *cfg_json, al_dtype dt) {
    char path[512];
    al_err err;
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (al_write_file_atomic(path, cfg_json, strlen(cfg_json), &err)) return -1;
    int *order = malloc(sizeof(int) * m->n_params);
    for (int i = 0; i < m->n_params; i++) order[i] = i;
    sort_model = m;
    qsort(order, (size_t)m->n_params, sizeof *order, by_name);
    const size_t es = al_dtype_size(dt);
    size_t cap = 256 + (size_t)m->n_params * 256, hl = 0, off = 0;
    char *hdr = malloc(cap);
    hl += (size_t)snprintf(hdr + hl, cap - hl, "{");
    for (int k = 0; k < m->n_params; k++) {
        const al_param *p = &m->params[order[k]];
        char shape[64];
        if (p->ndim == 1) snprintf(shape, sizeof shape, "[%lld]", (long long)p->shape[0]);
        else snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)p->shape[0], (long long)p->shape[1]);
        hl += (size_t)snprintf(hdr + hl, cap - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                               k ? "," : "", p->name, al_dtype_name(dt), shape, off, off + p->numel * es);
        off += p->numel * es;
    }
    hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t h64 = hl;
    int ok = f && fwrite(&h64, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl;
    for (int k = 0; ok && k < m->n_params; k++) {
        const al_param *p = &m->params[order[k]];
        const float *w = m->w + p->offset;
        for (size_t j = 0; ok && j < p->numel; j++) {
            uint16_t h = dt == AL_DT_BF16 ? al_f32_to_bf16(w[j]) : al_f32_to_f16(w[j]);
            ok = dt == AL_DT_F32 ? fwrite(&w[j], 4, 1, f) == 1 : fwrite(&h, 2, 1, f) == 1;
        }
    }
    if (f) ok &= fclose(f) == 0;
    free(hdr);
    free(order);
    return ok ? 0 : -1;
}

/* Rounds every weight of m to dt (what the file will hold). */
static void round_weights(al_model *m, al_dtype dt) {
    for (size_t i = 0; i < m->n_floats; i++)
        if (dt == AL_DT_BF16) m->w[i] = al_bf16_to_f32(al_f32_to_bf16(m->w[i]));
        else if (dt == AL_DT_F16) m->w[i] = al_f16_to_f32(al_f32_to_f16(m->w[i]));
}

/* The config.json of c as a Hugging Face one (no "attnlab" block). */
static void hf_json(const al_config *c, char *buf, size_t cap) {
    if (c->attention == AL_ATTN_MLA)
        snprintf(buf, cap,
                 "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"model_type\":\"deepseek_v2\",\"vocab_size\":%d,"
                 "\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
                 "\"num_key_value_heads\":%d,\"kv_lora_rank\":%d,\"q_lora_rank\":%d,\"qk_nope_head_dim\":%d,"
                 "\"qk_rope_head_dim\":%d,\"v_head_dim\":%d,\"n_routed_experts\":null,\"hidden_act\":\"silu\","
                 "\"max_position_embeddings\":%d,\"rms_norm_eps\":%g,\"rope_theta\":%g,\"tie_word_embeddings\":%s}",
                 c->vocab_size, c->hidden_size, c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads,
                 c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim,
                 c->max_position, c->rms_norm_eps, c->rope_theta, c->tie_word_embeddings ? "true" : "false");
    else
        snprintf(buf, cap,
                 "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":%d,"
                 "\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
                 "\"num_key_value_heads\":%d,\"head_dim\":%d,\"hidden_act\":\"silu\",\"max_position_embeddings\":%d,"
                 "\"rms_norm_eps\":%g,\"rope_theta\":%g,\"tie_word_embeddings\":%s,\"rope_scaling\":null}",
                 c->vocab_size, c->hidden_size, c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads,
                 c->head_dim, c->max_position, c->rms_norm_eps, c->rope_theta,
                 c->tie_word_embeddings ? "true" : "false");
}

/* Arena model c (random weights rounded to dt) vs the same weights mapped
 * from an HF checkpoint in dt: forward and decode logits, and the mapping. */
static void check_mapped_vs_arena(const char *tag, al_config c, al_dtype dt, const char *dir) {
    al_model own, hf;
    al_err err;
    if (tu_make_model(&own, &c, 31, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    round_weights(&own, dt);
    char js[2048];
    hf_json(&c, js, sizeof js);
    CHECK(write_hf(dir, &own, js, dt) == 0);
    if (al_model_load(&hf, dir, NULL, &err)) {
        CHECK_MSG(0, "%s: load: %s", tag, err.msg);
        al_model_free(&own);
        return;
    }
    CHECK_MSG(hf.mapped && hf.cfg.hf != AL_HF_NONE, "%s: not mapped", tag);
    /* views: matrices inside a mapped file in dt, 1-D tensors fp32 in the small arena */
    size_t in_file = 0, vec_bytes = 0, mat_bytes = 0;
    for (int i = 0; i < hf.n_params; i++) {
        const al_param *p = &hf.params[i];
        const char *d = hf.data[i];
        if (p->ndim == 1) {
            vec_bytes += p->numel * 4;
            CHECK(hf.dts[i] == AL_DT_F32 && (const float *)d >= hf.w && (const float *)d < hf.w + vec_bytes / 4);
            continue;
        }
        mat_bytes += p->numel * al_dtype_size(dt);
        for (int f = 0; f < hf.ckpt->n_files; f++) {
            const al_st_file *sf = &hf.ckpt->files[f];
            in_file += sf->mapped && d >= sf->blob && d + p->numel * al_dtype_size(dt) <= sf->blob + sf->blob_len;
        }
        CHECK(hf.dts[i] == dt);
    }
    int n_mats = 0;
    for (int i = 0; i < hf.n_params; i++) n_mats += hf.params[i].ndim == 2;
    CHECK_MSG(in_file == (size_t)n_mats && hf.mapped_bytes == mat_bytes && hf.copied_bytes == vec_bytes,
              "%s: %zu of %d matrices in the mapping, %zu mapped / %zu copied bytes (want %zu / %zu)", tag, in_file,
              n_mats, hf.mapped_bytes, hf.copied_bytes, mat_bytes, vec_bytes);
    /* forward of two sequences (panels), and decode one token at a time (direct kernel) */
    const int B = 2, T = 13, V = c.vocab_size;
    int tok[2 * 13];
    al_rng r;
    al_rng_seed(&r, 5);
    tu_random_tokens(tok, B * T, &r);
    float *lo = tu_logits(&own, tok, B, T), *lh = tu_logits(&hf, tok, B, T);
    if (lo && lh) {
        double e = test_rel_err(lh, lo, (size_t)B * T * V);
        CHECK_MSG(e <= 2e-6, "%s: mapped forward vs arena: %.3g", tag, e);
    }
    tu_decode dh = tu_decode_vs_forward(&hf, tok, T);
    CHECK_MSG(dh.worst <= 2e-6, "%s: mapped decode vs its forward: %.3g", tag, dh.worst);
    al_decoder dec;
    float lg[256];
    double worst = 0;
    CHECK(al_decoder_create(&dec, &hf, T, &err) == 0);
    for (int t = 0; t < T && lo; t++) {
        CHECK(al_decoder_step(&dec, tok[t], lg, &err) == 0);
        double e = test_rel_err(lg, lo + (size_t)t * V, (size_t)V);
        worst = e > worst ? e : worst;
    }
    al_decoder_free(&dec);
    CHECK_MSG(worst <= 2e-6, "%s: mapped decode vs arena forward: %.3g", tag, worst);
    printf("%-22s mapped vs arena: forward %.2e, decode %.2e\n", tag, lo && lh ? test_rel_err(lh, lo, (size_t)B * T * V) : -1.0,
           worst);
    /* inference only */
    CHECK(al_model_alloc_grads(&hf, &err) == -1 && strstr(err.msg, "training needs fp32 weights"));
    CHECK(al_model_save(&hf, dir, NULL, &err) == -1 && strstr(err.msg, "not saved"));
    al_acts a;
    CHECK(al_acts_create(&a, &hf, 1, 4, &err) == 0 && a.infer && !a.dlogits && !a.dres);
    al_acts_free(&a);
    free(lo);
    free(lh);
    al_model_free(&hf);
    al_model_free(&own);
}

/* Inference activations (one layer's buffers) vs the training form: the same
 * kernels in the same order, so the same bits; kept layers survive. */
static void check_infer_acts(void) {
    al_config c = tu_config(32, 48, 3, 4, 2, 8, 32);
    al_model m;
    al_err err;
    if (tu_make_model(&m, &c, 7, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    int tok[2 * 11];
    al_rng r;
    al_rng_seed(&r, 9);
    tu_random_tokens(tok, 22, &r);
    al_acts full, lean;
    const int keep[] = {1};
    CHECK(al_acts_create(&full, &m, 2, 11, &err) == 0);
    CHECK(al_acts_create_infer(&lean, &m, 2, 11, keep, 1, &err) == 0);
    al_model_forward(&m, &full, tok, NULL);
    al_model_forward(&m, &lean, tok, NULL);
    CHECK(memcmp(full.logits, lean.logits, sizeof(float) * 22 * 256) == 0);
    CHECK(lean.n_floats < full.n_floats / 2);
    CHECK(al_acts_saved(&lean, 0) == NULL && al_acts_saved(&lean, 2) == NULL && al_acts_saved(&lean, 1) != NULL);
    CHECK(memcmp(al_acts_saved(&lean, 1), al_acts_saved(&full, 1), sizeof(float) * full.attn_saved_per_layer) == 0);
    /* attention-map activations: no logits, the kept layers' blocks as an
     * inference forward's, which stops after the last kept layer's attention
     * (keeping layer 1 of 3: layer 2 never runs; keeping 2 and 0: all three
     * run, up to layer 2's attention) */
    const int keeps[2][2] = {{1, -1}, {2, 0}};
    for (int v = 0; v < 2; v++) {
        const int n_keep = v + 1, last = keeps[v][0];
        al_acts maps, one;
        CHECK(al_acts_create_maps(&maps, &m, 11, keeps[v], n_keep, &err) == 0 && maps.logits == NULL);
        CHECK(maps.maps_layers == last + 1);
        CHECK(al_acts_create_infer(&one, &m, 1, 11, keeps[v], n_keep, &err) == 0 && one.maps_layers == 0);
        CHECK(al_model_forward(&m, &maps, tok, NULL) == 0.0);
        al_model_forward(&m, &one, tok, NULL);
        for (int k = 0; k < n_keep; k++) {
            const int l = keeps[v][k];
            CHECK(memcmp(al_acts_saved(&maps, l), al_acts_saved(&one, l), sizeof(float) * one.attn_saved_per_layer) == 0);
        }
        al_acts_free(&maps);
        al_acts_free(&one);
    }
    al_acts bad;
    const int out_of_range[] = {3};
    CHECK(al_acts_create_infer(&bad, &m, 1, 4, out_of_range, 1, &err) == -1 && strstr(err.msg, "out of range"));
    al_acts_free(&full);
    al_acts_free(&lean);
    al_model_free(&m);
}

/* A 25 MB BF16 model: loading maps it, a forward reads it through file pages. */
static void check_resident(const char *dir) {
    al_config c = tu_config(512, 1536, 4, 8, 2, 64, 64);
    c.vocab_size = 256;
    al_model own, hf;
    al_err err;
    if (tu_make_model(&own, &c, 3, TU_GAINS_ONE)) {
        CHECK(0);
        return;
    }
    char js[2048];
    hf_json(&c, js, sizeof js);
    CHECK(write_hf(dir, &own, js, AL_DT_BF16) == 0);
    const size_t file_bytes = al_model_weight_bytes(&own) / 2;
    al_model_free(&own);
    long t0, a0, f0, t1, a1, f1, t2, a2, f2;
    al_rss_now(&t0, &a0, &f0);
    if (al_model_load(&hf, dir, NULL, &err)) {
        CHECK_MSG(0, "load: %s", err.msg);
        return;
    }
    al_rss_now(&t1, &a1, &f1);
    int tok[16];
    for (int i = 0; i < 16; i++) tok[i] = (i * 37) % 256;
    float *lg = tu_logits(&hf, tok, 1, 16);
    al_rss_now(&t2, &a2, &f2);
    printf("BF16 checkpoint of %zu bytes: resident +%.1f MB anonymous / +%.1f MB file after loading, "
           "+%.1f / +%.1f MB after a forward\n",
           file_bytes, (a1 - a0) / 1e6, (f1 - f0) / 1e6, (a2 - a0) / 1e6, (f2 - f0) / 1e6);
    CHECK(hf.mapped && hf.mapped_bytes > file_bytes * 9 / 10);
    if (!UNDER_ASAN && a0 >= 0) {
        CHECK_MSG(a1 - a0 < (long)file_bytes / 8, "loading grew anonymous memory by %ld bytes", a1 - a0);
        CHECK_MSG(a2 - a0 < (long)file_bytes / 4, "a forward grew anonymous memory by %ld bytes", a2 - a0);
        CHECK_MSG(f2 - f0 > (long)file_bytes / 2, "a forward touched only %ld bytes of file pages", f2 - f0);
    }
    free(lg);
    al_model_free(&hf);
}

/* ---- config.json of each family ---- */

#define HF_BASE                                                                                                   \
    "\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,\"num_attention_heads\":4,"              \
    "\"num_key_value_heads\":2,\"vocab_size\":1000,\"max_position_embeddings\":64"
#define DS_BASE                                                                                                   \
    "\"architectures\":[\"DeepseekV2ForCausalLM\"],\"hidden_size\":32,\"intermediate_size\":48,"                  \
    "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"kv_lora_rank\":8,\"qk_nope_head_dim\":8,"                \
    "\"qk_rope_head_dim\":4,\"v_head_dim\":8,\"vocab_size\":500"

static void check_configs(void) {
    al_config c;
    al_err err = {{0}};
    /* accepted: the family, arbitrary vocabularies, Qwen2's biases, Mistral's window */
    CHECK_MSG(al_config_parse(&c, "{\"architectures\":[\"Qwen2ForCausalLM\"]," HF_BASE ",\"use_sliding_window\":false,"
                                  "\"sliding_window\":32}",
                              NULL, &err) == 0 &&
                  c.hf == AL_HF_QWEN2 && c.qkv_bias && c.vocab_size == 1000 && c.sliding_window == 0 &&
                  c.rms_norm_eps == 1e-6f,
              "%s", err.msg);
    CHECK_MSG(al_config_parse(&c, "{\"architectures\":[\"MistralForCausalLM\"]," HF_BASE ",\"sliding_window\":32}", NULL,
                              &err) == 0 &&
                  c.hf == AL_HF_MISTRAL && c.sliding_window == 32 && al_config_max_context(&c) == 32 && !c.qkv_bias,
              "%s", err.msg);
    CHECK(al_config_parse(&c, "{\"architectures\":[\"MistralForCausalLM\"]," HF_BASE ",\"sliding_window\":64}", NULL,
                          &err) == 0 &&
          c.sliding_window == 0 && al_config_max_context(&c) == 64);
    CHECK(al_config_parse(&c, "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE ",\"head_dim\":12,"
                              "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
                              "\"high_freq_factor\":4,\"original_max_position_embeddings\":16}}",
                          NULL, &err) == 0 &&
          c.head_dim == 12 && c.rope_scaling.type == AL_ROPE_LLAMA3 && c.rope_scaling.original_max_position == 16);
    CHECK(al_config_parse(&c, "{" DS_BASE ",\"n_routed_experts\":8,\"first_k_dense_replace\":3}", NULL, &err) == 0 &&
          c.hf == AL_HF_DEEPSEEK_V2 && c.attention == AL_ATTN_MLA);
    CHECK(al_config_parse(&c, "{" DS_BASE ",\"n_routed_experts\":8,\"first_k_dense_replace\":1,\"moe_layer_freq\":4}",
                          NULL, &err) == 0); /* layers 1 and 2 are not multiples of 4: dense */
    /* attnlab's own byte-level models keep their 256 */
    tu_expect_config_error("vocab_size must be 256", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE ",\"attnlab\":{\"attention\":\"gqa\"}}");
    /* refused by name */
    tu_expect_config_error("unsupported architecture 'MixtralForCausalLM'", 0,
                           "{\"architectures\":[\"MixtralForCausalLM\"]," HF_BASE "}");
    tu_expect_config_error("unsupported rope_scaling type 'dynamic'", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE
                           ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}");
    /* yarn is DeepseekV2's (accepted there: check_release_configs) */
    tu_expect_config_error("unsupported rope_scaling type 'yarn'", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE
                           ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40}}");
    tu_expect_config_error("rope_scaling factor must be >= 1", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE
                           ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":0.5,\"low_freq_factor\":1,"
                           "\"high_freq_factor\":4,\"original_max_position_embeddings\":16}}");
    tu_expect_config_error("low_freq_factor < high_freq_factor", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE
                           ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
                           "\"high_freq_factor\":4,\"original_max_position_embeddings\":16}}");
    tu_expect_config_error("mixture-of-experts", 0, "{" DS_BASE ",\"n_routed_experts\":8,\"first_k_dense_replace\":1}");
    tu_expect_config_error("unsupported hidden_act 'gelu_pytorch_tanh'", 0,
                           "{\"architectures\":[\"LlamaForCausalLM\"]," HF_BASE ",\"hidden_act\":\"gelu_pytorch_tanh\"}");
    tu_expect_config_error("unsupported mlp_bias", 0,
                           "{\"architectures\":[\"MistralForCausalLM\"]," HF_BASE ",\"mlp_bias\":true}");
    tu_expect_config_error("unsupported attention_bias true for DeepseekV2ForCausalLM", 0,
                           "{" DS_BASE ",\"attention_bias\":true}");
    tu_expect_config_error("unsupported use_sliding_window", 0,
                           "{\"architectures\":[\"Qwen2ForCausalLM\"]," HF_BASE ",\"use_sliding_window\":true}");
    tu_expect_config_error("sliding_window must be positive", 0,
                           "{\"architectures\":[\"MistralForCausalLM\"]," HF_BASE ",\"sliding_window\":0}");
    tu_expect_config_error("goes with attnlab's own architectures", 0,
                           "{\"architectures\":[\"Qwen2ForCausalLM\"]," HF_BASE ",\"attnlab\":{\"attention\":\"gqa\"}}");
}

/* ---- the releases' config.json (published values, no weights) ---- */

/* google/gemma-2b */
static const char gemma_2b[] =
    "{\"architectures\":[\"GemmaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":2,\"eos_token_id\":1,\"head_dim\":256,\"hidden_act\":\"gelu\","
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":2048,\"initializer_range\":0.02,"
    "\"intermediate_size\":16384,\"max_position_embeddings\":8192,\"model_type\":\"gemma\","
    "\"num_attention_heads\":8,\"num_hidden_layers\":18,\"num_key_value_heads\":1,\"pad_token_id\":0,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":10000.0,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.38.0.dev0\",\"use_cache\":true,\"vocab_size\":256000}";
/* Qwen/Qwen3-0.6B */
static const char qwen3_06b[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":1024,\"initializer_range\":0.02,\"intermediate_size\":3072,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";
/* deepseek-ai/DeepSeek-V2-Lite (auto_map left out) */
static const char deepseek_v2_lite[] =
    "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"aux_loss_alpha\":0.001,\"bos_token_id\":100000,\"eos_token_id\":100001,\"first_k_dense_replace\":1,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":10944,"
    "\"kv_lora_rank\":512,\"max_position_embeddings\":163840,\"model_type\":\"deepseek_v2\","
    "\"moe_intermediate_size\":1408,\"moe_layer_freq\":1,\"n_group\":1,\"n_routed_experts\":64,"
    "\"n_shared_experts\":2,\"norm_topk_prob\":false,\"num_attention_heads\":16,\"num_experts_per_tok\":6,"
    "\"num_hidden_layers\":27,\"num_key_value_heads\":16,\"pretraining_tp\":1,\"q_lora_rank\":null,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":{\"beta_fast\":32,\"beta_slow\":1,\"factor\":40,\"mscale\":0.707,"
    "\"mscale_all_dim\":0.707,\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},"
    "\"rope_theta\":10000,\"routed_scaling_factor\":1.0,\"scoring_func\":\"softmax\",\"seq_aux\":true,"
    "\"tie_word_embeddings\":false,\"topk_group\":1,\"topk_method\":\"greedy\",\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.33.1\",\"use_cache\":true,\"v_head_dim\":128,\"vocab_size\":102400}";

/* al_config_parse of a release's JSON with `first` put before its keys
 * (cJSON finds the first of two equal keys) must fail with one line
 * containing want. */
static void expect_release_refusal(const char *release, const char *first, const char *want) {
    char *json = al_sprintf("{%s,%s", first, release + 1);
    al_config c;
    al_err err = {{0}};
    CHECK(json != NULL);
    if (!json) return;
    const int rc = al_config_parse(&c, json, NULL, &err);
    CHECK_MSG(rc == -1 && strstr(err.msg, want) && !strchr(err.msg, '\n'), "%s -> '%s' (want '%s')", first, err.msg,
              want);
    free(json);
}

/* Parameters of the table a config lays out (no weights), and of one tensor by name (-1: absent). */
static double table_params(const al_model *m) {
    double n = 0;
    for (int i = 0; i < m->n_params; i++) n += (double)m->params[i].numel;
    return n;
}

static int64_t rows_of(const al_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return m->params[i].shape[0];
    return -1;
}

/* Each release's config.json parses into its family's behaviours, and its
 * parameter table has the published size (Gemma-2B 2.506B, Qwen3-0.6B
 * 0.596B with 0.44B outside the embedding, DeepSeek-V2-Lite 15.7B with 64
 * experts in layers 1..26); what is still not supported is refused in one
 * line. */
static void check_release_configs(void) {
    al_config c;
    al_model m;
    al_err err = {{0}};
    CHECK_MSG(al_config_parse(&c, gemma_2b, NULL, &err) == 0, "gemma-2b: %s", err.msg);
    CHECK(c.hf == AL_HF_GEMMA && c.attention == AL_ATTN_MQA && c.head_dim == 256 && c.tie_word_embeddings &&
          c.norm_unit_offset && c.embed_scale && c.mlp_act == AL_ACT_GELU_TANH && !c.qk_norm && !c.qkv_bias);
    CHECK_MSG(al_model_build(&m, &c, 0, &err) == 0, "%s", err.msg);
    CHECK_MSG(fabs(table_params(&m) - 2506172416.0) < 1, "gemma-2b: %.0f parameters", table_params(&m));
    al_model_free(&m);

    CHECK_MSG(al_config_parse(&c, qwen3_06b, NULL, &err) == 0, "qwen3-0.6b: %s", err.msg);
    CHECK(c.hf == AL_HF_QWEN3 && c.attention == AL_ATTN_GQA && c.head_dim == 128 && c.qk_norm && !c.qkv_bias &&
          c.tie_word_embeddings && !c.embed_scale && c.mlp_act == AL_ACT_SILU && c.rope_theta == 1e6);
    CHECK_MSG(al_model_build(&m, &c, 0, &err) == 0, "%s", err.msg);
    const double embed = 151936.0 * 1024;
    CHECK_MSG(fabs(table_params(&m) - 596049920.0) < 1 && table_params(&m) - embed > 0.435e9 &&
                  table_params(&m) - embed < 0.445e9,
              "qwen3-0.6b: %.0f parameters", table_params(&m));
    CHECK(rows_of(&m, "model.layers.27.self_attn.q_norm.weight") == 128 &&
          rows_of(&m, "model.layers.0.self_attn.k_norm.weight") == 128);
    al_model_free(&m);

    CHECK_MSG(al_config_parse(&c, deepseek_v2_lite, NULL, &err) == 0, "deepseek-v2-lite: %s", err.msg);
    CHECK(c.hf == AL_HF_DEEPSEEK_V2 && c.attention == AL_ATTN_MLA && c.n_routed_experts == 64 &&
          c.num_experts_per_tok == 6 && c.n_shared_experts == 2 && c.moe_intermediate_size == 1408 &&
          !c.moe_group_limited && !c.norm_topk_prob && c.routed_scaling_factor == 1.0 &&
          c.rope_scaling.type == AL_ROPE_YARN && c.rope_scaling.factor == 40 && c.rope_scaling.mscale_all_dim == 0.707 &&
          c.rope_scaling.original_max_position == 4096 && c.q_lora_rank == 0);
    CHECK(!al_config_layer_moe(&c, 0) && al_config_layer_moe(&c, 1) && al_config_layer_moe(&c, 26) &&
          al_config_ffn_max(&c) == 10944);
    CHECK_MSG(al_model_build(&m, &c, 0, &err) == 0, "%s", err.msg);
    CHECK_MSG(table_params(&m) > 15.6e9 && table_params(&m) < 15.8e9, "deepseek-v2-lite: %.0f parameters",
              table_params(&m));
    CHECK(rows_of(&m, "model.layers.0.mlp.gate_proj.weight") == 10944 && rows_of(&m, "model.layers.1.mlp.gate.weight") == 64 &&
          rows_of(&m, "model.layers.26.mlp.experts.63.down_proj.weight") == 2048 &&
          rows_of(&m, "model.layers.1.mlp.shared_experts.up_proj.weight") == 2816 &&
          rows_of(&m, "model.layers.1.mlp.gate_proj.weight") == -1);
    /* YaRN of Lite: cos/sin factor 1 (mscale == mscale_all_dim), frequencies by hand: correction
     * range [10, 23] of 32 pairs */
    CHECK(al_rope_attention_factor(&c.rope_scaling) == 1.0);
    const double f5 = pow(10000.0, -10.0 / 64), f16 = pow(10000.0, -32.0 / 64), f31 = pow(10000.0, -62.0 / 64),
                 r16 = (16 - 10) / 13.0;
    CHECK(fabs(al_rope_inv_freq(5, 64, 10000.0, &c.rope_scaling) - f5) < 1e-15 * f5);
    CHECK(fabs(al_rope_inv_freq(31, 64, 10000.0, &c.rope_scaling) - f31 / 40) < 1e-15 * f31);
    CHECK(fabs(al_rope_inv_freq(16, 64, 10000.0, &c.rope_scaling) - (f16 / 40 * r16 + f16 * (1 - r16))) < 1e-15 * f16);
    CHECK(fabs(al_rope_yarn_mscale(40, 0.707) - (0.0707 * log(40.0) + 1)) < 1e-15);
    al_model_free(&m);

    /* still refused, one line each */
    expect_release_refusal(deepseek_v2_lite, "\"topk_method\":\"noaux_tc\"", "unsupported topk_method 'noaux_tc'");
    expect_release_refusal(deepseek_v2_lite, "\"scoring_func\":\"sigmoid\"", "unsupported scoring_func 'sigmoid'");
    expect_release_refusal(deepseek_v2_lite, "\"n_group\":3,\"topk_method\":\"group_limited_greedy\"",
                           "group_limited_greedy needs n_group dividing n_routed_experts");
    expect_release_refusal(deepseek_v2_lite, "\"num_experts_per_tok\":65",
                           "mixture-of-experts layers need num_experts_per_tok in 1..n_routed_experts 64");
    expect_release_refusal(gemma_2b, "\"hidden_activation\":\"gelu\"",
                           "unsupported hidden_activation 'gelu' for GemmaForCausalLM");
    expect_release_refusal(qwen3_06b, "\"attention_bias\":true", "unsupported attention_bias true for Qwen3ForCausalLM");
    expect_release_refusal(qwen3_06b, "\"use_sliding_window\":true", "unsupported use_sliding_window true for Qwen3");
    expect_release_refusal(qwen3_06b, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}",
                           "unsupported rope_scaling type 'yarn' for Qwen3ForCausalLM");
    tu_expect_config_error("unsupported architecture 'Gemma2ForCausalLM'", 0,
                           "{\"architectures\":[\"Gemma2ForCausalLM\"]," HF_BASE "}");
}

/* Gemma's GeGLU kernel against the formula in double (tanh itself) on odd
 * sizes (the threaded path too), with saturating and tiny inputs, in place. */
static void check_geglu(void) {
    const size_t sizes[] = {1, 7, 8193, 70001};
    al_rng rng;
    al_rng_seed(&rng, 18);
    for (int k = 0; k < 4; k++) {
        const size_t n = sizes[k];
        float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *h = malloc(sizeof(float) * n);
        CHECK(g && u && h);
        if (!g || !u || !h) return;
        for (size_t i = 0; i < n; i++) {
            g[i] = 3.0f * al_rng_normal(&rng);
            u[i] = al_rng_normal(&rng);
        }
        const float extremes[] = {-60.0f, -9.0f, -1e-4f, 0.0f, 2e-5f, 12.0f, 80.0f};
        for (int e = 0; e < 7 && (size_t)e < n; e++) g[e] = extremes[e];
        double worst = 0;
        al_geglu_tanh_fwd(h, g, u, n);
        for (size_t i = 0; i < n; i++) {
            /* (1 + tanh z) / 2 in double; for z < -3, where 1 + tanh z cancels even in
             * double, as e^(2z) / (1 + e^(2z)) (the same number) */
            const double x = g[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            const double half = z > -3 ? 0.5 * (1.0 + tanh(z)) : exp(2 * z) / (1 + exp(2 * z));
            const double want = x * half * u[i];
            const double rel = fabs(h[i] - want) / (fabs(want) + 1e-300);
            worst = rel > worst && fabs(want) > 1e-30 ? rel : worst;
            if (x == 0 || u[i] == 0) CHECK(h[i] == 0);
        }
        /* z rounded to float carries a relative error of 2^-24, which e^(2z) turns into
         * |2z| 2^-24 (up to 80 x 6e-8 = 5e-6 where the sigmoid is tiny), as in PyTorch's float32 */
        CHECK_MSG(worst < 1e-5, "geglu n=%zu: relative error %.3g", n, worst);
        al_glu_fwd(AL_ACT_GELU_TANH, u, g, u, n); /* in place on u: the same bits */
        CHECK(memcmp(u, h, sizeof(float) * n) == 0);
        free(g), free(u), free(h);
    }
}

/* llama3's frequency scaling, evaluated by hand for Llama 3.1's numbers. */
static void check_llama3_freqs(void) {
    al_rope_scaling s = {AL_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};
    int kept = 0, divided = 0, medium = 0;
    for (int i = 0; i < 64; i++) {
        const double f = pow(500000.0, -2.0 * i / 128.0), wl = 2 * M_PI / f, got = al_rope_inv_freq(i, 128, 500000.0, &s);
        double want;
        if (wl < 8192 / 4.0) want = f, kept++;
        else if (wl > 8192 / 1.0) want = f / 8, divided++;
        else {
            const double sm = (8192 / wl - 1.0) / 3.0;
            want = (1 - sm) * f / 8 + sm * f;
            medium++;
        }
        CHECK_MSG(fabs(got - want) <= 1e-15 * want, "inv_freq %d: %.17g vs %.17g", i, got, want);
        CHECK(al_rope_inv_freq(i, 128, 500000.0, NULL) == f);
    }
    CHECK(kept > 0 && divided > 0 && medium > 0);
}

int main(void) {
    char dir[] = "/tmp/al_test_hf_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char sub[600];
    check_configs();
    check_release_configs();
    check_geglu();
    check_llama3_freqs();
    check_infer_acts();
    const al_dtype dts[] = {AL_DT_F32, AL_DT_BF16, AL_DT_F16};
    for (int k = 0; k < 3; k++) {
        al_config g = tu_config(64, 96, 2, 4, 2, 16, 32);
        g.tie_word_embeddings = k == 1;
        char tag[64];
        snprintf(tag, sizeof tag, "llama_gqa_%s", al_dtype_name(dts[k]));
        snprintf(sub, sizeof sub, "%s/%s", dir, tag);
        check_mapped_vs_arena(tag, g, dts[k], sub);
    }
    for (int dq = 0; dq <= 16; dq += 16) {
        char tag[64];
        snprintf(tag, sizeof tag, "mla_q%d_BF16", dq);
        snprintf(sub, sizeof sub, "%s/%s", dir, tag);
        check_mapped_vs_arena(tag, tu_mla_config(dq, dq > 0), AL_DT_BF16, sub);
    }
    snprintf(sub, sizeof sub, "%s/big", dir);
    check_resident(sub);
    CHECK(tu_remove_dir(dir) == 0);
    return TEST_EXIT();
}
