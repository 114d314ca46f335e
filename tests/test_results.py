import json

import pytest

from equiv.errors import ConfigError
from equiv.records import DraftStep, Generation, ResultsFile, TokenAlternatives


def _generation() -> Generation:
    return Generation(
        path="speculative",
        prompt_tokens=(2, 5),
        tokens=(7, 8, 9),
        pieces=("a", "b", "c"),
        text="abc",
        stop_reason="length",
        alternatives=(TokenAlternatives((7, 1), (2.0, 1.5)),) * 3,
        t_prompt_s=0.1,
        t_decode_s=0.4,
        draft_steps=(DraftStep(1, 4, 2), DraftStep(3, 4, 0, truncated=True)),
    )


def test_generation_round_trips_and_counts_drafts():
    gen = _generation()
    again = Generation.from_dict(json.loads(json.dumps(gen.to_dict())))
    assert again == gen
    assert gen.acceptance_rate == 0.5  # the truncated round is not counted
    assert gen.tokens_per_s == pytest.approx(2 / 0.4)


def test_alternatives_from_row_are_sorted_with_ties_by_id():
    import numpy as np

    row = np.array([0.5, 3.0, 3.0, -1.0, 2.0], dtype=np.float32)
    alt = TokenAlternatives.from_row(row, 3)
    assert alt.ids == (1, 2, 4)
    assert alt.margin == 0.0


def test_results_file_appends_and_survives_a_torn_line(tmp_path):
    results = ResultsFile(tmp_path / "r.jsonl")
    results.write_header({"config": {"a": 1}})
    results.append_result({"key": "s/a::temp0"})
    with results.path.open("a") as fh:
        fh.write('{"kind": "result", "key": "s/b::te')  # a crash mid-write
    results.append_result({"key": "s/c::temp0"})
    assert results.done_keys() == {"s/a::temp0", "s/c::temp0"}
    assert results.header()["config"] == {"a": 1}


def test_a_file_without_header_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"kind": "result", "key": "x"}\n')
    with pytest.raises(ConfigError, match="no header line"):
        ResultsFile(path).header()
