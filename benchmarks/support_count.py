"""Tokens outside the configured chain's support, and those beyond rounding, per path, in the
sampled results of one or more in-process results files: the placebo of the support test
(`equiv.verdicts.sampling.support`). A correct sampler's count beyond rounding is 0.

    python benchmarks/support_count.py reports/<run>/results.jsonl [...]
"""

from __future__ import annotations

import argparse

from equiv.config import Mode
from equiv.records import PATHS
from equiv.records.file import ResultsFile
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.support import outside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="results.jsonl of in-process sampling runs")
    args = parser.parse_args()
    counts = {path: [0, 0, 0, 0] for path in PATHS}  # tokens, outside, beyond, unrecorded
    for name in args.files:
        for record in ResultsFile(name).read().results:
            if record.mode is not Mode.SAMPLING:
                continue
            sample = Sample.of(record)
            for path in PATHS:
                p = sample.path(path)
                pits = p.pits.get("chain_pit", ())
                counts[path][0] += len(pits)
                counts[path][1] += int(outside(pits).sum())
                counts[path][2] += len(p.far_outside or ())
                counts[path][3] += p.far_outside is None and bool(pits)
    for path, (tokens, out, far, older) in counts.items():
        note = f" ({older} samples not counted: typical-p, or written before)" if older else ""
        print(
            f"{path}: {tokens} tokens, {out} outside the chain's support, {far} beyond "
            f"rounding{note}"
        )


if __name__ == "__main__":
    main()
