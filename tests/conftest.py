"""Shared fixtures: tiny GGUF files built on the fly with `gguf.GGUFWriter`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np
import pytest

if TYPE_CHECKING:
    from equiv.records import ResultRecord

#: A small SentencePiece-style vocabulary: specials at 0-4, then plain pieces.
DEFAULT_VOCAB: tuple[str, ...] = (
    "<unk>",
    "<s>",
    "</s>",
    "<pad>",
    "<mask>",
    *(f"tok{i}" for i in range(5, 40)),
)

#: The tensor every built file carries, so it has real tensor data (4 x 8 F32 = 128 bytes).
TENSOR_NAME = "token_embd.weight"
TENSOR_BYTES = 4 * 8 * 4

MakeGGUF = Callable[..., Path]

_WRITERS: dict[type, Callable[[gguf.GGUFWriter, str, Any], None]] = {
    bool: gguf.GGUFWriter.add_bool,
    int: gguf.GGUFWriter.add_uint32,
    float: gguf.GGUFWriter.add_float32,
    str: gguf.GGUFWriter.add_string,
    list: gguf.GGUFWriter.add_array,
}


def build_gguf(
    path: Path,
    *,
    vocab: Sequence[str] | None = DEFAULT_VOCAB,
    model: str | None = "llama",
    bos: int | None = 1,
    eos: int | None = 2,
    add_bos: bool | None = True,
    add_eos: bool | None = False,
    arch: str = "llama",
    name: str | None = "tiny test model",
    file_type: int | None = int(gguf.LlamaFileType.MOSTLY_Q4_K_M),
    context_length: int | None = 2048,
    extra_kv: Mapping[str, Any] | None = None,
    tensors: Sequence[str] = (),
) -> Path:
    """Write a tiny but complete GGUF file; a None argument leaves its key out; ``tensors``:
    names of more (tiny) tensors."""
    writer = gguf.GGUFWriter(path, arch)
    if name is not None:
        writer.add_name(name)
    if file_type is not None:
        writer.add_file_type(file_type)
    if context_length is not None:
        writer.add_context_length(context_length)
    if model is not None:
        writer.add_tokenizer_model(model)
    if vocab is not None:
        writer.add_token_list(list(vocab))
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if add_eos is not None:
        writer.add_add_eos_token(add_eos)
    for key, value in (extra_kv or {}).items():
        _WRITERS[type(value)](writer, key, value)
    writer.add_tensor(TENSOR_NAME, np.arange(32, dtype=np.float32).reshape(4, 8))
    for name in tensors:
        writer.add_tensor(name, np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def make_gguf(tmp_path: Path) -> MakeGGUF:
    """Factory: ``make_gguf("draft.gguf", vocab=..., bos=..., extra_kv={...})`` -> its path.

    Keyword arguments are those of `build_gguf`; the file lands in the test's tmp_path.
    """

    def make(filename: str = "model.gguf", **kwargs: Any) -> Path:
        return build_gguf(tmp_path / filename, **kwargs)

    return make


# -- the real default model pair (tests marked `model`) -------------------------------------------

#: Fixtures that load or build the real default pair: a test using any of them, directly or
#: through another fixture, is marked `model`, so ``pytest -m "not model"`` never loads a model.
MODEL_FIXTURES = frozenset({"model_pair", "temp0_config", "engines", "real_models"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def model_pair() -> Any:
    """The bundled Gemma 3 270M Q4_K_M target and its derived Q4_0 draft (built once, cached)."""
    from equiv.models.pair import resolve_pair

    return resolve_pair()


#: Other evaluation settings for the real-pair tests, to check that none depends on where this
#: CPU's near-ties fall: ``EQUIV_TEST_EVAL="n_threads=1,n_ubatch=7"`` changes the reduction
#: orders (and so which prompts diverge) without changing what the tests assert.
EVAL_SETTINGS = ("n_threads", "n_batch", "n_ubatch")


def _eval_settings() -> dict[str, int]:
    given = os.environ.get("EQUIV_TEST_EVAL", "").strip()
    settings = {}
    for part in filter(None, (p.strip() for p in given.split(","))):
        name, _, value = part.partition("=")
        if name not in EVAL_SETTINGS or not value.isdigit():
            raise pytest.UsageError(
                f"EQUIV_TEST_EVAL={given!r}: give NAME=N pairs, NAME one of {EVAL_SETTINGS}"
            )
        settings[name] = int(value)
    return settings


@pytest.fixture(scope="session")
def temp0_config(model_pair: Any) -> Any:
    from equiv.config import RunConfig

    return RunConfig(
        target=model_pair.target, draft=model_pair.draft, max_tokens=24, **_eval_settings()
    )


@pytest.fixture(scope="session")
def engines(temp0_config: Any) -> Any:
    """Baseline and speculative llama.cpp engines over the default pair, loaded once."""
    from equiv.engines.llamacpp import make_engine

    baseline = make_engine(temp0_config, speculative=False)
    speculative = make_engine(temp0_config, speculative=True)
    yield baseline, speculative
    baseline.close()
    speculative.close()


# -- a real divergence, found on this machine ------------------------------------------------------


class RealDivergences:
    """A temp-0 run of the real pair in process over prompts scanned until some diverged
    (`divergences.scan`): its results file and records. ``require()`` returns the diverged
    records, or skips the test where none diverged on this machine."""

    def __init__(self, path: Path, scanned: list[str]) -> None:
        from equiv.records import ResultsFile

        self.path = path
        self.scanned = scanned
        self.results = ResultsFile(path)
        self.records = self.results.results()

    def require(self) -> list[ResultRecord]:
        from divergences import require

        return require(self.records, self.scanned, "the real pair in process")


@pytest.fixture(scope="session")
def real_divergences(temp0_config: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real pair at temp 0 over `divergences.candidate_prompts`, one prompt at a time, until
    two diverged or the budget ran out."""
    from divergences import scan

    from equiv.engines.llamacpp import make_engine
    from equiv.run.plan import plan
    from equiv.run.runner import Runner

    path = tmp_path_factory.mktemp("divergences") / "results.jsonl"
    with Runner(temp0_config, make_engine, path) as runner:
        scanned, _ = scan(
            lambda batch, resume: runner.run(plan(batch, temp0_config), resume=resume),
            wanted=2,
            round_size=1,
        )
    found = RealDivergences(path, scanned)
    diverged = [
        f"{r.key} at token {r.comparison.common_prefix}"
        for r in found.records
        if not r.comparison.identical
    ]
    _SCANS.append(
        f"real pair in process ({temp0_config.n_threads} threads, n_ubatch "
        f"{temp0_config.n_ubatch}): {len(scanned)} prompts scanned, diverged: "
        f"{', '.join(diverged) or 'none'}"
    )
    return found


#: What the divergence scans found, said at the end of the session (where near-ties fell here).
_SCANS: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _SCANS:
        terminalreporter.write_line(f"divergence scan: {line}")
