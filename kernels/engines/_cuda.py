"""Build our C shims over an engine's CUDA sources, and the CUDA facts the CUDA adapters share.

A shim (``sglang_radix_shim.cu``, ``flashinfer_noaux_shim.cu`` beside this
file) is our own translation unit: it ``#include``s the engine's kernel
source from the installed wheel (or ``--engine-path``), found through the
include directories given here, and exports ``extern "C"`` launchers taking
raw pointers, strides, a stream and a PDL flag. It is compiled with
``kernels._build.compile_shared`` into the shared-library cache (key: the
shim, the engine files it names, the compiler version, the flags, which
carry the include directories) and loaded with ctypes. No torch headers, no
engine runtime: the same shim compiles on a host without a GPU.

Architecture flags follow the engines: both build Hopper and Blackwell for
the arch-specific target (``sm_90`` -> ``compute_90a``/``sm_90a``).

cuBLAS headers: FlashInfer's ``tensorrt_llm/common/cudaUtils.h`` includes
``cublasLt.h`` and ``cublas_v2.h`` and names one enum from them (an error
string helper the router never calls). They are taken from the CUDA toolkit
or the ``nvidia-cublas`` pip package when present; a toolkit without cuBLAS
(a CPU CI host) gets ``compile_only/``, our declaration of that one enum,
and ``build_note()`` says so.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .._build import BuildError, compile_shared
from ._common import describe_roots, gate

__all__ = ["HERE", "arch_flags", "build_arch", "build_shim", "cublas_include_flags", "device_arch", "shim_failure", "shim_gates",
           "supported_cuda"]  # fmt: skip

HERE = Path(__file__).resolve().parent
COMPILER = "nvcc"
COMPILE_ONLY = HERE / "compile_only"


def device_arch() -> str:
    """``'sm_90'`` for the current CUDA device (needs torch with a GPU)."""
    import torch

    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    return f"sm_{major}{minor}"


def supported_cuda(min_sm: int, what: str) -> tuple[bool, str]:
    """(True, 'sm_90 with nvcc') on an NVIDIA GPU of at least ``min_sm`` with nvcc; (False, why). Never raises."""
    try:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, f"no GPU: torch {torch.__version__} sees none ({what} needs an NVIDIA GPU)"
        if torch.version.hip:
            return False, f"{what} is an NVIDIA CUDA kernel; this is a ROCm build of torch"
        arch = device_arch()
        if int(arch[3:]) < min_sm:
            return False, f"CUDA device {arch} is older than sm_{min_sm}, which {what} needs"
        if shutil.which(COMPILER) is None:
            return False, f"{COMPILER} is not on PATH; {what} is compiled from the engine's CUDA source on first use"
        return True, f"{arch} with {COMPILER}"
    except Exception as exc:  # noqa: BLE001 -- this function reports, it does not raise
        return False, f"{type(exc).__name__}: {exc}"


def shim_gates(what: str, min_sm: int, roots: tuple[str, ...], library):
    """``(supported_hardware, available)`` of a shim adapter named ``what``.

    Hardware: an NVIDIA GPU of at least ``min_sm`` with nvcc, and the engine
    packages ``roots`` found. Available: that, then ``library()`` (build and
    load the shim) succeeds. Neither raises.
    """

    def supported_hardware() -> tuple[bool, str]:
        ok, why = supported_cuda(min_sm, what)
        if not ok:
            return ok, why
        found, where = describe_roots(*roots)
        return (True, f"{why}; {where}") if found else (False, where)

    def available() -> tuple[bool, str]:
        ok, why = supported_hardware()
        if not ok:
            return ok, why
        return gate(library, lambda: why)

    return supported_hardware, available


def build_arch(arch: str | None, min_sm: int, what: str) -> str:
    """``arch``, or the current device's when None; BuildError when there is no device to pick it from."""
    if arch is None:
        ok, why = supported_cuda(min_sm, what)
        if not ok:
            raise BuildError(f"cannot pick an architecture: {why}; pass arch='sm_90'")
        arch = device_arch()
    return arch


def arch_flags(arch: str) -> tuple[list[str], int]:
    """nvcc target flags for ``'sm_90'`` and the numeric arch (900), as the engines build it."""
    digits = arch.removeprefix("sm_").rstrip("af")
    if not arch.startswith("sm_") or not digits.isdigit():
        raise ValueError(f"arch={arch!r} is not a CUDA architecture such as 'sm_90'")
    number = int(digits)
    suffix = "a" if number >= 90 else ""
    return [f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"], number * 10


def _toolkit_include() -> Path | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home) / "include"
    exe = shutil.which(COMPILER)
    if exe is None:
        return None
    return Path(os.path.realpath(exe)).parent.parent / "include"


def _pip_cublas_include() -> Path | None:
    for base in map(Path, sys.path):
        for sub in ("nvidia/cublas/include", "nvidia/cu13/include", "nvidia/cu12/include"):
            if (base / sub / "cublasLt.h").is_file():
                return base / sub
    return None


def cublas_include_flags() -> tuple[list[str], str]:
    """Include flags that make ``<cublasLt.h>`` resolve, and where it came from."""
    toolkit = _toolkit_include()
    for candidate in (toolkit, Path("/usr/local/cuda/include"), Path("/usr/include")):
        if candidate is not None and (candidate / "cublasLt.h").is_file():
            return [], f"cuBLAS headers from {candidate}"
    pip = _pip_cublas_include()
    if pip is not None:
        return [f"-I{pip}"], f"cuBLAS headers from {pip}"
    return [f"-I{COMPILE_ONLY}"], "no cuBLAS headers on this host: compiled with kernels/engines/compile_only (cublasStatus_t only)"


def build_shim(shim: Path, *, flags: list[str], depends: list[Path]) -> Path:
    """Compile a shim into the cache (or return the cached library); BuildError with nvcc's output."""
    if shutil.which(COMPILER) is None:
        raise BuildError(f"{COMPILER} is not on PATH; the engine shims are compiled from CUDA source")
    return compile_shared(shim, compiler=COMPILER, flags=[*flags, "-shared", "-Xcompiler", "-fPIC"], depends=depends)


def shim_failure(lib, prefix: str, rc: int, statuses: dict[int, str], *, detailed: tuple[int, ...]) -> RuntimeError:
    """The error for a shim launcher's non-zero return code: ``<prefix>_route returned rc (what it means)``, with the
    shim's own message (``<prefix>_error()``: the CUDA or engine error) for the codes in ``detailed``."""
    detail = getattr(lib, f"{prefix}_error")().decode(errors="replace") if rc in detailed else ""
    return RuntimeError(f"{prefix}_route returned {rc} ({statuses.get(rc, 'unknown')}) {detail}".strip())
