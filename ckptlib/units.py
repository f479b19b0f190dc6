"""Byte units, and how sizes are written: defined once."""

MIB = 2**20
GIB = 2**30


def unit_for(largest_bytes: float) -> tuple[str, int]:
    """MiB for sizes under a GiB (tiny presets, CPU cells), GiB otherwise (the docs' unit)."""
    return ("MiB", MIB) if abs(largest_bytes) < GIB else ("GiB", GIB)


def format_bytes(nbytes: float) -> str:
    """`23.10 GiB`, or `412.00 MiB` under a GiB."""
    name, size = unit_for(nbytes)
    return f"{nbytes / size:.2f} {name}"
