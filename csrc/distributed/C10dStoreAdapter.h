// neuroncoll's rendezvous Store served by the c10d store a process group is
// given (torchrun's TCPStore behind the group's PrefixStore), so that a
// neuroncoll group meets where the rest of torch.distributed meets.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "neuroncoll/store.hpp"

namespace torchneuron {

class C10dStoreAdapter final : public neuroncoll::Store {
 public:
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store);

  neuroncoll::Status set(std::string_view key, std::string_view value) override;
  neuroncoll::Status get(std::string_view key, std::chrono::milliseconds timeout,
                         std::string* value) override;
  neuroncoll::Status add(std::string_view key, int64_t delta, int64_t* result) override;
  neuroncoll::Status wait(std::span<const std::string> keys,
                          std::chrono::milliseconds timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace torchneuron
