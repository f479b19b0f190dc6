import itertools
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

import ckptlib
from ckptlib import (
    BACKENDS,
    BlockSpec,
    CheckpointConfig,
    UnsupportedModeError,
    synthetic,
)

# (interval, stride, blocks): uniform schedules, the first k blocks, an explicit block set
SCHEDULES = [(None, None), (2, None), (2, 4), (None, None, 3), (2, None, (1, 2, 5))]


def run_step(config, training="full", preset="tiny", seed=1, **shape):
    """One forward+backward of the tiny synthetic model; returns loss, grads and the handle."""
    work = synthetic.build(preset, training=training, **shape)
    handle = ckptlib.apply(work.model, config, work.spec) if config is not None else None
    torch.manual_seed(seed)  # dropout draws
    loss = F.mse_loss(work.model(*work.args), work.target)
    loss.backward()
    grads = {n: p.grad for n, p in work.model.named_parameters() if p.grad is not None}
    grads.update({f"input{i}": t.grad for i, t in enumerate(work.grad_inputs)})
    return loss.detach(), grads, handle


@pytest.mark.parametrize("training", ["full", "lora", "frozen"])
def test_reference_has_gradients(training):
    _, grads, _ = run_step(None, training)
    # LoRA's B starts at zero, so A gets no gradient in the first step.
    assert grads and all(g.abs().sum() > 0 for name, g in grads.items() if "lora_A" not in name)


@pytest.mark.parametrize(
    "backend, schedule, offload_attention", list(itertools.product(BACKENDS, SCHEDULES, [False, True]))
)
def test_loss_and_every_gradient_bitwise_equal(backend, schedule, offload_attention):
    reference_loss, reference_grads, _ = run_step(None)
    config = CheckpointConfig(backend, *schedule, offload_attention=offload_attention, min_offload_bytes=0)
    loss, grads, handle = run_step(config)
    assert torch.equal(loss, reference_loss)
    assert grads.keys() == reference_grads.keys()
    for name, grad in reference_grads.items():
        assert torch.equal(grads[name], grad), name
    report = handle.report
    assert report.backend == backend
    if config.offloads_regions or report.attention_regions_offloaded:
        assert report.offload["tensors_offloaded"] > 0
        assert report.offload["tensors_reloaded"] == report.offload["tensors_offloaded"]


@pytest.mark.parametrize("training", ["lora", "frozen"])
def test_bitwise_equal_for_adapter_and_frozen_training(training):
    reference_loss, reference_grads, _ = run_step(None, training)
    loss, grads, _ = run_step(CheckpointConfig("unsloth", interval=2, min_offload_bytes=0), training)
    assert torch.equal(loss, reference_loss)
    assert all(torch.equal(grads[k], g) for k, g in reference_grads.items())


@pytest.mark.parametrize("preset", ["tiny", "tiny-odd"])
@pytest.mark.parametrize("backend, schedule", list(itertools.product(BACKENDS, SCHEDULES)))
def test_report_counters_equal_the_plan(preset, backend, schedule):
    config = CheckpointConfig(backend, *schedule, min_offload_bytes=0)
    _, _, handle = run_step(config, preset=preset)
    block_plan = handle.plans["blocks"]
    report = handle.report
    checkpointed = len(block_plan.checkpointed_blocks)
    whole_block = backend in ("torch", "unsloth")
    assert report.plans == {"blocks": str(block_plan)}
    assert report.regions_run == (len(block_plan.regions) if whole_block else 0)
    assert report.blocks_recomputed == (checkpointed if whole_block else 0)
    assert report.ffn_regions_run == report.ffn_recomputed == (checkpointed if config.ffn_only else 0)
    if backend == "unsloth":
        # Every region's input hidden state, except that of a region starting at block 0: that is the
        # caller's own tensor, alive whatever we do, so a host copy of it would only cost a copy and a reload.
        shape = synthetic.resolve_shape(preset)
        state_bytes = shape.batch * shape.tokens * shape.width * 4
        offloaded = len(block_plan.regions) - (block_plan.regions[0].start == 0)
        assert report.offload["tensors_offloaded"] == offloaded
        assert report.offload["bytes_offloaded"] == offloaded * state_bytes
        assert report.offload["bytes_reloaded"] == report.offload["bytes_offloaded"]


def test_attention_offload_counts_where_it_applies_and_where_it_cannot():
    _, _, handle = run_step(CheckpointConfig("torch", 2, 4, offload_attention=True, min_offload_bytes=0))
    report = handle.report
    assert report.attention_regions_offloaded == 4  # the plain blocks 2, 3, 6, 7
    assert report.attention_offload_skipped == 4  # recomputed blocks keep nothing to offload
    _, _, handle = run_step(CheckpointConfig("none", offload_attention=True, min_offload_bytes=0))
    assert handle.report.attention_regions_offloaded == 8 and handle.report.attention_offload_skipped == 0


def test_small_tensors_parameters_and_buffers_stay_on_device(monkeypatch):
    from ckptlib.memory import storage_id
    from tests.support import recording_streams

    _, _, handle = run_step(CheckpointConfig("none", offload_attention=True))  # 1 MiB threshold
    offload = handle.report.offload
    assert offload["tensors_offloaded"] == 0 and offload["tensors_kept"] > 0
    log = recording_streams.install(monkeypatch)
    _, _, handle = run_step(CheckpointConfig("none", offload_attention=True, min_offload_bytes=0))
    copied = {entry[2] for entry in log if entry[0] == "to_host"}
    weights = {storage_id(t) for t in (*handle.model.parameters(), *handle.model.buffers())}
    assert copied and handle.report.offload["tensors_kept"] > 0  # activations moved, the attention's weights kept
    assert not copied & weights


def test_report_describes_the_last_step_only():
    work = synthetic.build("tiny", training="lora")
    handle = ckptlib.apply(work.model, CheckpointConfig("unsloth", min_offload_bytes=0), work.spec)
    for _ in range(3):
        work.step()
    assert handle.report.regions_run == 8 and handle.report.offload["tensors_offloaded"] == 7
    assert handle.report.pool["hits"] > 0  # buffers from the previous step were reused


def test_apply_then_remove_restores_the_model():
    work = synthetic.build("tiny", training="full")
    modules = list(work.model.modules())
    forwards = {id(m): m.__dict__.get("forward") for m in modules}
    state = {k: v.clone() for k, v in work.model.state_dict().items()}
    work.model.eval()
    before = work.model(*work.args)
    handle = ckptlib.apply(work.model, CheckpointConfig("unsloth-ffn", 2, 4, offload_attention=True), work.spec)
    assert any(m.__dict__.get("forward") is not None for m in modules)
    handle.remove()
    assert all(m.__dict__.get("forward") is forwards[id(m)] for m in modules)
    assert not work.model._forward_pre_hooks
    assert list(work.model.modules()) == modules
    assert all(torch.equal(v, state[k]) for k, v in work.model.state_dict().items())
    assert torch.equal(work.model(*work.args), before)


def test_no_grad_forward_runs_every_block_once():
    work = synthetic.build("tiny", training="full")
    work.model.eval()
    with torch.no_grad():
        expected = work.model(*work.args)
        handle = ckptlib.apply(work.model, CheckpointConfig("torch", interval=4), work.spec)
        assert torch.equal(work.model(*work.args), expected)
    assert handle.report.regions_run == 0


def test_blocks_of_a_region_called_out_of_order_fail_clearly():
    work = synthetic.build("tiny", training="full")
    ckptlib.apply(work.model, CheckpointConfig("torch", interval=2), work.spec)
    with pytest.raises(RuntimeError, match="called without its region's first block"):
        work.model.blocks[1](*work.args)


class TupleBlock(nn.Module):
    """A block that takes (hidden, context) and returns (context, hidden), like Flux's double blocks."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, hidden, context):
        return context * 0.5, torch.tanh(self.lin(hidden) + context.mean())


class TupleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(TupleBlock() for _ in range(4))

    def forward(self, hidden, context):
        for block in self.blocks:
            context, hidden = block(hidden, context)
        return hidden + context.sum()


SWAPPED = ckptlib.CallConvention(
    next_inputs=lambda out, args, kwargs: ((out[1], out[0]), kwargs),
    passthrough=lambda args, kwargs: (args[1], args[0]),
)


def test_other_call_conventions_plug_in_through_the_spec():
    torch.manual_seed(0)
    model = TupleModel()
    hidden, context = torch.randn(3, 8), torch.randn(3, 8, requires_grad=True)
    model(hidden, context).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()] + [context.grad.clone()]
    model.zero_grad()
    context.grad = None
    spec = BlockSpec(block_lists=["blocks"], conventions={"blocks": SWAPPED})
    handle = ckptlib.apply(model, CheckpointConfig("torch", interval=2), spec)
    model(hidden, context).sum().backward()
    assert handle.report.regions_run == 2 and handle.report.blocks_recomputed == 4
    assert all(torch.equal(a, b) for a, b in zip([p.grad for p in model.parameters()] + [context.grad], expected))


def test_ungroupable_lists_refuse_intervals_but_allow_per_block():
    model = TupleModel()
    spec = BlockSpec(block_lists=["blocks"], conventions={"blocks": None}, name="toy")
    with pytest.raises(UnsupportedModeError, match="toy: interval 2 needs grouped regions.*blocks cannot be grouped"):
        ckptlib.apply(model, CheckpointConfig("torch", interval=2), spec)
    ckptlib.apply(model, CheckpointConfig("torch"), spec).remove()


@pytest.mark.parametrize(
    "config, message",
    [
        (
            CheckpointConfig("torch-ffn"),
            "toy: backend torch-ffn unsupported: the model declares no feed-forward boundary",
        ),
        (
            CheckpointConfig("torch", offload_attention=True),
            "toy: offload_attention unsupported: the model declares no attention",
        ),
    ],
)
def test_missing_capabilities_raise_instead_of_running_another_mode(config, message):
    with pytest.raises(UnsupportedModeError, match=message):
        ckptlib.apply(TupleModel(), config, BlockSpec(block_lists=["blocks"], name="toy"))


@pytest.mark.parametrize(
    "config, kind",
    [
        (CheckpointConfig("torch-ffn"), "feed_forward 'mlp'"),
        (CheckpointConfig("none", offload_attention=True), "attention 'self_attn'"),
    ],
)
def test_a_mode_whose_names_match_no_block_is_unsupported_not_a_silent_no_op(config, kind):
    """NOTE [ A mode never does nothing silently ]: a spec naming submodules no block has."""
    work = synthetic.build("tiny", training="frozen")
    spec = replace(work.spec, feed_forward=["mlp"], attention=["self_attn"])
    with pytest.raises(
        UnsupportedModeError,
        match=rf"{kind} matches no submodule of any block \(a block of 'blocks' has norm1, attn, norm2, ff\)",
    ):
        ckptlib.apply(work.model, config, spec)
    assert ckptlib.spec_problems(work.model, spec) == [
        "synthetic: feed_forward 'mlp' matches no submodule of any block (a block of 'blocks' has norm1, attn, norm2, ff)",
        "synthetic: attention 'self_attn' matches no submodule of any block (a block of 'blocks' has norm1, attn, norm2, ff)",
    ]
    assert ckptlib.spec_problems(work.model, replace(spec, block_lists=["layers"]))[0].startswith(
        "synthetic: no block list 'layers'"
    )
    assert ckptlib.spec_problems(work.model, work.spec) == []


def test_unknown_block_list_is_named():
    with pytest.raises(UnsupportedModeError, match="no block list 'layers'"):
        ckptlib.apply(TupleModel(), CheckpointConfig("torch"), BlockSpec(block_lists=["layers"]))


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("early_stop", [False, True])
@pytest.mark.parametrize(
    "backend, schedule", list(itertools.product(["torch", "unsloth", "torch-ffn", "unsloth-ffn"], SCHEDULES))
)
def test_backward_recomputes_exactly_the_checkpointed_forward_flops(backend, schedule, early_stop):
    """Recompute adds each checkpointed block's (or FFN's) forward once. With torch's default early
    stop, recompute also ends as soon as the last saved tensor exists, which skips each region's
    final matmul (autograd saves an op's inputs before running it)."""

    def step(config):
        work = synthetic.build("tiny-odd", training="full", dropout=0.0)
        handle = ckptlib.apply(work.model, config, work.spec) if config else None
        with set_checkpoint_early_stop(early_stop):
            total = flops(lambda: F.mse_loss(work.model(*work.args), work.target).backward())
        return work, handle, total

    work, _, baseline = step(None)
    block = work.model.blocks[0]
    x = work.args[0].detach()
    ffn_only = backend.endswith("ffn")
    unit_flops = flops(lambda: block.ff(block.norm2(x)) if ffn_only else block(x))
    last_matmul_flops = flops(lambda: block.ff[2](torch.randn(x.shape[:-1] + (block.ff[2].in_features,))))
    _, handle, total = step(CheckpointConfig(backend, *schedule))
    block_plan = handle.plans["blocks"]
    recomputed = len(block_plan.checkpointed_blocks)
    checkpoint_calls = recomputed if ffn_only else len(block_plan.regions)
    skipped = checkpoint_calls * last_matmul_flops if early_stop else 0
    assert total - baseline == recomputed * unit_flops - skipped


@pytest.mark.parametrize("training", ["frozen", "full"])
def test_offloaded_region_inputs_leave_the_device(training):
    """After forward, unsloth holds fewer device bytes than torch by the offloaded region inputs
    (all but the first, which is the caller's own input and is not offloaded)."""

    def live_after_forward(backend):
        work = synthetic.build("tiny", training=training)
        handle = ckptlib.apply(work.model, CheckpointConfig(backend, min_offload_bytes=0), work.spec)
        with ckptlib.LiveTensorTracker() as tracker:
            loss = F.mse_loss(work.model(*work.args), work.target)
            live = tracker.live_bytes
        loss.backward()
        return live, handle.report

    torch_live, _ = live_after_forward("torch")
    unsloth_live, report = live_after_forward("unsloth")
    shape = synthetic.resolve_shape("tiny")
    boundary = shape.batch * shape.tokens * shape.width * 4
    assert report.offload["tensors_offloaded"] == shape.depth - 1
    assert torch_live - unsloth_live == (shape.depth - 1) * boundary


class SharedExtraBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x, temb):
        return torch.tanh(self.lin(x) + temb)


class SharedExtraModel(nn.Module):
    """Every block gets the same time embedding, computed inside the model (like diffusers' temb)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 16)
        self.blocks = nn.ModuleList(SharedExtraBlock() for _ in range(4))

    def forward(self, x, t):
        temb = self.embed(t)
        for block in self.blocks:
            x = block(x, temb)
        return x


def test_unsloth_offloads_the_carried_state_not_the_shared_extras():
    torch.manual_seed(0)
    model = SharedExtraModel()
    x, t = torch.randn(8, 16), torch.randn(8, 16)
    model(x, t).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    handle = ckptlib.apply(model, CheckpointConfig("unsloth", min_offload_bytes=0), BlockSpec(block_lists=["blocks"]))
    model(x, t).sum().backward()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))
    offload = handle.report.offload
    # regions 1-3 offload their input state; temb (shared, alive in forward anyway) and the caller's x stay
    assert offload["tensors_offloaded"] == 3
    assert offload["bytes_offloaded"] == 3 * 8 * 16 * 4


def test_a_build_to_inspect_checks_lora_targets_and_injects_no_adapters():
    """NOTE [ Building to inspect ]: the same model, without PEFT's layers; a target that names
    nothing is refused all the same."""
    from ckptlib import SpecError, adapters_not_injected, synthetic
    from ckptlib.workload import make_trainable

    with adapters_not_injected():
        inspected = synthetic.build("tiny", training="lora", device="meta")
    trained = synthetic.build("tiny", training="lora", device="meta")
    base = {n.replace(".base_layer", "") for n, _ in trained.model.named_parameters() if "lora_" not in n}
    assert {n for n, _ in inspected.model.named_parameters()} == base
    assert any("lora_" in n for n, _ in trained.model.named_parameters())
    assert not any(p.requires_grad for p in inspected.model.parameters())
    with adapters_not_injected(), pytest.raises(SpecError, match="'nowhere' match no module"):
        make_trainable(synthetic.build("tiny", training="frozen", device="meta").model, "lora", ["nowhere"], 4)
