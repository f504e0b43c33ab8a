// Closes the region opened by isa_region_begin.hpp.
#ifdef NK_ISA_REGION_PUSHED
#pragma GCC pop_options
#undef NK_ISA_REGION_PUSHED
#endif
#undef NK_VEC_LANES
