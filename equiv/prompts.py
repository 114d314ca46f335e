"""Prompt suites: JSONL files, one prompt per line (format in prompts/README.md).

A suite is named after its file stem (``code`` for ``prompts/code.jsonl``); a prompt's key is
``suite/id``. This module knows nothing about models: a prompt is text or chat messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from equiv.errors import PromptError
from equiv.json_types import JSONDict, JSONObject, JSONValue

__all__ = ["DEFAULT_MAX_TOKENS", "Prompt", "builtin_suite_dir", "load_suites", "resolve_suite"]

DEFAULT_MAX_TOKENS = 48
_ID = re.compile(r"^[a-z0-9_]{1,32}$")
_ROLES = {"system", "user", "assistant"}


@dataclass(frozen=True)
class Prompt:
    """One prompt: raw completion ``text`` or chat ``messages`` (rendered by the engine)."""

    suite: str
    id: str
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    tags: tuple[str, ...] = field(default=())
    # The grader spec as canonical JSON (prompts/README.md, "Graded prompts"), or None; kept as text
    # so a prompt stays hashable. `equiv.verdicts.quality.graders` parses it when grading, so a bad
    # spec fails each sample with its reason instead of the whole run.
    grader: str | None = None

    @property
    def grader_spec(self) -> JSONValue:
        """The grader spec as JSON data, or None for an ungraded prompt."""
        spec: JSONValue = None if self.grader is None else json.loads(self.grader)
        return spec

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.id}"

    @property
    def display(self) -> str:
        """The prompt as a person reads it."""
        if self.text is not None:
            return self.text
        assert self.messages is not None
        return "\n".join(f"[{role}] {content}" for role, content in self.messages)

    @property
    def content_hash(self) -> str:
        """sha256 of what the engines see of this prompt (its text or messages, and its
        max_tokens): a results file records it, and ``--resume`` refuses a prompt that changed."""
        content = {
            "text": self.text,
            "messages": None if self.messages is None else [list(m) for m in self.messages],
            "max_tokens": self.max_tokens,
        }
        blob = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    def to_dict(self) -> JSONDict:
        data: JSONDict = {"suite": self.suite, "id": self.id, "max_tokens": self.max_tokens}
        if self.text is not None:
            data["text"] = self.text
        if self.messages is not None:
            data["messages"] = [{"role": r, "content": c} for r, c in self.messages]
        data["tags"] = list(self.tags)
        if self.grader is not None:
            data["grader"] = self.grader_spec
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, *, suite: str | None = None) -> Prompt:
        where = f"prompt {data.get('id')!r} of suite {suite or data.get('suite')!r}"
        pid = data.get("id")
        if not isinstance(pid, str) or not _ID.match(pid):
            raise PromptError(f"{where}: id must match [a-z0-9_]{{1,32}}, got {pid!r}")
        text, messages = data.get("text"), data.get("messages")
        if (text is None) == (messages is None):
            raise PromptError(f"{where}: give exactly one of 'text' or 'messages'")
        if text is not None and (not isinstance(text, str) or not text):
            raise PromptError(f"{where}: 'text' must be a non-empty string")
        msgs: tuple[tuple[str, str], ...] | None = None
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                raise PromptError(f"{where}: 'messages' must be a non-empty list")
            parsed = []
            roles = ", ".join(sorted(_ROLES))
            for i, m in enumerate(messages, 1):
                if not isinstance(m, dict):
                    raise PromptError(f"{where}: message {i} must be an object, got {m!r}")
                if "role" not in m:
                    raise PromptError(f"{where}: message {i} has no role; give one of {roles}")
                if m["role"] not in _ROLES:
                    raise PromptError(
                        f"{where}: message {i} has role {m['role']!r}, which is not one of {roles}"
                    )
                if not isinstance(m.get("content"), str):
                    raise PromptError(f"{where}: message {i} content must be a string, got {m!r}")
                parsed.append((str(m["role"]), str(m["content"])))
            msgs = tuple(parsed)
        max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise PromptError(f"{where}: max_tokens must be a positive integer, got {max_tokens!r}")
        tags = data.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise PromptError(f"{where}: tags must be a list of strings, got {tags!r}")
        return cls(
            suite=suite or str(data.get("suite") or ""),
            id=pid,
            text=text,
            messages=msgs,
            max_tokens=max_tokens,
            tags=tuple(tags),
            grader=None
            if data.get("grader") is None
            else json.dumps(data["grader"], sort_keys=True, ensure_ascii=False),
        )


def builtin_suite_dir() -> Path:
    """The curated suites: ``prompts/`` of the source tree, shipped as ``equiv/_prompts``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_prompts", here.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise PromptError(f"no built-in prompt suites found beside {here}; pass --suite PATH")


def resolve_suite(name: str) -> Path:
    """A suite name (``code``) or a path to a ``.jsonl`` file."""
    path = Path(name)
    if path.suffix == ".jsonl" or path.exists():
        if not path.is_file():
            raise PromptError(f"suite file {name!r} does not exist; pass a .jsonl file")
        return path
    builtin = builtin_suite_dir()
    candidate = builtin / f"{name}.jsonl"
    if not candidate.is_file():
        known = ", ".join(sorted(p.stem for p in builtin.glob("*.jsonl")))
        raise PromptError(f"unknown suite {name!r}; built-in suites are: {known}")
    return candidate


def _load_file(path: Path) -> list[Prompt]:
    suite = path.stem
    prompts: list[Prompt] = []
    seen: set[str] = set()
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise PromptError(
            f"suite {str(path)!r} is UTF-16 (it starts with a UTF-16 byte order mark); "
            "re-save it as UTF-8"
        )
    try:
        # A UTF-8 byte order mark (as some editors write) is read and dropped.
        # Lines end at "\n" only: a JSON string may hold U+2028 or U+0085 as they are.
        lines = raw.decode("utf-8-sig").split("\n")
    except UnicodeDecodeError as exc:
        at = raw[: exc.start].count(b"\n") + 1
        raise PromptError(
            f"{path}:{at}: not UTF-8 (byte 0x{raw[exc.start]:02x}); re-save the suite as UTF-8"
        ) from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise PromptError(f"{path}:{lineno}: each line must be a JSON object")
        prompt = Prompt.from_dict(data, suite=suite)
        if prompt.id in seen:
            raise PromptError(f"{path}:{lineno}: duplicate prompt id {prompt.id!r}")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise PromptError(f"suite {str(path)!r} holds no prompts")
    return prompts


def load_suites(names: Iterable[str] = ()) -> list[Prompt]:
    """Load suites by name or path; no names means every built-in suite, in file-name order."""
    names = list(names)
    if not names:
        paths = sorted(builtin_suite_dir().glob("*.jsonl"))
    else:
        paths = [resolve_suite(n) for n in names]
    prompts: list[Prompt] = []
    for path in paths:
        prompts.extend(_load_file(path))
    return prompts
