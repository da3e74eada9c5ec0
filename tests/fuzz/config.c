/*
 * config.c (fuzz harness): config.json, src/model/config.c: attnlab's own
 * ("attnlab" block, format versions 1 and 2) and Hugging Face's (Llama,
 * Mistral, Qwen2/3, Gemma, DeepSeek-V2 families).
 *
 * Input: the JSON text. A config that parses is validated and shown through
 * the one JSON view; one of attnlab's own models (only those are ever saved:
 * a Hugging Face model is read in place) is saved and parsed back, and the
 * round trip must give a config the field table calls the same.
 */
#include "fuzz.h"

#include <cJSON.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;
    al_config c, back;
    char *extra = NULL;
    al_err err;
    int rc = al_config_parse(&c, text, &extra, &err);
    free(text);
    if (rc) {
        if (!err.msg[0] || strchr(err.msg, '\n')) { fprintf(stderr, "bad error line: [%s]\n", err.msg); abort(); } /* a refusal is one line */
        free(extra);
        return 0;
    }
    if (al_config_validate(&c, &err) == 0) {
        cJSON *view = cJSON_CreateObject();
        if (!view || al_config_view(&c, view)) abort();
        cJSON_Delete(view);
        const char *path = fuzz_file(0, "config.json", "", 0);
        if (c.hf == AL_HF_NONE && al_config_save(&c, path, extra, &err) == 0) {
            char *again = NULL;
            if (al_config_load(&back, path, &again, &err)) {
                fprintf(stderr, "saved config does not load back: %s\n", err.msg);
                abort();
            }
            char why[256];
            if (!al_config_same(&c, &back, why, sizeof why)) {
                fprintf(stderr, "saved config differs on loading: %s\n", why);
                abort();
            }
            free(again);
        }
    }
    free(extra);
    return 0;
}
