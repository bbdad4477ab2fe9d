/* probe.h - the machine's own ceilings, measured once at start-up before
 * posattnd listens (main.c; --no-probe skips it): float32 FMA GFLOP/s on
 * one thread and on the workers, and read bandwidth past the caches on
 * one and on the workers. The figures go to GET /v1/schemes ("machine"),
 * to /metrics (posattn_machine_gflops, posattn_machine_read_gbps) and make
 * each attention item's fraction_of_peak (api/roofline.c). The method is
 * bench/ceiling.c's (independent FMA chains in registers at the widest
 * vector width; threads summing disjoint slices of one buffer), cut to
 * fit a budget of about 100 ms: the buffer is 16-64 MiB (what its first
 * touch allows in the budget) and flushed from the caches (clflush) before
 * each pass, where bench/ceiling.c reads 4x the last-level cache.
 */
#ifndef SRV_PROBE_H
#define SRV_PROBE_H

#include "api/api.h"

#include <stdio.h>

/* Measures the ceilings into *m (workers: --workers, the second figures'
 * thread count). Takes about 60-100 ms on a quiet machine, each phase
 * stopping once its share of the budget is spent, so a slow or busy
 * machine (or a sanitizer build) does not take much longer (100-370 ms
 * seen on 2 cores at a load average of 9-10); on a machine shared with
 * other work the figures read low (the best of several short runs is kept
 * to soften that, and the workers' figures are at least one thread's). Starts and joins its own threads; call
 * before the worker pool runs. */
void srv_probe_run(srv_machine *m, int workers);

/* *m as --no-probe leaves it: probed false, no figures, the CPU's name
 * and the workers. */
void srv_probe_none(srv_machine *m, int workers);

/* The gauges posattn_machine_gflops{dtype="f32",threads} and
 * posattn_machine_read_gbps{threads} (nothing without a probe). */
void srv_probe_write_metrics(FILE *f, const srv_machine *m);

#endif
