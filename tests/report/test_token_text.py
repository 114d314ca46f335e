"""Reasons and the report name tokens by their text (escaped) beside the ID, also tokens that
no path emitted (the candidates of a divergence's top-k)."""

import numpy as np

from equiv.records import Generation, ResultRecord, TokenAlternatives
from equiv.report.prompt_view import prompt_view, token_texts
from equiv.verdicts.temp0.classify import classify_temp0
from equiv.verdicts.temp0.compare import compare, token_namer

VOCAB = {0: "<s>", 1: " if", 2: "\n", 3: "'quote'", 4: "<script>", 5: " else", 6: "x", 7: "y"}


def _gen(path, tokens, rows):
    return Generation(
        path=path,
        prompt_tokens=(1,),
        tokens=tuple(tokens),
        pieces=tuple(VOCAB[t] for t in tokens),
        text="".join(VOCAB[t] for t in tokens),
        stop_reason="length",
        alternatives=tuple(TokenAlternatives.from_row(r, 4) for r in rows),
        t_prompt_s=0.0,
        t_decode_s=0.0,
        logits=rows.astype(np.float32),
    )


def _pair():
    """The speculative path emits 2 ('\\n') at token 1 although its own row prefers 4."""
    base = np.zeros((3, 8), dtype=np.float32)
    base[:, 1] = 5.0
    base[1, 4], base[1, 2] = 4.0, 3.0
    spec = base.copy()
    spec[1, 1], spec[1, 4] = 4.0, 5.0  # its own favourite is 4 ('<script>'), never emitted
    return _gen("baseline", [1, 1, 1], base), _gen("speculative", [1, 2, 1], spec)


def test_the_divergence_records_the_text_of_every_top_k_candidate():
    b, s = _pair()
    div = compare(b, s, token_text=VOCAB.__getitem__).divergence
    assert div is not None
    texts = dict(div.top_texts)
    assert texts[4] == "<script>"  # emitted by neither path
    assert set(texts) == set(b.alternatives[1].ids) | set(s.alternatives[1].ids)
    assert compare(b, s).divergence.top_texts == ()  # no engine, no texts
    name = token_namer(div)
    assert name(2) == "'\\n' (id 2)"  # a newline shows as an escape
    assert name(4) == "'<script>' (id 4)"
    assert name(99) == "id 99"


def test_a_reason_names_both_tokens_by_text_and_id():
    b, s = _pair()
    comparison = compare(b, s, token_text=VOCAB.__getitem__)
    verdict = classify_temp0(comparison, b, s)
    assert verdict.label.value == "sampler-bug"
    assert "emitted '\\n' (id 2) although its own logits prefer '<script>' (id 4)" in (
        verdict.reason
    )


def test_the_report_shows_the_text_of_a_never_emitted_candidate():
    b, s = _pair()
    comparison = compare(b, s, token_text=VOCAB.__getitem__)
    record = {
        "key": "s/p::temp0",
        "suite": "s",
        "prompt_id": "p",
        "mode": "temp0",
        "seed": None,
        "prompt": {"id": "p", "text": "x"},
        "baseline": b.to_dict(),
        "speculative": s.to_dict(),
        "comparison": comparison.to_dict(),
        "verdict": {"label": "sampler-bug", "reason": "r", "evidence": {}},
    }
    typed = ResultRecord.from_dict(record)
    view = prompt_view("p0", typed, token_texts([typed]))
    rows = {r.id: r.text for r in view.divergence.speculative_top}
    assert rows[4] == "<script>"
    assert None not in rows.values()
