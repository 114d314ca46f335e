"""Finding a real temp-0 divergence on this machine, for the tests that need one.

Where a near-tie flips depends on the CPU's kernels (SIMD width, reduction order), so no prompt is
*expected* to diverge: a test scans candidates with the real engines, in rounds, and uses what
diverged; where nothing did within the budget it is skipped with that reason, never failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from equiv.prompts import Prompt, load_suites
from equiv.records import AnalysisRecord, ResultRecord

#: Tried first: each has met an early near-tie of gemma-3-270m on some CPU we ran on.
CANDIDATES = (
    "code/py_binary_search",
    "code/py_last_n",
    "code/py_transpose_brackets",
    "code/fib_lt",
    "code/c_sum_loop",
    "code/rust_result_type",
    "code/py_gcd",
    "code/py_factorial",
)
#: At most this many prompts are run before a scan gives up.
BUDGET = 24


def candidate_prompts() -> list[Prompt]:
    """`CANDIDATES`, then the rest of the code suite, at most `BUDGET` of them."""
    by_key = {p.key: p for p in load_suites(["code"])}
    order = [k for k in CANDIDATES if k in by_key]
    order += [k for k in by_key if k not in order]
    return [by_key[k] for k in order[:BUDGET]]


def scan(
    run_round: Callable[[Sequence[Prompt], bool], list[ResultRecord | AnalysisRecord]],
    *,
    wanted: int,
    round_size: int,
) -> tuple[list[str], list[ResultRecord]]:
    """Run `candidate_prompts` ``round_size`` at a time through ``run_round(prompts, resume)``
    (which returns their temp-0 result records) until ``wanted`` diverged or the budget is spent.
    Returns the keys scanned and all records."""
    prompts = candidate_prompts()
    scanned: list[str] = []
    records: list[ResultRecord] = []
    for start in range(0, len(prompts), round_size):
        batch = prompts[start : start + round_size]
        records += [r for r in run_round(batch, bool(scanned)) if isinstance(r, ResultRecord)]
        scanned += [p.key for p in batch]
        if sum(not r.comparison.identical for r in records) >= wanted:
            break
    return scanned, records


def require(
    records: Sequence[ResultRecord], scanned: Sequence[str], where: str
) -> list[ResultRecord]:
    """The diverged records, or a skip saying how many prompts were scanned."""
    diverged = [r for r in records if not r.comparison.identical]
    if not diverged:
        pytest.skip(
            f"{where} did not diverge at temp 0 on any of the {len(scanned)} prompts scanned on "
            f"this machine (budget {BUDGET}); near-ties fall where the CPU's kernels put them"
        )
    return diverged
