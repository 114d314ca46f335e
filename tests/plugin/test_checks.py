"""equiv.pytest.session: the fail/warn policy, session-level problems, plain-data round trips."""

from pathlib import Path

import pytest

from equiv.errors import ConfigError
from equiv.pytest.session import Check, Policy, describe, problems
from equiv.records import EventRecord, ResultsFile
from equiv.records.verdict import Label, Verdict

EQ = Verdict(Label.EQUIVALENT, "token IDs identical")
DRIFT = Verdict(Label.NUMERIC_DRIFT, "near tie", {"margin": 0.01, "rows": [1, 2]})
BUG = Verdict(Label.SAMPLER_BUG, "not its own argmax")


FIXTURE = Path(__file__).parents[1] / "fixtures" / "temp0_results.jsonl"


def _check(verdict, *, events=(), identical=None):
    """A check of a real record (from a recorded run) whose outputs are identical or not."""
    same = verdict.equivalent if identical is None else identical
    contents = ResultsFile(FIXTURE).read()
    record = next(r for r in contents.results if r.comparison.identical is same)
    return Check(
        key="s/p::temp0",
        mode="temp0",
        action="pass",
        verdict=verdict,
        record=record,
        records=(record,),
        header=contents.header,
        extras=tuple(EventRecord.from_dict(e) for e in events),
    )


@pytest.mark.parametrize(
    ("policy", "verdicts", "expected"),
    [
        (Policy(), [EQ, EQ], ("pass", 0)),
        (Policy(), [EQ, DRIFT], ("pass", 1)),
        (Policy(), [DRIFT, BUG], ("fail", 1)),
        (Policy(warn_on=frozenset({Label.NUMERIC_DRIFT})), [EQ, DRIFT], ("warn", 1)),
        (Policy(fail_on=frozenset(), warn_on=frozenset({Label.SAMPLER_BUG})), [BUG], ("warn", 0)),
        (
            Policy(fail_on=frozenset({BUG.label}), warn_on=frozenset({BUG.label})),
            [BUG],
            ("fail", 0),
        ),
    ],
)
def test_policy_judges_the_first_failing_then_warning_then_differing_verdict(
    policy, verdicts, expected
):
    assert policy.judge(verdicts) == expected


def test_a_drift_rate_outside_zero_one_is_refused():
    with pytest.raises(ConfigError, match=r"max drift rate 2 .*\[0, 1\]"):
        Policy(max_drift_rate=2)


def test_problems_name_failed_controls_and_a_drift_rate_above_the_limit():
    checks = [
        _check(DRIFT),
        _check(EQ, events=[{"event": "determinism", "ok": False, "detail": "x"}]),
    ]
    assert problems(checks, Policy()) == ["control determinism FAILED: x"]
    found = problems(checks, Policy(max_drift_rate=0.4))
    assert found[1] == "numeric-drift on 1 of 2 check(s) (0.50) is above the allowed rate 0.4"
    assert len(problems(checks, Policy(max_drift_rate=0.5))) == 1


def test_a_check_survives_plain_data_and_reads_back_equal():
    check = _check(
        DRIFT, events=[{"event": "determinism", "ok": True, "detail": "ok"}], identical=True
    )
    assert Check.from_dict(check.to_dict()) == check
    assert check.events == [EventRecord("determinism", "ok", ok=True)]
    assert not check.equivalent
    assert repr(check) == "<equiv s/p::temp0: numeric-drift (evidence: str(check))>"


def test_describe_shows_scalar_evidence_only():
    assert describe(DRIFT, _check(DRIFT, identical=True).record) == [
        "numeric-drift: near tie",
        "  evidence: margin=0.01",
    ]


def test_describe_names_the_first_divergence_of_a_real_record():
    lines = describe(DRIFT, _check(DRIFT).record)
    assert lines[1].startswith("  first divergence at token ")
    assert lines[2].startswith("    baseline ")
    assert lines[3].startswith("    speculative ")
    assert "shared rows max |delta logit|" in lines[4]


def test_a_pooled_sampler_bug_fails_the_session_though_no_check_failed(monkeypatch):
    from collections import Counter

    from equiv.pytest import session
    from equiv.verdicts.runs.summary import Summary
    from equiv.verdicts.sampling.pooled import PooledAnalysis
    from equiv.verdicts.sampling.run_verdict import RunJudgement

    pooled = PooledAnalysis(0.005, prompts=12, samples=384, tokens=9000, seeds=32)
    bug = Verdict(Label.SAMPLER_BUG, "pooled top-token p = 1e-05", {"labels": {}})
    judged = {"sampling": Summary(run=RunJudgement(pooled, bug))}
    monkeypatch.setattr(session, "_summaries", lambda checks: judged)
    checks = [_check(EQ)]
    assert problems(checks, Policy()) == [
        "sampling: pooled over the session, sampler-bug: pooled top-token p = 1e-05"
    ]
    assert problems(checks, Policy(fail_on=frozenset())) == []  # --equiv-fail-on= fails none
    assert Counter(c.label for c in checks) == Counter({Label.EQUIVALENT: 1})
