// Turns runtime status codes and runtime exceptions into PyTorch exceptions.
// This is the one place where the runtime's error policy meets torch's.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

// Throws the c10 exception matching a failed runtime status; `message` is
// the runtime's detailed message (the last error message if empty).
[[noreturn]] void throw_status(nrtStatus status, const std::string& message);
// Rethrows a runtime exception (AsyncError, OutOfMemoryError, Error) as the
// matching c10 exception; other exceptions pass through unchanged.
[[noreturn]] void rethrow_as_torch(std::exception_ptr e);

// Inside a catch block: rethrows the current c10 exception with the same
// type and "[neuron] <op>: " in front of its message (unless it has one).
[[noreturn]] void rethrow_with_op(const std::string& op);

}  // namespace torchneuron

// NEURON_CHECK(nrtCall(...)): a failing status becomes a c10 exception.
#define NEURON_CHECK(EXPR)                                        \
  do {                                                            \
    nrtStatus __nrt_status = (EXPR);                              \
    if (C10_UNLIKELY(__nrt_status != nrtSuccess)) {               \
      ::torchneuron::throw_status(__nrt_status, std::string());           \
    }                                                             \
  } while (0)

// NEURON_TRY { runtime C++ calls } NEURON_CATCH: runtime exceptions become
// c10 exceptions (OutOfMemoryError for device memory exhaustion).
#define NEURON_TRY try
#define NEURON_CATCH                                              \
  catch (const ::neuronrt::Error&) {                              \
    ::torchneuron::rethrow_as_torch(std::current_exception());    \
  }
