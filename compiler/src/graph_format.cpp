#include "neuroncompiler/graph_format.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace neuroncompiler {
namespace {

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ',') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

class LineParser {
 public:
  LineParser(int line_no, std::vector<std::string_view> tokens)
      : line_no_(line_no), tokens_(std::move(tokens)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw CompileError("graph line " + std::to_string(line_no_) + ": " + what);
  }
  bool done() const { return pos_ >= tokens_.size(); }
  std::string_view next(const char* what) {
    if (done()) fail(std::string("expected ") + what + " at the end of the line");
    return tokens_[pos_++];
  }
  int64_t integer(std::string_view tok, const char* what) const {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || p != tok.data() + tok.size()) {
      fail(std::string("expected an integer for ") + what + ", got '" + std::string(tok) + "'");
    }
    return v;
  }
  int64_t next_int(const char* what) { return integer(next(what), what); }
  double real(std::string_view tok, const char* what) const {
    std::string s(tok);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) {
      fail(std::string("expected a number for ") + what + ", got '" + s + "'");
    }
    return v;
  }
  int64_t value_ref(std::string_view tok, const char* what) const {
    if (tok.size() < 2 || tok[0] != '%') fail(std::string("expected %<id> for ") + what + ", got '" + std::string(tok) + "'");
    return integer(tok.substr(1), what);
  }
  void finish() const {
    if (!done()) fail("unexpected token '" + std::string(tokens_[pos_]) + "'");
  }

  Arg arg(std::string_view tok) const {
    if (tok == "_") return Arg::none();
    const char kind = tok[0];
    const std::string_view body = tok.substr(1);
    Arg a;
    switch (kind) {
      case '%': return Arg::tensor(static_cast<int32_t>(value_ref(tok, "a tensor argument")));
      case 'i': return Arg::integer(integer(body, "an int argument"));
      case 'f': return Arg::real(real(body, "a float argument"));
      case 'b':
        if (body != "0" && body != "1") fail("expected b0 or b1, got '" + std::string(tok) + "'");
        return Arg::boolean(body == "1");
      case 'I':
        a.kind = Arg::Kind::kIntList;
        for (auto t : split_commas(body)) a.ints.push_back(integer(t, "an int list entry"));
        return a;
      case 'F':
        a.kind = Arg::Kind::kFloatList;
        for (auto t : split_commas(body)) a.floats.push_back(real(t, "a float list entry"));
        return a;
      case 'T':
        a.kind = Arg::Kind::kTensorList;
        for (auto t : split_commas(body)) a.ints.push_back(t == "_" ? -1 : value_ref(t, "a tensor list entry"));
        return a;
      case 'D':
        a.kind = Arg::Kind::kDevice;
        a.i = integer(body, "a device index");
        return a;
      case 's':
        a.kind = Arg::Kind::kString;
        a.s = std::string(body);
        return a;
      default:
        fail("unknown argument kind '" + std::string(1, kind) + "' in '" + std::string(tok) + "'");
    }
  }

 private:
  int line_no_;
  std::vector<std::string_view> tokens_;
  size_t pos_ = 0;
};

std::string format_real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string format_arg(const Arg& a) {
  std::string out;
  auto join = [&](char prefix, const auto& items, auto fmt) {
    out += prefix;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + fmt(items[i]);
  };
  switch (a.kind) {
    case Arg::Kind::kTensor: return "%" + std::to_string(a.i);
    case Arg::Kind::kInt: return "i" + std::to_string(a.i);
    case Arg::Kind::kFloat: return "f" + format_real(a.f);
    case Arg::Kind::kBool: return a.i ? "b1" : "b0";
    case Arg::Kind::kNone: return "_";
    case Arg::Kind::kIntList: join('I', a.ints, [](int64_t v) { return std::to_string(v); }); return out;
    case Arg::Kind::kFloatList: join('F', a.floats, format_real); return out;
    case Arg::Kind::kTensorList:
      join('T', a.ints, [](int64_t v) { return v < 0 ? std::string("_") : "%" + std::to_string(v); });
      return out;
    case Arg::Kind::kDevice: return "D" + std::to_string(a.i);
    case Arg::Kind::kString: return "s" + a.s;
  }
  return "_";
}

}  // namespace

Graph parse_graph(std::string_view text) {
  Graph g;
  int line_no = 0;
  bool saw_header = false, saw_end = false, saw_output = false;
  size_t pos = 0;
  while (pos <= text.size() && !saw_end) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    auto tokens = split_ws(line);
    if (tokens.empty()) {
      if (eol == text.size()) break;
      continue;
    }
    LineParser p(line_no, tokens);
    const std::string_view kind = p.next("a record");
    if (!saw_header) {
      if (kind != "neurongraph") p.fail("expected the header 'neurongraph " + std::to_string(kGraphFormatVersion) + "'");
      const int64_t version = p.next_int("the format version");
      if (version != kGraphFormatVersion) {
        p.fail("graph format version " + std::to_string(version) + ", this compiler reads version " +
               std::to_string(kGraphFormatVersion));
      }
      p.finish();
      saw_header = true;
      continue;
    }
    if (kind == "value") {
      Value v;
      v.id = static_cast<int32_t>(p.next_int("a value id"));
      if (v.id != static_cast<int32_t>(g.values.size())) {
        p.fail("value ids must count up from 0: expected " + std::to_string(g.values.size()) + ", got " + std::to_string(v.id));
      }
      const std::string_view dt = p.next("a dtype");
      auto dtype = dtype_from_name(dt);
      if (!dtype) p.fail("unknown dtype '" + std::string(dt) + "'");
      v.layout.dtype = *dtype;
      const std::string_view base = p.next("a base value or -");
      v.base = base == "-" ? -1 : static_cast<int32_t>(p.value_ref(base, "the base value"));
      v.layout.offset = p.next_int("the offset");
      const int64_t ndim = p.next_int("the rank");
      if (ndim < 0 || ndim > 64) p.fail("rank " + std::to_string(ndim) + " out of range [0, 64]");
      for (int64_t d = 0; d < ndim; ++d) v.layout.sizes.push_back(p.next_int("a size"));
      for (int64_t d = 0; d < ndim; ++d) v.layout.strides.push_back(p.next_int("a stride"));
      p.finish();
      g.values.push_back(std::move(v));
    } else if (kind == "input") {
      g.inputs.push_back(static_cast<int32_t>(p.value_ref(p.next("an input value"), "the input value")));
      g.input_names.emplace_back(p.next("the input's name"));
      p.finish();
    } else if (kind == "node") {
      Node n;
      n.op = std::string(p.next("an op name"));
      const int64_t n_out = p.next_int("the output count");
      if (n_out < 0) p.fail("negative output count");
      for (int64_t i = 0; i < n_out; ++i) {
        const std::string_view t = p.next("an output");
        n.outputs.push_back(t == "_" ? -1 : static_cast<int32_t>(p.value_ref(t, "an output")));
      }
      const int64_t n_args = p.next_int("the argument count");
      if (n_args < 0) p.fail("negative argument count");
      for (int64_t i = 0; i < n_args; ++i) n.args.push_back(p.arg(p.next("an argument")));
      p.finish();
      g.nodes.push_back(std::move(n));
    } else if (kind == "output") {
      if (saw_output) p.fail("a second output record");
      saw_output = true;
      while (!p.done()) {
        const std::string_view t = p.next("an output");
        g.outputs.push_back(t == "_" ? -1 : static_cast<int32_t>(p.value_ref(t, "an output")));
      }
    } else if (kind == "end") {
      p.finish();
      saw_end = true;
    } else {
      p.fail("unknown record '" + std::string(kind) + "'");
    }
  }
  if (!saw_header) throw CompileError("graph: empty text (expected 'neurongraph " + std::to_string(kGraphFormatVersion) + "')");
  if (!saw_end) throw CompileError("graph: truncated (no 'end' record after line " + std::to_string(line_no) + ")");
  g.validate();
  return g;
}

std::string format_graph(const Graph& g) {
  std::ostringstream os;
  os << "neurongraph " << kGraphFormatVersion << "\n";
  for (const Value& v : g.values) {
    os << "value " << v.id << " " << dtype_name(v.layout.dtype) << " "
       << (v.is_view() ? "%" + std::to_string(v.base) : std::string("-")) << " " << v.layout.offset << " "
       << v.layout.sizes.size();
    for (int64_t s : v.layout.sizes) os << " " << s;
    for (int64_t s : v.layout.strides) os << " " << s;
    os << "\n";
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) os << "input %" << g.inputs[i] << " " << g.input_names[i] << "\n";
  for (const Node& n : g.nodes) {
    os << "node " << n.op << " " << n.outputs.size();
    for (int32_t o : n.outputs) os << " " << (o < 0 ? std::string("_") : "%" + std::to_string(o));
    os << " " << n.args.size();
    for (const Arg& a : n.args) os << " " << format_arg(a);
    os << "\n";
  }
  os << "output";
  for (int32_t o : g.outputs) os << " " << (o < 0 ? std::string("_") : "%" + std::to_string(o));
  os << "\nend\n";
  return os.str();
}

}  // namespace neuroncompiler
