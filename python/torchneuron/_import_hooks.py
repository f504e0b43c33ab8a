"""Running code right after a module of another package has executed.

torchneuron adapts modules it must not import itself (Transformers and
Accelerate take seconds, Dynamo about two): a `sys.meta_path` finder asks the
other finders for the module's spec and wraps its loader, so that a hook runs
right after the module's code, before anything else can use it.
"""
import sys


def spec_running_after(finder, fullname, path, target, after):
    """The spec the other meta_path finders give for `fullname` (None if none does),
    with its loader calling `after(module)` once the module has executed. The module
    is not yet marked finished then (importlib does that after exec_module returns)."""
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            break
    else:
        return None
    loader = spec.loader
    if loader is None or not hasattr(loader, "exec_module"):
        return spec
    original_exec = loader.exec_module

    def exec_module(module):
        original_exec(module)
        after(module)

    loader.exec_module = exec_module  # loaders are per-spec instances
    return spec
