/* attention_options.h - bench_attention's options section and the
 * softcap's tanh check (attention_options.c).
 */
#ifndef BENCH_ATTENTION_OPTIONS_H
#define BENCH_ATTENTION_OPTIONS_H

#include <stdbool.h>

/* The options of current models and the bias schemes, each against the
 * same call without it, on tmax threads: the rows whose name starts with
 * only (all when only is NULL or ""); counts the targets into *met and
 * *missed. */
void bench_options(int tmax, const char *only, int *met, int *missed);
/* The softcap's tanh on all 2^32 floats against double tanh, on threads
 * threads: prints the check's line; returns whether it met softmax.h's
 * bound. */
bool bench_softcap_tanh(int threads);

#endif
