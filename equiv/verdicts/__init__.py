"""Verdicts: how the two paths differ, why, and whether it matters.

Pure functions: no model is called, except through a re-scoring capability handed in.
"""
