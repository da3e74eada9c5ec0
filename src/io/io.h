/*
 * io.h: files attnlab reads and writes: whole-file reads, atomic writes,
 * safetensors, NPY, IDX.
 *
 * Atomic writes: every output file is written to "<path>.tmp.<pid>", fsync'd,
 * then renamed over <path> (and the directory fsync'd), so a crash or kill at
 * any moment leaves either the old file or the new one, never a half-written
 * file. On error the temp file is removed.
 */
#ifndef AL_IO_H
#define AL_IO_H

#include "../core/core.h"

/* Reads a whole file into a malloc'd buffer (NUL-terminated for convenience;
 * *len excludes the NUL). Errors name the path. */
int al_read_file(const char *path, char **data, size_t *len, al_err *err);

/* JSON through cJSON with its allocation failures seen (json.c says how).
 * The count of this thread's failed cJSON allocations so far, and whether
 * any failed since a mark: a writer takes the mark before building. */
struct cJSON;
unsigned long al_json_mark(void);
int al_json_failed_since(unsigned long mark);
/* cJSON_ParseWithLength; on NULL, *oom says whether an allocation failed
 * (out of memory) rather than the text not being JSON. */
struct cJSON *al_json_parse(const char *text, size_t len, int *oom);
/* The document as text (cJSON_Print when formatted, else unformatted;
 * free() it), or NULL when out of memory: in printing, or in building it
 * since mark (an item that was not added). */
char *al_json_print(const struct cJSON *j, int formatted, unsigned long mark);
/* cJSON_AddItemToObject / cJSON_AddItemToArray that never leak: 1 when
 * added; else item (which may be NULL, a failed creation) is deleted, the
 * failure counted (al_json_failed_since), and 0 returned. */
int al_json_add(struct cJSON *obj, const char *key, struct cJSON *item);
int al_json_push(struct cJSON *arr, struct cJSON *item);
/* Member `key` of the JSON object text json (NULL: none) as unformatted
 * JSON text into *out (malloc'd; NULL when json is not an object holding
 * it). 0, or -1 with one line when out of memory. */
int al_json_member_text(const char *json, const char *key, char **out, al_err *err);
/* Whether JSON value v is a number holding a whole value in [lo, hi]: what
 * an integer field of a file may be converted from (a file may hold any
 * number, and converting one past the type's range is undefined behaviour). */
int al_json_whole_in(const struct cJSON *v, double lo, double hi);

/* Atomic write of one buffer. */
int al_write_file_atomic(const char *path, const void *data, size_t len, al_err *err);

/* Streaming atomic writer, for files assembled from several pieces. A failure
 * removes the temp file and latches: later writes/commit return -1 without
 * overwriting err, so a caller may chain writes and check only the commit. */
typedef struct al_afile {
    FILE *f;
    char *tmp_path;
    char *path;
    int failed;
} al_afile;
int al_afile_open(al_afile *a, const char *path, al_err *err);
int al_afile_write(al_afile *a, const void *data, size_t len, al_err *err);
int al_afile_commit(al_afile *a, al_err *err);  /* flush, fsync, rename, fsync dir */
void al_afile_abort(al_afile *a);               /* remove temp; safe after commit */
/* Removes the temp files ("NAME.tmp.PID") that writers killed before their
 * commit (kill -9, power loss) left in dir: those whose process no longer
 * exists. A live writer's are kept. Sets *removed (may be NULL) to how many
 * went; -1 when dir cannot be read or a file cannot be removed. */
int al_afile_remove_stale(const char *dir, int *removed, al_err *err);

/* ---- safetensors ----
 * Format: u64 little-endian header length N, N bytes of JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the byte buffer. Offsets are relative to
 * the start of the buffer. */
enum { AL_ST_MAX_DIMS = 8 };
/* al_dtype (core/dtype.h) names the element types. */

typedef struct al_st_tensor {
    char *name;
    al_dtype dtype;
    int ndim;
    int64_t shape[AL_ST_MAX_DIMS];
    size_t offset;  /* into the data buffer */
    size_t nbytes;
} al_st_tensor;

typedef struct al_st_file {
    char *blob;        /* whole file: malloc'd, or mapped read-only (mapped) */
    size_t blob_len;
    const char *data;  /* start of the tensor buffer inside blob */
    size_t data_len;
    al_st_tensor *tensors;
    int n_tensors;
    int mapped;        /* blob is an mmap of the file (al_st_open_map) */
} al_st_file;

/* Opens and validates: header length within file, JSON well-formed, every
 * tensor's dtype known, offsets ordered inside the buffer and matching
 * dtype size x shape. */
int al_st_open(al_st_file *f, const char *path, al_err *err);
/* The same checks on a read-only memory map of the file (MAP_PRIVATE):
 * nothing is read beyond the header until tensor bytes are used, and those
 * pages stay file-backed (shared with the page cache, never copied). The
 * file must not shrink while mapped (the kernel would raise SIGBUS). */
int al_st_open_map(al_st_file *f, const char *path, al_err *err);
void al_st_close(al_st_file *f);  /* frees or unmaps */
const al_st_tensor *al_st_find(const al_st_file *f, const char *name);
/* A shape as "[a, b, c]" for messages; a buffer of AL_ST_SHAPE_STR_LEN holds
 * any shape of up to AL_ST_MAX_DIMS dims ("[", 20 digits and ", " a dim,
 * "]"; a smaller one ends in "..."). Returns buf. */
enum { AL_ST_SHAPE_STR_LEN = 3 + 22 * AL_ST_MAX_DIMS };
const char *al_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);
/* Copies tensor `name` into dst as float32, converting from F32/F16/BF16/F64.
 * Fails if missing, or if its shape differs from shape[0..ndim). */
int al_st_read_f32(const al_st_file *f, const char *name, float *dst, int ndim,
                   const int64_t *shape, al_err *err);

/* Writer: collect tensors (pointers must stay valid until write), then write
 * atomically as F32. Metadata is optional key/value strings. */
typedef struct al_st_out_tensor {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[AL_ST_MAX_DIMS];
} al_st_out_tensor;
int al_st_write_f32(const char *path, const al_st_out_tensor *tensors, int n,
                    const char *const *meta_kv, int n_meta, al_err *err);

/* ---- Hugging Face checkpoint directories (ckpt.c) ----
 * The weights of a directory: model.safetensors, or the shards that
 * model.safetensors.index.json's "weight_map" names (tensor -> file), every
 * file memory-mapped read-only. A missing shard, an index naming a tensor its
 * shard lacks, a shard that fails al_st_open_map's checks: one-line errors
 * naming the file. */
typedef struct al_ckpt_entry {
    const char *name;         /* tensor name (owned by its file's table) */
    int file;                 /* index into files[] */
    const al_st_tensor *t;    /* dtype, shape, offset in that file's buffer */
} al_ckpt_entry;
typedef struct al_ckpt {
    char *dir;
    al_st_file *files;        /* [n_files], mapped */
    char **file_names;        /* [n_files], relative to dir */
    int n_files;
    al_ckpt_entry *entries;   /* [n_entries], sorted by name */
    int n_entries;
    int sharded;              /* read through the index */
    size_t file_bytes;        /* total size of the mapped files */
} al_ckpt;
int al_ckpt_open(al_ckpt *c, const char *dir, al_err *err);
void al_ckpt_close(al_ckpt *c);
const al_ckpt_entry *al_ckpt_find(const al_ckpt *c, const char *name); /* NULL if absent */
const void *al_ckpt_data(const al_ckpt *c, const al_ckpt_entry *e);  /* the tensor's bytes, in place */
const char *al_ckpt_file_name(const al_ckpt *c, const al_ckpt_entry *e);

/* ---- NPY v1.0 ---- float32 little-endian, C order, written atomically. */
int al_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape, al_err *err);
/* Reads a float32 ('<f4') C-order NPY; *data malloc'd. ndim <= AL_ST_MAX_DIMS. */
int al_npy_read_f32(const char *path, float **data, int *ndim, int64_t *shape, al_err *err);

/* ---- IDX (the MNIST / Fashion-MNIST format) ----
 * Big-endian: two zero bytes, a type byte (only 0x08, unsigned bytes, is
 * supported), the number of dimensions n (1..AL_IDX_MAX_DIMS), n u32
 * dimensions, then the data in C order. Read through zlib, so the file may be
 * gzip-compressed (.gz) or plain. Truncated files, a wrong magic, an unknown
 * type, a zero dimension or bytes beyond what the dimensions say are refused
 * with one line naming the file. */
enum { AL_IDX_MAX_DIMS = 4 };
typedef struct al_idx {
    int ndim;
    int64_t dims[AL_IDX_MAX_DIMS];
    size_t n;       /* product of dims */
    uint8_t *data;  /* n bytes, malloc'd */
} al_idx;
int al_idx_read(const char *path, al_idx *out, al_err *err);
void al_idx_free(al_idx *x);

#endif
