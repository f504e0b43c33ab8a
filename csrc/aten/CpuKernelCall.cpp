#include "csrc/aten/CpuKernelCall.h"

#include <cstring>

#include <ATen/EmptyTensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/StorageImpl.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/IValueTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/runtime/NeuronGenerator.h"
#include "csrc/runtime/NeuronHooks.h"

namespace torchneuron {

using c10::IValue;
using torch::jit::Stack;

at::Tensor CpuAliases::operator()(const at::Tensor& t) {
  if (!defined_on_neuron(t)) {
    return options_.queued && t.defined() && t.dim() != 0 ? t.clone() : t;
  }
  auto* key = t.storage().unsafeGetStorageImpl();
  for (const auto& [neuron, alias] : bases_) {
    if (neuron != key) continue;
    return tensor_like(alias.storage(), c10::DispatchKey::CPU, t);
  }
  at::Tensor a = options_.queued ? queued_alias(t, options_.resizable)
                                 : cpu_alias(t, options_.resizable);
  bases_.emplace_back(key, a);
  return a;
}

at::Tensor CpuAliases::neuron_view_of(const at::Tensor& cpu) const {
  const c10::StorageImpl* alias_storage = cpu.storage().unsafeGetStorageImpl();
  for (const auto& [neuron, alias] : bases_) {
    if (alias.storage().unsafeGetStorageImpl() == alias_storage) {
      return neuron_view_like(
          c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(neuron)), cpu);
    }
  }
  return at::Tensor();
}

Stack cpu_arguments(const Stack& args, const std::vector<bool>& arg_is_generator,
                    c10::DeviceIndex device, const char* op_name, CpuAliases& aliases) {
  Stack out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    if (arg_is_generator[i]) {
      std::optional<at::Generator> g;
      if (v.isGenerator()) g = v.toGenerator();
      out.emplace_back(cpu_generator_for(g, device, op_name));
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      out.emplace_back(c10::Device(c10::kCPU));
    } else {
      out.push_back(map_tensors(v, aliases));
    }
  }
  return out;
}

void call_cpu_kernel(const c10::OperatorHandle& op, Stack* stack) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

void copy_into(const Stack& targets, const Stack& results) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (size_t r = 0; r < targets.size(); ++r) {
    const IValue& want = targets[r];
    if (want.isNone()) continue;
    const IValue& got = results[r];
    if (want.isTensor()) {
      want.toTensor().copy_(got.toTensor());
    } else if (want.isTensorList()) {
      auto w = want.toTensorList();
      auto g = got.toTensorList();
      for (size_t i = 0; i < w.size(); ++i) {
        at::Tensor wi = w.get(i);
        if (wi.defined()) wi.copy_(g.get(i));
      }
    }
  }
}

bool copy_moved_outputs(const std::vector<at::Tensor>& passed,
                        const std::vector<at::Tensor>& expected) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  bool none_moved = true;
  for (size_t i = 0; i < passed.size(); ++i) {
    if (passed[i].const_data_ptr() != expected[i].const_data_ptr() ||
        passed[i].sizes() != expected[i].sizes() || passed[i].strides() != expected[i].strides()) {
      expected[i].copy_(passed[i]);
      none_moved = false;
    }
  }
  return none_moved;
}

WrittenArguments::WrittenArguments(const c10::FunctionSchema& schema, const Stack& args,
                                   const Stack& cpu_args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& info = schema.arguments()[i].alias_info();
    if (info && info->isWrite() && args[i].isTensor() && defined_on_neuron(args[i].toTensor())) {
      pairs_.emplace_back(args[i].toTensor(), cpu_args[i].toTensor());
    }
  }
}

void WrittenArguments::follow_resizes() const {
  for (const auto& [t, alias] : pairs_) {
    if (alias.storage().data() != t.storage().data()) {
      size_t nbytes = alias.storage().nbytes();
      resize_storage_bytes(t.storage().unsafeGetStorageImpl(), nbytes);
      if (nbytes) std::memcpy(t.storage().mutable_data(), alias.storage().data(), nbytes);
    }
    if (alias.sizes() != t.sizes() || alias.strides() != t.strides() ||
        alias.storage_offset() != t.storage_offset()) {
      t.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(),
                                                     alias.storage_offset());
    }
  }
}

at::Tensor upload_fresh(const at::Tensor& cpu, c10::DeviceIndex device, const char* op_name) {
  native::check_dtype(cpu.scalar_type(), op_name);
  at::Tensor src = cpu.is_non_overlapping_and_dense() ? cpu : cpu.contiguous();
  size_t nbytes = at::detail::computeStorageNbytes(src.sizes(), src.strides(), src.itemsize());
  at::Tensor out = tensor_over(device_storage(device, nbytes), c10::DispatchKey::PrivateUse1,
                               src.dtype(), src.sizes(), src.strides());
  if (nbytes) cpu_alias(out).copy_(src);
  return out;
}

}  // namespace torchneuron
