/*
 * ckpt_index.c (fuzz harness): a sharded Hugging Face checkpoint directory,
 * src/io/ckpt.c (model.safetensors.index.json and the shards it names).
 *
 * Input: up to three parts split at FUZZ_SEP (fuzz.h): the index JSON, then
 * the shards model-00001-of-00002.safetensors and
 * model-00002-of-00002.safetensors. When the directory opens, every entry
 * must be found by name and its bytes lie inside its mapped shard.
 */
#include "fuzz.h"

#include "io/io.h"

static const char *const shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[3];
    fuzz_split(data, size, part, 3);
    fuzz_file(0, "model.safetensors.index.json", part[0].p, part[0].n);
    for (int i = 0; i < 2; i++) fuzz_file(1 + i, shard_names[i], part[1 + i].p, part[1 + i].n);
    fuzz_unlink("model.safetensors"); /* one file would win over the index */
    al_ckpt c;
    al_err err;
    if (al_ckpt_open(&c, fuzz_dir(), &err)) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort(); /* a refusal is one line */
        return 0;
    }
    unsigned sum = 0;
    for (int i = 0; i < c.n_entries; i++) {
        const al_ckpt_entry *e = &c.entries[i];
        if (al_ckpt_find(&c, e->name) == NULL || e->file < 0 || e->file >= c.n_files) abort();
        const al_st_file *f = &c.files[e->file];
        const uint8_t *p = al_ckpt_data(&c, e);
        if (p < (const uint8_t *)f->data || e->t->nbytes > f->data_len ||
            p + e->t->nbytes > (const uint8_t *)f->data + f->data_len)
            abort();
        for (size_t j = 0; j < e->t->nbytes; j++) sum += p[j]; /* ASan sees any byte outside the map */
        if (!al_ckpt_file_name(&c, e)) abort();
    }
    if (c.n_entries && al_ckpt_find(&c, "\x01 not a tensor")) abort();
    al_ckpt_close(&c);
    return (int)(sum & 0); /* libFuzzer wants 0 */
}
