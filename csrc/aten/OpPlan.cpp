#include "csrc/aten/OpPlan.h"

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/util/env.h>

#include "csrc/aten/ForeachChain.h"
#include "csrc/aten/ForeachElements.h"
#include "csrc/aten/OpOverloads.h"

namespace torchneuron {
namespace {

struct PlanCache {
  std::shared_mutex mutex;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpPlan>> plans;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache();
  return *cache;
}

std::unordered_set<std::string>& forced_cpu_copy_ops() {
  static auto* ops = [] {
    auto* set = new std::unordered_set<std::string>();
    if (auto env = c10::utils::get_env("TORCHNEURON_CPU_FALLBACK_OPS")) {
      std::stringstream ss(*env);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) set->insert(item);
      }
    }
    return set;
  }();
  return *ops;
}

bool returns_only_tensors(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    const auto& t = r.type();
    if (t->kind() == c10::TypeKind::TensorType) continue;
    if (t->kind() == c10::TypeKind::ListType &&
        t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      continue;
    if (t->kind() == c10::TypeKind::OptionalType &&
        t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      continue;
    return false;
  }
  return true;
}

// The out= overload of a functional op: the same arguments, then one
// keyword-only out tensor per (tensor) return, with a CPU kernel.
std::optional<c10::OperatorHandle> find_out_variant(const c10::FunctionSchema& schema) {
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  if (rets.empty()) return std::nullopt;
  for (const auto& r : rets) {
    if (r.type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  }
  for (const auto& candidate : overloads_of(schema.name())) {
    auto handle = c10::Dispatcher::singleton().findOp(candidate);
    if (!handle || !handle->hasSchema()) continue;
    const auto& cargs = handle->schema().arguments();
    if (cargs.size() != args.size() + rets.size()) continue;
    bool match = true;
    for (size_t i = 0; i < args.size() && match; ++i) {
      match = cargs[i].name() == args[i].name() && !cargs[i].is_out() &&
              cargs[i].type()->str() == args[i].type()->str();
    }
    for (size_t i = args.size(); i < cargs.size() && match; ++i) {
      match = cargs[i].is_out() && cargs[i].type()->kind() == c10::TypeKind::TensorType;
    }
    if (match && handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) return handle;
  }
  return std::nullopt;
}

}  // namespace

OpPlan& plan_for(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  auto& cache = plan_cache();
  {
    std::shared_lock<std::shared_mutex> lock(cache.mutex);
    auto it = cache.plans.find(&schema);
    if (it != cache.plans.end()) return *it->second;
  }
  auto plan = std::make_unique<OpPlan>();
  plan->name = schema.name();
  if (!schema.overload_name().empty()) plan->name += "." + schema.overload_name();
  plan->counter = &op_counter(plan->name);
  plan->facts.key_float_values = schema.name() == "aten::arange" || schema.name() == "aten::range";
  static const std::unordered_set<std::string> kMatrixOps = {
      "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
      "aten::_addmm_activation", "aten::mv", "aten::addmv", "aten::matmul", "aten::linear",
      "aten::convolution", "aten::convolution_backward", "aten::_convolution",
      "aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward",
      "aten::slow_conv3d_forward", "aten::_conv_depthwise2d", "aten::slow_conv_transpose2d",
      "aten::slow_conv_transpose3d", "aten::slow_conv_dilated2d", "aten::slow_conv_dilated3d"};
  plan->matrix_work = kMatrixOps.count(schema.name()) > 0;
  static const std::unordered_set<std::string> kGathers = {
      "aten::embedding", "aten::index_select", "aten::gather", "aten::take", "aten::index"};
  static const std::unordered_set<std::string> kScatters = {
      "aten::index_copy_", "aten::index_put_", "aten::_index_put_impl_", "aten::index_add_",
      "aten::index_fill_", "aten::scatter_", "aten::scatter_add_", "aten::scatter_reduce_",
      "aten::masked_scatter_", "aten::index_copy", "aten::index_put", "aten::index_add",
      "aten::scatter", "aten::scatter_add"};
  if (kGathers.count(schema.name())) plan->work_size = OpPlan::WorkSize::kOutputs;
  if (kScatters.count(schema.name())) plan->work_size = OpPlan::WorkSize::kReadArguments;
  const auto& args = schema.arguments();
  for (const auto& a : args) {
    if (a.alias_info() && a.alias_info()->isWrite()) plan->has_mutable_arg = true;
    const auto& t = a.type();
    bool is_gen = t->kind() == c10::TypeKind::GeneratorType ||
                  (t->kind() == c10::TypeKind::OptionalType &&
                   t->castRaw<c10::OptionalType>()->getElementType()->kind() ==
                       c10::TypeKind::GeneratorType);
    plan->facts.arg_is_generator.push_back(is_gen);
  }
  for (const auto& r : schema.returns()) {
    int idx = -1;
    if (r.alias_info() && r.alias_info()->isWrite()) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].alias_info() && args[i].alias_info()->isWrite() &&
            args[i].alias_info()->beforeSets() == r.alias_info()->beforeSets()) {
          idx = static_cast<int>(i);
          break;
        }
      }
    }
    plan->facts.ret_written_arg.push_back(idx);
  }
  // Only structured ops (those with a CompositeExplicitAutogradNonFunctional
  // kernel) promise that out= kernels write exactly the meta-inferred
  // outputs; others may use `out` as scratch of another shape.
  // Known exceptions: out= kernels that reshape `out` while they work.
  static const std::unordered_set<std::string> kScratchOut = {"aten::mse_loss"};
  if (!plan->has_mutable_arg && !kScratchOut.count(plan->name) &&
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
    plan->out_op = find_out_variant(schema);
  }
  if (!plan->has_mutable_arg) plan->element_out = find_element_out(schema);
  plan->foreach_chain = chainable_foreach(plan->name) && (plan->has_mutable_arg || plan->element_out);
  plan->has_cpu_kernel = op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
  if (forced_cpu_copy_ops().count(plan->name)) {
    plan->mode = Mode::kCpuCopy;
  } else if (!returns_only_tensors(schema)) {
    plan->mode = Mode::kSync;  // scalars and flags need the data now
  }
  std::unique_lock<std::shared_mutex> lock(cache.mutex);
  auto& slot = cache.plans[&schema];
  if (!slot) slot = std::move(plan);
  return *slot;
}

}  // namespace torchneuron
