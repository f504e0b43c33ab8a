// Hand-built graphs for the tests: values, inputs, nodes and outputs by a few
// calls, validated as parse_graph validates.
#pragma once

#include <string>
#include <vector>

#include "neuroncompiler/ir.hpp"

namespace nc_test {

using namespace neuroncompiler;

class GraphBuilder {
 public:
  int32_t value(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}, int32_t base = -1,
                int64_t offset = 0) {
    Value v;
    v.id = static_cast<int32_t>(g_.values.size());
    v.layout.dtype = dtype;
    v.layout.strides = strides.empty() ? contiguous_strides(sizes) : strides;
    v.layout.sizes = std::move(sizes);
    v.layout.offset = offset;
    v.base = base;
    g_.values.push_back(v);
    return v.id;
  }
  int32_t input(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
    const int32_t id = value(dtype, std::move(sizes), std::move(strides));
    g_.inputs.push_back(id);
    g_.input_names.push_back("in" + std::to_string(g_.inputs.size() - 1));
    return id;
  }
  int32_t view(int32_t base, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset = 0) {
    return value(g_.values[base].layout.dtype, std::move(sizes), std::move(strides), base, offset);
  }
  // A node with one fresh output of the given type and sizes (contiguous).
  int32_t node(const std::string& op, std::vector<Arg> args, DType dtype, std::vector<int64_t> sizes) {
    const int32_t out = value(dtype, std::move(sizes));
    g_.nodes.push_back({op, std::move(args), {out}});
    return out;
  }
  void copy_into(int32_t dst, int32_t src) {
    g_.nodes.push_back({kCopyInto, {Arg::tensor(dst), Arg::tensor(src), Arg::boolean(false)}, {}});
  }
  void output(int32_t id) { g_.outputs.push_back(id); }
  Graph build() const {
    g_.validate();
    return g_;
  }
  Graph& graph() { return g_; }

 private:
  Graph g_;
};

inline Arg T(int32_t id) { return Arg::tensor(id); }
inline Arg F(double v) { return Arg::real(v); }

}  // namespace nc_test
