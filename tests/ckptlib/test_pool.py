import warnings

import pytest
import torch

from ckptlib import HostPool
from ckptlib.host import available_host_bytes


def test_buffers_are_reused_per_numel_and_dtype():
    pool = HostPool(max_buckets=4, pin=False)
    a = pool.acquire(100, torch.float32)
    pool.release(a)
    b = pool.acquire(100, torch.float32)
    assert b is a
    c = pool.acquire(100, torch.float16)
    assert c is not a
    assert (pool.stats.hits, pool.stats.misses) == (1, 2)
    assert pool.num_buckets == 2
    assert pool.stats.held_bytes == 100 * 4 + 100 * 2


def test_bucket_cap_evicts_the_least_recently_used_idle_bucket():
    pool = HostPool(max_buckets=2, pin=False)
    for n in (10, 20):
        pool.release(pool.acquire(n, torch.float32))
    pool.release(pool.acquire(10, torch.float32))  # 20 is now least recently used
    pool.release(pool.acquire(30, torch.float32))
    assert pool.stats.evictions == 1
    assert pool.num_buckets == 2
    assert pool.acquire(10, torch.float32).key == (10, torch.float32, torch.strided)
    assert pool.stats.held_bytes == (10 + 30) * 4


def test_busy_buckets_are_never_evicted_and_overflow_goes_pageable():
    pool = HostPool(max_buckets=1, pin=False)
    held = pool.acquire(10, torch.float32)
    extra = pool.acquire(20, torch.float32)
    assert extra.key is None and pool.stats.pageable_fallbacks == 1
    assert pool.stats.evictions == 0
    pool.release(extra)  # a one-off buffer is simply dropped
    pool.release(held)
    assert pool.num_buckets == 1


def test_zero_buckets_means_pageable_memory_only():
    pool = HostPool(max_buckets=0, pin=True)
    with pytest.warns(UserWarning, match="pageable host buffers") as warned:
        buffers = [pool.acquire(10, torch.float32) for _ in range(3)]
    assert len(warned) == 1  # once per pool, not per copy
    assert all(b.key is None and not b.tensor.is_pinned() for b in buffers)
    assert pool.stats.pageable_fallbacks == 3 and pool.num_buckets == 0 and pool.stats.pin_failures == 0


def test_pinning_failure_falls_back_to_pageable(monkeypatch):
    real_empty = torch.empty

    def refuse_pinning(*args, pin_memory=False, **kwargs):
        if pin_memory:
            raise RuntimeError("CUDA out of memory (host pinned memory cap)")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", refuse_pinning)
    pool = HostPool(max_buckets=4, pin=True)
    with pytest.warns(UserWarning, match="pinning failed .*host pinned memory cap"):
        buffer = pool.acquire(10, torch.float32)
    assert buffer.tensor.shape == (10,) and not buffer.tensor.is_pinned()
    assert pool.stats.pin_failures == 1 and pool.pin is False
    pool.acquire(10, torch.float32)
    assert pool.stats.pin_failures == 1  # no second attempt once pinning failed
    assert pool.stats.pinned_bytes == 0 and pool.stats.held_bytes == 80


def test_a_cpu_models_pageable_buffers_do_not_warn():
    pool = HostPool(max_buckets=0, pin=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool.acquire(10, torch.float32)


def test_keys_include_the_layout():
    pool = HostPool(max_buckets=4, pin=False)
    pool.release(pool.acquire(10, torch.float32))
    assert pool.acquire(10, torch.float32, torch.strided).key == (10, torch.float32, torch.strided)
    assert pool.stats.hits == 1


def test_the_pool_never_grows_past_its_limit():
    pool = HostPool(max_buckets=4, pin=False, limit_bytes=100 * 4)
    first = pool.acquire(60, torch.float32)
    assert pool.acquire(60, torch.float32) is None  # 480 bytes > 400
    assert pool.stats.refused_over_limit == 1 and pool.stats.held_bytes == 240
    pool.release(first)
    assert pool.acquire(60, torch.float32) is first  # a free buffer is reused whatever the limit
    one_off = HostPool(max_buckets=0, pin=False, limit_bytes=100)
    held = one_off.acquire(20, torch.float32)
    assert one_off.acquire(20, torch.float32) is None  # one-off buffers in use count too
    one_off.release(held)
    assert one_off.acquire(20, torch.float32) is not None


def _host(tmp_path, cgroup: str, files: dict[str, str], mem_available_kib: int = 1 << 30):
    """A /proc and a cgroup tree as the kernel writes them: a 1 TiB node unless the cgroup says less."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: {2 << 30} kB\nMemAvailable: {mem_available_kib} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup)
    root = tmp_path / "cgroup"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text + "\n")
    return str(proc), str(root)


@pytest.mark.parametrize(
    "cgroup, files",
    [
        # cgroup v2, the pod's limit on the group itself
        (
            "0::/kubepods/pod1\n",
            {"kubepods/pod1/memory.max": str(32 << 30), "kubepods/pod1/memory.current": str(30 << 30)},
        ),
        # cgroup v2, the limit one group up (the container's own group has none)
        (
            "0::/kubepods/pod1/c1\n",
            {
                "kubepods/pod1/memory.max": str(32 << 30),
                "kubepods/pod1/memory.current": str(30 << 30),
                "kubepods/pod1/c1/memory.max": "max",
                "kubepods/pod1/c1/memory.current": str(30 << 30),
            },
        ),
        # cgroup v1, in a namespace that shows the group at the root of the hierarchy
        (
            "4:memory:/docker/abc\n0::/\n",
            {"memory/memory.limit_in_bytes": str(32 << 30), "memory/memory.usage_in_bytes": str(30 << 30)},
        ),
    ],
    ids=["v2", "v2-parent", "v1"],
)
def test_available_host_memory_is_the_containers_headroom_not_the_nodes(tmp_path, cgroup, files):
    proc, root = _host(tmp_path, cgroup, files)
    assert available_host_bytes(proc, root) == 2 << 30


def test_a_cgroup_without_a_limit_leaves_the_nodes_available_memory(tmp_path):
    unlimited = {"memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "5"}
    proc, root = _host(tmp_path, "4:memory:/\n0::/\n", {**unlimited, "memory.max": "max", "memory.current": "7"})
    assert available_host_bytes(proc, root) == 1 << 40
