// The overloads of every registered aten op, by base name ("aten::add" ->
// add.Tensor, add.out, ...): how an op's out= sibling is found.
#pragma once

#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

namespace torchneuron {

// The overload names of `base_name` (empty if none). Built once, on first
// use, from the dispatcher's registered ops.
const std::vector<c10::OperatorName>& overloads_of(const std::string& base_name);

}  // namespace torchneuron
