"""Redaction of what a report must not leak by default: home directories, user names and other
local absolute paths in the run's header and events (never in prompts or outputs, which are the
evidence). A home directory becomes ``~``; any other absolute path its last component after
``…/``; a user name found in a home path becomes ``USER`` wherever else it appears.
"""

from __future__ import annotations

import contextlib
import getpass
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from equiv.json_types import JSONValue

__all__ = ["ENV_WHITELIST", "NOTE", "Redactor", "make_redactor"]

#: Environment variables a report may show (when a header records them); all others are dropped.
ENV_WHITELIST = frozenset(
    {"OMP_NUM_THREADS", "GGML_NUM_THREADS", "LLAMA_ARG_THREADS", "CUDA_VISIBLE_DEVICES"}
)
_ENV_KEYS = frozenset({"env", "environ", "environment"})

NOTE = (
    "Local paths in the configuration, command and controls are redacted: the home directory "
    "is shown as ~, other absolute paths by their last component (…/name), user names as USER; "
    "prompts and outputs are shown as recorded. Render with --no-redact to keep them."
)

_HOME = re.compile(r"(?:/home|/Users)/([^/\s'\"]+)|^/root(?=/|$)|(?<=[\s='\"])/root(?=/|$)")
_WIN_HOME = re.compile(r"[A-Za-z]:\\Users\\([^\\\s'\"]+)")
_ABS = re.compile(r"(?<![\w~.:/\\-])/[^\s'\"|,;()]+")
_WIN_ABS = re.compile(r"(?<![\w])[A-Za-z]:\\[^\s'\"|,;()]+")
# Never redacted as words: too common to be a secret, and they occur in templates and configs.
_COMMON_NAMES = frozenset({"root", "user", "admin", "runner", "ubuntu", "debian", "test"})

Redactor = Callable[[JSONValue], JSONValue]  # maps each object to a dict, each str to a str


def _names(strings: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for s in strings:
        for m in _HOME.finditer(s):
            if m.group(1):
                names.add(m.group(1))
        names.update(m.group(1) for m in _WIN_HOME.finditer(s))
    with contextlib.suppress(KeyError, OSError):  # no passwd entry (containers)
        names.add(getpass.getuser())
    return {n for n in names if len(n) >= 3 and n.lower() not in _COMMON_NAMES}


def _strings(value: JSONValue) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _basename(m: re.Match[str]) -> str:
    path = m.group().rstrip("/\\")
    name = re.split(r"[/\\]", path)[-1]
    return f"…/{name}" if name else m.group()


def make_redactor(*sources: JSONValue, enabled: bool = True) -> Redactor:
    """A function that redacts every string in a JSON-like value; user names are learnt from
    the home paths in ``sources`` and from the current user. Identity when not ``enabled``."""
    if not enabled:
        return lambda value: value
    names = _names(s for source in sources for s in _strings(source))
    word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b") if names else None
    home = str(Path.home()).rstrip("/\\")
    own_home = re.compile(re.escape(home) + r"(?![^/\\\s'\"])") if home else None

    def text(s: str) -> str:
        if own_home is not None:
            s = own_home.sub("~", s)
        s = _HOME.sub("~", s)
        s = _WIN_HOME.sub("~", s)
        s = _ABS.sub(_basename, s)
        s = _WIN_ABS.sub(_basename, s)
        return word.sub("USER", s) if word else s

    def walk(value: JSONValue, key: str = "") -> JSONValue:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, dict):
            if key.lower() in _ENV_KEYS:
                return {k: walk(v) for k, v in value.items() if k in ENV_WHITELIST}
            return {k: walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk
