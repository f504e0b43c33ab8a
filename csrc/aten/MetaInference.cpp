#include "csrc/aten/MetaInference.h"

#include <cstring>

#include <c10/core/StorageImpl.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/IValueTensors.h"

namespace torchneuron {
namespace {

using c10::IValue;
using torch::jit::Stack;

constexpr size_t kMaxEntriesPerOp = 4096;  // bounded: shapes that never repeat

enum Tag : int64_t {
  kNone = 1, kTensor, kUndefinedTensor, kList, kInt, kDouble, kBool, kString, kDevice,
  kGenerator, kComplex, kIntList, kDoubleList, kBoolList,
};

struct Walker {
  ArgSignature& sig;
  bool float_values;
  bool shape_class = false;  // see shape_class_of()

  int storage_id(c10::StorageImpl* st) {
    for (size_t i = 0; i < sig.storages.size(); ++i) {
      if (sig.storages[i] == st) return static_cast<int>(i);
    }
    sig.storages.push_back(st);
    return static_cast<int>(sig.storages.size() - 1);
  }

  void tensor(const at::Tensor& t) {
    auto& k = sig.key;
    if (!t.defined()) {
      k.push_back(kUndefinedTensor);
      return;
    }
    k.push_back(kTensor);
    k.push_back(static_cast<int64_t>(t.scalar_type()));
    k.push_back(defined_on_neuron(t) ? storage_id(t.storage().unsafeGetStorageImpl()) : -1);
    if (shape_class) {
      // Each size as 0, 1 or "more", plus contiguity and offset presence.
      k.push_back((t.is_contiguous() ? 1 : 0) | (t.storage_offset() != 0 ? 2 : 0) |
                  (t.is_conj() ? 4 : 0) | (t.is_neg() ? 8 : 0) |
                  (t.unsafeGetTensorImpl()->is_wrapped_number() ? 16 : 0));
      k.push_back(t.dim());
      for (auto s : t.sizes()) k.push_back(std::min<int64_t>(s, 2));
      return;
    }
    k.push_back(static_cast<int64_t>(t.storage().nbytes()));
    k.push_back(t.storage_offset());
    k.push_back((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) |
                (t.unsafeGetTensorImpl()->is_wrapped_number() ? 4 : 0));
    k.push_back(t.dim());
    for (auto s : t.sizes()) k.push_back(s);
    for (auto s : t.strides()) k.push_back(s);
  }

  void value(const IValue& v) {
    auto& k = sig.key;
    if (v.isNone()) {
      k.push_back(kNone);
    } else if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTensorList()) {
      k.push_back(kList);
      k.push_back(static_cast<int64_t>(v.toTensorList().size()));
      for (const at::Tensor& t : v.toTensorList()) tensor(t);
    } else if (v.isInt()) {
      k.push_back(kInt);
      k.push_back(v.toInt());
    } else if (v.isDouble()) {
      k.push_back(kDouble);
      if (float_values) {
        double d = v.toDouble();
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        k.push_back(bits);
      }
    } else if (v.isBool()) {
      k.push_back(kBool);
      k.push_back(v.toBool());
    } else if (v.isString()) {
      const std::string& s = v.toStringRef();
      k.push_back(kString);
      k.push_back(static_cast<int64_t>(s.size()));
      for (size_t i = 0; i < s.size(); i += 8) {
        int64_t w = 0;
        std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
        k.push_back(w);
      }
    } else if (v.isDevice()) {
      k.push_back(kDevice);
      k.push_back(static_cast<int64_t>(v.toDevice().type()));
      k.push_back(v.toDevice().index());
    } else if (v.isGenerator()) {
      k.push_back(kGenerator);
    } else if (v.isComplexDouble()) {
      k.push_back(kComplex);
    } else if (v.isIntList()) {
      k.push_back(kIntList);
      auto l = v.toIntVector();
      k.push_back(static_cast<int64_t>(l.size()));
      k.insert(k.end(), l.begin(), l.end());
    } else if (v.isDoubleList()) {
      k.push_back(kDoubleList);
      auto l = v.toDoubleVector();
      k.push_back(static_cast<int64_t>(l.size()));
      for (double d : l) {
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        k.push_back(bits);
      }
    } else if (v.isBoolList()) {
      k.push_back(kBoolList);
      auto l = v.toBoolList();
      k.push_back(static_cast<int64_t>(l.size()));
      for (bool b : l) k.push_back(b);
    } else if (v.isList()) {
      k.push_back(kList);
      auto l = v.toListRef();
      k.push_back(static_cast<int64_t>(l.size()));
      for (const IValue& e : l) value(e);
    } else {
      sig.cacheable = false;  // Storage, Dimname, objects: not worth keying
    }
  }
};

// Meta copies of the arguments; neuron storages map to shared meta storages
// in signature order, so the outputs' storages tell what they alias.
struct MetaArgs {
  std::vector<c10::Storage> meta_storages;  // index = signature storage id

  at::Tensor convert(const at::Tensor& t, const ArgSignature& sig) {
    if (!t.defined()) return t;
    // CPU scalars (Python numbers, 0-dim CPU tensors) stay on the CPU: Meta
    // kernels accept them beside meta tensors, as CPU kernels do beside
    // device tensors, and type promotion treats them as scalars.
    if (!defined_on_neuron(t) && t.dim() == 0) return t;
    c10::Storage st;
    if (defined_on_neuron(t)) {
      auto* key = t.storage().unsafeGetStorageImpl();
      size_t id = 0;
      while (sig.storages[id] != key) ++id;
      if (meta_storages.size() <= id) meta_storages.resize(id + 1);
      if (!meta_storages[id]) meta_storages[id] = fresh(key->nbytes());
      st = meta_storages[id];
    } else {
      st = fresh(t.storage().nbytes());
    }
    at::Tensor m = tensor_like(std::move(st), c10::DispatchKey::Meta, t);
    // Python scalars: type promotion treats wrapped numbers specially.
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      m.unsafeGetTensorImpl()->set_wrapped_number(true);
    }
    return m;
  }

  static c10::Storage fresh(size_t nbytes) {
    return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), nbytes,
        c10::DataPtr(nullptr, c10::Device(c10::kMeta)), c10::GetAllocator(c10::kMeta),
        /*resizable=*/true));
  }
};

// Turns the Meta kernel's results into layouts relative to the arguments.
struct LayoutBuilder {
  const MetaArgs& meta;
  OutputLayout& out;
  std::vector<c10::StorageImpl*> fresh_storages;

  TensorLayout layout(const at::Tensor& m) {
    TensorLayout l;
    if (!m.defined()) return l;
    l.defined = true;
    auto* st = m.storage().unsafeGetStorageImpl();
    l.storage = INT32_MIN;
    for (size_t i = 0; i < meta.meta_storages.size(); ++i) {
      if (meta.meta_storages[i] && meta.meta_storages[i].unsafeGetStorageImpl() == st) {
        l.storage = static_cast<int>(i);
        break;
      }
    }
    if (l.storage == INT32_MIN) {
      size_t f = 0;
      while (f < fresh_storages.size() && fresh_storages[f] != st) ++f;
      if (f == fresh_storages.size()) {
        fresh_storages.push_back(st);
        out.fresh_nbytes.push_back(st->nbytes());
      }
      l.storage = -static_cast<int>(f) - 1;
    }
    l.sizes.assign(m.sizes().begin(), m.sizes().end());
    l.strides.assign(m.strides().begin(), m.strides().end());
    l.offset = m.storage_offset();
    l.dtype = m.scalar_type();
    l.conj = m.is_conj();
    l.neg = m.is_neg();
    return l;
  }
};

}  // namespace

ArgSignature signature_of(const Stack& args, const SchemaFacts& facts) {
  ArgSignature sig;
  Walker w{sig, facts.key_float_values};
  for (const IValue& v : args) w.value(v);
  return sig;
}

ArgSignature shape_class_of(const Stack& args, const SchemaFacts& facts) {
  ArgSignature sig;
  Walker w{sig, facts.key_float_values, /*shape_class=*/true};
  for (const IValue& v : args) w.value(v);
  return sig;
}

namespace {
size_t hash_key(c10::ArrayRef<int64_t> k) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : k) {
    h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}
}  // namespace

bool InferenceCache::class_validated(const ArgSignature& shape_class) {
  if (!shape_class.cacheable) return false;
  const size_t hash = hash_key(shape_class.key);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = validated_classes_.find(hash);
  if (it == validated_classes_.end()) return false;
  for (const auto& k : it->second) {
    if (c10::ArrayRef<int64_t>(k) == c10::ArrayRef<int64_t>(shape_class.key)) return true;
  }
  return false;
}

void InferenceCache::note_validated(const ArgSignature& shape_class) {
  validated_.fetch_add(1, std::memory_order_relaxed);
  if (!shape_class.cacheable) return;
  const size_t hash = hash_key(shape_class.key);
  std::lock_guard<std::mutex> lock(mutex_);
  auto& keys = validated_classes_[hash];
  for (const auto& k : keys) {
    if (c10::ArrayRef<int64_t>(k) == c10::ArrayRef<int64_t>(shape_class.key)) return;
  }
  keys.emplace_back(shape_class.key.begin(), shape_class.key.end());
}

std::shared_ptr<const OutputLayout> InferenceCache::infer(const c10::OperatorHandle& op,
                                                          const SchemaFacts& facts,
                                                          const Stack& args,
                                                          const ArgSignature& sig) {
  const size_t hash = sig.cacheable ? hash_key(sig.key) : 0;
  if (sig.cacheable) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(hash);
    if (it != entries_.end()) {
      for (const Entry& e : it->second) {
        if (c10::ArrayRef<int64_t>(e.key) == c10::ArrayRef<int64_t>(sig.key)) return e.layout;
      }
    }
  }
  MetaArgs meta;
  Stack meta_stack;
  meta_stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    if (facts.arg_is_generator[i]) {
      meta_stack.emplace_back();
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      meta_stack.emplace_back(c10::Device(c10::kMeta));
    } else {
      meta_stack.push_back(map_tensors(v, [&](const at::Tensor& t) { return meta.convert(t, sig); }));
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const std::exception&) {
    // c10 errors, and Python errors from Python meta kernels: no Meta kernel,
    // one that needs the data, or one stricter than the CPU kernel (device
    // checks on CPU scalars). This signature runs synchronously from now on.
    auto none = std::make_shared<OutputLayout>();
    none->state.store(OutputLayout::kSyncOnly, std::memory_order_relaxed);
    if (!sig.cacheable) return none;
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[hash].push_back(Entry{std::vector<int64_t>(sig.key.begin(), sig.key.end()), none});
    ++size_;
    return none;
  }

  auto result = std::make_shared<OutputLayout>();
  LayoutBuilder b{meta, *result, {}};
  for (size_t r = 0; r < facts.ret_written_arg.size(); ++r) {
    const IValue& mv = meta_stack[r];
    ReturnLayout rl;
    int w = facts.ret_written_arg[r];
    if (w >= 0) {
      rl.kind = ReturnLayout::Kind::kWrittenArg;
      const IValue& arg = args[w];
      if (arg.isTensor() && mv.isTensor()) {
        const at::Tensor& t = arg.toTensor();
        const at::Tensor& m = mv.toTensor();
        if (t.sizes() != m.sizes() || t.strides() != m.strides() ||
            t.storage_offset() != m.storage_offset()) {
          rl.resized = true;
          rl.resized_nbytes = m.storage().nbytes();
          rl.tensors.push_back(b.layout(m));
        }
      }
    } else if (mv.isTensor()) {
      rl.kind = ReturnLayout::Kind::kTensor;
      rl.tensors.push_back(b.layout(mv.toTensor()));
    } else if (mv.isTensorList()) {
      rl.kind = ReturnLayout::Kind::kTensorList;
      for (const at::Tensor& t : mv.toTensorList()) rl.tensors.push_back(b.layout(t));
    } else if (mv.isNone()) {
      rl.kind = ReturnLayout::Kind::kOther;
    } else {
      result->state.store(OutputLayout::kSyncOnly, std::memory_order_relaxed);
      result->returns.clear();  // a return kind we cannot build without running the op
      break;
    }
    result->returns.push_back(std::move(rl));
  }

  if (!sig.cacheable) return result;
  std::lock_guard<std::mutex> lock(mutex_);
  if (size_ >= kMaxEntriesPerOp) {
    entries_.clear();
    size_ = 0;
  }
  entries_[hash].push_back(Entry{std::vector<int64_t>(sig.key.begin(), sig.key.end()), result});
  ++size_;
  return result;
}

}  // namespace torchneuron
