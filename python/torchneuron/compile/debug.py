"""TORCHNEURON_DEBUG_DIR (or options={"debug_dir": ...}): each graph's FX code on disk.

<dir>/graph_<id>/dynamo.py        the graph Dynamo handed to the backend
<dir>/graph_<id>/aot_forward.py   AOTAutograd's forward (or aot_inference.py)
<dir>/graph_<id>/aot_backward.py  its backward, written at the first backward call
<dir>/graph_<id>/graph_<kind>.neurongraph  the serialized graph the compiler read (serialize.py)
<dir>/graph_<id>/ir_<kind>_patterns.txt     the IR after pattern fusion and re-inplacing (graph text,
                                            native ops as neuron::* nodes)
<dir>/graph_<id>/ir_<kind>_fusion.txt       the IR after elementwise fusion: the schedule, each step a
                                            group with its member nodes or a node of its own
<dir>/graph_<id>/program_<kind>.txt         the compiled program: steps, buffers, arena
(the ir_* files come with a compilation: a program loaded from the cache has none)
<dir>/graph_<id>/record.json      the graph's compile_metrics() record, updated with each file
"""
import json
import os


def dump(debug_dir, record: dict, name: str, gm) -> None:
    if not debug_dir:
        return
    folder = os.path.join(debug_dir, f"graph_{record['graph_id']:04d}")
    os.makedirs(folder, exist_ok=True)
    code = gm.print_readable(print_output=False, include_stride=True, include_device=True)
    _write(os.path.join(folder, f"{name}.py"), code)
    _write(os.path.join(folder, "record.json"), json.dumps(record, indent=2, default=str))


def dump_text(debug_dir, record: dict, name: str, text: str) -> None:
    if not debug_dir:
        return
    folder = os.path.join(debug_dir, f"graph_{record['graph_id']:04d}")
    os.makedirs(folder, exist_ok=True)
    _write(os.path.join(folder, name), text)
    _write(os.path.join(folder, "record.json"), json.dumps(record, indent=2, default=str))


def _write(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
