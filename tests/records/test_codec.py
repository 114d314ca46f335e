"""The records' one codec (`equiv.records.codec`): every record it writes reads back equal
through JSON, under hypothesis, and a damaged value is named by its field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from equiv.engines.base import RescoreCost
from equiv.records.codec import OMIT, ROUND, decode, encode
from equiv.records.fields import FieldError
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.sampling.pooled import Design, PooledAnalysis
from equiv.verdicts.sampling.pooled_bounds import Bound, Effect
from equiv.verdicts.sampling.run_batched import RunBatched
from equiv.verdicts.stats import TestResult
from equiv.verdicts.stats.sequential import Stopping

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=20)
counts = st.integers(min_value=0, max_value=10**9)
maybe = st.none

result = st.builds(
    TestResult,
    name=text,
    statistic=finite,
    p_value=finite,
    alpha=finite,
    n=counts,
    df=maybe() | counts,
    power=maybe() | finite,
    effect=maybe() | finite,
    detail=text,
)
scored = st.builds(ScoredTest.of, result, finite)
bound = st.builds(Bound, st.sampled_from(Effect), finite, finite, finite, finite)
stopping = st.builds(Stopping, counts, counts, counts, counts, finite, st.booleans())
rounded6 = finite.map(lambda x: round(x, 6))
fidelity = st.builds(
    Fidelity, counts, rounded6, rounded6, rounded6, rounded6, rounded6, rounded6, counts, counts
)
batched = st.builds(
    RunBatched, tests=st.tuples() | st.tuples(scored), error=maybe() | text, samples=counts
)
pooled = st.builds(
    PooledAnalysis,
    alpha=finite,
    prompts=counts,
    samples=counts,
    tokens=counts,
    seeds=counts,
    tests=st.lists(scored, max_size=3).map(tuple),
    bounds=st.lists(bound, max_size=3).map(tuple),
    left_out=st.lists(text, max_size=3).map(tuple),
    carriers=st.lists(st.tuples(text, finite), max_size=3).map(tuple),
    design=st.sampled_from(Design),
    instrument=st.lists(scored, max_size=2).map(tuple),
)

cost = st.builds(RescoreCost, counts, counts, counts, counts, rounded6, rounded6, counts, counts)

RECORDS = {
    "result": result,
    "cost": cost,
    "test": scored,
    "bound": bound,
    "stopping": stopping,
    "fidelity": fidelity,
    "batched": batched,
    "pooled": pooled,
}


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_every_record_reads_back_equal_through_json(kind):
    @given(RECORDS[kind])
    def round_trip(record):
        written = json.loads(json.dumps(record.to_dict()))
        assert type(record).from_dict(written) == record
        assert encode(decode(type(record), written)) == written

    round_trip()


@dataclass(frozen=True)
class _Options:
    label: Effect
    score: float = field(default=0.0, metadata={ROUND: 2})
    note: str | None = field(default=None, metadata={OMIT: None})
    pair: tuple[int, str] = (0, "")


def test_rounding_and_omission_are_field_options():
    assert encode(_Options(Effect.SUPPORT, 0.12345)) == {
        "label": "support",
        "score": 0.12,
        "pair": [0, ""],
    }
    assert encode(_Options(Effect.SUPPORT, note="n"))["note"] == "n"
    # a key a file written before the field existed does not have: the default
    assert decode(_Options, {"label": "support"}) == _Options(Effect.SUPPORT)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "pooled.alpha: missing"),
        ({"alpha": "0.1"}, "pooled.alpha: expected a number, found str '0.1'"),
        ({"alpha": True}, "pooled.alpha: expected a number, found a boolean"),
        ({"alpha": 0.1, "prompts": 1.5}, "pooled.prompts: expected an integer, found float 1.5"),
    ],
)
def test_a_damaged_value_is_named_by_its_field(data, message):
    with pytest.raises(FieldError, match=message.replace(".", r"\.").replace("'", "'")):
        PooledAnalysis.from_dict(data)


def test_nested_errors_name_the_path_into_the_record():
    good = PooledAnalysis(0.01, 1, 2, 3, 2, bounds=(Bound(Effect.SUPPORT, 0, 0, 0, 0.1),))
    data = good.to_dict()
    data["bounds"][0]["effect"] = "colour"
    with pytest.raises(FieldError, match=r"pooled\.bounds\[0\]\.effect: str 'colour' is not one"):
        PooledAnalysis.from_dict(data)
    data = good.to_dict()
    data["carriers"] = [["a", 1.0, 2]]
    with pytest.raises(FieldError, match=r"pooled\.carriers\[0\]: expected 2 items, found 3"):
        PooledAnalysis.from_dict(data)
    data["carriers"] = {"a": 1}
    with pytest.raises(FieldError, match=r"pooled\.carriers: expected an array, found an object"):
        PooledAnalysis.from_dict(data)


def test_records_written_before_a_field_existed_read_with_its_default():
    older = PooledAnalysis(0.01, 1, 2, 3, 2).to_dict()
    for key in ("design", "instrument", "left_out", "carriers"):
        del older[key]
    assert PooledAnalysis.from_dict(older).design is Design.VS_PLACEBO
    assert RunBatched.from_dict({"error": "timed out"}) == RunBatched(error="timed out")
    with pytest.raises(FieldError, match=r"stopping\.look: missing"):
        Stopping.from_dict({"looks": 4})
