#!/usr/bin/env python3
"""Fails when a function outside the kernels' ISA namespaces uses instructions
above baseline x86-64.

Only code in `neuronkernels::isa_<level>` (and the compiler's tile primitives
in `neuroncompiler::isa_<level>`, built the same way) may use a level's
instructions: the
dispatch runs it only on CPUs that have them. The same holds for the clones GCC
makes of a `__attribute__((target_clones("avx512f", "avx2", "default")))`
function (`f [clone .avx2]`, `f [clone .avx512f]`, as in collectives/): an
ifunc resolver picks the clone for the CPU at load time. A clone may use its
own level's instructions only: AVX-512 (zmm registers, mask registers, the
EVEX-only xmm16-31/ymm16-31) in an `.avx2` clone is a leak, and so is anything
above baseline in `[clone .default]`. Any other function -- ours, a
std:: template instantiated by a kernel file, a helper of a test -- runs on
every CPU, so an AVX instruction there is a SIGILL waiting for a CPU without
it (kernels/src/isa_region_begin.hpp explains how such code arises).

Usage: check_isa_leaks.py BINARY [BINARY ...]  (ELF executables, shared
objects or static libraries; needs binutils' objdump). Exit 0 when clean, 1
with the offending functions and a sample instruction of each, 2 on error.
"""
import re
import shutil
import subprocess
import sys

# Mnemonics above baseline x86-64 (SSE2): every VEX/EVEX instruction (AT&T
# mnemonics starting with "v": AVX, AVX2, FMA, F16C, AVX-512), AVX-512 mask
# instructions, SSE3, SSSE3, SSE4.1/4.2, POPCNT/LZCNT, BMI1/2, MOVBE.
_ABOVE_BASELINE = set("""
addsubps addsubpd haddps haddpd hsubps hsubpd lddqu movddup movshdup movsldup fisttp
pshufb phaddw phaddd phaddsw phsubw phsubd phsubsw pmaddubsw pmulhrsw palignr
psignb psignw psignd pabsb pabsw pabsd
blendps blendpd blendvps blendvpd pblendw pblendvb dpps dppd insertps extractps
pextrb pextrd pextrq pinsrb pinsrd pinsrq pmaxsb pmaxsd pmaxud pmaxuw pminsb pminsd
pminud pminuw pmovsxbw pmovsxbd pmovsxbq pmovsxwd pmovsxwq pmovsxdq pmovzxbw pmovzxbd
pmovzxbq pmovzxwd pmovzxwq pmovzxdq pmuldq pmulld ptest roundps roundpd roundss roundsd
packusdw pcmpeqq movntdqa mpsadbw phminposuw
pcmpgtq pcmpestri pcmpestrm pcmpistri pcmpistrm crc32
popcnt lzcnt tzcnt andn bextr blsi blsmsk blsr bzhi mulx pdep pext rorx sarx shlx shrx movbe
""".split())
_SIZE_SUFFIX = re.compile(r"^(.*?)[bwlq]$")
_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?:[a-z]+ )*?([a-z][a-z0-9.]*)\b")
_PREFIXES = {"lock", "rep", "repz", "repnz", "repe", "repne", "notrack", "bnd", "data16", "addr32"}


def above_baseline(mnemonic: str) -> bool:
    if mnemonic.startswith("v") and mnemonic not in ("verr", "verw"):
        return True
    if mnemonic.startswith("k") and len(mnemonic) > 4:  # kmovw, kortestw, kandnw, ...
        return True
    if mnemonic in _ABOVE_BASELINE:
        return True
    m = _SIZE_SUFFIX.match(mnemonic)  # popcntl, shlxq, crc32b, ...
    return bool(m) and m.group(1) in _ABOVE_BASELINE


def strip_groups(name: str) -> str:
    """The qualified name without template arguments and parameter lists."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


# The kernels' bodies and the compiler's tile primitives (compiler/), built
# the same way.
ISA_NAMESPACES = ("neuronkernels::isa_", "neuroncompiler::isa_")


def is_isa_code(name: str) -> bool:
    stripped = strip_groups(name)
    return any(ns in stripped for ns in ISA_NAMESPACES)


# target_clones levels and whether their clones may use AVX-512.
_CLONE_LEVELS = {"avx2": False, "avx512f": True}
_CLONE = re.compile(r"\[clone \.(avx2|avx512f)\]$")
_AVX512_OPERAND = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{%k")


def clone_level(name: str):
    """The target_clones level of a function clone ("avx2", "avx512f"), or None."""
    m = _CLONE.search(name)
    return m.group(1) if m else None


def allowed_in_clone(level: str, mnemonic: str, line: str) -> bool:
    if _CLONE_LEVELS[level]:
        return True
    return not (_AVX512_OPERAND.search(line) or (mnemonic.startswith("k") and len(mnemonic) > 4))


def leaks(binary: str):
    proc = subprocess.run(
        ["objdump", "-d", "-C", "--no-show-raw-insn", binary],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"objdump failed on {binary}: {proc.stderr.strip()}")
    found, current, functions = {}, None, 0
    for line in proc.stdout.splitlines():
        m = _FUNC.match(line)
        if m:
            current, functions = m.group(1), functions + 1
            continue
        if current is None or current in found:
            continue
        m = _INSN.match(line)
        if not m:
            continue
        mnemonic = m.group(1)
        if mnemonic in _PREFIXES:
            continue
        if not above_baseline(mnemonic) or is_isa_code(current):
            continue
        level = clone_level(current)
        if level is None or not allowed_in_clone(level, mnemonic, line):
            found[current] = line.strip()
    return found, functions


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if shutil.which("objdump") is None:
        print("check_isa_leaks: objdump not found (Debian package binutils)", file=sys.stderr)
        return 2
    bad = 0
    for binary in argv[1:]:
        try:
            found, functions = leaks(binary)
        except RuntimeError as e:
            print(f"check_isa_leaks: {e}", file=sys.stderr)
            return 2
        if functions == 0:
            print(f"check_isa_leaks: no functions disassembled in {binary}", file=sys.stderr)
            return 2
        for name, insn in sorted(found.items()):
            print(f"{binary}: {name}\n    uses an instruction above baseline x86-64: {insn}")
        bad += len(found)
        print(f"{binary}: {functions} functions, {len(found)} outside the ISA namespaces "
              f"with instructions above baseline (target_clones clones: their own level)")
    if bad:
        print("Code outside the ISA namespaces runs on every CPU: move it into a kernel body's "
              "ISA region or compile it for baseline (see kernels/src/isa_region_begin.hpp).")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
