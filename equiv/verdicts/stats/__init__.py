"""Distribution tests as small pure functions on counts, samples and probabilities.

Every test returns a frozen `TestResult`; none of them calls a model. Import them from here; the
modules below are how they are kept:

- `result`: `TestResult` and the checks every test shares;
- `power`: power and minimum detectable effect of the chi-square tests (Cohen's ``w``);
- `one_sample`: a sample against the distributions it was stated to be drawn from (PIT, top
  token, temperature; forced decisions and acceptance rate of a rejection sampler);
- `two_sample`: two samples against each other (chi-square homogeneity, KS, Mann-Whitney);
- `multiple_testing`: Holm and Benjamini-Hochberg adjusted p-values.
"""

from equiv.verdicts.stats.multiple_testing import benjamini_hochberg, holm
from equiv.verdicts.stats.one_sample import (
    FORCED_TOL,
    acceptance_rate_test,
    forced_decisions_test,
    pit_uniformity_test,
    randomized_pit,
    temperature_test,
    top_token_test,
)
from equiv.verdicts.stats.power import chi2_power, min_detectable_w
from equiv.verdicts.stats.result import TestResult
from equiv.verdicts.stats.two_sample import chi2_two_sample, ks_two_sample, mann_whitney

__all__ = [
    "FORCED_TOL",
    "TestResult",
    "acceptance_rate_test",
    "benjamini_hochberg",
    "chi2_power",
    "chi2_two_sample",
    "forced_decisions_test",
    "holm",
    "ks_two_sample",
    "mann_whitney",
    "min_detectable_w",
    "pit_uniformity_test",
    "randomized_pit",
    "temperature_test",
    "top_token_test",
]
