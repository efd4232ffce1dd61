// The C ABI of the radix-4 routers, compiled once per back end and contract
// (radix4.cu / radix4.hip: contract `aiter`; radix4_serial.cu /
// radix4_serial.hip: contract `serial`). No torch headers: a caller passes
// raw device pointers, the row stride in elements and its stream
// (cudaStream_t / hipStream_t) as void*.
//
//   int radix4_route(scores, scores_dtype, row_stride, bias, bias_dtype,
//                    rows, experts, topk, flags, routed_scaling_factor,
//                    weights, ids, stream)            (radix4.cu)
//   int radix4_serial_route(... the same ...)         (radix4_serial.cu)
//
//   scores   [rows, experts] at `row_stride` elements per row, column stride 1
//   bias     [experts], contiguous
//   dtypes   RADIX4_FLOAT32 = 0, RADIX4_BFLOAT16 = 1 (any pairing)
//   flags    RADIX4_RENORMALIZE = 1; RADIX4_BLOCK_PER_TOKEN = 2,
//            RADIX4_WARP_PER_TOKEN = 4 and RADIX4_DENSE_WARP_PER_TOKEN = 16
//            force a launch shape (benchmarks); by default the batch
//            size picks it at the shape's switch points (switch_points:
//            a block per token below the first, the dense warp-per-token
//            kernel from the second, the plain one between).
//            RADIX4_PROGRAMMATIC_LAUNCH = 8: programmatic dependent launch
//            (CUDA, compute capability 9.0+; status 5 elsewhere): the
//            kernel may start while the previous kernel in the stream
//            finishes and waits for it right before loading the logits.
//   weights  fp32 [rows, topk] and ids int32 [rows, topk], contiguous
//   returns  RADIX4_OK = 0, or a status below; radix4_status_string(status)
//            says which, and after RADIX4_LAUNCH_FAILED
//            radix4_runtime_error_string() gives the runtime's own message.
//
// Shapes: (experts, topk) in {(896, 16), (384, 8), (224, 16)}: Kimi-K3,
// Kimi-K2 and the pruned Kimi-K3 checkpoint; the model shapes (`dispatch`);
// under the ungrouped model contracts also any experts in 8..1024 with topk
// in 1..min(16, experts) (`dispatch_generic`).
// Launch shapes (radix4_router.h): a block per token spreads one token's
// experts over RADIX4_WARPS_PER_TOKEN warps (4 on CUDA, 4 waves on HIP for
// E=896; fewer when the experts fill fewer) and has the lowest latency; a
// warp per token (RADIX4_TOKENS_PER_BLOCK warps a block, default 4) has the
// least overhead per token; its dense kernel caps registers so that
// RADIX4_DENSE_MIN_BLOCKS blocks fit an SM, for batches that do not fit one
// wave otherwise (a few dozen bytes of spills for more warps in flight). The
// defaults and the measurements behind them are in docs/radix4_tuning.md.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "radix4_router.h"

// Warps (one token each) per block in the warp-per-token shape.
#ifndef RADIX4_TOKENS_PER_BLOCK
#define RADIX4_TOKENS_PER_BLOCK 4
#endif
// Launch-shape switch points per (experts, topk): the first batch (rows) that
// takes the warp-per-token shape, and the first that takes the dense one;
// smaller batches take a block per token. Chosen by measurement on the H200
// (docs/radix4_tuning.md); kernels/radix4/__init__.py's BATCH_SWITCH_POINTS
// mirrors these (tests/test_radix4_switch_points.py keeps the two equal).
// Equal points skip the warp shape; a point above every batch never switches.
#ifndef RADIX4_FIRST_WARP_ROWS_896_16
#define RADIX4_FIRST_WARP_ROWS_896_16 7
#endif
#ifndef RADIX4_FIRST_DENSE_ROWS_896_16
#define RADIX4_FIRST_DENSE_ROWS_896_16 1585
#endif
#ifndef RADIX4_FIRST_WARP_ROWS_384_8
#define RADIX4_FIRST_WARP_ROWS_384_8 1
#endif
#ifndef RADIX4_FIRST_DENSE_ROWS_384_8
#define RADIX4_FIRST_DENSE_ROWS_384_8 3465
#endif
#ifndef RADIX4_FIRST_WARP_ROWS_224_16
#define RADIX4_FIRST_WARP_ROWS_224_16 1
#endif
#ifndef RADIX4_FIRST_DENSE_ROWS_224_16
#define RADIX4_FIRST_DENSE_ROWS_224_16 2677
#endif
// Lab overrides for every shape at once (benchmarks/radix4_kernels_bench.py's
// variants): the largest batch that takes a block per token, and the batches
// above RADIX4_DENSE_MIN_ROWS take the dense kernel.
#ifdef RADIX4_BLOCK_PER_TOKEN_MAX_ROWS
#undef RADIX4_FIRST_WARP_ROWS_896_16
#undef RADIX4_FIRST_WARP_ROWS_384_8
#undef RADIX4_FIRST_WARP_ROWS_224_16
#define RADIX4_FIRST_WARP_ROWS_896_16 (RADIX4_BLOCK_PER_TOKEN_MAX_ROWS + 1)
#define RADIX4_FIRST_WARP_ROWS_384_8 (RADIX4_BLOCK_PER_TOKEN_MAX_ROWS + 1)
#define RADIX4_FIRST_WARP_ROWS_224_16 (RADIX4_BLOCK_PER_TOKEN_MAX_ROWS + 1)
#endif
#ifdef RADIX4_DENSE_MIN_ROWS
#undef RADIX4_FIRST_DENSE_ROWS_896_16
#undef RADIX4_FIRST_DENSE_ROWS_384_8
#undef RADIX4_FIRST_DENSE_ROWS_224_16
#define RADIX4_FIRST_DENSE_ROWS_896_16 (RADIX4_DENSE_MIN_ROWS + 1)
#define RADIX4_FIRST_DENSE_ROWS_384_8 (RADIX4_DENSE_MIN_ROWS + 1)
#define RADIX4_FIRST_DENSE_ROWS_224_16 (RADIX4_DENSE_MIN_ROWS + 1)
#endif
// The model contracts' switch points (the ungrouped lowest-index entry):
// the first batch that takes a warp per token at a shape that also builds a
// block per token; smaller batches take the block, whose threads each score
// fewer of the token's values (the float64 scores are the long chain of a
// small batch: at M = 1 on the H200, 384/6 3.61 -> 2.53 us, 384/8 2.70 ->
// 2.08, 896/16 4.32 -> 2.81). Chosen by measurement on the H200
// (reports/baselines/h200-issue38-generic/model-launch-shapes.json); kernels/radix4/__init__.py's
// MODEL_BATCH_SWITCH_POINTS mirrors these. The other model shapes fill one
// or two vectors a lane and take a warp per token at every batch.
#ifndef RADIX4_MODEL_FIRST_WARP_ROWS_896_16
#define RADIX4_MODEL_FIRST_WARP_ROWS_896_16 768
#endif
#ifndef RADIX4_MODEL_FIRST_WARP_ROWS_384_8
#define RADIX4_MODEL_FIRST_WARP_ROWS_384_8 1024
#endif
#ifndef RADIX4_MODEL_FIRST_WARP_ROWS_256_8
#define RADIX4_MODEL_FIRST_WARP_ROWS_256_8 1024
#endif
#ifndef RADIX4_MODEL_FIRST_WARP_ROWS_256_6
#define RADIX4_MODEL_FIRST_WARP_ROWS_256_6 1024
#endif
#ifndef RADIX4_MODEL_FIRST_WARP_ROWS_384_6
#define RADIX4_MODEL_FIRST_WARP_ROWS_384_6 1024
#endif
// The dense kernel's minimum blocks per SM (register cap; 4 x 128 threads:
// 128 registers, measured on the H200). On HIP 2: with 4 the wave64 dense
// kernel spilled 100-146 registers (384-544 bytes of scratch per lane) for
// gfx942, with 2 none to scratch; no AMD GPU has timed either.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define RADIX4_DENSE_MIN_BLOCKS_OF_BACKEND 2
#else
#define RADIX4_DENSE_MIN_BLOCKS_OF_BACKEND 4
#endif
#ifndef RADIX4_DENSE_MIN_BLOCKS
#define RADIX4_DENSE_MIN_BLOCKS RADIX4_DENSE_MIN_BLOCKS_OF_BACKEND
#endif
// Warps (waves) per token in the block-per-token shape, at most one per
// 4 * lanes experts (0 = as many as give each thread one vector of 4).
#ifndef RADIX4_WARPS_PER_TOKEN
#define RADIX4_WARPS_PER_TOKEN 4
#endif

namespace radix4 {

enum Status : int {
    kOk = 0,
    kUnsupportedShape = 1,
    kUnsupportedDtype = 2,
    kBadArgument = 3,
    kLaunchFailed = 4,
    kUnsupportedLaunch = 5,
};
enum Dtype : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
enum Flags : int {
    kRenormalize = 1,
    kBlockPerToken = 2,
    kWarpPerToken = 4,
    kProgrammaticLaunch = 8,
    kDenseWarpPerToken = 16,
    kRawSum = 32,        // the model contracts: divide by the raw sum, not by sum + 1e-20
    kSqrtSoftplus = 64,  // the model contracts: sqrt(softplus(x)) scores (DeepSeek-V4), not the sigmoid
};
enum class LaunchShape { kBlockPerToken, kWarpPerToken, kDenseWarpPerToken };

constexpr int kTokensPerBlock = RADIX4_TOKENS_PER_BLOCK;
static_assert(kTokensPerBlock >= 1 && kTokensPerBlock <= 16, "RADIX4_TOKENS_PER_BLOCK must be 1..16");

// The first rows of the warp-per-token and of the dense launch shape, for one (experts, topk).
struct SwitchPoints {
    int64_t first_warp;
    int64_t first_dense;
};
// The model shapes (kimi_shape false) take a warp per token at every batch.
inline bool kimi_shape(int experts, int topk) {
    return (experts == 896 && topk == 16) || (experts == 384 && topk == 8) || (experts == 224 && topk == 16);
}
inline SwitchPoints switch_points(int experts, int topk) {
    if (experts == 384 && topk == 8) return {RADIX4_FIRST_WARP_ROWS_384_8, RADIX4_FIRST_DENSE_ROWS_384_8};
    if (experts == 224 && topk == 16) return {RADIX4_FIRST_WARP_ROWS_224_16, RADIX4_FIRST_DENSE_ROWS_224_16};
    if (experts == 896 && topk == 16) return {RADIX4_FIRST_WARP_ROWS_896_16, RADIX4_FIRST_DENSE_ROWS_896_16};
    return {1, INT64_MAX};
}
// The model contracts' (no dense kernel: it was no faster than the warp one there); the grouped ones at
// (256, 8) too (their groups exchange scores through shared memory in a block).
inline SwitchPoints model_switch_points(int experts, int topk) {
#define RADIX4_MODEL_POINT(E_, K_) \
    if (experts == E_ && topk == K_) return {RADIX4_MODEL_FIRST_WARP_ROWS_##E_##_##K_, INT64_MAX};
    RADIX4_MODEL_POINT(896, 16) RADIX4_MODEL_POINT(384, 8) RADIX4_MODEL_POINT(256, 8) RADIX4_MODEL_POINT(256, 6)
    RADIX4_MODEL_POINT(384, 6)
#undef RADIX4_MODEL_POINT
    return {1, INT64_MAX};
}
static_assert(RADIX4_DENSE_MIN_BLOCKS >= 1 && RADIX4_WARP_MIN_BLOCKS >= 1, "minimum blocks per SM are >= 1");

inline int& last_runtime_error() {
    static thread_local int code = 0;
    return code;
}

struct Args {
    const void* scores;
    int64_t row_stride;
    const void* bias;
    int rows;
    int renormalize;
    LaunchShape shape;
    bool programmatic;
    float routed_scaling_factor;
    float* weights;
    int32_t* ids;
    Runtime::Stream stream;
    int experts, topk;  // read by the generic path's kernels only
};

template <class C, class L, int E, int K, class Score, class Bias, int kVec, int kWarps, int kTokens, int kMinBlocks,
          bool kDynamic = false>
int launch_shape(const Args& a) {
    const int blocks = (a.rows + kTokens - 1) / kTokens;
    return Runtime::launch(route_kernel<C, L, E, K, Score, Bias, kVec, kWarps, kTokens, kMinBlocks, kDynamic>, blocks,
                           L::kLanes * kWarps * kTokens, a.stream, a.programmatic,
                           static_cast<const typename Score::Raw*>(a.scores), a.row_stride,
                           static_cast<const typename Bias::Raw*>(a.bias), a.rows, a.renormalize,
                           a.routed_scaling_factor, a.weights, a.ids, a.experts, a.topk);
}

// The kernels built for one (experts, topk): kAll the three launch shapes
// (the Kimi shapes under contracts aiter and serial); kWarp only a warp per
// token, which every flag launches (the model shapes' experts fill at most a
// few vectors a lane); kGeneric a warp per token of the generic path, E and
// K bounds for the launch's experts and topk (Shape's kDynamic); kBlockAndWarp
// a block per token and a warp per token (the model contracts' shapes of
// model_switch_points; the dense flag launches the warp kernel).
enum class Kernels { kWarp, kAll, kGeneric, kBlockAndWarp };

template <class C, int E, int K, class Score, class Bias, int kVec, Kernels kKernels>
int launch(const Args& a) {
    constexpr int kFull = (E / 4 + Lanes::kLanes - 1) / Lanes::kLanes;
    constexpr int kAsked = RADIX4_WARPS_PER_TOKEN;
    constexpr int kWarpsPerToken = kAsked > 0 && kAsked < kFull ? kAsked : kFull;
    int err = 0;
    if constexpr (kKernels == Kernels::kWarp) {
        err = launch_shape<C, Lanes, E, K, Score, Bias, kVec, 1, kTokensPerBlock, RADIX4_WARP_MIN_BLOCKS>(a);
    } else if constexpr (kKernels == Kernels::kGeneric) {
        err = launch_shape<C, Lanes, E, K, Score, Bias, kVec, 1, kTokensPerBlock, RADIX4_WARP_MIN_BLOCKS, true>(a);
    } else if constexpr (kKernels == Kernels::kBlockAndWarp) {
        err = a.shape == LaunchShape::kBlockPerToken
                  ? launch_shape<C, Lanes, E, K, Score, Bias, kVec, kWarpsPerToken, 1, 1>(a)
                  : launch_shape<C, Lanes, E, K, Score, Bias, kVec, 1, kTokensPerBlock, RADIX4_WARP_MIN_BLOCKS>(a);
    } else switch (a.shape) {
        case LaunchShape::kBlockPerToken:
            err = launch_shape<C, Lanes, E, K, Score, Bias, kVec, kWarpsPerToken, 1, 1>(a);
            break;
        case LaunchShape::kWarpPerToken:
            err = launch_shape<C, Lanes, E, K, Score, Bias, kVec, 1, kTokensPerBlock, RADIX4_WARP_MIN_BLOCKS>(a);
            break;
        case LaunchShape::kDenseWarpPerToken:
            err = launch_shape<C, Lanes, E, K, Score, Bias, kVec, 1, kTokensPerBlock, RADIX4_DENSE_MIN_BLOCKS>(a);
            break;
    }
    if (err != 0) {
        last_runtime_error() = err;
        return kLaunchFailed;
    }
    return kOk;
}

// Vector loads need every group of 4 experts aligned to 4 elements.
template <class Score, class Bias>
bool vector_loads_aligned(const Args& a) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(a.scores), b = reinterpret_cast<uintptr_t>(a.bias);
    return s % (4 * sizeof(typename Score::Raw)) == 0 && a.row_stride % 4 == 0 &&
           b % (4 * sizeof(typename Bias::Raw)) == 0;
}

// The Kimi shapes' three launch shapes: a kernel with vector loads and one
// with scalar loads, picked here. The warp-per-token-only kernels test the
// alignment themselves (kVec 2): one kernel, half the build.
template <class C, int E, int K, class Score, class Bias, Kernels kKernels>
int launch_aligned_or_not(const Args& a) {
    if constexpr (kKernels != Kernels::kAll) {
        return launch<C, E, K, Score, Bias, 2, kKernels>(a);
    } else {
        return vector_loads_aligned<Score, Bias>(a) ? launch<C, E, K, Score, Bias, 1, kKernels>(a)
                                                    : launch<C, E, K, Score, Bias, 0, kKernels>(a);
    }
}

template <class C, int E, int K, class Score, Kernels kKernels>
int launch_bias_dtype(const Args& a, int bias_dtype) {
    switch (bias_dtype) {
        case kFloat32: return launch_aligned_or_not<C, E, K, Score, F32, kKernels>(a);
        case kBFloat16: return launch_aligned_or_not<C, E, K, Score, Bf16, kKernels>(a);
        default: return kUnsupportedDtype;
    }
}

// fp16 logits take the warp-per-token kernel at every shape (they are no
// Kimi checkpoint's: the three launch shapes stay bf16 / fp32 only).
template <class C, int E, int K, Kernels kKernels>
int launch_dtypes(const Args& a, int scores_dtype, int bias_dtype) {
    constexpr Kernels kFp16 = kKernels == Kernels::kAll || kKernels == Kernels::kBlockAndWarp ? Kernels::kWarp : kKernels;
    switch (scores_dtype) {
        case kFloat32: return launch_bias_dtype<C, E, K, F32, kKernels>(a, bias_dtype);
        case kBFloat16: return launch_bias_dtype<C, E, K, Bf16, kKernels>(a, bias_dtype);
        case kFloat16:
            if constexpr (C::kFillWithExpertZero) {
                return kUnsupportedDtype;  // serial: the scan reads bf16 or fp32
            } else {
                return launch_bias_dtype<C, E, K, F16, kFp16>(a, bias_dtype);
            }
        default: return kUnsupportedDtype;
    }
}

// The (experts, topk) each contract serves, and the dispatch to them:
// contract serial the three Kimi shapes; contract aiter and the ungrouped
// model contracts (sigmoid or sqrt(softplus(x)), one build) those, the
// sigmoid model shapes (256, 8), (160, 8), (128, 6) and DeepSeek-V4's
// (256, 6), (384, 6), and the ungrouped model contracts also the generic
// path's shapes (dispatch_generic); the grouped contracts (256, 8). Only the
// Kimi shapes under aiter and serial build the three launch shapes; the
// ungrouped model contracts build a block per token too at
// RADIX4_MODEL_BLOCK_SHAPES (model_switch_points).
// RADIX4_KIMI_ONLY (on in the step-clock lab builds, which time the Kimi
// shapes): the Kimi shapes alone, a third of the build.
#ifndef RADIX4_KIMI_ONLY
#if defined(RADIX4_LAB) || defined(RADIX4_LAB_TOKENS)
#define RADIX4_KIMI_ONLY 1
#else
#define RADIX4_KIMI_ONLY 0
#endif
#endif
#define RADIX4_KIMI_SHAPES(X) X(896, 16) X(384, 8) X(224, 16)
#if RADIX4_KIMI_ONLY
#define RADIX4_MODEL_SHAPES(X)
#define RADIX4_SQRT_SOFTPLUS_SHAPES(X)
#define RADIX4_GROUPED_SHAPES(X)
#define RADIX4_MODEL_BLOCK_SHAPES(X)
#else
// The ungrouped model contracts' shapes with a block per token too (model_switch_points).
#define RADIX4_MODEL_BLOCK_SHAPES(X) X(896, 16) X(384, 8) X(256, 8) X(256, 6) X(384, 6)
#define RADIX4_MODEL_SHAPES(X) X(256, 8) X(160, 8) X(128, 6)
#define RADIX4_SQRT_SOFTPLUS_SHAPES(X) X(256, 6) X(384, 6)
#define RADIX4_GROUPED_SHAPES(X) X(256, 8)
#endif

// The generic path: the ungrouped model contracts (lowest-index ties, no
// fill) route any experts in [kGenericMinExperts, kGenericMaxExperts] and any
// topk in [1, min(16, experts)] that no shape above names, through a
// warp-per-token kernel whose E is the least bound >= experts: 4 * lanes *
// slots experts for slots 1, 2, 4, 8 (on CUDA 128, 256, 512, 1024; on HIP's
// wave64 256, 512, 1024). (aiter's tie order depends on E through its lane
// table, and serial is the Kimi scan's: neither has a generic path.)
constexpr int kGenericMinExperts = 8, kGenericMaxExperts = 1024, kGenericMaxTopk = 16;
template <class C>
constexpr bool kHasGenericPath =
    !RADIX4_KIMI_ONLY && C::kGroups == 1 && !C::kLaunchShapes && !C::kFillWithExpertZero;

template <class C>
int dispatch_generic(const Args& a, int experts, int scores_dtype, int bias_dtype) {
    constexpr int kPerSlot = 4 * Lanes::kLanes;  // experts per slot: a vector of 4 on each lane
#define RADIX4_GENERIC(SLOTS_)                                                                                          \
    if constexpr ((SLOTS_) == 1 || kPerSlot * (SLOTS_) / 2 < kGenericMaxExperts) {                                     \
        if (experts <= kPerSlot * (SLOTS_)) {                                                                          \
            return launch_dtypes<C, kPerSlot*(SLOTS_), kGenericMaxTopk, Kernels::kGeneric>(a, scores_dtype, bias_dtype); \
        }                                                                                                              \
    }
    RADIX4_GENERIC(1) RADIX4_GENERIC(2) RADIX4_GENERIC(4) RADIX4_GENERIC(8)
#undef RADIX4_GENERIC
    return kUnsupportedShape;
}

template <class C>
int dispatch(const Args& a, int experts, int topk, int scores_dtype, int bias_dtype) {
#define RADIX4_CASE(E_, K_, ALL_) \
    if (experts == E_ && topk == K_) return launch_dtypes<C, E_, K_, ALL_>(a, scores_dtype, bias_dtype);
#define RADIX4_CASE_ALL(E_, K_) RADIX4_CASE(E_, K_, Kernels::kAll)
#define RADIX4_CASE_WARP(E_, K_) RADIX4_CASE(E_, K_, Kernels::kWarp)
#define RADIX4_CASE_BLOCK(E_, K_) RADIX4_CASE(E_, K_, Kernels::kBlockAndWarp)
    if constexpr (C::kGroups > 1) {
        RADIX4_GROUPED_SHAPES(RADIX4_CASE_BLOCK)
    } else if constexpr (C::kFillWithExpertZero) {
        RADIX4_KIMI_SHAPES(RADIX4_CASE_ALL)
    } else if constexpr (C::kLaunchShapes) {
        RADIX4_KIMI_SHAPES(RADIX4_CASE_ALL)
        RADIX4_MODEL_SHAPES(RADIX4_CASE_WARP)
        RADIX4_SQRT_SOFTPLUS_SHAPES(RADIX4_CASE_WARP)
    } else {
        RADIX4_MODEL_BLOCK_SHAPES(RADIX4_CASE_BLOCK)  // first: these take precedence over the lists below
        RADIX4_KIMI_SHAPES(RADIX4_CASE_WARP)
        RADIX4_MODEL_SHAPES(RADIX4_CASE_WARP)
        RADIX4_SQRT_SOFTPLUS_SHAPES(RADIX4_CASE_WARP)
    }
#undef RADIX4_CASE_BLOCK
#undef RADIX4_CASE_WARP
#undef RADIX4_CASE_ALL
#undef RADIX4_CASE
    if constexpr (kHasGenericPath<C>) return dispatch_generic<C>(a, experts, scores_dtype, bias_dtype);
    return kUnsupportedShape;
}

// Whether contract C serves (experts, topk): the shapes dispatch takes.
template <class C>
bool served(int experts, int topk) {
    if constexpr (kHasGenericPath<C>) {
        if (experts >= kGenericMinExperts && experts <= kGenericMaxExperts && topk >= 1 && topk <= kGenericMaxTopk &&
            topk <= experts) {
            return true;
        }
    }
    bool yes = false;
#define RADIX4_IS(E_, K_) yes = yes || (experts == E_ && topk == K_);
    if constexpr (C::kGroups > 1) {
        RADIX4_GROUPED_SHAPES(RADIX4_IS)
    } else if constexpr (C::kFillWithExpertZero) {
        RADIX4_KIMI_SHAPES(RADIX4_IS)
    } else {
        RADIX4_KIMI_SHAPES(RADIX4_IS)
        RADIX4_MODEL_SHAPES(RADIX4_IS)
        RADIX4_SQRT_SOFTPLUS_SHAPES(RADIX4_IS)
    }
#undef RADIX4_IS
    return yes;
}

// The whole entry point, for contract C: checks, then the launch.
template <class C>
int route(const void* scores, int scores_dtype, int64_t row_stride, const void* bias, int bias_dtype, int64_t rows,
          int experts, int topk, int flags, float routed_scaling_factor, float* weights, int32_t* ids, void* stream) {
    if (!served<C>(experts, topk)) return kUnsupportedShape;
    if ((scores_dtype != kFloat32 && scores_dtype != kBFloat16 && (scores_dtype != kFloat16 || C::kFillWithExpertZero)) ||
        (bias_dtype != kFloat32 && bias_dtype != kBFloat16)) {
        return kUnsupportedDtype;
    }
    // The raw sum is the model contracts' only (aiter guards, serial adds 1e-20).
    constexpr int kRaw = C::kLaunchShapes || C::kFillWithExpertZero ? 0 : kRawSum;
    constexpr int kSqrt = C::kScore == ScoreFn::kChosen ? kSqrtSoftplus : 0;
    constexpr int kKnownFlags =
        kRenormalize | kBlockPerToken | kWarpPerToken | kProgrammaticLaunch | kDenseWarpPerToken | kRaw | kSqrt;
    const int forced = flags & (kBlockPerToken | kWarpPerToken | kDenseWarpPerToken);
    if (rows < 0 || rows > INT32_MAX - kTokensPerBlock || row_stride < experts || (flags & ~kKnownFlags) != 0 ||
        (forced & (forced - 1)) != 0) {
        return kBadArgument;  // out of range, unknown flags, or two launch shapes
    }
    const bool programmatic = (flags & kProgrammaticLaunch) != 0;
    if (programmatic && !(Runtime::kProgrammaticLaunch && Runtime::programmatic_launch_supported())) {
        return kUnsupportedLaunch;
    }
    if (rows == 0) return kOk;
    if (scores == nullptr || bias == nullptr || weights == nullptr || ids == nullptr) return kBadArgument;
    const SwitchPoints at = C::kLaunchShapes || C::kFillWithExpertZero ? switch_points(experts, topk)
                                                                      : model_switch_points(experts, topk);
    const LaunchShape shape = forced == kBlockPerToken       ? LaunchShape::kBlockPerToken
                              : forced == kWarpPerToken      ? LaunchShape::kWarpPerToken
                              : forced == kDenseWarpPerToken ? LaunchShape::kDenseWarpPerToken
                              : rows >= at.first_dense       ? LaunchShape::kDenseWarpPerToken
                              : rows >= at.first_warp        ? LaunchShape::kWarpPerToken
                                                             : LaunchShape::kBlockPerToken;
    // The kernel's renormalize: 0 none, 1 the contract's rule, 2 the raw sum (LowestContract::weight).
    // and bit 4: sqrt(softplus(x)) (ScoreFn::kChosen).
    const int mode = ((flags & kRenormalize) == 0 ? 0 : (flags & kRawSum) != 0 ? 2 : 1) | ((flags & kSqrtSoftplus) != 0 ? 4 : 0);
    const Args a{scores, row_stride, bias, static_cast<int>(rows), mode, shape, programmatic,
                 routed_scaling_factor, weights, ids, static_cast<Runtime::Stream>(stream), experts, topk};
    return dispatch<C>(a, experts, topk, scores_dtype, bias_dtype);
}

}  // namespace radix4

extern "C" {

const char* radix4_status_string(int status) {
    switch (status) {
        case radix4::kOk: return "ok";
        case radix4::kUnsupportedShape:
            return "unsupported (experts, topk) for this contract: serial takes (896, 16), (384, 8), (224, 16); aiter "
                   "those and (256, 8), (160, 8), (128, 6), (256, 6), (384, 6); the ungrouped model contracts any "
                   "experts in 8..1024 with topk in 1..min(16, experts); grouped (256, 8)";
        case radix4::kUnsupportedDtype: return "unsupported dtype code: logits 0 = float32, 1 = bfloat16, 2 = float16; bias 0 or 1";
        case radix4::kBadArgument: return "bad argument: rows out of range, row_stride < experts, unknown or conflicting flags, or null pointer";
        case radix4::kLaunchFailed: return "kernel launch failed (see radix4_runtime_error_string)";
        case radix4::kUnsupportedLaunch:
            return "programmatic dependent launch needs CUDA on a device of compute capability 9.0 or later";
        default: return "unknown status";
    }
}

const char* radix4_runtime_error_string(void) {
    return radix4::Runtime::error_string(radix4::last_runtime_error());
}

int radix4_tokens_per_block(void) { return radix4::kTokensPerBlock; }

#if defined(RADIX4_LAB) && defined(__CUDACC__)
// The step clocks of the last launch (RADIX4_STAMP in radix4_router.h).
int radix4_lab_clocks(unsigned long long* out) {
    return static_cast<int>(cudaMemcpyFromSymbol(out, radix4::radix4_lab_clock, sizeof(radix4::radix4_lab_clock)));
}
int radix4_lab_reset(void) {
    void* at = nullptr;
    const cudaError_t err = cudaGetSymbolAddress(&at, radix4::radix4_lab_clock);
    return static_cast<int>(err != cudaSuccess ? err : cudaMemset(at, 0, sizeof(radix4::radix4_lab_clock)));
}
#endif

#if defined(RADIX4_LAB_TOKENS) && defined(__CUDACC__)
// Every token's clocks of the last launch (RADIX4_STAMP), kLabWords words each.
int radix4_lab_token_words(void) { return radix4::kLabWords; }
int radix4_lab_tokens(unsigned long long* out, int tokens) {
    if (tokens < 0 || tokens > radix4::kLabTokens) return radix4::kBadArgument;
    return static_cast<int>(cudaMemcpyFromSymbol(out, radix4::radix4_lab_token,
                                                 sizeof(unsigned long long) * radix4::kLabWords * tokens));
}
int radix4_lab_tokens_reset(void) {
    void* at = nullptr;
    const cudaError_t err = cudaGetSymbolAddress(&at, radix4::radix4_lab_token);
    return static_cast<int>(err != cudaSuccess ? err : cudaMemset(at, 0, sizeof(radix4::radix4_lab_token)));
}
#endif

}  // extern "C"
