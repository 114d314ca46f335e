"""Paired quality statistics: McNemar, Wilson, the TOST equivalence answer and its power."""

from __future__ import annotations

import math

import numpy as np
import pytest

from equiv.records import ResultRecord
from equiv.verdicts.quality.graders import Outcome
from equiv.verdicts.quality.paired import GradedSample, quality, samples_from_records
from equiv.verdicts.quality.pass_rates import (
    QualityAnswer,
    exact_mcnemar,
    paired_difference,
    stratified_difference,
    units_needed,
    units_to_detect,
    wilson,
)

P, F, E = Outcome.PASS, Outcome.FAIL, Outcome.ERROR


def test_exact_mcnemar_is_the_binomial_test_of_the_discordant_pairs() -> None:
    assert exact_mcnemar(0, 0) == 1.0
    assert exact_mcnemar(5, 0) == pytest.approx(2 * 0.5**5)
    assert exact_mcnemar(3, 3) == pytest.approx(1.0)
    assert exact_mcnemar(1, 9) == pytest.approx(2 * 11 / 2**10)


def test_wilson_interval() -> None:
    r = wilson(0, 10, 0.95)
    assert r.low == 0.0
    assert r.high == pytest.approx(0.2775, abs=1e-4)
    assert wilson(7, 10).value == 0.7
    with pytest.raises(ValueError, match="passed=11"):
        wilson(11, 10)


def test_temp0_drop_is_the_one_sided_exact_mcnemar() -> None:
    d = paired_difference(20, worse=5, better=0, margin=0.03)
    assert d.estimate == -0.25
    assert d.p_drop == pytest.approx(0.5**5)
    assert d.answer is QualityAnswer.DROP
    assert d.sentence.startswith("quality dropped by 25.0 points")


def test_temp0_few_prompts_cannot_show_equivalence_and_say_how_many_would() -> None:
    d = paired_difference(20, worse=0, better=0, margin=0.03)
    assert d.answer is QualityAnswer.UNDECIDED
    assert d.needed is not None
    assert d.needed > 20
    assert f"about {d.needed} prompts would" in d.sentence
    big = paired_difference(5000, worse=0, better=0, margin=0.03)
    assert big.answer is QualityAnswer.NO_LOSS
    assert "no quality change larger than 3 points, at 95 %" in big.sentence


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="worse \\+ better <= n"):
        paired_difference(3, worse=2, better=2, margin=0.03)


def test_units_needed_reaches_the_target_power() -> None:
    se, units, margin, alpha = 0.04, 32, 0.03, 0.05
    n = units_needed(se, units, margin, alpha)
    assert n is not None
    se_n = se * math.sqrt(units / n)
    z = 1.6448536269514722
    power = 2 * (0.5 * math.erfc(-(margin / se_n - z) / math.sqrt(2))) - 1
    assert power >= 0.8 - 1e-3
    assert units_needed(0.001, units, margin, alpha) is None


def test_sampling_equal_rates_with_many_seeds_are_equivalent() -> None:
    d = stratified_difference([(500, 1000, 500, 1000)] * 20, margin=0.03)
    assert d.answer is QualityAnswer.NO_LOSS
    assert d.unit == "seeds"


def test_sampling_a_real_drop_is_significant() -> None:
    d = stratified_difference([(20, 32, 10, 32)] * 8, margin=0.03)
    assert d.answer is QualityAnswer.DROP
    assert d.estimate == pytest.approx(-10 / 32)
    assert d.high < 0


def test_one_seed_is_never_significant_and_intervals_stay_within_100_points() -> None:
    d = stratified_difference([(0, 1, 1, 1)], margin=0.03)
    assert d.p_rise == pytest.approx(0.5)  # Fisher exact, where a Wald test would say 0.005
    assert d.answer is QualityAnswer.UNDECIDED
    assert (d.low, d.high) == (pytest.approx(0.366, abs=1e-3), 1.0)


def test_sampling_few_seeds_are_not_enough() -> None:
    d = stratified_difference([(16, 32, 16, 32)] * 4, margin=0.03)
    assert d.answer is QualityAnswer.UNDECIDED
    assert d.needed is not None
    assert d.needed > 32
    assert "not enough samples" in d.sentence


def _simulate(p_base: float, p_spec: float, seeds: int, prompts: int, reps: int) -> list[str]:
    rng = np.random.default_rng(7)
    answers = []
    for _ in range(reps):
        xb = rng.binomial(seeds, p_base, prompts)
        xs = rng.binomial(seeds, p_spec, prompts)
        strata = [(int(b), seeds, int(s), seeds) for b, s in zip(xb, xs, strict=True)]
        answers.append(stratified_difference(strata, margin=0.05).answer.value)
    return answers


def test_tost_claims_equivalence_at_the_margin_at_most_alpha_of_the_time() -> None:
    """The level: a true drop exactly at the margin is called 'no loss' <= 5 % of the time."""
    answers = _simulate(0.5, 0.45, seeds=200, prompts=10, reps=400)
    rate = answers.count("no-loss") / len(answers)
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_tost_has_its_stated_power_at_the_seeds_it_asks_for() -> None:
    probe = stratified_difference([(16, 32, 16, 32)] * 10, margin=0.05)
    assert probe.needed is not None
    answers = _simulate(0.5, 0.5, seeds=probe.needed, prompts=10, reps=200)
    assert answers.count("no-loss") / len(answers) >= 0.7


def _s(
    prompt: str, b: Outcome, s: Outcome, seed: int | None = None, label: str = ""
) -> GradedSample:
    return GradedSample(prompt, prompt.split("/")[0], seed, b, s, label or None)


def test_quality_lists_flips_with_labels_and_leaves_out_grader_errors() -> None:
    samples = [
        _s("code/a", P, F, label="numeric-drift"),
        _s("code/b", F, P, label="numeric-drift"),
        _s("code/c", P, P),
        _s("reasoning/d", P, F, label="sampler-bug"),
        _s("reasoning/e", E, E),
    ]
    q = quality(samples, temp0=True)
    assert q is not None
    assert [(f.prompt, f.worse, f.label) for f in q.flips] == [
        ("code/a", True, "numeric-drift"),
        ("code/b", False, "numeric-drift"),
        ("reasoning/d", True, "sampler-bug"),
    ]
    assert (q.total.baseline.passed, q.total.speculative.passed, q.total.baseline.n) == (3, 2, 4)
    assert (q.total.worse, q.total.better) == (2, 1)
    assert [s.suite for s in q.suites] == ["code", "reasoning"]
    assert q.errors == (("reasoning/e", "grader error"),)
    assert q.line.startswith("quality: 3/4 baseline vs 2/4 speculative pass; 2 got worse, 1 better")
    assert "(numeric-drift, sampler-bug)" in q.line
    assert "1 ungradable" in q.line


def test_quality_in_sampling_mode_has_per_prompt_rates() -> None:
    samples = [_s("code/a", P, P if i % 2 else F, seed=i + 1) for i in range(10)]
    q = quality(samples, temp0=False)
    assert q is not None
    assert not q.flips
    (p,) = q.prompts
    assert (p.baseline.passed, p.speculative.passed, p.baseline.n) == (10, 5, 10)
    assert q.total.mcnemar_p is None
    assert q.total.difference.answer is QualityAnswer.DROP


def test_nothing_graded_is_none() -> None:
    assert quality([], temp0=True) is None
    assert quality([_s("code/a", E, P)], temp0=True) is None


def test_samples_from_records_reads_grades_and_labels() -> None:
    from equiv.records import ResultRecord

    graded = _record("code/a", "pass", "error", "equivalent")
    graded["grades"] = {
        "baseline": {"outcome": "pass", "reason": "ok"},
        "speculative": {"outcome": "error", "reason": "invalid grader: x"},
    }
    ungraded = _record("code/b", "pass", "pass", "equivalent")
    del ungraded["grades"]
    records = [ResultRecord.from_dict(graded), ResultRecord.from_dict(ungraded)]
    (s,) = samples_from_records(records)
    assert (s.prompt, s.baseline, s.speculative, s.label) == ("code/a", P, E, "equivalent")
    assert s.error == "invalid grader: x"


def test_answer_line_says_whether_and_by_how_much_at_most() -> None:
    drop = quality([_s(f"code/{i}", P, F, label="sampler-bug") for i in range(8)], temp0=True)
    assert drop is not None
    assert drop.answer_line.startswith("did quality drop? yes, by 100.0 points (by at most")
    same = quality([_s(f"code/{i}", P, P) for i in range(4)], temp0=True)
    assert same is not None
    line = same.answer_line
    assert line.startswith("did quality drop? not significantly, but a drop of up to ")
    assert "prompts would tell" in line


def test_units_to_detect_an_observed_change() -> None:
    assert units_to_detect(0.0, 0.05, 16, 0.05) is None
    n = units_to_detect(-0.1, 0.05, 16, 0.05)
    assert n is not None
    # at n units the one-sided test has 80 % power for a change of 0.1
    se_n = 0.05 * math.sqrt(16 / n)
    assert 0.1 / se_n >= 1.6448536 + 0.8416212 - 1e-6


def _record(key: str, base: str, spec: str, label: str) -> dict[str, object]:
    """A recorded temp-0 result (tests/fixtures) as prompt ``key`` with these grades."""
    import json
    from pathlib import Path

    fixture = Path(__file__).parents[2] / "fixtures" / "temp0_results.jsonl"
    lines = [json.loads(line) for line in fixture.read_text(encoding="utf-8").splitlines()]
    recorded = next(r for r in lines if r["kind"] == "result")
    suite, pid = key.split("/")
    return {
        **recorded,
        "key": f"{key}::temp0",
        "suite": suite,
        "prompt_id": pid,
        "mode": "temp0",
        "seed": None,
        "comparison": {**recorded["comparison"], "identical": base == spec},
        "verdict": {"label": label, "reason": "r"},
        "grades": {
            "baseline": {"outcome": base, "reason": ""},
            "speculative": {"outcome": spec, "reason": ""},
        },
    }


def test_the_plugin_session_fails_on_a_significant_drop_only_when_asked() -> None:
    from equiv.pytest.session import Check, Policy, problems, summary_lines
    from equiv.records import HeaderRecord, ResultRecord

    def check(data: dict[str, object]) -> Check:
        record = ResultRecord.from_dict(data)
        return Check(
            key=record.key,
            mode="temp0",
            action="pass",
            verdict=record.judged,
            record=record,
            records=(record,),
            header=HeaderRecord(config={"quality_margin": 3.0}),
        )

    worse = [check(_record(f"code/p{i}", "pass", "fail", "numeric-drift")) for i in range(6)]
    assert problems(worse, Policy()) == []
    (problem,) = problems(worse, Policy(fail_on_quality_drop=True))
    assert problem.startswith("temp0: graded prompts pass significantly less often with the draft")
    assert "6/6 baseline vs 0/6 speculative pass; 6 got worse" in problem
    assert any(line.startswith("temp0: quality: 6/6 baseline") for line in summary_lines(worse))
    few = worse[:4]  # 4 flips: one-sided exact McNemar p = 1/16 > 0.05
    assert problems(few, Policy(fail_on_quality_drop=True)) == []


def test_diagnose_ends_with_the_quality_answer() -> None:
    from equiv.cli.diagnose.verdict import verdict_lines
    from equiv.verdicts.runs.summary import summarize

    graded = summarize(
        [
            ResultRecord.from_dict(_record(f"code/p{i}", "pass", "fail", "sampler-bug"))
            for i in range(6)
        ]
    )
    lines = verdict_lines(graded, None, draft_max=4, user_temp=0.0, analyses=[])
    assert lines[-1].startswith("did quality drop? yes, by 100.0 points")
    assert lines[-2].startswith("quality: 6/6 baseline vs 0/6 speculative pass")
    ungraded = [
        {k: v for k, v in _record("code/a", "pass", "pass", "equivalent").items() if k != "grades"}
    ]
    lines = verdict_lines(
        summarize(map(ResultRecord.from_dict, ungraded)),
        None,
        draft_max=4,
        user_temp=0.0,
        analyses=[],
    )
    assert lines[-1].startswith("did quality drop? not measured")


def test_with_both_modes_graded_each_answers_at_half_the_level() -> None:
    """The run's "quality dropped" is either mode's drop: each mode tests at alpha / 2, so the
    run's false-alarm rate stays at alpha (Bonferroni)."""
    from equiv.verdicts.quality.pass_rates import QUALITY_ALPHA
    from equiv.verdicts.runs.summary import summarize

    temp0 = [_record(f"code/p{i}", "pass", "pass", "equivalent") for i in range(4)]
    (alone,) = summarize(map(ResultRecord.from_dict, temp0)).quality
    assert alone.total.difference.alpha == QUALITY_ALPHA
    sampled = [
        {**r, "key": f"{r['suite']}/{r['prompt_id']}::seed1", "mode": "sampling", "seed": 1}
        for r in temp0
    ]
    both = summarize(map(ResultRecord.from_dict, [*temp0, *sampled])).quality
    assert [q.temp0 for q in both] == [True, False]
    assert all(q.total.difference.alpha == QUALITY_ALPHA / 2 for q in both)
