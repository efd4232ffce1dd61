// Radix-4 MoE router top-k, NVIDIA CUDA back end (sm_80+).
//
// Computes, per token, the top-k experts of contract `aiter` (sigmoid
// scores plus a correction bias, aiter's tie order, NaN last) and their
// weights: see radix4_router.h for the contract as plain torch and the
// algorithm. Launch shape: a block of RADIX4_WARPS_PER_TOKEN warps per token
// up to RADIX4_BLOCK_PER_TOKEN_MAX_ROWS rows, else one 32-lane warp per
// token, RADIX4_TOKENS_PER_BLOCK warps per block. C ABI: radix4_entry.h.
//
// Build: nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -std=c++17 radix4.cu
// (no fast math: the sigmoid must round as the contract's).
#include "lanes_cuda.cuh"
#include "radix4_entry.h"
