"""Over HTTP, what numeric drift moves the run's temperature estimate by (`drift_shift`).

Where a server reported the row it sampled a token from (llama-server: outside a speculative
step), that token can be scored both under its own row and under the baseline's single-token
re-scoring, the rows the run's other tests read. The difference of the two temperature scores,
summed over such tokens, is what the re-scored rows alone move the estimate of ``λ - 1`` by
there. On the speculative path that is numeric drift where its server's rows are not plain
decoding's (llama-server keeps the accepted tokens' cache entries as the verification batch
computed them, `tools/server/server-context.cpp`); on the baseline's tokens the same figure is
the instrument's own error (0 where its re-scoring is exact). Pure functions of the samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode
from equiv.verdicts.sampling.samples import Sample

__all__ = ["DriftShift", "drift_shift"]


@dataclass(frozen=True)
class DriftShift:
    """``Σ (s_rescored - s_own) / Σ F_own`` over the speculative tokens with a reported row
    (``s``, ``F``: each token's likelihood score for the temperature and its variance,
    `equiv.verdicts.sampling.token_evidence.TokenEvidence.scores`), with its ``1 - 2 alpha``
    interval (samples as clusters, Student's t); ``placebo``: the same on the baseline's
    tokens, where they carry it."""

    tokens: int
    estimate: float
    low: float
    high: float
    placebo: float | None = None

    @property
    def line(self) -> str:
        placebo = "" if self.placebo is None else f"; on the placebo's: {self.placebo:+.4f}"
        return (
            f"numeric drift: on the {self.tokens} speculative tokens whose row the server "
            f"reported, the re-scored rows move λ - 1 by {self.estimate:+.4f} "
            f"[{self.low:+.4f}, {self.high:+.4f}] from the rows they were sampled from{placebo}"
        )

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> DriftShift:
        return decode(cls, data, "drift")


def _clusters(records: Sequence[Sample], path: str) -> list[tuple[float, float, int]] | None:
    """Per sample of ``path``: ``Σ (s_rescored - s_own)``, ``Σ F_own`` and the count over its
    tokens with a reported row; None where a sample lacks them or their re-scoring."""
    out = []
    for record in records:
        sample = record.path(path)
        own = sample.scores.get("reported_score")
        rescored = sample.scores.get("target_score")
        at = sample.reported_positions
        if own is None or rescored is None or at is None or len(at) != len(own):
            return None
        if any(i >= len(rescored) for i in at):
            return None
        shift = sum(rescored[i][0] - o[0] for i, o in zip(at, own, strict=True))
        out.append((shift, sum(o[1] for o in own), len(at)))
    return out


def _ratio(
    clusters: Sequence[tuple[float, float, int]], alpha: float
) -> tuple[float, float, float] | None:
    """The ratio estimate ``Σ shift / Σ F`` and its ``1 - 2 alpha`` interval, samples as
    clusters; None under 2 samples or without information."""
    shift = np.array([c[0] for c in clusters])
    info = np.array([c[1] for c in clusters])
    total, m = float(info.sum()), len(clusters)
    if m < 2 or total <= 0.0:
        return None
    estimate = float(shift.sum()) / total
    spread = float(np.sum((shift - estimate * info) ** 2)) * m / (m - 1)
    half = float(sps.t.isf(alpha, m - 1)) * math.sqrt(spread) / total
    return estimate, estimate - half, estimate + half


def drift_shift(records: Sequence[Sample], alpha: float) -> DriftShift | None:
    """What the re-scored rows move the temperature estimate by on the speculative tokens with
    a reported row (and on the baseline's), or None where the records do not carry both rows
    at the same positions (in process, a server that reports no rows, files written before
    equiv recorded the positions)."""
    clusters = _clusters(records, "speculative")
    found = None if clusters is None else _ratio(clusters, alpha)
    if clusters is None or found is None:
        return None
    base = _clusters(records, "baseline")
    placebo = None if base is None else _ratio(base, alpha)
    tokens = sum(c[2] for c in clusters)
    return DriftShift(tokens, *found, placebo=None if placebo is None else placebo[0])
