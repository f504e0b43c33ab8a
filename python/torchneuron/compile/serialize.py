"""An AOTAutograd FX graph as the graph compiler's serialized graph.

The format is the compiler's (compiler/include/neuroncompiler/graph_format.hpp):
one text record per value, input, node and the outputs. Every tensor is a
value with its dtype, sizes, strides and storage offset taken from the node's
fake tensor (`node.meta["val"]`); a view is not a node but a value over its
base's buffer, found by the fake tensors sharing a storage. Input mutations
(functionalized `copy_` into a graph input) stay nodes that write the input.

Three kinds of graph values are not tensors of the program:
- constants (`get_attr`: a tensor the graph holds, e.g. `torch.tensor([-1])`
  traced into it) are inputs of the program, passed by the caller on every call;
- integers (`SymInt` inputs such as a sliding-window cache's fill level, which
  Dynamo makes a runtime value, and the integer arithmetic on them) are host
  values: the caller computes them per call (calls.py), so a graph whose
  integers only flow from its inputs to its outputs is still one program;
- 0-dim CPU tensors (an optimizer's step counters) and the ops on them alone are
  host values too; a device op that reads one gets it as a program input, moved
  to the device per call.

A graph that cannot run as one device submission raises `Unsupported` with the
reason: symbolic shapes, integers used by tensor ops, ops whose output shape
depends on data or that read values on the host, tensors on another device, ops
without a CPU kernel for the extern call, random ops without a generator
argument (their CPU kernel would not draw from the device generator).

PyTorch's RNG-state higher-order ops (activation checkpointing:
`run_and_save_rng_state` in the forward, `run_with_rng_state` in the backward)
are not nodes of their own: the state is a uint8 value of the program, read
from the device generator by a `torchneuron::generator_state` step right before
the op it wraps and returned to the caller (it is saved for the backward as a
neuron tensor instead of a CPU one); the backward draws dropout's mask from it
with `torchneuron::bernoulli_with_state`, leaving the device generator alone,
as eager `run_with_rng_state` does (csrc/compiler/RngStateOps.cpp).
"""
import math
import operator
from dataclasses import dataclass, field

import torch

from . import collectives

FORMAT_VERSION = 1

# c10::ScalarType, c10::Layout and c10::MemoryFormat as ints (how boxed calls carry them).
_SCALAR_TYPES = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
    torch.float32: 6, torch.float64: 7, torch.complex64: 9, torch.complex128: 10, torch.bool: 11,
    torch.bfloat16: 15,
}
# The dtypes a program's values may have: the device's (csrc/runtime/NeuronDtypes.cpp).
# A graph with a complex128 value runs eagerly, which refuses it as eager does.
_DTYPE_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
    torch.bool: "bool", torch.complex64: "complex64",
}
_LAYOUTS = {torch.strided: 0}
_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
                   torch.channels_last_3d: 3}
# Ops that read tensor values on the host or size their output by them.
_HOST_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


class Unsupported(Exception):
    """The graph cannot run as one submission; args[0] says why (names the node)."""


@dataclass
class Serialized:
    """A graph as the compiler reads it, and how a call maps to the program.

    inputs: per program input, ("arg", i) for the graph's i-th input,
    ("rng_state", i) for one that is a saved generator state (moved to the
    device if it is a CPU tensor), or ("const", tensor) for a constant.
    host_inputs: (fx node, i) for integer inputs. host_nodes: integer
    arithmetic, in graph order. outputs: per graph output, ("program", j),
    ("host", fx node) or ("none", None). device: the graph's device."""
    text: str
    input_names: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    host_inputs: list = field(default_factory=list)
    host_nodes: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    device: torch.device | None = None


# The device's fused attention, forward and backward: the compiler puts its
# attention kernel in their place (compiler/include/neuroncompiler/patterns.hpp).
_NATIVE_OPS = ("aten::_scaled_dot_product_fused_attention_overrideable.default",
               "aten::_scaled_dot_product_fused_attention_overrideable_backward.default")


def _is_host_tensor(value) -> bool:
    """A 0-dim CPU tensor: an optimizer's step count, and the arithmetic on it."""
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() == 0


def _is_int(value) -> bool:
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def _storage_key(t):
    return t.untyped_storage()._cdata


def _static(values, what, node):
    for v in values:
        if not isinstance(v, int):
            raise Unsupported(f"node {node.name}: symbolic {what} {tuple(values)} (dynamic shapes run eagerly)")
    return [int(v) for v in values]


class _Writer:
    def __init__(self):
        self.values = []   # value records
        self.lines = []    # input, node and output records
        # fake storage -> [(root value id, storage offset of the root in bytes)]: one
        # root, or several inputs that share a storage (AOTAutograd's tangents
        # of views of one tensor), which run as separate buffers.
        self.storages = {}
        self.roots = {}  # value id -> the root value whose buffer it is over
        self.device = None

    def tensor_value(self, t, node, is_input=False, sources=()):
        """(value id, is a view). `sources`: the value ids of the node's tensor
        arguments, which tell apart inputs that share a storage."""
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"node {node.name}: a {type(t).__name__} value where the compiler takes tensors")
        if t.device.type != "neuron":
            raise Unsupported(f"node {node.name}: a {t.device} tensor in the graph (the program runs on neuron)")
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise Unsupported(f"node {node.name}: tensors on {self.device} and {t.device} in one graph")
        if t.dtype not in _DTYPE_NAMES:
            raise Unsupported(f"node {node.name}: dtype {t.dtype}")
        if t.layout != torch.strided:
            raise Unsupported(f"node {node.name}: layout {t.layout}")
        if t.is_conj() or t.is_neg():
            # A lazy conjugate or negation is a flag of the tensor, not of its
            # layout: the program's values carry no such flag.
            raise Unsupported(f"node {node.name}: a {'conjugate' if t.is_conj() else 'negative'} view")
        sizes = _static(t.shape, "sizes", node)
        strides = _static(t.stride(), "strides", node)
        offset = _static([t.storage_offset()], "storage offset", node)[0]
        key = _storage_key(t)
        vid = len(self.values)
        if not is_input and key in self.storages:
            roots = self.storages[key]
            if len(roots) > 1:
                read = {self.roots.get(v, v) for v in sources}
                roots = [r for r in roots if r[0] in read]
                if len(roots) != 1:
                    raise Unsupported(f"node {node.name}: a view of one of several inputs that share memory")
            base, base_bytes = roots[0]
            # In bytes: a view may see its base as another dtype (view_as_real).
            rel, misaligned = divmod(offset * t.itemsize - base_bytes, t.itemsize)
            if rel < 0 or misaligned:
                raise Unsupported(f"node {node.name}: a view before the start of its base or between its elements")
            self._record(vid, t.dtype, f"%{base}", rel, sizes, strides)
            self.roots[vid] = base
            return vid, True
        if not is_input and offset != 0:
            raise Unsupported(f"node {node.name}: a fresh result at storage offset {offset}")
        self._record(vid, t.dtype, "-", 0, sizes, strides)
        self.storages.setdefault(key, []).append((vid, offset * t.itemsize))
        self.roots[vid] = vid
        return vid, False

    def fresh_value(self, like, dtype):
        """A new value with `like`'s sizes and strides (an intermediate the
        serializer writes itself)."""
        vid = len(self.values)
        self._record(vid, dtype, "-", 0, list(like.shape), list(like.stride()))
        return vid

    def rng_state_value(self):
        """A generator state: uint8, the CPU generator's state size (the device
        generator wraps one). The graph's fake value has a symbolic size."""
        vid = len(self.values)
        self._record(vid, torch.uint8, "-", 0, [_rng_state_bytes()], [1])
        return vid

    def _record(self, vid, dtype, base, offset, sizes, strides):
        dims = " ".join(str(s) for s in sizes + strides)
        self.values.append(f"value {vid} {_DTYPE_NAMES[dtype]} {base} {offset} {len(sizes)}{' ' + dims if dims else ''}")

    def text(self):
        return "\n".join([f"neurongraph {FORMAT_VERSION}", *self.values, *self.lines, "end", ""])


def _arg_token(value, env, node, name):
    if isinstance(value, torch.fx.Node):
        if value not in env or not isinstance(env[value], int):
            raise Unsupported(f"node {node.name}: argument {name} is not a tensor the graph computes")
        return f"%{env[value]}"
    if value is None:
        return "_"
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"f{value!r}" if math.isfinite(value) else ("fnan" if math.isnan(value) else ("finf" if value > 0 else "f-inf"))
    if isinstance(value, torch.dtype):
        if value not in _SCALAR_TYPES:
            raise Unsupported(f"node {node.name}: dtype {value}")
        return f"i{_SCALAR_TYPES[value]}"
    if isinstance(value, torch.layout):
        if value not in _LAYOUTS:
            raise Unsupported(f"node {node.name}: layout {value}")
        return f"i{_LAYOUTS[value]}"
    if isinstance(value, torch.memory_format):
        return f"i{_MEMORY_FORMATS[value]}"
    if isinstance(value, torch.device):
        if value.type != "neuron":
            raise Unsupported(f"node {node.name}: moves data to {value} (host synchronization)")
        return f"D{value.index or 0}"
    if isinstance(value, str):
        if not value or any(c.isspace() for c in value):
            raise Unsupported(f"node {node.name}: string argument {name}={value!r}")
        return f"s{value}"
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, torch.fx.Node) for v in value) or (value and all(v is None for v in value)):
            items = ["_" if v is None else _arg_token(v, env, node, name) for v in value]
            return "T" + ",".join(items)
        if all(isinstance(v, int) for v in value):  # bool lists too (the glue reads the schema)
            return "I" + ",".join(str(int(v)) for v in value)
        if all(isinstance(v, (int, float)) for v in value):
            return "F" + ",".join(repr(float(v)) for v in value)
    raise Unsupported(f"node {node.name}: argument {name} of type {type(value).__name__}")


def _schema_args(node):
    """Every schema argument of the node in order, defaults filled in."""
    schema = node.target._schema
    out = []
    for i, arg in enumerate(schema.arguments):
        if not arg.kwarg_only and i < len(node.args):
            out.append((arg.name, node.args[i]))
        elif arg.name in node.kwargs:
            out.append((arg.name, node.kwargs[arg.name]))
        elif arg.has_default_value():
            out.append((arg.name, arg.default_value))
        else:
            raise Unsupported(f"node {node.name}: argument {arg.name} missing")
    return out


def _on_host(node, host) -> bool:
    """An op on host tensors alone whose result is one (an optimizer's
    `step += 1`, its bias corrections, the step's `copy_` back into its input):
    computed per call on the host (calls.py)."""
    if not _is_host_tensor(node.meta.get("val")):
        return False
    inputs = []
    torch.fx.node.map_arg((node.args, node.kwargs), inputs.append)
    return all(a in host and _is_host_tensor(a.meta.get("val")) for a in inputs)


def _host_tensors_to_program(node, host, w, env, out):
    """Host tensors a device op reads become program inputs, moved to the
    device per call (calls.py): a bias correction dividing a moment."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def add(a):
        if a in env or a not in host or not _is_host_tensor(a.meta.get("val")):
            return
        with unset_fake_temporarily():
            like = torch.empty((), dtype=a.meta["val"].dtype, device=w.device or "neuron")
        vid, _ = w.tensor_value(like, a, is_input=True)
        env[a] = vid
        w.lines.append(f"input %{vid} {a.name}")
        out.input_names.append(a.name)
        out.inputs.append(("host", a.name))

    torch.fx.node.map_arg((node.args, node.kwargs), add)


def _op_name(op):
    schema = op._schema
    return f"{schema.name}.{schema.overload_name or 'default'}"


def serialize(gm: torch.fx.GraphModule) -> Serialized:
    """The graph's text and call plan. Raises Unsupported."""
    w = _Writer()
    env = {}  # fx node -> value id, or a tuple of value ids for multi-output nodes
    out = Serialized(text="")
    host = set()  # fx nodes computed on the host (integers)
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if _is_int(val) or collectives.is_opaque(val) or _is_host_tensor(val):
                host.add(node)
                out.host_inputs.append((node, position))
                position += 1
                continue
            if not isinstance(val, torch.Tensor):
                raise Unsupported(f"input {node.name} is a {type(val).__name__}, not a tensor")
            if _is_saved_rng_state(node):
                vid = w.rng_state_value()
                out.inputs.append(("rng_state", position))
            else:
                vid, _ = w.tensor_value(val, node, is_input=True)
                out.inputs.append(("arg", position))
            env[node] = vid
            w.lines.append(f"input %{vid} {node.name}")
            out.input_names.append(node.name)
            position += 1
        elif node.op == "call_function" and _is_int(node.meta.get("val")) and not isinstance(
                node.target, torch._ops.OpOverload):
            for a in node.args:
                if isinstance(a, torch.fx.Node) and a not in host:
                    raise Unsupported(f"node {node.name}: an integer computed from {a.name}")
                if not isinstance(a, torch.fx.Node) and not _is_int(a):
                    raise Unsupported(f"node {node.name}: {node.target} of {type(a).__name__}")
            host.add(node)
            out.host_nodes.append(node)
        elif node.op == "call_function" and node.target is operator.getitem:
            parent, index = node.args
            ids = env.get(parent)
            if not isinstance(ids, tuple):
                raise Unsupported(f"node {node.name}: getitem of {parent.name}")
            env[node] = ids[index]
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and _on_host(node, host):
            host.add(node)
            out.host_nodes.append(node)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            _host_tensors_to_program(node, host, w, env, out)
            _serialize_op(node, w, env)
        elif node.op == "call_function" and node.target in _rng_state_ops():
            _serialize_rng_state_op(node, w, env)
        elif node.op == "output":
            outs = []
            for result in node.args[0]:
                if result is None:
                    out.outputs.append(("none", None))
                elif result in host:
                    out.outputs.append(("host", result))
                elif isinstance(result, torch.fx.Node) and isinstance(env.get(result), int):
                    out.outputs.append(("program", len(outs)))
                    outs.append(f"%{env[result]}")
                else:
                    raise Unsupported(f"output {result} is not a tensor the graph computes")
            w.lines.append("output" + "".join(" " + o for o in outs))
        elif node.op == "get_attr":
            const = getattr(gm, node.target)
            if not isinstance(const, torch.Tensor):
                raise Unsupported(f"node {node.name}: a constant {type(const).__name__}")
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily():  # AOTAutograd builds under its fake mode
                const = const.detach()
                if const.device.type != "neuron":
                    # Moved once; the device is the graph's (the first neuron tensor seen).
                    const = const.to(w.device or "neuron")
            vid, _ = w.tensor_value(const, node, is_input=True)
            env[node] = vid
            w.lines.append(f"input %{vid} {node.name}")
            out.input_names.append(node.name)
            out.inputs.append(("const", const))
        else:
            raise Unsupported(f"node {node.name}: {node.op} {node.target}")
    if w.device is None:
        raise Unsupported("the graph has no neuron tensor")
    out.text = w.text()
    out.device = w.device
    return out


def _serialize_op(node, w, env):
    op = node.target
    name = _op_name(op)
    if any(tag in op.tags for tag in _HOST_TAGS) and not _integer_index(node, name):
        raise Unsupported(f"node {node.name} ({name}): its result depends on tensor values read on the host")
    schema = op._schema
    native = name in _NATIVE_OPS
    if name == "aten::native_dropout.default":
        _serialize_dropout(node, w, env)
        return
    if not native and torch.Tag.nondeterministic_seeded in op.tags and not any(
            "Generator" in str(a.type) for a in schema.arguments):
        # Its CPU kernel would draw from the CPU generator, not the device's.
        raise Unsupported(f"node {node.name} ({name}): draws random numbers with no generator argument")
    if name == "aten::copy_.default":
        dst = node.args[0]
        if dst.op != "placeholder":
            raise Unsupported(f"node {node.name}: copy_ into {dst.name}, not a graph input")
        args = [_arg_token(v, env, node, n) for n, v in _schema_args(node)]
        w.lines.append(f"node aten::copy_ 0 {len(args)} {' '.join(args)}")
        env[node] = env[dst]
        return
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        raise Unsupported(f"node {node.name} ({name}): an in-place op in a functional graph")
    val = node.meta.get("val")
    results = list(val) if isinstance(val, (tuple, list)) else [val]
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    sources = _tensor_sources(node, env)
    ids, views = [], []
    for index, r in enumerate(results):
        if r is None or (native and index > 0 and index not in used):
            # The attention's unused sequence lengths, and results nothing reads (the
            # backward's gradient of a mask it was not asked for, grad_input_mask[3]
            # false, still has a value): the kernel need not write them.
            ids.append(None)
            continue
        vid, is_view = w.tensor_value(r, node, sources=sources)
        ids.append(vid)
        views.append(is_view)
    env[node] = tuple(ids) if isinstance(val, (tuple, list)) else ids[0]
    if views and all(views):
        return  # a view: metadata over its base, no work
    if any(views):
        raise Unsupported(f"node {node.name} ({name}): results that are partly views")
    if len(schema.returns) != len(results) or (not native and any(
            str(r.type) not in ("Tensor", "Optional[Tensor]") for r in schema.returns)):
        raise Unsupported(f"node {node.name} ({name}): returns {schema.returns}")
    # Other *_overrideable ops are hooks out-of-tree devices implement (their
    # CPU entry is a stub): they run as the device's own kernels, eagerly.
    if not native and ("_overrideable" in schema.name or not torch._C._dispatch_has_computed_kernel_for_dispatch_key(
            name.removesuffix(".default"), "CPU")):
        raise Unsupported(f"node {node.name} ({name}): no CPU kernel for an extern call")
    args = [_arg_token(v, env, node, n) for n, v in _schema_args(node)]
    outs = ["_" if i is None else f"%{i}" for i in ids]
    w.lines.append(f"node {name} {len(outs)} {' '.join(outs)} {len(args)}{' ' + ' '.join(args) if args else ''}")


def _tensor_sources(node, env):
    """The value ids of the tensors a node reads."""
    ids = []
    torch.fx.node.map_arg((node.args, node.kwargs),
                          lambda a: ids.append(env[a]) if isinstance(env.get(a), int) else None)
    return ids


def _rng_state_ops():
    from torch._prims import rng_prims

    return (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)


_rng_state_size = None


def _rng_state_bytes() -> int:
    global _rng_state_size
    if _rng_state_size is None:
        _rng_state_size = torch.get_rng_state().numel()
    return _rng_state_size


def _is_saved_rng_state(node) -> bool:
    """A backward graph's input that is the state a forward's
    run_and_save_rng_state saved, read only by run_with_rng_state."""
    val = node.meta.get("val")
    return (isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dtype == torch.uint8
            and val.dim() == 1 and bool(node.users)
            and all(u.target is _rng_state_ops()[1] and u.args[0] is node and node not in u.args[1:]
                    for u in node.users))


class _Wrapped:
    """The op an RNG-state op runs, with the attributes the serializer reads of a node."""

    def __init__(self, hop_node, op, args, kwargs, val, users):
        self.name, self.op, self.target = hop_node.name, "call_function", op
        self.args, self.kwargs, self.meta, self.users = tuple(args), dict(kwargs), {"val": val}, users


def _serialize_rng_state_op(node, w, env):
    """run_and_save_rng_state(op, *args) -> (state, op's result): a generator_state
    step, then the op. run_with_rng_state(state, op, *args) -> op's result drawn
    from `state`: dropout's mask from bernoulli_with_state; an op that draws
    nothing (attention without dropout) is the op alone."""
    saving = node.target is _rng_state_ops()[0]
    state_node, (op, *args) = (None, node.args) if saving else (node.args[0], node.args[1:])
    getitems = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if saving:
        result_node = getitems.get(1)
        val = result_node.meta.get("val") if result_node is not None else None
        users = result_node.users if result_node is not None else {}
    else:
        val, users = node.meta.get("val"), node.users
    if val is None:
        fake = torch.fx.node.map_arg((args, node.kwargs), lambda a: a.meta["val"])
        mode = next(v.fake_mode for v in torch.utils._pytree.tree_leaves(fake) if hasattr(v, "fake_mode"))
        with mode:
            val = op(*fake[0], **fake[1])
    inner = _Wrapped(node, op, args, node.kwargs, val, users)
    name = _op_name(op) if isinstance(op, torch._ops.OpOverload) else str(op)
    if name == "aten::native_dropout.default":
        draws = True
    elif name == _NATIVE_OPS[0] and dict(_schema_args(inner))["dropout_p"] == 0.0:
        draws = False
    else:
        raise Unsupported(f"node {node.name}: {name} under {node.target.name()} (activation checkpointing "
                          "with random ops other than dropout)")
    state = None
    if saving:
        state = w.rng_state_value()
        w.lines.append(f"node {_GENERATOR_STATE} 1 %{state} 1 _")
    if draws:
        _serialize_dropout(inner, w, env, None if saving else env[state_node])
    else:
        _serialize_op(inner, w, env)
    env[node] = (state, env[inner]) if saving else env[inner]


_GENERATOR_STATE = "torchneuron::generator_state.default"


def _integer_index(node, name) -> bool:
    """aten::index.Tensor with integer index tensors only (a gather: Transformers'
    `padding_mask[batch_idx, kv_idx]` in its attention masks): the result's shape
    is the broadcast of the indices' shapes, known at compile time. Boolean (and
    uint8) indices select by value: a data-dependent shape, run eagerly."""
    if name != "aten::index.Tensor":
        return False
    indices = _schema_args(node)[1][1]
    return all(i is None or (isinstance(i, torch.fx.Node) and isinstance(i.meta.get("val"), torch.Tensor)
                             and i.meta["val"].dtype in (torch.int64, torch.int32)) for i in indices)


def _serialize_dropout(node, w, env, state=None):
    """native_dropout(x, p, train) as the device's eager kernel computes it
    (csrc/aten/native/Random.cpp): mask = bernoulli(empty_like(x, bool), 1 - p)
    drawn from the device generator (bernoulli has a generator argument, so the
    extern call draws from it, exactly as eager draws), output = x * mask * scale.
    A training graph with dropout is then one program, reproducible under
    torch.manual_seed and equal to eager. With `state` (the value of a saved
    generator state: run_with_rng_state in a backward graph), the mask is drawn
    from a generator in that state instead, as eager draws it there."""
    x, p, train = [a for _, a in _schema_args(node)]
    out_val, mask_val = node.meta["val"]
    if train is False:
        raise Unsupported(f"node {node.name}: native_dropout with train=False")
    if not isinstance(p, float):
        raise Unsupported(f"node {node.name}: dropout probability {p!r}")
    keep = 1.0 - p
    scale = 0.0 if keep == 0 else 1.0 / keep
    src = _arg_token(x, env, node, "input")
    empty = w.fresh_value(mask_val, torch.bool)
    mask, _ = w.tensor_value(mask_val, node)
    kept = w.fresh_value(out_val, out_val.dtype)
    out, _ = w.tensor_value(out_val, node)
    w.lines += [
        f"node aten::empty_like.default 1 %{empty} 6 {src} i{_SCALAR_TYPES[torch.bool]} _ _ _ _",
        f"node aten::bernoulli.p 1 %{mask} 3 %{empty} f{keep!r} _" if state is None else
        f"node torchneuron::bernoulli_with_state.default 1 %{mask} 3 %{empty} f{keep!r} %{state}",
        f"node aten::mul.Tensor 1 %{kept} 2 {src} %{mask}",
        f"node aten::mul.Tensor 1 %{out} 2 %{kept} f{scale!r}",
    ]
    env[node] = (out, mask)

