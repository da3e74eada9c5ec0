/*
 * main.c: `attnlab <command> [flags]`: dispatches to one file per command.
 */
#include <stdio.h>
#include <string.h>

#include "attnlab.h"
#include "cli.h"
#include "core/blas.h"
#include "core/cpu.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a byte-level language model or a vision transformer"},
    {"eval", cmd_eval, "loss and bits per byte on a file; accuracy on the test images"},
    {"generate", cmd_generate, "sample text with a KV cache"},
    {"info", cmd_info, "parameters, FLOPs and KV-cache sizes of a model"},
    {"attnmap", cmd_attnmap, "attention weights of chosen heads over a long input, with statistics"},
    {"heads", cmd_heads, "head similarity and effective rank across KV designs"},
    {"explore", cmd_explore, "one self-contained HTML page to browse every layer's and head's attention"},
    {"compare", cmd_compare, "the same head of several models side by side (e.g. poly vs softmax)"},
    {"study", cmd_study, "train and compare the five KV designs and two score functions; report + figures"},
    {"bench", cmd_bench, "measure speed against this machine's ceilings"},
    {"tokenize", cmd_tokenize, "text -> token ids and back with a model's tokenizer"},
    {"convert", cmd_convert, "convert a trained MHA/GQA model into GQA, MQA, MLA or LRKV"},
    {"kvlab", cmd_kvlab, "KV-cache compression frontier: bytes per token against loss, per model and method"},
};

static void usage(FILE *f) {
    fprintf(f, "attnlab %s: train, run and inspect transformer attention variants\n\nusage: attnlab <command> [flags]\n\ncommands:\n",
            AL_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'attnlab <command> --help' describes each command's flags.\n");
}

int main(int argc, char **argv) {
    al_blas_fix_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("attnlab %s\n", AL_VERSION);
        return 0;
    }
    al_err err;
    if (al_cpu_init(&err)) fprintf(stderr, "attnlab: %s\n", err.msg); /* a bad ATTNLAB_CPU: warn, then run */
    if (al_cpu_amx_refused())
        fprintf(stderr, "attnlab: note: this CPU has AMX but Linux refused this process the tile state (arch_prctl); "
                        "running on %s\n", al_cpu_level_name(al_cpu_detect()));
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "attnlab: unknown command '%s' (see 'attnlab --help')\n", argv[1]);
    return 2;
}
