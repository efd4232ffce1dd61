// Our C ABI over FlashInfer's noaux_tc router (flashinfer/data/csrc/fused_moe/noAuxTcKernels.cu).
//
// The kernel and its launcher are FlashInfer's own: this translation unit
// includes noAuxTcKernels.cu from the installed flashinfer-python wheel (or
// --engine-path flashinfer=DIR) and calls its
// tensorrt_llm::kernels::invokeNoAuxTc<InputT, BiasT, OutputT, int32_t>,
// which picks deepseek_v3_topk_kernel's instantiation for the shape and
// launches it with cudaLaunchKernelEx (the PDL attribute set from the flag)
// on the caller's stream. Two things are left out, both bindings:
//
// - NoAuxTc, the tvm-ffi entry point (tensor checks, dtype switch, stream
//   lookup). The two macros below make it an unused inline function and its
//   tvm-ffi export empty, so this library needs no tvm-ffi runtime; its
//   dtype switch is mirrored by rc_flashinfer_noaux_route (OutputT = InputT).
// - The cake backend (FLASHINFER_CAKE_BACKEND, sm_100 only): not defined.
//
// FlashInfer compiles this file with its JIT defaults (-O3 -use_fast_math
// -DNDEBUG ...) together with the tensorrt_llm common sources it links
// (tllmException, logger, stringUtils): included below, unchanged.
//
//   per row: sig = 0.5 * tanh(0.5 x) + 0.5, choice = sig + bias;
//   groups: score = top-2 sum, keep topk_group groups; experts: top-k by choice (warp top-k, lowest index on ties);
//   w = sig[id] * routed_scaling_factor / (sum + 1e-20), always renormalized; w stored as OutputT.
//
// Shapes (FlashInfer's own limits): one group with E <= 384 and topk <= 8
// (Kimi-K2), or E <= 256, E / n_group <= 32, E / n_group * topk_group <= 128
// (DeepSeek-V3). Tensors dense (row stride E, topk).

#include "tvm_ffi_utils.h"
#undef TVM_FFI_DLL_EXPORT_TYPED_FUNC
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(ExportName, Function)
#define NoAuxTc inline NoAuxTc
#include "fused_moe/noAuxTcKernels.cu"
#undef NoAuxTc

#include "nv_internal/cpp/common/logger.cpp"
#include "nv_internal/cpp/common/stringUtils.cpp"
#include "nv_internal/cpp/common/tllmException.cpp"

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace {

// Mirrored by kernels/engines/flashinfer_noaux.py.
enum Status : int { kOk = 0, kUnsupported = 1, kBadDtype = 2, kBadArgument = 3, kLaunchFailed = 4 };
enum Dtype : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

thread_local std::string last_error;

template <typename InputT, typename BiasT>
void invoke(const void* scores, const void* bias, void* weights, int32_t* ids, int64_t rows, int64_t experts,
            int64_t n_group, int64_t topk_group, int64_t topk, double routed_scaling_factor, bool pdl,
            cudaStream_t stream) {
  tensorrt_llm::kernels::invokeNoAuxTc<InputT, BiasT, InputT, int32_t>(
      const_cast<InputT*>(static_cast<const InputT*>(scores)), const_cast<BiasT*>(static_cast<const BiasT*>(bias)),
      static_cast<InputT*>(weights), ids, rows, experts, n_group, topk_group, topk, routed_scaling_factor, pdl, stream,
      nullptr);
  // invokeNoAuxTc does not look at cudaLaunchKernelEx's result (only its debug builds sync and check).
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("kernel launch failed: ") + cudaGetErrorString(err));
}

template <typename InputT>
int dispatch_bias(int bias_dtype, const void* scores, const void* bias, void* weights, int32_t* ids, int64_t rows,
                  int64_t experts, int64_t n_group, int64_t topk_group, int64_t topk, double rs, bool pdl,
                  cudaStream_t stream) {
  switch (bias_dtype) {
    case kFloat32:
      invoke<InputT, float>(scores, bias, weights, ids, rows, experts, n_group, topk_group, topk, rs, pdl, stream);
      return kOk;
    case kBFloat16:
      invoke<InputT, __nv_bfloat16>(scores, bias, weights, ids, rows, experts, n_group, topk_group, topk, rs, pdl,
                                    stream);
      return kOk;
    case kFloat16:
      invoke<InputT, half>(scores, bias, weights, ids, rows, experts, n_group, topk_group, topk, rs, pdl, stream);
      return kOk;
    default:
      return kBadDtype;
  }
}

}  // namespace

extern "C" {

// weights has the scores' dtype (FlashInfer's OutputT = InputT); ids int32. All dense.
int rc_flashinfer_noaux_route(const void* scores, int scores_dtype, const void* bias, int bias_dtype, long long rows,
                              long long experts, long long n_group, long long topk_group, long long topk,
                              double routed_scaling_factor, int pdl, void* weights, int32_t* ids, void* stream) {
  // NoAuxTc's own argument checks.
  if (rows < 0 || experts < 1 || n_group < 1 || topk < 1 || topk_group < 1) return kBadArgument;
  if (experts % n_group != 0 || n_group > 32 || topk > 32) return kBadArgument;
  if (rows == 0) return kOk;
  auto* s = static_cast<cudaStream_t>(stream);
  try {
    switch (scores_dtype) {
      case kFloat32:
        return dispatch_bias<float>(bias_dtype, scores, bias, weights, ids, rows, experts, n_group, topk_group, topk,
                                    routed_scaling_factor, pdl != 0, s);
      case kBFloat16:
        return dispatch_bias<__nv_bfloat16>(bias_dtype, scores, bias, weights, ids, rows, experts, n_group, topk_group,
                                            topk, routed_scaling_factor, pdl != 0, s);
      case kFloat16:
        return dispatch_bias<half>(bias_dtype, scores, bias, weights, ids, rows, experts, n_group, topk_group, topk,
                                   routed_scaling_factor, pdl != 0, s);
      default:
        return kBadDtype;
    }
  } catch (const tensorrt_llm::common::TllmException& exc) {
    last_error = exc.what();
    return kUnsupported;  // invokeNoAuxTc's TLLM_CHECK: a configuration its kernels do not cover
  } catch (const std::exception& exc) {
    last_error = exc.what();
    return kLaunchFailed;
  }
}

const char* rc_flashinfer_noaux_error(void) { return last_error.c_str(); }

}  // extern "C"
