"""Compiled graphs in the form PyTorch's AOTAutograd cache keeps: warm starts
without AOTAutograd's tracing.

A second process compiling the same model traces it with Dynamo again; what
follows, AOTAutograd's functionalization, decomposition and partitioning, is
most of a warm start (about 2 s for the Llama decode step) and is skipped when
AOTAutograd finds the graph in its own cache (torch._functorch's
autograd_cache). That cache serves a compiler wrapped as
`SerializableAOTDispatchCompiler` whose results are `OutputCode` objects:
NeuronOutputCode is ours. Its pickled form is the graph's ProgramGraph (the
compiler's input text and the call plan, executor.py), not the program: on a
hit, `post_compile` finds the program in the program caches by that text's key
(cache.py, which includes the compiler build and the CPU's kernels) or
compiles the text again, and makes the runner.

AOTAutograd's entries of this backend are "bundled" (the OutputCode inside the
entry; the unbundled form looks programs up in Inductor's FX graph cache) and
its backward graphs are compiled with the forward (the cache keeps a training
graph only once both are compiled): backend.py sets both options around its
AOTAutograd call only. A graph that runs eagerly is not kept: its entry is
bypassed and the next process traces it again.

The cache key of an entry (torch._inductor.codecache's FxGraphHashDetails)
starts by registering Inductor's code generators for every device it knows,
to include their custom passes: 0.3-0.5 s of imports per process (all of
Inductor's lowerings and kernel templates), paid on a cold compile and on a
warm start alike, although our programs never pass through Inductor. While
the backend computes its key that registration is skipped
(`without_inductor_registration`): the key then names the passes of the
devices registered so far (neuron's refusal, inductor.py), the same in every
process that compiled only with this backend. A process that ran Inductor
first gets another key: a miss, never a wrong program.
"""
import contextlib
import contextvars
import pickle

from torch._inductor.output_code import OutputCode

from . import executor, metrics, options

# (record, Options) of the graph the backend is compiling: a cache hit calls
# post_compile inside the backend's AOTAutograd call, without our compilers.
_compiling: contextvars.ContextVar = contextvars.ContextVar("torchneuron_compiling", default=None)


@contextlib.contextmanager
def compiling(record: dict, opts):
    token = _compiling.set((record, opts))
    try:
        with without_inductor_registration():
            yield
    finally:
        _compiling.reset(token)


@contextlib.contextmanager
def without_inductor_registration():
    """AOTAutograd's cache key without importing Inductor's code generators
    (see the module's docstring). Only codecache's own reference is replaced:
    Inductor's lowering calls the registration from its home module."""
    from torch._inductor import codecache

    original = codecache.init_backend_registration
    codecache.init_backend_registration = _skip_registration
    try:
        yield
    finally:
        codecache.init_backend_registration = original


def _skip_registration() -> None:
    pass


class NeuronOutputCode(OutputCode):
    """One AOT graph compiled by the neuron backend (a boxed callable)."""

    def __init__(self, kind: str, runner, time_taken_ns: int = 0):
        # An instance attribute: AOTAutograd's wrappers copy the wrapped object's
        # __dict__ and box a callable without it.
        self._boxed_call = True
        self.kind = kind
        self.program_graph = runner.program_graph  # None: the graph runs eagerly
        self._runner = runner
        self._pickled_graph = None
        self._time_taken_ns = time_taken_ns  # AOTAutograd reports it as the time a hit saved

    def __call__(self, inputs):
        return self._runner(inputs)

    def prepare_for_serialization(self) -> None:
        """Called on a copy that AOTAutograd then pickles."""
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        if self.program_graph is None:
            raise BypassAOTAutogradCache(f"[neuron] the {self.kind} graph runs eagerly (not a program)")
        try:
            self._pickled_graph = pickle.dumps(self.program_graph)
        except Exception as exc:  # noqa: BLE001 - e.g. a host step of a type pickle does not know
            raise BypassAOTAutogradCache(f"[neuron] the {self.kind} graph's call plan does not pickle: {exc}")
        self.program_graph = None
        self._runner = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """Called on an entry AOTAutograd loaded: rebuilds the runner."""
        record, opts = _compiling.get() or ({}, options.resolve())
        graph = pickle.loads(self._pickled_graph)
        info = executor.GraphInfo(record.get("graph_id", -1), self.kind, opts.mode, opts.debug_dir)
        timing = metrics.phase(record, f"executor_{self.kind}") if record else contextlib.nullcontext()
        with timing:
            self._runner = executor.load(graph, info, record)
        self.program_graph, self._pickled_graph = graph, None

    def set_triton_bundle(self, triton_bundle) -> None:
        pass  # no Triton kernels here
