"""The machine a run ran on: where a near-tie flips depends on it.

Plain decoding and draft verification differ only in how their floating-point sums are ordered,
and that order is the kernels': the CPU's SIMD width (AVX2, AVX-512, NEON, SVE), the GPU, and the
build of llama.cpp (its ``llama_print_system_info()`` line). Two runs of the same plan on two
machines can diverge at different prompts with both labels right, so the header records the
machine and ``equiv compare`` names a change of it among the setup differences.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from equiv.json_types import JSONDict, JSONValue
from equiv.records.fields import Fields

__all__ = ["SIMD_FLAGS", "Machine"]

#: The CPU features that change which kernels llama.cpp and BLAS run (x86 ``flags`` and Arm
#: ``Features`` of /proc/cpuinfo); the rest of the flags say nothing about numerics.
SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
)
_CPUINFO = Path("/proc/cpuinfo")
_GPU_QUERY = ("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader")


def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    """The CPU's model name and its `SIMD_FLAGS`, from /proc/cpuinfo where there is one."""
    model = ""
    flags: set[str] = set()
    try:
        text = _CPUINFO.read_text(errors="replace")
    except OSError:
        return platform.processor(), ()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = set(value.split())
    return model or platform.processor(), tuple(f for f in SIMD_FLAGS if f in flags)


def _gpus() -> tuple[str, ...]:
    """NVIDIA GPUs as ``name, driver`` where ``nvidia-smi`` answers within 5 s; else none."""
    if shutil.which(_GPU_QUERY[0]) is None:
        return ()
    try:
        done = subprocess.run(_GPU_QUERY, capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


@dataclass(frozen=True)
class Machine:
    """What the run's numerics depend on, besides the configuration: CPU model, architecture,
    logical cores, the SIMD features present, the GPUs, and llama.cpp's system-info line of the
    in-process build (empty where no engine reported one, e.g. servers only)."""

    cpu: str
    arch: str
    cores: int
    simd: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    system_info: str = ""
    os: str = ""

    @classmethod
    def here(cls, *, system_info: str = "") -> Machine:
        """This machine, now."""
        cpu, simd = _cpuinfo()
        return cls(
            cpu=cpu,
            arch=platform.machine(),
            cores=os.cpu_count() or 0,
            simd=simd,
            gpus=_gpus(),
            system_info=system_info,
            os=platform.platform(terse=True),
        )

    @property
    def summary(self) -> str:
        """One line: ``AMD EPYC (x86_64, 2 cores; avx2 fma f16c)``, and the GPUs."""
        features = f"; {' '.join(self.simd)}" if self.simd else ""
        line = f"{self.cpu or 'unknown CPU'} ({self.arch}, {self.cores} cores{features})"
        return line + (f"; GPU {', '.join(self.gpus)}" if self.gpus else "")

    def changes(self, other: Machine) -> list[str]:
        """How ``other`` differs in what the numerics depend on (not the core count or OS)."""
        out = []
        if (self.cpu, self.arch) != (other.cpu, other.arch):
            out.append(f"CPU {self.cpu} ({self.arch}) -> {other.cpu} ({other.arch})")
        gained = [f"+{f}" for f in other.simd if f not in self.simd]
        lost = [f"-{f}" for f in self.simd if f not in other.simd]
        if gained or lost:
            out.append(f"SIMD {' '.join(lost + gained)}")
        if self.gpus != other.gpus:
            out.append(f"GPU {', '.join(self.gpus) or 'none'} -> {', '.join(other.gpus) or 'none'}")
        if self.system_info and other.system_info and self.system_info != other.system_info:
            out.append("llama.cpp system info differs")
        return out

    def to_dict(self) -> JSONDict:
        return {
            "cpu": self.cpu,
            "arch": self.arch,
            "cores": self.cores,
            "simd": list(self.simd),
            "gpus": list(self.gpus),
            "system_info": self.system_info,
            "os": self.os,
        }

    @classmethod
    def from_dict(cls, data: JSONValue, where: str = "machine") -> Machine:
        f = Fields(data, where)
        return cls(
            cpu=f.text("cpu", ""),
            arch=f.text("arch", ""),
            cores=f.integer("cores", 0),
            simd=f.strs("simd", ()),
            gpus=f.strs("gpus", ()),
            system_info=f.text("system_info", ""),
            os=f.text("os", ""),
        )
