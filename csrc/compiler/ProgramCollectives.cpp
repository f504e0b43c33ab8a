#include "csrc/compiler/ProgramCollectives.h"

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "csrc/aten/Launch.h"
#include "csrc/distributed/CollectiveTypes.h"
#include "csrc/distributed/ProcessGroupNeuron.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

namespace nc = neuroncompiler;

namespace {

constexpr const char* kAllReduce = "_c10d_functional::all_reduce.default";
constexpr const char* kAllGather = "_c10d_functional::all_gather_into_tensor.default";
constexpr const char* kReduceScatter = "_c10d_functional::reduce_scatter_tensor.default";
constexpr const char* kAllToAll = "_c10d_functional::all_to_all_single.default";
constexpr const char* kBroadcast = "_c10d_functional::broadcast.default";

int reduce_op_of(const std::string& name, size_t step) {
  using R = c10d::ReduceOp;
  if (name == "sum") return R::SUM;
  if (name == "avg") return R::AVG;
  if (name == "product") return R::PRODUCT;
  if (name == "min") return R::MIN;
  if (name == "max") return R::MAX;
  if (name == "band") return R::BAND;
  if (name == "bor") return R::BOR;
  if (name == "bxor") return R::BXOR;
  TORCH_CHECK(false, "[neuron] compiled graph: step ", step, ": reduce op '", name,
              "' of a functional collective is not supported (sum, avg, product, min, max, band, bor, bxor)");
}

const nc::Arg& arg(const nc::Step& s, size_t i, nc::Arg::Kind kind, size_t step) {
  TORCH_CHECK(i < s.node.args.size() && s.node.args[i].kind == kind, "[neuron] compiled graph: step ", step, " (",
              s.node.op, "): unexpected arguments");
  return s.node.args[i];
}

// A contiguous CPU view of `t`'s data (a copy if it is not contiguous).
at::Tensor contiguous_alias(const at::Tensor& t) { return cpu_alias(t).contiguous(); }

// Element counts per rank of an all_to_all from rows per rank along dim 0
// (empty: even).
std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int64_t size,
                                 const std::string& where, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> counts(static_cast<size_t>(size));
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, where, ": the ", what, "'s ", rows, " rows do not split evenly over ", size,
                " ranks");
    for (auto& n : counts) n = static_cast<size_t>(rows / size * row_elems);
    return counts;
  }
  TORCH_CHECK(static_cast<int64_t>(splits.size()) == size, where, ": ", what, " split sizes ",
              c10::IntArrayRef(splits), " must have one entry per rank (", size, ")");
  int64_t total = 0;
  for (int64_t i = 0; i < size; ++i) {
    TORCH_CHECK(splits[i] >= 0, where, ": negative ", what, " split size ", splits[i]);
    counts[i] = static_cast<size_t>(splits[i] * row_elems);
    total += splits[i];
  }
  TORCH_CHECK(total == rows, where, ": ", what, " split sizes ", c10::IntArrayRef(splits), " add up to ", total,
              " rows, the tensor has ", rows);
  return counts;
}

}  // namespace

struct CollectiveTurns::Turn {
  std::mutex mu;
  std::condition_variable cv;
  enum class State { kQueued, kArrived, kCancelled, kDone } state = State::kQueued;
  std::exception_ptr error;
  std::string what;  // "all_reduce on group '0'"
  std::function<void()> deferred;  // under NEURON_LAUNCH_BLOCKING=1: queues the turn, from the program's step
};

bool ProgramCollectives::is_collective_op(const std::string& op) {
  return op == kAllReduce || op == kAllGather || op == kReduceScatter || op == kAllToAll || op == kBroadcast;
}

ProgramCollectives::ProgramCollectives(const nc::Program& p) : index_of_step_(p.steps.size(), -1) {
  using K = nc::Arg::Kind;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const nc::Step& s = p.steps[i];
    if (s.kind != nc::Step::Kind::kExtern || !is_collective_op(s.node.op)) continue;
    TORCH_CHECK(s.node.outputs.size() == 1 && s.node.outputs[0] >= 0, "[neuron] compiled graph: step ", i, " (",
                s.node.op, "): expected one output");
    Step c;
    c.step = i;
    c.input = static_cast<int32_t>(arg(s, 0, K::kTensor, i).i);
    c.output = s.node.outputs[0];
    if (s.node.op == kAllReduce) {
      c.kind = Step::Kind::kAllReduce;
      c.name = "all_reduce";
      c.reduce_op = reduce_op_of(arg(s, 1, K::kString, i).s, i);
      c.group_name = arg(s, 2, K::kString, i).s;
    } else if (s.node.op == kAllGather) {
      c.kind = Step::Kind::kAllGather;
      c.name = "all_gather_into_tensor";
      c.group_size = arg(s, 1, K::kInt, i).i;
      c.group_name = arg(s, 2, K::kString, i).s;
    } else if (s.node.op == kAllToAll) {
      c.kind = Step::Kind::kAllToAll;
      c.name = "all_to_all_single";
      c.out_splits = arg(s, 1, K::kIntList, i).ints;
      c.in_splits = arg(s, 2, K::kIntList, i).ints;
      c.group_name = arg(s, 3, K::kString, i).s;
    } else if (s.node.op == kBroadcast) {
      c.kind = Step::Kind::kBroadcast;
      c.name = "broadcast";
      c.root = arg(s, 1, K::kInt, i).i;
      c.group_name = arg(s, 2, K::kString, i).s;
    } else {
      c.kind = Step::Kind::kReduceScatter;
      c.name = "reduce_scatter_tensor";
      c.reduce_op = reduce_op_of(arg(s, 1, K::kString, i).s, i);
      c.group_size = arg(s, 2, K::kInt, i).i;
      c.group_name = arg(s, 3, K::kString, i).s;
    }
    index_of_step_[i] = static_cast<int>(steps_.size());
    steps_.push_back(std::move(c));
  }
}

bool ProgramCollectives::is_collective(size_t step) const {
  return step < index_of_step_.size() && index_of_step_[step] >= 0;
}

namespace {

// Runs collective `c` with the program's buffers (on the group's queue).
void run_collective(Communicator& g, const ProgramCollectives::Step& c, const at::Tensor& in,
                    const at::Tensor& out, const std::vector<size_t>& send_counts,
                    const std::vector<size_t>& recv_counts) {
  const char* name = c.name.c_str();
  const neuroncoll::DType dt = coll_dtype(in.scalar_type(), name);
  const at::Tensor src = contiguous_alias(in);
  at::Tensor dst_alias = cpu_alias(out);
  at::Tensor dst = dst_alias.is_contiguous() ? dst_alias : at::empty_like(dst_alias, at::MemoryFormat::Contiguous);
  using K = ProgramCollectives::Step::Kind;
  switch (c.kind) {
    case K::kAllReduce:
      check_status(g.all_reduce(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(src.numel()), dt,
                                coll_reduce_op(c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(c.reduce_op)), name)));
      break;
    case K::kAllGather:
      check_status(g.all_gather(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(src.numel()), dt));
      break;
    case K::kReduceScatter:
      check_status(g.reduce_scatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), dt,
                                    coll_reduce_op(c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(c.reduce_op)), name)));
      break;
    case K::kAllToAll:
      check_status(g.all_to_all(src.data_ptr(), send_counts, dst.data_ptr(), recv_counts, dt));
      break;
    case K::kBroadcast:
      if (g.rank() == c.root) dst.copy_(src);
      check_status(g.broadcast(dst.data_ptr(), static_cast<size_t>(dst.numel()), dt, static_cast<int>(c.root)));
      break;
  }
  if (!dst.is_same(dst_alias)) dst_alias.copy_(dst);
}

}  // namespace

std::shared_ptr<CollectiveTurns> ProgramCollectives::reserve(const nc::Program& p,
                                                             std::shared_ptr<ProgramStorages> storages,
                                                             c10::DeviceIndex device) const {
  if (steps_.empty()) return nullptr;
  std::vector<std::shared_ptr<CollectiveTurns::Turn>> turns;
  auto cancel_queued = [&](const std::string& why) {
    for (auto& t : turns) {
      std::lock_guard<std::mutex> lock(t->mu);
      t->state = CollectiveTurns::Turn::State::kCancelled;
      t->deferred = nullptr;
      t->what = why;
      t->cv.notify_all();
    }
  };
  try {
    for (const Step& c : steps_) {
      const std::string where = "[neuron] compiled program step " + std::to_string(c.step) + " (" + c.name +
                                " on group '" + c.group_name + "')";
      c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d::resolve_process_group(c.group_name);
      ProcessGroupNeuron* group = nullptr;
      try {
        group = dynamic_cast<ProcessGroupNeuron*>(pg->getBackend(c10::DeviceType::PrivateUse1).get());
      } catch (const c10::Error&) {
        group = nullptr;  // no backend for neuron tensors
      }
      TORCH_CHECK(group != nullptr, where, ": the group has no neuron backend (ProcessGroupNeuron) for neuron tensors");
      const int64_t size = group->getSize();
      const at::Tensor in = value_tensor(p, *storages, c.input);
      const at::Tensor out = value_tensor(p, *storages, c.output);
      const bool sized = c.kind == Step::Kind::kAllGather || c.kind == Step::Kind::kReduceScatter;
      TORCH_CHECK(!sized || c.group_size == size, where, ": compiled for a group of ",
                  c.group_size, " ranks, the group has ", size);
      std::vector<size_t> send_counts, recv_counts;
      int64_t expected = in.numel();
      if (c.kind == Step::Kind::kAllGather) expected = in.numel() * size;
      if (c.kind == Step::Kind::kReduceScatter) {
        TORCH_CHECK(in.numel() % size == 0, where, ": an input of ", in.numel(), " elements does not split over ",
                    size, " ranks");
        expected = in.numel() / size;
      }
      if (c.kind == Step::Kind::kBroadcast) {
        TORCH_CHECK(c.root >= 0 && c.root < size, where, ": source rank ", c.root, " is not a rank of this group of ",
                    size);
      }
      if (c.kind == Step::Kind::kAllToAll) {
        send_counts = split_counts(in, c.in_splits, size, where, "input");
        recv_counts = split_counts(out, c.out_splits, size, where, "output");
        expected = out.numel();
      }
      TORCH_CHECK(out.numel() == expected && in.scalar_type() == out.scalar_type(), where, ": output of ",
                  out.numel(), " elements for an input of ", in.numel(), " in a group of ", size);
      auto turn = std::make_shared<CollectiveTurns::Turn>();
      turn->what = c.name + " on group '" + c.group_name + "'";
      const auto timeout = group->timeout();
      auto body = [turn, c, in, out, send_counts, recv_counts, timeout, storages](Communicator& g) {
        using State = CollectiveTurns::Turn::State;
        {
          std::unique_lock<std::mutex> lock(turn->mu);
          const bool reached = turn->cv.wait_for(lock, timeout, [&] { return turn->state != State::kQueued; });
          if (turn->state == State::kCancelled) {
            // The peers are (or will be) in this collective: tell them now rather
            // than leave them to their timeout.
            const std::string message = "its compiled program did not reach its " + turn->what;
            lock.unlock();
            (void)g.fail(message);
            return;
          }
          if (!reached) {
            turn->error = std::make_exception_ptr(c10::DistBackendError(
                {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                "[neuron] timeout: the compiled program did not reach its " + turn->what + " within the group's timeout of " +
                    std::to_string(timeout.count()) + " ms"));
            turn->state = State::kDone;
            turn->cv.notify_all();
            return;
          }
        }
        std::exception_ptr error;
        try {
          run_collective(g, c, in, out, send_counts, recv_counts);
        } catch (...) {
          error = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(turn->mu);
        turn->error = error;
        turn->state = State::kDone;
        turn->cv.notify_all();
      };
      // A deferred turn keeps the backend alive until it is queued.
      c10::intrusive_ptr<c10d::Backend> backend = pg->getBackend(c10::DeviceType::PrivateUse1);
      auto enqueue = [backend, group, device, body = std::move(body)]() mutable {
        group->enqueue_program_step("compiled program collective", device, std::move(body));
      };
      if (neuronrt::launch_blocking()) {
        // Every launch waits for its work, so a turn queued now would wait for a
        // program not launched yet. The program's step queues it instead; the
        // host waits in the program's launch meanwhile, so nothing is issued
        // in between and the order is the same.
        turn->deferred = std::move(enqueue);
      } else {
        enqueue();
      }
      turns.push_back(std::move(turn));
    }
  } catch (...) {
    cancel_queued("the program was not launched");
    throw;
  }
  return std::make_shared<CollectiveTurns>(std::move(turns), index_of_step_);
}

CollectiveTurns::CollectiveTurns(std::vector<std::shared_ptr<Turn>> turns, std::vector<int> index_of_step)
    : turns_(std::move(turns)), index_of_step_(std::move(index_of_step)) {}

CollectiveTurns::~CollectiveTurns() { cancel("the program ended before it"); }

void CollectiveTurns::cancel(const std::string& why) {
  for (auto& t : turns_) {
    std::lock_guard<std::mutex> lock(t->mu);
    if (t->state != Turn::State::kQueued) continue;
    t->state = Turn::State::kCancelled;
    t->deferred = nullptr;  // never queued (it holds the turn: a cycle otherwise)
    t->what += " (" + why + ")";
    t->cv.notify_all();
  }
}

void CollectiveTurns::run(size_t step) {
  TORCH_CHECK(step < index_of_step_.size() && index_of_step_[step] >= 0, "[neuron] compiled program step ", step,
              " is not a collective");
  Turn& t = *turns_[index_of_step_[step]];
  std::unique_lock<std::mutex> lock(t.mu);
  if (t.state == Turn::State::kQueued) {
    t.state = Turn::State::kArrived;
    t.cv.notify_all();
  }
  if (t.deferred) {
    std::function<void()> enqueue = std::move(t.deferred);
    t.deferred = nullptr;
    lock.unlock();
    enqueue();  // under NEURON_LAUNCH_BLOCKING=1, runs the turn
    lock.lock();
  }
  // The turn's own waits are bounded (the group's timeout, neuroncoll's).
  t.cv.wait(lock, [&] { return t.state == Turn::State::kDone || t.state == Turn::State::kCancelled; });
  TORCH_CHECK(t.state == Turn::State::kDone, "[neuron] compiled program step ", step, ": ", t.what,
              " was cancelled");
  if (t.error) std::rethrow_exception(t.error);
}

void BoundExternCalls::call(const nc::Program& program, const nc::RunBuffers&, const nc::Step& step) {
  const size_t index = static_cast<size_t>(&step - program.steps.data());
  if (collectives_ == nullptr || !ProgramCollectives::is_collective_op(step.node.op)) {
    calls_.call(program, step, storages_, device_);
    return;
  }
  try {
    collectives_->run(index);
  } catch (c10::Error& e) {
    e.add_context("[neuron] in compiled program step " + std::to_string(index) + " (collective " + step.node.op + ")");
    throw;
  }
}

}  // namespace torchneuron
