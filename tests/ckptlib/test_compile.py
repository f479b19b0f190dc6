"""torch.compile under every checkpointing schedule (ckptlib/compile.py): Inductor on the CPU, the
compiled step's loss and gradients close to eager, the report's counters those of the plan."""

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config

import ckptlib
from ckptlib import COMPILE_MODES, MODES, CheckpointConfig, Compiler, UnsupportedModeError, synthetic
from ckptlib.families import build

if reason := Compiler("regional").unavailable("cpu"):
    pytest.skip(f"compile=regional cannot run here: {reason}", allow_module_level=True)

# what the plan did, as opposed to which tensors a graph happened to save (the compiler's choice)
SCHEDULE_COUNTERS = (
    "plans",
    "regions_run",
    "blocks_recomputed",
    "ffn_regions_run",
    "ffn_recomputed",
    "attention_regions_offloaded",
    "attention_offload_skipped",
)
FIRST_BLOCKS = CheckpointConfig("unsloth", blocks=3)  # the non-uniform form: only the first k blocks
# Inductor builds every new graph's kernels with g++, about half a second each on two cores: most of
# this file's time. What ckptlib adds to a compiled step (eager wrappers around compiled forwards, a
# code object per block variant, the report's counters, offload hooks on a compiled graph's saved
# tensors) is settled before code generation, by Dynamo's graphs, AOTAutograd's decompositions and
# the min-cut partitioner, which `aot_eager_decomp_partition` runs as Inductor does, with eager
# kernels in place of generated ones. So every schedule compiles with Inductor on the synthetic
# model, whose cases share kernels through Inductor's cache; the graphs no other case shares (the
# synthetic model whole, Flux.1's blocks) are partitioned without code generation.
INDUCTOR = "inductor"
PARTITIONED = "aot_eager_decomp_partition"
# One worker compiles this file's Inductor cases, one after another: the kernels Inductor generated
# and built for one case are found in its cache by the next (its default FX graph cache), where three
# workers would each build the same ones at once. With a cold cache this file took 100 s on two cores
# grouped, 123 s spread over three workers (pytest 9.2 spread every group:
# test_this_modules_cases_run_on_one_worker), all on Inductor. Flux.1's cases, which build no kernels,
# are a group of their own, run beside it.
pytestmark = pytest.mark.xdist_group("inductor")


def test_this_modules_cases_run_on_one_worker(request):
    """Under pyproject's --dist loadgroup, xdist hands a group to one worker by tagging each of its
    tests' ids with the group; with pytest 9.2 the tag no longer takes (pytest-xdist#1386) and every
    group is spread over all workers, silently: here each worker would compile the same kernels."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@inductor"), request.node.nodeid


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each case compiles from scratch (no graph of an earlier case, no recompile limit reached);
    dropout draws as in eager, so gradients can be compared."""
    torch._dynamo.reset()
    with inductor_config.patch(fallback_random=True):
        yield
    torch._dynamo.reset()


def train_step(builder, preset, config, compile, **shape):
    work = builder(preset, training="full", **shape)
    work.optimizer = None  # keep the gradients for comparison
    config = CheckpointConfig(**{**vars(config), "min_offload_bytes": 0})  # tiny tensors offload too
    handle = ckptlib.apply(work.model, config, work.spec, compile=compile)
    torch.manual_seed(0)  # the same dropout draws
    torch._dynamo.utils.counters.clear()
    loss = work.step()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    grads = {n: p.grad for n, p in work.model.named_parameters() if p.grad is not None}
    return loss, grads, handle.report, graphs


def assert_compiled_matches_eager(builder, preset, config, compile, backend=INDUCTOR):
    loss, grads, report, _ = train_step(builder, preset, config, "none")
    compiler = Compiler(compile, backend=backend)
    compiled_loss, compiled_grads, compiled_report, graphs = train_step(builder, preset, config, compiler)
    assert graphs > 0, "nothing was compiled"
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=1e-6)
    assert compiled_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    for counter in SCHEDULE_COUNTERS:
        assert getattr(compiled_report, counter) == getattr(report, counter), counter
    if config.offloads_regions or report.attention_regions_offloaded:
        assert compiled_report.offload["tensors_offloaded"] > 0
        assert compiled_report.offload["tensors_reloaded"] == compiled_report.offload["tensors_offloaded"]


# every mode that compiles (attention offload inside regions does not: test below)
SYNTHETIC_CASES = {
    **{name: config for name, config in MODES.items() if not config.offload_attention_in_regions},
    "unsloth-first3": FIRST_BLOCKS,
}


# every backend and schedule compiled regionally; under full compilation, one of each backend
FULL_CASES = {
    "none": PARTITIONED,  # the model as one graph: kernels no other case shares
    "seg2-stride4-offload-plain": INDUCTOR,
    "unsloth": INDUCTOR,
    "torch-ffn-offload": INDUCTOR,
    "unsloth-ffn": INDUCTOR,
}
CASES = [(mode, "regional", INDUCTOR) for mode in SYNTHETIC_CASES] + [
    (mode, "full", backend) for mode, backend in FULL_CASES.items()
]


@pytest.mark.long
@pytest.mark.parametrize("mode, compile, backend", CASES)
def test_synthetic_compiled_step_matches_eager(mode, compile, backend):
    assert_compiled_matches_eager(synthetic.build, "tiny", SYNTHETIC_CASES[mode], compile, backend)


def flux1(preset, **kwargs):
    return build("flux1", preset, **kwargs)


@pytest.mark.long
@pytest.mark.xdist_group("partitioned-flux1")
@pytest.mark.parametrize("mode", ["layer", "seg2-stride4-offload-plain", "unsloth", "torch-ffn-offload", "unsloth-ffn"])
def test_flux_compiled_step_matches_eager(mode):
    """A real family's two block lists under regional compilation, one schedule of each backend."""
    assert_compiled_matches_eager(flux1, "tiny", MODES[mode], "regional", PARTITIONED)


def test_identical_blocks_share_one_graph():
    """Regional compilation compiles a block once, not once per block: its cost does not grow with depth."""
    *_, shallow = train_step(synthetic.build, "tiny", MODES["layer"], "regional", depth=2)
    torch._dynamo.reset()
    *_, deep = train_step(synthetic.build, "tiny", MODES["layer"], "regional", depth=12)
    assert 0 < deep == shallow


def test_remove_restores_the_eager_model():
    work = synthetic.build("tiny", training="full")
    forwards = [block.forward for block in work.model.blocks]
    handle = ckptlib.apply(work.model, MODES["seg2-stride4-offload-plain"], work.spec, compile="full")
    handle.remove()
    assert "forward" not in work.model.__dict__
    assert all("forward" not in m.__dict__ for m in work.model.modules())
    assert [block.forward for block in work.model.blocks] == forwards


@pytest.mark.parametrize("compile", ["regional", "full"])
def test_attention_offload_inside_regions_is_unsupported_compiled_and_says_why(compile):
    """Its hooks would sit inside the compiled block, which Dynamo traces through: nothing would move."""
    work = synthetic.build("tiny")
    with pytest.raises(UnsupportedModeError, match="attention offload inside recomputed regions does not run"):
        ckptlib.apply(work.model, MODES["activation-offload"], work.spec, compile=compile)
    assert "forward" not in work.model.__dict__ and all("forward" not in m.__dict__ for m in work.model.modules())


def test_without_a_cpp_compiler_compiling_is_unsupported():
    work = synthetic.build("tiny")
    with (
        inductor_config.patch({"cpp.cxx": ("no-such-c++-compiler",)}),
        pytest.raises(UnsupportedModeError, match="compile regional: Inductor compiles CPU kernels with a C"),
    ):
        ckptlib.apply(work.model, MODES["layer"], work.spec, compile="regional")
    assert all("forward" not in m.__dict__ for m in work.model.modules()), "a refused apply patched the model"


def test_unknown_compile_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown compile mode 'max'; valid modes: none, regional, full"):
        Compiler("max")
    assert COMPILE_MODES == ("none", "regional", "full")


def test_an_unknown_backend_is_rejected_before_anything_is_patched():
    """torch.compile itself would refuse it only when apply compiled a block, halfway through patching."""
    with pytest.raises(ValueError, match="unknown torch.compile backend 'nope'; valid backends: .*aot_eager_decomp"):
        Compiler("regional", backend="nope")
    assert Compiler("regional", backend=PARTITIONED).compiles
