"""Instruction-set levels of the device's own kernels: TORCHNEURON_ISA forces a
level (also one below the CPU's best, so every level's code runs on any
machine), a level the CPU lacks is a clear error, and no code outside the
kernels' ISA namespaces uses instructions above baseline x86-64.

The kernels' own tests run at every level: ctest runs the gtest suite once
per level, and scripts/test.sh runs tests/test_attention.py and
tests/test_matmul.py again at each level below the CPU's best."""
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchneuron

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ["baseline", "avx2", "avx512", "avx512_bf16"]

_REPORT = """
    import json
    import torch
    import torch.nn.functional as F
    import torchneuron
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 70, 64) for _ in range(3))
    x, w = torch.randn(3, 200), torch.randn(96, 200)
    dev = [t.to("neuron") for t in (q, k, v, x, w)]
    att = F.scaled_dot_product_attention(*dev[:3], is_causal=True).cpu()
    lin = F.linear(dev[3], dev[4]).cpu()
    ops = torchneuron.executed_ops()
    print(json.dumps({
        "isa": torchneuron.kernel_isa(),
        "attention_err": (att - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max().item(),
        "linear_err": (lin - F.linear(x, w)).abs().max().item(),
        "kernels": sorted(name for name in ops if "attention" in name or name in ("aten::mm", "aten::addmm")),
    }))
"""


def test_level_in_force_is_the_forced_one_or_the_best():
    supported = torchneuron.supported_kernel_isas()
    assert supported[0] == "baseline"
    assert supported == [lv for lv in LEVELS if lv in supported], supported  # lowest first
    assert torchneuron.kernel_isa() == (os.environ.get("TORCHNEURON_ISA") or supported[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("level", LEVELS)
def test_forced_level_runs_the_kernels(start_python, level):
    if level not in torchneuron.supported_kernel_isas():
        pytest.skip(f"this CPU cannot run level {level} "
                    f"(it supports {torchneuron.supported_kernel_isas()})")
    out = json.loads(start_python(_REPORT, {"TORCHNEURON_ISA": level}).wait(240).stdout)
    assert out["isa"] == level
    assert out["attention_err"] < 1e-5, out
    assert out["linear_err"] < 1e-4, out
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in out["kernels"], out


_UNAVAILABLE = """
    import torch
    import torchneuron
    print(torch.neuron.is_available(), torch.neuron.device_count())
    print((torch.ones(2) * 3).tolist())  # the CPU keeps working
    for use in (torchneuron.kernel_isa, lambda: torch.ones(2, device="neuron")):
        try:
            use()
            print("no error")
        except RuntimeError as e:
            print(type(e).__name__, e)
"""


@pytest.mark.timeout(150)
def test_level_the_cpu_lacks_is_a_clear_error(run_python):
    supported = torchneuron.supported_kernel_isas()
    missing = [lv for lv in LEVELS if lv not in supported]
    if not missing:
        pytest.skip("this CPU supports every level, so none can be refused")
    lines = run_python(_UNAVAILABLE, {"TORCHNEURON_ISA": missing[0]}, timeout=120).stdout.splitlines()
    assert lines[:2] == ["False 0", "[3.0, 3.0]"], lines
    assert len(lines) == 4, lines
    for line in lines[2:]:
        assert line.startswith("RuntimeError [neuron]"), line
        assert f"TORCHNEURON_ISA='{missing[0]}' needs the CPU features" in line, line
        assert "levels it supports: " + ", ".join(supported) in line, line


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the check reads x86-64 instructions")
@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
def test_extension_has_no_isa_code_outside_the_isa_namespaces():
    ext = Path(torchneuron._C.__file__)
    proc = subprocess.run([sys.executable, str(ROOT / "kernels/tools/check_isa_leaks.py"), str(ext)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 outside the ISA namespaces" in proc.stdout, proc.stdout


def test_leak_check_catches_code_above_baseline(tmp_path):
    """The checker itself: a function compiled for AVX2 outside the ISA
    namespaces is reported; the same function inside one is not."""
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        pytest.skip("needs x86-64 and objdump (binutils)")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    src = tmp_path / "leak.cpp"
    src.write_text(
        "__attribute__((target(\"avx2,fma\"))) void scale(float* x, int n) {\n"
        "  for (int i = 0; i < n; ++i) x[i] = x[i] * 3.0f + 1.0f; }\n"
        "namespace neuronkernels::isa_avx2 {\n"
        "__attribute__((target(\"avx2,fma\"))) void scale(float* x, int n) {\n"
        "  for (int i = 0; i < n; ++i) x[i] = x[i] * 3.0f + 1.0f; } }\n")
    obj = tmp_path / "leak.o"
    subprocess.run([cxx, "-O3", "-c", str(src), "-o", str(obj)], check=True, timeout=120)
    proc = subprocess.run([sys.executable, str(ROOT / "kernels/tools/check_isa_leaks.py"), str(obj)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "leak.o: scale(float*, int)" in proc.stdout, proc.stdout
    assert "isa_avx2::scale" not in proc.stdout, proc.stdout
    assert "1 outside the ISA namespaces" in proc.stdout, proc.stdout


def test_leak_check_accepts_target_clones_at_their_own_level(tmp_path):
    """target_clones functions (collectives/'s reduction kernels): the `.avx2`
    and `.avx512f` clones may use their level, `.default` nothing above
    baseline, and an `.avx2` clone no AVX-512."""
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        pytest.skip("needs x86-64 and objdump (binutils)")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    src = tmp_path / "clones.cpp"
    src.write_text(
        "__attribute__((target_clones(\"avx512f\", \"avx2\", \"default\")))\n"
        "void add(float* x, const float* y, int n) { for (int i = 0; i < n; ++i) x[i] += y[i]; }\n"
        "__attribute__((target_clones(\"avx2\", \"default\")))\n"
        "void wide(float* x) { asm volatile(\"vpxord %%zmm0, %%zmm0, %%zmm0\" ::: \"memory\"); x[0] = 0; }\n")
    obj = tmp_path / "clones.o"
    subprocess.run([cxx, "-O3", "-c", str(src), "-o", str(obj)], check=True, timeout=120)
    proc = subprocess.run([sys.executable, str(ROOT / "kernels/tools/check_isa_leaks.py"), str(obj)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reported = [line for line in proc.stdout.splitlines() if line.startswith(str(obj) + ": ")
                and "functions" not in line]
    assert sorted(line.split(": ", 1)[1] for line in reported) == [
        "wide(float*) [clone .avx2]", "wide(float*) [clone .default]"], proc.stdout
    assert "2 outside the ISA namespaces" in proc.stdout, proc.stdout
