// Radix-4 MoE router top-k, contract `aiter`, AMD HIP back end (CDNA wave64:
// gfx90a, gfx940, gfx942, gfx950).
//
// Computes, per token, the top-k experts of contract `aiter` (sigmoid
// scores plus a correction bias, aiter's tie order, NaN last) and their
// weights: see radix4_router.h for the contract as plain torch and the
// algorithm. Launch shape: a block of RADIX4_WARPS_PER_TOKEN waves per token
// below the shape's first switch point (radix4_entry.h's switch_points,
// measured on the H200, not yet on gfx942), else one 64-lane wave per
// token, RADIX4_TOKENS_PER_BLOCK waves per block; cross-lane sums are DPP
// prefix sums (lanes_hip.h). C ABI: radix4_entry.h (no programmatic
// dependent launch here: that flag returns status 5).
//
// Build: hipcc --offload-arch=gfx942 -O3 -shared -fPIC -std=c++17 radix4.hip
// (HIP_PLATFORM=amd where nvcc is also installed; no fast math).
#include "lanes_hip.h"
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
