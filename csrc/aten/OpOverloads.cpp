#include "csrc/aten/OpOverloads.h"

#include <string>
#include <unordered_map>

namespace torchneuron {

const std::vector<c10::OperatorName>& overloads_of(const std::string& base_name) {
  static const auto* by_name = [] {
    auto* m = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
      (*m)[name.name].push_back(name);
    }
    return m;
  }();
  static const std::vector<c10::OperatorName> kNone;
  auto it = by_name->find(base_name);
  return it == by_name->end() ? kNone : it->second;
}

}  // namespace torchneuron
