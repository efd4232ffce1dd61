// Exhaustive check of the model contracts' fast float64 scores (CUDA).
//
// radix4_router.h's fast64 forms decide the fp32 rounding of the model
// contracts' float64 scores with short polynomials and ask the libm forms
// (rounded_sigmoid, sqrt_softplus: the oracle's float64 steps) only where the
// value lies within 2^-42 of an fp32 rounding midpoint. For every one of the
// 2^32 float bit patterns x this program compares, bit for bit (NaN == NaN):
//   1. model_sigmoid<Warp32>(x) with rounded_sigmoid(x);
//   2. model_sqrt_softplus<Warp32>(x) with sqrt_softplus(x);
// and counts, for each, the inputs the fast form called sure but got wrong
// (must be 0: the fallback would never see them) and the inputs it left to
// libm. Prints the counts and the first mismatch; exit code 0 only when no
// value differs. Built and run by benchmarks/radix4_gpu_check.py:
//   nvcc -O3 -arch=sm_90 -fmad=false -ftz=false -prec-div=true -I kernels/radix4 this.cu
#include <cstdio>
#include <cstdint>

#include "lanes_cuda.cuh"
#include "radix4_router.h"

using radix4::Warp32;

// Per score: [0] final mismatches, [1] sure but wrong, [2] left to libm.
__device__ unsigned long long counts[2][3];
__device__ uint32_t first_bad[2];

__device__ bool same_bits(float a, float b) { return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b); }

template <int kWhich>
__global__ void check_all() {
    unsigned long long mine[3] = {0, 0, 0};
    for (uint64_t u = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; u < (uint64_t{1} << 32);
         u += uint64_t{gridDim.x} * blockDim.x) {
        const float x = __uint_as_float(static_cast<uint32_t>(u));
        const float want = kWhich == 0 ? radix4::rounded_sigmoid(x) : radix4::sqrt_softplus(x);
        const float got = kWhich == 0 ? radix4::model_sigmoid<Warp32>(x) : radix4::model_sqrt_softplus<Warp32>(x);
        bool sure;
        const float fast = kWhich == 0 ? radix4::fast64::sigmoid<Warp32>(x, sure) : radix4::fast64::sqrt_softplus<Warp32>(x, sure);
        if (!same_bits(got, want)) {
            if (mine[0]++ == 0) atomicCAS(&first_bad[kWhich], 0u, static_cast<uint32_t>(u));
        }
        if (sure && !same_bits(fast, want)) ++mine[1];
        if (!sure) ++mine[2];
    }
    for (int i = 0; i < 3; ++i) {
        if (mine[i]) atomicAdd(&counts[kWhich][i], mine[i]);
    }
}

int main() {
    check_all<0><<<8192, 256>>>();
    check_all<1><<<8192, 256>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    unsigned long long c[2][3];
    uint32_t first[2];
    cudaMemcpyFromSymbol(c, counts, sizeof c);
    cudaMemcpyFromSymbol(first, first_bad, sizeof first);
    const char* names[2] = {"model sigmoid", "sqrt(softplus(x))"};
    for (int w = 0; w < 2; ++w) {
        std::printf("%s: %llu mismatches with libm's form over all 2^32 inputs (fast form: %llu sure but wrong, %llu left to libm)",
                    names[w], c[w][0], c[w][1], c[w][2]);
        if (c[w][0]) std::printf(" (first x bits 0x%08x)", first[w]);
        std::printf("\n");
    }
    return c[0][0] || c[0][1] || c[1][0] || c[1][1] ? 1 : 0;
}
