"""One report from several runs that ran different stages (`--merge DIR --merge DIR2 --out
DIR3`): e.g. the eager stages of every architecture and the torch.compile stages run on
their own. For each architecture a stage takes the result of the last run that ran it;
the outcome is then that of all its stages together."""
import json
import os

from .common import STAGES

NOT_RUN = {"status": "not run"}


def load(run_dir):
    with open(os.path.join(run_dir, "coverage.json")) as f:
        records = json.load(f)
    with open(os.path.join(run_dir, "coverage_meta.json")) as f:
        meta = json.load(f)
    return records, meta


def built(record):
    return bool(record.get("passed")) or record.get("stage") != "build"


def merge_record(old, new):
    """`new`'s stages over `old`'s; a build that failed in the later run makes the record
    that run's, one that failed only in the earlier run no longer counts."""
    if not built(new):
        return new
    rec = dict(new)
    stages = {s: dict(new.get("stages", {}).get(s, NOT_RUN)) for s in STAGES}
    for s, info in (old.get("stages", {}) if built(old) else {}).items():
        if stages[s].get("status") == "not run":
            stages[s] = info
    rec["stages"] = stages
    for key in ("fallback_ops", "backward_fallback_ops"):
        rec[key] = sorted(set(old.get(key) or []) | set(new.get(key) or []))
    rec["notes"] = list(dict.fromkeys((old.get("notes") or []) + (new.get("notes") or [])))
    rec["sync_ops"] = new.get("sync_ops") or old.get("sync_ops") or {}
    rec["wall_time_s"] = round((old.get("wall_time_s") or 0) + (new.get("wall_time_s") or 0), 3)
    rec["peak_device_memory_bytes"] = max(old.get("peak_device_memory_bytes") or 0,
                                          new.get("peak_device_memory_bytes") or 0) or None
    failed = [s for s in STAGES if stages[s].get("status") == "fail"]
    rec["passed"] = not failed
    rec["stage"] = failed[0] if failed else "all"
    rec["error"] = stages[failed[0]].get("error", "") if failed else ""
    return rec


def merge_runs(run_dirs):
    """(records, meta) of the runs in `run_dirs`, in the first run's order of architectures."""
    merged, metas = {}, []
    for run_dir in run_dirs:
        records, meta = load(run_dir)
        metas.append(meta)
        for r in records:
            m = r["model_type"]
            merged[m] = merge_record(merged[m], r) if m in merged else r
    meta = dict(metas[0])
    meta.update(
        architectures=len(merged), stages=None, wall_time_s=sum(m.get("wall_time_s") or 0 for m in metas),
        command=" and ".join(f"`{m.get('command')}` ({m.get('wall_time_s', 0):.0f} s)" for m in metas),
        merged=True,
    )
    for m in metas:  # a stage no run ran stays "not run": say which were chosen
        if m.get("stages") is None:
            break
    else:
        meta["stages"] = [s for s in STAGES if any(s in (m.get("stages") or []) for m in metas)]
    return list(merged.values()), meta
