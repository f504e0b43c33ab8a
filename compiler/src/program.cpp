#include "neuroncompiler/program.hpp"

#include <cstring>
#include <sstream>

namespace neuroncompiler {
namespace {

constexpr char kMagic[8] = {'N', 'C', 'P', 'R', 'O', 'G', '\n', '\0'};

class Writer {
 public:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  template <typename T> void pod(T v) { raw(&v, sizeof(v)); }
  void i64(int64_t v) { pod(v); }
  void str(const std::string& s) { i64(static_cast<int64_t>(s.size())); raw(s.data(), s.size()); }
  void ints(const std::vector<int64_t>& v) { i64(static_cast<int64_t>(v.size())); for (int64_t x : v) i64(x); }
  void ids(const std::vector<int32_t>& v) { i64(static_cast<int64_t>(v.size())); for (int32_t x : v) pod(x); }
  void layout(const Layout& l) { pod(l.dtype); ints(l.sizes); ints(l.strides); i64(l.offset); }
  void arg(const Arg& a) {
    pod(a.kind); i64(a.i); pod(a.f); ints(a.ints);
    i64(static_cast<int64_t>(a.floats.size()));
    for (double f : a.floats) pod(f);
    str(a.s);
  }
  void tiles(const TileProgram& t) {
    ints(t.shape);
    i64(static_cast<int64_t>(t.operands.size()));
    for (const auto& o : t.operands) { pod(o.value); pod(o.dtype); ints(o.strides); }
    i64(static_cast<int64_t>(t.instrs.size()));
    for (const auto& in : t.instrs) {
      pod(in.op); pod(in.dst); pod(in.a); pod(in.b); pod(in.c); pod(in.operand); pod(in.imm); pod(in.dtype);
    }
    pod(t.num_slots); pod(t.reduce); pod(t.reduce_operand);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw CompileError("program bytes: " + what + " (at byte " + std::to_string(pos_) + " of " + std::to_string(in_.size()) + ")");
  }
  void raw(void* p, size_t n) {
    if (in_.size() - pos_ < n) fail("truncated");
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  template <typename T> T pod() { T v; raw(&v, sizeof(v)); return v; }
  int64_t count() {
    const int64_t n = pod<int64_t>();
    if (n < 0 || static_cast<uint64_t>(n) > in_.size() - pos_) fail("a count out of range");
    return n;
  }
  template <typename E> E enumerated(int limit) {
    const E v = pod<E>();
    if (static_cast<int>(v) < 0 || static_cast<int>(v) >= limit) fail("an enum value out of range");
    return v;
  }
  std::string str() { const int64_t n = count(); std::string s(static_cast<size_t>(n), '\0'); raw(s.data(), s.size()); return s; }
  std::vector<int64_t> ints() { std::vector<int64_t> v(static_cast<size_t>(count())); for (auto& x : v) x = pod<int64_t>(); return v; }
  std::vector<int32_t> ids() { std::vector<int32_t> v(static_cast<size_t>(count())); for (auto& x : v) x = pod<int32_t>(); return v; }
  Layout layout() {
    Layout l;
    l.dtype = enumerated<DType>(kNumDTypes);
    l.sizes = ints();
    l.strides = ints();
    l.offset = pod<int64_t>();
    if (l.sizes.size() != l.strides.size()) fail("a layout's sizes and strides differ in rank");
    return l;
  }
  Arg arg() {
    Arg a;
    a.kind = enumerated<Arg::Kind>(static_cast<int>(Arg::Kind::kString) + 1);
    a.i = pod<int64_t>();
    a.f = pod<double>();
    a.ints = ints();
    a.floats.resize(static_cast<size_t>(count()));
    for (auto& f : a.floats) f = pod<double>();
    a.s = str();
    return a;
  }
  TileProgram tiles() {
    TileProgram t;
    t.shape = ints();
    t.operands.resize(static_cast<size_t>(count()));
    for (auto& o : t.operands) { o.value = pod<int32_t>(); o.dtype = enumerated<DType>(kNumDTypes); o.strides = ints(); }
    t.instrs.resize(static_cast<size_t>(count()));
    for (auto& in : t.instrs) {
      in.op = enumerated<TileOp>(kNumTileOps);
      in.dst = pod<int32_t>(); in.a = pod<int32_t>(); in.b = pod<int32_t>(); in.c = pod<int32_t>();
      in.operand = pod<int32_t>(); in.imm = pod<float>(); in.dtype = enumerated<DType>(kNumDTypes);
    }
    t.num_slots = pod<int32_t>();
    t.reduce = enumerated<ReduceKind>(static_cast<int>(ReduceKind::kMax) + 1);
    t.reduce_operand = pod<int32_t>();
    t.validate();
    return t;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string Program::serialize() const {
  Writer w;
  w.raw(kMagic, sizeof(kMagic));
  w.pod(kProgramFormatVersion);
  w.i64(static_cast<int64_t>(values.size()));
  for (const auto& v : values) { w.layout(v.layout); w.pod(v.buffer); }
  w.i64(static_cast<int64_t>(buffers.size()));
  for (const auto& b : buffers) { w.pod(b.kind); w.i64(b.index); w.i64(b.nbytes); }
  w.ids(inputs);
  w.i64(static_cast<int64_t>(input_names.size()));
  for (const auto& n : input_names) w.str(n);
  w.ids(outputs);
  w.ints(output_storage_bytes);
  w.i64(arena_bytes);
  w.pod(folded);
  w.pod(reinplaced);
  w.i64(static_cast<int64_t>(steps.size()));
  for (const auto& s : steps) {
    w.pod(s.kind);
    w.pod(s.graph_nodes);
    if (s.kind == Step::Kind::kFused) {
      w.tiles(s.tiles);
    } else {  // extern and native steps: the node
      w.str(s.node.op);
      w.i64(static_cast<int64_t>(s.node.args.size()));
      for (const auto& a : s.node.args) w.arg(a);
      w.ids(s.node.outputs);
    }
  }
  return w.take();
}

Program Program::deserialize(std::string_view bytes) {
  Reader r(bytes);
  char magic[sizeof(kMagic)];
  r.raw(magic, sizeof(magic));
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) r.fail("not a neuroncompiler program (bad magic)");
  const auto version = r.pod<uint32_t>();
  if (version != kProgramFormatVersion) {
    r.fail("program format version " + std::to_string(version) + ", this compiler reads version " +
           std::to_string(kProgramFormatVersion));
  }
  Program p;
  p.values.resize(static_cast<size_t>(r.count()));
  for (auto& v : p.values) { v.layout = r.layout(); v.buffer = r.pod<int32_t>(); }
  p.buffers.resize(static_cast<size_t>(r.count()));
  for (auto& b : p.buffers) {
    b.kind = r.enumerated<Buffer::Kind>(3);
    b.index = r.pod<int64_t>();
    b.nbytes = r.pod<int64_t>();
  }
  p.inputs = r.ids();
  p.input_names.resize(static_cast<size_t>(r.count()));
  for (auto& n : p.input_names) n = r.str();
  p.outputs = r.ids();
  p.output_storage_bytes = r.ints();
  p.arena_bytes = r.pod<int64_t>();
  p.folded = r.pod<int32_t>();
  p.reinplaced = r.pod<int32_t>();
  p.steps.resize(static_cast<size_t>(r.count()));
  for (auto& s : p.steps) {
    s.kind = r.enumerated<Step::Kind>(3);
    s.graph_nodes = r.pod<int32_t>();
    if (s.kind == Step::Kind::kFused) {
      s.tiles = r.tiles();
    } else {
      s.node.op = r.str();
      s.node.args.resize(static_cast<size_t>(r.count()));
      for (auto& a : s.node.args) a = r.arg();
      s.node.outputs = r.ids();
    }
  }
  if (!r.at_end()) r.fail("trailing bytes");
  // References must stay inside the program.
  const auto n_values = static_cast<int64_t>(p.values.size());
  auto check_value = [&](int64_t id, const char* what) {
    if (id < -1 || id >= n_values) r.fail(std::string(what) + " refers to value " + std::to_string(id));
  };
  for (const auto& v : p.values) {
    if (v.buffer < -1 || v.buffer >= static_cast<int32_t>(p.buffers.size())) r.fail("a value refers to a missing buffer");
  }
  for (int32_t id : p.inputs) check_value(id, "an input");
  for (int32_t id : p.outputs) check_value(id, "an output");
  if (p.input_names.size() != p.inputs.size()) r.fail("input names and inputs differ in count");
  for (const auto& b : p.buffers) {
    if (b.kind == Buffer::Kind::kInput && (b.index < 0 || b.index >= static_cast<int64_t>(p.inputs.size()))) r.fail("a buffer refers to a missing input");
    if (b.kind == Buffer::Kind::kOutput && (b.index < 0 || b.index >= static_cast<int64_t>(p.output_storage_bytes.size()))) r.fail("a buffer refers to a missing output storage");
    if (b.kind == Buffer::Kind::kArena && (b.index < 0 || b.index + b.nbytes > p.arena_bytes)) r.fail("a buffer lies outside the arena");
  }
  for (const auto& s : p.steps) {
    if (s.kind == Step::Kind::kFused) {
      for (const auto& o : s.tiles.operands) {
        check_value(o.value, "a tile operand");
        if (o.value < 0 || p.values[o.value].buffer < 0) r.fail("a tile operand has no buffer");
      }
    } else {
      for (const auto& a : s.node.args) {
        if (a.kind == Arg::Kind::kTensor) check_value(a.i, "an extern argument");
        if (a.kind == Arg::Kind::kTensorList) for (int64_t id : a.ints) check_value(id, "an extern argument");
      }
      for (int32_t id : s.node.outputs) check_value(id, "an extern output");
    }
  }
  return p;
}

namespace {

// Steps of a kind, or the graph nodes inside them.
int count(const std::vector<Step>& steps, Step::Kind kind, bool graph_nodes = false) {
  int n = 0;
  for (const auto& s : steps) n += s.kind == kind ? (graph_nodes ? s.graph_nodes : 1) : 0;
  return n;
}

}  // namespace

int Program::fused_groups() const { return count(steps, Step::Kind::kFused); }
int Program::extern_calls() const { return count(steps, Step::Kind::kExtern); }
int Program::native_kernels() const { return count(steps, Step::Kind::kNative); }
int Program::native_nodes() const { return count(steps, Step::Kind::kNative, true); }
int Program::fused_nodes() const { return count(steps, Step::Kind::kFused, true); }

int Program::library_calls() const {
  int n = 0;
  for (const auto& s : steps) n += s.kind == Step::Kind::kExtern && is_library_call(s.node.op);
  return n;
}

bool is_library_call(std::string_view op) {
  return op == "aten::mm.default" || op == "aten::addmm.default" || op == "aten::bmm.default" ||
         op == "aten::baddbmm.default" || op == "aten::mm.dtype" || op == "aten::addmm.dtype";
}

std::string Program::describe() const {
  std::ostringstream os;
  os << "program v" << kProgramFormatVersion << ": " << steps.size() << " steps, arena " << arena_bytes << " bytes, "
     << output_storage_bytes.size() << " output storages\n";
  for (size_t b = 0; b < buffers.size(); ++b) {
    static const char* const kKinds[] = {"input", "output", "arena@"};
    os << "  buffer " << b << ": " << kKinds[static_cast<int>(buffers[b].kind)] << buffers[b].index << ", "
       << buffers[b].nbytes << " bytes\n";
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.kind != Step::Kind::kFused) {
      os << "  step " << i << ": " << (s.kind == Step::Kind::kExtern ? "extern " : "native ") << s.node.op;
      if (s.kind == Step::Kind::kNative) os << " (" << s.graph_nodes << " graph nodes)";
      os << " ->";
      for (int32_t o : s.node.outputs) os << " %" << o;
      os << "\n";
      continue;
    }
    os << "  step " << i << ": fused group of " << s.graph_nodes << " nodes over [";
    for (size_t d = 0; d < s.tiles.shape.size(); ++d) os << (d ? "," : "") << s.tiles.shape[d];
    os << "]:";
    for (const auto& in : s.tiles.instrs) {
      os << " " << tile_op_name(in.op);
      if (in.operand >= 0) os << "(%" << s.tiles.operands[in.operand].value << ")";
    }
    os << "\n";
  }
  return os.str();
}

std::string Program::step_name(size_t step) const {
  const Step& s = steps.at(step);
  if (s.kind != Step::Kind::kFused) return s.node.op;
  std::ostringstream os;
  os << "fused [";
  for (size_t d = 0; d < s.tiles.shape.size(); ++d) os << (d ? ", " : "") << s.tiles.shape[d];
  os << "]:";
  // Each operation once, in program order; memory and constants left out.
  constexpr int kMaxListed = 8;
  bool seen[kNumTileOps] = {};
  int listed = 0;
  for (const TileInstr& in : s.tiles.instrs) {
    if (in.op == TileOp::kLoad || in.op == TileOp::kStore || in.op == TileOp::kConst) continue;
    if (seen[static_cast<int>(in.op)]) continue;
    seen[static_cast<int>(in.op)] = true;
    if (listed++ == kMaxListed) {
      os << " ...";
      break;
    }
    if (in.op != TileOp::kReduce) {
      os << " " << tile_op_name(in.op);
      continue;
    }
    static const char* const kReduceNames[] = {"reduce", "sum", "mean", "max"};
    os << " " << kReduceNames[static_cast<int>(s.tiles.reduce)];
  }
  os << " (" << s.graph_nodes << (s.graph_nodes == 1 ? " node)" : " nodes)");
  return os.str();
}

}  // namespace neuroncompiler
