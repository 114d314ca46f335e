"""A user's llama.cpp command line parsed: the old and new spellings of ``common/arg.cpp``
(llama-cli, llama-server, llama-speculative), unknown flags kept aside; ``-- BASELINE_CMD --
SPECULATIVE_CMD`` split into its two command lines."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from equiv.errors import ConfigError

__all__ = ["RANDOM_SEED", "LlamaCommand", "parse_command", "split_commands"]

#: llama.cpp's "pick a random seed" (LLAMA_DEFAULT_SEED, also written -1).
RANDOM_SEED = 0xFFFFFFFF

_FA_VALUES = {"on", "off", "auto", "1", "0", "true", "false"}
_NUMBER = re.compile(r"^-?\d+(\.\d*)?$")


def _int(text: str) -> int:
    return int(text, 0) if text.lower().startswith("0x") else int(text)


#: A setting's value as parsed from its flag.
Setting = str | int | float | bool
_S = TypeVar("_S", str, int, float, bool)

# flag spellings -> (setting, converter); a converter of None marks a switch without a value.
_FLAGS: tuple[tuple[tuple[str, ...], str, Callable[[str], Setting] | None], ...] = (
    (("-m", "--model"), "model", str),
    (("-md", "--model-draft", "--spec-draft-model"), "model_draft", str),
    (
        ("--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", "--spec-draft-max"),
        "draft_max",
        int,
    ),
    (("--draft-min", "--draft-n-min", "--spec-draft-n-min", "--spec-draft-min"), "draft_min", int),
    (("--draft-p-min", "--spec-draft-p-min"), "draft_p_min", float),
    (("--spec-type",), "spec_type", str),
    (("--temp", "--temperature"), "temp", float),
    (("--top-k",), "top_k", int),
    (("--top-p",), "top_p", float),
    (("--min-p",), "min_p", float),
    (("--repeat-penalty",), "repeat_penalty", float),
    (("-s", "--seed"), "seed", _int),
    (("-c", "--ctx-size"), "n_ctx", int),
    (("-b", "--batch-size"), "n_batch", int),
    (("-ub", "--ubatch-size"), "n_ubatch", int),
    (("-t", "--threads"), "threads", int),
    (("-fa", "--flash-attn"), "flash_attn", None),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", str),
    (("-ctk", "--cache-type-k"), "cache_type_k", str),
    (("-ctv", "--cache-type-v"), "cache_type_v", str),
    (("-np", "--parallel"), "parallel", int),
    (("--jinja",), "jinja", bool),  # a switch: the model's own Jinja chat template
)
_BY_SPELLING = {name: (key, conv) for names, key, conv in _FLAGS for name in names}


@dataclass(frozen=True)
class LlamaCommand:
    """A parsed llama-cli / llama-server / llama-speculative command line."""

    program: str
    settings: Mapping[str, Setting]
    spellings: Mapping[str, str]  # setting -> the flag the user wrote
    ignored: tuple[str, ...] = ()
    program_path: str = ""  # the program as written (a path, or a name on PATH)
    words: tuple[str, ...] = ()  # the flags as written, in order

    def get(self, key: str) -> Setting | None:
        """The setting as parsed (its flag's type), None where the flag was not given."""
        return self.settings.get(key)

    def text(self, key: str) -> str | None:
        """A setting whose flag takes a word (``-m``, ``-ngl``, ``-ctk``, ``--spec-type``)."""
        return self._typed(key, str)

    def integer(self, key: str) -> int | None:
        """A setting whose flag takes an integer (``--draft-max``, ``-c``, ``-np``, ``-s``)."""
        return self._typed(key, int)

    def number(self, key: str) -> float | None:
        """A setting whose flag takes a number (``--temp``, ``--top-p``, ``--draft-p-min``)."""
        value = self.settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return self._typed(key, float)

    def flag(self, key: str) -> bool:
        """A switch without a value (``--jinja``): given or not."""
        return self._typed(key, bool) is True

    def _typed(self, key: str, kind: type[_S]) -> _S | None:
        value = self.settings.get(key)
        if value is None:
            return None
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise TypeError(f"setting {key} is {value!r}, not {kind.__name__}: ask for it as such")

    @property
    def temp(self) -> float:
        """``--temp``, or llama.cpp's default 0.8 where not given."""
        temp = self.number("temp")
        return 0.8 if temp is None else temp

    @property
    def parallel(self) -> int:
        """``-np``, or llama-server's default 1 where not given."""
        slots = self.integer("parallel")
        return 1 if slots is None else slots

    @property
    def seed_fixed(self) -> bool:
        seed = self.integer("seed")
        return seed is not None and seed not in (-1, RANDOM_SEED)


def parse_command(argv: Sequence[str] | str) -> LlamaCommand:
    """Parse a llama.cpp command line; unknown flags (and their values) land in ``ignored``."""
    words = shlex.split(argv) if isinstance(argv, str) else list(argv)
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise ConfigError(
            "equiv diagnose needs a llama.cpp command line after '--', e.g. "
            "equiv diagnose -- llama-server -m target.gguf -md draft.gguf --draft-max 16"
        )
    program = program_path = ""
    if not words[0].startswith("-"):
        program_path, words = words[0], words[1:]
        program = Path(program_path).name
    settings: dict[str, Setting] = {}
    spellings: dict[str, str] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        i += 1
        if name not in _BY_SPELLING:
            if word.startswith("-") and not _NUMBER.match(word):
                nxt = words[i] if i < len(words) and not eq else "-"
                has_value = not nxt.startswith("-") or bool(_NUMBER.match(nxt))
                ignored.append(f"{word} {words[i]}" if has_value else word)
                i += 1 if has_value else 0
            else:
                ignored.append(word)
            continue
        key, conv = _BY_SPELLING[name]
        if conv is bool:  # a switch without a value
            settings[key], spellings[key] = True, name
            continue
        if conv is None:  # -fa: a bare switch in old builds, -fa on|off|auto in new ones
            value = inline or (words[i] if i < len(words) and words[i] in _FA_VALUES else "on")
            i += 1 if not inline and i < len(words) and words[i] in _FA_VALUES else 0
            settings[key], spellings[key] = value, name
            continue
        if not eq:
            if i >= len(words):
                raise ConfigError(f"{name} needs a value; e.g. {name} 16")
            inline = words[i]
            i += 1
        try:
            settings[key] = conv(inline)
        except ValueError:
            raise ConfigError(
                f"{name} {inline!r} is not a valid value; llama.cpp expects "
                f"{'a number' if conv in (int, float, _int) else 'a value'} there"
            ) from None
        spellings[key] = name
    return LlamaCommand(program, settings, spellings, tuple(ignored), program_path, tuple(words))


def split_commands(words: Sequence[str]) -> list[list[str]]:
    """``-- CMD`` or ``-- BASELINE_CMD -- SPECULATIVE_CMD``: the command lines after ``--``."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    parts: list[list[str]] = [[]]
    for word in words:
        if word == "--":
            parts.append([])
        else:
            parts[-1].append(word)
    if len(parts) > 2:
        raise ConfigError(
            f"equiv diagnose takes one command line, or two (baseline -- speculative); got "
            f"{len(parts)} separated by --"
        )
    return parts
