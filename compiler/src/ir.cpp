#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

std::vector<int32_t> tensor_args(const Node& n) {
  std::vector<int32_t> ids;
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor) ids.push_back(static_cast<int32_t>(a.i));
    if (a.kind == Arg::Kind::kTensorList) {
      for (int64_t id : a.ints) if (id >= 0) ids.push_back(static_cast<int32_t>(id));
    }
  }
  return ids;
}

void rename_tensor_arg(Node& n, int32_t from, int32_t to) {
  for (Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor && a.i == from) a.i = to;
    if (a.kind == Arg::Kind::kTensorList) {
      for (int64_t& id : a.ints) if (id == from) id = to;
    }
  }
}

int64_t Layout::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t Layout::extent() const {
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return last + 1;
}

bool Layout::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return strides;
}

std::string Graph::describe_node(size_t index) const {
  return "node " + std::to_string(index) + " (" + nodes.at(index).op + ")";
}

void Graph::validate() const {
  auto fail = [](const std::string& what) { throw CompileError("graph: " + what); };
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    const std::string name = "value %" + std::to_string(i);
    if (v.id != static_cast<int32_t>(i)) fail(name + " has id " + std::to_string(v.id));
    if (v.layout.sizes.size() != v.layout.strides.size()) fail(name + ": sizes and strides differ in rank");
    for (size_t d = 0; d < v.layout.sizes.size(); ++d) {
      if (v.layout.sizes[d] < 0) fail(name + ": negative size " + std::to_string(v.layout.sizes[d]));
      if (v.layout.strides[d] < 0) fail(name + ": negative stride " + std::to_string(v.layout.strides[d]));
    }
    if (v.layout.offset < 0) fail(name + ": negative offset " + std::to_string(v.layout.offset));
    if (v.is_view()) {
      if (v.base >= static_cast<int32_t>(i)) fail(name + " views %" + std::to_string(v.base) + ", defined later");
      if (values[v.base].is_view()) fail(name + " views %" + std::to_string(v.base) + ", itself a view");
    } else if (v.layout.offset != 0) {
      fail(name + " owns its buffer but has offset " + std::to_string(v.layout.offset));
    }
  }
  std::vector<bool> defined(values.size(), false);
  auto check_id = [&](int64_t id, const std::string& where) {
    if (id < 0 || id >= static_cast<int64_t>(values.size())) fail(where + ": unknown value %" + std::to_string(id));
  };
  auto define = [&](int32_t id, const std::string& where) {
    check_id(id, where);
    if (values[id].is_view()) fail(where + ": defines %" + std::to_string(id) + ", a view");
    if (defined[id]) fail(where + ": %" + std::to_string(id) + " is defined twice");
    defined[id] = true;
  };
  auto use = [&](int64_t id, const std::string& where) {
    check_id(id, where);
    if (!defined[root(static_cast<int32_t>(id))]) fail(where + ": uses %" + std::to_string(id) + " before it is defined");
  };
  if (input_names.size() != inputs.size()) fail("input names and inputs differ in count");
  for (size_t i = 0; i < inputs.size(); ++i) define(inputs[i], "input " + std::to_string(i));
  for (size_t n = 0; n < nodes.size(); ++n) {
    const std::string where = describe_node(n);
    for (const Arg& a : nodes[n].args) {
      if (a.kind == Arg::Kind::kTensor) use(a.i, where);
      if (a.kind == Arg::Kind::kTensorList) {
        for (int64_t id : a.ints) if (id >= 0) use(id, where);
      }
    }
    if (nodes[n].op == kCopyInto) {
      if (nodes[n].args.size() < 2 || nodes[n].args[0].kind != Arg::Kind::kTensor ||
          nodes[n].args[1].kind != Arg::Kind::kTensor || !nodes[n].outputs.empty()) {
        fail(where + ": expects (dst tensor, src tensor, ...) and no outputs");
      }
      continue;
    }
    for (int32_t id : nodes[n].outputs) if (id >= 0) define(id, where);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] >= 0) use(outputs[i], "output " + std::to_string(i));
  }
}

}  // namespace neuroncompiler
