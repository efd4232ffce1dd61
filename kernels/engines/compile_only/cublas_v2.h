// Compile-only stand-in, used by kernels/engines/_cuda.py only when the CUDA
// toolkit has no cuBLAS headers (a CPU CI host). FlashInfer's cudaUtils.h
// includes <cublasLt.h> and <cublas_v2.h> and names cublasStatus_t and its
// values in an error-string helper; the routing kernel calls no cuBLAS. This
// declares that enum and nothing else; a host with cuBLAS uses its headers.
#pragma once

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
