#include "csrc/distributed/Communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <deque>

#include "csrc/distributed/C10dStoreAdapter.h"
#include "csrc/distributed/CollectiveTypes.h"

namespace torchneuron {

using neuroncoll::Status;

Communicator::Communicator(const c10::intrusive_ptr<c10d::Store>& store, HostTopology topology,
                           std::chrono::milliseconds timeout, const std::string& name,
                           InterHostGroups groups)
    : topo_(std::move(topology)) {
  neuroncoll::GroupOptions o;
  o.timeout = timeout;
  // The name tells the group's shared-memory segment apart in /dev/shm.
  o.name = name;
  if (!topo_.multi_host()) {
    // The store is already the group's own (c10d prefixes it per group).
    o.store = std::make_shared<C10dStoreAdapter>(store);
    o.rank = topo_.rank;
    o.size = size();
  } else {
    const std::string host = std::to_string(topo_.host());
    o.store = std::make_shared<C10dStoreAdapter>(
        c10::make_intrusive<c10d::PrefixStore>("neuron/host" + host, store));
    o.name += "-h" + host;
    o.rank = topo_.local_index[topo_.rank];
    o.size = static_cast<int>(topo_.local_ranks().size());
    o.rank_labels = topo_.local_ranks();
  }
  check_status(neuroncoll::Group::create(o, &local_));
  if (topo_.multi_host()) {
    inter_ = std::make_unique<InterHost>(*local_, topo_, std::move(groups), timeout, name);
  }
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    stopping_ = true;
  }
  p2p_cv_.notify_all();
  local_->wake();
  if (progress_.joinable()) progress_.join();  // after the messages still posted ended
  lanes_.clear();  // joins, before inter_ goes
}

Status Communicator::fail(const std::string& message) {
  drain();
  if (local_->size() < 2) return {};
  return local_->fail(message);
}

void Communicator::abort() {
  local_->abort();
  if (inter_) inter_->abort();
}

Status Communicator::all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                double premul_factor) {
  drain();
  if (inter_) return inter_->all_reduce(in, out, count, dtype, op, premul_factor);
  return local_->all_reduce(in, out, count, dtype, op, premul_factor);
}

Status Communicator::broadcast(void* buffer, size_t count, DType dtype, int root) {
  drain();
  if (inter_) return inter_->broadcast(buffer, count, dtype, root);
  return local_->broadcast(buffer, count, dtype, root);
}

Status Communicator::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                            int root, double premul_factor) {
  drain();
  if (inter_) return inter_->reduce(in, out, count, dtype, op, root, premul_factor);
  return local_->reduce(in, out, count, dtype, op, root, premul_factor);
}

Status Communicator::all_gather(const void* in, void* out, size_t count, DType dtype) {
  drain();
  if (inter_) return inter_->all_gather(in, out, count, dtype);
  return local_->all_gather(in, out, count, dtype);
}

Status Communicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype,
                                    ReduceOp op, double premul_factor) {
  drain();
  if (inter_) return inter_->reduce_scatter(in, out, count, dtype, op, premul_factor);
  return local_->reduce_scatter(in, out, count, dtype, op, premul_factor);
}

Status Communicator::gather(const void* in, void* out, size_t count, DType dtype, int root) {
  drain();
  if (inter_) return inter_->gather(in, out, count, dtype, root);
  return local_->gather(in, out, count, dtype, root);
}

Status Communicator::scatter(const void* in, void* out, size_t count, DType dtype, int root) {
  drain();
  if (inter_) return inter_->scatter(in, out, count, dtype, root);
  return local_->scatter(in, out, count, dtype, root);
}

Status Communicator::all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                                std::span<const size_t> recv_counts, DType dtype) {
  drain();
  if (inter_) return inter_->all_to_all(in, send_counts, out, recv_counts, dtype);
  return local_->all_to_all(in, send_counts, out, recv_counts, dtype);
}

Status Communicator::barrier() {
  drain();
  return inter_ ? inter_->barrier() : local_->barrier();
}

class Communicator::Lane {
 public:
  Lane() : thread_([this] { run(); }) {}
  ~Lane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: runs once the members above exist
};

void Communicator::post(const P2P& op, Done done) {
  if (inter_ && !topo_.same_host(op.peer)) return post_remote(op, std::move(done));
  const int peer = inter_ ? topo_.local_index[op.peer] : op.peer;
  Status s;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    uint64_t id = 0;
    s = op.is_send ? local_->isend(op.data, op.count, op.dtype, peer, op.tag, &id)
                   : local_->irecv(op.data, op.count, op.dtype, peer, op.tag, &id);
    if (s.ok()) {
      local_posted_.emplace(id, std::move(done));
      ++in_flight_;
      if (!progress_.joinable()) progress_ = std::thread([this] { progress_loop(); });
    }
  }
  if (!s.ok()) return done(std::move(s));
  p2p_cv_.notify_all();
  local_->wake();  // the progress thread may sleep in wait_for_peers()
}

// gloo moves the data in the background; a lane per peer and direction only
// waits for each message's end, so a send waiting for its receiver never
// holds up a receive (of that peer or another).
void Communicator::post_remote(const P2P& op, Done done) {
  InterHost::Posted posted;
  try {
    posted = inter_->post(op.is_send, op.data, op.count, op.dtype, op.peer, op.tag);
  } catch (const std::exception& e) {
    return done(Status(neuroncoll::Code::kSystemError,
                       std::string("posting a send/recv between hosts: ") + e.what()));
  }
  Lane* lane = nullptr;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    ++in_flight_;
    auto& slot = lanes_[{op.peer, op.is_send}];
    if (!slot) slot = std::make_unique<Lane>();
    lane = slot.get();
  }
  lane->push([this, posted = std::move(posted), done = std::move(done)]() mutable {
    done(inter_->finish(posted));
    ended(1);
  });
}

void Communicator::progress_loop() {
  std::vector<neuroncoll::Group::Completion> completed;
  std::vector<std::pair<Done, Status>> ready;
  std::unique_lock<std::mutex> lock(p2p_mu_);
  for (;;) {
    p2p_cv_.wait(lock, [this] { return stopping_ || !local_posted_.empty(); });
    if (local_posted_.empty()) return;
    const size_t left = local_->progress(&completed);
    for (auto& c : completed) {
      auto it = local_posted_.find(c.id);
      ready.emplace_back(std::move(it->second), std::move(c.status));
      local_posted_.erase(it);
    }
    completed.clear();
    lock.unlock();
    // Outside the lock: ends works, whose futures run callbacks.
    for (auto& [done, status] : ready) done(std::move(status));
    const size_t n = ready.size();
    ready.clear();
    if (n > 0) ended(n);
    if (left > 0) local_->wait_for_peers(std::chrono::steady_clock::time_point::max());
    lock.lock();
  }
}

void Communicator::ended(size_t n) {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  in_flight_ -= n;
  if (in_flight_ == 0) p2p_cv_.notify_all();
}

bool Communicator::messages_in_flight() {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  return in_flight_ != 0;
}

void Communicator::drain() {
  std::unique_lock<std::mutex> lock(p2p_mu_);
  p2p_cv_.wait(lock, [this] { return in_flight_ == 0; });
}

}  // namespace torchneuron
