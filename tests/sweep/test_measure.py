"""The measure scenario: sec/step is the median of the measured steps only; on CUDA every call
names the cell's device, every timed step is bracketed by its synchronisation and the peaks are
reset after warmup (torch's own torch.cuda over fake C entry points, tests/support/fake_cuda.py);
exceptions map to the right status."""

import pytest
import torch

from sweep.config.cell import Cell
from sweep.run.classify import classify
from sweep.run.scenarios import MeasureSettings, measure_cell, timed_steps
from sweep.run.scenarios.devices import CpuDevice
from sweep.vocabulary import Status


class ScriptedStep:
    """A step that takes the scripted seconds on a fake clock."""

    def __init__(self, durations):
        self.durations, self.now, self.calls = list(durations), 0.0, 0

    def clock(self):
        return self.now

    def __call__(self):
        self.now += self.durations[self.calls]
        self.calls += 1
        return torch.tensor(1.0)


def test_sec_per_step_is_the_median_of_the_measured_steps_only():
    from sweep.store.results import step_statistics

    step = ScriptedStep([9.0, 7.0, 1.0, 2.0, 3.0, 100.0, 4.0])  # 2 slow warmup steps, one outlier
    samples, losses, _ = timed_steps(step, CpuDevice(), warmup_steps=2, steps=5, clock=step.clock)
    assert [warm for _, warm in samples] == [True, True, False, False, False, False, False]
    stats = step_statistics(samples)
    assert stats["sec_per_step"] == 3.0 and stats["mean_s"] == 22.0 and stats["first_step_s"] == 9.0
    assert (stats["warmup_steps"], stats["steps"]) == (2, 5) and losses == [1.0] * 7


def test_the_last_warmup_step_finds_the_peak_and_kernels_that_a_step_after_the_timed_ones_finds(monkeypatch):
    """NOTE [ What the last warmup step watches ]: with two warmup steps a cell runs its steps and
    nothing more, and finds the CPU peak and attention kernels that a cell with one warmup step
    finds with one watched step after its timed steps."""
    from ckptlib.workload import Workload

    passes = []
    step = Workload.step
    monkeypatch.setattr(Workload, "step", lambda work: passes.append(1) or step(work))
    cell = Cell(**CPU_BUILT, mode="layer", backend="torch", training="lora").as_dict()
    results = {}
    for warmup in (2, 1):
        passes.clear()
        results[warmup] = result = measure_cell(cell, MeasureSettings("cpu", warmup_steps=warmup, steps=1))
        assert result.status == Status.OK, result.reason
        assert len(passes) == warmup + 1 + (warmup < 2), warmup
    watched, apart = results[2], results[1]
    assert "memory_step_s" not in watched.timings and "memory_step_s" in apart.timings
    assert watched.peak_bytes == apart.peak_bytes and watched.breakdown == apart.breakdown
    assert watched.attention_backend == apart.attention_backend != "none"


@pytest.fixture
def cuda_steps(fake_cuda, monkeypatch):
    """Two fake H100s at torch's C boundary; each model forward logged among the CUDA calls."""
    fake_cuda.gpus.append(fake_cuda.gpus[0])
    fake_cuda.peak_bytes.update({0: 2**30, 1: 2**30})
    fake_cuda.alloc_retries.update({0: 3, 1: 3})
    original = torch.nn.Module.__call__

    def step_marker(module, *args, **kwargs):  # one entry per model forward: where a step runs
        if module.__class__.__name__ == "SyntheticTransformer":
            fake_cuda.calls.append(("forward",))
        return original(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__call__", step_marker)
    return fake_cuda


CPU_BUILT = dict(family="synthetic", builder="tests.support.cpu_builder.build", preset="tiny")

# the allocator's counters and synchronisation, each of one device
DEVICE_CALLS = {"_cuda_synchronize", "_cuda_memoryStats", "_cuda_resetPeakMemoryStats", "_cuda_setDevice"}


@pytest.mark.parametrize("device, index", [("cuda", 0), ("cuda:1", 1)])
def test_every_cuda_call_names_the_cells_device_and_brackets_each_step(cuda_steps, device, index):
    """torch.cuda's own functions run (only their C entry points are fake): an index-less `cuda`
    is device 0, and every synchronisation and counter is of the cell's device."""
    cell = Cell(**CPU_BUILT, mode="layer", backend="torch", training="lora").as_dict()
    result = measure_cell(cell, MeasureSettings(device, warmup_steps=2, steps=3))
    assert result.status == "ok", result.reason
    assert result.peak_bytes == 2**30 and result.peak_reserved_bytes == 2**31 and result.alloc_retries == 0
    assert result.device_name == "NVIDIA H100 80GB HBM3" and result.first_step_peak_bytes == 2**30
    calls = cuda_steps.calls
    assert [c[1] for c in calls if c[0] in DEVICE_CALLS] == [index] * sum(c[0] in DEVICE_CALLS for c in calls)
    names = [c[0] for c in calls]
    forwards = [i for i, name in enumerate(names) if name == "forward"]
    assert len(forwards) == 5  # the kernels are watched on the last warmup step: no probe of their own
    assert names.index("_cuda_setDevice") < forwards[0]
    for i in forwards:  # each step: synchronize, the step, synchronize
        assert names[i - 1] == "_cuda_synchronize" and names[i + 1] == "_cuda_synchronize"
    first_measured = forwards[2]
    resets = [i for i, name in enumerate(names) if name == "_cuda_resetAccumulatedMemoryStats"]
    assert resets and forwards[1] < resets[-1] < first_measured  # counters (alloc retries) exclude warmup
    peaks = [i for i, name in enumerate(names) if name == "_cuda_resetPeakMemoryStats"]
    assert forwards[1] < peaks[-1] < first_measured
    assert names.index("_cuda_memoryStats") > forwards[0]


def test_a_device_that_cannot_be_set_up_is_a_recorded_status(fake_cuda):
    """Setting up the device runs inside the scenario: a device CUDA refuses is a failed cell, not
    an exception out of the child's task."""
    cell = Cell(**CPU_BUILT, mode="none", backend="none").as_dict()
    result = measure_cell(cell, MeasureSettings("cuda:3", warmup_steps=0, steps=1))
    assert result.status == Status.FAILED and "invalid device ordinal" in result.reason


class Prediction:
    """A prediction between what CUDA can allocate on an H100 (79.18 GiB) and what NVML reports (79.65)."""

    peak_bytes, context_bytes, breakdown = round(79.4 * 2**30), 0, {}

    def fits(self, card_bytes):
        return self.peak_bytes <= card_bytes


def test_a_predicted_oom_skip_measures_the_card_by_what_cuda_can_allocate(fake_cuda, monkeypatch):
    from sweep.run.scenarios import measure

    monkeypatch.setattr(measure, "predict", lambda *args: Prediction())
    cell = Cell(**CPU_BUILT, mode="none", backend="none").as_dict()
    result = measure_cell(cell, MeasureSettings("cuda", warmup_steps=0, steps=1, skip_predicted_oom=True))
    assert result.status == Status.PREDICTED_OOM and "exceeds the 79.18 GiB card" in result.reason, result.reason
    given = measure_cell(cell, MeasureSettings("cuda", 0, 1, skip_predicted_oom=True, card_bytes=80 * 2**30))
    assert given.status == Status.OK  # a card size given (card_gib) is taken as it is


class FakeDevice:
    def __init__(self, used):
        self.used = used

    def peak_bytes(self):
        return 79 * 2**30

    def used_fraction(self):
        return self.used


@pytest.mark.parametrize(
    "error, used, status",
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"), 0.99, Status.OOM),
        (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"), 0.5, Status.OOM),
        (RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)"), 0.99, Status.OOM),
        (
            RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)"),
            0.30,
            Status.FAILED,
        ),
        (RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"), 0.97, Status.OOM),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried"),
            0.1,
            Status.HOST_OOM,
        ),
        (MemoryError(), 0.1, Status.HOST_OOM),
        (ValueError("shapes do not match"), 0.99, Status.FAILED),
    ],
)
def test_exceptions_map_to_device_oom_host_oom_or_failure(error, used, status):
    result = classify(error, FakeDevice(used))
    assert result.status == status
    if status == Status.OOM:
        assert result.peak_at_oom_bytes == 79 * 2**30
    if "NOT_INITIALIZED" in str(error) and status == Status.OOM:
        assert "99% of the device in use" in result.reason
    if status == Status.FAILED:
        assert result.traceback is not None and result.peak_at_oom_bytes is None


def test_a_real_host_allocation_failure_is_a_host_oom():
    cell = Cell(
        family="synthetic",
        builder="ckptlib.synthetic.build",
        preset="tiny",
        mode="none",
        backend="none",
        shape={"tokens": 2**40},
    ).as_dict()
    result = measure_cell(cell, MeasureSettings("cpu", warmup_steps=0, steps=1))
    assert result.status == Status.HOST_OOM and "can't allocate memory" in result.reason


@pytest.mark.parametrize(
    "between, reason", [("under the weights", "its weights alone need"), ("over the weights", "predicted to need")]
)
def test_a_cpu_cell_over_the_host_budget_is_skipped_by_its_weights_or_its_prediction(between, reason):
    """Weights alone over the host's free memory: skipped with no prediction. Weights under it but
    the predicted step over it: skipped by the prediction. Nothing is built or run either way."""
    from ckptlib import synthetic
    from sweep.run.scenarios.measure import host_bounds

    cell = Cell(family="synthetic", builder="ckptlib.synthetic.build", preset="cpu-256", mode="none", backend="none")
    weights, _ = host_bounds(cell, synthetic.build)
    budget = weights // 2 if between == "under the weights" else weights + weights // 10
    result = measure_cell(cell.as_dict(), MeasureSettings("cpu", warmup_steps=0, steps=1, host_budget_bytes=budget))
    assert result.status == Status.PREDICTED_OOM and reason in result.reason, result.reason
    assert "run.allow_large_cpu=true measures it anyway" in result.reason
    assert "build_s" not in result.timings and (result.breakdown is None) == (between == "under the weights")


def test_a_gpu_cell_with_a_quantized_base_is_measured_without_a_prediction_first():
    """Its prediction would import the quantizer with the CPU settings meta builds need, before the
    GPU build: the cell goes straight to its measurement (nothing is built to predict it)."""
    from sweep.run.scenarios.measure import _predicted_not_to_fit

    def no_build(**kwargs):
        raise AssertionError(f"built to predict: {kwargs}")

    quantized = Cell("synthetic", "ckptlib.synthetic.build", "tiny", "layer", "torch", quantization="int8-sdnq")
    settings = MeasureSettings("cuda:0", warmup_steps=0, steps=1, skip_predicted_oom=True)
    assert _predicted_not_to_fit(quantized, quantized.checkpoint_config(), no_build, settings, 2**30, {}) is None
    plain = Cell("synthetic", "ckptlib.synthetic.build", "tiny", "layer", "torch")
    with pytest.raises(AssertionError, match="built to predict"):
        _predicted_not_to_fit(plain, plain.checkpoint_config(), no_build, settings, 2**30, {})


def test_a_cell_tells_its_shape_facts_and_its_record_takes_them_from_it(tmp_path, monkeypatch):
    """The child has the family's classes imported: it describes the cell's shape (Flux.1's latent
    tokens come from its diffusers class), and the sweep's own process records that description
    without describing it again (which would import the family's diffusers classes there)."""
    from sweep.run import app
    from sweep.store import database as store

    cell = Cell(family="flux1", builder="ckptlib.families.builders.flux1", preset="tiny", mode="none", backend="none")
    result = measure_cell(cell.as_dict(), MeasureSettings("cpu", warmup_steps=0, steps=1))
    assert result.status == Status.OK
    assert result.shape == {
        "tokens": 16, "text_tokens": 8, "height": 64, "width": 64, "frames": None,
        "batch": 2, "samples_per_step": 2, "sample_unit": "images",
    }  # fmt: skip
    engine = store.open_store(f"sqlite:///{tmp_path / 'r.db'}")
    state = app.RunState(engine, store.get_or_create_run(engine, "shape", "cpu"), "cpu", "cpu", {})
    monkeypatch.setattr(app, "describe_shape", lambda *args: pytest.fail("described again in the sweep's process"))
    app.record(cell, state, result)
    with engine.connect() as connection:
        row = connection.exec_driver_sql("select tokens, height, samples_per_s from cells").one()
    assert row[:2] == (16, 64) and row[2] == pytest.approx(2 / result.sec_per_step)
    engine.dispose()
