"""The typed evidence of the verdict rules writes the keys results files hold, in their order,
and reads them back."""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equiv.records import ResultsFile
from equiv.records.comparison import Drift
from equiv.records.fields import FieldError
from equiv.records.kinds import parse_verdict
from equiv.records.verdict import Label, Verdict
from equiv.verdicts.sampling.analysis_record import PooledDrift, ScoredTest
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.temp0.divergence_rate import DivergenceRate
from equiv.verdicts.temp0.drift_bound import DriftBound, drift_bound
from equiv.verdicts.verdict_evidence import (
    BatchedFigures,
    PowerEvidence,
    RescoredGaps,
    RunEvidence,
    SamplingEvidence,
    Temp0Evidence,
    TestPower,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
Evidence = (
    Temp0Evidence | RescoredGaps | BatchedFigures | PowerEvidence | SamplingEvidence | RunEvidence
)

AT = Temp0Evidence(5, 11, 12, 0.25, 0.5)
HEAD = ["position", "baseline_token", "speculative_token", "margin_baseline", "margin_speculative"]


def test_temp0_evidence_writes_only_what_the_rule_reached() -> None:
    assert list(AT.to_dict()) == HEAD
    assert Temp0Evidence(5, 11, 12, 0.25, 0.5, own_argmax=3).to_dict()["own_argmax"] == 3
    assert Temp0Evidence(5, 11, 12, None, None, rescore_failed=True).to_dict() == {
        **dict.fromkeys(HEAD[3:]),
        "position": 5,
        "baseline_token": 11,
        "speculative_token": 12,
        "rescore_failed": True,
    }


def test_baseline_gap_is_rounded_and_none_outside_the_top_k() -> None:
    assert Temp0Evidence(5, 11, 12, 0.25, 0.5, baseline_gap=0.1234567).to_dict()[
        "baseline_gap"
    ] == round(0.1234567, 5)
    outside = Temp0Evidence(5, 11, 12, 0.25, 0.5, outside_baseline_top=True).to_dict()
    assert "baseline_gap" in outside
    assert outside["baseline_gap"] is None


def test_rescored_gaps_in_the_rule_s_order() -> None:
    bound = drift_bound([0.1, 0.2, 0.3, 0.4])
    assert bound is not None
    rows = {"single_token": [[11, 1.0]], "batched": [[11, 1.0]]}
    stopped = RescoredGaps(math.inf, 0.01, bound, rows, used_row_deviation=2.0)
    assert list(stopped.to_dict()) == [
        "gap_batched",
        "drift_at_divergence",
        "drift_bound",
        "target_rows",
        "used_row_deviation",
    ]
    assert stopped.to_dict()["gap_batched"] is None  # not finite
    server = RescoredGaps(0.5, 0.01, None, rows, gap_single_at_least=3.1234567)
    data = Temp0Evidence(5, 11, 12, 0.25, 0.5, rescored=server).to_dict()
    assert list(data)[len(HEAD) :] == [
        "gap_batched",
        "drift_at_divergence",
        "drift_bound",
        "target_rows",
        "gap_single",
        "gap_single_at_least",
    ]
    assert data["gap_single"] is None
    assert data["gap_single_at_least"] == round(3.1234567, 6)


def test_sampling_evidence_batched_follow_up_and_power() -> None:
    drift = PooledDrift(3, Drift(4, 0.001, None, 0.01, 0.1, 1.0))
    base = SamplingEvidence(0.01, ("pit",), 0.5, drift, (), None)
    assert list(base.to_dict()) == [
        "alpha",
        "rejected",
        "same_seed_agreement",
        "drift",
        "placebo_rejected",
        "fidelity",
    ]
    assert base.to_dict()["drift"] == drift.to_dict()
    unanswered = SamplingEvidence(0.01, (), 0.5, None, (), None, limit="off", followed_up=True)
    assert unanswered.to_dict()["limit"] == "off"
    assert unanswered.to_dict()["batched"] is None
    figures = BatchedFigures(("pit:vs-placebo-batched",), {"pit:vs-placebo-batched": 0.001})
    assert SamplingEvidence(
        0.01, (), 0.5, None, (), None, followed_up=True, batched=figures
    ).to_dict()["batched"] == {
        "rejected": ["pit:vs-placebo-batched"],
        "p_adjusted": {"pit:vs-placebo-batched": 0.001},
    }
    test = ScoredTest("temperature:vs-placebo", 1.0, 0.5, 0.5, 10, "", power=0.3)
    power = PowerEvidence(0.4, 0.001, test, tokens=100, tokens_needed=800)
    tail = SamplingEvidence(0.01, (), 0.5, None, (), None, power=power).to_dict()
    assert list(tail)[6:] == [
        "power",
        "power_alpha",
        "temperature_power",
        *("tokens", "tokens_needed"),
    ]
    assert "temperature_power" not in PowerEvidence(0.9, 0.001).to_dict()


def test_run_evidence() -> None:
    assert RunEvidence({"equivalent": 2}, ("n_ctx: 1 vs 2",)).to_dict() == {
        "counts": {"equivalent": 2},
        "differences": ["n_ctx: 1 vs 2"],
    }


# Read back: every evidence record reads back equal through JSON (up to the documented
# rounding, which the strategies below apply first), and files written before a key existed read.

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
rounded5 = finite.map(lambda x: round(x, 5))
rounded6 = finite.map(lambda x: round(x, 6))
counts = st.integers(min_value=0, max_value=10**9)
text = st.text(max_size=12)
maybe = st.none

bounds = st.builds(DriftBound, rounded6, counts, rounded6, rounded6, rounded6)
pair = st.tuples(st.integers(0, 300_000), rounded5).map(list)
rescored = st.builds(
    RescoredGaps,
    gap_batched=rounded6 | st.just(math.inf),  # not finite: written null, read as infinite
    drift_at_divergence=rounded6,
    drift_bound=maybe() | bounds,
    target_rows=st.dictionaries(st.sampled_from(["single_token", "batched"]), st.lists(pair)),
    used_row_deviation=maybe() | rounded6,
    gap_single=maybe() | rounded6,
    gap_single_at_least=maybe() | rounded6,
)


@st.composite
def temp0(draw: st.DrawFn) -> Temp0Evidence:
    outside = draw(st.booleans())  # outside the baseline's top k: no gap to write
    return Temp0Evidence(
        *draw(st.tuples(counts, counts, counts, maybe() | finite, maybe() | finite)),
        own_argmax=draw(maybe() | counts),
        baseline_gap=None if outside else draw(maybe() | rounded5),
        outside_baseline_top=outside,
        rescore_failed=draw(st.booleans()),
        rescored=draw(maybe() | rescored),
    )


@st.composite
def power(draw: st.DrawFn) -> PowerEvidence:
    tokens = draw(maybe() | counts)
    return PowerEvidence(
        draw(finite),
        draw(finite),
        draw(maybe() | st.builds(TestPower, maybe() | finite)),
        tokens=tokens,
        tokens_needed=None if tokens is None else draw(maybe() | counts),
    )


figures = st.builds(
    BatchedFigures, st.lists(text, max_size=3).map(tuple), st.dictionaries(text, finite)
)
pooled_drift = st.builds(
    PooledDrift,
    counts,
    st.builds(Drift, counts, finite, maybe() | finite, finite, finite, finite),
)
fidelity = st.builds(
    Fidelity, counts, rounded6, rounded6, rounded6, rounded6, rounded6, rounded6, counts, counts
)


@st.composite
def sampling(draw: st.DrawFn) -> SamplingEvidence:
    followed_up = draw(st.booleans())  # the batched figures are written only where asked
    return SamplingEvidence(
        draw(finite),
        tuple(draw(st.lists(text, max_size=3))),
        draw(finite),
        draw(maybe() | pooled_drift),
        tuple(draw(st.lists(text, max_size=3))),
        draw(maybe() | fidelity),
        limit=draw(maybe() | st.text(min_size=1, max_size=12)),  # an empty limit is not written
        followed_up=followed_up,
        batched=draw(maybe() | figures) if followed_up else None,
        power=draw(maybe() | power()),
    )


rates = st.builds(
    DivergenceRate,
    *(st.integers(0, 50), st.integers(0, 50), st.integers(0, 500)),
    *(st.integers(0, 50), st.integers(1, 500), st.floats(0, 1)),
)
runs = st.builds(
    RunEvidence,
    st.dictionaries(st.sampled_from([label.value for label in Label]), counts),
    st.lists(text, max_size=3).map(tuple),
    maybe() | rates,
)

EVIDENCE = {
    "temp0": temp0(),
    "rescored": rescored,
    "batched": figures,
    "power": power(),
    "sampling": sampling(),
    "run": runs,
}


@pytest.mark.parametrize("kind", sorted(EVIDENCE))
def test_every_evidence_record_reads_back_equal_through_json(kind: str) -> None:
    @settings(max_examples=40, deadline=None)
    @given(EVIDENCE[kind])
    def round_trip(evidence: Evidence) -> None:
        written = json.loads(json.dumps(evidence.to_dict()))
        read = type(evidence).from_dict(written)
        assert read == evidence
        assert read.to_dict() == written

    round_trip()


def test_the_temperature_test_reads_back_as_its_power() -> None:
    test = ScoredTest("temperature:vs-placebo", 1.0, 0.5, 0.5, 10, "", power=0.3)
    written = PowerEvidence(0.4, 0.001, test, tokens=100, tokens_needed=800).to_dict()
    assert PowerEvidence.from_dict(written) == PowerEvidence(
        0.4, 0.001, TestPower(0.3), tokens=100, tokens_needed=800
    )
    assert PowerEvidence.of({"alpha": 0.01, "rejected": ["pit"]}) is None  # not reached
    # written before power_alpha: the power was computed at the prompt's alpha
    assert PowerEvidence.from_dict({"alpha": 0.01, "power": 0.5}) == PowerEvidence(0.5, 0.01)


def test_a_verdict_written_by_the_current_code_reads_back() -> None:
    """Through a results file's line: the verdict's evidence is what ``to_dict`` wrote, byte for
    byte, and the typed record reads back from it."""
    at = Temp0Evidence(5, 11, 12, 0.25, 0.5, rescore_failed=True)
    line = json.dumps({"verdict": Verdict(Label.INCONCLUSIVE, "x", at.to_dict()).to_dict()})
    verdict = parse_verdict(json.loads(line)["verdict"])
    assert json.dumps(verdict.evidence) == json.dumps(at.to_dict())
    assert Temp0Evidence.from_dict(verdict.evidence) == at
    assert verdict.rescore_failed
    assert not Verdict(Label.INCONCLUSIVE, "x", AT.to_dict()).rescore_failed


def test_results_files_written_before_the_typed_evidence_read() -> None:
    """The fixtures' verdicts (no target rows or drift bound at temp 0; no placebo, fidelity or
    power_alpha when sampling): each key they hold reads back as written."""
    read = 0
    for name in ("temp0_results.jsonl", "sampling_results.jsonl", "hostile_results.jsonl"):
        contents = ResultsFile(FIXTURES / name).read()
        for record in (*contents.results, *contents.analyses):
            evidence = record.judged.evidence
            kind = Temp0Evidence if "position" in evidence else SamplingEvidence
            if "position" not in evidence and "same_seed_agreement" not in evidence:
                continue
            written = kind.from_dict(evidence).to_dict()
            assert {k: written[k] for k in evidence} == dict(evidence)
            read += 1
    assert read >= 6


def test_a_damaged_key_is_named() -> None:
    data = {**AT.to_dict(), "position": "five"}
    with pytest.raises(FieldError, match=r"evidence\.position: expected an integer"):
        Temp0Evidence.from_dict(data)
    rows = {**AT.to_dict(), "gap_batched": 0.5, "drift_at_divergence": 0.1}
    rows["target_rows"] = {"batched": [[1, "x"]]}
    with pytest.raises(FieldError, match=r"evidence\.target_rows\.batched\[0\]"):
        Temp0Evidence.from_dict(rows)
