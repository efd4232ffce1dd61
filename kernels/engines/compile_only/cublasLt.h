// Compile-only stand-in: see cublas_v2.h beside this file.
#pragma once
#include "cublas_v2.h"
