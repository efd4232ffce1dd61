// Our C ABI over SGLang's radix-select router (sglang/kernels/jit/csrc/moe/route_radix.cuh).
//
// The kernel is SGLang's own: this file includes route_radix.cuh from the
// installed sglang wheel (or --engine-path sglang=DIR) and launches its
// route_radix_kernel<kUsePDL, TScore> with SGLang's host::LaunchKernel, as
// SGLang's RouteRadixKernel::run does, minus the tvm-ffi tensor binding:
// the caller passes raw pointers, the row stride and a CUDA stream (the
// current torch stream, so a CUDA graph captures the launch).
//
//   per row: sig = 1/(1+exp(-x)) (__expf, __fdividef), key(sig + bias), NaN -> -1e30;
//   8-bit radix select of the 16 largest keys, full-key ties to the lowest id;
//   weights sig[id] / (sum > 0 ? sum : 1) when renormalize, * routed_scaling_factor when apply_scale;
//   output in expert-id order (unsorted) or (key desc, id asc) (sorted).
//
// Shape: 896 experts, top-16, one 224-thread block per row. Inputs: scores
// fp32 or bf16 with column stride 1 and a row stride that is a multiple of 4
// elements (the kernel's 8/16-byte row loads), bias fp32 [896]. Outputs
// fp32 / int32 [rows, 16], row stride 16.
//
// Built by kernels/engines/sglang_radix.py with SGLang's JIT flags
// (-std=c++20 -O3 --expt-relaxed-constexpr -DSGL_CUDA_ARCH=<arch>, no fast math).

#include <moe/route_radix.cuh>

#include <cstdint>
#include <exception>
#include <string>

namespace {

// Status codes, mirrored by kernels/engines/sglang_radix.py.
enum Status : int { kOk = 0, kBadDtype = 2, kBadArgument = 3, kLaunchFailed = 4 };
enum Flags : int { kRenormalize = 1, kApplyScale = 2, kSorted = 4, kPdl = 8 };
enum Dtype : int { kFloat32 = 0, kBFloat16 = 1 };

thread_local std::string last_error;

template <bool kUsePDL, typename TScore>
void launch(const sglang::RouteRadixParams& params, cudaStream_t stream) {
  sglang::host::LaunchKernel(static_cast<uint32_t>(params.M), sglang::LargeRouterRadixTrait::kBlockSize, stream)
      .enable_pdl(kUsePDL)(sglang::route_radix_kernel<kUsePDL, TScore>, params);
}

}  // namespace

extern "C" {

// The kernel's fixed shape, so the Python side checks against the engine's constants.
int rc_sglang_radix_shape(int* experts, int* topk, int* block_threads) {
  *experts = static_cast<int>(sglang::kNumExperts_);
  *topk = static_cast<int>(sglang::kTopK_);
  *block_threads = static_cast<int>(sglang::LargeRouterRadixTrait::kBlockSize);
  return kOk;
}

int rc_sglang_radix_route(const void* scores, int scores_dtype, long long row_stride, const float* bias, long long rows,
                          float routed_scaling_factor, int flags, float* weights, int32_t* ids, void* stream) {
  if (scores_dtype != kFloat32 && scores_dtype != kBFloat16) return kBadDtype;
  if (rows < 0 || rows > 0x7fffffffLL || row_stride < sglang::kNumExperts_ || row_stride % 4 != 0) return kBadArgument;
  if (flags & ~(kRenormalize | kApplyScale | kSorted | kPdl)) return kBadArgument;
  if (rows == 0) return kOk;
  sglang::RouteRadixParams params{};
  params.scores = scores;
  params.bias = bias;
  params.out_w = weights;
  params.out_i = ids;
  params.out_packed = nullptr;
  params.M = static_cast<int>(rows);
  params.scores_stride = row_stride;
  params.out_w_stride = sglang::kTopK_;
  params.out_i_stride = sglang::kTopK_;
  params.out_packed_stride = 0;
  params.routed_scaling_factor = routed_scaling_factor;
  params.renormalize = (flags & kRenormalize) ? 1 : 0;
  params.apply_scale = (flags & kApplyScale) ? 1 : 0;
  params.sorted = (flags & kSorted) ? 1 : 0;
  const bool pdl = (flags & kPdl) != 0;
  auto* s = static_cast<cudaStream_t>(stream);
  try {
    if (scores_dtype == kFloat32) {
      pdl ? launch<true, float>(params, s) : launch<false, float>(params, s);
    } else {
      pdl ? launch<true, __nv_bfloat16>(params, s) : launch<false, __nv_bfloat16>(params, s);
    }
  } catch (const std::exception& exc) {
    last_error = exc.what();
    return kLaunchFailed;
  }
  return kOk;
}

const char* rc_sglang_radix_error(void) { return last_error.c_str(); }

}  // extern "C"
