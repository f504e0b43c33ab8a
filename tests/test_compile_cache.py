"""The compiled-program cache on disk (python/torchneuron/compile/cache.py).

Entries are checked like any file another process may have written: whole or
absent while being written, corruption and truncation detected and rebuilt,
keys that change with everything a program depends on, and PyTorch's portable
cache (save/load_cache_artifacts) carrying the entries to another process.
"""
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchneuron.compile import cache

ROOT = Path(__file__).resolve().parents[1]
KEY = "ab" + "0" * 62


def test_entries_round_trip_and_miss_cleanly(tmp_path):
    assert cache.load(KEY, tmp_path) == (None, None)
    payload = bytes(range(256)) * 40
    assert cache.store(KEY, payload, tmp_path)
    assert cache.load(KEY, tmp_path) == (payload, None)
    assert cache.store(KEY, b"", tmp_path)  # an empty program is a valid entry
    assert cache.load(KEY, tmp_path) == (b"", None)
    leftovers = [p for p in tmp_path.rglob("*") if p.suffix == ".tmp"]
    assert not leftovers, leftovers


@pytest.mark.parametrize("damage, why", [
    (lambda b: b[:10], "truncated header"),
    (lambda b: b[:-1], "truncated payload"),
    (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum mismatch"),
    (lambda b: b"XXXXXXXX" + b[8:], "bad magic"),
    (lambda b: b[:8] + (cache.ENTRY_VERSION + 1).to_bytes(4, "little") + b[12:], "entry format version"),
])
def test_bad_entries_are_reported_removed_and_rebuilt(tmp_path, damage, why):
    cache.store(KEY, b"program" * 100, tmp_path)
    path = next(tmp_path.rglob("*.prog"))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(UserWarning, match=why):
        payload, reason = cache.load(KEY, tmp_path)
    assert payload is None and why in reason
    assert not path.exists(), "the bad entry was left in place"
    assert cache.store(KEY, b"rebuilt", tmp_path)
    assert cache.load(KEY, tmp_path) == (b"rebuilt", None)


def test_unwritable_directory_keeps_working_in_memory(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.warns(UserWarning, match="kept in memory only"):
        assert not cache.store(KEY, b"x", blocked / "cache")
    assert cache.load(KEY, blocked / "cache") == (None, None)


def test_malformed_keys_are_refused(tmp_path):
    with pytest.raises(ValueError, match="malformed key"):
        cache.store("../escape", b"x", tmp_path)


def test_directory_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    assert not cache.store(KEY, b"x") and cache.load(KEY) == (None, None)
    monkeypatch.delenv("TORCHNEURON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "torchneuron" / "compile"


def test_keys_change_with_graph_options_and_environment(monkeypatch):
    base = cache.program_key(b"graph", {"mode": "default"})
    assert base == cache.program_key(b"graph", {"mode": "default"})
    assert base != cache.program_key(b"graph2", {"mode": "default"})
    assert base != cache.program_key(b"graph", {"mode": "max-autotune"})
    env = dict(cache.environment())
    monkeypatch.setattr(cache, "_environment", dict(env, kernel_isa="baseline"))
    assert base != cache.program_key(b"graph", {"mode": "default"}), "the CPU features are not in the key"
    monkeypatch.setattr(cache, "_environment", dict(env, torch="0.0"))
    assert base != cache.program_key(b"graph", {"mode": "default"}), "the torch version is not in the key"


def _writer(directory, payload, rounds):
    for _ in range(rounds):
        assert cache.store(KEY, payload, Path(directory))


def test_concurrent_writers_and_readers_see_whole_entries(tmp_path):
    payload = os.urandom(1 << 20)
    ctx = mp.get_context("fork")  # the writers only write files: no device use after the fork
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), payload, 20)) for _ in range(2)]
    for w in writers:
        w.start()
    seen = 0
    while any(w.is_alive() for w in writers):
        got, why = cache.load(KEY, tmp_path)
        assert why is None, why  # never a partial entry
        seen += got is not None
        assert got in (None, payload)
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    assert cache.load(KEY, tmp_path) == (payload, None)
    assert not list(tmp_path.rglob("*.tmp"))


def test_save_cache_artifacts_carries_entries_to_another_process(tmp_path):
    """torch.compiler.save_cache_artifacts() in one process, load_cache_artifacts()
    in a fresh one with an empty cache directory: the entry is there afterwards."""
    script = textwrap.dedent(f"""
        import sys, torch, torch.compiler
        from torchneuron.compile import cache
        key = {KEY!r}
        if sys.argv[1] == "save":
            cache.store(key, b"portable program")
            saved = torch.compiler.save_cache_artifacts()
            assert saved is not None, "no artifacts recorded"
            artifacts, info = saved
            assert info.neuron_program_artifacts == [key], info.artifacts
            open(sys.argv[2], "wb").write(artifacts)
        else:
            assert cache.load(key) == (None, None)
            info = torch.compiler.load_cache_artifacts(open(sys.argv[2], "rb").read())
            assert info is not None and info.neuron_program_artifacts == [key]
            assert cache.load(key) == (b"portable program", None)
            print("loaded")
    """)
    blob = tmp_path / "artifacts.bin"
    for step, directory in (("save", "a"), ("load", "b")):
        env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(tmp_path / directory),
                   PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
        result = subprocess.run([sys.executable, "-c", script, step, str(blob)], env=env,
                                capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("loaded")


def test_a_second_process_hits_the_cache_and_a_corrupt_entry_is_rebuilt(tmp_path):
    """The same compiled MLP in three fresh processes sharing one cache folder:
    the first compiles and stores its programs, the second loads them (equal
    outputs), the third finds every entry corrupted and compiles again."""
    script = textwrap.dedent("""
        import sys, warnings, torch, torchneuron
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("neuron")
        x = torch.randn(3, 8).to("neuron")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = torch.compile(model, backend="neuron")(x)
            y.sum().backward()
        records = torchneuron.compile_metrics()
        states = [p["cache"] for r in records for p in r["programs"].values()]
        print(",".join(states), float(y.sum()), float(model[0].weight.grad.sum()),
              sum("bad entry" in str(w.message) for w in caught))
    """)
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))

    def run():
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        states, out, grad, bad = r.stdout.split()
        return states.split(","), float(out), float(grad), int(bad)

    first = run()
    assert first[0] == ["miss", "miss"] and first[3] == 0, first  # forward and backward programs
    entries = list((tmp_path / "cache").rglob("*.prog"))
    assert len(entries) == 2, entries
    second = run()
    assert second[0] == ["hit", "hit"], second
    assert second[1:3] == first[1:3], "a program from the cache computes something else"
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[-1] ^= 0xFF
        entry.write_bytes(bytes(data))
    third = run()
    assert third[0] == ["miss", "miss"] and third[3] == 2, third
    assert third[1:3] == first[1:3]
    assert len(list((tmp_path / "cache").rglob("*.prog"))) == 2, "the bad entries were not rebuilt"


WARM_START_SCRIPT = textwrap.dedent("""
    import sys, torch, torchneuron
    from torchneuron.compile import executor
    step, blob = sys.argv[1], sys.argv[2]
    if step == "load":
        torch.compiler.load_cache_artifacts(open(blob, "rb").read())
    if step in ("warm", "load"):
        def refuse(*args, **kwargs):
            raise AssertionError("a graph was traced and compiled although AOTAutograd's cache has it")
        executor.build = refuse
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("neuron")
    x = torch.randn(3, 8).to("neuron")
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        y = compiled(x)  # an inference graph
    assert "torch._inductor.lowering" not in sys.modules, "AOTAutograd's cache key imported Inductor's lowerings"
    compiled(x).sum().backward()  # a training graph: forward and backward
    # From its second call n is a runtime integer: n * 3 + 1 is a host step of the call
    # plan; the arange, which depends on no input, a constant of the plan.
    count = torch.compile(lambda t, n: (t * 2 + torch.arange(8, device=t.device), n * 3 + 1), backend="neuron")
    counted = [(float(count(x, n)[0].sum()), count(x, n)[1]) for n in (1, 2, 3)]
    expected = float((x.cpu() * 2 + torch.arange(8)).sum())
    assert all(abs(total - expected) < 1e-4 for total, _ in counted), (counted, expected)
    # The cache keys were computed without importing Inductor's code generators (output_code.py);
    # a cold training graph imports them anyway (the partitioner's CSE uses Inductor's pattern matcher).
    if step in ("warm", "load"):
        assert "torch._inductor.lowering" not in sys.modules, "AOTAutograd's cache key imported Inductor's lowerings"
    if step == "cold":
        # A graph the compiler leaves to eager ops (a tensor times a runtime integer)
        # is not kept by AOTAutograd's cache.
        scale = torch.compile(lambda t, n: t * n, backend="neuron")
        assert [float(scale(x, n).sum()) for n in (1, 2)] == [float(x.sum() * n) for n in (1, 2)]
        open(blob, "wb").write(torch.compiler.save_cache_artifacts()[0])
    states = [(r["aot_cache"], sorted(p.get("cache", p["executor"]) for p in r["programs"].values()))
              for r in torchneuron.compile_metrics()]
    print(repr((states, float(y.sum()), float(model[0].weight.grad.sum()), counted)))
""")


def test_a_second_process_skips_aotautograd_with_our_programs_in_its_cache(tmp_path):
    """Warm starts (docs/compile.md, "Cache"): AOTAutograd's cache keeps each graph
    with what the backend compiled, so another process neither traces nor compiles
    it (executor.build is made to fail there), also with the programs deleted (they
    are compiled again from the kept text), also from save_cache_artifacts() in
    fresh directories; corrupt entries are compiled again."""
    import ast
    import shutil

    blob = tmp_path / "artifacts.bin"

    def run(step, where):
        env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(tmp_path / where / "programs"),
                   TORCHINDUCTOR_CACHE_DIR=str(tmp_path / where / "torch"),
                   PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, "-c", WARM_START_SCRIPT, step, str(blob)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return ast.literal_eval(r.stdout.strip().splitlines()[-1])

    cold = run("cold", "a")
    states, values = cold[0], cold[1:]
    assert states[:3] == [("miss", ["miss"]), ("miss", ["miss", "miss"]), ("miss", ["miss"])], states
    assert states[3][0] == "miss" and states[5] == ("bypass", ["eager"]), states
    assert [n for _, n in values[2]] == [4, 7, 10]

    def expect(result, programs):
        got_states, got_values = result[0], result[1:]
        assert [s for s, _ in got_states] == ["hit"] * 4, got_states
        assert [p for _, p in got_states][:3] == [[programs], [programs, programs], [programs]], got_states
        assert got_values == values, "a graph from AOTAutograd's cache computes something else"

    expect(run("warm", "a"), "hit")  # programs from the disk cache
    shutil.rmtree(tmp_path / "a" / "programs")
    expect(run("warm", "a"), "miss")  # programs compiled again from the entries' text
    expect(run("load", "b"), "hit")  # both caches from the artifacts, in empty directories
    for entry in (tmp_path / "a" / "torch" / "aotautograd").rglob("*"):
        if entry.is_file():
            data = bytearray(entry.read_bytes())
            data[len(data) // 2] ^= 0xFF
            entry.write_bytes(bytes(data))
    corrupt = run("corrupt", "a")
    assert [s for s, _ in corrupt[0]] == ["miss"] * 4 and corrupt[1:] == values, corrupt


def test_the_cache_key_still_registers_inductors_code_generators():
    """output_code.without_inductor_registration replaces codecache's reference
    to Inductor's registration while the backend computes AOTAutograd's key: it
    is needed (and right) only while the key's constructor calls it by that name."""
    import inspect

    from torch._inductor import codecache

    from torchneuron.compile import output_code

    assert "init_backend_registration()" in inspect.getsource(codecache.FxGraphHashDetails.__init__)
    original = codecache.init_backend_registration
    with output_code.without_inductor_registration():
        assert codecache.init_backend_registration is not original
    assert codecache.init_backend_registration is original


@pytest.mark.usefixtures("fresh_dynamo")
def test_no_disk_cache_means_no_aotautograd_entries(monkeypatch):
    import torch

    import torchneuron

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", "off")
    got = torch.compile(lambda t: t * 2 + 1, backend="neuron")(torch.ones(3, device="neuron"))
    assert got.cpu().tolist() == [3.0] * 3
    (record,) = torchneuron.compile_metrics()
    assert record["aot_cache"] == "off" and record["cache"] == "miss", record


def test_a_compiled_optimizer_step_loads_from_the_cache_in_another_process(tmp_path):
    """A compiled AdamW step's call plan holds host ops (its step counters'
    arithmetic): pickled into AOTAutograd's cache, a second process loads it
    and gets the same parameters and step counts."""
    script = textwrap.dedent("""
        import torch, torchneuron
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 32).to("neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        step = torch.compile(opt.step, backend="neuron")
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=g).to("neuron")
            step()
        record = torchneuron.compile_metrics()[-1]
        print(record["aot_cache"], record["programs"]["inference"]["executor"],
              float(opt.state[model.weight]["step"]), repr(float(model.weight.double().sum())))
    """)
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(tmp_path / "cache"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))

    def run():
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout.split()

    first, second = run(), run()
    assert first[:3] == ["miss", "compiler", "3.0"], first
    assert second[:3] == ["hit", "compiler", "3.0"], second
    assert first[3] == second[3]
