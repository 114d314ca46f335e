"""The comparison of a baseline and a speculative generation, as recorded: the first divergence, the
edit opcodes and the logit drift. Computed by `equiv.verdicts.temp0.compare`; held here so that a
result record is typed without importing the verdicts.

`Drift` is the one type for "how far two sets of logits rows are apart", wherever it is measured:
between the two paths over their shared rows (``comparison.drift``) and between the speculative
sampler's rows and the target's own re-scoring (``rescore_drift``). Schema 1 files named its
fields twice (``positions``/``n``, ``mean_kl``, ``max_abs_delta_logit``); both are read.
`ArgmaxFlips` is the temp-0 placebo of a result: where drift alone flips the target's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from equiv.json_types import JSONDict, JSONObject
from equiv.records.fields import Fields
from equiv.records.generation import LogitsRow, TokenAlternatives

__all__ = ["ArgmaxFlips", "Comparison", "Divergence", "Drift", "token_namer"]

_OPS = ("equal", "replace", "insert", "delete")


@dataclass(frozen=True)
class Drift:
    """How far two engines' logits for the same positions are apart, over ``rows`` rows.

    KL is KL(P_a || P_b) of the softmax at temperature 1, in nats (the figure llama.cpp's
    ``llama-perplexity --kl-divergence`` reports): its mean, 99th percentile (None where not
    recorded) and max; the largest |l_a - l_b| over all entries; and the share of rows whose
    argmax agrees.
    """

    rows: int
    kl_mean: float
    kl_p99: float | None
    kl_max: float
    max_abs_logit_delta: float
    top1_agreement: float
    # Each row's KL (4 significant digits) where kept, so that a run's percentiles pool every row.
    kl_rows: tuple[float, ...] = ()

    def rounded(self) -> Drift:
        """As written to a results file: 9 digits for KL, 6 for the rest."""
        return Drift(
            rows=self.rows,
            kl_mean=round(self.kl_mean, 9),
            kl_p99=None if self.kl_p99 is None else round(self.kl_p99, 9),
            kl_max=round(self.kl_max, 9),
            max_abs_logit_delta=round(self.max_abs_logit_delta, 6),
            top1_agreement=round(self.top1_agreement, 6),
            kl_rows=self.kl_rows,
        )

    def to_dict(self) -> JSONDict:
        data: JSONDict = {
            "rows": self.rows,
            "kl_mean": self.kl_mean,
            "kl_p99": self.kl_p99,
            "kl_max": self.kl_max,
            "max_abs_logit_delta": self.max_abs_logit_delta,
            "top1_agreement": self.top1_agreement,
        }
        if self.kl_rows:
            data["kl_rows"] = list(self.kl_rows)
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> Drift:
        f = Fields(data, where)

        def first(*names: str) -> str:
            return next((n for n in names if n in f.data), names[0])

        return cls(
            rows=f.integer(first("rows", "positions", "n"), minimum=0),
            kl_mean=f.number(first("kl_mean", "mean_kl")),
            kl_p99=f.number("kl_p99", None),
            kl_max=f.number(first("kl_max", "max_kl")),
            max_abs_logit_delta=f.number(first("max_abs_logit_delta", "max_abs_delta_logit")),
            top1_agreement=f.number("top1_agreement"),
            kl_rows=f.numbers("kl_rows", ()),
        )


@dataclass(frozen=True)
class ArgmaxFlips:
    """The temp-0 placebo of one result: the baseline's own tokens evaluated by the target in one
    batch (as verification evaluates), and the positions where the batched row's argmax is not
    the token single-token decoding chose. Drift alone would make a correct speculative path
    diverge at such positions; `equiv.verdicts.temp0.divergence_rate` pools them over the run.
    """

    positions: int
    flips: tuple[int, ...]

    @classmethod
    def of(cls, tokens: Sequence[int], batched_rows: LogitsRow) -> ArgmaxFlips:
        """Where ``batched_rows[j]`` (the row of ``tokens[j]``) prefers another token."""
        best = np.asarray(batched_rows).argmax(axis=1)
        flips = tuple(int(j) for j in np.flatnonzero(best != np.asarray(tokens, dtype=np.int64)))
        return cls(positions=len(tokens), flips=flips)

    def to_dict(self) -> JSONDict:
        return {"positions": self.positions, "flips": list(self.flips)}

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> ArgmaxFlips:
        f = Fields(data, where)
        positions = f.integer("positions", minimum=0)
        flips = f.ints("flips")
        if any(not 0 <= j < positions for j in flips):
            f.fail("flips", f"holds a position outside 0..{positions - 1}")
        return cls(positions=positions, flips=flips)


@dataclass(frozen=True)
class Divergence:
    """The first position where the two token sequences differ.

    ``margin_*`` is, in each path's own logits, how far its chosen token led the other path's
    token: a small positive margin in both is a near-tie that numeric noise can flip. ``None``
    where a path ended before this position or its row is not available.
    """

    position: int
    baseline_token: int | None
    speculative_token: int | None
    baseline_text: str | None
    speculative_text: str | None
    baseline_top: TokenAlternatives | None
    speculative_top: TokenAlternatives | None
    margin_baseline: float | None
    margin_speculative: float | None
    delta_logit_at_divergence: float | None
    # The text of every ID in both top-k lists (emitted or not), so that reasons and the
    # report name candidates by their text as well as their ID.
    top_texts: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> JSONDict:
        data = dict(self.__dict__)
        for key in ("baseline_top", "speculative_top"):
            alt = data[key]
            data[key] = alt.to_dict() if alt is not None else None
        data["top_texts"] = [list(pair) for pair in self.top_texts]
        return data

    def token_name(self, token: int) -> str:
        return token_namer(self)(token)

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> Divergence:
        f = Fields(data, where)
        tops = {
            key: TokenAlternatives.from_dict(f.obj(key).data, f.name(key)) if f.has(key) else None
            for key in ("baseline_top", "speculative_top")
        }
        texts = []
        for i, pair in enumerate(f.array("top_texts", ())):
            ok = isinstance(pair, list | tuple) and len(pair) == 2
            if not ok or isinstance(pair[0], bool) or not isinstance(pair[0], int):
                f.fail(f"top_texts[{i}]", "expected [token id, text]")
            if not isinstance(pair[1], str):
                f.fail(f"top_texts[{i}]", "expected [token id, text]")
            texts.append((int(pair[0]), str(pair[1])))
        return cls(
            position=f.integer("position", minimum=0),
            baseline_token=f.integer("baseline_token", None),
            speculative_token=f.integer("speculative_token", None),
            baseline_text=f.text("baseline_text", None),
            speculative_text=f.text("speculative_text", None),
            baseline_top=tops["baseline_top"],
            speculative_top=tops["speculative_top"],
            margin_baseline=f.number("margin_baseline", None),
            margin_speculative=f.number("margin_speculative", None),
            delta_logit_at_divergence=f.number("delta_logit_at_divergence", None),
            top_texts=tuple(texts),
        )


def token_namer(divergence: Divergence) -> Callable[[int], str]:
    """A divergence's way of naming a token: ``'text' (id N)``, the text as a Python literal
    (control characters and quotes show as escapes); ``id N`` where no text is known."""
    texts = dict(divergence.top_texts)
    for tid, text in (
        (divergence.baseline_token, divergence.baseline_text),
        (divergence.speculative_token, divergence.speculative_text),
    ):
        if tid is not None and text is not None:
            texts.setdefault(tid, text)

    def name(token: int) -> str:
        return f"{texts[token]!r} (id {token})" if token in texts else f"id {token}"

    return name


@dataclass(frozen=True)
class Comparison:
    identical: bool
    n_baseline: int
    n_speculative: int
    common_prefix: int
    token_similarity: float
    edit_distance: int
    opcodes: tuple[tuple[str, int, int, int, int], ...]
    divergence: Divergence | None
    drift: Drift | None

    def to_dict(self) -> JSONDict:
        return {
            "identical": self.identical,
            "n_baseline": self.n_baseline,
            "n_speculative": self.n_speculative,
            "common_prefix": self.common_prefix,
            "token_similarity": self.token_similarity,
            "edit_distance": self.edit_distance,
            "opcodes": [list(op) for op in self.opcodes],
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "drift": self.drift.to_dict() if self.drift else None,
        }

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> Comparison:
        f = Fields(data, where)
        opcodes = []
        for i, op in enumerate(f.array("opcodes")):
            ok = isinstance(op, list | tuple) and len(op) == 5 and op[0] in _OPS
            ok = ok and all(isinstance(x, int) and not isinstance(x, bool) for x in op[1:])
            if not ok:
                f.fail(
                    f"opcodes[{i}]",
                    f"expected [tag, i1, i2, j1, j2] with a tag in {', '.join(_OPS)}",
                )
            opcodes.append((str(op[0]), int(op[1]), int(op[2]), int(op[3]), int(op[4])))
        identical = f.flag("identical")
        divergence = f.obj("divergence", None)
        drift = f.obj("drift", None)
        return cls(
            identical=identical,
            n_baseline=f.integer("n_baseline", minimum=0),
            n_speculative=f.integer("n_speculative", minimum=0),
            common_prefix=f.integer("common_prefix", minimum=0),
            token_similarity=f.number("token_similarity"),
            edit_distance=f.integer("edit_distance", minimum=0),
            opcodes=tuple(opcodes),
            divergence=None
            if divergence is None
            else Divergence.from_dict(divergence.data, divergence.where),
            drift=None if drift is None else Drift.from_dict(drift.data, drift.where),
        )
