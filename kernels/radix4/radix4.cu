// Radix-4 MoE router top-k, contract `aiter`, NVIDIA CUDA back end (sm_80+;
// programmatic dependent launch on sm_90+).
//
// Computes, per token, the top-k experts of contract `aiter` (sigmoid
// scores plus a correction bias, aiter's tie order, NaN last) and their
// weights: see radix4_router.h for the contract as plain torch and the
// algorithm. Launch shape: a block of RADIX4_WARPS_PER_TOKEN warps per token
// below the shape's first switch point (radix4_entry.h's switch_points),
// else one 32-lane warp per token, RADIX4_TOKENS_PER_BLOCK warps per block. C ABI: radix4_entry.h.
//
// Build: nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -std=c++17 -fmad=false radix4.cu
// (no fast math: the sigmoid must round as the contract's).
#include "lanes_cuda.cuh"
#include "radix4_entry.h"

extern "C" int radix4_route(const void* scores, int scores_dtype, int64_t row_stride, const void* bias, int bias_dtype,
                            int64_t rows, int experts, int topk, int flags, float routed_scaling_factor,
                            float* weights, int32_t* ids, void* stream) {
    return radix4::route<radix4::AiterContract>(scores, scores_dtype, row_stride, bias, bias_dtype, rows, experts, topk,
                                                flags, routed_scaling_factor, weights, ids, stream);
}

// The model contracts (docs/radix4_models.md), folded into this translation
// unit: lowest-index ties, NaN last, sum + 1e-20 or the raw sum (flag 32).
//   radix4_lowest_route    sigmoid + bias, or sqrt(softplus(x)) + bias with flag 64 (deepseek-v4), ungrouped
//   radix4_grouped_route   deepseek-v3: sigmoid + bias, 8 groups, top-2 sum, 4 kept, the rest -inf
//   radix4_grouped_zero_route  deepseek-v3-reference: the same groups, the rest ranked 0.0
#define RADIX4_MODEL_ENTRY(NAME, CONTRACT)                                                                              \
    extern "C" int NAME(const void* scores, int scores_dtype, int64_t row_stride, const void* bias, int bias_dtype,     \
                        int64_t rows, int experts, int topk, int flags, float routed_scaling_factor, float* weights,    \
                        int32_t* ids, void* stream) {                                                                  \
        return radix4::route<CONTRACT>(scores, scores_dtype, row_stride, bias, bias_dtype, rows, experts, topk, flags, \
                                       routed_scaling_factor, weights, ids, stream);                                   \
    }
RADIX4_MODEL_ENTRY(radix4_lowest_route, radix4::ModelContract)
RADIX4_MODEL_ENTRY(radix4_grouped_route, radix4::GroupedContract)
RADIX4_MODEL_ENTRY(radix4_grouped_zero_route, radix4::GroupedZeroContract)
