"""The docs' modes do for each family what SimpleTuner's copy of its blocks does (ckptlib.modes.WIRINGS):
the FFN-only backends recompute its feed-forward side (ckptlib/families/ffn_sides.py, NOTE [ A side
mirrors two sources ]), attention offload wraps what its hooks wrap."""

import pytest
import torch

import ckptlib
from ckptlib import CheckpointConfig
from ckptlib.families import FAMILIES, build, builders
from ckptlib.modes import MODES, WIRINGS, as_wired
from ckptlib.predict import predict

# Block class -> the submodules its `-ffn` checkpoint runs, read in SimpleTuner (bghira/SimpleTuner
# bc8e6ab77, simpletuner/helpers/models/<family>/transformer.py): each class's `_ffn_forward`, the
# function its forward hands to `checkpoint_fn` when `checkpoint_ffn` is set.
SIMPLETUNER_SIDES = {
    # flux/transformer.py: FluxTransformerBlock._ffn_forward (norm2, modulation, ff, gate, residual;
    # the same for the context stream), FluxSingleTransformerBlock._ffn_forward (the MLP path)
    "flux1": {
        "FluxTransformerBlock": {"norm2", "ff", "norm2_context", "ff_context"},
        "FluxSingleTransformerBlock": {"proj_mlp", "act_mlp", "proj_out"},
    },
    # chroma/transformer.py: the same split as Flux's
    "chroma": {
        "ChromaTransformerBlock": {"norm2", "ff", "norm2_context", "ff_context"},
        "ChromaSingleTransformerBlock": {"proj_mlp", "act_mlp", "proj_out"},
    },
    # krea2/transformer.py: Krea2TransformerBlock._ffn_forward (norm2, modulation, ff, gate, residual)
    "krea2": {"Krea2TransformerBlock": {"norm2", "ff"}},
    # z_image/transformer.py: ZImageTransformerBlock._ffn_forward_modulated (ffn_norm1 x scale,
    # feed_forward, ffn_norm2; the gate and the residual outside)
    "z-image": {"ZImageTransformerBlock": {"ffn_norm1", "feed_forward", "ffn_norm2"}},
}
# SimpleTuner checkpoints the feed-forward module alone: `checkpoint_fn(self.ffn, ...)` in
# wan/transformer.py, ltxvideo2/transformer.py and minimaxh3/transformer.py.
SIMPLETUNER_MODULES = {"wan", "ltxvideo2", "minimax-h3"}


def test_the_families_with_sides_are_simpletuners():
    assert {name for name, family in FAMILIES.items() if family.ffn_sides} == set(SIMPLETUNER_SIDES)
    for name, sides in SIMPLETUNER_SIDES.items():
        assert {cls: set(side.modules) for cls, side in FAMILIES[name].ffn_sides.items()} == sides
        assert FAMILIES[name].wiring.ffn_scope == "side"
    for name in SIMPLETUNER_MODULES:
        assert FAMILIES[name].wiring.ffn_scope == "modules" and FAMILIES[name].feed_forward
    # the torch-free wiring table names families, and gives the side scope exactly where sides are declared
    assert set(WIRINGS) <= set(FAMILIES)
    assert {n for n, w in WIRINGS.items() if w.ffn_scope == "side"} == {n for n, f in FAMILIES.items() if f.ffn_sides}


@pytest.mark.parametrize("mode", ["torch-ffn", "unsloth-ffn"])
def test_the_docs_ffn_modes_mean_the_sides_where_simpletuner_has_them(mode):
    for name, family in FAMILIES.items():
        wired = as_wired(MODES[mode], family.wiring)
        assert wired.ffn_scope == ("side" if name in SIMPLETUNER_SIDES else "modules"), name
        assert wired.backend == mode and wired.regions == MODES[mode].regions


def recomputed_children(name: str, config: CheckpointConfig) -> dict[str, set[str]]:
    """Block class -> the block's children whose forward ran again in backward (the recompute)."""
    work = build(name, "tiny")
    ckptlib.apply(work.model, config, work.spec)
    seen: dict[str, set[str]] = {}
    backward = [False]
    for path in work.spec.block_lists:
        for block in work.model.get_submodule(path):
            record = seen.setdefault(type(block).__name__, set())
            for inner, module in block.named_modules():
                child = inner.split(".")[0]  # a child, or the child a nested module belongs to
                if child:
                    module.register_forward_pre_hook(lambda *_, r=record, c=child: r.add(c) if backward[0] else None)
    original_backward = torch.Tensor.backward

    def marked_backward(tensor, *args, **kwargs):
        backward[0] = True
        return original_backward(tensor, *args, **kwargs)

    torch.Tensor.backward = marked_backward
    try:
        work.step()
    finally:
        torch.Tensor.backward = original_backward
    return {cls: children for cls, children in seen.items() if children}


@pytest.mark.parametrize("name", sorted(SIMPLETUNER_SIDES))
def test_backward_recomputes_exactly_simpletuners_side(name):
    assert recomputed_children(name, CheckpointConfig("torch-ffn", ffn_scope="side")) == SIMPLETUNER_SIDES[name]
    modules = recomputed_children(name, CheckpointConfig("torch-ffn", ffn_scope="modules"))
    feed_forward = {path.split(".")[0] for path in FAMILIES[name].feed_forward}
    assert modules and all(children <= feed_forward for children in modules.values()), modules


def test_flux_dev_sides_hold_less_than_its_modules_by_what_they_recompute():
    """Flux.1 dev at 1024 px (4096 image + 512 text tokens, width 3072, bf16), two blocks of each
    list: the sides keep one hidden state per stream of each double block fewer (norm2's input), and
    each single block's MLP input to the GELU (4 x width): the modules scope checkpoints nothing there."""
    keep = {"transformer_blocks": 2, "single_transformer_blocks": 2}
    peaks = {
        scope: predict(
            builders.flux1, CheckpointConfig("torch-ffn", ffn_scope=scope), "cuda", keep_blocks=keep, preset="dev"
        ).stage_peaks["forward"]
        for scope in ("modules", "side")
    }
    hidden = 3072 * 2  # bytes per token of one hidden state
    expected = 2 * (4096 + 512) * hidden + 2 * 4 * (4096 + 512) * hidden  # 54 + 216 MiB
    assert peaks["modules"] - peaks["side"] >= expected, peaks


# Family -> the regions an interval of 2 makes under `torch-ffn`, per block list, as SimpleTuner's model
# runs it (simpletuner/helpers/models/<file>, bc8e6ab77)
FFN_INTERVAL_REGIONS = {
    "flux1": ["[0]", "[0] [2]"],  # flux/transformer.py: a block's side where `index_block % interval == 0`
    "chroma": ["[0]", "[0] [2]"],  # chroma/transformer.py: should_checkpoint_block
    "minimax-h3": ["[0] [2]"],  # minimaxh3/transformer.py: segments off under -ffn; should_checkpoint_block
    # wan/, z_image/ and ltxvideo2/transformer.py: segments off under -ffn, and the loop that runs then
    # sets checkpoint_ffn on every block (each of Z-Image's refiners has one block here)
    "wan": ["[0] [1] [2] [3]"],
    "z-image": ["[0]", "[0]", "[0] [1] [2] [3]"],
    "ltxvideo2": ["[0] [1] [2] [3]"],
    # krea2/transformer.py runs segments of whole blocks instead (README: knowingly different); the
    # project groups the FFN regions' blocks, as for a model of one's own
    "krea2": ["[0-1] [2-3]"],
}


@pytest.mark.parametrize("name", FFN_INTERVAL_REGIONS)
def test_an_interval_under_an_ffn_backend_picks_the_blocks_simpletuners_model_picks(name):
    work = build(name, "tiny")
    config = as_wired(CheckpointConfig("torch-ffn", interval=2), FAMILIES[name].wiring)
    handle = ckptlib.apply(work.model, config, work.spec)
    plans = [handle.report.plans[path] for path in work.spec.block_lists]
    assert [plan.split("regions ")[1].split(";")[0] for plan in plans] == FFN_INTERVAL_REGIONS[name], plans
    every_block = all(len(plan.checkpointed_blocks) == plan.num_blocks for plan in handle.plans.values())
    work.step()
    ran = handle.report.ffn_regions_run
    handle.remove()
    without_interval = ckptlib.apply(
        work.model, as_wired(CheckpointConfig("torch-ffn"), FAMILIES[name].wiring), work.spec
    )
    work.step()
    assert 0 < ran <= without_interval.report.ffn_regions_run
    assert (ran == without_interval.report.ffn_regions_run) == every_block


def sdpa_saved_tensors() -> int:
    """Tensors one scaled-dot-product attention call saves for backward on this host."""
    packed = []
    q, k, v = (torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return len(packed)


def test_kandinsky_offloads_only_the_attention_kernels_saved_tensors_as_simpletuner_does():
    """kandinsky5_video/transformer_kandinsky5.py puts its offload hooks around dispatch_attention_fn
    in the attention processor: the kernel's saved tensors move, the projections' (their LoRA
    dropout masks among them) stay where checkpointing leaves them."""
    assert FAMILIES["kandinsky5"].wiring.attention_offload_scope == "kernel"
    assert as_wired(MODES["activation-offload"], FAMILIES["kandinsky5"].wiring).attention_offload_scope == "kernel"
    offloaded = {}
    for scope in ("module", "kernel"):
        work = build("kandinsky5", "tiny")
        config = CheckpointConfig("none", offload_attention=True, attention_offload_scope=scope, min_offload_bytes=0)
        handle = ckptlib.apply(work.model, config, work.spec)
        work.step()
        offloaded[scope] = handle.report.offload["tensors_offloaded"]
        calls = handle.report.attention_regions_offloaded
    assert offloaded["kernel"] == calls * sdpa_saved_tensors() < offloaded["module"], offloaded


def test_ltx2_offloads_its_cross_stream_attentions_too_as_simpletuner_does():
    """ltxvideo2/transformer.py puts activation_offload_context around the audio-to-video and
    video-to-audio attentions as well as each stream's own: under the docs' activation-offload every
    block offloads six attentions, where the project's default scope offloads the four it declares."""
    assert as_wired(MODES["activation-offload"], FAMILIES["ltxvideo2"].wiring).attention_offload_scope == (
        "module-and-cross"
    )
    calls, offloaded = {}, {}
    for scope in ("module", "module-and-cross"):
        work = build("ltxvideo2", "tiny")
        config = CheckpointConfig("none", offload_attention=True, attention_offload_scope=scope, min_offload_bytes=0)
        handle = ckptlib.apply(work.model, config, work.spec)
        work.step()
        calls[scope] = handle.report.attention_regions_offloaded
        offloaded[scope] = handle.report.offload["tensors_offloaded"]
    blocks = len(work.model.transformer_blocks)
    assert (calls["module"], calls["module-and-cross"]) == (4 * blocks, 6 * blocks), calls
    assert offloaded["module-and-cross"] > offloaded["module"], offloaded
