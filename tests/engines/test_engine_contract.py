"""The written engine contract's optional capabilities (`equiv.engines.base`) on model-free
engines; `tests/run/test_evidence.py` has the evidence stage that asks for them."""

from __future__ import annotations

import pytest
from toy_engines import Plain, Served

from equiv.engines.base import (
    BatchRescoring,
    RescoreCost,
    RescoreCosting,
    batch_rescorer,
    check_engine,
    rescore_cost,
)
from equiv.engines.server.engine import ServerEngine
from equiv.errors import ConfigError


def test_the_server_engine_offers_both_capabilities():
    assert ServerEngine.rescores_batched is True
    assert callable(ServerEngine.take_rescore_cost)
    assert isinstance(Served(), BatchRescoring)
    assert isinstance(Served(), RescoreCosting)
    assert not isinstance(Plain(), BatchRescoring)
    assert not isinstance(Plain(), RescoreCosting)


def test_an_engine_with_only_the_core_fulfils_the_contract():
    engine = Plain()
    assert check_engine(engine, name="plain", speculative=False) is engine
    served = Served("speculative")
    assert check_engine(served, name="served", speculative=True) is served


def test_rescores_batched_must_be_a_bool():
    engine = Plain()
    engine.rescores_batched = "yes"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"rescores_batched 'yes'.*BatchRescoring"):
        check_engine(engine, name="odd", speculative=False)


def test_take_rescore_cost_must_be_a_method():
    engine = Plain()
    engine.take_rescore_cost = 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"take_rescore_cost that is not a method"):
        check_engine(engine, name="odd", speculative=False)


def test_the_baseline_rescores_batched_only_where_it_says_so():
    plain, served = (Plain(), Plain("speculative")), (Served(), Served("speculative"))
    assert batch_rescorer(*plain) is plain[1]
    assert batch_rescorer(*served) is served[0]
    off = Served()
    off.rescores_batched = False
    assert batch_rescorer(off, plain[1]) is plain[1]


def test_rescore_cost_is_taken_once_per_engine_and_none_without_a_counting_engine():
    assert rescore_cost([Plain(), Plain("speculative")]) is None
    one = Served()
    one.rescore([1], [2, 3], batched=False)
    assert rescore_cost([one, one]) == RescoreCost(requests=2, rows=2)
    assert rescore_cost([one]) == RescoreCost()  # taken
