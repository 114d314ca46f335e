"""How much of an HTTP run's temperature estimate is the instrument's: the speculative tokens
whose sampled-from row the server reported, scored under that row and under the baseline's
single-token re-scoring, side by side.

Over HTTP the pooled temperature bound scores the speculative samples under the target's rows
re-scored on the baseline server. Where the speculative server reported the row it sampled a
token from (llama-server: outside a speculative step), the same token can be scored under both
rows; the difference of the two estimates is what the re-scored rows alone move it by (the
speculative server's own rows are not the baseline's: numeric drift). The baseline's tokens are
printed the same way as the control: their re-scoring is exact where the run's design says so.
The positions are those the run's ``:reported`` tests counted where its records keep them
(``reported_positions``), else every reported row that holds the chain's top-k.

Reads a results file of a sampling run over HTTP (no model, no server). Printed per path and
set of rows: positions, the temperature estimate ``λ - 1`` from the tokens' likelihood scores
(``Σ s / Σ F``, `TokenEvidence.scores`) with a 95 % half-width (samples as clusters, Student's
t), and the information ``Σ F``; then per path what the re-scored rows move the estimate by on
the same tokens (``Σ (s_rescored - s_own) / Σ F_own``, a paired difference, samples as
clusters: what `equiv.verdicts.sampling.drift_shift` reports at the run's level).

    python benchmarks/drift_temperature.py RUN/results.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.chain import penalised
from equiv.records import PATHS, ResultRecord, ResultsFile
from equiv.verdicts.sampling.placebo import cluster_ratio
from equiv.verdicts.sampling.pooled_bounds import difference_interval
from equiv.verdicts.sampling.token_evidence import chain_evidence

#: per set of rows: (score, information, sample) of each position
Scores = dict[str, list[tuple[float, float, int]]]


def positions(
    record: ResultRecord, n: int, path: str, sampling: SamplingConfig, out: Scores
) -> None:
    """Each position of ``path`` with a reported row (the record's ``reported_positions``
    where it has them, else every row holding the chain's top-k): its score and information
    under that row (``own``) and under the baseline's re-scoring (``rescored``)."""
    evidence = record.evidence.get(path, {})
    rescored = evidence.get("target_score")
    if not isinstance(rescored, list):
        return
    generation = record.generation(path)
    kept = evidence.get("reported_positions")
    for i, (alt, token) in enumerate(zip(generation.alternatives, generation.tokens, strict=False)):
        if len(alt.ids) < sampling.top_k or (isinstance(kept, list) and i not in kept):
            continue
        row = np.full((1, 1 + max(*alt.ids, token)), -np.inf, dtype=np.float32)
        row[0, list(alt.ids)] = alt.logits
        s, info, _ = chain_evidence(row, [token], sampling).scores[0]
        out[f"{path}, own rows"].append((s, info, n))
        theirs = rescored[i]
        assert isinstance(theirs, list)
        out[f"{path}, re-scored rows"].append((float(theirs[0]), float(theirs[1]), n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    contents = ResultsFile(args.results).read()
    if contents.header is None:
        raise SystemExit(f"{args.results}: no header; give a results file equiv wrote")
    sampling = RunConfig.from_dict(contents.header.config).sampling
    if sampling.top_k <= 0 or penalised(sampling):
        raise SystemExit("the run has no top-k or a penalty: its reported rows are not whole")
    scores: Scores = {f"{p}, {rows}": [] for p in PATHS for rows in ("own rows", "re-scored rows")}
    for n, record in enumerate(contents.results):
        for path in PATHS:
            positions(record, n, path, sampling, scores)
    print("| tokens | rows | positions | λ - 1 | 95 % half-width | information |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, values in scores.items():
        if not values:
            continue
        s, info, sample = np.array(values).T
        theta, var, m = cluster_ratio(s, info, sample)
        _, low, high = difference_interval((theta, var, m), (0.0, 0.0, m), 0.025)
        path, rows = name.split(", ")
        print(
            f"| {path} | {rows} | {len(values)} | {theta:+.4f} | {(high - low) / 2:.4f} "
            f"| {info.sum():.1f} |"
        )
    for path in PATHS:
        own, rescored = (np.array(scores[f"{path}, {r}"]) for r in ("own rows", "re-scored rows"))
        if len(own):  # the same tokens: a paired difference, samples as clusters
            shift = cluster_ratio(rescored[:, 0] - own[:, 0], own[:, 1], own[:, 2])
            estimate, low, high = difference_interval(shift, (0.0, 0.0, shift[2]), 0.025)
            interval = f"{estimate:+.4f} [{low:+.4f}, {high:+.4f}]"
            print(f"{path}: the re-scored rows move λ - 1 by {interval}")


if __name__ == "__main__":
    main()
