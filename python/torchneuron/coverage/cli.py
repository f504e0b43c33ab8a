"""Command line: python -m torchneuron.coverage --list FILE [--list FILE2 ...] --out DIR [--only a,b] [--stages s,t] [--device neuron]

Several lists run as one (in order; a model_type listed twice runs once).
`--all-causal-lm` adds every architecture of Transformers' causal-LM auto mapping
(after the lists' own; the rows come from the auto mappings), and `--exclude-list
FILE` leaves out the model_types of FILE (e.g. the mapping's architectures that no
list has).
`--stages` runs only the named stages (the build and `to_device` always run; the
others are reported as not run), e.g. `--stages compiled_forward,compiled_generate`
for the torch.compile stages alone.

Each architecture runs in its own worker process by default (a crash, a hang or a
device left in a bad state then costs that architecture only); `--in-process` runs
them all in this process instead. Progress is printed per architecture, and the
report is rewritten after each one, so a partial report is there while the run
goes on. Worker logs go to DIR/logs/.
"""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

COLUMNS = ("model_type", "causal_lm_class", "config_class")


def read_lists(paths):
    rows, seen = [], set()
    for path in paths:
        for row in read_list(path):
            if row["model_type"] not in seen:
                seen.add(row["model_type"])
                rows.append(row)
    return rows


def read_list(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if (r.get("model_type") or "").strip()]
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if missing:
        raise SystemExit(f"{path}: missing columns {missing}")
    return [{k: (v or "").strip() for k, v in r.items() if k} for r in rows]


def causal_lm_rows():
    """One row per model_type of Transformers' causal-LM auto mapping, in its order."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return [dict(model_type=m, causal_lm_class=cls, config_class=CONFIG_MAPPING_NAMES[m],
                 special_needs="from the causal-LM auto mapping")
            for m, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()]


def select_rows(args):
    """The rows of --list and --all-causal-lm, less --exclude-list's, narrowed by --only."""
    rows = read_lists(args.list)
    if args.all_causal_lm:
        seen = {r["model_type"] for r in rows}
        rows += [r for r in causal_lm_rows() if r["model_type"] not in seen]
    if args.exclude_list:
        excluded = {r["model_type"] for r in read_lists(args.exclude_list)}
        rows = [r for r in rows if r["model_type"] not in excluded]
    if args.only:
        wanted = [m.strip() for m in args.only.split(",") if m.strip()]
        unknown = sorted(set(wanted) - {r["model_type"] for r in rows})
        if unknown:
            raise SystemExit(f"--only: not among the architectures chosen: {', '.join(unknown)}")
        rows = [r for r in rows if r["model_type"] in wanted]
    return rows


def failed_record(row, stage, error, partial=None):
    from .common import STAGES

    rec = dict(partial or {})
    rec.update(model_type=row["model_type"], causal_lm_class=row["causal_lm_class"],
               config_class=row["config_class"], passed=False, stage=stage, error=error)
    rec.setdefault("stages", {s: {"status": "not run"} for s in STAGES})
    if stage in rec["stages"]:
        rec["stages"][stage] = {"status": "fail", "error": error}
    rec.setdefault("fallback_ops", [])
    rec.setdefault("sync_ops", {})
    return rec


def tail(path, n=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def run_in_worker(row, args, log_dir):
    """Runs one architecture in a child process; returns its record."""
    name = row["model_type"].replace("/", "_")
    result = os.path.join(log_dir, f"{name}.json")
    log = os.path.join(log_dir, f"{name}.log")
    for p in (result,):
        if os.path.exists(p):
            os.remove(p)
    cmd = [sys.executable, "-m", "torchneuron.coverage", "--worker", json.dumps(row), "--result", result,
           "--device", args.device, "--stage-timeout", str(args.stage_timeout)]
    if args.stages:
        cmd += ["--stages", ",".join(args.stages)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    limit = args.arch_timeout or 6 * args.stage_timeout
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    partial = None
    if os.path.exists(result):
        with open(result) as f:
            partial = json.load(f)
    if code == 0 and partial and partial.get("current_stage") == "done":
        return partial
    stage = (partial or {}).get("current_stage", "build")
    stage = stage.split(" ")[0] if stage else "build"
    if code is None:
        error = f"worker killed after {limit:g} s (hung in {stage})"
    else:
        last = tail(log, 3).strip().splitlines()
        error = f"worker exited with code {code} in {stage}" + (f": {last[-1][:200]}" if last else "")
    return failed_record(row, stage, error, partial)


def run_in_process(row, args, log_dir):
    from .runner import run_architecture

    try:
        return run_architecture(row, device=args.device, stage_timeout=args.stage_timeout, stages=args.stages,
                                progress=lambda msg: print(msg, flush=True) if args.verbose else None)
    except BaseException as e:  # a failure of one architecture never stops the run
        if isinstance(e, KeyboardInterrupt):
            raise
        return failed_record(row, "build", f"{type(e).__name__}: {e}"[:300])


def versions():
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "accelerate", "safetensors", "tokenizers", "huggingface-hub"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def summary_line(rec, seconds):
    if rec.get("passed"):
        status = "pass"
    else:
        status = f"FAIL at {rec.get('stage')}: {rec.get('error', '')[:140]}"
    extra = []
    if rec.get("fallback_ops"):
        extra.append("fallback " + ",".join(rec["fallback_ops"]))
    if rec.get("sync_ops"):
        extra.append(f"{sum(rec['sync_ops'].values())} warm sync ops")
    na = [s for s, v in rec.get("stages", {}).items() if v.get("status") == "n/a"]
    if na:
        extra.append("n/a " + ",".join(na))
    from .report import compiles_cell

    compiles = compiles_cell(rec.get("stages", {}))
    if compiles:
        extra.append(f"compiles {compiles}")
    extra += rec.get("notes") or []
    return f"{status} ({seconds:.1f} s{'; ' + '; '.join(extra) if extra else ''})"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m torchneuron.coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="append", default=[],
                   help="TSV with columns model_type, causal_lm_class, config_class[, special_needs]; repeatable")
    p.add_argument("--all-causal-lm", action="store_true",
                   help="also every architecture of Transformers' causal-LM auto mapping")
    p.add_argument("--exclude-list", action="append", default=[],
                   help="TSV whose model_types are left out; repeatable")
    p.add_argument("--merge", action="append", default=[],
                   help="output directory of an earlier run: write one report of these runs to --out; repeatable")
    p.add_argument("--out", help="output directory (coverage.json, coverage.md, logs/)")
    p.add_argument("--only", default="", help="comma-separated model_types to run")
    p.add_argument("--stages", default="",
                   help="comma-separated stages to run (default: all); build and to_device always run")
    p.add_argument("--device", default="neuron")
    p.add_argument("--stage-timeout", type=float, default=300.0, help="seconds per stage (default 300)")
    p.add_argument("--arch-timeout", type=float, default=0.0,
                   help="seconds per architecture worker (default 6 x stage timeout)")
    p.add_argument("--in-process", action="store_true", help="run every architecture in this process")
    p.add_argument("--verbose", action="store_true", help="print each stage as it starts (in-process)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.worker and (not (args.list or args.all_causal_lm or args.merge) or not args.out):
        p.error("--out and --list, --all-causal-lm or --merge are required")
    args.stages = parse_stages(p, args.stages)
    return args


def parse_stages(parser, text):
    """The stage names of --stages in the tool's order, or None (every stage)."""
    from .common import STAGES

    wanted = [s.strip() for s in text.split(",") if s.strip()]
    if not wanted:
        return None
    unknown = [s for s in wanted if s not in STAGES]
    if unknown:
        parser.error(f"--stages: unknown stage(s) {', '.join(unknown)}; the stages are {', '.join(STAGES)}")
    return [s for s in STAGES if s in wanted]


def worker_main(args):
    from .runner import run_architecture

    row = json.loads(args.worker)
    rec = run_architecture(row, device=args.device, stage_timeout=args.stage_timeout, result_path=args.result,
                           stages=args.stages, progress=lambda msg: print(msg, flush=True))
    print(json.dumps({k: rec.get(k) for k in ("model_type", "passed", "stage", "error")}), flush=True)
    return 0


def merge_main(args, argv):
    from . import report
    from .merge import merge_runs

    records, meta = merge_runs(args.merge)
    meta["merge_command"] = "python -m torchneuron.coverage " + " ".join(shlex.quote(a) for a in argv)
    os.makedirs(args.out, exist_ok=True)
    report.write_json(records, meta, args.out)
    md = report.write_markdown(records, meta, args.out)
    passed = sum(1 for r in records if r.get("passed"))
    print(f"{passed} of {len(records)} architectures pass; report in {md}", flush=True)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)

    from . import report

    if args.merge:
        return merge_main(args, argv)
    rows = select_rows(args)
    os.makedirs(args.out, exist_ok=True)
    log_dir = os.path.join(args.out, "logs")
    os.makedirs(log_dir, exist_ok=True)

    meta = dict(versions(), device=args.device, new_tokens=None, architectures=len(rows), stages=args.stages,
                command="python -m torchneuron.coverage " + " ".join(shlex.quote(a) for a in argv))
    from .common import NEW_TOKENS

    meta["new_tokens"] = NEW_TOKENS
    run = run_in_process if args.in_process else run_in_worker
    records = []
    t0 = time.perf_counter()
    for i, row in enumerate(rows, 1):
        print(f"[{i}/{len(rows)}] {row['model_type']} ...", flush=True)
        t = time.perf_counter()
        rec = run(row, args, log_dir)
        rec.pop("current_stage", None)
        records.append(rec)
        print(f"[{i}/{len(rows)}] {row['model_type']}: {summary_line(rec, time.perf_counter() - t)}", flush=True)
        meta["wall_time_s"] = round(time.perf_counter() - t0, 1)
        report.write_json(records, meta, args.out)
        report.write_markdown(records, meta, args.out)
    meta["wall_time_s"] = round(time.perf_counter() - t0, 1)
    report.write_json(records, meta, args.out)
    md = report.write_markdown(records, meta, args.out)
    passed = sum(1 for r in records if r.get("passed"))
    print(f"{passed} of {len(records)} architectures pass; report in {md} ({meta['wall_time_s']:.0f} s)", flush=True)
    return 0
