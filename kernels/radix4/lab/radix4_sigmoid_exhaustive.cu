// Exhaustive check of the radix4 kernel's branch-free reciprocal (CUDA).
//
// lanes_cuda.cuh's Warp32::reciprocal (approximate reciprocal plus one Newton
// step) replaces IEEE division in the sigmoid for denominators below
// Warp32::kReciprocalLimit. This program compares, bit for bit:
//   1. Warp32::reciprocal(y) with 1.0f / y for every float y in [1, limit);
//   2. radix4::contract_sigmoid<AiterContract, Warp32>(x) with
//      1.0f / (1.0f + exp2f(-log2e x)) for every one of the 2^32 float bit
//      patterns x (NaN == NaN);
//   3. radix4::contract_sigmoid<SerialContract, Warp32>(x) with the serial
//      scan's 1.0f / (1.0f + expf(-x)) (kernels/serial/serial_row.h), for
//      every x;
//   4. the approximate keys' bound: |Warp32::tanh_approx(x / 2) - (2 s - 1)|
//      <= radix4::kApproximateKeyBound for both contracts' sigmoids s and
//      every x, and tanh_approx NaN exactly where x is NaN (radix4_router.h's
//      approximate_key; the largest error is printed).
// Prints the mismatch counts and the first mismatch of each; exit code 0
// only when all are 0. Built and run by benchmarks/radix4_gpu_check.py:
//   nvcc -O3 -arch=sm_90 -fmad=false -ftz=false -prec-div=true -I kernels/radix4 this.cu
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "lanes_cuda.cuh"
#include "radix4_router.h"

using radix4::Warp32;

__device__ unsigned long long mismatches[4];
__device__ uint32_t first_bad[4];
__device__ unsigned long long largest_error_bits;  // a double >= 0: ordered as its bits

__global__ void check_reciprocal(uint32_t lo, uint32_t hi) {
    for (uint64_t u = lo + blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; u < hi; u += uint64_t{gridDim.x} * blockDim.x) {
        const float y = __uint_as_float(static_cast<uint32_t>(u));
        if (__float_as_uint(Warp32::reciprocal(y)) != __float_as_uint(1.0f / y)) {
            if (atomicAdd(&mismatches[0], 1ull) == 0) first_bad[0] = static_cast<uint32_t>(u);
        }
    }
}

__global__ void check_sigmoid() {
    constexpr float kNegLog2e = -1.44269504088896340736f;
    for (uint64_t u = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; u < (uint64_t{1} << 32); u += uint64_t{gridDim.x} * blockDim.x) {
        const float x = __uint_as_float(static_cast<uint32_t>(u));
        const float want = 1.0f / (1.0f + exp2f(kNegLog2e * x));
        const float got = radix4::contract_sigmoid<radix4::AiterContract, Warp32>(x);
        const bool same = __float_as_uint(got) == __float_as_uint(want) || (got != got && want != want);
        if (!same && atomicAdd(&mismatches[1], 1ull) == 0) first_bad[1] = static_cast<uint32_t>(u);
        const float want_serial = 1.0f / (1.0f + expf(-x));
        const float got_serial = radix4::contract_sigmoid<radix4::SerialContract, Warp32>(x);
        const bool same_serial = __float_as_uint(got_serial) == __float_as_uint(want_serial) ||
                                 (got_serial != got_serial && want_serial != want_serial);
        if (!same_serial && atomicAdd(&mismatches[2], 1ull) == 0) first_bad[2] = static_cast<uint32_t>(u);
    }
}

__global__ void check_approximate_keys() {
    for (uint64_t u = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; u < (uint64_t{1} << 32); u += uint64_t{gridDim.x} * blockDim.x) {
        const float x = __uint_as_float(static_cast<uint32_t>(u));
        const float t = Warp32::tanh_approx(0.5f * x);
        bool bad = (t != t) != (x != x);
        if (x == x) {
            const double aiter = 2.0 * static_cast<double>(radix4::contract_sigmoid<radix4::AiterContract, Warp32>(x)) - 1.0;
            const double serial = 2.0 * static_cast<double>(radix4::contract_sigmoid<radix4::SerialContract, Warp32>(x)) - 1.0;
            const double error = fmax(fabs(static_cast<double>(t) - aiter), fabs(static_cast<double>(t) - serial));
            bad |= !(error <= static_cast<double>(radix4::kApproximateKeyBound));
            atomicMax(&largest_error_bits, static_cast<unsigned long long>(__double_as_longlong(error == error ? error : 1e300)));
        }
        if (bad && atomicAdd(&mismatches[3], 1ull) == 0) first_bad[3] = static_cast<uint32_t>(u);
    }
}

int main() {
    const uint32_t one = 0x3f800000u, limit = 0x7e800000u;  // 1.0f, 2^126
    static_assert(Warp32::kReciprocalLimit == 0x1p126f, "update `limit`");
    check_reciprocal<<<4096, 256>>>(one, limit);
    check_sigmoid<<<8192, 256>>>();
    check_approximate_keys<<<8192, 256>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    unsigned long long bad[4], largest = 0;
    uint32_t first[4];
    cudaMemcpyFromSymbol(bad, mismatches, sizeof bad);
    cudaMemcpyFromSymbol(first, first_bad, sizeof first);
    cudaMemcpyFromSymbol(&largest, largest_error_bits, sizeof largest);
    double largest_error;
    static_assert(sizeof largest_error == sizeof largest, "a double's bits");
    std::memcpy(&largest_error, &largest, sizeof largest);
    std::printf("reciprocal: %llu mismatches over %u denominators in [1, 2^126)", bad[0], limit - one);
    if (bad[0]) std::printf(" (first y bits 0x%08x)", first[0]);
    std::printf("\nsigmoid (aiter): %llu mismatches over all 2^32 inputs", bad[1]);
    if (bad[1]) std::printf(" (first x bits 0x%08x)", first[1]);
    std::printf("\nsigmoid (serial): %llu mismatches over all 2^32 inputs", bad[2]);
    if (bad[2]) std::printf(" (first x bits 0x%08x)", first[2]);
    std::printf("\napproximate keys: %llu inputs past the bound 2^%.0f over all 2^32 inputs (largest error %.4g = 2^%.2f)",
                bad[3], std::log2(static_cast<double>(radix4::kApproximateKeyBound)), largest_error, std::log2(largest_error));
    if (bad[3]) std::printf(" (first x bits 0x%08x)", first[3]);
    std::printf("\n");
    return bad[0] || bad[1] || bad[2] || bad[3] ? 1 : 0;
}
