"""Accelerator presets: look-up, aliases, datasheet figures, precision fallback."""

import pytest

import parastrat as ps
from parastrat.errors import SpecError
from parastrat.spec.hardware import GiB, canonical_precision

REQUIRED = ("a100", "h100", "h200", "b200", "b300", "gb200", "gb300", "ascend-910b", "ascend-910c")


def test_all_presets_present_and_sane():
    assert set(REQUIRED) <= set(ps.hardware.names())
    for name in REQUIRED:
        acc = ps.hardware.get(name)
        assert acc.name == name
        assert acc.vendor in ("nvidia", "huawei")
        assert acc.memory_bytes >= 40 * GiB
        assert acc.peak("bf16") > 100e12
        # achievable scale-up bandwidth is labelled as such: never above the link peak
        assert 0 < acc.scale_up_bw_Bps <= acc.scale_up_peak_Bps
        assert acc.scale_out_bw_Bps > 0 and acc.mem_bandwidth_Bps > 0
        assert acc.source


def test_datasheet_figures():
    # NVIDIA H100 SXM datasheet: 989 TFLOPS BF16 dense, 1979 FP8 dense, 80 GB
    h100 = ps.hardware.get("h100")
    assert h100.peak("bf16") == 989e12
    assert h100.peak("fp8") == 1979e12
    assert h100.memory_bytes == 80 * 1024**3
    assert h100.scale_out_bw_Bps == 400e9 / 8  # one 400 Gb/s NDR NIC per GPU
    assert h100.scale_up_peak_Bps == 450e9  # NVLink4 900 GB/s bidirectional
    assert 360e9 <= h100.scale_up_bw_Bps <= 400e9  # achievable all-reduce busbw
    assert ps.hardware.get("a100").peak("bf16") == 312e12
    # Blackwell: fp8 is twice bf16, dense
    for name in ("b200", "b300", "gb200", "gb300"):
        acc = ps.hardware.get(name)
        assert 2.25e15 <= acc.peak("bf16") <= 2.5e15
        assert acc.peak("fp8") == 2 * acc.peak("bf16") == acc.peak("mxfp8")
    assert ps.hardware.get("gb200").scale_up_domain == 72
    assert ps.hardware.get("gb300").scale_up_domain == 72
    assert ps.hardware.get("gb300").scale_out_bw_Bps == 800e9 / 8
    assert ps.hardware.get("h100").scale_up_domain == 8
    assert ps.hardware.get("ascend-910b").memory_bytes == 64 * GiB
    assert ps.hardware.get("ascend-910b").scale_up_domain == 8
    assert ps.hardware.get("ascend-910c").memory_bytes == 128 * GiB
    assert 313e12 <= ps.hardware.get("ascend-910b").peak("bf16") <= 376e12
    assert 752e12 <= ps.hardware.get("ascend-910c").peak("bf16") <= 800e12


def test_fp8_falls_back_to_bf16_where_absent():
    a100 = ps.hardware.get("a100")
    assert not a100.supports("fp8")
    assert a100.peak("fp8") == a100.peak("bf16")
    ascend = ps.hardware.get("ascend-910b")
    assert ascend.peak("mxfp8") == ascend.peak("bf16")
    # H100 has no MXFP8 tensor cores; its fp8 rate is used
    assert ps.hardware.get("h100").peak("mxfp8") == 1979e12


@pytest.mark.parametrize("alias", ["H100", "h100-sxm", "H100_SXM5", " h100 "])
def test_aliases_case_insensitive(alias):
    assert ps.hardware.get(alias) is ps.hardware.get("h100")


def test_unknown_lists_known_names():
    with pytest.raises(SpecError) as info:
        ps.hardware.get("tpu-v5")
    assert "h100" in str(info.value) and "ascend-910b" in str(info.value)


def test_precision_spellings():
    assert canonical_precision("FP8-CS") == "fp8"
    assert canonical_precision("BF16") == "bf16"
    assert canonical_precision("MXFP8") == "mxfp8"
    with pytest.raises(SpecError, match="unknown precision"):
        canonical_precision("int3")
