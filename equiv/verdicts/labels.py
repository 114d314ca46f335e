"""The labels equiv gives and the verdict that carries one with its evidence: defined with the
records that hold them (`equiv.records.verdict`), named here for the verdicts and their readers.
"""

from equiv.records.verdict import Label, Verdict, verdict_of

__all__ = ["Label", "Verdict", "verdict_of"]
