"""Run-level figures: acceptance, rounds, and Leviathan et al.'s prediction only where known."""

from equiv.verdicts.summary import summarize


def _record(steps, draft_s):
    gen = {"tokens": list(range(9)), "t_decode_s": 0.4}
    return {
        "key": "s/p::temp0",
        "suite": "s",
        "mode": "temp0",
        "comparison": {"identical": True},
        "baseline": dict(gen),
        "speculative": {**gen, "draft_steps": steps, "draft_s": draft_s},
    }


def test_rounds_give_the_mean_accepted_and_a_prediction():
    total = summarize([_record([[0, 4, 3, False], [4, 4, 4, False]], 0.05)]).total
    assert total.acceptance == 7 / 8
    assert total.mean_accepted == 3.5
    assert total.cost_ratio is not None
    assert total.predicted_speedup is not None


def test_per_request_counts_give_acceptance_but_no_rounds_and_no_prediction():
    """A server reports draft_n and draft_n_accepted per request: no rounds, no draft time."""
    total = summarize([_record([[-1, 8, 7, False]], 0.0)]).total
    assert total.acceptance == 7 / 8
    assert total.mean_accepted is None
    assert total.cost_ratio is None
    assert total.predicted_speedup is None
