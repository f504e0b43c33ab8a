// Which instruction-set level the kernels run at: detected once per process,
// or forced by TORCHNEURON_ISA.
#include "neuronkernels/isa.hpp"

#include <cctype>
#include <cstdlib>

#include "neuronkernels/types.hpp"

namespace neuronkernels {
namespace {

constexpr Isa kLevels[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};

#if defined(__x86_64__) && defined(NK_HAVE_X86_VARIANTS)
bool cpu_has(const char* feature) {
  // __builtin_cpu_supports takes literals only.
  const std::string f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") return __builtin_cpu_supports("f16c");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  return false;
}
#else
bool cpu_has(const char*) { return false; }
#endif

bool cpu_supports(Isa level) {
  const std::string features = isa_features(level);
  size_t begin = 0;
  while (begin < features.size()) {
    size_t end = features.find(' ', begin);
    if (end == std::string::npos) end = features.size();
    if (!cpu_has(features.substr(begin, end - begin).c_str())) return false;
    begin = end + 1;
  }
  return true;
}

// The features of every level that this CPU has, for error messages.
std::string cpu_feature_list() {
  std::string out;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                        "avx512bf16"}) {
    if (cpu_has(f)) out += (out.empty() ? "" : " ") + std::string(f);
  }
  return out.empty() ? "none of them (baseline x86-64)" : out;
}

std::string level_list(const std::vector<Isa>& levels) {
  std::string out;
  for (Isa l : levels) out += (out.empty() ? "" : ", ") + std::string(isa_name(l));
  return out;
}

struct Choice {
  Isa level = Isa::kBaseline;
  std::string error;
};

Choice choose() {
  Choice c;
  const std::vector<Isa> supported = supported_isas();
  c.level = supported.back();
  const char* env = std::getenv("TORCHNEURON_ISA");
  std::string want = env ? env : "";
  for (char& ch : want) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  while (!want.empty() && std::isspace(static_cast<unsigned char>(want.back()))) want.pop_back();
  while (!want.empty() && std::isspace(static_cast<unsigned char>(want.front()))) want.erase(0, 1);
  if (want.empty()) return c;
  for (Isa l : kLevels) {
    if (want != isa_name(l)) continue;
    if (cpu_supports(l)) {
      c.level = l;
    } else {
      c.error = std::string("TORCHNEURON_ISA='") + env + "' needs the CPU features " +
                isa_features(l) + ", but this CPU has " + cpu_feature_list() +
                "; levels it supports: " + level_list(supported) +
                " (unset TORCHNEURON_ISA to use the best of them)";
    }
    return c;
  }
  c.error = std::string("TORCHNEURON_ISA='") + env +
            "' is invalid: expected one of baseline, avx2, avx512, avx512_bf16 (this CPU "
            "supports " + level_list(supported) + ")";
  return c;
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::kBaseline: return "baseline";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

const char* isa_features(Isa level) {
  switch (level) {
    case Isa::kBaseline: return "";
    case Isa::kAvx2: return "avx2 fma f16c";
    case Isa::kAvx512: return "avx2 fma f16c avx512f avx512bw avx512vl avx512dq";
    case Isa::kAvx512Bf16: return "avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512bf16";
  }
  return "";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa l : kLevels) {
    if (cpu_supports(l)) out.push_back(l);
  }
  return out;
}

Isa isa() {
  const Choice& c = choice();
  if (!c.error.empty()) [[unlikely]] throw KernelError(c.error);
  return c.level;
}

const std::string& isa_error() { return choice().error; }

}  // namespace neuronkernels
