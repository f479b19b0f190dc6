"""Docs families with no class in the installed diffusers: listed, so sweeps record them as
`unsupported` with the reason instead of leaving them out."""

from __future__ import annotations

from .family import Family

NO_CLASS = (
    "no diffusers class for this architecture in the installed diffusers "
    "(the docs ran it through its trainer's own code)"
)
FAMILIES = tuple(
    Family(name=name, docs_name=docs_name, cls=None, unsupported=NO_CLASS)
    for name, docs_name in [
        ("boogu-image", "Boogu Image"),
        ("heartmula", "HeartMula"),
        ("longcat-video", "LongCat Video"),
        ("mageflow", "MageFlow"),
        ("wan-s2v", "Wan S2V"),
        ("zlab-i1", "ZLab I1"),
    ]
)
