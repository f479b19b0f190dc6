"""What the offloader does beyond ordering (tests/test_offload_ordering.py): a stash of copies in
flight, reloads prefetched one region ahead, no leaks across steps without backward, a host-memory
limit, non-dense sources; all with the gradients of the unwrapped model."""

import itertools
import sys

import pytest
import torch

import ckptlib
from ckptlib import CheckpointConfig, synthetic
from ckptlib.predict import predict
from tests.support import recording_streams

SCHEDULES = [(None, None), (2, None), (2, 4)]
BACKENDS = ["unsloth", "unsloth-ffn"]
DEPTHS = [1, 2, 4, 16]


def run_step(config, steps=1, training="full"):
    work = synthetic.build("tiny", training=training)
    work.optimizer = None
    handle = ckptlib.apply(work.model, config, work.spec) if config is not None else None
    for _ in range(steps):
        for p in work.model.parameters():
            p.grad = None
        torch.manual_seed(3)  # dropout draws
        loss = work.step()
    return loss, {n: p.grad for n, p in work.model.named_parameters()}, handle


def config(backend="unsloth", schedule=(None, None), **kwargs):
    return CheckpointConfig(backend, *schedule, min_offload_bytes=0, **kwargs)


@pytest.mark.parametrize("backend, schedule, depth", list(itertools.product(BACKENDS, SCHEDULES, DEPTHS)))
def test_gradients_are_bitwise_equal_for_every_stash_depth(monkeypatch, backend, schedule, depth):
    reference_loss, reference, _ = run_step(None)
    log = recording_streams.install(monkeypatch)
    recording_streams.watch_unpack(monkeypatch, log)
    loss, grads, handle = run_step(config(backend, schedule, offload_stash_depth=depth))
    assert torch.equal(loss, reference_loss)
    assert all(torch.equal(grads[k], g) for k, g in reference.items())
    assert recording_streams.ordering_violations(log) == []
    offloaded = handle.report.offload["tensors_offloaded"]
    assert recording_streams.max_in_flight(log) == min(depth, offloaded)
    assert handle.report.offload["max_copies_in_flight"] == min(depth, offloaded)


def reload_order(log):
    """Forward order of the host buffers, and per host: where its reload was issued, on which
    stream, and where the reloaded tensor was first used."""
    hosts = [entry[3] for entry in log if entry[0] == "to_host"]
    issued, used = {}, {}
    destination_of = {}
    for i, entry in enumerate(log):
        if entry[0] == "to_device":
            issued[entry[2]] = (i, entry[1])
            destination_of[entry[3]] = entry[2]
        elif entry[0] == "use" and entry[1] in destination_of:
            used.setdefault(destination_of[entry[1]], i)
    return hosts, issued, used


def test_prefetch_reloads_the_next_region_while_this_one_is_recomputed(monkeypatch):
    """unsloth layer offloads one tensor per block: block k-1's reload is issued on the prefetch
    stream before block k's reloaded input is used, and waited on only before its own use."""
    log = recording_streams.install(monkeypatch)
    recording_streams.watch_unpack(monkeypatch, log)
    _, _, handle = run_step(config())
    hosts, issued, used = reload_order(log)
    assert len(hosts) == len(set(hosts)) >= 3
    assert issued[hosts[-1]][1] == "compute"  # the first region of backward: nothing ran before it
    for later, earlier in zip(hosts[:0:-1], hosts[-2::-1]):
        assert issued[earlier][1] == "prefetch"
        assert issued[earlier][0] < used[later] < used[earlier]
    assert handle.report.offload["tensors_prefetched"] == len(hosts) - 1
    assert recording_streams.ordering_violations(log) == []
    # each prefetched tensor is marked as used on the compute stream (record_stream) before its use
    # (storage ids are reused once a tensor dies, so look between the reload and its use)
    for host in hosts[:-1]:
        start, end = issued[host][0], used[host]
        destination = log[start][3]
        assert ("use_on", "compute", destination) in log[start:end], host


def test_without_prefetch_each_reload_waits_for_its_own_region(monkeypatch):
    log = recording_streams.install(monkeypatch)
    recording_streams.watch_unpack(monkeypatch, log)
    _, _, handle = run_step(config(offload_prefetch=False))
    hosts, issued, used = reload_order(log)
    assert all(issued[h][1] == "compute" for h in hosts)
    assert all(used[later] < issued[earlier][0] for later, earlier in zip(hosts[:0:-1], hosts[-2::-1]))
    assert handle.report.offload["tensors_prefetched"] == 0


def test_a_cpu_never_prefetches_or_keeps_copies_in_flight():
    _, _, handle = run_step(config(offload_stash_depth=8))
    counters = handle.report.offload
    assert counters["tensors_prefetched"] == 0 and counters["max_copies_in_flight"] == 1


def test_forward_only_passes_leave_nothing_behind():
    """Three validation-style passes (grad enabled, no backward), then a normal step: the pool
    holds one step's worth again and the report counts the abandoned steps."""
    work = synthetic.build("tiny", training="lora")
    handle = ckptlib.apply(work.model, config(), work.spec)
    work.step()
    one_step = handle.report.pool["held_bytes"]
    for _ in range(3):
        work.model(*work.args, **work.kwargs)  # forward only
    work.step()
    report = handle.report
    assert report.abandoned_steps == 3
    assert report.pool["held_bytes"] == one_step > 0
    assert report.offload["tensors_reloaded"] == report.offload["tensors_offloaded"] > 0


def test_backward_of_a_reclaimed_step_is_refused():
    work = synthetic.build("tiny", training="lora")
    ckptlib.apply(work.model, config(), work.spec)
    stale = work.model(*work.args, **work.kwargs)
    work.model(*work.args, **work.kwargs)  # the next forward reclaims the first one's buffers
    with pytest.raises(RuntimeError, match="reclaimed when the next step's forward began"):
        stale.float().pow(2).mean().backward()


def test_a_full_host_keeps_the_rest_of_the_step_on_the_device(monkeypatch):
    """A host with almost nothing available: the pool refuses to grow, the remaining tensors stay
    on the device (recompute only), the step's gradients are unchanged and the report says so."""
    reference_loss, reference, _ = run_step(None)
    monkeypatch.setattr(sys.modules["ckptlib.wiring"], "available_host_bytes", lambda: 200_000)
    loss, grads, handle = run_step(config(host_memory_share=0.5))
    assert torch.equal(loss, reference_loss)
    assert all(torch.equal(grads[k], g) for k, g in reference.items())
    counters, pool = handle.report.offload, handle.report.pool
    assert counters["tensors_kept_host_full"] > 0 and pool["refused_over_limit"] == 1
    assert pool["peak_held_bytes"] <= 100_000


def test_a_non_dense_view_is_made_dense_on_the_compute_stream(monkeypatch):
    """A saved view with gaps (every other column) is copied dense first, counted, and reloaded
    with the right values."""
    log = recording_streams.install(monkeypatch)
    from ckptlib.offload import Offloader
    from ckptlib.pool import HostPool

    offloader = Offloader(HostPool(4, pin=False), min_bytes=0)
    x = torch.randn(64, 64, requires_grad=True)
    with offloader.hooks():
        y = x * 2
        view = y[:, ::2]
        out = (view.sin()).sum()
    out.backward()
    assert torch.equal(x.grad, (2 * torch.cos(2 * x.detach())) * (torch.arange(64) % 2 == 0))
    assert offloader.counters.tensors_made_dense == 1
    assert recording_streams.ordering_violations(log) == []


@pytest.mark.parametrize(
    "bad, message",
    [({"offload_stash_depth": 0}, "offload_stash_depth must be 1 or more")]
    + [({"host_memory_share": v}, "host_memory_share must be in") for v in (0, 1.5)],
)
def test_bad_offload_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        CheckpointConfig("unsloth", **bad)


def test_the_cuda_prediction_runs_the_stash_and_the_prefetch():
    """On the cuda device model sources stay live until their copy is waited on and reloads are
    prefetched, so both are in the predicted peak; the CPU model copies synchronously."""

    def predicted(device, **kwargs):
        return predict(synthetic.build, config(**kwargs), device, preset="cpu-256")

    deep = predicted("cuda", offload_stash_depth=16)
    assert deep.report["offload"]["max_copies_in_flight"] == deep.report["offload"]["tensors_offloaded"] > 1
    assert deep.report["offload"]["tensors_prefetched"] > 0
    assert deep.peak_bytes > predicted("cuda", offload_stash_depth=16, offload_prefetch=False).peak_bytes
    cpu = predicted("cpu", offload_stash_depth=16).report["offload"]
    assert cpu["max_copies_in_flight"] == 1 and cpu["tensors_prefetched"] == 0


def test_reloads_live_on_the_models_device_even_when_the_pool_reuses_buffers(monkeypatch):
    """One bucket for many same-sized regions: buffers go back to the pool and are taken again
    within the step. Every reloaded tensor is a device tensor of its own, never a view of a pool
    buffer (the pool hands that buffer to the next pack), and the gradients stay bitwise equal."""
    from ckptlib.offload import Offloader

    reference_loss, reference, _ = run_step(None, steps=2)
    buffers, reloaded = set(), []
    acquire, unpack = ckptlib.HostPool.acquire, Offloader.unpack

    def spy_acquire(self, *args):
        buffer = acquire(self, *args)
        if buffer is not None:
            buffers.add(buffer.tensor.untyped_storage().data_ptr())
        return buffer

    def spy_unpack(self, parked):
        out = unpack(self, parked)
        if out is not parked:
            reloaded.append(out)
        return out

    monkeypatch.setattr(ckptlib.HostPool, "acquire", spy_acquire)
    monkeypatch.setattr(Offloader, "unpack", spy_unpack)
    loss, grads, handle = run_step(config(pin_memory_max_buckets=1), steps=2)
    assert torch.equal(loss, reference_loss)
    assert all(torch.equal(grads[k], g) for k, g in reference.items())
    assert handle.report.pool["hits"] > 0  # buffers were reused
    assert reloaded and all(t.untyped_storage().data_ptr() not in buffers for t in reloaded)


def test_a_view_saved_twice_is_offloaded_once(monkeypatch):
    """sin and cos both save the same tensor: it is copied once, counted as deduplicated, the bytes
    offloaded are that one tensor's, and both backward uses get its values."""
    from ckptlib.offload import Offloader
    from ckptlib.pool import HostPool

    log = recording_streams.install(monkeypatch)
    offloader = Offloader(HostPool(4, pin=False), min_bytes=0)
    x = torch.randn(64, 64, requires_grad=True)
    with offloader.hooks():
        y = x * 2
        out = (y.sin() + y.cos()).sum()
    out.backward()
    assert torch.allclose(x.grad, 2 * (torch.cos(2 * x.detach()) - torch.sin(2 * x.detach())))
    counters = offloader.counters
    assert (counters.tensors_offloaded, counters.tensors_deduplicated) == (1, 1)
    assert counters.bytes_offloaded == y.numel() * y.element_size()
    assert [entry[0] for entry in log].count("to_host") == 1
