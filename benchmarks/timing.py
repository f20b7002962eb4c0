"""Timing and memory helpers shared by the benchmarks: clocks that synchronise CUDA, peak memory (CUDA allocator or
the process's peak RSS), a Trainer callback that times training steps, and interleaved medians (contestants run in
turn, the order reversed every round, so a drift of the machine's speed hits every contestant alike)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import re
import statistics
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _rss_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            match = re.search(rf"{field_name}:\s+(\d+)", f.read())
        return int(match.group(1)) if match else None
    except OSError:
        return None


class PeakMemory:
    """Peak memory over a block: CUDA allocator peak, or the process's peak RSS (Linux VmHWM, reset on entry)."""

    def __init__(self, device: str):
        self.device = device
        self.result: dict = {}

    def __enter__(self):
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back so the baseline is honest
            self.resettable = True
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM (peak RSS) to the current RSS
            except OSError:
                self.resettable = False  # peak since process start (resource.ru_maxrss semantics)
            self.start = _rss_kb("VmRSS")
        return self

    def __exit__(self, *exc):
        mb = 1024 * 1024
        if self.device == "cuda":
            synchronize("cuda")
            self.result = {"peak_mb": torch.cuda.max_memory_allocated() / mb,
                           "peak_reserved_mb": torch.cuda.max_memory_reserved() / mb,
                           "start_mb": self.start / mb, "kind": "torch.cuda.max_memory_allocated"}
        else:
            peak = _rss_kb("VmHWM")
            if peak is None:
                import resource

                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                self.resettable = False
            self.result = {"peak_mb": peak / 1024, "start_mb": (self.start or 0) / 1024,
                           "kind": "peak RSS (VmHWM, reset per run)" if self.resettable else
                           "peak RSS since process start"}
        self.result["peak_over_start_mb"] = self.result["peak_mb"] - self.result["start_mb"]
        return False


class StepTimer(TrainerCallback):
    """Clock at the end of the warm-up step and of the last timed step (CUDA synchronised at both)."""

    def __init__(self, warmup: int, steps: int, device: str):
        self.warmup, self.steps, self.device = warmup, steps, device
        self.start = self.end = None
        self.step_ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            synchronize(self.device)
            self.start = time.perf_counter()
        elif state.global_step == self.warmup + self.steps:
            synchronize(self.device)
            self.end = time.perf_counter()
        self.step_ends.append(time.perf_counter())

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None:
            raise RuntimeError(f"Training stopped before {self.warmup + self.steps} steps.")
        return self.end - self.start


def round_summary(values: list[float]) -> dict:
    """A ratio computed in each interleaved round: its median, range and the rounds themselves."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": list(values)}


def interleaved_median_ms(fns: dict[str, Callable[[], object]], repeats: int, device: str, warmup: int = 2) -> dict:
    """Median milliseconds of each function, run in turn (the order reversed every round)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            synchronize(device)
            start = time.perf_counter()
            fns[name]()
            synchronize(device)
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def time_collator(collator, ds, batch_size: int, n_batches: int = 8) -> float:
    """Milliseconds per batch spent in the collator (row access included), over the first `n_batches` batches."""
    rows = [ds[i] for i in range(min(len(ds), batch_size * n_batches))]
    batches = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    start = time.perf_counter()
    for b in batches:
        collator(b)
    return (time.perf_counter() - start) / len(batches) * 1000


def cleanup() -> None:
    """Free what the caller just dropped (call after `del model, trainer`)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
