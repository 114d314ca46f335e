"""The records of a run and the results file that holds them, the run's source of truth.

- `equiv.records.generation`: what one engine path produced (`Generation`, its draft rounds and
  top-k), and the figures derived from it: draft counts, decode speed, speed-up (each computed
  there only);
- `equiv.records.comparison`: the comparison of two generations as recorded, and `Drift`, the one
  type for how far two sets of logits rows are apart;
- `equiv.records.kinds`: the five kinds of line (`Kind`), the schema version, and the sampling
  run's `AnalysisRecord` and `RunRecord` (the run's own answer at temperature > 0) and the
  `EventRecord`; `equiv.records.header`: `HeaderRecord`; `equiv.records.result`: `ResultRecord`;
  each validated on reading (`FieldError` names the field);
- `equiv.records.verdict`: the `Label` a result gets and the `Verdict` that carries it;
- `equiv.records.reader`: a line as its record (`parse_record`), the file read once into typed
  records with every unreadable line named (`LineProblem`, `ResultsContents`);
- `equiv.records.file`: `ResultsFile`, read through the reader, appended one whole line at a
  time.
"""

from equiv.records.comparison import ArgmaxFlips, Comparison, Divergence, Drift
from equiv.records.fields import FieldError
from equiv.records.file import ResultsFile
from equiv.records.generation import (
    PATHS,
    DraftStep,
    Generation,
    Judgement,
    PathName,
    TokenAlternatives,
    decode_rate,
    speedup,
)
from equiv.records.header import HeaderRecord
from equiv.records.kinds import (
    RUN_KEY,
    SCHEMA_VERSION,
    AnalysisRecord,
    Control,
    EventRecord,
    Kind,
    RunRecord,
    analysis_key,
)
from equiv.records.reader import LineProblem, Record, ResultsContents, parse_record
from equiv.records.result import ResultRecord
from equiv.records.verdict import Label, Verdict

__all__ = [
    "PATHS",
    "RUN_KEY",
    "SCHEMA_VERSION",
    "AnalysisRecord",
    "ArgmaxFlips",
    "Comparison",
    "Control",
    "Divergence",
    "DraftStep",
    "Drift",
    "EventRecord",
    "FieldError",
    "Generation",
    "HeaderRecord",
    "Judgement",
    "Kind",
    "Label",
    "LineProblem",
    "PathName",
    "Record",
    "ResultRecord",
    "ResultsContents",
    "ResultsFile",
    "RunRecord",
    "TokenAlternatives",
    "Verdict",
    "analysis_key",
    "decode_rate",
    "parse_record",
    "speedup",
]
