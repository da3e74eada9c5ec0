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
 *     Qwen2's biases, vocabularies; llama3 RoPE frequencies by hand.
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
    /* attention-map activations: no logits, the kept layer's block as an inference forward's */
    al_acts maps, one;
    CHECK(al_acts_create_maps(&maps, &m, 11, keep, 1, &err) == 0 && maps.logits == NULL);
    CHECK(al_acts_create_infer(&one, &m, 1, 11, keep, 1, &err) == 0);
    CHECK(al_model_forward(&m, &maps, tok, NULL) == 0.0);
    al_model_forward(&m, &one, tok, NULL);
    CHECK(memcmp(al_acts_saved(&maps, 1), al_acts_saved(&one, 1), sizeof(float) * one.attn_saved_per_layer) == 0);
    al_acts_free(&maps);
    al_acts_free(&one);
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
    tu_expect_config_error("unsupported rope_scaling type 'yarn'", 0,
                           "{" DS_BASE ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40}}");
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
