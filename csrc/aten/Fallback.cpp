#include "csrc/aten/Fallback.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <ATen/native/CPUFallback.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "csrc/aten/CpuKernelCall.h"
#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/ForeachChain.h"
#include "csrc/aten/IValueTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/MetaInference.h"
#include "csrc/aten/OpPlan.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronHooks.h"
#include "csrc/runtime/NeuronStream.h"

namespace torchneuron {
namespace {

using c10::IValue;
using torch::jit::Stack;

// Finds the op's device and rejects device mixes that cannot work.
c10::DeviceIndex op_device(const OpPlan& plan, const Stack& args) {
  c10::DeviceIndex device = -1;
  std::optional<c10::Device> other;
  for (const IValue& v : args) {
    // Index lists (Tensor?[]) may hold CPU tensors, as on CUDA.
    const bool index_list = v.isList() && !v.isTensorList();
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (defined_on_neuron(t)) {
        if (device < 0) {
          device = t.device().index();
        } else if (t.device().index() != device && !other) {
          other = t.device();
        }
      } else if (t.dim() != 0 && !index_list && !other) {
        other = t.device();  // CPU scalars (0-dim) may mix, like on CUDA
      }
    });
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1 && device < 0) {
      device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  if (device < 0) device = current_device();
  TORCH_CHECK(!other, "[neuron] ", plan.name,
              ": expected all tensors on one device, got neuron:", static_cast<int>(device),
              " and ", *other, ". Move them with .to('neuron:", static_cast<int>(device), "').");
  return device;
}

at::Tensor build_tensor(const TensorLayout& l, const c10::Storage& storage) {
  if (!l.defined) return at::Tensor();
  return tensor_over(storage, c10::DispatchKey::PrivateUse1, c10::scalarTypeToTypeMeta(l.dtype),
                     l.sizes, l.strides, l.offset, l.conj, l.neg);
}

// The op's outputs per its layout: written arguments (resized if the kernel
// would), views of argument storages, or fresh neuron buffers (allocated
// here). ret_fresh[r] tells whether return r got fresh buffers.
Stack build_outputs(const OpPlan& plan, const OutputLayout& layout, const Stack& args,
                    const ArgSignature& sig, c10::DeviceIndex device,
                    std::vector<bool>& ret_fresh, bool& any_fresh) {
  std::vector<c10::Storage> fresh;
  fresh.reserve(layout.fresh_nbytes.size());
  for (size_t nbytes : layout.fresh_nbytes) fresh.push_back(device_storage(device, nbytes));
  any_fresh = !fresh.empty();
  auto storage_of = [&](int id) -> c10::Storage {
    return id >= 0 ? c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(sig.storages[id]))
                   : fresh[-id - 1];
  };
  const size_t nret = layout.returns.size();
  Stack results;
  results.reserve(nret);
  ret_fresh.assign(nret, false);
  for (size_t r = 0; r < nret; ++r) {
    const ReturnLayout& rl = layout.returns[r];
    switch (rl.kind) {
      case ReturnLayout::Kind::kWrittenArg: {
        const IValue& arg = args[plan.facts.ret_written_arg[r]];
        if (rl.resized) {
          // An out= argument of the wrong shape: resized like on CPU (growing
          // the storage in place, so its views follow).
          const at::Tensor& t = arg.toTensor();
          if (rl.resized_nbytes > t.storage().nbytes()) {
            resize_storage_bytes(t.storage().unsafeGetStorageImpl(), rl.resized_nbytes);
          }
          const TensorLayout& l = rl.tensors[0];
          t.unsafeGetTensorImpl()->set_sizes_and_strides(l.sizes, l.strides, l.offset);
        }
        results.push_back(arg);
        break;
      }
      case ReturnLayout::Kind::kTensor:
        results.emplace_back(build_tensor(rl.tensors[0], storage_of(rl.tensors[0].storage)));
        ret_fresh[r] = rl.tensors[0].defined && rl.tensors[0].storage < 0;
        break;
      case ReturnLayout::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(rl.tensors.size());
        for (const auto& l : rl.tensors) {
          list.push_back(build_tensor(l, storage_of(l.storage)));
          ret_fresh[r] = ret_fresh[r] || (l.defined && l.storage < 0);
        }
        results.emplace_back(std::move(list));
        break;
      }
      case ReturnLayout::Kind::kOther:
        results.emplace_back();
        break;
    }
  }
  return results;
}

// The op's work in elements, as its plan measures it: how the worker decides
// whether the CPU kernel gets its OpenMP team (csrc/runtime/WorkerThreads.h).
int64_t work_elements(const OpPlan& plan, const Stack& args, const Stack& results) {
  int64_t largest = 0;
  auto visit = [&largest](const at::Tensor& t) {
    if (t.defined()) largest = std::max(largest, t.numel());
  };
  using WorkSize = OpPlan::WorkSize;
  if (plan.work_size != WorkSize::kOutputs) {
    const auto& written = plan.facts.ret_written_arg;
    for (size_t i = 0; i < args.size(); ++i) {
      if (plan.work_size == WorkSize::kReadArguments &&
          std::find(written.begin(), written.end(), static_cast<int>(i)) != written.end()) {
        continue;
      }
      for_each_tensor(args[i], visit);
    }
  }
  if (plan.work_size != WorkSize::kReadArguments) {
    for (const IValue& v : results) for_each_tensor(v, visit);
  }
  return largest;
}

// Queues an elementwise foreach op as chain work, which joins the foreach
// ops queued before it when it can (csrc/aten/ForeachChain.h). False when
// the call cannot take part in a chain (its memory layout); then nothing is
// queued.
bool queue_foreach_chain(const c10::OperatorHandle& op, OpPlan& plan, const Stack& args,
                         const Stack& results, const std::vector<bool>& ret_fresh, bool any_fresh,
                         c10::DeviceIndex device) {
  const bool in_place = plan.has_mutable_arg && !any_fresh;
  const bool functional = plan.element_out && results.size() == 1 && ret_fresh[0] &&
                          results[0].isTensorList();
  if (!in_place && !functional) return false;
  std::vector<at::Tensor> outs;
  if (functional) outs = results[0].toTensorList().vec();
  std::optional<ChainLayout> layout = chain_layout(args, outs);
  if (!layout) return false;
  CpuAliases al({.queued = true});
  Stack cpu_stack = cpu_arguments(args, plan.facts.arg_is_generator, device, plan.name.c_str(), al);
  for (at::Tensor& t : outs) t = queued_alias(t);
  const bool joined = launch_joinable(
      device, plan.name.c_str(),
      foreach_chain(op, plan.name.c_str(), functional ? &*plan.element_out : nullptr, std::move(cpu_stack),
                    std::move(outs), std::move(*layout)));
  plan.counter->count(joined ? ExecPath::kChained : ExecPath::kQueue);
  return true;
}

enum class AsyncResult { kDone, kValidate, kSyncSignature };

// Queues the op. Leaves the stack untouched and returns kSyncSignature when
// the output layout cannot be known before running, or kValidate (with the
// layout in *to_validate) when this argument signature has not yet been
// checked by running the CPU kernel; the caller then runs it synchronously.
struct Validation {
  std::shared_ptr<const OutputLayout> layout;
  ArgSignature sig;
  ArgSignature shape_class;
};

AsyncResult run_async(const c10::OperatorHandle& op, OpPlan& plan, Stack* stack,
                      c10::DeviceIndex device, size_t nargs, Validation* to_validate) {
  Stack args(stack->end() - nargs, stack->end());
  // 1. The outputs' layout (from the Meta kernel, or remembered).
  ArgSignature sig = signature_of(args, plan.facts);
  std::shared_ptr<const OutputLayout> layout = plan.layouts.infer(op, plan.facts, args, sig);
  switch (layout->state.load(std::memory_order_acquire)) {
    case OutputLayout::kSyncOnly:
      return AsyncResult::kSyncSignature;  // no layout, or one the CPU kernel disagreed with
    case OutputLayout::kUnvalidated:
      if (!plan.layouts.trusted()) {
        ArgSignature shape_class = shape_class_of(args, plan.facts);
        if (plan.layouts.class_validated(shape_class)) {
          layout->state.store(OutputLayout::kValidated, std::memory_order_release);
          break;
        }
        to_validate->layout = std::move(layout);
        to_validate->sig = std::move(sig);
        to_validate->shape_class = std::move(shape_class);
        return AsyncResult::kValidate;
      }
      break;
    default:
      break;
  }
  for (const auto& rl : layout->returns) {
    for (const auto& l : rl.tensors) {
      if (l.defined && l.storage < 0) native::check_dtype(l.dtype, plan.name.c_str());
    }
  }

  // 2. Outputs, per the layout.
  std::vector<bool> ret_fresh;
  bool any_fresh = false;
  Stack results = build_outputs(plan, *layout, args, sig, device, ret_fresh, any_fresh);
  const size_t nret = results.size();

  // 3. The kernel: nothing to run for pure views; otherwise the CPU kernel on
  //    aliases (taken now, so later metadata changes of the arguments cannot
  //    leak into queued work), copying fresh results into their buffers.
  if (plan.foreach_chain && plan.out_op_ok.load(std::memory_order_relaxed) &&
      queue_foreach_chain(op, plan, args, results, ret_fresh, any_fresh, device)) {
    torch::jit::drop(*stack, nargs);
    for (auto& v : results) stack->push_back(std::move(v));
    return AsyncResult::kDone;
  }
  if (plan.out_op && plan.out_op_ok.load(std::memory_order_relaxed) && any_fresh &&
      std::all_of(ret_fresh.begin(), ret_fresh.end(), [](bool f) { return f; })) {
    // Every return is a fresh buffer: the out= kernel writes them directly.
    CpuAliases al({.queued = true});
    Stack cpu_stack = cpu_arguments(args, plan.facts.arg_is_generator, device, plan.name.c_str(), al);
    std::vector<at::Tensor> expected;
    for (const IValue& r : results) {
      expected.push_back(queued_alias(r.toTensor()));
      cpu_stack.emplace_back(queued_alias(r.toTensor(), /*resizable=*/true));
    }
    launch_cpu_kernels(device, plan.name.c_str(), work_elements(plan, args, results),
                       plan.matrix_work,
           [op = *plan.out_op, &ok = plan.out_op_ok, cpu_stack = std::move(cpu_stack),
            expected = std::move(expected)]() mutable {
             const size_t first_out = cpu_stack.size() - expected.size();
             std::vector<at::Tensor> outs;
             for (size_t i = 0; i < expected.size(); ++i) outs.push_back(cpu_stack[first_out + i].toTensor());
             call_cpu_kernel(op, &cpu_stack);
             if (!copy_moved_outputs(outs, expected)) {
               ok.store(false, std::memory_order_relaxed);  // use the copy path from now on
             }
           });
  } else if (plan.element_out && plan.out_op_ok.load(std::memory_order_relaxed) && nret == 1 &&
             ret_fresh[0] && results[0].isTensorList()) {
    // A functional foreach op: each element's out= kernel writes its fresh buffer.
    CpuAliases al({.queued = true});
    Stack cpu_stack = cpu_arguments(args, plan.facts.arg_is_generator, device, plan.name.c_str(), al);
    std::vector<at::Tensor> outs, expected;
    for (const at::Tensor& t : results[0].toTensorList()) {
      outs.push_back(queued_alias(t, /*resizable=*/true));
      expected.push_back(queued_alias(t));
    }
    launch_cpu_kernels(device, plan.name.c_str(), work_elements(plan, args, results),
                       plan.matrix_work,
           [&element = *plan.element_out, &ok = plan.out_op_ok, cpu_stack = std::move(cpu_stack),
            outs = std::move(outs), expected = std::move(expected)]() {
             if (!run_element_outs(element, cpu_stack, outs, expected)) {
               ok.store(false, std::memory_order_relaxed);  // use the copy path from now on
             }
           });
  } else if (plan.has_mutable_arg || any_fresh) {
    CpuAliases al({.queued = true});
    Stack cpu_stack = cpu_arguments(args, plan.facts.arg_is_generator, device, plan.name.c_str(), al);
    Stack fresh_aliases(nret);
    for (size_t r = 0; r < nret; ++r) {
      if (ret_fresh[r]) fresh_aliases[r] = map_tensors(results[r], al);
    }
    launch_cpu_kernels(device, plan.name.c_str(), work_elements(plan, args, results),
                       plan.matrix_work,
           [op, cpu_stack = std::move(cpu_stack), fresh_aliases = std::move(fresh_aliases)]() mutable {
             call_cpu_kernel(op, &cpu_stack);
             copy_into(fresh_aliases, cpu_stack);
           });
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : results) stack->push_back(std::move(v));
  plan.counter->count(ExecPath::kQueue);
  return AsyncResult::kDone;
}

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

c10::WarningHandler& silent_warnings() {
  static SilentWarnings handler;
  return handler;
}

// Do a run's results (CPU tensors) agree with the layout its Meta kernel
// predicted? Written arguments are checked by the caller's tensors.
bool agrees(const OutputLayout& layout, const Stack& results) {
  auto same = [](const TensorLayout& l, const at::Tensor& t) {
    return l.defined == t.defined() &&
           (!t.defined() || (l.dtype == t.scalar_type() && c10::IntArrayRef(l.sizes) == t.sizes()));
  };
  for (size_t r = 0; r < layout.returns.size(); ++r) {
    const ReturnLayout& rl = layout.returns[r];
    const IValue& v = results[r];
    switch (rl.kind) {
      case ReturnLayout::Kind::kWrittenArg:
        if (rl.resized && v.isTensor() && !same(rl.tensors[0], v.toTensor())) return false;
        break;
      case ReturnLayout::Kind::kTensor:
        if (!v.isTensor() || !same(rl.tensors[0], v.toTensor())) return false;
        break;
      case ReturnLayout::Kind::kTensorList: {
        if (!v.isTensorList() || v.toTensorList().size() != rl.tensors.size()) return false;
        auto list = v.toTensorList();
        for (size_t i = 0; i < rl.tensors.size(); ++i) {
          if (!same(rl.tensors[i], list.get(i))) return false;
        }
        break;
      }
      case ReturnLayout::Kind::kOther:
        break;
    }
  }
  return true;
}

// Runs the CPU kernel on aliases on the calling thread, after the stream has
// drained. Used for ops whose output shape depends on the data, for ops that
// return non-tensors, and for the first run of each argument signature
// (`validate`): then the layout is marked validated or sync-only, and fresh
// outputs go to device buffers allocated up front, so that exhausting the
// device is reported as such before any host work.
void run_sync(const c10::OperatorHandle& op, OpPlan& plan, Stack* stack, c10::DeviceIndex device,
              size_t nargs, const Validation* validate = nullptr) {
  Stack args(stack->end() - nargs, stack->end());
  std::vector<c10::Storage> planned;
  if (validate) {
    for (const auto& rl : validate->layout->returns) {
      for (const auto& l : rl.tensors) {
        if (l.defined && l.storage < 0) native::check_dtype(l.dtype, plan.name.c_str());
      }
    }
    for (size_t nbytes : validate->layout->fresh_nbytes) {
      planned.push_back(device_storage(device, nbytes));
    }
  }
  sync_current_stream(device);
  CpuAliases al({.resizable = true});
  Stack cpu_stack = cpu_arguments(args, plan.facts.arg_is_generator, device, plan.name.c_str(), al);
  const WrittenArguments written(op.schema(), args, cpu_stack);
  {
    // A first run repeats the checks its Meta kernel made (and warned about)
    // on this thread a moment ago: keep the user from seeing them twice.
    std::optional<c10::WarningUtils::WarningHandlerGuard> quiet;
    if (validate) quiet.emplace(&silent_warnings());
    // The stream is drained and this thread does its work: the profiler
    // shows it on the stream's track like queued work.
    const bool profiling = neuronrt::profiling_enabled();
    const int64_t start_ns = profiling ? neuronrt::profiling_now_ns() : 0;
    call_cpu_kernel(op, &cpu_stack);
    if (profiling) {
      neuronrt::profiling_record_host_work(current_stream_handle(device), plan.name.c_str(),
                                           start_ns);
    }
  }
  written.follow_resizes();
  const bool use_planned = validate && agrees(*validate->layout, cpu_stack);
  auto to_neuron = [&](const at::Tensor& t, const TensorLayout* l) -> at::Tensor {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    if (at::Tensor view = al.neuron_view_of(t); view.defined()) return view;
    if (use_planned && l && l->storage < 0) {
      at::Tensor out = build_tensor(*l, planned[-l->storage - 1]);
      cpu_alias(out).copy_(t);
      return out;
    }
    return upload_fresh(t, device, plan.name.c_str());
  };
  const size_t nret = plan.facts.ret_written_arg.size();
  Stack results;
  results.reserve(nret);
  for (size_t r = 0; r < nret; ++r) {
    int w = plan.facts.ret_written_arg[r];
    if (w >= 0) {
      results.push_back(args[w]);
      continue;
    }
    const ReturnLayout* rl = use_planned ? &validate->layout->returns[r] : nullptr;
    const IValue& v = cpu_stack[r];
    if (v.isTensor()) {
      results.emplace_back(to_neuron(v.toTensor(), rl ? &rl->tensors[0] : nullptr));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      auto in = v.toTensorList();
      for (size_t i = 0; i < in.size(); ++i) {
        list.push_back(to_neuron(in.get(i), rl ? &rl->tensors[i] : nullptr));
      }
      results.emplace_back(std::move(list));
    } else {
      results.push_back(map_tensors(v, [&](const at::Tensor& t) { return to_neuron(t, nullptr); }));
    }
  }
  if (validate) {
    auto state = use_planned ? OutputLayout::kValidated : OutputLayout::kSyncOnly;
    validate->layout->state.store(state, std::memory_order_release);
    if (use_planned) plan.layouts.note_validated(validate->shape_class);
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : results) stack->push_back(std::move(v));
  plan.counter->count(ExecPath::kSync);
}

void warn_cpu_copy_once(const std::string& name) {
  static std::mutex m;
  static auto* warned = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(m);
  if (warned->insert(name).second) {
    TORCH_WARN("[neuron] ", name, " ran through the copy-to-CPU fallback (slow: its arguments "
               "were copied to the host and back). torchneuron.fallback_ops() lists such ops.");
  }
}

void run_cpu_copy(const c10::OperatorHandle& op, OpPlan& plan, Stack* stack,
                  c10::DeviceIndex device) {
  warn_cpu_copy_once(plan.name);
  sync_current_stream(device);
  at::native::cpu_fallback(op, stack);
  plan.counter->count(ExecPath::kCpuCopy);
}

}  // namespace


void neuron_fallback(const c10::OperatorHandle& op, Stack* stack) {
  OpPlan& plan = plan_for(op);
  TORCH_CHECK_NOT_IMPLEMENTED(plan.has_cpu_kernel, "[neuron] ", plan.name,
                              " is not implemented for neuron: PyTorch has kernels for it on other devices "
                              "only (such as CUDA), and neuron runs an op it has no kernel of its own for "
                              "through PyTorch's CPU kernel. Use an op that runs on CPU instead, or move "
                              "this call's tensors to a device that has it.");
  const size_t nargs = op.schema().arguments().size();
  c10::DeviceIndex device;
  {
    Stack args_view(stack->end() - nargs, stack->end());
    device = op_device(plan, args_view);
  }
  try {
    switch (plan.mode.load(std::memory_order_relaxed)) {
      case Mode::kCpuCopy:
        return run_cpu_copy(op, plan, stack, device);
      case Mode::kSync:
        return run_sync(op, plan, stack, device, nargs);
      case Mode::kAsync:
        break;
    }
    Validation to_validate;
    switch (run_async(op, plan, stack, device, nargs, &to_validate)) {
      case AsyncResult::kDone:
        return;
      case AsyncResult::kValidate:
        return run_sync(op, plan, stack, device, nargs, &to_validate);
      case AsyncResult::kSyncSignature:
        return run_sync(op, plan, stack, device, nargs);
    }
  } catch (const c10::Error&) {
    rethrow_with_op(plan.name);
  }
}

void register_structured_overrides() {
  // Functional and in-place variants of structured ops reach PrivateUse1
  // through CompositeExplicitAutogradNonFunctional: that kernel runs the
  // meta function on the device tensors and then calls the out= variant,
  // which the fallback would infer again. Registering the fallback for them
  // directly does the work once (and names the op in errors).
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(name);
    if (!op) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    // Foreach ops (optimizers' _foreach_add_, _foreach_lerp_, ...) have no CPU
    // kernel, only a CompositeExplicitAutograd loop over the tensors: run that
    // loop on the worker as one queued op, instead of one op per tensor issued
    // from the host (an optimizer step then costs a few ops, not a few per
    // parameter).
    const bool foreach = name.name.rfind("aten::_foreach_", 0) == 0;
    if (!foreach && !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    // Also ops whose CompositeExplicitAutograd kernel is a generic version
    // of their CPU kernel (native_layer_norm, native_group_norm, addr, ...):
    // it would outrank the fallback and give other numerics than the CPU.
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd))
      continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
}

}  // namespace torchneuron
