#include "csrc/aten/ForeachElements.h"

#include <string>
#include <utility>

#include "csrc/aten/CpuKernelCall.h"
#include "csrc/aten/OpOverloads.h"

namespace torchneuron {
namespace {

constexpr const char kForeachPrefix[] = "aten::_foreach_";

bool is_list_of(const c10::TypePtr& t, c10::TypeKind element) {
  return t->kind() == c10::TypeKind::ListType &&
         t->castRaw<c10::ListType>()->getElementType()->kind() == element;
}

// Does `candidate` take the element arguments (types in order), then only
// defaulted ones, then one out tensor?
bool takes_elements(const c10::FunctionSchema& candidate, const std::vector<std::string>& types) {
  const auto& args = candidate.arguments();
  if (args.size() < types.size() + 1) return false;
  for (size_t i = 0; i < types.size(); ++i) {
    if (args[i].is_out() || args[i].type()->str() != types[i]) return false;
  }
  for (size_t i = types.size(); i + 1 < args.size(); ++i) {
    if (args[i].is_out() || !args[i].default_value()) return false;
  }
  const auto& out = args.back();
  return out.is_out() && out.type()->kind() == c10::TypeKind::TensorType &&
         candidate.returns().size() == 1;
}

}  // namespace

std::optional<ElementOut> find_element_out(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  if (name.rfind(kForeachPrefix, 0) != 0 || name.back() == '_') return std::nullopt;
  const auto& rets = schema.returns();
  if (rets.size() != 1 || !is_list_of(rets[0].type(), c10::TypeKind::TensorType)) return std::nullopt;
  std::vector<bool> per_element;
  std::vector<std::string> types;
  bool any_tensor_list = false;
  for (const auto& a : schema.arguments()) {
    if (a.alias_info() && a.alias_info()->isWrite()) return std::nullopt;
    const auto& t = a.type();
    if (is_list_of(t, c10::TypeKind::TensorType)) {
      types.emplace_back("Tensor");
      any_tensor_list = true;
    } else if (is_list_of(t, c10::TypeKind::NumberType)) {
      types.emplace_back("Scalar");
    } else {
      per_element.push_back(false);
      types.push_back(t->str());
      continue;
    }
    per_element.push_back(true);
  }
  if (!any_tensor_list) return std::nullopt;
  const std::string element_name = "aten::" + name.substr(sizeof(kForeachPrefix) - 1);
  for (const auto& candidate : overloads_of(element_name)) {
    auto handle = c10::Dispatcher::singleton().findOp(candidate);
    if (!handle || !handle->hasSchema() || !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    const auto& cschema = handle->schema();
    if (!takes_elements(cschema, types)) continue;
    const auto& cargs = cschema.arguments();
    std::vector<c10::IValue> defaults;
    for (size_t i = types.size(); i + 1 < cargs.size(); ++i) defaults.push_back(*cargs[i].default_value());
    return ElementOut{*handle, std::move(per_element), std::move(defaults)};
  }
  return std::nullopt;
}

bool run_element_outs(const ElementOut& element, const torch::jit::Stack& cpu_args,
                      const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& expected) {
  bool none_moved = true;
  torch::jit::Stack stack;
  for (size_t e = 0; e < outs.size(); ++e) {
    stack.clear();
    for (size_t i = 0; i < cpu_args.size(); ++i) {
      stack.push_back(element.per_element[i] ? cpu_args[i].toListRef()[e] : cpu_args[i]);
    }
    stack.insert(stack.end(), element.defaults.begin(), element.defaults.end());
    stack.emplace_back(outs[e]);
    call_cpu_kernel(element.op, &stack);
    none_moved = copy_moved_outputs({outs[e]}, {expected[e]}) && none_moved;
  }
  return none_moved;
}

}  // namespace torchneuron
