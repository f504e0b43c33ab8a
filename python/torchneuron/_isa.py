"""The instruction-set level the device's own kernels (attention, skinny matmul)
run at: the best the CPU supports, or the one TORCHNEURON_ISA forces; and the
library that runs the device's float32 matrix products."""
from . import _C


def kernel_isa():
    """The level in force: "baseline", "avx2", "avx512" or "avx512_bf16".

    Raises RuntimeError when TORCHNEURON_ISA names a level this CPU lacks (or no
    level at all); the device is then unavailable, with the same reason.
    """
    level = _C._kernel_isa()
    if not level:
        raise RuntimeError(f"[neuron] kernel_isa: {_C._device_count_error()}")
    return level


def supported_kernel_isas():
    """Levels this CPU can run, lowest first (values TORCHNEURON_ISA accepts here)."""
    return list(_C._supported_kernel_isas())


def float32_gemm_library():
    """Which library runs the device's float32 matrix products with many rows:
    "onednn" (chosen on AMD CPUs with AVX-512, where ATen's MKL runs its AVX2
    code, or forced by TORCHNEURON_FLOAT32_GEMM=onednn) or "aten" (ATen's own
    choice, MKL). Products below about 4M multiply-adds, and those with few
    rows (the device's skinny matmul), are not affected."""
    return _C._float32_gemm_library()
