"""The offloader's CUDA control flow, driven on a CPU by recording streams
(tests/support/recording_streams.py), and through torch's own stream and event code on a fake CUDA
host (tests/support/fake_cuda.py): every ordering of NOTE [ Offload ordering ] holds, and the
gradients are those of the unwrapped model."""

import itertools
import weakref

import pytest
import torch

import ckptlib
from ckptlib import CheckpointConfig, streams, synthetic
from ckptlib.memory import storage_id
from tests.support import recording_streams

SCHEDULES = [(None, None), (2, None), (2, 4)]
# Every offloading combination that moves something (attention offload inside a recomputed block
# has nothing to move: only seg2-stride4's plain blocks offload under torch).
CASES = [
    (backend, schedule, False) for backend, schedule in itertools.product(["unsloth", "unsloth-ffn"], SCHEDULES)
] + [
    ("none", (None, None), True),
    ("torch", (2, 4), True),
    ("unsloth", (2, 4), True),
    ("torch-ffn", (None, None), True),
]


def gradients(config):
    work = synthetic.build("tiny", training="full")
    work.optimizer = None
    if config is not None:
        ckptlib.apply(work.model, config, work.spec)
    torch.manual_seed(3)  # dropout draws
    loss = work.step()
    return loss, {n: p.grad for n, p in work.model.named_parameters()}


@pytest.mark.parametrize("backend, schedule, offload_attention", CASES)
def test_every_copy_is_ordered_and_gradients_are_unchanged(monkeypatch, backend, schedule, offload_attention):
    reference_loss, reference = gradients(None)
    log = recording_streams.install(monkeypatch)
    recording_streams.watch_unpack(monkeypatch, log)
    loss, grads = gradients(
        CheckpointConfig(backend, *schedule, offload_attention=offload_attention, min_offload_bytes=0)
    )
    assert torch.equal(loss, reference_loss)
    assert all(torch.equal(grads[k], g) for k, g in reference.items())
    kinds = [entry[0] for entry in log]
    assert kinds.count("to_host") > 0 and kinds.count("to_host") == kinds.count("to_device")
    assert kinds.count("use") >= kinds.count("to_device")
    assert recording_streams.ordering_violations(log) == []


def test_reused_host_buffers_wait_for_the_reload_that_read_them(monkeypatch):
    """One bucket, several steps: every later copy into a buffer follows the reload that last read it."""
    log = recording_streams.install(monkeypatch)
    work = synthetic.build("tiny", training="lora")
    ckptlib.apply(work.model, CheckpointConfig("unsloth", min_offload_bytes=0, pin_memory_max_buckets=1), work.spec)
    for _ in range(3):
        work.step()
    hosts = [entry[3] for entry in log if entry[0] == "to_host"]
    assert len(hosts) > len(set(hosts))  # buffers were reused across steps
    assert recording_streams.ordering_violations(log) == []


def test_the_checker_sees_a_missing_wait():
    """The checker itself: logs with each ordering broken are reported."""
    copy_without_wait = [("to_host", "copy", 1, 100), ("free", 1)]
    assert any("ordering 1" in p for p in recording_streams.ordering_violations(copy_without_wait))
    freed_early = [("record", "compute", 0), ("wait", "copy", 0), ("to_host", "copy", 1, 100), ("free", 1)]
    assert any("ordering 2" in p for p in recording_streams.ordering_violations(freed_early))
    overwritten = [
        ("record", "compute", 0),
        ("wait", "copy", 0),
        ("to_host", "copy", 1, 100),
        ("to_device", "compute", 100, 2),
        ("record", "compute", 1),
        ("record", "compute", 2),
        ("wait", "copy", 0),
        ("to_host", "copy", 3, 100),
    ]
    assert any("ordering 3" in p for p in recording_streams.ordering_violations(overwritten))
    early_use = [("to_device", "prefetch", 100, 2), ("use", 2)]
    assert "1: a reloaded tensor used before the compute stream waited on its copy" in (
        recording_streams.ordering_violations(early_use)
    )
    read_early = [("record", "compute", 0), ("wait", "copy", 0), ("to_host", "copy", 1, 100)]
    read_early += [("record", "copy", 1), ("to_device", "prefetch", 100, 2)]
    assert any("ordering 4" in p for p in recording_streams.ordering_violations(read_early))
    waited = read_early[:-1] + [("wait", "prefetch", 1), ("to_device", "prefetch", 100, 2)]
    assert recording_streams.ordering_violations(waited) == []


class CpuKernelStreams(streams.CudaStreams):
    """ckptlib's CUDA streams, over torch's own torch.cuda.Stream, Event and stream context on the
    fake CUDA host. Only the two tensor kernels the CPU has no CUDA form of are logged here instead:
    the copies (with the stream torch.cuda says is current) and record_stream."""

    def __init__(self, fake):
        super().__init__(torch.device("cuda"))
        self.fake = fake

    def _current(self) -> int:
        return torch.cuda.current_stream().stream_id

    def to_host(self, host, source) -> None:
        sid = storage_id(source)
        self.fake.calls.append(("to_host", self._current(), sid, storage_id(host)))
        weakref.finalize(source.untyped_storage(), self.fake.calls.append, ("free", sid))
        host.copy_(source)

    def to_device(self, destination, host) -> None:
        self.fake.calls.append(("to_device", self._current(), storage_id(host), storage_id(destination)))
        destination.copy_(host)

    def use_on(self, tensor, stream) -> None:
        self.fake.calls.append(("use_on", stream.stream_id, storage_id(tensor)))


def as_recorded(calls: list, names: dict) -> list:
    """The fake host's log in tests/support/recording_streams.py's terms (stream ids as names)."""
    kinds = {"event_record": "record", "event_wait": "wait"}
    log = []
    for entry in calls:
        if entry[0] in kinds:
            log.append((kinds[entry[0]], names[entry[1]], entry[2]))
        elif entry[0] in ("to_host", "to_device", "use_on"):
            log.append((entry[0], names[entry[1]], *entry[2:]))
        elif entry[0] in ("free", "use"):
            log.append(entry)
    return log


@pytest.mark.parametrize("backend, schedule, offload_attention", [("unsloth", (None, None), False), CASES[-1]])
def test_the_offloader_orders_its_copies_through_torchs_own_stream_code(
    fake_cuda, monkeypatch, backend, schedule, offload_attention
):
    reference_loss, reference = gradients(None)
    cuda_streams = CpuKernelStreams(fake_cuda)
    monkeypatch.setattr("ckptlib.streams.streams_for", lambda device: cuda_streams)
    recording_streams.watch_unpack(monkeypatch, fake_cuda.calls)
    loss, grads = gradients(
        CheckpointConfig(backend, *schedule, offload_attention=offload_attention, min_offload_bytes=0)
    )
    assert torch.equal(loss, reference_loss) and all(torch.equal(grads[k], g) for k, g in reference.items())
    created = [entry for entry in fake_cuda.calls if entry[0] == "new_stream"]
    assert [entry[1] for entry in created] == [0] * len(created) and 1 <= len(created) <= 2  # on cuda:0
    names = {0: "compute", cuda_streams.copy_stream().stream_id: "copy"}
    names[cuda_streams.prefetch_stream().stream_id] = "prefetch"
    log = as_recorded(fake_cuda.calls, names)
    assert sum(entry[0] == "to_host" for entry in log) > 0
    assert recording_streams.ordering_violations(log) == []
