#include "csrc/distributed/C10dStoreAdapter.h"

#include <exception>
#include <string>
#include <vector>

namespace torchneuron {
namespace {

using neuroncoll::Code;
using neuroncoll::Status;

// c10d stores report a wait that ran out as DistStoreError ("wait timeout
// after ..."); anything else (a lost connection) is a system error.
Status from_exception(const char* what, std::string_view key, const std::exception& e,
                      bool timed) {
  const Code code = timed && dynamic_cast<const c10::DistStoreError*>(&e) ? Code::kTimeout
                                                                           : Code::kSystemError;
  return {code, std::string("c10d store ") + what + " '" + std::string(key) + "': " + e.what()};
}

}  // namespace

C10dStoreAdapter::C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {}

Status C10dStoreAdapter::set(std::string_view key, std::string_view value) {
  try {
    store_->set(std::string(key), std::vector<uint8_t>(value.begin(), value.end()));
    return {};
  } catch (const std::exception& e) {
    return from_exception("set", key, e, false);
  }
}

Status C10dStoreAdapter::get(std::string_view key, std::chrono::milliseconds timeout,
                             std::string* value) {
  try {
    // c10d's get waits with the store's own timeout; wait first with ours.
    store_->wait({std::string(key)}, timeout);
    const std::vector<uint8_t> bytes = store_->get(std::string(key));
    value->assign(bytes.begin(), bytes.end());
    return {};
  } catch (const std::exception& e) {
    return from_exception("get", key, e, true);
  }
}

Status C10dStoreAdapter::add(std::string_view key, int64_t delta, int64_t* result) {
  try {
    *result = store_->add(std::string(key), delta);
    return {};
  } catch (const std::exception& e) {
    return from_exception("add", key, e, false);
  }
}

Status C10dStoreAdapter::wait(std::span<const std::string> keys,
                              std::chrono::milliseconds timeout) {
  try {
    store_->wait(std::vector<std::string>(keys.begin(), keys.end()), timeout);
    return {};
  } catch (const std::exception& e) {
    return from_exception("wait", keys.empty() ? std::string_view() : keys.front(), e, true);
  }
}

}  // namespace torchneuron
