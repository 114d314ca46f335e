"""Whole runs: summaries, a run's drift, two runs compared."""
