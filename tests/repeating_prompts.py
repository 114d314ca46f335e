"""Prompts whose text repeats, for n-gram drafting: shared by
tests/engines/server/test_spec_types_server.py (llama-server's ``--spec-type ngram-*``) and
tests/engines/test_prompt_lookup.py (llama-cpp-python's prompt lookup in process)."""

from __future__ import annotations

from typing import Any

#: Text that repeats, so an n-gram lookup finds drafts in it; the small n-gram sizes make the
#: model's 16-24 tokens enough to draft from (ngram-mod's defaults need 24-token matches).
REPEATS: list[dict[str, Any]] = [
    {
        "id": "numbered",
        "text": "1. red apple\n2. green pear\n3. blue plum\n4. gold fig\n"
        "1. red apple\n2. green pear\n3. blue plum\n4. gold fig\n1. red apple\n2.",
        "max_tokens": 24,
    },
    {
        "id": "calls",
        "text": "print(add(1, 2))\nprint(add(3, 4))\nprint(add(5, 6))\nprint(add(7, 8))\nprint(",
        "max_tokens": 24,
    },
]
