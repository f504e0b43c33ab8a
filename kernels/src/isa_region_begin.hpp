// Opens the instruction-set region of a kernel body file (*_impl.cpp).
//
// Every kernel body file is compiled once per level (NK_ISA names the
// namespace, NK_ISA_LEVEL the level), but each translation unit is compiled
// for baseline x86-64: only the code between this header and
// isa_region_end.hpp gets the level's instructions, through GCC's target
// pragma (as Google Highway does). Inline functions and templates of the
// headers included before it -- std::vector, std::function, our own
// headers -- are therefore compiled for baseline in every translation unit,
// so the linker's one kept copy of each runs on any CPU. Compiling the whole
// file with -mavx512f would instead make its copy of, say,
// std::vector<float>::resize an AVX-512 function that the AVX2 code may end
// up calling.
//
// Rules for the region: include every header before this one; define
// everything inside `namespace neuronkernels::NK_ISA`;
// kernels/tools/check_isa_leaks.py checks the linked binaries.
#if !defined(NK_ISA) || !defined(NK_ISA_LEVEL)
#error "NK_ISA and NK_ISA_LEVEL must name the instruction-set level (see kernels/CMakeLists.txt)"
#endif

#if defined(__x86_64__) && NK_ISA_LEVEL > 0
#pragma GCC push_options
#if NK_ISA_LEVEL == 1
#pragma GCC target("avx2,fma,f16c")
#elif NK_ISA_LEVEL == 2
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#elif NK_ISA_LEVEL == 3
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#else
#error "unknown NK_ISA_LEVEL"
#endif
#define NK_ISA_REGION_PUSHED 1
#endif

// Float32 lanes of the level's widest vector register (GCC vector extensions
// of this width map to one register).
#if !defined(__x86_64__) || NK_ISA_LEVEL == 0
#define NK_VEC_LANES 4
#elif NK_ISA_LEVEL == 1
#define NK_VEC_LANES 8
#else
#define NK_VEC_LANES 16
#endif
