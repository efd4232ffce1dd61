// Speed-of-light probes for radix4 (issue 37): kernels that each do a strict
// part of what any router of a token's bf16 logits must do, laid out and
// launched as radix4's warp-per-token shapes are (a warp a token, four tokens
// a block, logits and bias read as vectors of four bf16, griddepcontrol hooks
// for PDL). Timed beside radix4 by benchmarks/radix4_speed_of_light.py. The
// read and the keys bound from below what any router reaches on the same
// device (each value read, each value keyed); the bound and the write are one
// plain way of those steps, not the fastest (radix4's bound step is cheaper):
//
//   stage 0, read:  every logit and bias read, one add and one max a value
//   stage 1, keys:  + every value's approximate key, tanh.approx(x / 2) + 2b
//                   (radix4's dense kernel; the exact sigmoid costs more)
//   stage 2, bound: + the k-th largest lane maximum (each lane's count of
//                   larger lanes, 31 shuffles) and the count of keys that
//                   reach it (radix4's bound step and its copy's count)
//   stage 3, write: + k weights and ids written a token
//   stage 4, read in a block: stage 0's work with a block a token, one
//                   vector of four a thread (E / 4 threads), the maximum by
//                   shuffles, one barrier and one thread: the shortest chain
//                   a row's read has (radix4's block shape serves M = 1)
//
// What none of them does is the selection itself: radix4's copy of the
// candidates and their ranking. Each writes what it computed, so nothing is
// left out by the compiler. Not part of the router: nothing links it.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kTokensPerBlock = 4;

__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void wait_for_prior_grids() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// The two bf16 halves of a 32-bit word, widened (a shift or a mask, as radix4's load).
__device__ __forceinline__ float low_half(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_half(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

template <int kStage>
__device__ __forceinline__ float value_of(float x, float b) {
    if constexpr (kStage == 0) {
        return x + b;
    } else {
        return fmaf(2.0f, b, tanh_approx(0.5f * x));
    }
}

template <int E, int K, int kStage>
__global__ void __launch_bounds__(32 * kTokensPerBlock) probe(const uint2* __restrict__ logits, int64_t row_vectors,
                                                               const uint2* __restrict__ bias, int rows,
                                                               float* __restrict__ out, float* __restrict__ weights,
                                                               int32_t* __restrict__ ids) {
    constexpr int kVectors = E / 4;                 // vectors of four experts a row
    constexpr int kPerLane = (kVectors + 31) / 32;  // a lane's vectors
    static_assert(E % 4 == 0 && K <= 32, "vectors of four experts; the bound takes the k-th of 32 lane maxima");
    launch_dependents();
    const int lane = threadIdx.x & 31;
    const int token = blockIdx.x * kTokensPerBlock + (threadIdx.x >> 5);
    if (token >= rows) return;
    wait_for_prior_grids();
    const uint2* row = logits + token * row_vectors;
    float key[4 * kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int v = lane + 32 * i;
        const bool here = kVectors % 32 == 0 || v < kVectors;
        const uint2 x = here ? row[v] : make_uint2(0xff80ff80u, 0xff80ff80u);  // -inf where the row has no vector
        const uint2 b = here ? bias[v] : make_uint2(0u, 0u);
        key[4 * i + 0] = value_of<kStage>(low_half(x.x), low_half(b.x));
        key[4 * i + 1] = value_of<kStage>(high_half(x.x), high_half(b.x));
        key[4 * i + 2] = value_of<kStage>(low_half(x.y), low_half(b.y));
        key[4 * i + 3] = value_of<kStage>(high_half(x.y), high_half(b.y));
    }
    float lane_max = key[0];
#pragma unroll
    for (int j = 1; j < 4 * kPerLane; ++j) lane_max = fmaxf(lane_max, key[j]);
    if constexpr (kStage < 2) {
        float m = lane_max;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
        if (lane == 0) out[token] = m;
        return;
    } else {
        // Lanes with a larger maximum (ties by lane number), every other lane by xor partner.
        uint32_t larger = 0;
#pragma unroll
        for (int d = 1; d < 32; ++d) {
            const float other = __shfl_xor_sync(0xffffffffu, lane_max, d);
            larger += (other > lane_max || (other == lane_max && (lane ^ d) < lane)) ? 1u : 0u;
        }
        // The k-th largest lane maximum: at least k keys reach it.
        float lo = larger < static_cast<uint32_t>(K) ? lane_max : INFINITY;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, d));
        uint32_t mine = 0;
#pragma unroll
        for (int j = 0; j < 4 * kPerLane; ++j) mine += key[j] >= lo ? 1u : 0u;
        const uint32_t count = __reduce_add_sync(0xffffffffu, mine);
        if constexpr (kStage == 2) {
            if (lane == 0) out[token] = static_cast<float>(count);
        } else {
            if (lane < K) {
                weights[static_cast<int64_t>(token) * K + lane] = lo;
                ids[static_cast<int64_t>(token) * K + lane] = static_cast<int32_t>(count) + lane;
            }
        }
    }
}

template <int E>
__global__ void __launch_bounds__((E / 4 + 31) / 32 * 32) read_in_a_block(const uint2* __restrict__ logits, int64_t row_vectors,
                                                                           const uint2* __restrict__ bias, float* __restrict__ out) {
    constexpr int kVectors = E / 4, kWarps = (kVectors + 31) / 32;
    __shared__ float partial[kWarps];
    launch_dependents();
    wait_for_prior_grids();
    const int t = threadIdx.x;
    float m = -INFINITY;
    if (t < kVectors) {
        const uint2 x = logits[blockIdx.x * row_vectors + t], b = bias[t];
        m = fmaxf(fmaxf(low_half(x.x) + low_half(b.x), high_half(x.x) + high_half(b.x)),
                  fmaxf(low_half(x.y) + low_half(b.y), high_half(x.y) + high_half(b.y)));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
    if ((t & 31) == 0) partial[t >> 5] = m;
    __syncthreads();
    if (t == 0) {
#pragma unroll
        for (int w = 1; w < kWarps; ++w) m = fmaxf(m, partial[w]);
        out[blockIdx.x] = m;
    }
}

__global__ void empty() {
    launch_dependents();
    wait_for_prior_grids();
}

// Dynamic shared memory that leaves room for at most four blocks an SM (4 x (48 + 1 reserved) KB of the 228 KB of
// an sm_90 SM; five would need 245): sixteen warps an SM, as radix4's dense kernel holds at its registers.
constexpr size_t kFourBlocksAnSm = 48 * 1024;

template <class Kernel, class... Args>
int launch(Kernel kernel, int blocks, int threads, void* stream, int pdl, size_t shared, Args... args) {
    cudaLaunchConfig_t config = {};
    config.dynamicSmemBytes = shared;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(threads);
    config.stream = static_cast<cudaStream_t>(stream);
    config.attrs = attribute;
    config.numAttrs = pdl ? 1 : 0;
    return static_cast<int>(cudaLaunchKernelEx(&config, kernel, args...));
}

template <int E, int K>
int launch_stage(int stage, const void* logits, int64_t row_stride, const void* bias, int rows, float* out,
                 float* weights, int32_t* ids, void* stream, int pdl, int four_blocks) {
    const size_t shared = four_blocks ? kFourBlocksAnSm : 0;
    const int blocks = (rows + kTokensPerBlock - 1) / kTokensPerBlock;
    const auto* x = static_cast<const uint2*>(logits);
    const auto* b = static_cast<const uint2*>(bias);
    const int64_t vectors = row_stride / 4;
    switch (stage) {
        case 0: return launch(probe<E, K, 0>, blocks, 32 * kTokensPerBlock, stream, pdl, shared, x, vectors, b, rows, out, weights, ids);
        case 1: return launch(probe<E, K, 1>, blocks, 32 * kTokensPerBlock, stream, pdl, shared, x, vectors, b, rows, out, weights, ids);
        case 2: return launch(probe<E, K, 2>, blocks, 32 * kTokensPerBlock, stream, pdl, shared, x, vectors, b, rows, out, weights, ids);
        case 3: return launch(probe<E, K, 3>, blocks, 32 * kTokensPerBlock, stream, pdl, shared, x, vectors, b, rows, out, weights, ids);
        case 4: return launch(read_in_a_block<E>, rows, (E / 4 + 31) / 32 * 32, stream, pdl, shared, x, vectors, b, out);
        default: return -1;
    }
}

}  // namespace

// Returns a cudaError_t, or -1 for a stage or shape this file has no probe for
// (experts 896 with k 16, 384 with k 8, 224 with k 16; bf16 logits whose row
// stride is a multiple of 4 and 8-byte aligned rows, bf16 bias). four_blocks:
// at most four blocks (sixteen warps) an SM, radix4's dense occupancy.
extern "C" int radix4_speed_of_light(int stage, int experts, int topk, const void* logits, int64_t row_stride,
                                     const void* bias, int rows, float* out, float* weights, int32_t* ids,
                                     void* stream, int pdl, int four_blocks) {
    if (row_stride % 4 != 0) return -1;
    if (experts == 896 && topk == 16) return launch_stage<896, 16>(stage, logits, row_stride, bias, rows, out, weights, ids, stream, pdl, four_blocks);
    if (experts == 384 && topk == 8) return launch_stage<384, 8>(stage, logits, row_stride, bias, rows, out, weights, ids, stream, pdl, four_blocks);
    if (experts == 224 && topk == 16) return launch_stage<224, 16>(stage, logits, row_stride, bias, rows, out, weights, ids, stream, pdl, four_blocks);
    return -1;
}

extern "C" int radix4_speed_of_light_empty(void* stream, int pdl) { return launch(empty, 1, 32, stream, pdl, 0); }
