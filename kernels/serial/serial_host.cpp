// serial_host.cpp: the `serial` routing contract on the CPU, one row after
// another through serial_route_row (serial_row.h), the same arithmetic the
// CUDA kernels use.
//
// Build: g++ -O2 -shared -fPIC -ffp-contract=off (no -ffast-math: the
// contract fixes plain expf and IEEE division). expf is the platform libm's,
// so weights can differ from the GPU's by an ULP where the two expf differ.
//
// Single-threaded on purpose: this build is the reference the harness and CI
// compare against, not a fast path, and an OpenMP runtime of its own would
// share the process with torch's.
#include <new>
#include <vector>

#include "serial_row.h"

extern "C" int serial_route_host(const void* scores, int64_t row_stride, int scores_dtype, const void* bias,
                                 int bias_dtype, int64_t M, int E, int topk, int renormalize, float rs,
                                 float* weights, int32_t* ids) {
    const int rc = serial_check_args(scores, row_stride, scores_dtype, bias, bias_dtype, M, E, topk, weights, ids);
    if (rc != SERIAL_OK) return rc;
    try {
        std::vector<float> scratch((size_t)E);
        for (int64_t r = 0; r < M; ++r) {
            serial_route_row(serial_row(scores, r, row_stride, scores_dtype), scores_dtype, bias, bias_dtype, E, topk,
                             renormalize, rs, scratch.data(), 1, weights + r * topk, ids + r * topk);
        }
    } catch (const std::bad_alloc&) {
        return SERIAL_ERR_OUT_OF_MEMORY;
    }
    return SERIAL_OK;
}
