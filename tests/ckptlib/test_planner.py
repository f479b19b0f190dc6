"""The planner: shallow predictions extrapolate to the full prediction, cuts interpolate within 2%,
the recommendation fits and is written three ways, and measured it fits and is not slower than the
fastest docs mode that fits."""

import copy
import functools
import json
import math

import pytest
import torch
from torch import nn

import ckptlib
from ckptlib import MODES, CheckpointConfig, synthetic
from ckptlib.extrapolate import ShallowPredictor
from ckptlib.families import build as build_family
from ckptlib.planner import ScheduleSearch, Throughput, describe, fit_throughput, patterns, plan_schedules

# the planner's own patterns (its attention offload is the project's: in plain blocks only)
PATTERNS = ["none", "layer", "interval2", "seg2-stride4-offload-plain", "unsloth", "torch-ffn-offload", "unsloth-ffn"]
CPU_MODEL = Throughput("test", 1e-9, 1e-9, overlaps_copies=False)


def deepened(family: str, blocks: int):
    """A family's tiny preset with each block list grown to `blocks` copies of its last block: a
    deep stack of identical blocks, built in a second (the real presets take minutes here)."""

    def build(**kwargs):
        work = build_family(family, "tiny", **kwargs)
        for path in work.spec.block_lists:
            stack = work.model.get_submodule(path)
            while len(stack) < blocks:
                stack.append(copy.deepcopy(stack[-1]))
        if work.optimizer is not None:
            work.optimizer = ckptlib.workload.adamw_for(work.model)
        return work

    return build


BUILDS = {
    "synthetic": lambda **kw: synthetic.build("cpu-256", **kw),
    "flux1": deepened("flux1", 13),  # two lists: double blocks, then single blocks
    "wan": deepened("wan", 11),
    # quantized bases: predictions run the scheme's own quantizer on the meta model
    "synthetic int8-torchao": lambda **kw: synthetic.build("cpu-256", quantization="int8-torchao", **kw),
    "synthetic int8-sdnq": lambda **kw: synthetic.build("cpu-256", quantization="int8-sdnq", **kw),
}


# Each build on one device model, the synthetic block on both (the models differ in rounding,
# workspace and fused attention; the real families' deepened stacks are the slow ones: Flux's two
# lists under one pattern of each backend, the patterns one test each).
EXTRAPOLATED = [
    pytest.param(name, device, patterns, id=f"{name}-{device}" + ("" if patterns == PATTERNS else f"-{patterns[0]}"))
    for name, device, patterns in [
        ("synthetic", "cpu", PATTERNS),
        ("synthetic", "cuda", PATTERNS),
        *(
            ("flux1", "cuda", [mode])
            for mode in ("layer", "seg2-stride4-offload-plain", "unsloth", "torch-ffn-offload", "interval2 per block")
        ),
        ("wan", "cpu", PATTERNS),
        ("synthetic int8-torchao", "cuda", PATTERNS),
        ("synthetic int8-sdnq", "cpu", PATTERNS),
    ]
]


@pytest.mark.long
@pytest.mark.parametrize("name, device, patterns", EXTRAPOLATED)
def test_extrapolated_whole_list_schedules_equal_their_full_prediction(name, device, patterns):
    predictor = ShallowPredictor(BUILDS[name], device, training="lora")
    assert all(size > 8 for size in predictor.sizes.values()) or name.startswith("synthetic")
    for mode in patterns:
        config = replace_min_offload(MODES.get(mode) or PER_BLOCK_INTERVAL)
        for lists in range(1, len(predictor.sizes) + 1):
            try:
                estimate = predictor.layered(config, lists)
            except ckptlib.UnsupportedModeError:
                continue
            first = sum(list(predictor.sizes.values())[:lists])
            full_config = config if lists == len(predictor.sizes) else replace_blocks(config, first)
            full = predictor.full(full_config)
            assert math.isclose(estimate.peak_bytes, full.peak_bytes, rel_tol=0.02), (mode, lists)
            assert estimate.flops == full.flops, (mode, lists)
            assert estimate.copied_bytes == full.copied_bytes, (mode, lists)


# SimpleTuner's interval in Chroma, HiDream, ...: one block in two, alone (a planner pattern there)
PER_BLOCK_INTERVAL = CheckpointConfig("torch", interval=2, regions="blocks", offload_attention=True)


def replace_min_offload(config: CheckpointConfig) -> CheckpointConfig:
    """Tiny tensors offload too, so the offloading patterns move something at tiny widths."""
    from dataclasses import replace

    return replace(config, min_offload_bytes=0)


def replace_blocks(config: CheckpointConfig, blocks: int) -> CheckpointConfig:
    from dataclasses import replace

    return replace(config, blocks=blocks) if config.checkpoints else config


# The tests that read the search share it on one worker (its pytest-xdist group).
SEARCH_READERS = pytest.mark.xdist_group("synthetic-search")


@functools.cache
def synthetic_search() -> tuple[ShallowPredictor, ScheduleSearch]:
    """The synthetic cpu-256 search on the CPU model, made once for the tests that read it."""
    predictor = ShallowPredictor(BUILDS["synthetic"], "cpu", training="lora")
    return predictor, plan_schedules(predictor, CPU_MODEL)


@pytest.mark.long
@SEARCH_READERS
def test_every_cut_of_a_list_is_within_two_percent_of_its_full_prediction():
    predictor, plan = synthetic_search()
    patterns = {"torch", "torch interval 2, attention offload", "unsloth-ffn"}
    checked = 0
    for candidate in plan.candidates:
        label = describe(replace_blocks(candidate.config, None) if candidate.config.checkpoints else candidate.config)
        if label in patterns:
            full = predictor.full(candidate.config)
            assert math.isclose(candidate.peak_bytes, full.peak_bytes, rel_tol=0.02), describe(candidate.config)
            # a cut inside a region (interval 2, odd k) is interpolated: its recompute is not a whole region's
            assert math.isclose(candidate.estimate.flops, full.flops, rel_tol=0 if not candidate.interpolated else 0.02)
            checked += 1
    assert checked == 3 * 8  # every k of the eight blocks, for each pattern


@SEARCH_READERS
def test_the_frontier_trades_memory_for_time_and_the_fit_is_the_fastest_that_fits():
    _, plan = synthetic_search()
    front = plan.frontier()
    assert [c.peak_bytes for c in front] == sorted(c.peak_bytes for c in front)
    assert all(a.seconds > b.seconds for a, b in zip(front, front[1:]))
    budget = (front[0].peak_bytes + front[-1].peak_bytes) // 2
    fitting = plan.fitting(budget)
    assert fitting and all(c.peak_bytes <= budget for c in fitting)
    assert fitting[0].seconds == min(c.seconds for c in plan.candidates if c.peak_bytes <= budget)
    assert len(plan.candidates) > 90  # patterns x every first-k cut


@SEARCH_READERS
def test_of_equally_fast_schedules_the_one_with_fewer_copies_comes_first():
    """On a GPU, copies hidden behind compute cost no modelled time: a tie in predicted sec/step
    goes to the schedule that moves less over the host link."""
    from dataclasses import replace as with_

    from ckptlib.planner import Candidate, ScheduleSearch

    _, plan = synthetic_search()
    base = plan.candidates[0]
    copying = Candidate(CheckpointConfig("unsloth"), with_(base.estimate, copied_bytes=2**30), 1.0, False)
    still = Candidate(CheckpointConfig("torch"), with_(base.estimate, copied_bytes=0), 1.0, False)
    search = ScheduleSearch([copying, still], None)
    assert [c.config.backend for c in search.fitting(base.peak_bytes)] == ["torch", "unsloth"]


@SEARCH_READERS
def test_a_fit_recovers_the_step_time_model_it_was_made_with():
    truth = Throughput("truth", 2e-10, 5e-10, fixed_seconds=0.01, overlaps_copies=False)
    plan = synthetic_search()[1].retimed(truth)
    fitted = fit_throughput([(c.estimate, c.seconds) for c in plan.candidates[:40]], False, "fit")
    assert fitted.seconds_per_flop == pytest.approx(2e-10, rel=1e-6)
    assert fitted.fixed_seconds == pytest.approx(0.01, rel=1e-6)
    with pytest.raises(ValueError, match="2 or more measured steps"):
        fit_throughput([(plan.candidates[0].estimate, 1.0)], False, "fit")


def test_a_deepened_stack_trains_like_its_blocks():
    """The test models are real: the grown stack runs a step with gradients on every block."""
    work = BUILDS["flux1"](training="full", device="cpu")
    assert len(work.model.transformer_blocks) == 13
    work.optimizer = None
    work.step()
    grads = [p.grad for p in work.model.single_transformer_blocks[-1].parameters()]
    assert all(isinstance(g, torch.Tensor) for g in grads)
    assert isinstance(work.model.transformer_blocks, nn.ModuleList)


def test_predicted_flops_are_those_of_a_real_step_recompute_included():
    from torch.utils.flop_counter import FlopCounterMode

    from ckptlib.predict import predict

    for config in (MODES["none"], MODES["layer"], MODES["seg2-stride4"], MODES["torch-ffn"]):
        work = synthetic.build("tiny", training="full", dropout=0.0)
        ckptlib.apply(work.model, config, work.spec)
        work.step()
        with FlopCounterMode(display=False) as counted:
            work.step()
        predicted = predict(synthetic.build, config, "cpu", preset="tiny", training="full", dropout=0.0)
        assert predicted.flops == counted.get_total_flops() > 0


FORKED_PLAN = """
import json, torch
from ckptlib import synthetic
from ckptlib.extrapolate import ShallowPredictor
from ckptlib.planner import Throughput, plan_schedules

def build(**kwargs):
    work = synthetic.build("cpu-256", **kwargs)
    work.model.table = torch.randn(4_000_000)  # a real tensor every copy clones (Qwen Image's rotary table)
    return work

torch.set_num_threads(2)
torch.randn(4_000_000).clone()  # the parent's OpenMP threads are up before the fork
predictor = ShallowPredictor(build, "cpu", training="lora")
plan = plan_schedules(predictor, Throughput("test", 1e-9, 1e-9, overlaps_copies=False), workers=2)
print(json.dumps({describe: c.peak_bytes for c in plan.candidates for describe in [repr(c.config)]}))
"""


@pytest.mark.long
@SEARCH_READERS
def test_forked_workers_plan_what_one_process_plans_after_the_parent_ran_parallel_ops():
    """NOTE [ OpenMP after fork ]: without one thread per worker this hangs (the limit is for it).
    The costliest patterns go out first, yet the plan lists them as one process does."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORKED_PLAN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    # the same candidates in the same order (a tie in time goes to the first), whichever worker finished first
    assert list(forked.items()) == [(repr(c.config), c.peak_bytes) for c in synthetic_search()[1].candidates]


@pytest.mark.long
def test_a_list_too_short_to_grow_from_its_shallow_base_is_predicted_as_it_is():
    """Eleven blocks: a cut of interval 2 stride 4 at 8 blocks would grow to 8 + 4 + 2 (it raised
    'cannot keep 14 of the 11 blocks'); it is predicted at its own depth instead."""
    predictor = ShallowPredictor(lambda **kw: synthetic.build("cpu-256", depth=11, **kw), "cpu", training="lora")
    plan = plan_schedules(predictor, CPU_MODEL)
    strided = [c for c in plan.candidates if c.config.stride == 4 and c.config.blocks in (8, 9, None)]
    assert len(strided) == 6  # 8, 9 and all 11 blocks, with and without attention offload
    for candidate in strided:
        full = predictor.full(candidate.config)
        assert math.isclose(candidate.peak_bytes, full.peak_bytes, rel_tol=0.02), describe(candidate.config)


@pytest.mark.long
def test_a_period_adds_the_same_whatever_the_other_lists_hold():
    """NOTE [ A period's share is the same in every layout ]: a two-list pattern takes 10 shallow
    predictions; list 0's head slope taken with list 1 plain, under the pattern, or cut gives one
    figure; and a cut on either list stays within 2% of its full prediction. (The shared slope of an
    offloading pattern is checked against full predictions by the flux1-cuda-unsloth case above.)"""
    from ckptlib.planner import _anchors

    predictor = ShallowPredictor(BUILDS["flux1"], "cuda", training="lora")
    config = MODES["interval2"]
    _, (wholes, cuts), predictions = _anchors(predictor, config)
    assert predictions == 10

    repeat, warm = 2, 4
    head = warm - repeat + 13 % repeat  # the remainder's region stands for a warm period
    layouts = [[(head, 0), (0, 2)], [(head, 0), (head, 0)], [(warm, 2), (0, 2)], [(head, 0), (warm, 2)]]
    slopes = []
    for layout in layouts:
        base = predictor._at_layout(config, layout).quantities()
        deeper = predictor._at_layout(config, [(layout[0][0] + repeat, layout[0][1]), layout[1]]).quantities()
        slopes.append({name: deeper[name] - value for name, value in base.items()})
    for slope in slopes[1:]:
        assert slope.keys() == slopes[0].keys()
        assert all(math.isclose(slope[k], slopes[0][k], rel_tol=1e-3) for k in slope), (slope, slopes[0])

    for index, found in enumerate(cuts):
        blocks, estimate = next(iter(found.items()))
        full = predictor.full(replace_blocks(config, 13 * index + blocks))
        assert math.isclose(estimate.peak_bytes, full.peak_bytes, rel_tol=0.02), (index, blocks)
        assert estimate.flops == full.flops and estimate.copied_bytes == full.copied_bytes, (index, blocks)


def test_a_remainder_that_starts_a_region_stands_for_a_warm_period():
    """Eleven blocks under interval 2: five whole regions and a one-block one. The shallow list is
    one period and that region (3 blocks, grown to 5), not two periods and it (5, grown to 7), and
    still extrapolates to its full prediction."""
    predictor = ShallowPredictor(BUILDS["wan"], "cpu", training="lora")
    (path,) = predictor.sizes
    config = MODES["interval2"]
    estimate = predictor.layered(config)
    assert sorted(dict(depths)[path] for _, depths in predictor._cache) == [3, 5]
    full = predictor.full(config)
    assert math.isclose(estimate.peak_bytes, full.peak_bytes, rel_tol=0.02)
    assert estimate.flops == full.flops


def test_where_the_trainers_interval_checkpoints_one_block_in_n_that_pattern_is_searched_too():
    per_block = {c for c in patterns("modules", "blocks") if c.regions == "blocks"}
    assert per_block == {CheckpointConfig("torch", interval=2, regions="blocks", offload_attention=a) for a in (0, 1)}
    assert not any(c.regions == "blocks" for c in patterns("side"))
    assert set(patterns("side")) < set(patterns("side", "blocks"))


def test_a_schedules_phrase_says_what_its_interval_groups_in_the_plan_verbs_words():
    """One wording per meaning of `regions` (ckptlib.config.REGION_MEANINGS), here and in the plan
    verb's SimpleTuner gaps."""
    assert describe(CheckpointConfig("torch", interval=2, stride=4)) == "torch interval 2 stride 4"
    assert (
        describe(CheckpointConfig("torch", interval=2, regions="blocks")) == "torch interval 2 (one block in 2, alone)"
    )
    each = CheckpointConfig("torch-ffn", interval=3, regions="each")
    assert describe(each) == "torch-ffn interval 3 (every block alone, whatever the interval)"
