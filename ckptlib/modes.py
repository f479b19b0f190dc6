"""The docs' checkpointing modes by their column names, in the docs' order (the family tables'):
each a CheckpointConfig. Harnesses and configs take their mode presets from here."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import CheckpointConfig

MODES: dict[str, CheckpointConfig] = {
    "none": CheckpointConfig("none"),
    # SimpleTuner's attention offload, inside recomputed blocks too (NOTE [ Attention offload inside
    # a region ] in ckptlib/wiring.py)
    "activation-offload": CheckpointConfig("torch", offload_attention=True, offload_attention_in_regions=True),
    "layer": CheckpointConfig("torch"),
    "interval2": CheckpointConfig("torch", interval=2),
    "seg2-stride4": CheckpointConfig("torch", interval=2, stride=4),
    "seg2-stride4-offload": CheckpointConfig(
        "torch", interval=2, stride=4, offload_attention=True, offload_attention_in_regions=True
    ),
    # The project's attention offload: only where a block keeps its activations (a recomputed block
    # keeps no attention tensors to move), so no more device memory than seg2-stride4's
    "seg2-stride4-offload-plain": CheckpointConfig("torch", interval=2, stride=4, offload_attention=True),
    "unsloth": CheckpointConfig("unsloth"),
    "torch-ffn": CheckpointConfig("torch-ffn"),
    # FFN-only recompute leaves attention's saved tensors in place: offloading them pays here.
    "torch-ffn-offload": CheckpointConfig("torch-ffn", offload_attention=True),
    "unsloth-ffn": CheckpointConfig("unsloth-ffn"),
}

# The synthetic sweep's columns (the docs' Unsloth page), in the docs' order.
SYNTHETIC_MODES = ("none", "torch-ffn", "unsloth-ffn", "layer", "unsloth")
# Every mode in the order tables list them: the synthetic sweep's first, then the family tables'.
MODE_ORDER = tuple(dict.fromkeys([*SYNTHETIC_MODES, *MODES]))


def mode_rank(mode: str) -> int:
    """Where a mode goes in a table (modes of one's own last)."""
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


@dataclass(frozen=True)
class Wiring:
    """How SimpleTuner's model of one family wires the docs' modes (the defaults: as this project
    does for a model of one's own).

    interval_regions: what `gradient_checkpointing_interval` groups of whole blocks
        (ckptlib.config.REGIONS): "segments" where its transformer calls checkpoint_sequential_state,
        "blocks" (every N-th block alone) where it calls only should_checkpoint_block.
    ffn_scope: what `torch-ffn` / `unsloth-ffn` recompute (ckptlib.config.FFN_SCOPES): "side" where
        its copy of the blocks hands a function of its own to the checkpoint (the family's
        Family.ffn_sides), "modules" where it checkpoints the feed-forward module alone.
    ffn_interval_regions: what an interval picks under those backends: "blocks" where its loop
        checkpoints every N-th block's side, "each" where its segmented path is off under them and
        its loop checkpoints every block's feed-forward, the interval ignored.
    attention_offload_scope: what `gradient_checkpointing_offload_attention`'s hooks wrap
        (ckptlib.config.ATTENTION_OFFLOAD_SCOPES): "module" where its blocks put them around the
        attention module's call, "kernel" where its attention processor puts them around the kernel,
        "module-and-cross" where its blocks put them around the attentions between streams too.
    """

    interval_regions: str = "segments"
    ffn_scope: str = "modules"
    ffn_interval_regions: str = "segments"
    attention_offload_scope: str = "module"


# Family name -> its wiring where it differs from the defaults, each read in SimpleTuner's
# simpletuner/helpers/models/<file> (bghira/SimpleTuner bc8e6ab77). Torch-free, so that a verb that
# reads recorded cells resolves what their modes meant without building a family.
OWN_WIRING = Wiring()  # a model of one's own, and a family SimpleTuner wires as this project does
PER_BLOCK = Wiring(interval_regions="blocks")
WIRINGS: dict[str, Wiring] = {
    "ace-step": PER_BLOCK,  # ace_step/transformer.py: should_checkpoint_block
    # chroma/transformer.py: should_checkpoint_block, for the FFN sides too
    "chroma": Wiring("blocks", ffn_scope="side", ffn_interval_regions="blocks"),
    "hidream": PER_BLOCK,  # hidream/transformer.py: should_checkpoint_block
    "longcat-image": PER_BLOCK,  # longcat_image/transformer.py: should_checkpoint_block
    "sana": PER_BLOCK,  # sana/transformer.py: should_checkpoint_block
    "auraflow": PER_BLOCK,  # auraflow/transformer.py: should_checkpoint_block
    "qwen-image": PER_BLOCK,  # qwen_image/transformer.py: should_checkpoint_block
    # stable_cascade/unet.py: should_checkpoint_block over one index that runs on through the down and up
    # lists (each list's length a multiple of 4: the same blocks as an index per list)
    "stable-cascade": PER_BLOCK,
    "ernie-image": PER_BLOCK,  # ernie/transformer.py: should_checkpoint_block
    "ideogram4": PER_BLOCK,  # ideogram/transformer.py: should_checkpoint_block
    "cosmos2": PER_BLOCK,  # cosmos/transformer.py: should_checkpoint_block
    "cosmos3": PER_BLOCK,  # cosmos3/transformer.py: should_checkpoint_block
    # kandinsky5_video/transformer_kandinsky5.py: should_checkpoint_block; the offload hooks around
    # dispatch_attention_fn in its attention processor
    "kandinsky5": Wiring("blocks", attention_offload_scope="kernel"),
    # ltxvideo2/transformer.py: activation_offload_context around the audio-to-video and video-to-audio
    # attentions too; under -ffn every block's MLP, whatever the interval (its loop checks none)
    "ltxvideo2": Wiring(ffn_interval_regions="each", attention_offload_scope="module-and-cross"),
    # minimaxh3/transformer.py: under -ffn, segments off; its loop's should_checkpoint_block picks the blocks
    "minimax-h3": Wiring(ffn_interval_regions="blocks"),
    # wan/transformer.py: under -ffn, segments off; its loop sets checkpoint_ffn on every block
    "wan": Wiring(ffn_interval_regions="each"),
    # flux/transformer.py: segments of whole blocks; a block's side where `index % interval == 0`
    "flux1": Wiring(ffn_scope="side", ffn_interval_regions="blocks"),
    # krea2/transformer.py: Krea2TransformerBlock._ffn_forward. Under -ffn with an interval its segmented
    # path still runs, checkpointing segments of whole blocks: not modelled (README, "Knowingly different")
    "krea2": Wiring(ffn_scope="side"),
    # z_image/transformer.py: _ffn_forward_modulated; under -ffn, segments off and every block's side
    "z-image": Wiring(ffn_scope="side", ffn_interval_regions="each"),
}


def as_wired(config: CheckpointConfig, wiring: Wiring) -> CheckpointConfig:
    """A mode as a trainer wires it for one family: an FFN-only backend recomputes the wiring's
    `ffn_scope`, attention offload wraps its `attention_offload_scope`, an interval groups what its
    `interval_regions` (whole blocks) or `ffn_interval_regions` (FFN-only) says; anything else is
    unchanged."""
    if config.ffn_only:
        config = replace(config, ffn_scope=wiring.ffn_scope)
    if config.offload_attention:
        config = replace(config, attention_offload_scope=wiring.attention_offload_scope)
    if not config.checkpoints or (config.interval or 1) == 1:
        return config
    return replace(config, regions=wiring.ffn_interval_regions if config.ffn_only else wiring.interval_regions)
