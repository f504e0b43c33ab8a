#include "csrc/runtime/NeuronDtypes.h"

#include <array>

namespace torchneuron {
namespace {

// Quantized, complex128, the 8-bit floats and the unsigned 16-64-bit types have
// no CPU kernels to speak of behind the fallback, so they are refused at
// allocation with a clear error rather than failing op by op.
constexpr std::array kSupported = {
    c10::kFloat, c10::kBFloat16, c10::kHalf, c10::kDouble, c10::kChar, c10::kShort,
    c10::kInt,   c10::kLong,     c10::kByte, c10::kBool,   c10::kComplexFloat,
};

}  // namespace

bool is_supported_dtype(c10::ScalarType dtype) {
  for (auto t : kSupported) {
    if (t == dtype) return true;
  }
  return false;
}

const char* supported_dtype_names() {
  return "float32, bfloat16, float16, float64, int8, int16, int32, int64, uint8, bool, "
         "complex64";
}

c10::DeviceCapability device_capability() {
  c10::DeviceCapability cap;
  cap.capability_data.capability_bits = 0;
  // Set the named bit of each type (the bit order is the struct's, not the enum's).
#define NEURON_SET_SUPPORTED(_, name)                                    \
  if (is_supported_dtype(c10::ScalarType::name)) {                       \
    cap.capability_data.supported_scalar_types.has_##name = 1;           \
  }
  AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(NEURON_SET_SUPPORTED)
#undef NEURON_SET_SUPPORTED
  return cap;
}

}  // namespace torchneuron
