#include "csrc/compiler/ExternAtenCalls.h"

#include <algorithm>
#include <map>
#include <string>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/List.h>
#include <ATen/ScalarOps.h>
#include <c10/util/Exception.h>

#include "csrc/aten/CpuKernelCall.h"
#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpPlan.h"
#include "csrc/aten/native/Compat.h"
#include "csrc/aten/native/Matmul.h"
#include "csrc/aten/native/UpcastGemm.h"
#include "csrc/runtime/WorkerThreads.h"

namespace torchneuron {

namespace nc = neuroncompiler;
using torch::jit::Stack;

c10::ScalarType scalar_type_of(nc::DType dtype) {
  switch (dtype) {
    case nc::DType::kFloat32: return c10::kFloat;
    case nc::DType::kFloat64: return c10::kDouble;
    case nc::DType::kFloat16: return c10::kHalf;
    case nc::DType::kBFloat16: return c10::kBFloat16;
    case nc::DType::kInt64: return c10::kLong;
    case nc::DType::kInt32: return c10::kInt;
    case nc::DType::kInt16: return c10::kShort;
    case nc::DType::kInt8: return c10::kChar;
    case nc::DType::kUInt8: return c10::kByte;
    case nc::DType::kBool: return c10::kBool;
    case nc::DType::kComplex64: return c10::kComplexFloat;
    case nc::DType::kComplex128: return c10::kComplexDouble;
  }
  TORCH_CHECK(false, "[neuron] compiled graph: unknown dtype");
}

at::Tensor value_tensor(const nc::Program& p, const ProgramStorages& st, int32_t value) {
  if (value < 0) return at::Tensor();
  const nc::ProgramValue& v = p.values[value];
  if (v.buffer < 0) return at::Tensor();
  const nc::Buffer& buf = p.buffers[v.buffer];
  const int64_t elem = nc::dtype_size(v.layout.dtype);
  c10::Storage storage;
  int64_t offset = v.layout.offset;
  switch (buf.kind) {
    case nc::Buffer::Kind::kInput:
      storage = st.inputs[buf.index];
      // In bytes: a value may view its input as another dtype (view_as_real).
      offset += st.input_offset_bytes[buf.index] / elem;
      break;
    case nc::Buffer::Kind::kOutput: storage = st.outputs[buf.index]; break;
    case nc::Buffer::Kind::kArena:
      storage = st.arena;
      offset += buf.index / elem;
      break;
  }
  return tensor_over(std::move(storage), c10::DispatchKey::PrivateUse1,
                     caffe2::TypeMeta::fromScalarType(scalar_type_of(v.layout.dtype)), v.layout.sizes,
                     v.layout.strides, offset);
}

namespace {

std::pair<std::string, std::string> split_op_name(const std::string& op) {
  const auto dot = op.find('.');
  if (dot == std::string::npos) return {op, ""};
  std::string overload = op.substr(dot + 1);
  return {op.substr(0, dot), overload == "default" ? "" : overload};
}

c10::IValue to_ivalue(const nc::Arg& a, const c10::Argument& schema_arg, const nc::Program& p,
                      const ProgramStorages& st, c10::DeviceIndex device) {
  if (a.is_scalar() && schema_arg.real_type()->kind() == c10::TypeKind::TensorType) {
    // A Python number where the schema takes a tensor (add.Tensor(x, 1)): a
    // wrapped number, which type promotion treats as eager does.
    const c10::Scalar value = a.kind == nc::Arg::Kind::kFloat ? c10::Scalar(a.f)
                              : a.kind == nc::Arg::Kind::kBool ? c10::Scalar(a.i != 0)
                                                               : c10::Scalar(a.i);
    at::Tensor t = c10::scalar_to_tensor(value);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  }
  switch (a.kind) {
    case nc::Arg::Kind::kTensor: return value_tensor(p, st, static_cast<int32_t>(a.i));
    case nc::Arg::Kind::kInt: return c10::IValue(a.i);
    case nc::Arg::Kind::kFloat: return c10::IValue(a.f);
    case nc::Arg::Kind::kBool: return c10::IValue(a.i != 0);
    case nc::Arg::Kind::kNone: return c10::IValue();
    case nc::Arg::Kind::kIntList: {
      // bool[N] arguments (output masks) travel as int lists.
      const auto& type = schema_arg.real_type();
      if (type->kind() == c10::TypeKind::ListType &&
          type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::BoolType) {
        c10::List<bool> bools;
        for (int64_t v : a.ints) bools.push_back(v != 0);
        return c10::IValue(bools);
      }
      return c10::IValue(c10::List<int64_t>(a.ints));
    }
    case nc::Arg::Kind::kFloatList: return c10::IValue(c10::List<double>(a.floats));
    case nc::Arg::Kind::kDevice: return c10::IValue(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(a.i)));
    case nc::Arg::Kind::kString: return c10::IValue(a.s);
    case nc::Arg::Kind::kTensorList: {
      const auto& type = schema_arg.real_type();
      const bool optional_items = type->kind() == c10::TypeKind::ListType &&
                                  type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType;
      if (optional_items) {
        c10::List<std::optional<at::Tensor>> list;
        for (int64_t id : a.ints) {
          at::Tensor t = value_tensor(p, st, static_cast<int32_t>(id));
          list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
        }
        return c10::IValue(list);
      }
      c10::List<at::Tensor> list;
      for (int64_t id : a.ints) list.push_back(value_tensor(p, st, static_cast<int32_t>(id)));
      return c10::IValue(list);
    }
  }
  (void)device;
  return c10::IValue();
}

bool is_one(const nc::Arg& a) { return a.kind == nc::Arg::Kind::kNone || (a.is_scalar() && a.scalar() == 1.0); }

}  // namespace

// mm and addmm (beta = alpha = 1) with few rows run the device's skinny matmul,
// as eager neuron runs them, straight into the planned output buffer.
bool ExternAtenCalls::run_skinny_matmul(const nc::Program& p, const nc::Step& step, const ProgramStorages& storages,
                                        Runner form) {
  const bool mm = form == Runner::kMm, addmm = form == Runner::kAddmm;
  if ((!mm && !addmm) || step.node.outputs.size() != 1 || step.node.outputs[0] < 0) return false;
  const auto& a = step.node.args;
  if (addmm && (a.size() < 5 || !is_one(a[3]) || !is_one(a[4]))) return false;
  const size_t xi = mm ? 0 : 1;
  if (a[xi].kind != nc::Arg::Kind::kTensor || a[xi + 1].kind != nc::Arg::Kind::kTensor) return false;
  if (addmm && a[0].kind != nc::Arg::Kind::kTensor) return false;
  const nc::Layout& out = p.values[step.node.outputs[0]].layout;
  if (out.sizes.size() != 2 || out.strides[1] != 1 || out.strides[0] != out.sizes[1]) return false;
  const at::Tensor x = value_tensor(p, storages, static_cast<int32_t>(a[xi].i));
  const at::Tensor w = value_tensor(p, storages, static_cast<int32_t>(a[xi + 1].i));
  const at::Tensor bias = addmm ? value_tensor(p, storages, static_cast<int32_t>(a[0].i)) : at::Tensor();
  auto params = native::skinny_matmul_params(x, w, addmm ? &bias : nullptr);
  if (!params) return false;
  at::Tensor y = value_tensor(p, storages, step.node.outputs[0]);
  params->y.data = y.data_ptr();
  native::run_skinny_matmul_here(*params);
  return true;
}

// float32 mm, addmm, bmm and baddbmm that eager neuron runs through oneDNN
// (Matmul.h) run so here too, straight into the planned output buffer: the
// same arithmetic as eager, faster than ATen's MKL where oneDNN is chosen.
bool ExternAtenCalls::run_onednn_gemm(const nc::Program& p, const nc::Step& step, const ProgramStorages& storages,
                                      Runner form) {
  const bool batched = form == Runner::kBmm || form == Runner::kBaddbmm;
  const bool mm = form == Runner::kMm || form == Runner::kBmm;
  const bool addmm = form == Runner::kAddmm || form == Runner::kBaddbmm;
  if ((!mm && !addmm) || step.node.outputs.size() != 1 || step.node.outputs[0] < 0) return false;
  const auto& a = step.node.args;
  const size_t xi = mm ? 0 : 1;
  if (a.size() < xi + 2 || a[xi].kind != nc::Arg::Kind::kTensor || a[xi + 1].kind != nc::Arg::Kind::kTensor) {
    return false;
  }
  if (addmm && a[0].kind != nc::Arg::Kind::kTensor) return false;
  auto scalar = [&](size_t i, double otherwise) -> std::optional<double> {
    if (i >= a.size() || a[i].kind == nc::Arg::Kind::kNone) return otherwise;
    if (!a[i].is_scalar()) return std::nullopt;
    return a[i].scalar();
  };
  const std::optional<double> beta = addmm ? scalar(3, 1.0) : 0.0, alpha = addmm ? scalar(4, 1.0) : 1.0;
  if (!beta || !alpha) return false;
  const nc::Layout& out = p.values[step.node.outputs[0]].layout;
  if (out.sizes.size() != (batched ? 3u : 2u) || !out.is_contiguous()) return false;
  const at::Tensor x = value_tensor(p, storages, static_cast<int32_t>(a[xi].i));
  const at::Tensor w = value_tensor(p, storages, static_cast<int32_t>(a[xi + 1].i));
  const at::Tensor bias = addmm ? value_tensor(p, storages, static_cast<int32_t>(a[0].i)) : at::Tensor();
  const at::Tensor* bias_arg = addmm ? &bias : nullptr;
  if (!(batched ? native::onednn_takes_batched(x, w, bias_arg) : native::onednn_takes(x, w, bias_arg))) return false;
  const at::Tensor y = cpu_alias(value_tensor(p, storages, step.node.outputs[0]));
  const at::Tensor c = addmm && *beta != 0.0 ? cpu_alias(bias) : at::Tensor();
  native::run_onednn_here(cpu_alias(x), cpu_alias(w), y, c.defined() ? &c : nullptr, static_cast<float>(*beta),
                          static_cast<float>(*alpha));
  return true;
}

// mm.dtype / addmm.dtype with out_dtype float32 (the pattern pass's product
// of bfloat16 operands cast to float32): the mixed-precision GEMM, straight
// into the planned output buffer. ATen has no CPU kernel for these overloads.
bool ExternAtenCalls::run_upcast_gemm(const nc::Program& p, const nc::Step& step, const ProgramStorages& storages,
                                      Runner form) {
  const bool mm = form == Runner::kUpcastMm, addmm = form == Runner::kUpcastAddmm;
  if ((!mm && !addmm) || step.node.outputs.size() != 1 || step.node.outputs[0] < 0) return false;
  const auto& a = step.node.args;
  const size_t xi = mm ? 0 : 1;
  auto scalar = [&](size_t i) { return i < a.size() && a[i].is_scalar() ? static_cast<float>(a[i].scalar()) : 1.0f; };
  const float beta = addmm ? scalar(4) : 0.0f, alpha = addmm ? scalar(5) : 1.0f;
  const at::Tensor x = cpu_alias(value_tensor(p, storages, static_cast<int32_t>(a[xi].i)));
  const at::Tensor w = cpu_alias(value_tensor(p, storages, static_cast<int32_t>(a[xi + 1].i)));
  const at::Tensor y = cpu_alias(value_tensor(p, storages, step.node.outputs[0]));
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 && y.scalar_type() == at::kFloat &&
                  y.dim() == 2 && y.stride(1) == 1,
              "[neuron] compiled graph: ", step.node.op, " takes bfloat16 operands and a float32 row-major output, got ",
              x.scalar_type(), ", ", w.scalar_type(), " and ", y.scalar_type());
  const at::Tensor c = addmm && beta != 0.0f ? cpu_alias(value_tensor(p, storages, static_cast<int32_t>(a[0].i)))
                                             : at::Tensor();
  native::upcast_addmm_here(x, w, y, c.defined() ? &c : nullptr, beta, alpha);
  return true;
}

// slice_scatter and select_scatter (what AOTAutograd makes of a slice's or a
// select's backward, e.g. the rotary embedding's halves) have no structured
// out= overload: their functional kernels clone `self` into a fresh tensor,
// which the program then copies into the planned buffer. Computed as those
// kernels compute it, but in the planned buffer: `self` copied into the
// output, `src` into the output's slice. (The planner never gives an output
// the memory of a value the same step reads.)
bool ExternAtenCalls::run_scatter_into_view(const nc::Program& p, const nc::Step& step,
                                            const ProgramStorages& storages, Runner form) {
  const bool slice = form == Runner::kSliceScatter, select = form == Runner::kSelectScatter;
  if ((!slice && !select) || step.node.outputs.size() != 1 || step.node.outputs[0] < 0) return false;
  const auto& a = step.node.args;
  if (a.size() != (slice ? 6u : 4u) || a[0].kind != nc::Arg::Kind::kTensor || a[1].kind != nc::Arg::Kind::kTensor ||
      a[2].kind != nc::Arg::Kind::kInt) {
    return false;
  }
  const auto optional_int = [](const nc::Arg& x) -> std::optional<int64_t> {
    if (x.kind == nc::Arg::Kind::kInt) return x.i;
    return std::nullopt;
  };
  if (slice && ((a[3].kind != nc::Arg::Kind::kInt && a[3].kind != nc::Arg::Kind::kNone) ||
                (a[4].kind != nc::Arg::Kind::kInt && a[4].kind != nc::Arg::Kind::kNone) ||
                a[5].kind != nc::Arg::Kind::kInt)) {
    return false;
  }
  if (select && a[3].kind != nc::Arg::Kind::kInt) return false;
  CpuAliases aliases;
  at::Tensor out = aliases(value_tensor(p, storages, step.node.outputs[0]));
  const at::Tensor self = aliases(value_tensor(p, storages, static_cast<int32_t>(a[0].i)));
  const at::Tensor src = aliases(value_tensor(p, storages, static_cast<int32_t>(a[1].i)));
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  out.copy_(self);
  at::Tensor view = slice ? out.slice(a[2].i, optional_int(a[3]), optional_int(a[4]), a[5].i) : out.select(a[2].i, a[3].i);
  TORCH_CHECK(view.sizes() == src.sizes(), "expected src to have a size equal to the ", slice ? "slice" : "select",
              " of self. src size = ", src.sizes(), ", ", slice ? "slice" : "select", " size = ", view.sizes());
  view.copy_(src);
  return true;
}

// embedding_dense_backward: ATen's kernel (and its out= form, which calls it)
// zero-fills a fresh host buffer of the whole weight every call, a page fault
// per 4 KiB. Computed as the eager device computes it (native/Compat.h), in
// the planned buffer.
bool ExternAtenCalls::run_embedding_backward_into(const nc::Program& p, const nc::Step& step,
                                                  const ProgramStorages& storages) {
  if (step.node.op != "aten::embedding_dense_backward.default" || step.node.outputs.size() != 1 ||
      step.node.outputs[0] < 0) {
    return false;
  }
  const auto& a = step.node.args;
  if (a.size() != 5 || a[0].kind != nc::Arg::Kind::kTensor || a[1].kind != nc::Arg::Kind::kTensor ||
      a[3].kind != nc::Arg::Kind::kInt || !a[4].is_scalar()) {
    return false;
  }
  const int32_t out_id = step.node.outputs[0];
  if (!native::embedding_backward_by_index_add(scalar_type_of(p.values[out_id].layout.dtype), a[4].scalar() != 0)) {
    return false;
  }
  CpuAliases aliases;
  const at::Tensor out = aliases(value_tensor(p, storages, out_id));
  const at::Tensor grad = aliases(value_tensor(p, storages, static_cast<int32_t>(a[0].i)));
  const at::Tensor indices = aliases(value_tensor(p, storages, static_cast<int32_t>(a[1].i)));
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  native::embedding_backward_into(out, grad, indices, a[3].i);
  return true;
}

ExternAtenCalls::ExternAtenCalls(const nc::Program& p) : by_step_(p.steps.size()) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const nc::Step& s = p.steps[i];
    if (s.kind != nc::Step::Kind::kExtern) continue;
    const auto [name, overload] = split_op_name(s.node.op);
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    TORCH_CHECK(op.has_value(), "[neuron] compiled graph: step ", i, ": unknown operator ", s.node.op);
    const auto& schema = op->schema();
    TORCH_CHECK(schema.arguments().size() == s.node.args.size(), "[neuron] compiled graph: step ", i, " (",
                s.node.op, "): ", s.node.args.size(), " arguments given, the schema has ", schema.arguments().size());
    // An input mutation, and an op the compiler made in-place (reinplace.hpp),
    // writes its first argument and has no output value.
    const bool writes_self = !schema.arguments().empty() && schema.arguments()[0].alias_info() &&
                             schema.arguments()[0].alias_info()->isWrite();
    const size_t returns = s.node.op == nc::kCopyInto || (writes_self && s.node.outputs.empty())
                               ? 0 : schema.returns().size();
    TORCH_CHECK(returns == s.node.outputs.size(), "[neuron] compiled graph: step ", i, " (",
                s.node.op, "): ", s.node.outputs.size(), " outputs given, the schema has ", schema.returns().size());
    Resolved r{*op, {}, std::nullopt, nullptr};
    r.runner = runner_of(s.node.op);
    if (s.node.op != nc::kCopyInto && !s.node.outputs.empty()) {
      OpPlan& plan = plan_for(*op);
      r.out_op = plan.out_op;
      r.out_op_ok = &plan.out_op_ok;
    }
    for (const auto& arg : schema.arguments()) {
      const auto& type = arg.real_type();
      const bool gen = type->kind() == c10::TypeKind::GeneratorType ||
                       (type->kind() == c10::TypeKind::OptionalType &&
                        type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType);
      r.arg_is_generator.push_back(gen);
    }
    // Matrix products the skinny matmul takes run on the device's threads:
    // they must not make the step lend ATen's OpenMP team (whose spinning
    // threads would take the cores those threads need).
    if ((r.runner == Runner::kMm || r.runner == Runner::kAddmm) && !s.node.outputs.empty() &&
        s.node.outputs[0] >= 0 && p.values[s.node.outputs[0]].layout.sizes.size() == 2 &&
        native::skinny_matmul_takes_rows(scalar_type_of(p.values[s.node.outputs[0]].layout.dtype),
                                         p.values[s.node.outputs[0]].layout.sizes[0])) {
      by_step_[i] = std::move(r);
      continue;
    }
    // The step's work is measured as the eager op's (OpPlan::work_size): a
    // gather from a large table (an embedding lookup) is the size of its
    // output, a scatter into a large tensor the size of what it reads; the
    // table's size gave a decode step's embedding the team every step, and
    // its spinning helpers then took the core the device's threads needed.
    const OpPlan& plan = plan_for(*op);
    const std::string base = name;
    r.matrix = plan.matrix_work || base == "aten::mm" || base == "aten::addmm" || base.find("conv") != std::string::npos ||
               base.find("attention") != std::string::npos;
    using WorkSize = OpPlan::WorkSize;
    if (plan.work_size != WorkSize::kOutputs) {
      for (size_t a = 0; a < s.node.args.size(); ++a) {
        const nc::Arg& arg = s.node.args[a];
        if (arg.kind != nc::Arg::Kind::kTensor) continue;
        const auto* alias = schema.arguments()[a].alias_info();
        if (plan.work_size == WorkSize::kReadArguments && alias != nullptr && alias->isWrite()) continue;
        r.elements = std::max(r.elements, p.values[arg.i].layout.numel());
      }
    }
    if (plan.work_size != WorkSize::kReadArguments) {
      for (int32_t o : s.node.outputs) {
        if (o >= 0) r.elements = std::max(r.elements, p.values[o].layout.numel());
      }
    }
    by_step_[i] = std::move(r);
  }
}

ExternAtenCalls::Runner ExternAtenCalls::runner_of(const std::string& op) {
  static const std::map<std::string, Runner> kRunners = {
      {nc::kCopyInto, Runner::kCopyInto},
      {"aten::empty.memory_format", Runner::kUninitialized},
      {"aten::empty_strided.default", Runner::kUninitialized},
      {"aten::empty_like.default", Runner::kUninitialized},
      {"aten::new_empty.default", Runner::kUninitialized},
      {"aten::new_empty_strided.default", Runner::kUninitialized},
      {"aten::mm.default", Runner::kMm},
      {"aten::addmm.default", Runner::kAddmm},
      {"aten::bmm.default", Runner::kBmm},
      {"aten::baddbmm.default", Runner::kBaddbmm},
      {"aten::mm.dtype", Runner::kUpcastMm},
      {"aten::addmm.dtype", Runner::kUpcastAddmm},
      {"aten::slice_scatter.default", Runner::kSliceScatter},
      {"aten::select_scatter.default", Runner::kSelectScatter},
      {"aten::embedding_dense_backward.default", Runner::kEmbeddingBackward},
  };
  const auto it = kRunners.find(op);
  return it == kRunners.end() ? Runner::kAten : it->second;
}

void ExternAtenCalls::call(const nc::Program& p, const nc::Step& step, const ProgramStorages& storages,
                           c10::DeviceIndex device) const {
  const size_t index = static_cast<size_t>(&step - p.steps.data());
  TORCH_CHECK(index < by_step_.size() && by_step_[index].has_value(), "[neuron] compiled graph: step ", index,
              " is not an extern call");
  const Resolved& r = *by_step_[index];
  try {
    // Each step decides whether ATen's kernel gets the worker's OpenMP team,
    // as each eager op does: a program's small ops run alone, and after a
    // step that used the team the program's tile and native steps borrow it
    // while its helpers still spin (csrc/runtime/WorkerThreads.h).
    WorkerParallelism threads(r.elements, r.matrix);
    run(r, p, step, storages, device);
  } catch (c10::Error& e) {
    // Keeps the error's type (IndexError, ...): Python sees what eager raises.
    e.add_context("[neuron] in compiled program step " + std::to_string(index) + " (extern call " + step.node.op + ")");
    throw;
  }
}

void ExternAtenCalls::run(const Resolved& r, const nc::Program& p, const nc::Step& step,
                          const ProgramStorages& storages, c10::DeviceIndex device) {
  switch (r.runner) {
    case Runner::kCopyInto: {  // one the tile interpreter does not take (int64, float64, ...)
      CpuAliases aliases;
      at::Tensor dst = aliases(value_tensor(p, storages, static_cast<int32_t>(step.node.args[0].i)));
      at::Tensor src = aliases(value_tensor(p, storages, static_cast<int32_t>(step.node.args[1].i)));
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      dst.copy_(src);
      return;
    }
    case Runner::kUninitialized: return;
    case Runner::kMm:
    case Runner::kAddmm:
    case Runner::kBmm:
    case Runner::kBaddbmm:
      if (run_skinny_matmul(p, step, storages, r.runner) || run_onednn_gemm(p, step, storages, r.runner)) return;
      break;
    case Runner::kUpcastMm:
    case Runner::kUpcastAddmm:
      if (run_upcast_gemm(p, step, storages, r.runner)) return;
      break;
    case Runner::kSliceScatter:
    case Runner::kSelectScatter:
      if (run_scatter_into_view(p, step, storages, r.runner)) return;
      break;
    case Runner::kEmbeddingBackward:
      if (run_embedding_backward_into(p, step, storages)) return;
      break;
    case Runner::kAten: break;
  }
  const auto& schema = r.op.schema();
  Stack args;
  args.reserve(step.node.args.size());
  for (size_t i = 0; i < step.node.args.size(); ++i) {
    args.push_back(to_ivalue(step.node.args[i], schema.arguments()[i], p, storages, device));
  }
  CpuAliases aliases;
  Stack cpu = cpu_arguments(args, r.arg_is_generator, device, schema.name().c_str(), aliases);
  const bool every_output_planned = std::all_of(step.node.outputs.begin(), step.node.outputs.end(),
                                                [&](int32_t o) { return o >= 0; });
  if (r.out_op && every_output_planned && r.out_op_ok->load(std::memory_order_relaxed)) {
    // The out= kernel writes the planned buffers directly (a GEMM's result is
    // not allocated and copied).
    std::vector<at::Tensor> passed, expected;
    for (int32_t o : step.node.outputs) {
      const at::Tensor t = value_tensor(p, storages, o);
      expected.push_back(cpu_alias(t));
      passed.push_back(cpu_alias(t, /*resizable=*/true));
      cpu.emplace_back(passed.back());
    }
    call_cpu_kernel(*r.out_op, &cpu);
    if (!copy_moved_outputs(passed, expected)) r.out_op_ok->store(false, std::memory_order_relaxed);
    return;
  }
  call_cpu_kernel(r.op, &cpu);
  Stack targets;
  for (int32_t o : step.node.outputs) {
    at::Tensor t = value_tensor(p, storages, o);
    targets.push_back(t.defined() ? c10::IValue(aliases(t)) : c10::IValue());
  }
  copy_into(targets, cpu);
}

}  // namespace torchneuron
