"""Cards by name, and memory sizes as people write them: what `advise --card`, `plan --card` and
the plots' card lines read. Defined once."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ckptlib.units import GIB, MIB, format_bytes

# Cards are sold in "GB" that are GiB-sized (a 24 GB card has 24 GiB), so GB and G read as GiB.
_UNITS = {"gib": GIB, "gb": GIB, "g": GIB, "": GIB, "mib": MIB, "mb": MIB, "m": MIB}
# Each card's total memory in MiB, as nvidia-smi (NVML) reports it, the figure people quote. What
# CUDA can hand out (torch.cuda.get_device_properties) is a little less: H100 80GB 81,080 MiB, H200
# 143,156 MiB (about 0.4 to 0.6% under); a measured run takes torch's own figure (sweep/run).
CARDS_MIB = {
    "RTX 3090": 24576,
    "RTX 4090": 24564,
    "RTX 5090": 32607,
    "L4": 23034,
    "RTX A6000": 49140,
    "L40S": 46068,
    "A100 40GB": 40960,
    "A100 80GB": 81920,
    "H100 80GB": 81559,
    "H200": 143771,
}
PLOTTED = ("RTX 4090", "L40S", "H100 80GB", "H200")  # the cards plots draw a line at
DEFAULT_MARGIN = 0.10  # the share of a card advise and plan keep free
# Host links, bytes per second one way, as offload copies reach them (pinned buffers).
HOST_LINKS = {"pcie4": 25e9, "pcie5": 55e9, "nvlink-c2c": 450e9}


@dataclass(frozen=True)
class Budget:
    """What of a card a step's peak may use, and the words advise and plan both say it in: the card
    less the share kept free; a peak counts with the device memory its allocator never sees (the
    CUDA context, ckptlib.predict's device model), which a peak figure leaves out."""

    card_bytes: int
    margin: float = DEFAULT_MARGIN
    context_bytes: int = 0

    @classmethod
    def on(cls, device_model: str, card_bytes: int, margin: float = DEFAULT_MARGIN) -> Budget:
        """The budget with the context of ckptlib.predict's device model (`cuda`, `cpu`, ...)."""
        from ckptlib.devices import DEVICE_MODELS

        return cls(card_bytes, margin, DEVICE_MODELS[device_model].context_bytes)

    @property
    def bytes(self) -> int:
        return int(self.card_bytes * (1 - self.margin))

    def need(self, peak_bytes: int) -> int:
        return peak_bytes + self.context_bytes  # a number, or a column of them

    def fits(self, peak_bytes: int) -> bool:
        return self.need(peak_bytes) <= self.bytes

    def heading(self) -> str:
        """'budget 21.59 GiB (a 23.99 GiB card less the 10% margin; each peak counts with 0.50 GiB of CUDA context)'"""
        context = self.context_bytes and f"; each peak counts with {format_bytes(self.context_bytes)} of CUDA context"
        kept = f" less the {self.margin:.0%} margin" if self.margin else ""
        return f"budget {format_bytes(self.bytes)} (a {format_bytes(self.card_bytes)} card{kept}{context or ''})"

    def against(self, peak_bytes: int) -> str:
        """'23.13 GiB + 0.50 GiB context = 23.63 GiB, 2.04 GiB over the budget' (or '..., 1.20 GiB to spare')."""
        need = self.need(peak_bytes)
        total = self.context_bytes and f"{format_bytes(peak_bytes)} + {format_bytes(self.context_bytes)} context = "
        left = self.bytes - need
        verdict = f"{format_bytes(-left)} over the budget" if left < 0 else f"{format_bytes(left)} to spare"
        return f"{total or ''}{format_bytes(need)}, {verdict}"


def parse_size(text: str) -> int:
    """'48GiB', '48GB', '48G', '48' (all GiB), '512MiB' -> bytes; ValueError for anything else or 0."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match[2].lower() not in _UNITS:
        raise ValueError(f"cannot read memory size {text!r}; write e.g. 48GiB, 24GB, 24G or 80")
    size = round(float(match[1]) * _UNITS[match[2].lower()])
    if size <= 0:
        raise ValueError(f"a card needs some memory: got {text!r}")
    return size


def check_margin(margin: float) -> float:
    if not 0 <= margin < 1:
        raise ValueError(f"--margin is a share of the card to keep free, from 0 to under 1; got {margin:g}")
    return margin


def card_bytes(name: str) -> int:
    """A card by name (`RTX 4090`, `L40S`, `H100 80GB`, `H200`; case and spaces aside), or by part
    of one name (`H100`, `4090`: the one card it names; `A100` names two and is refused)."""
    key = _squeezed(name)
    exact = [card for card in CARDS_MIB if _squeezed(card) == key]
    found = exact or [card for card in CARDS_MIB if key and key in _squeezed(card)]
    if len(found) == 1:
        return CARDS_MIB[found[0]] * MIB
    if found:
        raise ValueError(f"card {name!r} names {' and '.join(found)}: say which (or give --vram)")
    raise ValueError(f"unknown card {name!r}; known: {', '.join(CARDS_MIB)} (or give --vram)")


def _squeezed(name: str) -> str:
    return "".join(name.lower().split())
