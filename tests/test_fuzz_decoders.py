"""A short fuzz run over every decoder (the 100 000-input run is `benchmarks/fuzz.py`)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from benchmarks import fuzz
from nri_topology.topology.model import Machine
from nri_topology.ttrpc.codec import FrameDecoder
from tests import machines


@pytest.fixture(scope="module")
def machine() -> Machine:
    return machines.load("server")


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    with fuzz.quiet():
        yield


@pytest.mark.parametrize(
    ("target", "run"),
    [
        ("ttrpc-frames", fuzz.fuzz_frames),
        ("ttrpc-envelopes", fuzz.fuzz_envelopes),
        ("mux-frames", fuzz.fuzz_mux),
    ],
)
def test_decoders_never_crash(target: str, run) -> None:
    report = run(random.Random(7), 1500)
    assert report.target == target
    assert report.crashes == 0, report.crash_examples
    # the inputs really exercise both sides: some decode, some are refused
    assert report.outcomes["accepted"] > 0
    assert report.outcomes["refused"] > 0


def test_nri_payloads_through_the_socket_never_crash(machine: Machine) -> None:
    report = fuzz.fuzz_nri(random.Random(7), 600, machine)
    assert report.inputs == 600
    assert report.crashes == 0, report.crash_examples
    for outcome in ("answered", "not decodable", "refused by the policy"):
        assert report.outcomes[outcome] > 0, report.outcomes


def test_a_decoder_that_raises_is_reported_as_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: FrameDecoder, data: bytes) -> list:
        raise IndexError("boom")

    monkeypatch.setattr(FrameDecoder, "feed", broken)
    report = fuzz.fuzz_frames(random.Random(1), 50)
    assert report.crashes > 0
    assert "IndexError: boom" in report.crash_examples[0]


def test_mutations_are_seeded() -> None:
    data = bytes(range(40))
    assert fuzz.mutate(random.Random(3), data) == fuzz.mutate(random.Random(3), data)


def test_hostile_annotations_through_the_socket_never_crash(machine: Machine) -> None:
    report = fuzz.fuzz_annotations(random.Random(7), 200, machine)
    assert report.inputs == 200
    assert report.crashes == 0, report.crash_examples
    assert report.max_ms < fuzz.RUNTIME_TIMEOUT * 1000
    for outcome in ("answered", "refused by the policy"):
        assert report.outcomes[outcome] > 0, report.outcomes
