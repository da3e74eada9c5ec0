/*
 * ckpt.c: the weights of a Hugging Face checkpoint directory, memory-mapped.
 *
 * A directory holds either one model.safetensors or shards
 * model-XXXXX-of-YYYYY.safetensors listed by model.safetensors.index.json,
 * whose "weight_map" object maps every tensor name to the shard file that
 * holds it (the convention of transformers' save_pretrained; the file names
 * are not interpreted, only looked up). One file present wins over an index,
 * as in transformers.
 *
 * Data structure: al_ckpt keeps every shard open as a read-only mapping
 * (al_st_open_map) and one table of entries (tensor name -> shard, tensor)
 * sorted by name, so a lookup is a binary search and the bytes of a tensor
 * are used in place. With an index, the table holds exactly the tensors the
 * index names, each checked to exist in its shard; tensors a shard holds
 * beyond the index are not visible (transformers' loader would ignore them
 * too).
 */
#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io.h"

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const al_ckpt_entry *)a)->name, ((const al_ckpt_entry *)b)->name);
}

/* Opens shard `name` of dir (once: a name already open returns its index). */
static int open_shard(al_ckpt *c, const char *name, al_err *err) {
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->file_names[i], name) == 0) return i;
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return al_errf(err, "%s/model.safetensors.index.json: shard name '%.200s' is not a file name in the directory",
                       c->dir, name);
    char *path = al_sprintf("%s/%s", c->dir, name);
    if (!path) return al_errf(err, "out of memory");
    int i = c->n_files, rc = al_st_open_map(&c->files[i], path, err);
    free(path);
    if (rc) return -1;
    if (!(c->file_names[i] = strdup(name))) {
        al_st_close(&c->files[i]);
        return al_errf(err, "out of memory");
    }
    c->file_bytes += c->files[i].blob_len;
    c->n_files++;
    return i;
}

/* The index form: weight_map -> shards opened, entries listed and checked. */
static int open_index(al_ckpt *c, const char *path, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(path, &text, &len, err)) return -1;
    int oom;
    cJSON *root = al_json_parse(text, len, &oom);
    free(text);
    int rc = 0;
    const int object = cJSON_IsObject(root);
    const cJSON *map = object ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (oom) rc = al_errf(err, "%s: out of memory", path);
    else if (!object) rc = al_errf(err, "%s: not a JSON object", path);
    else if (!cJSON_IsObject(map)) rc = al_errf(err, "%s: no \"weight_map\" object", path);
    int n = 0;
    if (!rc)
        for (const cJSON *e = map->child; e; e = e->next) n++;
    if (!rc && n == 0) rc = al_errf(err, "%s: \"weight_map\" is empty", path);
    if (!rc) {
        c->entries = calloc((size_t)n, sizeof *c->entries);
        c->files = calloc((size_t)n, sizeof *c->files); /* at most one shard per tensor */
        c->file_names = calloc((size_t)n, sizeof *c->file_names);
        if (!c->entries || !c->files || !c->file_names) rc = al_errf(err, "out of memory");
    }
    for (const cJSON *e = rc ? NULL : map->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e)) {
            rc = al_errf(err, "%s: weight_map entry '%.200s' is not a file name", path, e->string);
            break;
        }
        int f = open_shard(c, e->valuestring, err);
        if (f < 0) {
            rc = -1;
            break;
        }
        const al_st_tensor *t = al_st_find(&c->files[f], e->string);
        if (!t) {
            rc = al_errf(err, "%s: the index puts tensor '%.200s' in %s, which does not hold it", path, e->string,
                         e->valuestring);
            break;
        }
        c->entries[c->n_entries++] = (al_ckpt_entry){t->name, f, t};
    }
    cJSON_Delete(root);
    return rc;
}

int al_ckpt_open(al_ckpt *c, const char *dir, al_err *err) {
    memset(c, 0, sizeof *c);
    if (!(c->dir = strdup(dir))) return al_errf(err, "out of memory");
    struct stat st;
    char *single = al_sprintf("%s/model.safetensors", dir), *index = al_sprintf("%s/model.safetensors.index.json", dir);
    int rc = single && index ? 0 : al_errf(err, "out of memory");
    if (!rc && (stat(single, &st) == 0 || stat(index, &st) != 0)) {
        /* one file (if it is missing too, opening it names the problem) */
        c->files = calloc(1, sizeof *c->files);
        c->file_names = calloc(1, sizeof *c->file_names);
        if (!c->files || !c->file_names) rc = al_errf(err, "out of memory");
        if (!rc && open_shard(c, "model.safetensors", err) < 0) rc = -1;
        if (!rc && c->files[0].n_tensors > 0 &&
            !(c->entries = calloc((size_t)c->files[0].n_tensors, sizeof *c->entries)))
            rc = al_errf(err, "out of memory");
        for (int t = 0; !rc && t < c->files[0].n_tensors; t++)
            c->entries[c->n_entries++] = (al_ckpt_entry){c->files[0].tensors[t].name, 0, &c->files[0].tensors[t]};
    } else if (!rc) {
        c->sharded = 1;
        rc = open_index(c, index, err);
    }
    if (!rc) qsort(c->entries, (size_t)c->n_entries, sizeof *c->entries, cmp_entry);
    for (int i = 1; i < c->n_entries && !rc; i++)
        if (strcmp(c->entries[i - 1].name, c->entries[i].name) == 0)
            rc = al_errf(err, "%s: tensor '%.200s' is listed twice", index, c->entries[i].name);
    free(single);
    free(index);
    if (rc) al_ckpt_close(c);
    return rc;
}

void al_ckpt_close(al_ckpt *c) {
    for (int i = 0; i < c->n_files; i++) {
        al_st_close(&c->files[i]);
        free(c->file_names[i]);
    }
    free(c->files);
    free(c->file_names);
    free(c->entries);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

const al_ckpt_entry *al_ckpt_find(const al_ckpt *c, const char *name) {
    const al_ckpt_entry key = {name, 0, NULL};
    if (c->n_entries == 0) return NULL;
    return bsearch(&key, c->entries, (size_t)c->n_entries, sizeof *c->entries, cmp_entry);
}

const void *al_ckpt_data(const al_ckpt *c, const al_ckpt_entry *e) { return c->files[e->file].data + e->t->offset; }

const char *al_ckpt_file_name(const al_ckpt *c, const al_ckpt_entry *e) { return c->file_names[e->file]; }
