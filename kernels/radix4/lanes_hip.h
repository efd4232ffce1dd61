// Cross-lane primitives of the radix-4 router for AMD HIP (CDNA, wave64):
// one 64-lane wave routes one token. Sums across the wave are DPP prefix
// sums (row_shr:1,2,4,8 inside each 16-lane row, then row_bcast:15 into
// rows 1 and 3 and row_bcast:31 into rows 2 and 3); lane 63 then holds the
// total and readlane makes it wave-uniform (a scalar register). Builds with
// HIP 5.2 (clang 15) for gfx90a/gfx940 and with clang 19 for gfx942; uses no
// bf16 header (HIP 5.2 has none).
#pragma once

#include <hip/hip_runtime.h>
#include <stdint.h>

namespace radix4 {

struct Wave64 {
    static constexpr int kLanes = 64;

    static __device__ __forceinline__ int lane() { return threadIdx.x & 63; }
    static __device__ __forceinline__ int group() { return threadIdx.x >> 6; }

    // DPP controls (AMDGPU ISA, DPP_CTRL field).
    static constexpr int kRowShr1 = 0x111, kRowShr2 = 0x112, kRowShr4 = 0x114, kRowShr8 = 0x118;
    static constexpr int kRowBcast15 = 0x142, kRowBcast31 = 0x143;

    // A lane whose DPP source is outside its row, or whose row is masked
    // off, reads `old` = 0, so each step adds nothing there.
    template <int kCtrl, int kRowMask>
    static __device__ __forceinline__ uint32_t dpp_moved(uint32_t v) {
        return static_cast<uint32_t>(
            __builtin_amdgcn_update_dpp(0, static_cast<int>(v), kCtrl, kRowMask, 0xf, false));
    }

    static __device__ __forceinline__ uint32_t inclusive_scan(uint32_t v) {
        v += dpp_moved<kRowShr1, 0xf>(v);
        v += dpp_moved<kRowShr2, 0xf>(v);
        v += dpp_moved<kRowShr4, 0xf>(v);
        v += dpp_moved<kRowShr8, 0xf>(v);
        v += dpp_moved<kRowBcast15, 0xa>(v);
        v += dpp_moved<kRowBcast31, 0xc>(v);
        return v;
    }

    static __device__ __forceinline__ uint32_t sum(uint32_t v) {
        return static_cast<uint32_t>(__builtin_amdgcn_readlane(static_cast<int>(inclusive_scan(v)), 63));
    }
    static __device__ __forceinline__ uint32_t exclusive_scan(uint32_t v) { return inclusive_scan(v) - v; }

    // v of lane (this lane ^ d), and v of lane `src`.
    static __device__ __forceinline__ uint32_t shfl_xor(uint32_t v, int d) {
        return static_cast<uint32_t>(__shfl_xor(static_cast<int>(v), d, 64));
    }
    static __device__ __forceinline__ uint32_t shfl(uint32_t v, int src) {
        return static_cast<uint32_t>(__shfl(static_cast<int>(v), src, 64));
    }
    static __device__ __forceinline__ uint32_t all_max(uint32_t v) {
#pragma unroll
        for (int d = 32; d > 0; d >>= 1) {
            const uint32_t o = shfl_xor(v, d);
            v = o > v ? o : v;
        }
        return v;
    }
    static __device__ __forceinline__ uint32_t all_min(uint32_t v) {
#pragma unroll
        for (int d = 32; d > 0; d >>= 1) {
            const uint32_t o = shfl_xor(v, d);
            v = o < v ? o : v;
        }
        return v;
    }

    // One bit per lane: which lanes pass, and which lanes come before this one.
    using Mask = uint64_t;
    static __device__ __forceinline__ Mask ballot(bool p) { return __ballot(p); }
    static __device__ __forceinline__ Mask lanes_below() { return (uint64_t{1} << lane()) - 1u; }


    static __device__ __forceinline__ bool any(bool p) { return __any(p); }

    // *at = v if p (an exec-masked store; no branch to avoid on CDNA).
    template <class T>
    static __device__ __forceinline__ void store_shared_if(bool p, T* at, T v) {
        if (p) *at = v;
    }
    template <class Entry16>
    static __device__ __forceinline__ void store_shared_if(bool p, Entry16* at, uint64_t composite, float sig) {
        if (p) at->composite = composite, at->sig = sig;
    }
    template <class T>
    static __device__ __forceinline__ void store_global_if(bool p, T* at, T v) {
        if (p) *at = v;
    }

    // n += (key >= lo) (the copy step's count, the bound's and rank step's
    // counts of lanes), and the copy step's store through a cursor
    // (lanes_cuda.cuh has them as carries and predicated instructions; here
    // exec masks do that).
    static __device__ __forceinline__ void add_if_at_least(uint32_t& n, uint32_t key, uint32_t lo) { n += key >= lo; }
    template <class Entry16>
    static __device__ __forceinline__ Entry16* cursor(Entry16* at) { return at; }
    template <class Entry16>
    static __device__ __forceinline__ void store_if_at_least(uint32_t key, uint32_t lo, Entry16*& at, uint64_t composite,
                                                             float sig) {
        if (key >= lo) at->composite = composite, at->sig = sig, ++at;
    }

    static __device__ __forceinline__ float exp2_flushed(float x) { return exp2f(x); }
    // No approximate keys (radix4_router.h's kApproximateKeys): CDNA has no
    // tanh instruction, and no AMD GPU has measured what would pay instead.
    static constexpr bool kApproximateKeys = false;

    // IEEE division is branch-free on CDNA (v_div_scale / v_div_fmas /
    // v_div_fixup), so it serves every y.
    static constexpr float kReciprocalLimit = __builtin_huge_valf();
    static __device__ __forceinline__ float reciprocal(float y) { return 1.0f / y; }
    // The two-phase scores' first phase (approximate_score's bound covers them).
    static __device__ __forceinline__ float log2_approx(float y) { return __log2f(y); }
    static __device__ __forceinline__ float sqrt_approx(float y) { return __fsqrt_rn(y); }
    // A double's bits and back.
    static __device__ __forceinline__ uint64_t bits64(double v) { return __builtin_bit_cast(uint64_t, v); }
    static __device__ __forceinline__ double from_bits64(uint64_t u) { return __builtin_bit_cast(double, u); }
    // Float64 seeds through fp32 (IEEE division, v_rsq_f32: within 2^-22),
    // far within the 2^-16 the caller's steps mend.
    static __device__ __forceinline__ double reciprocal64_seed(double d) {
        return static_cast<double>(reciprocal(static_cast<float>(d)));
    }
    static __device__ __forceinline__ double rsqrt64_seed(double v) { return static_cast<double>(rsqrtf(static_cast<float>(v))); }

    // Lanes of a wave run in lockstep, but the compiler must not move LDS
    // reads of other lanes' entries above this point.
    static __device__ __forceinline__ void sync() {
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
        __builtin_amdgcn_wave_barrier();
        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
    }

    // No programmatic dependent launch on HIP: the entry point refuses it.
    static __device__ __forceinline__ void wait_for_prior_grids() {}
    static __device__ __forceinline__ void launch_dependents() {}

    // 1 << (4 * t) for t < 16, else 0 (AMD masks shift amounts, so test).
    static __device__ __forceinline__ uint64_t one_hot_nibble(uint32_t t) {
        return t < 16u ? (uint64_t{1} << (4u * t)) : uint64_t{0};
    }

    static __device__ __forceinline__ uint32_t bytes01_to_pair(uint32_t x) {
        return (x & 0xffu) | ((x & 0xff00u) << 8);
    }
    static __device__ __forceinline__ uint32_t bytes23_to_pair(uint32_t x) {
        return ((x >> 16) & 0xffu) | ((x >> 8) & 0x00ff0000u);
    }

    static __device__ __forceinline__ float as_float(uint32_t u) { return __builtin_bit_cast(float, u); }
    static __device__ __forceinline__ uint32_t as_uint(float f) { return __builtin_bit_cast(uint32_t, f); }
    static __device__ __forceinline__ int count_leading_zeros(uint32_t v) { return __builtin_clz(v); }
};

struct HipRuntime {
    using Stream = hipStream_t;
    static constexpr bool kProgrammaticLaunch = false;
    static int last_error() { return static_cast<int>(hipGetLastError()); }
    static const char* error_string(int code) { return hipGetErrorString(static_cast<hipError_t>(code)); }
    static bool programmatic_launch_supported() { return false; }

    template <class... Params, class... Args>
    static int launch(void (*kernel)(Params...), int blocks, int threads, Stream stream, bool, Args... args) {
        kernel<<<blocks, threads, 0, stream>>>(static_cast<Params>(args)...);
        return last_error();
    }
};

using Lanes = Wave64;
using Runtime = HipRuntime;

}  // namespace radix4
