/* ref_fmt_float.h - the float32 formatter as it was before the fast printer
 * (server/fmt_float.c at commit 39ba74a), frozen as the reference the new
 * one is compared with byte for byte: tests/server/codec/test_fmt_float.c (random bit
 * patterns and dense ranges), bench/check_fmt_float_exhaustive.c --diff (all
 * 2^32 inputs) and bench/bench_json.c (the speed-up, in the same run).
 * That version was checked over all 2^32 inputs for round trip and shortest
 * length, so agreeing with it carries those proofs over.
 */
#ifndef PA_REF_FMT_FLOAT_H
#define PA_REF_FMT_FLOAT_H

/* Same contract as srv_fmt_float (server/codec/fmt_float.h): buf has room for
 * SRV_FMT_FLOAT_BUF bytes; returns the length without the NUL. */
int ref_fmt_float(float v, char *buf);

#endif
