// Static memory planning: every intermediate buffer of a program gets an
// offset in ONE arena, from the steps that define and last read it. Two
// buffers share bytes only if their lifetimes (inclusive step ranges) do not
// overlap; offsets are multiples of the alignment.
#pragma once

#include <cstdint>
#include <vector>

namespace neuroncompiler {

inline constexpr int64_t kArenaAlignment = 64;

struct BufferRequest {
  int64_t nbytes = 0;
  int32_t first_step = 0;  // the step that writes it
  int32_t last_step = 0;   // the last step that reads it (>= first_step)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per request, bytes into the arena
  int64_t arena_bytes = 0;
};

// Largest buffers first, each at the lowest aligned offset that overlaps no
// placed buffer whose lifetime meets its own.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment = kArenaAlignment);

}  // namespace neuroncompiler
