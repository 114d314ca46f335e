from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from equiv.errors import ModelError, VocabMismatchError
from equiv.models.gguf import GGUFInfo, read_gguf_info, read_token_texts
from equiv.models.vocab_compat import (
    SPEC_VOCAB_CHECK_START_TOKEN_ID,
    SPEC_VOCAB_MAX_SIZE_DIFFERENCE,
    VocabReport,
    check_vocab_compat,
    require_vocab_compat,
)

MakeGGUF = Callable[..., Path]  # the conftest fixture: make_gguf(filename, **build_gguf kwargs)
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<mask>"]
TENSOR_BYTES = 4 * 8 * 4  # the one F32 tensor conftest writes


def _vocab(n: int = 40, *, prefix: str = "tok") -> list[str]:
    """conftest's default vocabulary when called with no arguments."""
    return [*SPECIALS, *(f"{prefix}{i}" for i in range(5, n))]


# --------------------------------------------------------------------------------- reading


def test_info_fields(make_gguf: MakeGGUF) -> None:
    path = make_gguf(
        extra_kv={"tokenizer.chat_template": "{{ messages }}", "tokenizer.ggml.pre": "default"}
    )
    info = read_gguf_info(path)
    assert info.path == str(path)
    assert info.size_bytes == path.stat().st_size
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.architecture == "llama"
    assert info.name == "tiny test model"
    assert (info.file_type, info.quant) == (15, "Q4_K_M")
    assert (info.vocab_model, info.vocab_pre, info.vocab_size) == ("llama", "default", 40)
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (1, 2, True, False)
    assert info.context_length == 2048
    assert info.nextn_predict_layers is None
    assert info.chat_template == "{{ messages }}"


def test_absent_keys_read_as_none(make_gguf: MakeGGUF) -> None:
    path = make_gguf(
        name=None, file_type=None, context_length=None, bos=None, eos=None, add_bos=None
    )
    info = read_gguf_info(path, with_sha256=False)
    assert info.sha256 is None
    assert (info.name, info.file_type, info.quant, info.context_length) == (None,) * 4
    assert (info.bos_id, info.eos_id, info.add_bos, info.chat_template) == (None,) * 4


@pytest.mark.parametrize(
    ("file_type", "quant"), [(0, "F32"), (1, "F16"), (7, "Q8_0"), (1024, None)]
)
def test_quant_names(make_gguf: MakeGGUF, file_type: int, quant: str | None) -> None:
    assert read_gguf_info(make_gguf(file_type=file_type)).quant == quant


def test_info_is_read_once_per_file_version(make_gguf: MakeGGUF) -> None:
    path = make_gguf(name="first")
    assert read_gguf_info(path) is read_gguf_info(path)  # the same file: not scanned again
    make_gguf(name="second, rewritten in place")
    assert read_gguf_info(path).name == "second, rewritten in place"


def test_info_round_trips_through_json(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf(extra_kv={"llama.nextn_predict_layers": 1}))
    assert GGUFInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_sha256_is_recomputed_when_the_file_changes(make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    first = read_gguf_info(path).sha256
    make_gguf(name="another name")  # same path, new content
    second = read_gguf_info(path).sha256
    assert first != second
    assert second == hashlib.sha256(path.read_bytes()).hexdigest()


def test_token_texts(make_gguf: MakeGGUF) -> None:
    vocab = [*SPECIALS, "▁hello", "привет", "\n", "<0x0A>"]
    assert read_token_texts(make_gguf(vocab=vocab)) == vocab


# ---------------------------------------------------------------------------------- errors


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    with pytest.raises(ModelError, match=r"does not exist; pass the path of a \.gguf file") as exc:
        read_gguf_info(path)
    assert str(path) in str(exc.value)


def test_directory(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    make_gguf("inside.gguf")
    with pytest.raises(ModelError, match="is a directory") as exc:
        read_gguf_info(tmp_path)
    assert "inside.gguf" in str(exc.value)  # names what it could have meant


def test_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "README.txt"
    path.write_text("hello world\n")
    with pytest.raises(ModelError, match="not a GGUF file") as exc:
        read_gguf_info(path)
    assert "b'hell'" in str(exc.value)
    assert str(path) in str(exc.value)


def test_file_shorter_than_magic(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GG")
    with pytest.raises(ModelError, match="has 2 bytes"):
        read_gguf_info(path)


@pytest.mark.parametrize("keep", [6, 20, 60, 200, -1])
def test_truncated_in_header(make_gguf: MakeGGUF, keep: int) -> None:
    path = make_gguf()
    data = path.read_bytes()
    header_end = len(data) - TENSOR_BYTES
    keep = header_end - 1 if keep == -1 else keep
    assert keep < header_end
    path.write_bytes(data[:keep])
    with pytest.raises(ModelError, match="truncated or corrupt") as exc:
        read_gguf_info(path)
    assert f"file size {keep:,} bytes" in str(exc.value)


def test_truncated_in_tensor_data(make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    data = path.read_bytes()
    path.write_bytes(data[:-16])
    with pytest.raises(ModelError, match="truncated or corrupt") as exc:
        read_gguf_info(path)
    assert "token_embd.weight" in str(exc.value)
    assert f"ends at byte {len(data):,}" in str(exc.value)
    with pytest.raises(ModelError, match="truncated"):
        read_token_texts(path)


def test_unsupported_version(make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    data = bytearray(path.read_bytes())
    data[4:8] = (7).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="GGUF version 7"):
        read_gguf_info(path)


def test_no_tokenizer(make_gguf: MakeGGUF) -> None:
    path = make_gguf(vocab=None, model=None, bos=None, eos=None, add_bos=None, add_eos=None)
    with pytest.raises(ModelError, match="has no tokenizer") as exc:
        read_gguf_info(path)
    assert "tokenizer.ggml.tokens" in str(exc.value)
    with pytest.raises(ModelError, match="has no tokenizer"):
        read_token_texts(path)


def test_key_of_wrong_type(make_gguf: MakeGGUF) -> None:
    path = make_gguf(bos=None, extra_kv={"tokenizer.ggml.bos_token_id": "one"})
    with pytest.raises(ModelError, match=r"tokenizer.ggml.bos_token_id is 'one', expected int"):
        read_gguf_info(path)


# --------------------------------------------------------------------------- compatibility


def test_compatible_pair(make_gguf: MakeGGUF) -> None:
    report = check_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf", name="draft"))
    assert report.compatible
    assert report.reasons == ()
    assert report.notes == ()
    assert report.draft.name == "draft"
    assert VocabReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_same_file_is_trivially_compatible(make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    report = check_vocab_compat(path, path.parent / "." / path.name)
    assert report.compatible
    assert report.target is report.draft
    assert "same file" in report.notes[0]


def test_size_difference_over_limit(make_gguf: MakeGGUF) -> None:
    assert SPEC_VOCAB_MAX_SIZE_DIFFERENCE == 128
    target = make_gguf("t.gguf", vocab=_vocab(40))
    draft = make_gguf("d.gguf", vocab=_vocab(40 + 129))
    report = check_vocab_compat(target, draft)
    assert not report.compatible
    assert report.reasons == (
        "vocab sizes differ by 129 (target 40, draft 169); llama.cpp allows at most 128",
    )


def test_size_difference_within_limit(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", vocab=_vocab(168))
    draft = make_gguf("d.gguf", vocab=_vocab(40))
    report = check_vocab_compat(target, draft)
    assert report.compatible, report.reasons
    assert "differ by 128" in report.notes[0]
    assert "only in the target" in report.notes[0]


def test_vocab_type_differs(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", model="llama")
    draft = make_gguf("d.gguf", model="gpt2", add_bos=True, bos=1, eos=2)
    report = check_vocab_compat(target, draft)
    assert not report.compatible
    assert report.reasons == ("vocab types differ: target 'llama' (SPM), draft 'gpt2' (BPE)",)


def test_bpe_model_names_of_one_type_are_compatible(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", model="gpt2")
    draft = make_gguf("d.gguf", model="whitespace")  # llama.cpp maps both to BPE
    assert check_vocab_compat(target, draft).compatible


def test_bos_differs(make_gguf: MakeGGUF) -> None:
    report = check_vocab_compat(make_gguf("t.gguf", bos=1), make_gguf("d.gguf", bos=3))
    assert not report.compatible
    assert report.reasons == ("BOS ids differ: target 1, draft 3 (both add BOS)",)


def test_bos_id_differs_but_not_added(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", bos=1, add_bos=False)
    draft = make_gguf("d.gguf", bos=3, add_bos=False)
    report = check_vocab_compat(target, draft)
    assert report.compatible  # current llama.cpp compares the id only when BOS is added
    assert report.notes[0].startswith("BOS ids differ (target 1, draft 3) but neither model adds")


def test_eos_differs(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", eos=2, add_eos=True)
    draft = make_gguf("d.gguf", eos=4, add_eos=True)
    report = check_vocab_compat(target, draft)
    assert not report.compatible
    assert report.reasons == ("EOS ids differ: target 2, draft 4 (both add EOS)",)


def test_add_bos_differs(make_gguf: MakeGGUF) -> None:
    report = check_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf", add_bos=False))
    assert not report.compatible
    assert report.reasons == ("add_bos differs: target True, draft False",)


def test_add_eos_differs(make_gguf: MakeGGUF) -> None:
    report = check_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf", add_eos=True))
    assert report.reasons == ("add_eos differs: target False, draft True",)


def test_llama_cpp_defaults_fill_silent_keys(make_gguf: MakeGGUF) -> None:
    # an SPM ("llama") vocab adds BOS id 1 by default, so a file that is silent matches one
    # that says so explicitly
    target = make_gguf("t.gguf", bos=1, add_bos=True)
    draft = make_gguf("d.gguf", bos=None, add_bos=None)
    assert check_vocab_compat(target, draft).compatible
    # a gpt2 (BPE) vocab with a llama3 pre-tokenizer adds BOS by default; plain gpt2 does not
    llama3 = make_gguf(
        "l3.gguf", model="gpt2", add_bos=None, extra_kv={"tokenizer.ggml.pre": "llama3"}
    )
    plain = make_gguf(
        "gpt2.gguf", model="gpt2", add_bos=None, extra_kv={"tokenizer.ggml.pre": "gpt-2"}
    )
    assert check_vocab_compat(llama3, plain).reasons == (
        "add_bos differs: target True, draft False",
    )


def test_token_text_differs(make_gguf: MakeGGUF) -> None:
    assert SPEC_VOCAB_CHECK_START_TOKEN_ID == 5
    vocab = _vocab()
    vocab[23] = "foo"
    draft_vocab = _vocab()
    draft_vocab[23], draft_vocab[30] = "bar", "baz"
    report = check_vocab_compat(
        make_gguf("t.gguf", vocab=vocab), make_gguf("d.gguf", vocab=draft_vocab)
    )
    assert not report.compatible
    assert report.reasons == ("token 23 differs: target 'foo', draft 'bar' (first mismatch)",)


def test_token_text_at_id_5_is_checked(make_gguf: MakeGGUF) -> None:
    draft_vocab = _vocab()
    draft_vocab[5] = "other"
    report = check_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf", vocab=draft_vocab))
    assert report.reasons == ("token 5 differs: target 'tok5', draft 'other' (first mismatch)",)


def test_token_text_below_id_5_is_not_checked(make_gguf: MakeGGUF) -> None:
    draft_vocab = ["[UNK]", "[BOS]", "[EOS]", "[PAD]", "[MASK]", *_vocab()[5:]]
    report = check_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf", vocab=draft_vocab))
    assert report.compatible, report.reasons


def test_all_reasons_are_listed(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", vocab=_vocab(300), bos=1)
    draft = make_gguf("d.gguf", vocab=_vocab(40, prefix="x"), bos=3, add_eos=True)
    reasons = check_vocab_compat(target, draft).reasons
    assert [r.split(" ")[0] for r in reasons] == ["BOS", "add_eos", "vocab", "token"]
    assert reasons[2] == (
        "vocab sizes differ by 260 (target 300, draft 40); llama.cpp allows at most 128"
    )


def test_nextn_note(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf", extra_kv={"llama.nextn_predict_layers": 1})
    report = check_vocab_compat(target, make_gguf("d.gguf"))
    assert report.compatible
    assert report.target.nextn_predict_layers == 1
    assert report.notes == (
        "target has 1 multi-token-prediction layers; llama.cpp's built-in MTP speculative path "
        "is the alternative to a separate draft",
    )


def test_require_vocab_compat_raises_with_reasons(make_gguf: MakeGGUF) -> None:
    target = make_gguf("t.gguf")
    draft = make_gguf("d.gguf", bos=3, add_bos=True, vocab=_vocab(40 + 200))
    with pytest.raises(VocabMismatchError) as exc:
        require_vocab_compat(target, draft)
    message = str(exc.value)
    assert "BOS ids differ: target 1, draft 3" in message
    assert "vocab sizes differ by 200 (target 40, draft 240)" in message
    assert str(draft) in message
    assert str(target) in message
    assert "same model family, converted with the same tokenizer" in message
    assert exc.value.exit_code == 4


def test_require_vocab_compat_returns_report(make_gguf: MakeGGUF) -> None:
    report = require_vocab_compat(make_gguf("t.gguf"), make_gguf("d.gguf"), with_sha256=False)
    assert report.compatible
    assert report.target.sha256 is None


def test_compat_on_a_broken_draft_raises_model_error(make_gguf: MakeGGUF, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        check_vocab_compat(make_gguf("t.gguf"), tmp_path / "missing.gguf")
