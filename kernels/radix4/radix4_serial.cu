// Radix-4 MoE router top-k, contract `serial`, NVIDIA CUDA back end (sm_80+;
// programmatic dependent launch on sm_90+).
//
// The same radix select as radix4.cu under the serial scan's arithmetic
// (SerialContract in radix4_router.h): plain expf sigmoid, lowest-index
// ties, only values above -1e30 (NaN never), expert 0 for the slots left,
// output in selection order, (sig / (den + 1e-20)) * rs. Built with the
// same flags as kernels/serial/serial_cuda.cu (no fused multiply-add, IEEE
// division, no flush to zero), so that its bits equal the serial scan's and
// the block argmax's on the same device. C ABI: radix4_entry.h.
//
// Build: nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -std=c++17 -fmad=false radix4_serial.cu
#include "lanes_cuda.cuh"
#include "radix4_entry.h"

extern "C" int radix4_serial_route(const void* scores, int scores_dtype, int64_t row_stride, const void* bias,
                                   int bias_dtype, int64_t rows, int experts, int topk, int flags,
                                   float routed_scaling_factor, float* weights, int32_t* ids, void* stream) {
    return radix4::route<radix4::SerialContract>(scores, scores_dtype, row_stride, bias, bias_dtype, rows, experts,
                                                 topk, flags, routed_scaling_factor, weights, ids, stream);
}
