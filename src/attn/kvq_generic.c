/*
 * kvq_generic.c: the quantised-cache decode kernels of kvq_kern.h in plain
 * C loops, for the generic level of core/cpu.h (ATTNLAB_CPU=generic, or a
 * CPU without AVX2).
 */
#include "attn.h"
#include "kvq.h"
#include "kvq_internal.h"

#define KSFX(name) name##_generic
#include "kvq_kern.h"
