"""The header a run writes first: the configuration, both paths' fingerprints and capabilities,
how the two paths differ (`fingerprint_differences`), the servers' facts, and the machine the
numerics ran on."""

from __future__ import annotations

import sys
import time

from equiv import __version__
from equiv.config import RunConfig
from equiv.engines.base import Engine, server_facts
from equiv.json_types import JSONObject
from equiv.records import HeaderRecord
from equiv.records.machine import Machine
from equiv.verdicts.temp0.classify import fingerprint_differences

__all__ = ["run_header"]


def run_header(
    config: RunConfig,
    baseline: Engine,
    speculative: Engine,
    *,
    command: str = "",
    extra: JSONObject | None = None,
) -> HeaderRecord:
    """The header of a run of ``config`` on these engines, started by ``command``; ``extra``:
    what else the run knows (vocabulary, argv, ...)."""
    fingerprints = {"baseline": baseline.fingerprint(), "speculative": speculative.fingerprint()}
    differences = fingerprint_differences(fingerprints["baseline"], fingerprints["speculative"])
    servers = {
        engine.path: facts
        for engine in (baseline, speculative)
        if (facts := server_facts(engine)) is not None
    }
    # The machine the numerics ran on, with the in-process build's llama.cpp system info.
    system_info = next(
        (str(f["system_info"]) for f in fingerprints.values() if f.get("system_info")), ""
    )
    return HeaderRecord(
        equiv=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        command=command,
        python=sys.version.split()[0],
        machine=Machine.here(system_info=system_info),
        config=config.to_dict(),
        fingerprints=fingerprints,
        differences=tuple(differences),
        capabilities={
            "baseline": baseline.capabilities.to_dict(),
            "speculative": speculative.capabilities.to_dict(),
        },
        extra={**({"servers": servers} if servers else {}), **(extra or {})},
    )
