// The instruction-set level the kernels run at. Each kernel body file
// (src/*_impl.cpp) is compiled once per level into its own namespace
// (isa_baseline, isa_avx2, isa_avx512, isa_avx512_bf16); the dispatchers pick
// the level in force: the best this CPU supports, or the one TORCHNEURON_ISA
// names (to test or measure a lower level's code on any machine).
#pragma once

#include <string>
#include <vector>

namespace neuronkernels {

// Ordered: each level's CPU features include the previous level's.
enum class Isa { kBaseline, kAvx2, kAvx512, kAvx512Bf16 };

// "baseline", "avx2", "avx512", "avx512_bf16": the spelling of TORCHNEURON_ISA.
const char* isa_name(Isa level);

// The CPU features a level needs, e.g. "avx2 fma f16c".
const char* isa_features(Isa level);

// Levels this CPU can run, lowest first (baseline always).
std::vector<Isa> supported_isas();

// The level in force, read once per process. Throws KernelError (with
// isa_error()'s text) when TORCHNEURON_ISA is invalid.
Isa isa();

// Empty, or why TORCHNEURON_ISA cannot be used: an unknown name, or a level
// this CPU lacks (naming the CPU's features and the levels it supports).
const std::string& isa_error();

}  // namespace neuronkernels
