// Radix-4 MoE router top-k, contract `serial`, AMD HIP back end (CDNA wave64).
//
// radix4_serial.cu's kernel for wave64, compile-checked only: the serial
// contract's bit identity is claimed against the CUDA serial scan, whose
// expf is CUDA's; on ROCm, expf is OCML's. C ABI: radix4_entry.h.
#include "lanes_hip.h"
#include "radix4_entry.h"

extern "C" int radix4_serial_route(const void* scores, int scores_dtype, int64_t row_stride, const void* bias,
                                   int bias_dtype, int64_t rows, int experts, int topk, int flags,
                                   float routed_scaling_factor, float* weights, int32_t* ids, void* stream) {
    return radix4::route<radix4::SerialContract>(scores, scores_dtype, row_stride, bias, bias_dtype, rows, experts,
                                                 topk, flags, routed_scaling_factor, weights, ids, stream);
}
