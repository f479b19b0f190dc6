"""ckptlib.predict: predicted peaks against measured tracked peaks of the same cells on CPU, the
device model's effects, and predictions through the sweep, report, diff and advise."""

import resource

import pytest
import torch

import ckptlib
from ckptlib import synthetic
from ckptlib.devices import DEVICE_MODELS
from ckptlib.families import builders
from ckptlib.memory import CATEGORIES, step_peak
from ckptlib.predict import predict

MODES = {
    "none": ckptlib.CheckpointConfig("none"),
    "layer": ckptlib.CheckpointConfig("torch"),
    "torch-ffn": ckptlib.CheckpointConfig("torch-ffn"),
    "unsloth": ckptlib.CheckpointConfig("unsloth", min_offload_bytes=0),
}
# Small but not trivial: several blocks, real attention lengths, every family's own block structure.
CASES = {
    "synthetic": (synthetic.build, {"preset": "cpu-256"}),
    "flux1": (builders.flux1, {"preset": "tiny", "height": 64, "width": 64}),
    "wan": (builders.wan, {"preset": "tiny", "height": 32, "width": 32, "frames": 5}),
    "sdxl": (builders.sdxl, {"preset": "tiny", "height": 64, "width": 64}),
    # a mixture of experts: each expert's tokens are a boolean mask's (NOTE [ Boolean masks on meta ])
    "hidream": (builders.hidream, {"preset": "tiny"}),
    # reads its captions' lengths from a mask in Python (NOTE [ Inputs read in Python ])
    "lumina2": (builders.lumina2, {"preset": "tiny"}),
    "omnigen": (builders.omnigen, {"preset": "tiny"}),  # and its largest position id
    # repeats its sequence by its layout mask, then selects rows by a mask made from it
    "qwen-image21": (getattr(builders, "qwen-image21"), {"preset": "tiny"}),
}
TOLERANCE = 0.05  # the bound is 10%; the fake run follows the real one op by op


def measured_peak(build, config, training, **kwargs):
    work = build(training=training, **kwargs)
    handle = ckptlib.apply(work.model, config, work.spec)
    work.step()
    tracker = step_peak(work, "cpu")
    handle.remove()
    return tracker


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", list(CASES))
def test_predicted_peak_is_within_5_percent_of_the_measured_tracked_peak(case, mode):
    build, kwargs = CASES[case]
    training = "full" if case == "synthetic" and mode == "none" else "lora"
    measured = measured_peak(build, MODES[mode], training, **kwargs)
    predicted = predict(build, MODES[mode], "cpu", training=training, **kwargs)
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= TOLERANCE, (predicted.peak_bytes, measured.peak_bytes)
    # The split is the same tracker's: weights and optimizer state match exactly.
    for category in ("parameters", "optimizer"):
        assert predicted.breakdown[category] == measured.peak_by_category.get(category, 0), category


def test_breakdown_adds_up_and_follows_the_mode():
    by_mode = {m: predict(synthetic.build, c, "cpu", preset="cpu-256", training="full") for m, c in MODES.items()}
    for prediction in by_mode.values():
        assert set(prediction.breakdown) == set(CATEGORIES)
        assert sum(prediction.breakdown.values()) == prediction.peak_bytes
        work = synthetic.build("cpu-256", training="full")
        assert prediction.breakdown["parameters"] == sum(p.numel() * 4 for p in work.model.parameters())
        assert prediction.breakdown["optimizer"] == 2 * prediction.breakdown["parameters"] + 4 * len(
            list(work.model.parameters())
        )  # exp_avg, exp_avg_sq and a step counter per parameter
    assert (
        by_mode["layer"].breakdown["activations"]
        < by_mode["torch-ffn"].breakdown["activations"]
        < by_mode["none"].breakdown["activations"]
    )
    assert by_mode["unsloth"].host_offload_bytes > 0 and by_mode["layer"].host_offload_bytes == 0
    assert (
        by_mode["unsloth"].report["offload"]["tensors_offloaded"] == 7
    )  # regions - 1: region 0 reads the caller's input


def test_a_12_gib_model_predicts_without_allocating_it():
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    prediction = predict(synthetic.build, MODES["layer"], "cuda", preset="large-3072", training="frozen")
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 2**20
    meta = synthetic.build("large-3072", training="frozen", device="meta")
    assert prediction.breakdown["parameters"] == sum(p.numel() for p in meta.model.parameters()) * 2  # bf16
    assert prediction.peak_bytes > 12 * 2**30 and grown_gib < 1.0


def test_cuda_device_model_rounds_adds_workspace_and_never_materialises_scores():
    cuda = DEVICE_MODELS["cuda"]
    prediction = predict(synthetic.build, MODES["none"], "cuda", preset="tiny", training="lora")
    assert prediction.breakdown["workspace"] == cuda.workspace_bytes
    assert prediction.peak_bytes % 512 == 0
    assert prediction.fits(prediction.peak_bytes + cuda.context_bytes)
    assert not prediction.fits(prediction.peak_bytes + cuda.context_bytes - 1)
    assert any("flash" in line for line in prediction.assumptions)

    def activations(tokens, device):
        shape = dict(preset="tiny", training="frozen", tokens=tokens, depth=1, dropout=0.1)
        return predict(synthetic.build, MODES["none"], device, **shape).breakdown["activations"]

    # Dropout sends CPU attention down the math path (scores kept: quadratic in tokens); the fused
    # kernel's memory is linear in tokens.
    cuda_growth = activations(2048, "cuda") / activations(1024, "cuda")
    cpu_growth = activations(2048, "cpu") / activations(1024, "cpu")
    assert cuda_growth == pytest.approx(2.0, rel=0.05) and cpu_growth > 3.0


def test_a_large_allocation_holds_its_whole_block_as_cudas_caching_allocator_does():
    """NOTE [ The caching allocator's large blocks ]: over 10 MiB, a request whose 2 MiB round-up leaves
    1 MiB or less holds the whole block (c10's shouldSplit: remaining > kSmallSize), so a 27 MiB activation
    counts 28 MiB; the prediction on `cuda` counts it so, where exact bytes would not."""
    from dataclasses import replace

    from ckptlib.memory import LiveTensorTracker, allocated_bytes

    mib = 2**20
    assert allocated_bytes(27 * mib, 512, large_blocks=True) == 28 * mib  # 1 MiB left: not split
    assert allocated_bytes(27 * mib + 512 * 1024, 512, large_blocks=True) == 28 * mib
    assert allocated_bytes(26 * mib + 512 * 1024, 512, large_blocks=True) == 26 * mib + 512 * 1024  # 1.5 MiB: split
    assert allocated_bytes(9 * mib + 1, 512, large_blocks=True) == 9 * mib + 512  # from a 20 MiB segment
    assert allocated_bytes(27 * mib, 512) == 27 * mib
    with LiveTensorTracker("meta", round_to=512, large_blocks=True) as tracker:
        kept = torch.empty(27 * mib, dtype=torch.uint8, device="meta")
    assert tracker.peak_bytes == 28 * mib and kept.numel() == 27 * mib
    # PixArt's hidden states: 3 x 4096 tokens x 1152 in bf16, 27 MiB each
    shape = dict(preset="tiny", training="frozen", width=1152, heads=16, tokens=4096, batch=3, depth=1)
    exact = replace(DEVICE_MODELS["cuda"], allocator_large_blocks=False)
    held = predict(synthetic.build, MODES["none"], "cuda", **shape).peak_bytes
    counted = predict(synthetic.build, MODES["none"], exact, **shape).peak_bytes
    assert DEVICE_MODELS["cuda"].allocator_large_blocks and held > counted and (held - counted) % mib == 0


def test_unknown_device_model_is_rejected():
    with pytest.raises(ValueError, match="unknown device model 'tpu'; known: cuda, cuda-pre-hopper, cpu"):
        predict(synthetic.build, MODES["none"], "tpu", preset="tiny")


def test_gradients_of_a_real_run_are_untouched_by_the_storage_identity_change():
    """Offload keys on storage identity (fake tensors have no data pointers): real runs still offload
    and deduplicate, and their gradients are those of the unwrapped model."""

    def gradients(config):
        work = synthetic.build("tiny", training="full")
        work.optimizer = None
        handle = ckptlib.apply(work.model, config, work.spec) if config else None
        torch.manual_seed(0)
        work.step()
        return {n: p.grad for n, p in work.model.named_parameters()}, handle

    reference, _ = gradients(None)
    grads, handle = gradients(ckptlib.CheckpointConfig("none", offload_attention=True, min_offload_bytes=0))
    assert all(torch.equal(grads[k], g) for k, g in reference.items())
    counters = handle.report.offload
    assert counters["tensors_offloaded"] > 0 and counters["tensors_reloaded"] == counters["tensors_offloaded"]


def test_the_trackers_answer_the_engines_device_queries_and_count_flops_without_another_mode():
    """NOTE [ Device queries ]: the backward's prim.device queries on fake tensors stop at the
    tracker (a mode below it sees none), and its FLOPs are those of FlopCounterMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from ckptlib.predict import StepCounter

    class Below(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func)
            return func(*args, **(kwargs or {}))

    def step():
        x = torch.randn(8, 16, requires_grad=True)
        w = torch.randn(16, 4, requires_grad=True)
        (x @ w).relu().sum().backward()

    with FakeTensorMode(), Below() as below, StepCounter() as counter:
        step()
    assert torch.ops.aten.mm.default in below.seen
    assert torch.ops.prim.device.default not in below.seen
    with FakeTensorMode(), FlopCounterMode(display=False) as reference:
        step()
    assert counter.flops == reference.get_total_flops() > 0


def test_a_storage_that_outlives_its_tracker_keeps_neither_the_tracker_nor_a_stale_count():
    """A plan's predictions share the frozen weights (ShallowPredictor's copies): each tracker
    registers them, and none may stay alive through them (finalizers would keep every one)."""
    import gc
    import weakref

    from ckptlib.memory import LiveTensorTracker

    weight = torch.empty(1024, device="meta")
    trackers = []
    for _ in range(3):
        with LiveTensorTracker("meta") as tracker:
            tracker.track(weight, category="parameters")
            activation = weight * 2
            assert tracker.live_bytes == 2 * weight.untyped_storage().nbytes()
            del activation
            assert tracker.live_bytes == weight.untyped_storage().nbytes()  # the activation's release counted
        trackers.append(weakref.ref(tracker))
        del tracker
    gc.collect()
    assert [alive() for alive in trackers] == [None, None, None]


def test_shallow_copies_share_frozen_meta_weights_and_copy_trainable_ones():
    from ckptlib.extrapolate import ShallowPredictor

    predictor = ShallowPredictor(synthetic.build, "cuda", preset="tiny", training="lora")
    first, second = (predictor._copy(dict(predictor.sizes))().model for _ in range(2))
    pairs = list(zip(first.parameters(), second.parameters(), strict=True))
    frozen = [(a, b) for a, b in pairs if not a.requires_grad]
    trainable = [(a, b) for a, b in pairs if a.requires_grad]
    assert frozen and trainable
    assert all(a is b for a, b in frozen)
    assert all(a is not b for a, b in trainable)


@pytest.mark.long
def test_simpletuners_attention_offload_keeps_each_forwarded_blocks_dropout_masks_on_the_device():
    """NOTE [ Attention offload inside a region ]: offloaded inside recomputed blocks, the attention's
    tensors that need no gradient stay on the device until its backward. With LoRA dropout (CUDA's
    one-byte masks) a block of Wan 2.1 1.3B at 480p, 81 frames holds a mask per adapted attention
    linear: q, k, v, out of self-attention and q, out of cross-attention on its 32760 image tokens of
    width 1536, k and v on 512 text tokens of width 4096. Under `layer` one block's masks are alive
    (in its recompute); under the docs' activation-offload, each block's from its forward on: two
    when the last of three blocks runs backward."""
    masks = 6 * 32760 * 1536 + 2 * 512 * 4096

    def rise(mode: str) -> int:
        peaks = [
            predict(builders.wan, ckptlib.MODES[mode], "cuda", preset="t2v-1.3b", training="lora",
                    keep_blocks={"blocks": 3}, lora_dropout=dropout).peak_bytes
            for dropout in (0.0, 0.1)
        ]  # fmt: skip
        return peaks[1] - peaks[0]

    assert rise("layer") == pytest.approx(masks, rel=0.05)
    assert rise("activation-offload") == pytest.approx(2 * masks, rel=0.05)


@pytest.mark.long
@pytest.mark.parametrize(
    "family,device,preset", [("kandinsky5", "cuda", "tiny"), ("flux1", "cuda", "tiny"), ("wan", "cpu", "tiny")]
)
def test_answers_from_the_meta_op_cache_change_no_prediction(family, device, preset, monkeypatch):
    """NOTE [ Meta, not fake ]: every mode predicted with ops answered from the cache equals the
    prediction that runs every meta kernel (Kandinsky 5's recompute reads an `_unsafe_view`, whose
    storage is its input's), in bf16 on the cuda device model and in fp32 on the cpu one."""
    from ckptlib.modes import MODES as DOCS_MODES
    from ckptlib.predict import META_OPS, MetaOpCache

    build = getattr(builders, family)
    modes = ("none", "layer", "unsloth", "seg2-stride4-offload", "activation-offload", "torch-ffn")

    def every_mode():
        found = []
        for mode in modes:
            p = predict(build, DOCS_MODES[mode], device, preset=preset, training="lora")
            found.append((mode, p.peak_bytes, p.stage_peaks, p.breakdown, p.flops, p.copied_bytes))
        return found

    hits = META_OPS.hits
    cached = every_mode()
    assert META_OPS.hits > hits  # the cache answered
    monkeypatch.setattr(MetaOpCache, "key", lambda *_: None)
    assert cached == every_mode()


def test_an_op_that_returns_its_inputs_storage_is_never_answered_from_the_cache():
    """`_unsafe_view` declares no alias yet returns its input's storage: a cached answer would be a
    new storage, counted again and freed apart from its input."""
    from ckptlib.memory import storage_id
    from ckptlib.predict import MetaOpCache, StepCounter

    cache = MetaOpCache()
    x = torch.empty(4, 6, device="meta")
    with StepCounter("meta", cache=cache):
        views = [torch.ops.aten._unsafe_view(x, [24]) for _ in range(2)]
        sums = [torch.ops.aten.add.Tensor(x, x) for _ in range(2)]
    assert all(storage_id(v) == storage_id(x) for v in views)
    assert cache.hits == 1 and storage_id(sums[0]) != storage_id(sums[1])  # the add was answered, afresh


def test_an_in_place_op_is_answered_with_its_first_argument_and_one_that_moves_a_layout_never():
    """`add_` writes data only: answered with its first argument (its version counter still moves:
    autograd bumps it above the cache); a foreach op (`_foreach_mul_`) with nothing, as its kernel
    returns. `t_` changes its argument's layout: it always runs."""
    from ckptlib.predict import MetaOpCache, StepCounter

    cache = MetaOpCache()
    x, y = torch.empty(4, 6, device="meta"), torch.empty(4, 6, device="meta")
    wide = [torch.empty(2, 3, device="meta") for _ in range(2)]
    with StepCounter("meta", cache=cache):
        added = [x.add_(y) for _ in range(2)]
        assert cache.hits == 1 and all(a is x for a in added) and x._version == 2
        scaled = [torch._foreach_mul_([x, y], 2.0) for _ in range(2)]
        assert cache.hits == 2 and all(s[0] is x for s in scaled)
        turned = [w.t_() for w in wide]
    assert cache.hits == 2 and [t.shape for t in turned] == [(3, 2), (3, 2)]


def test_the_cpu_device_model_runs_the_attention_kernel_the_cpu_picks():
    """On meta, SDPA decomposes into its math path (a score matrix saved); the cpu device model
    runs the CPU's flash kernel where the CPU picks it, so the prediction's attention saves what
    the measured CPU step saves (the math path's scores: 23% over it)."""
    kwargs = {"preset": "cpu-256", "training": "lora"}
    measured = measured_peak(synthetic.build, MODES["none"], **kwargs)
    predicted = predict(synthetic.build, MODES["none"], "cpu", **kwargs)
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) < 0.01, (predicted.peak_bytes, measured.peak_bytes)


@pytest.mark.long
def test_a_lokr_layer_saves_its_input_and_an_output_sized_intermediate_and_no_weight():
    """NOTE [ LoKr in bypass mode ]: over LoRA on the attention, a block of PixArt 900M at 1024 px
    (4096 image tokens, 300 text tokens, width 1152) without checkpointing also keeps, for every
    adapted Linear, its second matmul's input (tokens x out_k x in_m), and its feed-forward's two
    inputs (width 1152 and 4608), which LoRA on the attention leaves unsaved."""
    from ckptlib.adapters import LoKr, factorization
    from ckptlib.families import get

    lokr = LoKr({"Attention": 2, "FeedForward": 4})
    block = get("pixart").build_meta("900m-1024").transformer_blocks[0]
    targets = lokr.targets(block)
    text_inputs = {"attn2.to_k", "attn2.to_v"}

    def intermediate(name: str, factor: int) -> int:
        layer = block.get_submodule(name)
        tokens = 300 if name in text_inputs else 4096
        return tokens * factorization(layer.in_features, factor)[0] * factorization(layer.out_features, factor)[1] * 2

    expected = sum(intermediate(name, factor) for name, factor in targets.items()) + 4096 * (1152 + 4608) * 2

    def per_block(adapter: LoKr | None) -> int:
        """What one more block adds to the activations live at the peak (its adapters' own weights,
        gradients and optimizer state are other categories)."""
        saved = [
            predict(builders.pixart, MODES["none"], "cuda", preset="900m-1024", training="lora",
                    keep_blocks={"transformer_blocks": n}, lokr=adapter).breakdown["activations"]
            for n in (1, 2)
        ]  # fmt: skip
        return saved[1] - saved[0]

    assert len(targets) == 10 and text_inputs < set(targets)
    # what is live at the peak (in the last block's backward), not every tensor saved: within 10%
    assert per_block(lokr) - per_block(None) == pytest.approx(expected, rel=0.10)


def test_a_predictions_dispatch_modes_run_their_ops_without_dynamos_wrapper():
    """CompilesNothing: torch wraps a dispatch mode's `__torch_dispatch__` in torch._disable_dynamo,
    which costs more than a cached meta op; a prediction's modes are left unwrapped, a plain one not."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from ckptlib.predict import CachedMetaOps, HostMasksMeetMeta, StepCounter

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def wrapped(mode) -> bool:
        return hasattr(mode.__dict__["__torch_dispatch__"], "__wrapped__")

    assert wrapped(Plain)
    assert not any(map(wrapped, (CachedMetaOps, StepCounter, HostMasksMeetMeta)))
