/* model_stats.h - one model's inference counters, as the Open Inference
 * Protocol's statistics extension reports them (Triton's
 * extension_statistics.md) and /metrics exposes them: runtime/metrics.c
 * keeps them, v2/model.c renders them, http/ carries them between.
 */
#ifndef SRV_MODEL_STATS_H
#define SRV_MODEL_STATS_H

#include <stdint.h>

/* The phases of a successful inference, summed in nanoseconds. Triton's
 * names: queue (tasks waiting for a worker, the longest of a request's),
 * compute_input (the body parsed into tensors), compute_infer (the
 * computation, first task's start to last one's end), compute_output (the
 * answer rendered). */
typedef enum srv_model_phase {
    SRV_PHASE_QUEUE,
    SRV_PHASE_INPUT,
    SRV_PHASE_INFER,
    SRV_PHASE_OUTPUT,
    SRV_PHASE_COUNT
} srv_model_phase;

typedef struct srv_model_counts {
    uint64_t success, fail;       /* inference requests answered 200, and otherwise */
    uint64_t success_ns, fail_ns; /* their whole durations, summed */
    uint64_t phase_ns[SRV_PHASE_COUNT];
    uint64_t last_ms; /* the last inference, ms since the epoch; 0 before any */
} srv_model_counts;

#endif
