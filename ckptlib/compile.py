"""torch.compile under a checkpointing plan: what is compiled, and what stays eager.

NOTE [ Compiled compute, eager checkpointing ]
ckptlib's wrappers (a region's checkpoint, the offload hooks, the report's counters) always run
eagerly: under a compile mode they are `torch._dynamo.disable`d, so a compiled graph breaks where
one is called. What they run is compiled instead: each block's own forward (and a checkpointed
feed-forward's or an offloaded attention's) is a compiled function, called inside the wrapper.
So the report counts what really ran, and a recompute reruns the same compiled forward.

  none      nothing is compiled.
  regional  every block of every block list compiled on its own (diffusers'
            `compile_repeated_blocks`, SimpleTuner's regional compilation): identical blocks share
            one compiled graph, so compile time does not grow with depth.
  full      the model's forward compiled as well: the code between the blocks joins the graphs,
            which break at the wrappers (with mode `none`: one graph, the whole model).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

COMPILE_MODES = ("none", "regional", "full")

# NOTE [ One code object per block variant ]
# Dynamo keeps its compiled graphs on the forward's code object, shared by every block of a class,
# and takes the first whose guards pass, most recently used first. Its guards do not tell a block
# whose attention (or feed-forward) is one of our wrappers from one whose is not, so a checkpoint's
# recompute could run the other variant's graph and save other tensors than the forward did
# (CheckpointError). A block with wrappers inside therefore runs a copy of its forward's code, one
# per class and set of wrapped submodules, with a cache of its own.
_VARIANT_CODE: dict[tuple[types.CodeType, tuple[str, ...]], types.CodeType] = {}


@dataclass(frozen=True)
class Compiler:
    """How `apply` treats the functions it wraps or runs, for one compile mode; `backend` is
    torch.compile's (Inductor, as in training; `aot_eager_decomp_partition` traces and partitions
    as Inductor does and runs eager kernels instead of generating its own)."""

    mode: str = "none"
    backend: str = "inductor"

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {self.mode!r}; valid modes: {', '.join(COMPILE_MODES)}")
        if self.backend != "inductor":  # torch.compile checks its backend only when a function is compiled
            import torch._dynamo

            backends = torch._dynamo.list_backends(exclude_tags=())
            if self.backend not in backends:
                raise ValueError(
                    f"unknown torch.compile backend {self.backend!r}; valid backends: {', '.join(backends)}"
                )

    @property
    def compiles(self) -> bool:
        return self.mode != "none"

    def compute(self, fn: Callable, wrapped: tuple[str, ...] = ()) -> Callable:
        """A block's (or a submodule's) own forward, compiled under any compile mode; `wrapped`
        names the block's submodules that run one of the wrappers."""
        if not self.compiles:
            return fn
        import torch

        return torch.compile(_variant(fn, wrapped) if wrapped else fn, backend=self.backend)

    def eager(self, wrapper: Callable) -> Callable:
        """One of ckptlib's wrappers: kept out of every compiled graph."""
        if not self.compiles:
            return wrapper
        import torch

        return torch._dynamo.disable(wrapper)  # what it calls runs eagerly too, but for compiled functions

    @contextlib.contextmanager
    def eager_random(self) -> Iterator[None]:
        """Compile afresh with eager's random draws (Inductor's own RNG draws other dropout masks),
        for a comparison with an eager step; what was compiled before is dropped, and so is what
        compiles here, afterwards."""
        if not self.compiles:
            yield
            return
        import torch
        import torch._inductor.config

        torch._dynamo.reset()
        try:
            with torch._inductor.config.patch(fallback_random=True):
                yield
        finally:
            torch._dynamo.reset()

    def unavailable(self, device_type: str) -> str | None:
        """Why this mode cannot compile for `device_type` here (None: it can)."""
        if not self.compiles or self.backend != "inductor":
            return None
        if device_type == "cpu":
            from torch._inductor import cpp_builder

            try:
                cpp_builder.get_cpp_compiler()
            except Exception as error:  # noqa: BLE001 - Inductor's own words for what is missing
                return f"Inductor compiles CPU kernels with a C++ compiler, and none works here ({error})"
        if device_type == "cuda":
            from torch.utils._triton import has_triton

            if not has_triton():
                return "Inductor compiles CUDA kernels with Triton, which is not installed"
        return None


def _variant(method: Callable, wrapped: tuple[str, ...]) -> Callable:
    """`method` (a bound forward) running its variant's own copy of its code."""
    function = getattr(method, "__func__", None)
    if function is None:  # not a bound method: a forward of the model's own making, left as it is
        return method
    code = _VARIANT_CODE.setdefault((function.__code__, wrapped), function.__code__.replace())
    copy = types.FunctionType(
        code, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__, copy.__qualname__ = function.__kwdefaults__, function.__qualname__
    return types.MethodType(copy, method.__self__)


def wrapped_submodules(block) -> tuple[str, ...]:
    """The submodules of `block` whose forward is patched (by apply's wrappers)."""
    return tuple(name for name, module in block.named_modules() if name and "forward" in module.__dict__)


NO_COMPILE = Compiler()
