/*
 * json.c: cJSON with its allocation failures seen. cJSON reports a failed
 * allocation only as a NULL somewhere: a parse that returns NULL (taken for
 * text that is not JSON), an item that silently is not added (a document
 * written without it). So that out of memory is reported as such and never
 * leaves a file short of a member, cJSON's allocations go through a hook
 * (installed before main, while there is one thread: cJSON_InitHooks is not
 * thread-safe) that counts the calls it could not serve, per thread. A parse
 * asks whether its own calls failed; a writer takes a mark before building
 * and prints only when nothing failed since. The hook only counts: an
 * application that installs hooks of its own keeps working, and loses only
 * this detection.
 */
#include "io.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local unsigned long json_failures;

/* cJSON's allocator: malloc, with the failures counted. */
static void *json_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) json_failures++;
    return p;
}

/* Makes json_malloc cJSON's allocator, before main (the top comment says why then). */
__attribute__((constructor)) static void json_install_hooks(void) {
    cJSON_Hooks hooks = {json_malloc, free};
    cJSON_InitHooks(&hooks);
}

unsigned long al_json_mark(void) { return json_failures; }

int al_json_failed_since(unsigned long mark) { return json_failures != mark; }

cJSON *al_json_parse(const char *text, size_t len, int *oom) {
    const unsigned long mark = json_failures;
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    *oom = !j && json_failures != mark;
    return j;
}

char *al_json_print(const cJSON *j, int formatted, unsigned long mark) {
    if (!j || json_failures != mark) return NULL;
    return formatted ? cJSON_Print(j) : cJSON_PrintUnformatted(j); /* NULL when its own allocation fails */
}

int al_json_add(cJSON *obj, const char *key, cJSON *item) {
    if (item && obj && cJSON_AddItemToObject(obj, key, item)) return 1;
    cJSON_Delete(item);
    json_failures++;
    return 0;
}

int al_json_push(cJSON *arr, cJSON *item) {
    if (item && arr && cJSON_AddItemToArray(arr, item)) return 1;
    cJSON_Delete(item);
    json_failures++;
    return 0;
}

int al_json_member_text(const char *json, const char *key, char **out, al_err *err) {
    *out = NULL;
    if (!json) return 0;
    const unsigned long mark = al_json_mark();
    int oom;
    cJSON *j = al_json_parse(json, strlen(json), &oom);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (v) *out = al_json_print(v, 0, mark);
    cJSON_Delete(j);
    return oom || (v && !*out) ? al_errf(err, "out of memory") : 0;
}

/* One check for every reader that converts a file's JSON number to an integer. */
int al_json_whole_in(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo && v->valuedouble <= hi;
}
