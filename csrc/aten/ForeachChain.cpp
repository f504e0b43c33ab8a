#include "csrc/aten/ForeachChain.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <tuple>
#include <unordered_set>
#include <utility>

#include <ATen/Parallel.h>

#include "csrc/aten/CpuKernelCall.h"
#include "csrc/aten/DeviceTensors.h"
#include "csrc/runtime/WorkerThreads.h"

namespace torchneuron {
namespace {

using c10::IValue;
using torch::jit::Stack;

// Elementwise foreach ops by their element op's name: each output element
// depends only on the input elements at its own index.
const std::unordered_set<std::string>& chainable_names() {
  static const auto* names = new std::unordered_set<std::string>{
      "abs",   "add",   "addcdiv", "addcmul", "ceil",       "clamp_max", "clamp_min", "cos",
      "div",   "erf",   "erfc",    "exp",     "expm1",      "floor",     "frac",      "lerp",
      "log",   "log10", "log1p",   "log2",    "maximum",    "minimum",   "mul",       "neg",
      "pow",   "reciprocal",       "round",   "rsqrt",      "sigmoid",   "sign",      "sin",
      "sqrt",  "sub",   "tanh",    "trunc",   "zero"};
  return *names;
}

bool is_list_of(const c10::TypePtr& t, c10::TypeKind element) {
  return t->kind() == c10::TypeKind::ListType &&
         t->castRaw<c10::ListType>()->getElementType()->kind() == element;
}

void add_range(std::vector<ChainLayout::Range>& ranges, const at::Tensor& t, int64_t position) {
  if (t.numel() == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  ranges.push_back({begin, begin + t.numel() * t.element_size(), position});
}

bool before(const ChainLayout::Range& a, const ChainLayout::Range& b) {
  return std::tie(a.begin, a.end, a.position) < std::tie(b.begin, b.end, b.position);
}

// Sorted ranges, deduplicated, if memory is shared only by identical tensors
// at one list position (or by 0-dim tensors every position reads, which no
// list tensor overlaps): then running the ops piece by piece reads and writes
// exactly what running them one after another would.
bool disjoint_positions(std::vector<ChainLayout::Range>& ranges) {
  std::sort(ranges.begin(), ranges.end(), before);
  ranges.erase(std::unique(ranges.begin(), ranges.end(),
                           [](const auto& a, const auto& b) {
                             return a.begin == b.begin && a.end == b.end && a.position == b.position;
                           }),
               ranges.end());
  uintptr_t reached = 0;
  for (const auto& r : ranges) {
    if (r.begin < reached) return false;
    reached = std::max(reached, r.end);
  }
  return true;
}

// One piece of a chain's work: elements [begin, begin + len) at a list position.
struct Piece {
  int64_t position, begin, len;
};

// A CPU alias's elements of a piece, as a flat view (the alias itself for a
// whole tensor).
at::Tensor piece_of(const at::Tensor& whole, const Piece& p) {
  if (p.begin == 0 && p.len == whole.numel()) return whole;
  return tensor_over(whole.storage(), c10::DispatchKey::CPU, whole.dtype(), {p.len}, {1},
                     whole.storage_offset() + p.begin);
}

// The element of a per-position argument (a Tensor[] or Scalar[]) for a piece.
IValue element_for(const IValue& list, const Piece& p) {
  const IValue& e = list.toListRef()[p.position];
  return e.isTensor() ? IValue(piece_of(e.toTensor(), p)) : e;
}

class ForeachChainWork final : public neuronrt::JoinableWork {
 public:
  struct Step {
    c10::OperatorHandle op;  // the foreach op (in place) or the element op's out= overload
    const char* name;
    const ElementOut* element;   // functional ops only
    Stack args;                  // as the CPU kernel sees them
    std::vector<at::Tensor> outs;  // functional ops: CPU aliases of the fresh outputs
    std::vector<bool> per_position;  // in place: whether argument i is a Tensor[] or Scalar[]
  };

  ForeachChainWork(Step step, ChainLayout layout) : layout_(std::move(layout)) {
    steps_.push_back(std::move(step));
  }

  bool join(neuronrt::JoinableWork& next) override {
    auto* other = dynamic_cast<ForeachChainWork*>(&next);
    if (other == nullptr || other->layout_.numels != layout_.numels) return false;
    std::vector<ChainLayout::Range> merged;
    merged.reserve(layout_.ranges.size() + other->layout_.ranges.size());
    std::merge(layout_.ranges.begin(), layout_.ranges.end(), other->layout_.ranges.begin(),
               other->layout_.ranges.end(), std::back_inserter(merged), before);
    if (!disjoint_positions(merged)) return false;
    layout_.ranges = std::move(merged);
    for (Step& s : other->steps_) steps_.push_back(std::move(s));
    return true;
  }

  void run() override {
    build_pieces();
    const size_t units = unit_starts_.size() - 1;
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t u = next.fetch_add(1); u < units; u = next.fetch_add(1)) {
        run_unit(unit_starts_[u], unit_starts_[u + 1]);
      }
    };
    int64_t elements = 0;
    for (int64_t n : layout_.numels) elements += n;
    WorkerParallelism threads(elements, /*matrix=*/false);
    const int team = at::get_num_threads();
    if (units > 1 && team > 1) {
      // Each thread takes the next unit when it is done with one: units differ
      // in size (a bias is one small piece).
      at::parallel_for(0, std::min<int64_t>(team, units), 1, [&](int64_t, int64_t) { work(); });
    } else {
      work();
    }
  }

 private:
  // Cuts the lists into units of about kPieceBytes across the chain's ops:
  // a large tensor into several units, small ones together into one.
  void build_pieces() {
    const size_t n = layout_.numels.size();
    std::vector<int64_t> bytes(n, 0);  // per element, across the chain's distinct tensors
    for (const auto& r : layout_.ranges) {
      if (r.position >= 0) bytes[r.position] += (r.end - r.begin) / layout_.numels[r.position];
    }
    int64_t filled = kPieceBytes;  // the open unit's bytes
    for (size_t i = 0; i < n; ++i) {
      const int64_t numel = layout_.numels[i];
      if (numel == 0) continue;
      const int64_t per = std::max<int64_t>(bytes[i], 1);
      if (numel * per <= kPieceBytes) {
        if (filled + numel * per > kPieceBytes) {
          unit_starts_.push_back(pieces_.size());
          filled = 0;
        }
        pieces_.push_back({static_cast<int64_t>(i), 0, numel});
        filled += numel * per;
        continue;
      }
      // Whole cache lines and vectors per piece, so that the kernels' vector
      // loops see the same element runs as on the whole tensor.
      const int64_t chunk = std::max<int64_t>(64, kPieceBytes / per / 64 * 64);
      for (int64_t b = 0; b < numel; b += chunk) {
        unit_starts_.push_back(pieces_.size());
        pieces_.push_back({static_cast<int64_t>(i), b, std::min(chunk, numel - b)});
      }
      filled = kPieceBytes;
    }
    unit_starts_.push_back(pieces_.size());
  }

  void run_unit(size_t first, size_t last) {
    for (const Step& s : steps_) {
      try {
        if (s.element == nullptr) {
          run_in_place(s, first, last);
        } else {
          run_functional(s, first, last);
        }
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, s.name, " (run in one pass with the ", steps_.size() - 1,
                    " other foreach ops queued with it): ", e.what_without_backtrace());
      }
    }
  }

  // The foreach op itself on lists of the unit's pieces.
  void run_in_place(const Step& s, size_t first, size_t last) {
    Stack stack;
    stack.reserve(s.args.size());
    for (size_t a = 0; a < s.args.size(); ++a) {
      const IValue& v = s.args[a];
      if (!s.per_position[a]) {
        stack.push_back(v);
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> pieces;
        pieces.reserve(last - first);
        for (size_t p = first; p < last; ++p) pieces.push_back(piece_of(v.toTensorList().get(pieces_[p].position), pieces_[p]));
        stack.emplace_back(std::move(pieces));
      } else {
        c10::impl::GenericList scalars(v.toList().elementType());
        scalars.reserve(last - first);
        for (size_t p = first; p < last; ++p) scalars.push_back(v.toListRef()[pieces_[p].position]);
        stack.emplace_back(std::move(scalars));
      }
    }
    call_cpu_kernel(s.op, &stack);
  }

  // The element op's out= kernel on each piece, writing the piece of its output.
  void run_functional(const Step& s, size_t first, size_t last) {
    Stack stack;
    for (size_t p = first; p < last; ++p) {
      const Piece& piece = pieces_[p];
      stack.clear();
      for (size_t a = 0; a < s.args.size(); ++a) {
        stack.push_back(s.element->per_element[a] ? element_for(s.args[a], piece) : s.args[a]);
      }
      stack.insert(stack.end(), s.element->defaults.begin(), s.element->defaults.end());
      stack.emplace_back(piece_of(s.outs[piece.position], piece));
      call_cpu_kernel(s.op, &stack);
    }
  }

  std::vector<Step> steps_;
  ChainLayout layout_;
  std::vector<Piece> pieces_;
  std::vector<size_t> unit_starts_;  // unit u is pieces_[unit_starts_[u], unit_starts_[u + 1])
};

}  // namespace

bool chainable_foreach(const std::string& op_name) {
  constexpr const char kPrefix[] = "aten::_foreach_";
  if (op_name.rfind(kPrefix, 0) != 0) return false;
  std::string base = op_name.substr(sizeof(kPrefix) - 1);
  base = base.substr(0, base.find('.'));
  if (!base.empty() && base.back() == '_') base.pop_back();
  return chainable_names().count(base) != 0;
}

std::optional<ChainLayout> chain_layout(const Stack& args, const std::vector<at::Tensor>& outs) {
  ChainLayout layout;
  std::vector<c10::IntArrayRef> sizes;
  std::vector<size_t> scalar_lists;  // lengths, checked against the tensor lists'
  bool any_list = false;
  auto add_list_tensor = [&](const at::Tensor& t, size_t i) {
    if (!defined_on_neuron(t) || !t.is_contiguous() || t.is_conj() || t.is_neg()) return false;
    if (layout.numels[i] < 0) {
      layout.numels[i] = t.numel();
      sizes[i] = t.sizes();
    } else if (t.sizes() != sizes[i]) {
      return false;
    }
    add_range(layout.ranges, t, static_cast<int64_t>(i));
    return true;
  };
  auto add_list = [&](c10::ArrayRef<at::Tensor> list) {
    if (!any_list) {
      if (list.empty()) return false;
      layout.numels.assign(list.size(), -1);
      sizes.resize(list.size());
      any_list = true;
    } else if (list.size() != layout.numels.size()) {
      return false;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (!add_list_tensor(list[i], i)) return false;
    }
    return true;
  };
  for (const IValue& v : args) {
    if (v.isTensorList()) {
      if (!add_list(v.toTensorList().vec())) return std::nullopt;
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) continue;
      if (t.dim() != 0) return std::nullopt;  // e.g. a tensor of per-position scalars
      if (defined_on_neuron(t)) add_range(layout.ranges, t, -1);
    } else if (v.isList()) {
      for (const IValue& e : v.toListRef()) {
        if (!e.isScalar()) return std::nullopt;  // Tensor?[] and the like
      }
      scalar_lists.push_back(v.toListRef().size());
    }
  }
  if (!outs.empty() && !add_list(outs)) return std::nullopt;
  if (!any_list || !disjoint_positions(layout.ranges)) return std::nullopt;
  for (size_t n : scalar_lists) {
    if (n != layout.numels.size()) return std::nullopt;  // the kernel reports it
  }
  return layout;
}

std::unique_ptr<neuronrt::JoinableWork> foreach_chain(const c10::OperatorHandle& op, const char* op_name,
                                                      const ElementOut* element, Stack cpu_args,
                                                      std::vector<at::Tensor> outs, ChainLayout layout) {
  ForeachChainWork::Step step{element ? element->op : op, op_name, element, std::move(cpu_args),
                              std::move(outs), {}};
  if (element == nullptr) {
    for (const auto& a : op.schema().arguments()) {
      step.per_position.push_back(is_list_of(a.type(), c10::TypeKind::TensorType) ||
                                  is_list_of(a.type(), c10::TypeKind::NumberType));
    }
  }
  return std::make_unique<ForeachChainWork>(std::move(step), std::move(layout));
}

}  // namespace torchneuron
