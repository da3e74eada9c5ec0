/*
 * presets.c: the named configurations (documented in docs/presets.md).
 */
#include "presets.h"

#include <string.h>

static const char *const tiny[] = {"layers=2", "hidden=64", "heads=4", "kv-heads=4", "head-dim=16", "context=64",
                                   "batch=8", "steps=200", "lr=3e-3", "warmup=20", "eval-every=50",
                                   "save-every=100", "eval-tokens=8192", NULL};
static const char *const small[] = {"layers=4", "hidden=256", "heads=8", "kv-heads=8", "head-dim=32",
                                    "context=256", "batch=8", "steps=1500", "lr=2e-3", "warmup=100",
                                    "eval-every=250", "save-every=500", "eval-tokens=65536", NULL};
static const char *const bench[] = {"layers=4", "hidden=256", "heads=8", "kv-heads=8", "head-dim=32",
                                    "context=256", "batch=8", NULL};
static const char *const gpt2[] = {"layers=12", "hidden=768", "heads=12", "kv-heads=12", "head-dim=64",
                                   "context=256", "batch=4", NULL};

static const al_preset presets[] = {
    {"tiny", "2 layers, hidden 64, 4 heads, context 64: seconds; for tests and smoke runs", tiny},
    {"small", "4 layers, hidden 256, 8 heads, context 256 (~3.2M params): the demo model", small},
    {"bench", "4 layers, hidden 256, 8 heads, B=8 x T=256: the training benchmark of issue 2", bench},
    {"gpt2", "12 layers, hidden 768, 12 heads, B=4 x T=256: GPT-2-small-sized (benchmarks)", gpt2},
};

const al_preset *al_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return 0;
}

const al_preset *al_preset_list(int *n) {
    *n = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}
