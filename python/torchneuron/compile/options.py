"""Modes and options of `torch.compile(backend="neuron")` (docs/compile.md).

`torch.compile(..., mode=...)` and `options={...}` reach the backend as its
`mode` and `options` arguments; this module validates them and fills the
defaults from the environment.
"""
import os
from dataclasses import dataclass

# mode -> what it does today (every mode runs the same compiled programs; the
# mode is recorded in compile_metrics()).
MODES = {
    "default": "each AOTAutograd graph runs as a compiled program, one device submission per call",
    "reduce-overhead": "accepted; today the same as default (next: one program replayed per call, "
                       "the analogue of CUDA graphs)",
    "max-autotune": "accepted; today the same as default (next: kernel choices measured at compile time)",
    "max-autotune-no-cudagraphs": "accepted; today the same as default",
}

FALLBACKS = ("raise", "eager")

# key -> (type, description); defaults come from Options below.
OPTION_KEYS = {
    "fallback": (str, "what a graph that fails to compile does: 'raise' (default) raises an error naming "
                      "the graph, the node and the reason; 'eager' runs the graph eagerly with one warning. "
                      "Default from TORCHNEURON_COMPILE_FALLBACK."),
    "debug_dir": (str, "directory to dump each graph's FX code into (Dynamo graph, AOT forward and "
                       "backward), one folder per graph id. Default from TORCHNEURON_DEBUG_DIR."),
}


@dataclass(frozen=True)
class Options:
    mode: str = "default"
    fallback: str = "raise"
    debug_dir: str | None = None


def _fallback_from_env():
    value = os.environ.get("TORCHNEURON_COMPILE_FALLBACK", "").strip().lower()
    if not value:
        return "raise"
    if value not in FALLBACKS:
        raise ValueError(f"[neuron] TORCHNEURON_COMPILE_FALLBACK={value!r}: expected one of {list(FALLBACKS)}")
    return value


def resolve(mode=None, options=None) -> Options:
    """Options from torch.compile's `mode` and `options`, validated; env vars fill what is unset."""
    mode = mode or "default"
    if mode not in MODES:
        raise ValueError(f"[neuron] torch.compile: unknown mode {mode!r}; valid modes: {list(MODES)}")
    options = dict(options or {})
    unknown = sorted(k for k in options if k not in OPTION_KEYS)
    if unknown:
        raise ValueError(
            f"[neuron] torch.compile: unknown option(s) {unknown}; valid options of backend='neuron': "
            f"{sorted(OPTION_KEYS)} (see docs/compile.md)")
    for key, value in options.items():
        kind = OPTION_KEYS[key][0]
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"[neuron] torch.compile: option {key!r} expects {kind.__name__}, "
                            f"got {type(value).__name__} {value!r}")
    fallback = options.get("fallback") or _fallback_from_env()
    if fallback not in FALLBACKS:
        raise ValueError(f"[neuron] torch.compile: option 'fallback'={fallback!r}; expected one of "
                         f"{list(FALLBACKS)}")
    debug_dir = options.get("debug_dir") or os.environ.get("TORCHNEURON_DEBUG_DIR") or None
    return Options(mode=mode, fallback=fallback, debug_dir=debug_dir)
