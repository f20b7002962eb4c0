"""Where bf16 pays: the one check behind every automatic precision choice of the package.

bf16 autocast is fast only where the hardware computes in bf16: a GPU that supports it, or a CPU with bf16 matrix
units (Intel AMX `amx_bf16`, or AVX512-BF16). On a CPU without them (AVX2 only) PyTorch emulates bf16 and a matmul
runs about 100x slower than in fp32 (measured on an AVX2 AMD EPYC: 0.7 against 92 GFLOP/s), so bf16 is chosen from
the capability, never assumed. Setting the environment variable `HF_MULTIENCODER_FAST_PATH=off` (or `0`) turns every
automatic choice off: fp32, as plain transformers runs.

Shipped with the weights (`encode` uses it); imports only torch.
"""

from __future__ import annotations

import contextlib
import os
import platform

import torch

FAST_PATH_ENV = "HF_MULTIENCODER_FAST_PATH"
_OFF = ("0", "off", "false", "no")


def fast_path_enabled() -> bool:
    """False when `HF_MULTIENCODER_FAST_PATH` is `off`, `0`, `false` or `no`."""
    return os.environ.get(FAST_PATH_ENV, "auto").strip().lower() not in _OFF


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This CPU's model name as the system reports it (`cpuinfo` on Linux), else `platform.processor()`."""
    with contextlib.suppress(OSError), open(cpuinfo) as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def cpu_bf16_units() -> list[str]:
    """The bf16 matrix units of this CPU that PyTorch uses: a subset of `["amx_bf16", "avx512_bf16"]`."""
    checks = (("amx_bf16", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
    return [unit for unit, check in checks if getattr(torch.cpu, check, lambda: False)()]


def bf16_pays(device_type: str) -> tuple[bool, str]:
    """Whether bf16 autocast runs faster than fp32 on this device type (`"cpu"`, `"cuda"`, ...), and why."""
    if device_type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return True, "this GPU computes in bf16"
        return False, "this GPU has no bf16 support"
    if device_type == "cpu":
        units = cpu_bf16_units()
        if units:
            return True, f"this CPU has bf16 matrix units ({', '.join(units)})"
        return False, ("this CPU has no bf16 matrix units (AMX or AVX512-BF16): bf16 would be emulated, about 100x "
                       "slower than fp32")
    return False, f"no bf16 fast path is known for {device_type!r}"


def auto_bf16(device_type: str) -> bool:
    """The automatic choice: bf16 where it pays and the fast path is not switched off."""
    return fast_path_enabled() and bf16_pays(device_type)[0]


def autocast(device_type: str, bf16: bool | None = None):
    """`torch.autocast` in bf16 when `bf16` is True, or None and [`auto_bf16`] says so; else a no-op context."""
    if bf16 is None:
        bf16 = auto_bf16(device_type)
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16)


__all__ = ["FAST_PATH_ENV", "auto_bf16", "autocast", "bf16_pays", "cpu_bf16_units", "cpu_model", "fast_path_enabled"]
