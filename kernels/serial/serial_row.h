// serial_row.h: the per-row arithmetic of the `serial` routing contract,
// written once and compiled three ways (serial-scan CUDA kernel, block-argmax
// CUDA kernel, host C++ build with g++).
//
// Plain torch reference, per row of logits x[E] and bias b[E]:
//
//   sig    = 1 / (1 + exp(-x.float()))             # fp32, plain expf
//   biased = sig + b.float()
//   for j in range(topk):                           # selection order
//       best, bi = -1e30, 0
//       for e in range(E):                          # strict '>': ties -> lowest e,
//           if biased[e] > best: best, bi = biased[e], e   # NaN never taken
//       biased[bi] = -1e30                          # nothing beat the sentinel:
//       ids[j], w[j] = bi, sig[bi]                  #   expert 0 (again), counted again
//   den = sum(w) in selection order, fp32
//   w = (w / (den + 1e-20)) * rs  if renormalize else  w * rs
//
// Why one header: the two CUDA kernels must be bit-identical to each other,
// and the host build must round like them wherever the platform's expf
// agrees. Sharing every arithmetic step (not only the formula) removes one
// way to drift. Compile with -ffp-contract=off (g++) and -fmad=false (nvcc):
// the contract has no fused multiply-add.
//
// bf16 values (logits or bias) are widened by a 16-bit shift, which is exact.
#ifndef ROUTER_SERIAL_ROW_H
#define ROUTER_SERIAL_ROW_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SERIAL_HD __host__ __device__ __forceinline__
// Unrolling never changes the order of the comparisons. Measured on an H200
// (E=896, top-16, M=1): 16-deep and nvcc's own 4-deep unroll of the scan
// both take about 220 us, so the loads are not what bounds the serial scan.
#define SERIAL_PRAGMA(x) _Pragma(#x)
#define SERIAL_UNROLL(n) SERIAL_PRAGMA(unroll n)
#else
#define SERIAL_HD static inline
#define SERIAL_UNROLL(n)
#endif

// Values of the dtype flags taken by every entry point.
#define SERIAL_DTYPE_FLOAT32 0
#define SERIAL_DTYPE_BFLOAT16 1

// Return codes of every entry point. CUDA errors are returned as
// SERIAL_ERR_CUDA_BASE + cudaError_t so the caller can name them.
#define SERIAL_OK 0
#define SERIAL_ERR_NULL_POINTER 1
#define SERIAL_ERR_SHAPE 2         // M < 0, E < 1, topk < 1 or topk > E
#define SERIAL_ERR_ROW_STRIDE 3    // row_stride < E while M > 1
#define SERIAL_ERR_DTYPE 4         // a dtype flag other than the two above
#define SERIAL_ERR_TOO_MANY_EXPERTS 5  // block argmax: E floats exceed shared memory
#define SERIAL_ERR_OUT_OF_MEMORY 6     // host build: scratch allocation failed
#define SERIAL_ERR_CUDA_BASE 1000

#define SERIAL_SENTINEL (-1e30f)
#define SERIAL_DEN_EPS 1e-20f

SERIAL_HD float serial_bits_to_float(uint32_t bits) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

// Element i of a bf16 or fp32 vector.
SERIAL_HD float serial_load(const void* base, int64_t i, int dtype) {
    if (dtype == SERIAL_DTYPE_BFLOAT16) {
        return serial_bits_to_float((uint32_t)((const uint16_t*)base)[i] << 16);
    }
    return ((const float*)base)[i];
}

// Start of row r of a [M, row_stride] matrix of the given dtype.
SERIAL_HD const void* serial_row(const void* base, int64_t r, int64_t row_stride, int dtype) {
    const int64_t elem = dtype == SERIAL_DTYPE_BFLOAT16 ? 2 : 4;
    return (const char*)base + r * row_stride * elem;
}

SERIAL_HD float serial_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// sig of expert e: the weight numerator (no bias).
SERIAL_HD float serial_sig(const void* row, int row_dtype, int e) { return serial_sigmoid(serial_load(row, e, row_dtype)); }

// The ranking value of expert e from its sig: sig plus bias, fp32.
SERIAL_HD float serial_rank(float sig, const void* bias, int bias_dtype, int e) {
    return sig + serial_load(bias, e, bias_dtype);
}

SERIAL_HD float serial_biased(const void* row, int row_dtype, const void* bias, int bias_dtype, int e) {
    return serial_rank(serial_sig(row, row_dtype, e), bias, bias_dtype, e);
}

// On entry w[0..topk) holds the winners' sig in selection order; on exit the
// weights. den is summed in selection order; division before the scale.
SERIAL_HD void serial_finish_weights(float* w, int topk, int renormalize, float rs) {
    if (!renormalize) {
        for (int j = 0; j < topk; ++j) w[j] = w[j] * rs;
        return;
    }
    float den = 0.0f;
    for (int j = 0; j < topk; ++j) den += w[j];
    for (int j = 0; j < topk; ++j) w[j] = (w[j] / (den + SERIAL_DEN_EPS)) * rs;
}

// The whole contract for one row on one thread (topk x E scan steps).
// scratch holds the E ranking values at scratch[e * scratch_stride]: the
// caller chooses the layout (a row-local buffer on the host; an [E, M]
// workspace on the GPU so that a warp's accesses coalesce).
SERIAL_HD void serial_route_row(const void* row, int row_dtype, const void* bias, int bias_dtype, int E, int topk,
                                int renormalize, float rs, float* scratch, int64_t scratch_stride, float* w,
                                int32_t* ids) {
    SERIAL_UNROLL(4)
    for (int e = 0; e < E; ++e) scratch[e * scratch_stride] = serial_biased(row, row_dtype, bias, bias_dtype, e);
    for (int j = 0; j < topk; ++j) {
        float best = SERIAL_SENTINEL;
        int bi = 0;
        SERIAL_UNROLL(16)
        for (int e = 0; e < E; ++e) {
            const float v = scratch[e * scratch_stride];
            if (v > best) {
                best = v;
                bi = e;
            }
        }
        scratch[bi * scratch_stride] = SERIAL_SENTINEL;
        ids[j] = bi;
        w[j] = serial_sig(row, row_dtype, bi);
    }
    serial_finish_weights(w, topk, renormalize, rs);
}

// Argument checks shared by every entry point (host side only).
static inline int serial_check_args(const void* scores, int64_t row_stride, int scores_dtype, const void* bias,
                                    int bias_dtype, int64_t M, int E, int topk, const void* weights,
                                    const void* ids) {
    if (M < 0 || E < 1 || topk < 1 || topk > E) return SERIAL_ERR_SHAPE;
    if (M > 1 && row_stride < E) return SERIAL_ERR_ROW_STRIDE;
    if ((scores_dtype != SERIAL_DTYPE_FLOAT32 && scores_dtype != SERIAL_DTYPE_BFLOAT16) ||
        (bias_dtype != SERIAL_DTYPE_FLOAT32 && bias_dtype != SERIAL_DTYPE_BFLOAT16))
        return SERIAL_ERR_DTYPE;
    if (M > 0 && (!scores || !bias || !weights || !ids)) return SERIAL_ERR_NULL_POINTER;
    return SERIAL_OK;
}

#endif  // ROUTER_SERIAL_ROW_H
