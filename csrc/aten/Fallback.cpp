#include "csrc/aten/Fallback.h"

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/env.h>

#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/runtime/NeuronAllocator.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronGenerator.h"
#include "csrc/runtime/NeuronHooks.h"

namespace torchneuron {
namespace {

using c10::IValue;
using torch::jit::Stack;

enum class Mode : uint8_t { kAsync, kSync, kCpuCopy };

// What the fallback needs to know about an op, computed once per schema.
struct OpPlan {
  std::string name;              // "aten::add.Tensor"
  std::atomic<Mode> mode{Mode::kAsync};  // learned: kAsync may become kSync
  bool has_mutable_arg = false;  // in-place / out= ops write an argument
  // For each return: the index of the argument it aliases as a written
  // output (a!), or -1.
  std::vector<int> ret_written_arg;
  std::vector<bool> arg_is_generator;
};

struct PlanCache {
  std::shared_mutex mutex;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpPlan>> plans;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache();
  return *cache;
}

std::unordered_set<std::string>& forced_cpu_copy_ops() {
  static auto* ops = [] {
    auto* set = new std::unordered_set<std::string>();
    if (auto env = c10::utils::get_env("TORCHNEURON_CPU_FALLBACK_OPS")) {
      std::stringstream ss(*env);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) set->insert(item);
      }
    }
    return set;
  }();
  return *ops;
}

bool returns_only_tensors(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    const auto& t = r.type();
    if (t->kind() == c10::TypeKind::TensorType) continue;
    if (t->kind() == c10::TypeKind::ListType &&
        t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      continue;
    if (t->kind() == c10::TypeKind::OptionalType &&
        t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      continue;
    return false;
  }
  return true;
}

OpPlan& plan_for(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  auto& cache = plan_cache();
  {
    std::shared_lock<std::shared_mutex> lock(cache.mutex);
    auto it = cache.plans.find(&schema);
    if (it != cache.plans.end()) return *it->second;
  }
  auto plan = std::make_unique<OpPlan>();
  plan->name = schema.name();
  if (!schema.overload_name().empty()) plan->name += "." + schema.overload_name();
  const auto& args = schema.arguments();
  for (const auto& a : args) {
    if (a.alias_info() && a.alias_info()->isWrite()) plan->has_mutable_arg = true;
    const auto& t = a.type();
    bool is_gen = t->kind() == c10::TypeKind::GeneratorType ||
                  (t->kind() == c10::TypeKind::OptionalType &&
                   t->castRaw<c10::OptionalType>()->getElementType()->kind() ==
                       c10::TypeKind::GeneratorType);
    plan->arg_is_generator.push_back(is_gen);
  }
  for (const auto& r : schema.returns()) {
    int idx = -1;
    if (r.alias_info() && r.alias_info()->isWrite()) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].alias_info() && args[i].alias_info()->isWrite() &&
            args[i].alias_info()->beforeSets() == r.alias_info()->beforeSets()) {
          idx = static_cast<int>(i);
          break;
        }
      }
    }
    plan->ret_written_arg.push_back(idx);
  }
  if (forced_cpu_copy_ops().count(plan->name)) {
    plan->mode = Mode::kCpuCopy;
  } else if (!returns_only_tensors(schema)) {
    plan->mode = Mode::kSync;  // scalars and flags need the data now
  }
  std::unique_lock<std::shared_mutex> lock(cache.mutex);
  auto& slot = cache.plans[&schema];
  if (!slot) slot = std::move(plan);
  return *slot;
}

void set_mode(OpPlan& plan, Mode mode) { plan.mode.store(mode, std::memory_order_relaxed); }

// Visits every tensor inside an argument (Tensor, Tensor[], Tensor?[]).
template <typename F>
void for_each_tensor(const IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

// Maps every tensor inside an argument through `f`, keeping the shape of
// the IValue (list kinds included).
template <typename F>
IValue map_tensors(const IValue& v, F&& f) {
  if (v.isTensor()) return IValue(f(v.toTensor()));
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    out.reserve(v.toTensorList().size());
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return IValue(std::move(out));
  }
  if (v.isList()) {
    auto in = v.toList();
    bool any = false;
    for (const IValue& e : in) any = any || e.isTensor();
    if (!any) return v;
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (const IValue& e : in) out.push_back(e.isTensor() ? IValue(f(e.toTensor())) : e);
    return IValue(std::move(out));
  }
  return v;
}

bool is_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Finds the op's device and rejects device mixes that cannot work.
c10::DeviceIndex op_device(const OpPlan& plan, const Stack& args) {
  c10::DeviceIndex device = -1;
  std::optional<c10::Device> other;
  for (const IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (is_neuron(t)) {
        if (device < 0) {
          device = t.device().index();
        } else if (t.device().index() != device && !other) {
          other = t.device();
        }
      } else if (t.dim() != 0 && !other) {
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

// Converts arguments for the Meta kernel: neuron tensors become meta tensors
// with the same metadata, sharing meta storages where they share storage.
struct MetaConverter {
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages;  // neuron -> meta

  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined()) return t;
    c10::Storage meta_storage;
    if (is_neuron(t)) {
      auto* key = t.storage().unsafeGetStorageImpl();
      auto it = storages.find(key);
      if (it == storages.end()) {
        meta_storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
            c10::StorageImpl::use_byte_size_t(), key->nbytes(),
            c10::DataPtr(nullptr, c10::Device(c10::kMeta)), c10::GetAllocator(c10::kMeta),
            /*resizable=*/true));
        storages.emplace(key, meta_storage);
      } else {
        meta_storage = it->second;
      }
    } else {
      meta_storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), t.storage().nbytes(),
          c10::DataPtr(nullptr, c10::Device(c10::kMeta)), c10::GetAllocator(c10::kMeta), true));
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        std::move(meta_storage), c10::DispatchKeySet(c10::DispatchKey::Meta), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) impl->_set_conj(true);
    if (t.is_neg()) impl->_set_neg(true);
    return at::Tensor(std::move(impl));
  }
};

// Converts arguments for the CPU kernel: neuron tensors become CPU aliases
// (one alias storage per neuron storage, so aliasing checks see the truth).
struct CpuAliaser {
  std::unordered_map<c10::StorageImpl*, at::Tensor> bases;  // neuron storage -> an alias
  std::unordered_map<c10::StorageImpl*, c10::Storage> back;  // alias storage -> neuron

  at::Tensor operator()(const at::Tensor& t) {
    if (!is_neuron(t)) return t;
    auto* key = t.storage().unsafeGetStorageImpl();
    auto it = bases.find(key);
    if (it == bases.end()) {
      at::Tensor a = cpu_alias(t);
      back.emplace(a.storage().unsafeGetStorageImpl(), t.storage());
      bases.emplace(key, a);
      return a;
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(it->second.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) impl->_set_conj(true);
    if (t.is_neg()) impl->_set_neg(true);
    return at::Tensor(std::move(impl));
  }
};

// Arguments as the CPU kernel must see them (generators replaced by the CPU
// generator of the neuron generator, neuron devices by CPU).
Stack cpu_args(const OpPlan& plan, const Stack& args, c10::DeviceIndex device, CpuAliaser& al) {
  Stack out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    if (plan.arg_is_generator[i]) {
      std::optional<at::Generator> g;
      if (v.isGenerator()) g = v.toGenerator();
      out.emplace_back(cpu_generator_for(g, device, plan.name.c_str()));
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      out.emplace_back(c10::Device(c10::kCPU));
    } else {
      out.push_back(map_tensors(v, al));
    }
  }
  return out;
}

void redispatch(const c10::OperatorHandle& op, c10::DispatchKey key, Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(key), stack);
}

// Copies a host tensor into a fresh neuron tensor (stream already synced).
at::Tensor upload_fresh(const at::Tensor& cpu, c10::DeviceIndex device) {
  auto src = cpu.contiguous();
  size_t nbytes = src.nbytes();
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, allocate_on(device, nbytes),
      device_allocator(), /*resizable=*/true));
  if (nbytes) std::memcpy(storage.mutable_data(), src.const_data_ptr(), nbytes);
  return neuron_view_like(storage, src);
}

// ---- the three paths --------------------------------------------------------

// Returns false (leaving the stack untouched) when the Meta kernel cannot
// give the outputs' metadata; the caller then takes the sync path.
bool run_async(const c10::OperatorHandle& op, OpPlan& plan, Stack* stack,
               c10::DeviceIndex device, size_t nargs) {
  Stack args(stack->end() - nargs, stack->end());
  // 1. Output metadata from the Meta kernel (also validates the arguments).
  MetaConverter to_meta;
  Stack meta_stack;
  meta_stack.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const IValue& v = args[i];
    if (plan.arg_is_generator[i]) {
      meta_stack.emplace_back();
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      meta_stack.emplace_back(c10::Device(c10::kMeta));
    } else {
      meta_stack.push_back(map_tensors(v, to_meta));
    }
  }
  try {
    redispatch(op, c10::DispatchKey::Meta, &meta_stack);
  } catch (const std::exception&) {
    // c10 errors, and Python errors from meta kernels written in Python.
    return false;
  }

  // 2. Outputs: written arguments, views of argument storages, or fresh
  //    neuron buffers shaped like the meta results.
  std::unordered_map<c10::StorageImpl*, c10::Storage> meta_to_neuron;
  for (auto& [neuron_st, meta_st] : to_meta.storages) {
    meta_to_neuron.emplace(meta_st.unsafeGetStorageImpl(),
                           c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(neuron_st)));
  }
  bool any_fresh = false;
  auto materialize = [&](const at::Tensor& m) -> at::Tensor {
    if (!m.defined()) return m;
    auto* mst = m.storage().unsafeGetStorageImpl();
    auto it = meta_to_neuron.find(mst);
    if (it == meta_to_neuron.end()) {
      size_t nbytes = mst->nbytes();
      c10::Storage st(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), nbytes, allocate_on(device, nbytes),
          device_allocator(), /*resizable=*/true));
      it = meta_to_neuron.emplace(mst, st).first;
      any_fresh = true;
    }
    return neuron_view_like(it->second, m);
  };

  const size_t nret = plan.ret_written_arg.size();
  Stack results;
  results.reserve(nret);
  std::vector<bool> ret_fresh(nret, false);
  for (size_t r = 0; r < nret; ++r) {
    const IValue& mv = meta_stack[r];
    int w = plan.ret_written_arg[r];
    if (w >= 0) {
      // Keep the caller's tensor object, but follow a resize by the kernel
      // (out= arguments of the wrong shape).
      const IValue& arg = args[w];
      if (arg.isTensor() && mv.isTensor()) {
        const at::Tensor& t = arg.toTensor();
        const at::Tensor& m = mv.toTensor();
        if (t.sizes() != m.sizes() || t.strides() != m.strides()) {
          auto* impl = t.unsafeGetTensorImpl();
          if (m.storage().nbytes() > t.storage().nbytes()) {
            // Grow in place, like resize_ on CPU: views of the storage follow.
            resize_storage_bytes(t.storage().unsafeGetStorageImpl(), m.storage().nbytes());
          }
          impl->set_sizes_and_strides(m.sizes(), m.strides(), m.storage_offset());
        }
      }
      results.push_back(arg);
      continue;
    }
    size_t before = meta_to_neuron.size();
    results.push_back(map_tensors(mv, materialize));
    ret_fresh[r] = meta_to_neuron.size() != before;
  }

  // 3. The kernel: nothing to run for pure views; otherwise the CPU kernel on
  //    aliases (taken now, so later metadata changes of the arguments cannot
  //    leak into queued work), copying fresh results into their buffers.
  if (plan.has_mutable_arg || any_fresh) {
    CpuAliaser al;
    Stack cpu_stack = cpu_args(plan, args, device, al);
    Stack fresh_aliases(nret);
    for (size_t r = 0; r < nret; ++r) {
      if (ret_fresh[r]) fresh_aliases[r] = map_tensors(results[r], al);
    }
    launch(device, plan.name.c_str(),
           [op, cpu_stack = std::move(cpu_stack), fresh_aliases = std::move(fresh_aliases)]() mutable {
             at::AutoDispatchBelowADInplaceOrView below_autograd;
             redispatch(op, c10::DispatchKey::CPU, &cpu_stack);
             for (size_t r = 0; r < fresh_aliases.size(); ++r) {
               const IValue& want = fresh_aliases[r];
               const IValue& got = cpu_stack[r];
               if (want.isTensor()) {
                 want.toTensor().copy_(got.toTensor());
               } else if (want.isTensorList()) {
                 auto w = want.toTensorList();
                 auto g = got.toTensorList();
                 for (size_t i = 0; i < w.size(); ++i) w.get(i).copy_(g.get(i));
               } else if (want.isList()) {
                 auto w = want.toListRef();
                 auto g = got.toListRef();
                 for (size_t i = 0; i < w.size(); ++i) {
                   if (w[i].isTensor()) w[i].toTensor().copy_(g[i].toTensor());
                 }
               }
             }
           });
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : results) stack->push_back(std::move(v));
  count_op(plan.name, ExecPath::kQueue);
  return true;
}

void run_sync(const c10::OperatorHandle& op, OpPlan& plan, Stack* stack,
              c10::DeviceIndex device, size_t nargs) {
  Stack args(stack->end() - nargs, stack->end());
  sync_current_stream(device);
  CpuAliaser al;
  Stack cpu_stack = cpu_args(plan, args, device, al);
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    redispatch(op, c10::DispatchKey::CPU, &cpu_stack);
  }
  auto to_neuron = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    auto it = al.back.find(t.storage().unsafeGetStorageImpl());
    if (it != al.back.end()) return neuron_view_like(it->second, t);
    return upload_fresh(t, device);
  };
  const size_t nret = plan.ret_written_arg.size();
  Stack results;
  results.reserve(nret);
  for (size_t r = 0; r < nret; ++r) {
    int w = plan.ret_written_arg[r];
    results.push_back(w >= 0 ? args[w] : map_tensors(cpu_stack[r], to_neuron));
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : results) stack->push_back(std::move(v));
  count_op(plan.name, ExecPath::kSync);
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
  count_op(plan.name, ExecPath::kCpuCopy);
}

}  // namespace


void neuron_fallback(const c10::OperatorHandle& op, Stack* stack) {
  OpPlan& plan = plan_for(op);
  const size_t nargs = op.schema().arguments().size();
  c10::DeviceIndex device;
  {
    Stack args_view(stack->end() - nargs, stack->end());
    device = op_device(plan, args_view);
  }
  switch (plan.mode.load(std::memory_order_relaxed)) {
    case Mode::kCpuCopy:
      return run_cpu_copy(op, plan, stack, device);
    case Mode::kSync:
      try {
        return run_sync(op, plan, stack, device, nargs);
      } catch (const c10::Error&) {
        rethrow_with_op(plan.name);
      }
    case Mode::kAsync:
      break;
  }
  if (run_async(op, plan, stack, device, nargs)) return;
  // No Meta kernel, or one that needs the data (data-dependent shapes): run
  // it synchronously. If that works, go there directly next time; if it
  // fails too, it was the caller's error and the CPU kernel's message stands.
  try {
    run_sync(op, plan, stack, device, nargs);
  } catch (const c10::Error&) {
    rethrow_with_op(plan.name);
  }
  set_mode(plan, Mode::kSync);
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
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
}

}  // namespace torchneuron
