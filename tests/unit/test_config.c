/*
 * test_config.c: the config field table (core/config.h, model/config.c):
 * every design's own fields reach config.json, the comparison and the JSON
 * view; config.json round-trips every design, score and task; the resolver
 * derives what the old flag code derived and refuses fields of another
 * design or score.
 */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/presets.h"
#include "test.h"
#include "testutil.h"

/* A config of design k (its own fields at non-default values), score s, task t. */
static al_config sample(int k, al_score_kind s, al_task t) {
    al_config c = tu_config(48, 80, 2, 4, 2, 12, 32);
    unsigned char given[AL_CONFIG_MAX_FIELDS] = {0};
    c.attention = k;
    c.score = s;
    c.poly_power = 2;
    c.poly_scale_auto = 0;
    c.poly_scale = 0.25;
    given[al_config_field_find("attention")] = given[al_config_field_find("score")] = 1;
    given[al_config_field_find("ffn")] = given[al_config_field_find("head_dim")] = 1;
    given[al_config_field_find("kv_heads")] = 1;
    if (s == AL_SCORE_POLY) given[al_config_field_find("poly_power")] = given[al_config_field_find("poly_scale")] = 1;
    if (k == AL_ATTN_MHA) c.num_kv_heads = 4;
    if (k == AL_ATTN_MQA) c.num_kv_heads = 1;
    al_err err;
    CHECK_MSG(al_config_resolve(&c, given, &err) == 0, "%s: %s", al_attn_name(k), err.msg);
    if (t == AL_TASK_VISION) {
        al_config_vision_fmnist(&c, 7);
        c.image_mean = 0.25; /* as a run sets them from its images */
        c.image_std = 0.5;
    }
    CHECK_MSG(al_config_validate(&c, &err) == 0, "%s: %s", al_attn_name(k), err.msg);
    return c;
}

/* Saves c, loads it back and compares every field through the table, plus
 * the fields the table derives. */
static void test_roundtrip_all(void) {
    const char *path = "test_config.tmp.json";
    for (int k = 0; k < AL_ATTN_COUNT; k++)
        for (int s = 0; s < AL_SCORE_COUNT; s++)
            for (int t = 0; t < AL_TASK_COUNT; t++) {
                al_config a = sample(k, (al_score_kind)s, (al_task)t), b;
                al_err err;
                char why[256] = "";
                CHECK(al_config_save(&a, path, "{\"train\": {\"steps\": 3}}", &err) == 0);
                char *extra = NULL;
                int loaded = al_config_load(&b, path, &extra, &err) == 0;
                CHECK_MSG(loaded, "%s/%s/%s: %s", al_attn_name(k), al_score_name(s), al_task_name(t), err.msg);
                if (!loaded) continue;
                CHECK_MSG(al_config_same(&b, &a, why, sizeof why), "%s/%s/%s: %s", al_attn_name(k), al_score_name(s),
                          al_task_name(t), why);
                CHECK(b.image_mean == a.image_mean && b.image_std == a.image_std && b.max_position == a.max_position);
                CHECK(extra && strstr(extra, "\"format_version\":2") && strstr(extra, "\"steps\":3"));
                free(extra);
            }
    remove(path);
}

/* Each design's own fields: saved under their keys, in the view under their
 * names, and a change to one is a difference the study sees. */
static void test_design_fields(void) {
    for (int k = 0; k < AL_ATTN_COUNT; k++) {
        const al_attn_ops *d = al_attn_design(k);
        al_config c = sample(k, AL_SCORE_SOFTMAX, AL_TASK_LM);
        cJSON *view = cJSON_CreateObject();
        CHECK(al_config_view(&c, view) == 0);
        CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(view, "attention")->valuestring, d->name));
        for (int i = 0; i < d->n_fields; i++) {
            const al_config_field *f = &d->fields[i];
            CHECK_MSG(cJSON_GetObjectItemCaseSensitive(view, f->name) != NULL, "%s: %s not in the view", d->name, f->name);
            al_config e = c;
            (*(int *)al_config_field_ptr(f, &e))++;
            char why[256] = "";
            CHECK_MSG(!al_config_same(&e, &c, why, sizeof why) && strstr(why, f->name), "%s: %s: '%s'", d->name,
                      f->name, why);
        }
        /* other designs' fields do not appear */
        for (int j = 0; j < AL_ATTN_COUNT; j++)
            for (int i = 0; j != k && i < al_attn_design(j)->n_fields; i++)
                CHECK(cJSON_GetObjectItemCaseSensitive(view, al_attn_design(j)->fields[i].name) == NULL);
        cJSON_Delete(view);
    }
}

/* What `attnlab train --preset mla` and flags derive, and what they refuse. */
static void test_resolve(void) {
    al_config c;
    unsigned char given[AL_CONFIG_MAX_FIELDS] = {0};
    al_err err;
    al_config_default(&c);
    al_preset_apply(al_preset_find("mla"), &c, given);
    c.max_position = 64;
    CHECK(al_config_resolve(&c, given, &err) == 0);
    CHECK(c.attention == AL_ATTN_MLA && c.kv_lora_rank == 48 && c.qk_rope_head_dim == 16 && c.qk_nope_head_dim == 32);
    CHECK(c.head_dim == 48 && c.num_kv_heads == 8 && c.intermediate_size == 768 && c.score_n == 64);
    /* defaults from the shape: d_h = 256 / 8 = 32 -> dn = dv = 32, dr = 16, d_c = 64 */
    al_config_default(&c);
    memset(given, 0, sizeof given);
    c.attention = AL_ATTN_MLA;
    given[al_config_field_find("attention")] = 1;
    CHECK(al_config_resolve(&c, given, &err) == 0);
    CHECK(c.kv_lora_rank == 64 && c.qk_nope_head_dim == 32 && c.qk_rope_head_dim == 16 && c.v_head_dim == 32);
    CHECK(c.intermediate_size == 688); /* 8/3 x 256 rounded up to 16 */
    /* the design from the head counts */
    int kinds[3][2] = {{8, AL_ATTN_MHA}, {2, AL_ATTN_GQA}, {1, AL_ATTN_MQA}};
    for (int i = 0; i < 3; i++) {
        al_config_default(&c);
        memset(given, 0, sizeof given);
        c.num_kv_heads = kinds[i][0];
        given[al_config_field_find("kv_heads")] = 1;
        CHECK(al_config_resolve(&c, given, &err) == 0 && c.attention == kinds[i][1]);
    }
    /* a design's field with another design, a poly field with softmax */
    al_config_default(&c);
    memset(given, 0, sizeof given);
    given[al_config_field_find("lrkv_rank")] = 1;
    CHECK(al_config_resolve(&c, given, &err) != 0 && strstr(err.msg, "--lrkv-rank applies only to --attention lrkv"));
    memset(given, 0, sizeof given);
    given[al_config_field_find("poly_scale")] = 1;
    CHECK(al_config_resolve(&c, given, &err) != 0 && strstr(err.msg, "--poly-scale applies only to --score poly"));
}

/* Every field has a unique view name and config.json key within its scope. */
static void test_table_unique(void) {
    const int n = al_config_field_count();
    CHECK(n <= AL_CONFIG_MAX_FIELDS);
    for (int k = 0; k < AL_ATTN_COUNT; k++) CHECK(al_attn_design(k)->n_fields <= AL_ATTN_MAX_FIELDS);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const al_config_field *a = al_config_field_at(i, NULL), *b = al_config_field_at(j, NULL);
            CHECK_MSG(strcmp(a->name, b->name), "two fields named %s", a->name);
            CHECK_MSG(strcmp(a->key, b->key) || a->where != b->where, "two fields saved as %s", a->key);
        }
}

int main(void) {
    test_table_unique();
    test_roundtrip_all();
    test_design_fields();
    test_resolve();
    return TEST_EXIT();
}
