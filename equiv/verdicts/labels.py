"""Deprecated: `Label`, `Verdict` and `verdict_of` live in `equiv.records.verdict` (import them
from there, or `Label`/`Verdict` from `equiv`). Kept only until its last importers move; no new
import of this module.
"""

from equiv.records.verdict import Label, Verdict, verdict_of

__all__ = ["Label", "Verdict", "verdict_of"]
