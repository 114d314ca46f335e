"""Over HTTP, what numeric drift moves the run's temperature estimate by (`drift_shift`).

Where a server reported the row it sampled a token from (llama-server: outside a speculative
step), that token can be scored both under its own row and under the baseline's single-token
re-scoring, the rows the run's other tests read. The difference of the two temperature scores,
summed over such tokens, is what the re-scored rows alone move the estimate of ``λ - 1`` by
there. On the speculative path that is numeric drift where its server's rows are not plain
decoding's (llama-server keeps the accepted tokens' cache entries as the verification batch
computed them, `tools/server/server-context.cpp`); on the baseline's tokens the same figure is
the instrument's own error (0 where its re-scoring is exact), so the line also says whether
the speculative path's shift lies beyond it (`DriftShift.p_beyond`). Information beside the
bounds, not a verdict: it covers only the tokens sampled outside speculative steps, and its
coverage is not measured. Pure functions of the samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from equiv.records.codec import OMIT
from equiv.verdicts.sampling.placebo import cluster_ratio
from equiv.verdicts.sampling.pooled_bounds import difference_interval, difference_p
from equiv.verdicts.sampling.samples import PathSample, Sample

__all__ = ["DriftShift", "drift_shift"]


@dataclass(frozen=True)
class DriftShift:
    """``Σ (s_rescored - s_own) / Σ F_own`` over the speculative tokens with a reported row
    (``s``, ``F``: each token's likelihood score for the temperature and its variance,
    `equiv.verdicts.sampling.token_evidence.TokenEvidence.scores`): the shift of the
    likelihood scores' estimate of ``λ - 1``, not of the bound's own estimator (which weighs
    the top token's indicator and the PIT's normal score), with its ``1 - 2 alpha`` interval
    (samples as clusters, Student's t; its coverage is not measured); ``placebo``: the same on
    the baseline's tokens, where they carry it."""

    tokens: int
    estimate: float
    low: float
    high: float
    placebo: float | None = None
    #: samples without the positions or the re-scoring (written before equiv recorded them)
    left_out: int = field(default=0, metadata={OMIT: 0})
    #: the two-sided p-value of the speculative shift beyond the placebo's (Student's t, the
    #: two paths' samples as independent clusters); None without the placebo's, or in records
    #: written before it
    p_beyond: float | None = field(default=None, metadata={OMIT: None})

    @property
    def line(self) -> str:
        placebo = "" if self.placebo is None else f"; on the placebo's: {self.placebo:+.4f}"
        if self.p_beyond is not None:
            placebo += f" (the difference: p {self.p_beyond:.2g})"
        left = f" ({self.left_out} samples without them left out)" if self.left_out else ""
        return (
            f"numeric drift: on the {self.tokens} speculative tokens whose row the server "
            f"reported{left}, the re-scored rows move the likelihood scores' λ - 1 by "
            f"{self.estimate:+.4f} [{self.low:+.4f}, {self.high:+.4f}] from the rows they were "
            f"sampled from{placebo}"
        )


def _tokens(sample: PathSample) -> tuple[list[float], list[float]] | None:
    """Per token of ``sample`` with a reported row: ``s_rescored - s_own`` and ``F_own``; None
    where the sample lacks the positions or the re-scoring (files written before equiv recorded
    the positions, a failed re-scoring)."""
    own = sample.scores.get("reported_score")
    rescored = sample.scores.get("target_score")
    at = sample.reported_positions
    if own is None or rescored is None or at is None or len(at) != len(own):
        return None
    if any(i >= len(rescored) for i in at):
        return None
    shift = [rescored[i][0] - o[0] for i, o in zip(at, own, strict=True)]
    return shift, [o[1] for o in own]


def _paired(
    records: Sequence[Sample], path: str
) -> tuple[tuple[float, float, int], int, int] | None:
    """``(θ, var θ, m)`` of ``path``'s shift (`cluster_ratio`), its tokens and the samples left
    out without the evidence; None where no sample has it or under 2 samples carry information."""
    shift: list[float] = []
    info: list[float] = []
    ids: list[int] = []
    left_out = 0
    for n, record in enumerate(records):
        found = _tokens(record.path(path))
        if found is None:
            left_out += 1
            continue
        shift += found[0]
        info += found[1]
        ids += [n] * len(found[0])
    theta, var, m = cluster_ratio(shift, info, ids)
    if not math.isfinite(var):
        return None
    return (theta, var, m), len(shift), left_out


def drift_shift(records: Sequence[Sample], *, alpha: float) -> DriftShift | None:
    """What the re-scored rows move the likelihood scores' estimate of ``λ - 1`` by on the
    speculative tokens with a reported row (and on the baseline's), or None where no sample
    carries both rows at the same positions (in process, a server that reports no rows, files
    written before equiv recorded the positions). Samples without them are left out and counted.
    Both paths' rows are read under their own sampling settings: where the run sets the paths
    apart (a misconfiguration), the shift holds that difference too."""
    found = _paired(records, "speculative")
    if found is None:
        return None
    own, tokens, left_out = found
    estimate, low, high = difference_interval(own, (0.0, 0.0, own[2]), alpha)
    base = _paired(records, "baseline")
    if base is None:
        return DriftShift(tokens, estimate, low, high, None, left_out)
    return DriftShift(tokens, estimate, low, high, base[0][0], left_out, difference_p(own, base[0]))
