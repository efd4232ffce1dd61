// Cross-lane primitives of the radix-4 router for NVIDIA CUDA: one warp of
// 32 lanes routes one token. Needs sm_80+ for the redux.sync reductions
// (__reduce_add_sync and friends), which sum a 32-bit value over the warp
// in one instruction: the 16-bin histogram is eight of them per round.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace radix4 {

struct Warp32 {
    static constexpr int kLanes = 32;
    using Stream = cudaStream_t;

    static __device__ __forceinline__ int lane() { return threadIdx.x & 31; }
    static __device__ __forceinline__ int group() { return threadIdx.x >> 5; }

    static __device__ __forceinline__ uint32_t sum(uint32_t v) { return __reduce_add_sync(0xffffffffu, v); }
    static __device__ __forceinline__ uint32_t all_max(uint32_t v) { return __reduce_max_sync(0xffffffffu, v); }
    static __device__ __forceinline__ uint32_t all_min(uint32_t v) { return __reduce_min_sync(0xffffffffu, v); }
    // v of lane (this lane ^ d), and v of lane `src`.
    static __device__ __forceinline__ uint32_t shfl_xor(uint32_t v, int d) { return __shfl_xor_sync(0xffffffffu, v, d); }
    static __device__ __forceinline__ uint32_t shfl(uint32_t v, int src) { return __shfl_sync(0xffffffffu, v, src); }

    // One bit per lane: which lanes pass, and which lanes come before this one.
    using Mask = uint32_t;
    static __device__ __forceinline__ Mask ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
    static __device__ __forceinline__ Mask lanes_below() {
        Mask m;
        asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
        return m;
    }

    // Sum of v over lanes below this one.
    static __device__ __forceinline__ uint32_t exclusive_scan(uint32_t v) {
        uint32_t x = v;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, x, d);
            if (lane() >= d) x += y;
        }
        return x - v;
    }


    static __device__ __forceinline__ void sync() { __syncwarp(); }

    // Programmatic dependent launch (sm_90+): in a launch with the
    // programmatic-stream-serialization attribute, launch_dependents lets
    // the next grid start early and wait_for_prior_grids blocks until the
    // grids before this one have completed and their writes are visible.
    // In a plain launch (and before sm_90) both do nothing.
    static __device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    }
    static __device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    }

    // *at = v in shared memory if p, as one predicated store: written as an
    // `if`, nvcc turns each of a thread's candidate stores into a branch
    // that diverges (a lane holds a candidate in a few of its 28 slots).
    static __device__ __forceinline__ void store_shared_if(bool p, uint64_t* at, uint64_t v) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p st.shared.b64 [%1], %2;\n\t}"
                     :: "r"(static_cast<int>(p)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(at))), "l"(v)
                     : "memory");
    }
    static __device__ __forceinline__ void store_shared_if(bool p, float* at, float v) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p st.shared.f32 [%1], %2;\n\t}"
                     :: "r"(static_cast<int>(p)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(at))), "f"(v)
                     : "memory");
    }

    // *at = v in global memory if p, as one predicated store (the write
    // step's; as an `if`, the compiler sinks the value's loads into it).
    static __device__ __forceinline__ void store_global_if(bool p, float* at, float v) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p st.global.f32 [%1], %2;\n\t}"
                     :: "r"(static_cast<int>(p)), "l"(at), "f"(v) : "memory");
    }
    static __device__ __forceinline__ void store_global_if(bool p, int32_t* at, int32_t v) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p st.global.b32 [%1], %2;\n\t}"
                     :: "r"(static_cast<int>(p)), "l"(at), "r"(v) : "memory");
    }

    // The fourth word of a 16-byte candidate entry, never read back: whatever
    // register ptxas puts there (an empty asm defines it), so no zero is
    // moved into place per candidate.
    static __device__ __forceinline__ uint32_t unread_word() {
        uint32_t w;
        asm("" : "=r"(w));
        return w;
    }

    // *at = {composite, sig, unread_word()} as one predicated 16-byte store.
    template <class Entry16>
    static __device__ __forceinline__ void store_shared_if(bool p, Entry16* at, uint64_t composite, float sig) {
        static_assert(sizeof(Entry16) == 16 && alignof(Entry16) >= 8, "a 16-byte entry");
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p st.shared.v4.b32 [%1], {%2, %3, %4, %5};\n\t}"
                     :: "r"(static_cast<int>(p)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(at))),
                        "r"(static_cast<uint32_t>(composite)), "r"(static_cast<uint32_t>(composite >> 32)),
                        "f"(sig), "r"(unread_word())
                     : "memory");
    }
    // n += (key >= lo): the carry of key - lo (a subtraction carries exactly
    // when nothing is borrowed) added to n, two instructions and no
    // predicate. The copy step counts its candidates with it, the bound and
    // rank steps their larger lanes. (As a setp and a predicated add, ptxas
    // merged the copy step's compares with store_if_at_least's and kept the
    // 28 results as bits of a register, picked apart again for the stores.)
    static __device__ __forceinline__ void add_if_at_least(uint32_t& n, uint32_t key, uint32_t lo) {
        asm("{\n\t.reg .u32 t;\n\tsub.cc.u32 t, %1, %2;\n\taddc.u32 %0, %0, 0;\n\t}" : "+r"(n) : "r"(key), "r"(lo));
    }
    // A shared-memory address that store_if_at_least steps one entry on.
    template <class Entry16>
    static __device__ __forceinline__ uint32_t cursor(Entry16* at) {
        return static_cast<uint32_t>(__cvta_generic_to_shared(at));
    }
    // If key >= lo: *at = {composite, sig, unread_word()}, and at moves to
    // the next entry; a compare, a predicated 16-byte store and a predicated add.
    static __device__ __forceinline__ void store_if_at_least(uint32_t key, uint32_t lo, uint32_t& at, uint64_t composite,
                                                             float sig) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ge.u32 p, %1, %2;\n\t@p st.shared.v4.b32 [%0], {%3, %4, %5, %6};"
                     "\n\t@p add.u32 %0, %0, 16;\n\t}"
                     : "+r"(at)
                     : "r"(key), "r"(lo), "r"(static_cast<uint32_t>(composite)), "r"(static_cast<uint32_t>(composite >> 32)),
                       "f"(sig), "r"(unread_word())
                     : "memory");
    }
    static __device__ __forceinline__ bool any(bool p) { return __any_sync(0xffffffffu, p); }

    // The approximate keys (radix4_router.h's approximate_key): one
    // MUFU.TANH, whose tanh_approx(x / 2) lies within
    // radix4::kApproximateKeyBound of 2 sig(x) - 1 for every fp32 x and both
    // contracts' sigmoids (kernels/radix4/lab/radix4_sigmoid_exhaustive.cu
    // checks every input; the H200's largest error is 2^-16.93), a fused
    // multiply-add, and the max of two floats that is NaN when either is
    // (FMNMX.NAN, sm_80+; its NaN is 0x7fffffff).
    static constexpr bool kApproximateKeys = true;
    static __device__ __forceinline__ float tanh_approx(float y) {
        float r;
        asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(y));
        return r;
    }
    static __device__ __forceinline__ float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
    static __device__ __forceinline__ float max_nan(float a, float b) {
        float r;
        asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    // The approximate copy (CopyStep::run_approximate): n += (key >= lo) and
    // a compare, a predicated store of the candidate's low word (tie
    // priority and id; the rank step scores it exactly) and a predicated add.
    static __device__ __forceinline__ void add_if_at_least(uint32_t& n, float key, float lo) {
        asm("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %1, %2;\n\t@p add.u32 %0, %0, 1;\n\t}" : "+r"(n) : "f"(key), "f"(lo));
    }
    static __device__ __forceinline__ void store_if_at_least(float key, float lo, uint32_t& at, uint32_t low_word) {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %1, %2;\n\t@p st.shared.b32 [%0], %3;"
                     "\n\t@p add.u32 %0, %0, 16;\n\t}"
                     : "+r"(at)
                     : "f"(key), "f"(lo), "r"(low_word)
                     : "memory");
    }

    // 2^x, flushed to zero below 2^-126 (one MUFU.EX2).
    static __device__ __forceinline__ float exp2_flushed(float x) {
        float r;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
        return r;
    }

    // 1 / y rounded to nearest, for 1 <= y < 2^126: the approximate
    // reciprocal and one Newton step with fused multiply-adds. `1.0f / y`
    // gives the same bits (kernels/radix4/lab/radix4_sigmoid_exhaustive.cu checks
    // every y) but branches to a slow path per value, which keeps the
    // compiler from overlapping a thread's sigmoids. Larger y (a subnormal
    // result) and NaN are the caller's to redo with `1.0f / y`.
    static constexpr float kReciprocalLimit = 0x1p126f;
    static __device__ __forceinline__ float reciprocal(float y) {
        float r;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
        return __fmaf_rn(r, __fmaf_rn(-y, r, 1.0f), r);
    }

    // log2(y) within 2^-21 absolute for y in [1, 2] (MUFU.LG2), and sqrt(y)
    // within 2^-22 of its size (MUFU.SQRT): the two-phase scores' first
    // phase, whose error bound covers them (approximate_score).
    static __device__ __forceinline__ float log2_approx(float y) {
        float r;
        asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
        return r;
    }
    static __device__ __forceinline__ float sqrt_approx(float y) {
        float r;
        asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
        return r;
    }

    // A double's bits and back (register moves).
    static __device__ __forceinline__ uint64_t bits64(double v) { return static_cast<uint64_t>(__double_as_longlong(v)); }
    static __device__ __forceinline__ double from_bits64(uint64_t u) { return __longlong_as_double(static_cast<long long>(u)); }

    // Float64 seeds from the high word (MUFU.RCP64H, MUFU.RSQ64H): about
    // fp32's approximations, far within the 2^-16 the caller's steps mend
    // (the exhaustive check of kernels/radix4/lab proves the bits). No
    // conversion to fp32 and back, which issues at a quarter of the rate.
    static __device__ __forceinline__ double reciprocal64_seed(double d) {
        double r;
        asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(d));
        return r;
    }
    static __device__ __forceinline__ double rsqrt64_seed(double v) {
        double r;
        asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(v));
        return r;
    }

    // 1 << (4 * t) for t < 16, else 0. PTX clamps a 64-bit shift amount to
    // 64, which yields 0, so the out-of-range case costs only the min.
    static __device__ __forceinline__ uint64_t one_hot_nibble(uint32_t t) {
        uint64_t r;
        asm("shl.b64 %0, %1, %2;" : "=l"(r) : "l"(1ull), "r"(min(t, 16u) * 4u));
        return r;
    }

    // Bytes b0 b1 b2 b3 of x -> (b0 | b1 << 16, b2 | b3 << 16).
    static __device__ __forceinline__ uint32_t bytes01_to_pair(uint32_t x) { return __byte_perm(x, 0u, 0x4140); }
    static __device__ __forceinline__ uint32_t bytes23_to_pair(uint32_t x) { return __byte_perm(x, 0u, 0x4342); }

    static __device__ __forceinline__ float as_float(uint32_t u) { return __uint_as_float(u); }
    static __device__ __forceinline__ uint32_t as_uint(float f) { return __float_as_uint(f); }
    static __device__ __forceinline__ int count_leading_zeros(uint32_t v) { return __clz(v); }
};

struct CudaRuntime {
    using Stream = cudaStream_t;
    static constexpr bool kProgrammaticLaunch = true;  // on devices of compute capability 9.0 and later

    // Returns 0 after a good launch, else the runtime's error code.
    static int last_error() { return static_cast<int>(cudaGetLastError()); }
    static const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

    // Whether the current device can take a programmatic dependent launch.
    static bool programmatic_launch_supported() {
        int device = 0, major = 0;
        if (cudaGetDevice(&device) != cudaSuccess) return false;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
        return major >= 9;
    }

    // kernel<<<blocks, threads, 0, stream>>>(args...), or with `programmatic`
    // through cudaLaunchKernelEx with programmatic stream serialization (a
    // CUDA graph captures it as a programmatic edge). Returns last_error().
    template <class... Params, class... Args>
    static int launch(void (*kernel)(Params...), int blocks, int threads, Stream stream, bool programmatic,
                      Args... args) {
        if (!programmatic) {
            kernel<<<blocks, threads, 0, stream>>>(args...);
            return last_error();
        }
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>(blocks));
        config.blockDim = dim3(static_cast<unsigned>(threads));
        config.dynamicSmemBytes = 0;
        config.stream = stream;
        config.attrs = attribute;
        config.numAttrs = 1;
        const cudaError_t err = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
        const int last = last_error();
        return err != cudaSuccess ? static_cast<int>(err) : last;
    }
};

using Lanes = Warp32;
using Runtime = CudaRuntime;

}  // namespace radix4
