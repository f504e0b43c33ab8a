#include "csrc/runtime/NeuronException.h"

#include <string>

namespace torchneuron {

[[noreturn]] void throw_status(nrtStatus status, const std::string& message) {
  std::string msg = message.empty() ? std::string(nrtGetLastErrorMessage()) : message;
  if (msg.empty()) msg = nrtGetErrorString(status);
  switch (status) {
    case nrtErrorInvalidDevice:
    case nrtErrorInvalidValue:
      TORCH_CHECK_VALUE(false, "[neuron] ", msg);
    case nrtErrorMemoryAllocation:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "[neuron] ", msg);
    default:
      TORCH_CHECK(false, "[neuron] ", msg);
  }
}

[[noreturn]] void rethrow_as_torch(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const neuronrt::AsyncError& err) {
    // A torch error raised inside queued work keeps its type (IndexError,
    // ValueError, ...) so Python sees what eager CPU would have raised.
    if (err.original()) {
      try {
        std::rethrow_exception(err.original());
      } catch (c10::Error& inner) {
        inner.add_context(std::string("[neuron] raised by queued op ") + err.op_name() +
                          (neuronrt::launch_blocking()
                               ? " (NEURON_LAUNCH_BLOCKING=1: reported at the op)"
                               : " (reported at the next synchronization)"));
        throw;
      } catch (...) {
      }
    }
    TORCH_CHECK(false, "[neuron] ", err.what());
  } catch (const neuronrt::OutOfMemoryError& err) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "[neuron] ", err.what());
  } catch (const neuronrt::Error& err) {
    throw_status(err.status(), err.what());
  }
  std::rethrow_exception(e);
}

namespace {
template <typename E>
[[noreturn]] void prefixed(const E& e, const std::string& op) {
  // Carrying the note of the queued op that raised it: keep it as it is.
  if (!e.context().empty()) throw;
  const std::string tag = "[neuron] ";
  std::string msg = e.msg();
  if (msg.rfind(tag + op + ":", 0) == 0) throw;  // names this op already
  if (msg.rfind(tag, 0) == 0) msg = msg.substr(tag.size());
  throw E(tag + op + ": " + msg, e.backtrace(), e.caller());
}
}  // namespace

[[noreturn]] void rethrow_with_op(const std::string& op) {
  try {
    throw;
  } catch (const c10::IndexError& e) {
    prefixed(e, op);
  } catch (const c10::ValueError& e) {
    prefixed(e, op);
  } catch (const c10::TypeError& e) {
    prefixed(e, op);
  } catch (const c10::NotImplementedError& e) {
    prefixed(e, op);
  } catch (const c10::LinAlgError& e) {
    prefixed(e, op);
  } catch (const c10::OutOfMemoryError& e) {
    prefixed(e, op);
  } catch (const c10::Error& e) {
    if (typeid(e) != typeid(c10::Error)) throw;  // a type we do not rebuild
    prefixed(e, op);
  }
}

}  // namespace torchneuron
