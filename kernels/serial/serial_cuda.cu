// serial_cuda.cu: the two CUDA kernels of the `serial` routing contract.
//
// Plain torch reference: see serial_row.h (sigmoid + bias, topk rounds of a
// strict-greater ascending scan with a -1e30 sentinel, weights in selection
// order, (sig / (den + 1e-20)) * rs).
//
// serial_scan_kernel (entry point serial_scan_route_cuda)
//   One thread per row runs serial_route_row: E sigmoids, then topk x E scan
//   steps. Launch: ceil(M / 32) blocks of SERIAL_SCAN_THREADS = 32 threads.
//   One warp per block spreads a large M over every SM (a thread's work is a
//   long serial chain, so the SM count, not occupancy, bounds the speed). The
//   caller passes a workspace of E * M floats laid out [E, M]: thread r keeps
//   its ranking values at workspace[e * M + r], so a warp's loads coalesce.
//   This is the slow baseline the contract was defined by, kept as the
//   reference arithmetic.
//
// block_argmax_kernel (entry point block_argmax_route_cuda)
//   One block of BLOCK_ARGMAX_THREADS = 128 threads per row. The E ranking
//   values, the E sigs and the topk chosen sigs go to shared memory
//   ((2 E + topk) * 4 bytes, dynamic; E <= 4096 so the default 48 KiB
//   suffice). Each round, every thread scans experts
//   tid, tid + 128, ... with the same strict '>' against the sentinel (so its
//   own candidate is its lowest-index maximum), then a warp-shuffle and a
//   cross-warp reduction keep the larger value, the lower index on equal
//   values. That order is total, so the winner is the serial scan's winner
//   whatever the reduction tree. Thread 0 retires the winner to the sentinel,
//   writes its id and keeps its sig on chip; at the end thread 0 forms the
//   weights (serial_finish_weights) and the block writes them. 128 threads: 7 values per thread at E = 896;
//   fewer warps make the two barriers per round cheaper, more would only
//   shorten a scan that is already short.
//
// Both kernels share every arithmetic step through serial_row.h and are
// built with -fmad=false, so their outputs are bit-identical.
#include <climits>
#include <cuda_runtime.h>

#include "serial_row.h"

#define SERIAL_SCAN_THREADS 32
#define BLOCK_ARGMAX_THREADS 128
#define BLOCK_ARGMAX_MAX_EXPERTS 4096  // (2 E + topk) fp32 within the default 48 KiB, topk <= E

static_assert(BLOCK_ARGMAX_THREADS % 32 == 0 && BLOCK_ARGMAX_THREADS <= 1024, "whole warps, one block");
static_assert(BLOCK_ARGMAX_THREADS / 32 <= 32, "the cross-warp reduction runs in one warp");
static_assert(3 * BLOCK_ARGMAX_MAX_EXPERTS * sizeof(float) <= 48 * 1024, "fits the default dynamic shared memory");

__global__ void __launch_bounds__(SERIAL_SCAN_THREADS)
    serial_scan_kernel(const void* __restrict__ scores, int64_t row_stride, int scores_dtype,
                       const void* __restrict__ bias, int bias_dtype, int64_t M, int E, int topk, int renormalize,
                       float rs, float* __restrict__ workspace, float* __restrict__ weights,
                       int32_t* __restrict__ ids) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    serial_route_row(serial_row(scores, r, row_stride, scores_dtype), scores_dtype, bias, bias_dtype, E, topk,
                     renormalize, rs, workspace + r, M, weights + r * topk, ids + r * topk);
}

// Candidate (v, i) beats (best_v, best_i): larger value, or equal value and
// lower index. "No candidate" is (SENTINEL, INT_MAX): every real candidate
// is strictly above the sentinel, so it always loses.
__device__ __forceinline__ bool argmax_prefers(float v, int i, float best_v, int best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

// Argmax over groups of kWidth lanes (xor offsets stay inside a group).
template <int kWidth>
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
    static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0, "a power of two up to 32");
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
        const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
        if (argmax_prefers(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

// Shared memory: biased[E], sig[E], chosen[topk] fp32 (dynamic). Keeping
// sig and the chosen sigs on chip takes the winner's sigmoid and the final
// weight pass off global memory, where each round would wait on a round trip.
__global__ void __launch_bounds__(BLOCK_ARGMAX_THREADS)
    block_argmax_kernel(const void* __restrict__ scores, int64_t row_stride, int scores_dtype,
                        const void* __restrict__ bias, int bias_dtype, int E, int topk, int renormalize, float rs,
                        float* __restrict__ weights, int32_t* __restrict__ ids) {
    constexpr int kWarps = BLOCK_ARGMAX_THREADS / 32;
    extern __shared__ float smem[];
    float* biased = smem;
    float* sig = smem + E;
    float* chosen = smem + 2 * E;
    __shared__ float warp_best[kWarps];
    __shared__ int warp_index[kWarps];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r = blockIdx.x;
    const void* row = serial_row(scores, r, row_stride, scores_dtype);

    for (int e = tid; e < E; e += BLOCK_ARGMAX_THREADS) {
        const float s = serial_sig(row, scores_dtype, e);
        sig[e] = s;
        biased[e] = serial_rank(s, bias, bias_dtype, e);
    }
    __syncthreads();

    for (int j = 0; j < topk; ++j) {
        float best = SERIAL_SENTINEL;
        int bi = INT_MAX;
        for (int e = tid; e < E; e += BLOCK_ARGMAX_THREADS) {
            const float v = biased[e];
            if (v > best) {  // the contract's test: NaN and values <= sentinel never taken
                best = v;
                bi = e;
            }
        }
        warp_argmax<32>(best, bi);
        if (lane == 0) {
            warp_best[warp] = best;
            warp_index[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            best = lane < kWarps ? warp_best[lane] : SERIAL_SENTINEL;
            bi = lane < kWarps ? warp_index[lane] : INT_MAX;
            warp_argmax<kWarps>(best, bi);
            if (lane == 0) {
                if (bi == INT_MAX) bi = 0;  // nothing beat the sentinel: expert 0, again if taken
                biased[bi] = SERIAL_SENTINEL;
                chosen[j] = sig[bi];
                ids[r * topk + j] = bi;
            }
        }
        __syncthreads();
    }
    if (tid == 0) serial_finish_weights(chosen, topk, renormalize, rs);
    __syncthreads();
    for (int j = tid; j < topk; j += BLOCK_ARGMAX_THREADS) weights[r * topk + j] = chosen[j];
}

static int cuda_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? SERIAL_OK : SERIAL_ERR_CUDA_BASE + (int)err;
}

extern "C" int serial_scan_route_cuda(const void* scores, int64_t row_stride, int scores_dtype, const void* bias,
                                      int bias_dtype, int64_t M, int E, int topk, int renormalize, float rs,
                                      float* workspace, float* weights, int32_t* ids, void* stream) {
    int rc = serial_check_args(scores, row_stride, scores_dtype, bias, bias_dtype, M, E, topk, weights, ids);
    if (rc != SERIAL_OK) return rc;
    if (M > 0 && !workspace) return SERIAL_ERR_NULL_POINTER;
    if (M == 0) return SERIAL_OK;
    const int64_t blocks = (M + SERIAL_SCAN_THREADS - 1) / SERIAL_SCAN_THREADS;
    if (blocks > INT_MAX) return SERIAL_ERR_SHAPE;
    serial_scan_kernel<<<(unsigned)blocks, SERIAL_SCAN_THREADS, 0, (cudaStream_t)stream>>>(
        scores, row_stride, scores_dtype, bias, bias_dtype, M, E, topk, renormalize, rs, workspace, weights, ids);
    return cuda_status();
}

extern "C" int block_argmax_route_cuda(const void* scores, int64_t row_stride, int scores_dtype, const void* bias,
                                       int bias_dtype, int64_t M, int E, int topk, int renormalize, float rs,
                                       float* weights, int32_t* ids, void* stream) {
    int rc = serial_check_args(scores, row_stride, scores_dtype, bias, bias_dtype, M, E, topk, weights, ids);
    if (rc != SERIAL_OK) return rc;
    if (E > BLOCK_ARGMAX_MAX_EXPERTS) return SERIAL_ERR_TOO_MANY_EXPERTS;
    if (M == 0) return SERIAL_OK;
    if (M > INT_MAX) return SERIAL_ERR_SHAPE;
    const size_t smem = (size_t)(2 * E + topk) * sizeof(float);
    block_argmax_kernel<<<(unsigned)M, BLOCK_ARGMAX_THREADS, smem, (cudaStream_t)stream>>>(
        scores, row_stride, scores_dtype, bias, bias_dtype, E, topk, renormalize, rs, weights, ids);
    return cuda_status();
}

extern "C" int block_argmax_max_experts(void) { return BLOCK_ARGMAX_MAX_EXPERTS; }

extern "C" const char* serial_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
