"""The run's configuration and environment, as tables, from the (redacted) header record."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from equiv.json_types import JSONObject, JSONValue, json_list, json_object
from equiv.records.machine import Machine

__all__ = ["Environment", "environment", "fmt"]


def fmt(value: object) -> str:
    """A value for a table cell: numbers short, containers as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return str(value)


def _pairs(value: JSONValue) -> TypeGuard[Sequence[Sequence[JSONValue]]]:
    """``value`` is a list of (key, value) pairs."""
    return isinstance(value, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in value
    )


def _setting(key: str, value: JSONValue) -> str:
    """A run setting as a reader wants it: what an empty list means, a run of seeds as a range."""
    if isinstance(value, list | tuple) and not value:
        return {
            "suites": "all built-in suites",
            "seeds": "none: temp 0 runs each prompt once",
            "spec_overrides": "none: both paths share every setting",
            "engine_options": "none",
        }.get(key, "none")
    if (
        key == "seeds"
        and isinstance(value, list | tuple)
        and all(isinstance(v, int) for v in value)
    ):
        first, last = value[0], value[-1]
        if list(value) == list(range(first, last + 1)) and len(value) > 2:
            return f"{first}..{last} ({len(value)} seeds)"
    if key == "spec_overrides" and _pairs(value):
        return ", ".join(f"{k} = {fmt(v)}" for k, v in value) + " (speculative path only)"
    return fmt(value)


def _size(value: JSONValue) -> str:
    return f"{value / 1e6:.1f} MB ({value:,} bytes)" if isinstance(value, int) else fmt(value)


def _short(value: JSONValue, limit: int = 120) -> str:
    text = fmt(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters; all in the raw header below)"


@dataclass(frozen=True)
class Environment:
    """Tables for the report's configuration section; every cell a plain string."""

    versions: tuple[tuple[str, str], ...]
    cpu_features: tuple[str, ...]
    models: tuple[tuple[str, str, str], ...]  # (field, target, draft)
    paths: tuple[tuple[str, str, str, bool], ...]  # (field, baseline, speculative, differs)
    settings: tuple[tuple[str, str], ...]
    vocab: tuple[tuple[str, str], ...]


_MODEL_FIELDS = (
    ("name", "name"),
    ("file", "path"),
    ("provenance", "provenance"),
    ("quant", "quant"),
    ("sha256", "sha256"),
    ("size", "size_bytes"),
    ("architecture", "architecture"),
    ("vocabulary", "vocab_size"),
    ("context length", "context_length"),
    ("chat template", "chat_template"),
)


def _features(system_info: str) -> tuple[str, ...]:
    """The CPU features llama.cpp reports as enabled (``AVX2 = 1``)."""
    out = []
    for part in system_info.split("|"):
        name, _, value = part.partition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() not in ("", "0"):
            out.append(name)
    return tuple(out)


def _versions(header: JSONObject, base: JSONObject, spec: JSONObject) -> list[tuple[str, str]]:
    config = json_object(header.get("config") or {})
    system_info = str(base.get("system_info") or spec.get("system_info") or "")
    versions = [
        ("equiv", fmt(header.get("equiv"))),
        ("llama-cpp-python", fmt(base.get("llama_cpp_python") or spec.get("llama_cpp_python"))),
        ("Python", fmt(header.get("python"))),
        ("engine", fmt(config.get("engine"))),
        ("results schema", fmt(header.get("schema"))),
        ("created", fmt(header.get("created"))),
    ]
    if base.get("llama_cpp") or spec.get("llama_cpp"):
        versions.insert(2, ("llama.cpp", fmt(base.get("llama_cpp") or spec.get("llama_cpp"))))
    machine = header.get("machine")
    if isinstance(machine, Mapping):
        versions.append(("machine", Machine.from_dict(machine).summary))
    if system_info:
        versions.append(("system info", system_info))
    return versions


def _models(config: JSONObject, vocab: JSONObject) -> list[tuple[str, str, str]]:
    models: list[tuple[str, str, str]] = []
    roles = []
    for role in ("target", "draft"):
        info = dict(json_object(vocab.get(role) or {}))
        info.setdefault("path", json_object(config.get(role) or {}).get("path"))
        info["provenance"] = json_object(config.get(role) or {}).get("provenance")
        roles.append(info)
    for label, key in _MODEL_FIELDS:
        cells = [_size(r.get(key)) if key == "size_bytes" else _short(r.get(key)) for r in roles]
        if any(c != "-" for c in cells):
            models.append((label, cells[0], cells[1]))
    return models


def _settings(config: JSONObject) -> list[tuple[str, str]]:
    settings: list[tuple[str, str]] = []
    for key, value in config.items():
        if key in ("target", "draft"):
            continue
        if isinstance(value, dict):
            settings.extend((f"{key}.{k}", fmt(v)) for k, v in value.items())
        else:
            settings.append((key, _setting(key, value)))
    return settings


def environment(header: JSONObject) -> Environment:
    """The header's tables, from the header as the file holds it (redacted where asked)."""
    config = json_object(header.get("config") or {})
    prints = json_object(header.get("fingerprints") or {})
    base = json_object(prints.get("baseline") or {})
    spec = json_object(prints.get("speculative") or {})
    vocab = json_object(header.get("vocab") or {})
    system_info = str(base.get("system_info") or spec.get("system_info") or "")
    paths = [
        (key, fmt(base.get(key)), fmt(spec.get(key)), fmt(base.get(key)) != fmt(spec.get(key)))
        for key in dict.fromkeys([*base, *spec])
        if key not in ("system_info", "path")
    ]
    vocab_rows = [("compatible", fmt(vocab.get("compatible")))] if vocab else []
    vocab_rows += [("reason", fmt(r)) for r in json_list(vocab.get("reasons") or [])]
    vocab_rows += [("note", fmt(n)) for n in json_list(vocab.get("notes") or [])]
    return Environment(
        versions=tuple(_versions(header, base, spec)),
        cpu_features=_features(system_info),
        models=tuple(_models(config, vocab)),
        paths=tuple(paths),
        settings=tuple(_settings(config)),
        vocab=tuple(vocab_rows),
    )
