"""The machine record: what a run's numerics depend on, in the header, the report and compare."""

from __future__ import annotations

import copy
import dataclasses

from equiv.records import HeaderRecord
from equiv.records.machine import SIMD_FLAGS, Machine
from equiv.report.header import environment
from equiv.verdicts.runs.compare import RunRecords, compare_runs
from equiv.verdicts.runs.setup_differences import setup_differences

EPYC = Machine(cpu="AMD EPYC", arch="x86_64", cores=2, simd=("avx", "avx2", "fma"))
XEON = Machine(
    cpu="Intel Xeon Platinum", arch="x86_64", cores=8, simd=("avx", "avx2", "fma", "avx512f")
)


def test_this_machine_is_described_with_its_numerics_relevant_features() -> None:
    here = Machine.here(system_info="CPU : AVX2 = 1 |")
    assert here.arch
    assert here.cores >= 1
    assert set(here.simd) <= set(SIMD_FLAGS)
    assert here.system_info == "CPU : AVX2 = 1 |"
    assert Machine.from_dict(here.to_dict()) == here
    assert here.arch in here.summary


def test_a_change_of_cpu_simd_or_gpu_is_named_and_cores_are_not() -> None:
    assert EPYC.changes(EPYC) == []
    more_cores = Machine(cpu="AMD EPYC", arch="x86_64", cores=64, simd=EPYC.simd)
    assert EPYC.changes(more_cores) == []  # the same kernels, more of them
    changes = EPYC.changes(XEON)
    assert changes == [
        "CPU AMD EPYC (x86_64) -> Intel Xeon Platinum (x86_64)",
        "SIMD +avx512f",
    ]
    gpu = Machine(cpu="AMD EPYC", arch="x86_64", cores=2, simd=EPYC.simd, gpus=("H200, 570",))
    assert EPYC.changes(gpu) == ["GPU none -> H200, 570"]
    builds = [Machine("c", "x", 1, system_info=info) for info in ("AVX2 = 1", "AVX512 = 1")]
    assert builds[0].changes(builds[1]) == ["llama.cpp system info differs"]


def test_the_header_keeps_the_machine_and_reads_files_without_one() -> None:
    header = HeaderRecord(config={"engine": "llamacpp"}, machine=EPYC)
    again = HeaderRecord.from_dict(header.to_dict())
    assert again.machine == EPYC
    old = {k: v for k, v in header.to_dict().items() if k != "machine"}
    assert HeaderRecord.from_dict(old).machine is None
    assert "machine" not in HeaderRecord.from_dict(old).to_dict()


def test_compare_names_a_change_of_machine_first() -> None:
    a = HeaderRecord(config={"n_threads": 2}, machine=EPYC)
    b = HeaderRecord(config={"n_threads": 2}, machine=XEON)
    setup = setup_differences(a, b)
    assert setup[0].startswith("machine: CPU AMD EPYC (x86_64) -> Intel Xeon Platinum")
    assert "SIMD +avx512f" in setup[0]
    assert "near-ties flip" in setup[0]
    assert "machine.cpu: AMD EPYC -> Intel Xeon Platinum" in setup
    assert setup_differences(a, copy.deepcopy(a)) == ()
    # A header written before the machine was recorded: no claim either way.
    before = HeaderRecord(config={})
    assert not any(s.startswith("machine: ") for s in setup_differences(before, b))


def test_compare_of_two_runs_from_different_machines_says_so() -> None:
    from equiv.records import ResultsFile

    a = RunRecords.from_file(ResultsFile("tests/fixtures/temp0_results.jsonl"), name="A")
    header_a = dataclasses.replace(a.header, machine=EPYC)
    header_b = dataclasses.replace(a.header, machine=XEON)
    c = compare_runs(
        RunRecords("A", header_a, a.results, a.analyses, a.events),
        RunRecords("B", header_b, a.results, a.analyses, a.events),
    )
    assert c.setup[0].startswith("machine: CPU AMD EPYC")
    assert any(line.startswith("setup: machine: CPU AMD EPYC") for line in c.lines())


def test_the_report_shows_the_machine() -> None:
    env = environment({"config": {}, "machine": XEON.to_dict()})
    assert ("machine", XEON.summary) in env.versions
    assert "avx512f" in XEON.summary
