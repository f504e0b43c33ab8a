// Copies that write the outputs of large collectives around the caches.
#pragma once

#include <cstddef>

namespace neuroncoll::algorithms {

// From this many bytes of a collective's whole output, the output is written
// with non-temporal stores: it would not stay in the caches anyway (it would
// only evict the staging buffers the ranks exchange through), and ordinary
// stores read every line of the destination before writing it, a third more
// memory traffic.
constexpr size_t kStreamOutputBytes = size_t(8) << 20;

// memcpy with non-temporal stores (SSE2, part of baseline x86-64), ended by a
// store fence so that a flag posted afterwards orders after the data; plain
// memcpy on other architectures. Any alignment; null pointers for zero bytes.
void stream_bytes(void* dst, const void* src, size_t bytes);

// The output copy of a collective whose whole output is `output_bytes`.
void copy_output(void* dst, const void* src, size_t bytes, size_t output_bytes);

}  // namespace neuroncoll::algorithms
