"""What a run is: models, sampling, drafting and runtime settings, and their fingerprint.

Everything here is a frozen dataclass so that a configuration can be hashed, compared and written
to the results file. This module must not import llama_cpp: the engine adds its own facts (library
versions, CPU features) to the fingerprint.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import numbers
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, cast

from equiv.errors import ConfigError
from equiv.json_types import JSONDict, JSONObject, json_object

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "BUILTIN_PAIRS",
    "DEFAULT_DRAFT_QUANT",
    "DEFAULT_PAIR",
    "DRAFT_QUANTS",
    "DraftConfig",
    "Mode",
    "ModelSpec",
    "RunConfig",
    "SamplingConfig",
    "Setting",
    "fingerprint_digest",
    "load_toml",
    "validate_quality_margin",
    "validate_sampling",
]


DEFAULT_DRAFT_QUANT = "Q4_0"
# The built-in pairs a user names instead of --target/--draft paths (equiv.models.pair).
DEFAULT_PAIR = "gemma3"
BUILTIN_PAIRS = {
    "gemma3": "the bundled Gemma 3 270M Q4_K_M target and a draft requantized from it",
    "hybrid": "a tiny Mamba (recurrent) target and a llama draft on the Gemma 3 tokenizer, built "
    "in seconds: llama-server verifies its drafts by checkpoint and replay",
    "mtp": "a tiny DeepSeek-R1-architecture (deepseek2) target with one multi-token-prediction "
    "head on the Gemma 3 tokenizer, built in seconds: it drafts for itself on llama-server "
    "(--spec-type draft-mtp), no draft model",
}
# Quant name -> llama_ftype value (llama.h); the types that requantize from Q4_K_M in seconds.
DRAFT_QUANTS = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q8_0": 7, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_S": 14}

#: The value of one setting given by name: a speculative-path override or an engine option (a
#: run option's value as the command line or TOML types it).
Setting: TypeAlias = str | int | float | bool


class Mode(str, enum.Enum):
    """How the two paths are compared."""

    TEMP0 = "temp0"
    SAMPLING = "sampling"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF file and where it came from (``bundled``, ``derived:<how>`` or ``user``), or the
    model a running server serves (``served``: no file; the server says what it is)."""

    path: str
    provenance: str = "user"

    @classmethod
    def of_server(cls) -> ModelSpec:
        """The model of a running server that equiv is given no file for."""
        return cls(path="", provenance="served")

    @property
    def served(self) -> bool:
        return self.provenance == "served"

    def to_dict(self) -> JSONDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> ModelSpec:
        return cls(path=str(data["path"]), provenance=str(data.get("provenance", "user")))


def _present(cls: type, data: JSONObject) -> dict[str, Any]:
    """The fields of ``cls`` that ``data`` holds, as written (JSON edge: __post_init__ checks)."""
    return {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}


def validate_sampling(
    *,
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    typical_p: float,
    repeat_penalty: float,
) -> None:
    """Raise `ConfigError` naming the first sampling parameter outside its valid range.

    Valid: ``temp >= 0`` (0 is greedy), ``top_k >= 0`` (0 disables), ``0 < top_p <= 1``,
    ``0 <= min_p <= 1``, ``0 < typical_p <= 1``, ``repeat_penalty > 0``. NaN and infinity are
    never valid (a results file is standard JSON, which has neither), nor is a value that is not
    a number.
    """
    values = {
        "temp": temp,
        "top_p": top_p,
        "min_p": min_p,
        "typical_p": typical_p,
        "repeat_penalty": repeat_penalty,
    }
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name}={value!r} is not a number; pass a number such as 0.8")
        if not math.isfinite(value):
            raise ConfigError(
                f"{name}={value!r} is not a finite number; pass a number such as "
                f"{'0.8' if name == 'temp' else '0.95' if name == 'top_p' else '1.0'}"
            )
    if not temp >= 0.0:
        raise ConfigError(
            f"temp={temp!r} is negative or NaN; pass 0 for greedy decoding "
            "or a positive value such as 0.8"
        )
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
        raise ConfigError(f"top_k={top_k!r} is not an integer; pass an integer such as 40")
    if top_k < 0:
        raise ConfigError(
            f"top_k={top_k!r} is negative; pass 0 to disable top-k or a count such as 40"
        )
    if not 0.0 < top_p <= 1.0:
        raise ConfigError(
            f"top_p={top_p!r} is outside (0, 1]; pass a value such as 0.95 (1.0 disables it)"
        )
    if not 0.0 <= min_p <= 1.0:
        raise ConfigError(
            f"min_p={min_p!r} is outside [0, 1]; pass a value such as 0.05 (0 disables it)"
        )
    if not 0.0 < typical_p <= 1.0:
        raise ConfigError(
            f"typical_p={typical_p!r} is outside (0, 1]; pass 1.0 to disable typical sampling "
            "or a value such as 0.9"
        )
    if not repeat_penalty > 0.0:
        raise ConfigError(
            f"repeat_penalty={repeat_penalty!r} is not positive; pass 1.0 to disable it "
            "or a value such as 1.1"
        )


@dataclass(frozen=True)
class SamplingConfig:
    """llama.cpp's sampler chain as llama-cpp-python builds it.

    Order: penalties -> top_k -> typical -> top_p -> min_p -> temp -> dist; ``temp == 0`` is greedy.
    Defaults are llama-cpp-python's.
    """

    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        validate_sampling(
            temp=self.temp,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            typical_p=self.typical_p,
            repeat_penalty=self.repeat_penalty,
        )

    @property
    def greedy(self) -> bool:
        return self.temp == 0

    def to_dict(self) -> JSONDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> SamplingConfig:
        return cls(**_present(cls, data))


@dataclass(frozen=True)
class DraftConfig:
    """How the draft proposes tokens; the defaults are llama.cpp's (common/common.h)."""

    draft_max: int = 16
    draft_min: int = 0
    p_min: float = 0.75

    def __post_init__(self) -> None:
        if self.draft_max < 1:
            raise ConfigError(f"draft_max={self.draft_max} must be >= 1; llama.cpp uses 16")
        if not 0 <= self.draft_min <= self.draft_max:
            raise ConfigError(
                f"draft_min={self.draft_min} must lie in [0, draft_max={self.draft_max}]"
            )
        if not 0 <= self.p_min <= 1:
            raise ConfigError(f"p_min={self.p_min} must lie in [0, 1]; llama.cpp uses 0.75")

    def to_dict(self) -> JSONDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> DraftConfig:
        return cls(**_present(cls, data))


_SAMPLING_KEYS = {f.name for f in dataclasses.fields(SamplingConfig)}
_OVERRIDABLE = _SAMPLING_KEYS | {
    "target",
    "n_ctx",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "flash_attn",
}


def validate_quality_margin(points: float) -> None:
    """The one rule for the quality test's equivalence margin: percentage points of pass rate in
    (0, 100). `RunConfig` applies it; the ``--quality-margin`` option checks its text with it."""
    if not 0 < points < 100:
        raise ConfigError(
            f"quality_margin={points} must lie in (0, 100) percentage points; 3 is the default"
        )


def _default_threads() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class RunConfig:
    """One experiment: the same prompts through the target alone and through target + draft."""

    target: ModelSpec
    draft: ModelSpec
    suites: tuple[str, ...] = ()
    mode: Mode = Mode.TEMP0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    draft_config: DraftConfig = field(default_factory=DraftConfig)
    seeds: tuple[int, ...] = ()
    max_tokens: int | None = None
    n_ctx: int = 2048
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = field(default_factory=_default_threads)
    flash_attn: bool = False
    top_k_record: int = 8
    engine: str = "llamacpp"
    alpha: float = 0.01
    # Sampling mode: looks at each prompt's seeds as they accumulate (1: one fixed-size test of
    # every seed; more: `seeds` is a budget, and a prompt stops at the first conclusive look;
    # `equiv.verdicts.stats.sequential` spends alpha over the looks).
    looks: int = 1
    # Equivalence margin of the quality test, in percentage points of pass rate (graded prompts).
    quality_margin: float = 3.0
    # Settings of the speculative path that differ from the baseline's, to reproduce a user's
    # two setups (e.g. ("target", "other-quant.gguf"), ("n_ctx", 512), ("top_p", 0.9)). Such a
    # run is a misconfiguration by construction, and the classifier says so.
    spec_overrides: tuple[tuple[str, Setting], ...] = ()
    # Options of the engine itself (e.g. the server engine's binary or URLs), as (name, value)
    # pairs: they reach the factory inside the config, so the header records them and
    # ``--resume`` checks them like every other setting.
    engine_options: tuple[tuple[str, Setting], ...] = ()

    def __post_init__(self) -> None:
        if self.n_ctx < 16:
            raise ConfigError(f"n_ctx={self.n_ctx} is too small; use at least 16 (default 2048)")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise ConfigError(f"n_batch={self.n_batch}, n_ubatch={self.n_ubatch} must be >= 1")
        if self.n_threads < 1:
            raise ConfigError(f"n_threads={self.n_threads} must be >= 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"max_tokens={self.max_tokens} must be >= 1")
        if self.top_k_record < 2:
            raise ConfigError(f"top_k_record={self.top_k_record} must be >= 2")
        for seed in self.seeds:
            if seed <= 0 or seed >= 2**32 - 1:
                raise ConfigError(
                    f"seed={seed} is not allowed: llama-cpp-python treats 0 (and 0xFFFFFFFF) "
                    "as 'pick a random seed', which would make the run unrepeatable; "
                    "use seeds in [1, 2**32 - 2]"
                )
        if self.mode is Mode.SAMPLING and not self.seeds:
            raise ConfigError("sampling mode needs at least one seed; pass --seeds N (e.g. 64)")
        if self.mode is Mode.SAMPLING and self.sampling.greedy:
            raise ConfigError("sampling mode needs temp > 0; pass --temp 0.8 or use --mode temp0")
        if not 0 < self.alpha < 0.5:
            raise ConfigError(f"alpha={self.alpha} must lie in (0, 0.5); 0.01 is the default")
        if self.looks < 1:
            raise ConfigError(
                f"looks={self.looks} must be >= 1 (1: one test of every seed; 4: stop early)"
            )
        validate_quality_margin(self.quality_margin)
        for key, _ in self.spec_overrides:
            if key not in _OVERRIDABLE:
                raise ConfigError(
                    f"speculative override {key!r} is not supported; use one of "
                    f"{', '.join(sorted(_OVERRIDABLE))}"
                )

    def for_path(self, *, speculative: bool) -> RunConfig:
        """The configuration one path actually runs with (overrides applied on speculative):
        the configuration as its record holds it, with each override written over its setting."""
        if not speculative or not self.spec_overrides:
            return self
        data = self.to_dict()
        sampling = dict(json_object(data["sampling"]))
        for key, value in self.spec_overrides:
            if key == "target":
                target = ModelSpec(str(value), provenance="user (speculative only)")
                data["target"] = target.to_dict()
            elif key in _SAMPLING_KEYS:
                sampling[key] = value
            else:
                data[key] = value
        data.update(sampling=sampling, spec_overrides=[])
        return RunConfig.from_dict(data)

    @property
    def self_draft(self) -> bool:
        """The draft is the target file itself: a control whose acceptance must be ~1 at temp 0."""
        if self.target.served or self.draft.served:
            return False
        return Path(self.target.path).resolve() == Path(self.draft.path).resolve()

    def to_dict(self) -> JSONDict:
        data = dataclasses.asdict(self)
        data["mode"] = self.mode.value
        data["suites"] = list(self.suites)
        data["seeds"] = list(self.seeds)
        data["spec_overrides"] = [list(kv) for kv in self.spec_overrides]
        data["engine_options"] = [list(kv) for kv in self.engine_options]
        return data

    @classmethod
    def from_dict(cls, data: JSONObject) -> RunConfig:
        plain = _present(cls, data)
        for name in ("target", "draft", "sampling", "draft_config", "mode"):
            plain.pop(name, None)
        plain["suites"] = tuple(plain.get("suites", ()))
        plain["seeds"] = tuple(plain.get("seeds", ()))
        plain["spec_overrides"] = tuple(tuple(kv) for kv in plain.get("spec_overrides", ()))
        plain["engine_options"] = tuple(tuple(kv) for kv in plain.get("engine_options", ()))
        return cls(
            target=ModelSpec.from_dict(cast(JSONObject, data["target"])),
            draft=ModelSpec.from_dict(cast(JSONObject, data["draft"])),
            mode=Mode(data.get("mode", "temp0")),
            sampling=SamplingConfig.from_dict(cast(JSONObject, data.get("sampling", {}))),
            draft_config=DraftConfig.from_dict(cast(JSONObject, data.get("draft_config", {}))),
            **plain,
        )


def fingerprint_digest(fingerprint: JSONObject) -> str:
    """A short stable hash of a fingerprint (sorted JSON)."""
    blob = json.dumps(fingerprint, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def load_toml(path: str | Path) -> dict[str, object]:
    """Read the ``[tool.equiv]`` table of a pyproject.toml, or a whole equiv TOML file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist; check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None
    table = data.get("tool", {}).get("equiv", data)
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.equiv] in {str(p)!r} must be a table")
    return table
