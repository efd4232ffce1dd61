// Exhaustive check of the model contracts' fast float64 scores (CUDA).
//
// radix4_router.h's model_scores (the kernel's scores of four values under
// the model contracts) decides the fp32 rounding of the float64 scores with
// short polynomials (fast64) and asks the libm forms (rounded_sigmoid,
// sqrt_softplus: the oracle's float64 steps) only where fast64 is not sure.
// For every one of the 2^32 float bit patterns x this program compares, bit
// for bit (NaN == NaN), under both scores:
//   model_scores<Warp32, kSqrtSoftplus, 4> with the libm form,
// and counts, for each score, the inputs fast64 called sure but got wrong
// (must be 0: the fallback never sees them), the inputs inside fast64's
// ranges that it left to libm (about one in 2^17 expected), and the inputs
// x in [-87, 87] where the two-phase scores' fp32 approximate_score is
// farther from libm's score than kApproximateBound of itself (must be 0: the
// second phase would miss a value). Exit code 0 only when no value differs
// and no bound fails. Built and run by benchmarks/radix4_gpu_check.py:
//   nvcc -O3 -arch=sm_90 -fmad=false -ftz=false -prec-div=true -I kernels/radix4 this.cu
#include <cstdio>
#include <cstdint>

#include "lanes_cuda.cuh"
#include "radix4_router.h"

using radix4::Warp32;

// Per score: [0] mismatches with libm, [1] sure but wrong, [2] left to libm inside fast64's ranges,
// [3] approximate_score outside its bound.
__device__ unsigned long long counts[2][4];
__device__ uint32_t first_bad[2];

__device__ bool same_bits(float a, float b) { return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b); }

template <bool kSqrtSoftplus>
__global__ void check_all() {
    unsigned long long mine[4] = {0, 0, 0, 0};
    for (uint64_t u = 4 * (blockIdx.x * uint64_t{blockDim.x} + threadIdx.x); u < (uint64_t{1} << 32);
         u += 4 * uint64_t{gridDim.x} * blockDim.x) {
        radix4::Scores<4> x;
        for (int i = 0; i < 4; ++i) x.v[i] = __uint_as_float(static_cast<uint32_t>(u + i));
        const radix4::Scores<4> got = radix4::model_scores<Warp32, kSqrtSoftplus, 4>(x);
        for (int i = 0; i < 4; ++i) {
            const float v = x.v[i];
            const float want = kSqrtSoftplus ? radix4::sqrt_softplus(v) : radix4::rounded_sigmoid(v);
            bool sure;
            const float fast = kSqrtSoftplus ? radix4::fast64::sqrt_softplus<Warp32>(v, sure)
                                             : radix4::fast64::sigmoid<Warp32>(v, sure);
            const bool ranged = kSqrtSoftplus ? v >= -87.0f && v <= 87.0f : !(v > -88.75f && v <= -87.0f) && v == v;
            if (!same_bits(got.v[i], want) && mine[0]++ == 0) atomicCAS(&first_bad[kSqrtSoftplus], 0u, static_cast<uint32_t>(u + i));
            if (sure && !same_bits(fast, want)) ++mine[1];
            if (!sure && ranged) ++mine[2];
            if (v >= -87.0f && v <= 87.0f) {
                const float a = radix4::approximate_score<Warp32, kSqrtSoftplus>(v);
                if (!(fabsf(a - want) <= radix4::kApproximateBound<kSqrtSoftplus> * a)) ++mine[3];
            }
        }
    }
    for (int i = 0; i < 4; ++i) {
        if (mine[i]) atomicAdd(&counts[kSqrtSoftplus][i], mine[i]);
    }
}

int main() {
    check_all<false><<<8192, 256>>>();
    check_all<true><<<8192, 256>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    unsigned long long c[2][4];
    uint32_t first[2];
    cudaMemcpyFromSymbol(c, counts, sizeof c);
    cudaMemcpyFromSymbol(first, first_bad, sizeof first);
    const char* names[2] = {"model sigmoid", "sqrt(softplus(x))"};
    for (int w = 0; w < 2; ++w) {
        std::printf("%s: %llu mismatches with libm's form over all 2^32 inputs (fast64: %llu sure but wrong; %llu inputs "
                    "inside its ranges left to libm; approximate_score outside its bound: %llu)", names[w], c[w][0], c[w][1],
                    c[w][2], c[w][3]);
        if (c[w][0]) std::printf(" (first x bits 0x%08x)", first[w]);
        std::printf("\n");
    }
    return c[0][0] || c[0][1] || c[0][3] || c[1][0] || c[1][1] || c[1][3] ? 1 : 0;
}
