"""What one architecture's record says: it passes, it fails on the device, its CPU
reference fails, or it cannot be built here.

A failure counts against the device only where the CPU reference ran: a model that
cannot be built or run on CPU (the build stage, or a stage whose error starts with
"cpu reference:") tells nothing about the device, and a model that needs a package
this environment lacks (an ImportError at build) is not built at all.
"""
from .common import STAGES

PASS, DEVICE, CPU, CANNOT_BUILD = "pass", "fails on the device", "CPU reference fails", "cannot build here"
OUTCOMES = (PASS, DEVICE, CPU, CANNOT_BUILD)
MISSING_PACKAGE = ("ImportError", "ModuleNotFoundError")


def outcome(record):
    """(one of OUTCOMES, the reason: the first error of that kind, "" for a pass)."""
    if record.get("passed"):
        return PASS, ""
    stages = record.get("stages", {})
    failed = [(s, stages[s].get("error", "")) for s in STAGES if stages.get(s, {}).get("status") == "fail"]
    device = [(s, e) for s, e in failed if not e.startswith("cpu reference:")]
    if device and not (record.get("stage") == "build"):
        stage, error = device[0]
        return DEVICE, f"{stage}: {error}"
    error = record.get("error", "")
    if record.get("stage") == "build":
        if error.startswith(MISSING_PACKAGE):
            return CANNOT_BUILD, error
        return CPU, f"build: {error}"
    stage, error = failed[0] if failed else (record.get("stage"), error)
    return CPU, f"{stage}: {error}"


def counts(records):
    out = dict.fromkeys(OUTCOMES, 0)
    for r in records:
        out[outcome(r)[0]] += 1
    return out
