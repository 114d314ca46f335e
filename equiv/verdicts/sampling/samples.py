"""One sampled result as the analysis of sampling mode reads it: `Sample`, with a `PathSample`
per path.

A result record holds, per path beside the generation, the evidence of `equiv.run.evidence`:
PIT entries under one instrument or another (``chain_pit``, ``target_pit``, ``batched_pit``,
``residual_pit``: ``[mass before, p of the token, p of the top token]`` per token;
``reported_pit``: only the tokens whose row a server reported sampling from, at
``reported_positions``), the sensitivities beside them (``chain_sensitivity``, ...), a
rejection sampler's judgements (``acceptance``: ``[a, accepted, q(x)]`` per judged draft
token), in process the positions outside the chain's support beyond rounding (``chain_far``),
a failed re-scoring (``rescore_error``). `Sample.from_dict` reads them from the record
as the file holds it (a JSON boundary: what it does not know it leaves); the tests of
`equiv.verdicts.sampling.pit_tests` and `equiv.verdicts.sampling.prompt_analysis` read the
typed sample. A key that is present with no
entries (an empty sample re-scored) is kept apart from one that is absent (not re-scored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from equiv.json_types import JSONObject, JSONValue, json_float, json_int, json_list, json_object
from equiv.records import PATHS, Drift, PathName, ResultRecord
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.sampling.token_evidence import TokenEvidence

__all__ = ["PathSample", "PitEntry", "Sample"]

#: ``(mass ranked before the token, p of the token, p of the top token)``; for ``acceptance``
#: ``(a, accepted, q(x))``.
PitEntry = tuple[float, float, float]

_PITS = ("chain_pit", "target_pit", "batched_pit", "residual_pit", "reported_pit")
_SENSITIVITIES = tuple(key.replace("_pit", "_sensitivity") for key in _PITS)
_SCORES = tuple(key.replace("_pit", "_score") for key in _PITS)
#: ``(s, F, t)``: a token's likelihood score for the temperature, its variance and the top
#: token's derivative (`equiv.verdicts.sampling.token_evidence.TokenEvidence`); ``(s, F)`` in
#: files written before equiv recorded ``t``.
Score = tuple[float, ...]


def _entries(rows: Sequence[Sequence[float]]) -> tuple[PitEntry, ...]:
    return tuple((float(a), float(b), float(c)) for a, b, c in rows)


def _read_entries(rows: JSONValue) -> tuple[PitEntry, ...]:
    """PIT entries as the record holds them (a list of three-number lists)."""
    return _entries([[json_float(x) for x in json_list(row)] for row in json_list(rows)])


def _read_floats(values: JSONValue) -> tuple[float, ...]:
    return tuple(json_float(x) for x in json_list(values))


def _read_scores(rows: JSONValue) -> tuple[Score, ...]:
    return tuple(tuple(json_float(x) for x in json_list(row)) for row in json_list(rows))


@dataclass(frozen=True)
class PathSample:
    """One path's sample: its tokens and the evidence its record holds beside them."""

    tokens: tuple[int, ...] = ()
    #: PIT entries by their key in the record (``chain_pit``, ``target_pit``, ...).
    pits: Mapping[str, tuple[PitEntry, ...]] = field(default_factory=dict)
    #: Sensitivities by their key in the record (``chain_sensitivity``, ...).
    sensitivities: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: Likelihood scores by their key in the record (``chain_score``, ...); absent in files
    #: written before equiv recorded them.
    scores: Mapping[str, tuple[Score, ...]] = field(default_factory=dict)
    acceptance: tuple[PitEntry, ...] | None = None  # None: the engine reports no judgements
    #: Per judged position, each acceptance-rule direction's ``(s, V, lowest, highest)``
    #: (`equiv.verdicts.sampling.rule_scores`); None: no judgements, or an older file.
    rule_scores: tuple[tuple[float, ...], ...] | None = None
    rescore_error: str | None = None
    #: The token indices of ``reported_pit``'s entries; None in files written before equiv
    #: recorded them.
    reported_positions: tuple[int, ...] | None = None
    #: In process, the token indices outside the chain's support beyond rounding
    #: (`equiv.verdicts.sampling.support.far_outside`, ``chain_far``); None where the record
    #: holds none (over HTTP, or files written before equiv counted them).
    far_outside: tuple[int, ...] | None = None

    @classmethod
    def from_dict(cls, data: JSONObject) -> PathSample:
        """One path of a result record as the file holds it (``tokens`` required)."""
        acceptance = data.get("acceptance")
        rule = data.get("rule_score")
        error = data.get("rescore_error")
        positions = data.get("reported_positions")
        far = data.get("chain_far")
        return cls(
            tokens=tuple(json_int(t) for t in json_list(data["tokens"])),
            pits={k: _read_entries(data[k]) for k in _PITS if k in data},
            sensitivities={k: _read_floats(data[k]) for k in _SENSITIVITIES if k in data},
            scores={k: _read_scores(data[k]) for k in _SCORES if k in data},
            acceptance=None if acceptance is None else _read_entries(acceptance),
            rule_scores=None if rule is None else _read_scores(rule),
            rescore_error=None if error is None else str(error),
            reported_positions=(
                None if positions is None else tuple(json_int(i) for i in json_list(positions))
            ),
            far_outside=None if far is None else tuple(json_int(i) for i in json_list(far)),
        )

    def scored(self, key: str, evidence: TokenEvidence) -> PathSample:
        """This sample with its tokens' evidence under other rows added as ``key``
        (``batched``: ``batched_pit``, ``batched_sensitivity``, ``batched_score``)."""
        return dataclasses.replace(
            self,
            pits={**self.pits, f"{key}_pit": _entries(evidence.pits)},
            sensitivities={
                **self.sensitivities,
                f"{key}_sensitivity": tuple(float(x) for x in evidence.sensitivities),
            },
            scores={
                **self.scores,
                f"{key}_score": tuple(tuple(float(x) for x in e) for e in evidence.scores),
            },
        )


@dataclass(frozen=True)
class Sample:
    """One seed of a sampled prompt: both paths' samples, the drift between the speculative
    rows and their re-scoring, and the re-scoring's fidelity on the baseline."""

    key: str
    baseline: PathSample
    speculative: PathSample
    rescore_drift: Drift | None = None
    rescore_fidelity: Fidelity | None = None

    def path(self, name: str) -> PathSample:
        """``baseline`` or ``speculative``."""
        return self.speculative if name == "speculative" else self.baseline

    def with_path(self, name: str, sample: PathSample) -> Sample:
        """This seed with ``name``'s sample replaced by ``sample``."""
        if name == "speculative":
            return dataclasses.replace(self, speculative=sample)
        return dataclasses.replace(self, baseline=sample)

    @classmethod
    def of(cls, record: ResultRecord) -> Sample:
        """A result record's sample (its evidence as `ResultRecord.evidence` holds it)."""
        paths = {
            path: PathSample.from_dict(
                {**record.evidence.get(path, {}), "tokens": record.generation(path).tokens}
            )
            for path in PATHS
        }
        fidelity = record.extra.get("rescore_fidelity")
        return cls(
            key=record.key,
            baseline=paths[PathName.BASELINE],
            speculative=paths[PathName.SPECULATIVE],
            rescore_drift=record.rescore_drift,
            rescore_fidelity=Fidelity.from_dict(json_object(fidelity)) if fidelity else None,
        )

    @classmethod
    def from_dict(cls, data: JSONObject) -> Sample:
        """A result record as the file holds it (`equiv.records.ResultRecord.to_dict`)."""
        drift = data.get("rescore_drift")
        fidelity = data.get("rescore_fidelity")
        return cls(
            key=str(data["key"]),
            baseline=PathSample.from_dict(json_object(data["baseline"])),
            speculative=PathSample.from_dict(json_object(data["speculative"])),
            rescore_drift=Drift.from_dict(json_object(drift)) if drift else None,
            rescore_fidelity=Fidelity.from_dict(json_object(fidelity)) if fidelity else None,
        )
