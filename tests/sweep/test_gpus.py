"""NVML's view of the visible GPUs, on a made-up machine (tests/support/fake_nvml.py): index,
UUID and MIG names of CUDA_VISIBLE_DEVICES all find the right card, numbered in PCI bus order."""

import pytest

from sweep.machine import environment, gpus
from tests.support import fake_nvml

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
C = "GPU-cccccccc-0000-0000-0000-000000000000"
MIG = "MIG-dddddddd-0000-0000-0000-000000000000"


@pytest.fixture
def machine(monkeypatch):
    """Three cards; NVML enumerates them out of PCI order (C, A, B), the last in MIG mode."""
    card_a = fake_nvml.h100("00000000:1B:00.0", A)
    card_b = fake_nvml.h100("00000000:2C:00.0", B, memory_gib=94)
    card_c = fake_nvml.with_mig(fake_nvml.h100("00000000:9D:00.0", C), ("3g.40gb", MIG, 40, 1, 0))
    fake_nvml.install([card_c, card_a, card_b], monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def uuids(visible=None):
    return [g.uuid for g in gpus.visible_gpus(visible)]


def test_indices_follow_the_pci_bus_order(machine):
    assert uuids() == [A, B, C]
    assert uuids("1") == [B] and uuids("2,0") == [C, A]


def test_uuids_and_their_prefixes_name_cards(machine):
    assert uuids(B) == [B]
    assert uuids("GPU-bbbb,GPU-aaaa") == [B, A]


def test_a_mig_slice_reports_its_own_memory(machine):
    [slice_] = gpus.visible_gpus(MIG)
    assert slice_.memory_bytes == 40 * 2**30 and slice_.label == "H100 80GB HBM3 MIG 3g.40gb"
    assert slice_.pci_bus_id == "00000000:9D:00.0" and slice_.capability == (9, 0)
    [legacy] = gpus.visible_gpus(f"MIG-{C}/1/0")
    assert legacy.uuid == MIG


def test_a_mig_enabled_card_named_by_index_says_it_cannot_tell_its_memory(machine):
    [card] = gpus.visible_gpus("2")
    assert card.memory_bytes is None and "MIG mode" in card.memory_note


def test_parsing_stops_at_the_first_entry_that_names_nothing(machine):
    assert uuids("0,7,1") == [A] and uuids("-1") == [] and uuids("GPU-ffff") == []


def test_the_cells_device_picks_its_card_and_label(machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{B},{MIG}")
    assert environment.hardware_label("cuda") == "H100 80GB HBM3"
    assert environment.gpu_info("cuda:0")["memory_bytes"] == 94 * 2**30
    assert environment.gpu_info("cuda:1")["memory_bytes"] == 40 * 2**30
    assert environment.hardware_label("cuda:1") == "H100 80GB HBM3 MIG 3g.40gb"
    with pytest.raises(LookupError, match="cuda:2: only 2 GPU"):
        gpus.gpu_for("cuda:2")
    identity = environment.worker_identity("cuda:1")
    assert identity["gpu_uuid"] == MIG and identity["cuda_visible_devices"] == f"{B},{MIG}"


def test_no_nvml_means_no_gpus(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    assert gpus.count() == 0
    with pytest.raises(gpus.NvmlUnavailable):
        gpus.visible_gpus()


def test_devices_this_machine_lacks_are_refused_before_anything_runs(machine, monkeypatch):
    from sweep.run.preflight import device_problems

    monkeypatch.setattr("torch._C._has_cuda", True)  # what torch.backends.cuda.is_built reads
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{A},{MIG}")
    assert device_problems("cuda:1", skip_predicted_oom=True, card_gib=None) == []
    assert device_problems("cuda:2", False, None) == [
        f"device=cuda:2, but 2 GPU(s) are visible to this process (NVML, CUDA_VISIBLE_DEVICES={A},{MIG})"
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # the MIG-enabled card by index: NVML cannot tell its memory,
    assert device_problems("cuda", True, None) == []  # and need not: the cell asks CUDA what it can allocate
    assert device_problems("cuda", True, 40) == []
    assert device_problems("tpu", False, None) == ["unknown device 'tpu'; valid: auto, cpu, cuda, cuda:N"]
    monkeypatch.setattr("torch._C._has_cuda", False)
    assert "was built without CUDA" in device_problems("cuda", False, None)[0]


def test_auto_is_cuda_where_nvml_sees_a_card_and_torch_has_cuda(machine, fake_cuda, monkeypatch):
    """device=auto over torch's own torch.backends (its C flag faked, tests/support/fake_cuda.py):
    NVML's cards and a torch built with CUDA give `cuda`, CUDA itself untouched; a CPU build `cpu`."""
    assert environment.resolve_device("auto") == "cuda" and fake_cuda.calls == []
    monkeypatch.setattr("torch._C._has_cuda", False)
    assert environment.resolve_device("auto") == "cpu"


def test_auto_is_cpu_without_importing_torch_where_nvml_sees_no_card():
    """NOTE [ A sweep's own process imports no torch ]: a host without GPUs is told so by NVML."""
    import subprocess
    import sys

    from tests.support.sweeps import ROOT

    script = (
        "import sys\nfrom tests.support import fake_nvml\nfake_nvml.install([])\n"
        "from sweep.machine import environment\nprint(environment.resolve_device('auto'), 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.split() == ["cpu", "False"], done.stdout + done.stderr
