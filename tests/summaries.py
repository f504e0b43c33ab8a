"""End-of-run summaries of the conformance suites (test_opinfo.py,
test_module_db.py): one line per category, printed once per run, also when
pytest-xdist spreads the tests over worker processes. Then each worker sends
its counts to the controller (xdist's `workeroutput`), which adds them up.

A suite registers a function that returns its part as plain data (a payload);
the lines are formatted here, where the controller, which never imports the
test modules, can reach them.

Not a test file: pytest collects only test_*.py.
"""
import json
import os
import pathlib

import pytest

_PROVIDERS = {}  # suite -> function returning its payload, or None if nothing ran


def register(suite, provider):
    _PROVIDERS[suite] = provider


def payload(rows, record=(), ops_by_path=None, wall=0.0):
    """rows: [(label, counts, note)] for every category of the suite in its
    order, counts a dict of ints with "tests" among them (a category whose
    tests did not run has 0 and is left out of the summary); record: failing
    samples; ops_by_path: {execution path: [ops]}; wall: seconds."""
    return {"rows": [list(r) for r in rows], "record": list(record),
            "ops_by_path": ops_by_path or {}, "wall": wall}


def _merge(parts):
    rows, record, paths, wall = {}, [], {}, 0.0
    for part in parts:
        for label, counts, note in part["rows"]:
            total = rows.setdefault(label, [{}, note])[0]
            for key, n in counts.items():
                total[key] = total.get(key, 0) + n
        record += part["record"]
        for path, ops in part["ops_by_path"].items():
            paths.setdefault(path, set()).update(ops)
        wall = max(wall, part["wall"])
    return {"rows": [[label, c, note] for label, (c, note) in rows.items()], "record": record,
            "ops_by_path": {p: sorted(ops) for p, ops in paths.items()}, "wall": wall}


def _opinfo_line(label, s, note):
    counted = s["pass"] + s["known"] + s["unexpected"]
    pct = 100.0 * s["pass"] / counted if counted else 0.0
    return (f"opinfo {label}: {s['pass']}/{counted} samples pass ({pct:.1f}%) "
            f"[{s['tests']} ops, {note}; {s['rounding']} of the passes differ from CPU "
            f"as roundings of one float64 result; {s['known']} known failures, "
            f"{s['unexpected']} unexpected failures, {s['xpass']} known failures now "
            f"passing; not counted: {s['excluded']} excluded samples, "
            f"{s['random_ops']} random ops]")


def _module_db_line(label, s, note):
    counted = s["pass"] + s["known"] + s["unexpected"]
    pct = 100.0 * s["pass"] / counted if counted else 0.0
    return (f"module_db {label}: {s['pass']}/{counted} samples pass ({pct:.1f}%) "
            f"[{s['tests']} tests, {note}, {s['total']} samples in the database; "
            f"{s['rounding']} of the passes differ from CPU as roundings of one float64 "
            f"result; {s['known']} known failures, {s['unexpected']} unexpected failures, "
            f"{s['xpass']} known failures now passing; not counted: {s['excluded']} "
            f"excluded samples]")


# suite -> (line format, variable naming the file failing samples are written to)
SUITES = {
    "opinfo": (_opinfo_line, "TORCHNEURON_OPINFO_RECORD"),
    "module_db": (_module_db_line, "TORCHNEURON_MODULE_DB_RECORD"),
}


def _write(tr, suite, part):
    line, record_var = SUITES[suite]
    tr.section(f"{suite} conformance")
    for label, counts, note in part["rows"]:
        if counts["tests"]:
            tr.write_line(line(label, counts, note))
    if part["ops_by_path"]:
        tr.write_line(f"{suite} aten ops that ran on neuron, by execution path: " + ", ".join(
            f"{p} {len(ops)}" for p, ops in sorted(part["ops_by_path"].items()))
            + " (torchneuron.executed_ops())")
    tr.write_line(f"{suite} wall time: {part['wall']:.0f}s")
    path = os.environ.get(record_var)
    if path:
        pathlib.Path(path).write_text(json.dumps(part["record"], indent=1))
        tr.write_line(f"{suite} failing samples written to {path}")


class Plugin:
    """Registered by conftest.py in every process of a run."""

    def __init__(self):
        self.from_workers = {}  # suite -> payloads

    def _local(self):
        parts = {suite: provider() for suite, provider in _PROVIDERS.items()}
        return {suite: p for suite, p in parts.items() if p is not None}

    def pytest_sessionfinish(self, session):
        out = getattr(session.config, "workeroutput", None)
        if out is not None:  # an xdist worker: hand the counts to the controller
            out["conformance_summaries"] = json.dumps(self._local())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        parts = json.loads(getattr(node, "workeroutput", {}).get("conformance_summaries", "{}"))
        for suite, part in parts.items():
            self.from_workers.setdefault(suite, []).append(part)

    def pytest_terminal_summary(self, terminalreporter):
        parts = {suite: _merge(p) for suite, p in self.from_workers.items()} or self._local()
        for suite in SUITES:
            if suite in parts:
                _write(terminalreporter, suite, parts[suite])
