"""What the host can still allocate: MemAvailable, or less under a memory cgroup (a container's
or pod's limit). Torch-free: a sweep's own process asks before any cell runs."""

from __future__ import annotations

import os
from pathlib import Path


def available_host_bytes(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """What this process can still allocate without swapping or being killed: MemAvailable from
    /proc/meminfo, or less where a memory cgroup (a container's or pod's limit) leaves less
    headroom; None where unknown."""
    found = [b for b in (_mem_available(proc), *_cgroup_headroom(proc, cgroup_root)) if b is not None]
    return min(found) if found else None


def _mem_available(proc: str) -> int | None:
    try:
        with open(f"{proc}/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


# (line of /proc/self/cgroup naming the hierarchy, its mount under the cgroup root, limit, usage)
CGROUP_FILES = (
    ("0::", "", "memory.max", "memory.current"),
    ("memory:", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
)


def _cgroup_headroom(proc: str, cgroup_root: str) -> list[int]:
    """Limit minus usage of this process's memory cgroup and each group above it (v2 and v1), for
    every group that has a limit. A group outside this namespace's view is read at the root."""
    try:
        with open(f"{proc}/self/cgroup") as listing:
            lines = listing.read().splitlines()
    except OSError:
        return []
    headroom = []
    for line in lines:
        for marker, mount, limit_file, usage_file in CGROUP_FILES:
            _, found, path = line.partition(marker)
            if not found or (marker == "0::" and not line.startswith("0::")):
                continue
            folder = Path(cgroup_root, mount, path.lstrip("/"))
            folders = [folder, *folder.parents] if folder.exists() else [Path(cgroup_root, mount)]
            for group in folders:
                if len(group.parts) < len(Path(cgroup_root, mount).parts):
                    break
                limit, usage = _read_int(group / limit_file), _read_int(group / usage_file)
                if limit is not None and usage is not None and limit < UNLIMITED:
                    headroom.append(max(0, limit - usage))
    return headroom


UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a number near 2**63; v2 writes "max"


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
