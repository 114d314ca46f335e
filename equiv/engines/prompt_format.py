"""A prompt as the token ids a model in process takes: a text as it is, a chat through the model's
own Jinja template (``tokenizer.chat_template``) or else llama.cpp's built-in one for its
architecture (`equiv.engines.chat`), with exactly one BOS where the vocabulary asks for one."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, cast

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from equiv.engines.chat import BUILTIN_TEMPLATES, apply_builtin_template
from equiv.errors import ModelError
from equiv.prompts import Prompt

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage

__all__ = ["PromptFormat"]


class PromptFormat:
    """How the model ``llm`` (loaded from ``model_path``) takes prompts."""

    def __init__(self, llm: llama_cpp.Llama, model_path: str) -> None:
        self.llm, self.model_path = llm, model_path
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        template: str | None = llm.metadata.get("tokenizer.chat_template")
        arch = llm.metadata.get("general.architecture", "")
        self.template = template
        self.builtin_template = None if template else BUILTIN_TEMPLATES.get(arch)
        self.formatter: Jinja2ChatFormatter | None = None
        if template:
            specials = llm._model
            self.formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=specials.token_get_text(llm.token_eos()),
                bos_token=specials.token_get_text(llm.token_bos()),
            )

    @property
    def template_id(self) -> str:
        """The chat template as the fingerprint records it: a hash of the model's own, or the
        name of llama.cpp's built-in one."""
        if self.template is None:
            return f"builtin:{self.builtin_template}"
        return hashlib.sha256(self.template.encode()).hexdigest()[:16]

    def tokens(self, prompt: Prompt) -> list[int]:
        llm = self.llm
        if prompt.messages is None:
            assert prompt.text is not None
            return list(llm.tokenize(prompt.text.encode("utf-8"), add_bos=True))
        if self.formatter is not None:
            # The roles are system, user and assistant (equiv.prompts checks them).
            messages = [{"role": r, "content": c} for r, c in prompt.messages]
            rendered = self.formatter(
                messages=cast("list[ChatCompletionRequestMessage]", messages)
            ).prompt
        elif self.builtin_template is not None:
            rendered = apply_builtin_template(self.builtin_template, prompt.messages)
        else:
            raise ModelError(
                f"prompt {prompt.key!r} is a chat but {self.model_path!r} has no chat "
                "template (tokenizer.chat_template) and llama.cpp has no built-in one for its "
                "architecture; give the prompt as 'text' instead"
            )
        ids = list(llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True))
        # Jinja templates usually write the BOS text themselves, llama.cpp's built-in ones never:
        # either way the model gets exactly one BOS when its vocabulary asks for one.
        bos = llm.token_bos()
        if self.add_bos and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids
