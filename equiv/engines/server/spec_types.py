"""llama-server's speculative types (``--spec-type``): which a build has, which of them read a
draft file, and the ones the speculative server is started with.

In the llama.cpp that llama-cpp-python 0.3.36 vendors the default is ``none``: ``-md`` alone
loads the draft and then builds no speculative implementation (``common/arg.cpp`` infers a type
only from a draft GGUF with an MTP head or a sidecar; ``server-context.cpp`` drops the draft
context when none was built), and ``/slots`` says ``"speculative": false``. Builds without
``--spec-type`` (0.3.17 and before) speculate with ``-md`` alone.
"""

from __future__ import annotations

import re

from equiv.errors import ConfigError

__all__ = [
    "DRAFT_SIMPLE",
    "INFERRED",
    "build_types",
    "chosen_types",
    "reads_draft_file",
]

DRAFT_SIMPLE = "draft-simple"
#: Pass no ``--spec-type``: the server chooses, as a command line without one does.
INFERRED = "inferred"
#: Types whose drafter is the file given with ``--model-draft`` (a model, or a sidecar trained
#: for the target); ``draft-mtp`` drafts with the target's own MTP head, n-gram types with the
#: context itself.
_DRAFT_FILE = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})


def build_types(help_text: str) -> tuple[str, ...]:
    """The speculative types a build lists in ``--help`` (``--spec-type a,b,c`` or
    ``[a|b|c]``); empty for a build without ``--spec-type``."""
    found = re.search(r"--spec-type\s+\[?([a-z0-9][a-z0-9,|-]*)", help_text)
    return tuple(re.split(r"[,|]", found.group(1))) if found else ()


def chosen_types(requested: str | None, available: tuple[str, ...]) -> tuple[str, ...] | None:
    """The ``--spec-type`` value of the speculative server: ``requested`` (comma-separated,
    checked against the build's ``available`` types), ``draft-simple`` when nothing is requested
    and the build has types; None for no ``--spec-type`` at all (`INFERRED`, or an old build)."""
    if requested is None or requested == "":
        return (DRAFT_SIMPLE,) if available else None
    if requested == INFERRED:
        return None
    names = tuple(n.strip() for n in requested.split(",") if n.strip())
    if not available:
        raise ConfigError(
            f"--server-spec-type {requested!r}: this llama-server build has no --spec-type (it "
            "speculates with -md alone); leave the option out, or use a newer build"
        )
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise ConfigError(
            f"--server-spec-type {requested!r}: {', '.join(unknown) or 'no type'} is not a "
            f"speculative type of this llama-server; it has {', '.join(available)} "
            f"(or give {INFERRED!r} to pass none)"
        )
    if "none" in names:
        raise ConfigError(
            f"--server-spec-type {requested!r}: 'none' turns speculation off, so the speculative "
            "path would not speculate; give the type your deployment uses, e.g. draft-simple"
        )
    return names


def reads_draft_file(types: tuple[str, ...] | None) -> bool:
    """Whether the speculative server needs ``--model-draft`` for these types (None: no
    ``--spec-type``, so a draft given is what the user wrote, and it is passed)."""
    return types is None or any(t in _DRAFT_FILE for t in types)
