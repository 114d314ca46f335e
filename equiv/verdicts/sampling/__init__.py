"""Temperature > 0: token evidence, samples, placebo, fidelity, PIT tests and the verdict."""
