/*
 * test_io.c: unit tests for the I/O layer (src/io): atomic writes,
 * safetensors read/write and validation, NPY read/write, f16/bf16
 * conversions, and the text that error lines and paths are built from
 * (core.h). Files go to a private mkdtemp directory under /tmp that is
 * removed at the end.
 */
#include "io/io.h"
#include "test.h"

#include <cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* Path of `name` inside the test directory, written into buf (256 bytes). */
static const char *tp(char *buf, const char *name) {
    snprintf(buf, 256, "%s/%s", tmpdir, name);
    return buf;
}

static void write_raw(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Writes a safetensors file from a header JSON string and raw data bytes. */
static void make_st(const char *path, const char *json, const void *data, size_t dlen) {
    size_t hl = strlen(json);
    char *buf = malloc(8 + hl + dlen + 1);
    uint64_t h = hl;
    memcpy(buf, &h, 8);
    memcpy(buf + 8, json, hl);
    if (dlen) memcpy(buf + 8 + hl, data, dlen);
    write_raw(path, buf, 8 + hl + dlen);
    free(buf);
}

/* al_st_open must fail on this file with a one-line message naming the file
 * and containing `word`. */
static void expect_st_fail_at(int line, const char *path, const char *word) {
    al_st_file f;
    al_err err = {{0}};
    int rc = al_st_open(&f, path, &err);
    CHECK_MSG(rc == -1, "line %d: open succeeded, expected '%s'", line, word);
    CHECK_MSG(strstr(err.msg, word) != NULL, "line %d: message '%s' lacks '%s'", line, err.msg, word);
    CHECK_MSG(strstr(err.msg, path) != NULL && !strchr(err.msg, '\n'), "line %d: message '%s'", line, err.msg);
    if (rc == 0) al_st_close(&f);
}
#define EXPECT_ST_FAIL(path, word) expect_st_fail_at(__LINE__, path, word)

/* Builds a file from json + data and expects al_st_open to reject it. */
static void bad_header_at(int line, const char *json, size_t dlen, const char *word) {
    char p[256];
    static const char zeros[64];
    make_st(tp(p, "bad.safetensors"), json, zeros, dlen);
    expect_st_fail_at(line, p, word);
}
#define BAD_HEADER(json, dlen, word) bad_header_at(__LINE__, json, dlen, word)

static void test_st_roundtrip(void) {
    char p[256];
    float w[6] = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 123456.789f};
    float b[3] = {0.1f, 0.2f, 0.3f};
    float s[1] = {42.0f};
    al_st_out_tensor ts[3] = {
        {"layer.w", w, 2, {2, 3}},
        {"layer.b", b, 1, {3}},
        {"scale", s, 0, {0}},
    };
    const char *meta[4] = {"format", "pt", "note", "attnlab \"test\""};
    al_err err = {{0}};
    CHECK_MSG(al_st_write_f32(tp(p, "rt.safetensors"), ts, 3, meta, 2, &err) == 0, "%s", err.msg);

    /* header length is padded to a multiple of 8 with spaces; metadata first */
    char *raw;
    size_t len;
    CHECK(al_read_file(p, &raw, &len, &err) == 0);
    if (!raw || len < 8) return;
    uint64_t hl;
    memcpy(&hl, raw, 8);
    CHECK(hl % 8 == 0);
    CHECK(len == 8 + hl + 4 * 10);
    CHECK(raw[8] == '{');
    CHECK(strncmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"", 30) == 0);
    size_t last = 8 + (size_t)hl - 1;
    while (raw[last] == ' ') last--;
    CHECK(raw[last] == '}');
    CHECK(8 + hl - 1 - last < 8);
    free(raw);

    al_st_file f;
    CHECK_MSG(al_st_open(&f, p, &err) == 0, "%s", err.msg);
    CHECK(f.n_tensors == 3);
    const al_st_tensor *t0 = al_st_find(&f, "layer.w"), *t1 = al_st_find(&f, "layer.b"), *t2 = al_st_find(&f, "scale");
    CHECK(t0 && t1 && t2 && !al_st_find(&f, "__metadata__") && !al_st_find(&f, "nope"));
    if (t0 && t1 && t2) {
        CHECK(t0->dtype == AL_DT_F32 && t0->ndim == 2 && t0->shape[0] == 2 && t0->shape[1] == 3);
        CHECK(t1->ndim == 1 && t1->shape[0] == 3 && t2->ndim == 0);
        CHECK(t0->offset == 0 && t1->offset == 24 && t2->offset == 36 && t2->nbytes == 4);
    }
    float rw[6], rb[3], rs[1];
    int64_t sw[2] = {2, 3}, sb[1] = {3};
    CHECK(al_st_read_f32(&f, "layer.w", rw, 2, sw, &err) == 0 && memcmp(rw, w, sizeof w) == 0);
    CHECK(al_st_read_f32(&f, "layer.b", rb, 1, sb, &err) == 0 && memcmp(rb, b, sizeof b) == 0);
    CHECK(al_st_read_f32(&f, "scale", rs, 0, NULL, &err) == 0 && rs[0] == 42.0f);
    CHECK(al_st_read_f32(&f, "zz", rw, 2, sw, &err) == -1 && strcmp(err.msg, "missing tensor 'zz'") == 0);
    int64_t bad[2] = {3, 2};
    CHECK(al_st_read_f32(&f, "layer.w", rw, 2, bad, &err) == -1);
    CHECK_MSG(strcmp(err.msg, "tensor 'layer.w' has shape [2, 3], expected [3, 2]") == 0, "%s", err.msg);
    CHECK(al_st_read_f32(&f, "layer.b", rb, 2, sw, &err) == -1 && strstr(err.msg, "expected [2, 3]"));
    al_st_close(&f);

    /* no metadata, no tensors: still a valid file */
    CHECK(al_st_write_f32(tp(p, "empty.safetensors"), NULL, 0, NULL, 0, &err) == 0);
    CHECK(al_st_open(&f, p, &err) == 0 && f.n_tensors == 0);
    al_st_close(&f);

    /* the writer refuses what the format cannot hold */
    al_st_out_tensor dup[2] = {{"a", w, 1, {2}}, {"a", b, 1, {3}}};
    CHECK(al_st_write_f32(tp(p, "dup.safetensors"), dup, 2, NULL, 0, &err) == -1 && strstr(err.msg, "duplicate"));
    CHECK(access(p, F_OK) != 0);
    al_st_out_tensor neg[1] = {{"a", w, 1, {-1}}};
    CHECK(al_st_write_f32(p, neg, 1, NULL, 0, &err) == -1 && strstr(err.msg, "negative"));
}

static void test_st_dtypes(void) {
    char p[256];
    /* F16 at 0 (8 bytes), BF16 at 8 (6 bytes), F64 at 14 (16 bytes, unaligned), I32 at 30 */
    unsigned char data[34];
    uint16_t h[4] = {0x3E00, 0xC000, 0x7BFF, 0x0001};  /* 1.5, -2, 65504, 2^-24 */
    uint16_t bf[3] = {al_f32_to_bf16(1.5f), al_f32_to_bf16(-2.0f), al_f32_to_bf16(0.333f)};
    double d[2] = {0.1, -3.25};
    int32_t iv = 7;
    CHECK(bf[0] == 0x3FC0 && bf[1] == 0xC000 && bf[2] == 0x3EAA);
    memcpy(data, h, 8);
    memcpy(data + 8, bf, 6);
    memcpy(data + 14, d, 16);
    memcpy(data + 30, &iv, 4);
    make_st(tp(p, "dt.safetensors"),
            "{\"__metadata__\":{\"k\":\"v\"},"
            "\"c\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[14,30]},"
            "\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
            "\"b\":{\"data_offsets\":[8,14],\"shape\":[3],\"dtype\":\"BF16\"},"
            "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[30,34]}}  ",
            data, sizeof data);
    al_st_file f;
    al_err err = {{0}};
    CHECK_MSG(al_st_open(&f, p, &err) == 0, "%s", err.msg);
    float out[4];
    int64_t s22[2] = {2, 2}, s3[1] = {3}, s2[1] = {2}, s1[1] = {1};
    CHECK(al_st_read_f32(&f, "a", out, 2, s22, &err) == 0);
    CHECK(out[0] == 1.5f && out[1] == -2.0f && out[2] == 65504.0f && out[3] == ldexpf(1.0f, -24));
    CHECK(al_st_read_f32(&f, "b", out, 1, s3, &err) == 0);
    CHECK(out[0] == 1.5f && out[1] == -2.0f && out[2] == from_bits(0x3EAA0000u) && out[2] == 0.33203125f);
    CHECK(al_st_read_f32(&f, "c", out, 1, s2, &err) == 0);
    CHECK(out[0] == (float)0.1 && out[1] == -3.25f);
    CHECK(al_st_read_f32(&f, "i", out, 1, s1, &err) == -1 && strstr(err.msg, "I32") && strstr(err.msg, "floating"));
    al_st_close(&f);
}

static void test_st_bad(void) {
    char p[256];
    write_raw(tp(p, "short.safetensors"), "abcd", 4);
    EXPECT_ST_FAIL(p, "too short");
    unsigned char big[16] = {0};
    uint64_t hl = 1000;
    memcpy(big, &hl, 8);
    write_raw(tp(p, "hl.safetensors"), big, sizeof big);
    EXPECT_ST_FAIL(p, "exceeds");
    hl = (uint64_t)1 << 40;
    memcpy(big, &hl, 8);
    write_raw(p, big, sizeof big);
    EXPECT_ST_FAIL(p, "implausibly large");
    CHECK(al_st_open(&(al_st_file){0}, tp(p, "does-not-exist"), &(al_err){{0}}) == -1);

    BAD_HEADER("{\"x\": {", 0, "not valid JSON");
    BAD_HEADER("", 0, "not valid JSON");
    BAD_HEADER("[1, 2]", 0, "not a JSON object");
    BAD_HEADER("{} junk", 0, "trailing");
    BAD_HEADER("{\"x\": 3}", 0, "not an object");
    BAD_HEADER("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing 'dtype'");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "missing 'shape'");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "missing 'data_offsets'");
    BAD_HEADER("{\"x\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
               "unsupported dtype 'I8' for tensor 'x'");
    BAD_HEADER("{\"x\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not a string");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "non-integer");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "dims");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "out of order");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "two non-negative");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", 8, "two non-negative");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "overlap");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[40,48]}}", 8, "outside");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 12, "need 12");
    BAD_HEADER("{\"x\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "need 4");
    BAD_HEADER("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "duplicate tensor name 'x'");
}

/* A valid file cut short anywhere must be rejected, never read past its end. */
static void test_st_truncated(void) {
    char p[256], q[256];
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = (float)i;
    al_st_out_tensor ts[2] = {{"a", w, 2, {2, 4}}, {"b", w + 8, 1, {8}}};
    al_err err = {{0}};
    CHECK(al_st_write_f32(tp(p, "full.safetensors"), ts, 2, NULL, 0, &err) == 0);
    char *raw;
    size_t len;
    CHECK(al_read_file(p, &raw, &len, &err) == 0);
    if (!raw || len < 8) return;
    uint64_t hl;
    memcpy(&hl, raw, 8);
    size_t cuts[] = {0, 4, 7, 8, 8 + (size_t)hl / 2, 8 + (size_t)hl, 8 + (size_t)hl + 17, len - 4, len - 1};
    const char *words[] = {"too short", "too short", "too short", "exceeds", "exceeds", "outside", "outside",
                           "outside", "outside"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        int before = test_failures_;
        write_raw(tp(q, "cut.safetensors"), raw, cuts[i]);
        expect_st_fail_at(__LINE__, q, words[i]);
        if (test_failures_ != before) fprintf(stderr, "  (file cut at %zu of %zu bytes)\n", cuts[i], len);
    }
    free(raw);
}

/* Lists tmpdir and reports whether any leftover temp file exists. */
static int has_tmp_leftover(void) {
    DIR *d = opendir(tmpdir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) found |= strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return found;
}

static void test_atomic(void) {
    char p[256];
    al_err err = {{0}};
    CHECK(al_write_file_atomic(tp(p, "a.txt"), "first", 5, &err) == 0);
    CHECK(al_write_file_atomic(p, "second!", 7, &err) == 0);
    char *data;
    size_t len;
    CHECK(al_read_file(p, &data, &len, &err) == 0 && len == 7 && strcmp(data, "second!") == 0);
    free(data);
    CHECK(al_write_file_atomic(tp(p, "empty.txt"), NULL, 0, &err) == 0);
    CHECK(al_read_file(p, &data, &len, &err) == 0 && len == 0 && data[0] == '\0');
    free(data);
    CHECK(!has_tmp_leftover());

    err.msg[0] = '\0';
    CHECK(al_write_file_atomic(tp(p, "no/such/dir/x.bin"), "x", 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, p) && strstr(err.msg, "No such file"), "%s", err.msg);
    CHECK(al_read_file(tp(p, "missing.txt"), &data, &len, &err) == -1 && strstr(err.msg, "missing.txt"));

    /* streaming writer: pieces, abort leaves nothing, abort after commit is safe */
    al_afile a;
    CHECK(al_afile_open(&a, tp(p, "s.txt"), &err) == 0);
    CHECK(al_afile_write(&a, "ab", 2, &err) == 0 && al_afile_write(&a, "cd", 2, &err) == 0);
    CHECK(al_afile_commit(&a, &err) == 0);
    al_afile_abort(&a);
    CHECK(al_read_file(p, &data, &len, &err) == 0 && strcmp(data, "abcd") == 0);
    free(data);
    CHECK(al_afile_open(&a, tp(p, "gone.txt"), &err) == 0);
    CHECK(al_afile_write(&a, "zz", 2, &err) == 0);
    al_afile_abort(&a);
    CHECK(access(p, F_OK) != 0 && !has_tmp_leftover());
}

static void test_npy(void) {
    char p[256];
    al_err err = {{0}};
    float v[6] = {1, 2, 3, 4, 5.5f, -6};
    int64_t s23[2] = {2, 3};
    CHECK(al_npy_write_f32(tp(p, "a.npy"), v, 2, s23, &err) == 0);
    char *raw;
    size_t len;
    CHECK(al_read_file(p, &raw, &len, &err) == 0);
    /* what np.save(np.zeros((2, 3), np.float32)) writes */
    char want[128];
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
    memset(want + 10, ' ', sizeof want - 10);
    memcpy(want + 10, dict, strlen(dict));
    want[127] = '\n';
    CHECK(len == 128 + 24 && memcmp(raw, want, 128) == 0 && memcmp(raw + 128, v, 24) == 0);
    free(raw);

    float *out;
    int nd;
    int64_t sh[AL_ST_MAX_DIMS];
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == 0 && nd == 2 && sh[0] == 2 && sh[1] == 3);
    CHECK(memcmp(out, v, sizeof v) == 0);
    free(out);

    int64_t s1[1] = {5};
    CHECK(al_npy_write_f32(tp(p, "b.npy"), v, 1, s1, &err) == 0);
    CHECK(al_read_file(p, &raw, &len, &err) == 0 && strstr(raw + 10, "'shape': (5,), }") && (len - 20) % 64 == 0);
    free(raw);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == 0 && nd == 1 && sh[0] == 5 && memcmp(out, v, 20) == 0);
    free(out);

    float big[24];
    for (int i = 0; i < 24; i++) big[i] = (float)i * 0.5f - 3;
    int64_t s234[3] = {2, 3, 4};
    CHECK(al_npy_write_f32(tp(p, "c.npy"), big, 3, s234, &err) == 0);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == 0 && nd == 3 && sh[0] == 2 && sh[1] == 3 && sh[2] == 4);
    CHECK(memcmp(out, big, sizeof big) == 0);
    free(out);

    /* a dict that would end exactly on 64 bytes gets a full 64 bytes of padding,
     * as numpy's _wrap_header does (dict 117 + 64 + '\n' = 182 bytes, data at 192) */
    int64_t edge[3] = {0, 100000000000000000, 1000000000000000000};
    CHECK(al_npy_write_f32(tp(p, "edge.npy"), NULL, 3, edge, &err) == 0);
    CHECK(al_read_file(p, &raw, &len, &err) == 0 && len == 192 && raw[8] == (char)182 && raw[191] == '\n');
    free(raw);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == 0 && nd == 3 && sh[0] == 0 && sh[2] == edge[2]);
    free(out);

    /* v2.0 header (u32 length), double quotes, no trailing comma */
    unsigned char v2[128 + 8];
    const char *d2 = "{\"descr\": \"<f4\", \"shape\": (2,), \"fortran_order\": False}";
    memset(v2, ' ', 128);
    memcpy(v2, "\x93NUMPY\x02\x00\x74\x00\x00\x00", 12);
    memcpy(v2 + 12, d2, strlen(d2));
    v2[127] = '\n';
    memcpy(v2 + 128, v, 8);
    write_raw(tp(p, "v2.npy"), v2, sizeof v2);
    CHECK_MSG(al_npy_read_f32(p, &out, &nd, sh, &err) == 0, "%s", err.msg);
    CHECK(nd == 1 && sh[0] == 2 && out && out[0] == 1 && out[1] == 2);
    free(out);

    /* rejections */
    struct {
        const char *dict;
        size_t dlen;
        const char *word;
    } bad[] = {
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, "'<f8' is not supported"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "not supported"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, "Fortran"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, "truncated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12, "needs 8"},
        {"{'descr': '<f4', 'shape': (2,), }", 8, "malformed"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, "malformed"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", 8, "malformed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char buf[256] = {0};
        size_t hl = strlen(bad[i].dict);
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        buf[8] = (unsigned char)hl;
        memcpy(buf + 10, bad[i].dict, hl);
        write_raw(tp(p, "bad.npy"), buf, 10 + hl + bad[i].dlen);
        out = NULL;
        int rc = al_npy_read_f32(p, &out, &nd, sh, &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, bad[i].word) && strstr(err.msg, p), "case %zu: %s", i, err.msg);
        CHECK(out == NULL);
    }
    write_raw(p, "\x93NUMPX\x01\x00\x00\x00", 10);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == -1 && strstr(err.msg, "magic"));
    write_raw(p, "\x93NUMPY\x01\x00\x40\x00{", 11);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == -1 && strstr(err.msg, "truncated"));
    write_raw(p, "\x93NUMPY\x03\x00\x00\x00\x00\x00", 12);
    CHECK(al_npy_read_f32(p, &out, &nd, sh, &err) == -1 && strstr(err.msg, "version 3.0"));
}

static void test_bf16(void) {
    CHECK(al_f32_to_bf16(1.0f) == 0x3F80 && al_f32_to_bf16(-2.0f) == 0xC000);
    CHECK(al_f32_to_bf16(from_bits(0x3F808000u)) == 0x3F80);  /* tie -> even (down) */
    CHECK(al_f32_to_bf16(from_bits(0x3F818000u)) == 0x3F82);  /* tie -> even (up) */
    CHECK(al_f32_to_bf16(from_bits(0x3F808001u)) == 0x3F81);  /* above tie */
    CHECK(al_f32_to_bf16(from_bits(0x3F807FFFu)) == 0x3F80);  /* below tie */
    CHECK(al_f32_to_bf16(from_bits(0x7F7FFFFFu)) == 0x7F80);  /* FLT_MAX rounds to inf */
    CHECK(al_f32_to_bf16(INFINITY) == 0x7F80 && al_f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(al_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(al_f32_to_bf16(from_bits(0x00018000u)) == 0x0002);  /* f32 subnormal, tie -> even */
    CHECK(isnan(al_bf16_to_f32(al_f32_to_bf16(NAN))));
    CHECK(isnan(al_bf16_to_f32(al_f32_to_bf16(from_bits(0x7F800001u)))));  /* payload only in low bits */
    CHECK(al_bf16_to_f32(0x3EAA) == 0.33203125f);
    int ok = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = al_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && al_f32_to_bf16(f) != h) ok = 0;
    }
    CHECK(ok);
}

static void test_f16(void) {
    CHECK(al_f32_to_f16(1.0f) == 0x3C00 && al_f32_to_f16(-2.0f) == 0xC000 && al_f32_to_f16(1.5f) == 0x3E00);
    CHECK(al_f32_to_f16(0.0f) == 0x0000 && al_f32_to_f16(-0.0f) == 0x8000);
    CHECK(al_f32_to_f16(65504.0f) == 0x7BFF && al_f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(al_f32_to_f16(65520.0f) == 0x7C00 && al_f32_to_f16(1e10f) == 0x7C00 && al_f32_to_f16(-1e10f) == 0xFC00);
    CHECK(al_f32_to_f16(INFINITY) == 0x7C00 && al_f32_to_f16(-INFINITY) == 0xFC00);
    uint16_t n = al_f32_to_f16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    n = al_f32_to_f16(from_bits(0x7F800001u));  /* payload only in dropped bits */
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    CHECK(al_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3C00);      /* tie -> even (down) */
    CHECK(al_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3C02);  /* tie -> even (up) */
    /* subnormals: units of 2^-24 */
    CHECK(al_f32_to_f16(ldexpf(1, -24)) == 0x0001 && al_f32_to_f16(-ldexpf(1, -24)) == 0x8001);
    CHECK(al_f32_to_f16(ldexpf(1, -25)) == 0x0000);  /* tie -> even (zero) */
    CHECK(al_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 0x0001);
    CHECK(al_f32_to_f16(ldexpf(3, -25)) == 0x0002);  /* 1.5 units: tie -> 2 */
    CHECK(al_f32_to_f16(ldexpf(5, -25)) == 0x0002);  /* 2.5 units: tie -> 2 */
    CHECK(al_f32_to_f16(ldexpf(1023, -24)) == 0x03FF);
    CHECK(al_f32_to_f16(ldexpf(2047, -25)) == 0x0400);  /* rounds up into the normals */
    CHECK(al_f32_to_f16(ldexpf(1, -14)) == 0x0400);
    CHECK(al_f32_to_f16(1e-30f) == 0 && al_f32_to_f16(from_bits(1)) == 0);

    CHECK(al_f16_to_f32(0x0001) == ldexpf(1, -24) && al_f16_to_f32(0x03FF) == ldexpf(1023, -24));
    CHECK(al_f16_to_f32(0x8001) == -ldexpf(1, -24));
    CHECK(al_f16_to_f32(0x0400) == ldexpf(1, -14) && al_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(al_f16_to_f32(0x7C00) == INFINITY && al_f16_to_f32(0xFC00) == -INFINITY);
    CHECK(isnan(al_f16_to_f32(0x7E00)) && isnan(al_f16_to_f32(0x7C01)));
    CHECK(al_f16_to_f32(0x8000) == 0 && signbit(al_f16_to_f32(0x8000)));
    CHECK(to_bits(al_f16_to_f32(0x3555)) == 0x3EAAA000u);  /* 0.333251953125 */

    /* every non-NaN half survives f16 -> f32 -> f16 */
    int ok = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = al_f16_to_f32((uint16_t)h);
        if (!isnan(f) && al_f32_to_f16(f) != h) ok = 0;
    }
    CHECK(ok);
}

/* Removes the test directory and everything in it. */
static void cleanup(void) {
    DIR *d = opendir(tmpdir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    CHECK(rmdir(tmpdir) == 0);
}

/* Text the error lines and paths are built from: al_strfmt marks a cut
 * (after a whole UTF-8 character), al_sprintf never cuts, al_errf keeps a
 * long message's start and end, and shapes print whole. */
static void test_text(void) {
    char buf[8];
    CHECK(al_strfmt(buf, sizeof buf, "%s", "abcdefg") == 0 && !strcmp(buf, "abcdefg"));
    CHECK(al_strfmt(buf, sizeof buf, "%s", "abcdefgh") == 1 && !strcmp(buf, "abcd..."));
    CHECK(al_strfmt(buf, sizeof buf, "%s", "abc\xc3\xa9" "fgh") == 1 && !strcmp(buf, "abc...")); /* not half an é */
    char *long_path = malloc(5001);
    CHECK(long_path != NULL);
    if (!long_path) return;
    memset(long_path, 'd', 5000);
    long_path[5000] = 0;
    char *p = al_sprintf("%s/config.json", long_path);
    CHECK(p && strlen(p) == 5012 && !strcmp(p + 5000, "/config.json"));
    al_err err;
    al_errf(&err, "%s: %s", p, "File name too long");
    CHECK_MSG(strlen(err.msg) == AL_ERR_LEN - 1 && !strncmp(err.msg, "ddd", 3) && strstr(err.msg, "d...d") &&
                  strstr(err.msg, "/config.json: File name too long"),
              "%s", err.msg);
    al_errf(&err, "no such tensor");
    al_err_prefix(&err, "%s", p);
    CHECK_MSG(strlen(err.msg) == AL_ERR_LEN - 1 && strstr(err.msg, "/config.json: no such tensor"), "%s", err.msg);
    free(p);
    free(long_path);
    char shape[AL_ST_SHAPE_STR_LEN];
    int64_t big[AL_ST_MAX_DIMS];
    for (int i = 0; i < AL_ST_MAX_DIMS; i++) big[i] = INT64_MIN;
    al_st_shape_str(shape, sizeof shape, AL_ST_MAX_DIMS, big);
    CHECK_MSG(shape[strlen(shape) - 1] == ']' && !strstr(shape, "..."), "%s", shape);
    CHECK(!strcmp(al_st_shape_str(shape, sizeof shape, 2, (const int64_t[]){3, 4}), "[3, 4]"));
}

/* al_text: appends grow the buffer past its first 4096 bytes and keep every
 * byte; CSV fields are quoted exactly when RFC 4180 needs it; once oom is
 * set, appends change nothing. */
static void test_text_buffer(void) {
    al_text t = {0};
    CHECK(!strcmp(al_text_str(&t), "") && t.len == 0);
    for (int i = 0; i < 3000; i++) al_text_printf(&t, "%d,", i % 10);
    CHECK(!t.oom && t.len == 6000 && strlen(t.s) == 6000 && t.cap > t.len);
    int ok = 1;
    for (int i = 0; i < 3000; i++) ok &= t.s[2 * i] == '0' + i % 10 && t.s[2 * i + 1] == ',';
    CHECK(ok);
    free(t.s);
    static const char *const fields[][2] = {
        {"plain", "plain"}, {"", ""}, {"a,b", "\"a,b\""}, {"say \"hi\"", "\"say \"\"hi\"\"\""},
        {"two\nlines", "\"two\nlines\""}, {"cr\r", "\"cr\r\""}, {"semi;colon", "semi;colon"}};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        al_text f = {0};
        al_text_csv_field(&f, fields[i][0]);
        CHECK_MSG(!f.oom && !strcmp(al_text_str(&f), fields[i][1]) && f.len == strlen(fields[i][1]), "%s -> %s",
                  fields[i][0], al_text_str(&f));
        free(f.s);
    }
    al_text full = {0};
    al_text_printf(&full, "kept");
    full.oom = 1; /* as after a failed allocation */
    al_text_printf(&full, "%s", "dropped");
    al_text_csv_field(&full, "x,y");
    CHECK(full.len == 4 && !strcmp(full.s, "kept"));
    free(full.s);
}

/* json.c: a parse tells text that is not JSON from a failed allocation; an
 * item that cannot be added is freed (LeakSanitizer sees the run under ASan)
 * and counted, and a writer's document built since a mark with such a
 * failure is refused while a later one prints; a member read out of a block.
 * (Allocation failures themselves: the fault sweep, tests/cli/test_faults.sh.) */
static void test_json(void) {
    int oom = -1;
    cJSON *j = al_json_parse("{\"a\": [1, 2]}", 14, &oom);
    CHECK(cJSON_IsObject(j) && oom == 0);
    cJSON_Delete(j);
    CHECK(al_json_parse("{\"a\": [1, 2", 11, &oom) == NULL && oom == 0);
    CHECK(al_json_parse("", 0, &oom) == NULL && oom == 0);

    unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject();
    CHECK(al_json_add(root, "n", cJSON_CreateNumber(1)) == 1 && al_json_push(NULL, NULL) == 0);
    CHECK(al_json_failed_since(mark));
    CHECK(al_json_print(root, 0, mark) == NULL); /* the document lost an item: not written */
    mark = al_json_mark();
    CHECK(al_json_add(NULL, "lost", cJSON_CreateString("freed, not leaked")) == 0 && al_json_failed_since(mark));
    mark = al_json_mark();
    cJSON *arr = cJSON_CreateArray();
    CHECK(al_json_push(arr, cJSON_CreateTrue()) == 1 && al_json_add(root, "a", arr) == 1);
    char *text = al_json_print(root, 0, mark);
    CHECK(text && !strcmp(text, "{\"n\":1,\"a\":[true]}"));
    free(text);
    cJSON_Delete(root);

    al_err err;
    char *out = (char *)1;
    CHECK(al_json_member_text("{\"train\": {\"context\": 16}, \"step\": 4}", "train", &out, &err) == 0 && out &&
          !strcmp(out, "{\"context\":16}"));
    free(out);
    CHECK(al_json_member_text("{\"step\": 4}", "train", &out, &err) == 0 && out == NULL);
    CHECK(al_json_member_text("not json", "train", &out, &err) == 0 && out == NULL);
    CHECK(al_json_member_text(NULL, "train", &out, &err) == 0 && out == NULL);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/al_test_io.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_st_roundtrip();
    test_st_dtypes();
    test_st_bad();
    test_st_truncated();
    test_atomic();
    test_npy();
    test_bf16();
    test_f16();
    test_text();
    test_text_buffer();
    test_json();
    cleanup();
    return TEST_EXIT();
}
