"""What a model exposes to checkpointing: its block lists, the attention and feed-forward
submodules of a block, and how each list hands its running state from one block to the next."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class UnsupportedModeError(ValueError):
    """The model does not expose what the requested mode needs."""


class SpecError(UnsupportedModeError):
    """A name a spec or a builder gives (a block list, attention or feed-forward submodules, LoRA
    targets) names nothing in the model."""


@dataclass(frozen=True)
class CallConvention:
    """How a block list hands its running state from one block to the next.

    next_inputs(output, args, kwargs) -> (args, kwargs) of the next block's call.
    passthrough(args, kwargs) -> what a block returns when it only hands its inputs on.
    by_name: calls are first bound to the block's signature, so args is () and kwargs holds every
    argument by name, however the model's loop passed them.
    """

    next_inputs: Callable[[Any, tuple, dict], tuple[tuple, dict]]
    passthrough: Callable[[tuple, dict], Any]
    by_name: bool = False
    # carried(args, kwargs) -> the state inputs (the region inputs unsloth offloads); None: every tensor input
    carried: Callable[[tuple, dict], tuple] | None = None

    @classmethod
    def state(cls, *names: str) -> CallConvention:
        """Blocks return the named arguments, in this order, as their new values (Flux:
        `encoder_hidden_states, hidden_states = block(hidden_states=..., encoder_hidden_states=...)`)."""

        def next_inputs(out, args, kwargs):
            values = out if len(names) > 1 else (out,)
            return (), {**kwargs, **dict(zip(names, values, strict=True))}

        def passthrough(args, kwargs):
            values = tuple(kwargs[name] for name in names)
            return values if len(names) > 1 else values[0]

        return cls(next_inputs, passthrough, by_name=True, carried=lambda args, kwargs: tuple(kwargs[n] for n in names))

    @classmethod
    def leading(cls, count: int) -> CallConvention:
        """Blocks return new values for their first `count` positional arguments, in order
        (HunyuanVideo: `hidden, encoder = block(hidden, encoder, temb, ...)`)."""

        def next_inputs(out, args, kwargs):
            values = out if count > 1 else (out,)
            return (*values, *args[count:]), kwargs

        def passthrough(args, kwargs):
            return tuple(args[:count]) if count > 1 else args[0]

        return cls(next_inputs, passthrough, carried=lambda args, kwargs: tuple(args[:count]))


# x = block(x, *other_args, **kwargs)
FIRST_ARG = CallConvention.leading(1)


@dataclass(frozen=True)
class FeedForwardSide:
    """A block class's forward with its feed-forward side split out, as a trainer's copy of the class
    checkpoints it for the FFN-only backends (CheckpointConfig.ffn_scope "side").

    forward(block, run_side, *args, **kwargs) computes what the block's own forward computes, calling
    `run_side(side, *tensors)` for the side; `side(block, *tensors)` takes its inputs positionally
    (what the checkpoint saves) and uses no other tensor of the forward.
    modules: the block's submodules the side runs (what a test checks the split against).
    source: the trainer's file it mirrors.
    """

    forward: Callable[..., Any]
    modules: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class BlockSpec:
    """Where a model's block lists are and which submodules of a block are attention and feed-forward.

    block_lists: dotted paths of nn.ModuleLists on the model.
    attention / feed_forward: submodule paths inside a block (absent ones are skipped per block).
    conventions: per block list; FIRST_ARG by default. None: the list cannot be grouped (interval > 1
    is unsupported there).
    mask_share: for a prediction on the meta device, where a boolean mask has no data, the share of
    its elements a boolean index keeps (a mixture of experts' per-expert token mask under balanced
    routing: 1 / experts). None: the model indexes by no data-dependent mask.
    ffn_sides: block class name -> its FeedForwardSide, for CheckpointConfig.ffn_scope "side".
    cross_attention: attention submodules between a block's streams (a video and audio model's
        audio-to-video attention), which only attention_offload_scope "module-and-cross" offloads.
        Left out of the repr, on which a builder's fingerprint rests (sweep/config/builders.py).
    """

    block_lists: Sequence[str]
    attention: Sequence[str] = ()
    feed_forward: Sequence[str] = ()
    conventions: Mapping[str, CallConvention | None] = field(default_factory=dict)
    name: str = "model"
    reasons: Mapping[str, str] = field(default_factory=dict)  # capability -> why the model lacks it
    mask_share: float | None = None
    ffn_sides: Mapping[str, FeedForwardSide] = field(default_factory=dict)  # block class name -> its side
    cross_attention: Sequence[str] = field(default=(), repr=False)

    def offloaded_attention(self, scope: str) -> Sequence[str]:
        """The attention submodules attention offload wraps under `scope` (ATTENTION_OFFLOAD_SCOPES)."""
        return [*self.attention, *self.cross_attention] if scope == "module-and-cross" else self.attention

    def convention(self, block_list: str) -> CallConvention | None:
        return self.conventions.get(block_list, FIRST_ARG)
