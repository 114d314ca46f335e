"""`TestResult`, the outcome every test of `equiv.verdicts.stats` returns, and the checks the
tests share (the level ``alpha``, too little data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from equiv.errors import ConfigError
from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode

__all__ = ["FloatArray", "TestResult", "check_alpha", "not_enough"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TestResult:
    """One hypothesis test's outcome; ``rejects`` is ``p_value < alpha``. ``n``: sample size;
    ``df``: degrees of freedom; ``power``: chance to reject at the effect size ``detail`` names
    (None if not computable); ``effect``: the observed effect size, of the kind ``detail`` names.
    """

    __test__: ClassVar[bool] = False  # not a pytest test class, despite its name

    name: str
    statistic: float
    p_value: float
    alpha: float
    n: int
    df: int | None
    power: float | None
    effect: float | None
    detail: str

    @property
    def rejects(self) -> bool:
        return self.p_value < self.alpha

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> TestResult:
        return decode(cls, data, "test")


def check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha={alpha!r} is outside (0, 1); pass a value such as 0.01")


def not_enough(name: str, alpha: float, n: int, why: str) -> TestResult:
    return TestResult(name, 0.0, 1.0, alpha, n, None, 0.0, None, f"not enough data: {why}")
