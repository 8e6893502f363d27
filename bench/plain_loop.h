/* The plain scalar baseline (plain_loop.c, built at -O2 with no -march). */
#ifndef ZGATE_BENCH_PLAIN_LOOP_H
#define ZGATE_BENCH_PLAIN_LOOP_H

#include <stdint.h>

void plain_bwd_f32(const float *dout, const float *z, const float *o, float *dz, float *dos,
                   int64_t n);
void plain_bwd_bf16(const uint16_t *dout, const uint16_t *z, const uint16_t *o, uint16_t *dz,
                    uint16_t *dos, int64_t n);
void plain_fwd_f32(const float *o, const float *z, float *out, int64_t n);
void plain_fwd_bf16(const uint16_t *o, const uint16_t *z, uint16_t *out, int64_t n);

#endif
