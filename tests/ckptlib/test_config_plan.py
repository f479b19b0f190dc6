import pytest

from ckptlib import BACKENDS, CheckpointConfig, plan_blocks, plan_lists


def test_example_plan_from_the_docs():
    p = plan_blocks(8, CheckpointConfig("torch", interval=2, stride=4))
    assert p.regions == (range(0, 2), range(4, 6))
    assert p.plain == (2, 3, 6, 7)
    assert str(p) == "8 blocks: regions [0-1] [4-5]; plain 2, 3, 6, 7"


@pytest.mark.parametrize(
    "blocks, interval, stride, regions, plain",
    [
        (8, None, None, [[i] for i in range(8)], []),
        (8, 1, None, [[i] for i in range(8)], []),
        (3, 5, None, [[0, 1, 2]], []),  # interval larger than the block count: one region
        (6, 2, 2, [[0, 1], [2, 3], [4, 5]], []),  # stride equal to interval: contiguous
        (7, 2, None, [[0, 1], [2, 3], [4, 5], [6]], []),  # odd count: a short last region
        (7, 2, 4, [[0, 1], [4, 5]], [2, 3, 6]),
        (9, 3, 4, [[0, 1, 2], [4, 5, 6], [8]], [3, 7]),
        (0, 2, None, [], []),
    ],
)
def test_plan_edge_cases(blocks, interval, stride, regions, plain):
    p = plan_blocks(blocks, CheckpointConfig("torch", interval=interval, stride=stride))
    assert [list(r) for r in p.regions] == regions
    assert list(p.plain) == plain
    assert sorted(p.checkpointed_blocks + p.plain) == list(range(blocks))


@pytest.mark.parametrize(
    "interval, stride, blocks, regions",
    [
        (2, None, None, [[0], [2], [4], [6]]),  # every second block, each alone
        (3, None, None, [[0], [3], [6]]),
        (2, 4, None, [[0], [1], [4], [5]]),  # the first two of every four, each alone
        (None, None, None, [[i] for i in range(8)]),  # no interval: every block
        (2, 4, 5, [[0], [1], [4]]),  # cut to the first five blocks
    ],
)
def test_per_block_regions_are_the_single_blocks_simpletuners_pattern_picks(interval, stride, blocks, regions):
    """SimpleTuner's should_checkpoint_block: `index % interval == 0`, or `index % stride < interval`."""
    config = CheckpointConfig("torch", interval=interval, stride=stride, regions="blocks", blocks=blocks)
    p = plan_blocks(8, config)
    assert [list(r) for r in p.regions] == regions
    assert sorted(p.checkpointed_blocks + p.plain) == list(range(8))


def test_unknown_regions_are_named():
    with pytest.raises(ValueError, match="unknown regions 'pairs'; valid: segments, blocks"):
        CheckpointConfig("torch", interval=2, regions="pairs")


def test_no_checkpointing_plans_every_block_plain():
    p = plan_blocks(4, CheckpointConfig("none", interval=2))
    assert p.regions == () and p.plain == (0, 1, 2, 3)
    assert "regions (none)" in str(p)


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown checkpointing backend 'fast'.*" + ", ".join(BACKENDS)):
        CheckpointConfig("fast")


@pytest.mark.parametrize("interval", [0, -2])
def test_interval_must_be_positive(interval):
    with pytest.raises(ValueError, match="interval must be a positive"):
        CheckpointConfig("torch", interval=interval)


def test_stride_below_interval_is_rejected():
    with pytest.raises(ValueError, match="segment stride must be at least the checkpointing interval"):
        CheckpointConfig("torch", interval=4, stride=2)


def test_negative_bucket_count_is_rejected():
    with pytest.raises(ValueError, match="pin_memory_max_buckets must be 0 or more"):
        CheckpointConfig("unsloth", pin_memory_max_buckets=-1)


def test_stride_without_interval_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="stride 4 is ignored without a checkpointing interval"):
        config = CheckpointConfig("torch", stride=4)
    assert config.stride is None
    assert plan_blocks(4, config).regions == (range(0, 1), range(1, 2), range(2, 3), range(3, 4))


@pytest.mark.parametrize(
    "blocks, interval, stride, regions, plain",
    [
        (3, None, None, [[0], [1], [2]], [3, 4, 5, 6, 7]),  # the first 3 blocks
        (3, 2, None, [[0, 1], [2]], [3, 4, 5, 6, 7]),  # the pattern's regions, cut at block 3
        (0, 2, None, [], [0, 1, 2, 3, 4, 5, 6, 7]),
        (20, 2, 4, [[0, 1], [4, 5]], [2, 3, 6, 7]),  # more than the model has: every block
        ((1, 2, 5), 2, None, [[1], [2], [5]], [0, 3, 4, 6, 7]),  # an explicit set splits regions
        ((6, 0, 1), 4, None, [[0, 1], [6]], [2, 3, 4, 5, 7]),
    ],
)
def test_chosen_blocks_cut_the_pattern(blocks, interval, stride, regions, plain):
    p = plan_blocks(8, CheckpointConfig("torch", interval=interval, stride=stride, blocks=blocks))
    assert [list(r) for r in p.regions] == regions
    assert list(p.plain) == plain


def test_chosen_blocks_count_through_the_block_lists_in_order():
    config = CheckpointConfig("torch", interval=2, blocks=5)
    plans = plan_lists({"double": 3, "single": 4}, config)
    assert [list(r) for r in plans["double"].regions] == [[0, 1], [2]]
    assert [list(r) for r in plans["single"].regions] == [[0, 1]] and plans["single"].plain == (2, 3)
    explicit = plan_lists({"double": 3, "single": 4}, CheckpointConfig("torch", blocks=(2, 3)))
    assert explicit["double"].checkpointed_blocks == (2,) and explicit["single"].checkpointed_blocks == (0,)


def test_a_block_index_past_the_last_block_is_named():
    with pytest.raises(ValueError, match=r"blocks \[7, 9\] do not exist: the model has 7 blocks \(0-6\)"):
        plan_lists({"double": 3, "single": 4}, CheckpointConfig("torch", blocks=(1, 7, 9)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"backend": "torch", "blocks": -1}, "must be 0 or more"),
        ({"backend": "torch", "blocks": (1, 1)}, "lists a block twice"),
        ({"backend": "torch", "blocks": (1, -2)}, "block indices 0 or more"),
        ({"backend": "torch", "blocks": "3"}, "a block count or a tuple"),
        ({"backend": "torch", "blocks": True}, "a block count or a tuple"),
    ],
)
def test_bad_block_choices_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CheckpointConfig(**kwargs)


def test_without_a_backend_chosen_blocks_stay_plain():
    assert plan_blocks(4, CheckpointConfig("none", blocks=2)).plain == (0, 1, 2, 3)


def test_a_block_list_given_as_a_list_becomes_a_sorted_tuple():
    assert CheckpointConfig("torch", blocks=[5, 1]).blocks == (1, 5)
