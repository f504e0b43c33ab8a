#include "csrc/compiler/CompiledGraph.h"

#include <optional>
#include <sstream>

#include <c10/util/Exception.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/native/KernelSupport.h"
#include "csrc/aten/native/UpcastGemm.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

namespace nc = neuroncompiler;

namespace {

std::string shape_text(c10::IntArrayRef v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

std::vector<std::string> step_names(const nc::Program& p) {
  std::vector<std::string> names;
  names.reserve(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) names.push_back(p.step_name(i));
  return names;
}

// While the profiler runs, each step becomes a part of the program's task
// (its own interval on the device timeline, docs/profiling.md).
class ProfiledSteps final : public nc::StepObserver {
 public:
  explicit ProfiledSteps(const std::vector<std::string>& names) : names_(names) {}
  void step_started(size_t) override { start_ns_ = neuronrt::profiling_now_ns(); }
  void step_finished(size_t step) override {
    neuronrt::profiling_record_task_part(names_[step].c_str(), start_ns_, neuronrt::profiling_now_ns());
  }

 private:
  const std::vector<std::string>& names_;
  int64_t start_ns_ = 0;
};

nc::CompileOptions compile_options() {
  nc::CompileOptions options;
  options.patterns.mixed_precision_gemm = native::upcast_gemm_is_mixed_precision();
  return options;
}

nc::DType base_dtype(const nc::Program& p, const nc::Buffer& input) {
  return p.values[p.inputs[input.index]].layout.dtype;
}

}  // namespace

CompiledGraph::CompiledGraph(nc::Program program, nc::CompileReport report, std::string label)
    : program_(std::make_shared<const nc::Program>(std::move(program))),
      report_(report),
      label_(std::move(label)),
      task_name_("compiled " + label_),
      step_names_(std::make_shared<const std::vector<std::string>>(step_names(*program_))),
      externs_(std::make_shared<ExternAtenCalls>(*program_)),
      collectives_(std::make_shared<ProgramCollectives>(*program_)) {}

std::shared_ptr<CompiledGraph> CompiledGraph::compile(const std::string& text, const std::string& label,
                                                     bool keep_ir) {
  nc::CompileReport report;
  report.keep_ir = keep_ir;
  nc::Program program;
  try {
    program = nc::compile_text(text, &report, compile_options());
  } catch (const nc::NotLowered& e) {
    // Not an error of the graph: the caller runs it eagerly, with this reason.
    TORCH_CHECK_NOT_IMPLEMENTED(false, "[neuron] compile ", label, ": not lowered: ", e.what());
  } catch (const nc::CompileError& e) {
    TORCH_CHECK(false, "[neuron] compile ", label, ": ", e.what());
  }
  return std::shared_ptr<CompiledGraph>(new CompiledGraph(std::move(program), report, label));
}

std::string CompiledGraph::target() {
  return std::string("mixed_precision_gemm=") + (mixed_precision_gemm() ? "1" : "0");
}

bool CompiledGraph::mixed_precision_gemm() { return compile_options().patterns.mixed_precision_gemm; }

std::shared_ptr<CompiledGraph> CompiledGraph::load(const std::string& bytes, const std::string& label) {
  nc::Program program;
  try {
    program = nc::Program::deserialize(bytes);
  } catch (const nc::CompileError& e) {
    TORCH_CHECK(false, "[neuron] load ", label, ": ", e.what());
  }
  nc::CompileReport report;
  report.fused_groups = program.fused_groups();
  report.fused_nodes = program.fused_nodes();
  report.library_calls = program.library_calls();
  report.folded = program.folded;
  report.reinplaced = program.reinplaced;
  report.extern_calls = program.extern_calls();
  report.native_kernels = program.native_kernels();
  report.native_nodes = program.native_nodes();
  report.arena_bytes = program.arena_bytes;
  return std::shared_ptr<CompiledGraph>(new CompiledGraph(std::move(program), report, label));
}

void CompiledGraph::check_inputs(const std::vector<at::Tensor>& inputs) const {
  const nc::Program& p = *program_;
  TORCH_CHECK(inputs.size() == p.inputs.size(), "[neuron] compiled ", label_, ": expected ", p.inputs.size(),
              " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const std::string& name = p.input_names[i];
    TORCH_CHECK(t.defined(), "[neuron] compiled ", label_, ": input ", name, " is None");
    const nc::Layout& l = p.values[p.inputs[i]].layout;
    TORCH_CHECK(on_neuron(t), "[neuron] compiled ", label_, ": input ", name, " is a ", t.device(), " tensor ",
                shape_text(t.sizes()), " ", t.scalar_type(), "; the compiled graph runs on neuron tensors: move it with .to('neuron')");
    TORCH_CHECK(t.device() == inputs[0].device(), "[neuron] compiled ", label_, ": input ", name, " is on ", t.device(),
                ", input ", p.input_names[0], " on ", inputs[0].device(), "; a compiled graph runs on one device");
    TORCH_CHECK(t.scalar_type() == scalar_type_of(l.dtype) && t.sizes() == c10::IntArrayRef(l.sizes) &&
                    (t.numel() <= 1 || t.strides() == c10::IntArrayRef(l.strides)),
                "[neuron] compiled ", label_, ": input ", name, " is ", t.scalar_type(), " ", shape_text(t.sizes()),
                " strides ", shape_text(t.strides()), "; the graph was compiled for ", scalar_type_of(l.dtype), " ",
                shape_text(l.sizes), " strides ", shape_text(l.strides));
  }
}

std::vector<at::Tensor> CompiledGraph::run(const std::vector<at::Tensor>& given) const {
  // A CPU scalar (0-dim) where the graph has a device scalar is uploaded, as
  // eager ops accept CPU scalars next to device tensors (AOTAutograd may pass
  // one saved by an eagerly run forward).
  std::vector<at::Tensor> uploaded;
  const std::vector<at::Tensor>* in = &given;
  for (size_t i = 0; i < given.size(); ++i) {
    if (given[i].defined() && !on_neuron(given[i]) && given[i].dim() == 0) {
      if (uploaded.empty()) uploaded = given;
      c10::DeviceIndex device = 0;
      for (const at::Tensor& t : given) {
        if (t.defined() && on_neuron(t)) { device = t.device().index(); break; }
      }
      uploaded[i] = given[i].to(c10::Device(c10::DeviceType::PrivateUse1, device));
      in = &uploaded;
    }
  }
  const std::vector<at::Tensor>& inputs = *in;
  check_inputs(inputs);
  const nc::Program& p = *program_;
  const c10::DeviceIndex device = inputs.empty() ? 0 : inputs[0].device().index();
  // The memory at launch (the host may resize a storage before the task
  // runs). Without collectives, the task holds the buffers as eager ops do:
  // memory the host frees goes back to this stream's pool at once, and its
  // reuse comes after the task; holding it would make a host running ahead
  // fault in new segments for every call's outputs. With collectives, the
  // group's queue thread reads the buffers too, so the task keeps them.
  const bool held = !collectives_->empty();
  auto at_launch = [held](const c10::Storage& s) { return held ? launch_alias(s) : queued_storage(s); };
  auto storages = std::make_shared<ProgramStorages>();
  for (const at::Tensor& t : inputs) {
    storages->inputs.push_back(at_launch(t.storage()));
    storages->input_offset_bytes.push_back(t.storage_offset() * static_cast<int64_t>(t.element_size()));
  }
  for (int64_t bytes : p.output_storage_bytes) storages->outputs.push_back(device_storage(device, static_cast<size_t>(bytes)));
  // Always a storage, also of 0 bytes: zero-size intermediates are arena
  // values too, and an extern call builds tensors over them.
  storages->arena = device_storage(device, static_cast<size_t>(p.arena_bytes));

  std::vector<at::Tensor> outputs;
  outputs.reserve(p.outputs.size());
  for (int32_t id : p.outputs) {
    if (id < 0) {
      outputs.emplace_back();
      continue;
    }
    const nc::ProgramValue& v = p.values[id];
    const nc::Buffer& buf = p.buffers[v.buffer];
    if (buf.kind == nc::Buffer::Kind::kInput && base_dtype(p, buf) == v.layout.dtype) {
      const at::Tensor& base = inputs[buf.index];
      const bool same = v.layout.offset == 0 && base.sizes() == c10::IntArrayRef(v.layout.sizes) &&
                        base.strides() == c10::IntArrayRef(v.layout.strides);
      outputs.push_back(same ? base : base.as_strided(v.layout.sizes, v.layout.strides, base.storage_offset() + v.layout.offset));
    } else {
      // A fresh output, or a view of an input as another dtype (view_as_real
      // of a complex tangent): a tensor over the buffer's storage.
      outputs.push_back(value_tensor(p, *storages, id));
    }
  }

  if (!held) {
    // The callers' tensors now own the new outputs (the arena, nobody); the
    // task takes stream-ordered handles.
    for (c10::Storage& s : storages->outputs) s = queued_storage(s);
    storages->arena = queued_storage(storages->arena);
  }
  // Collectives take their turns on their groups' queues before the task is
  // queued (csrc/compiler/ProgramCollectives.h).
  std::shared_ptr<CollectiveTurns> turns = collectives_->reserve(p, storages, device);
  // The task holds the program, its extern calls and those storages (not the
  // callers' tensors: their Python objects must not die on a worker).
  // Each extern step decides how many threads its ATen kernel gets
  // (ExternAtenCalls::call), not the task as a whole.
  launch(device, task_name_.c_str(),
                     [program = program_, externs = externs_, names = step_names_, storages, device, turns]() {
                       nc::RunBuffers buffers;
                       for (size_t i = 0; i < storages->inputs.size(); ++i) {
                         buffers.inputs.push_back(static_cast<char*>(storages->inputs[i].mutable_data()) +
                                                  storages->input_offset_bytes[i]);
                       }
                       for (auto& s : storages->outputs) buffers.outputs.push_back(s.mutable_data());
                       buffers.arena = storages->arena ? storages->arena.mutable_data() : nullptr;
                       BoundExternCalls calls(*externs, *storages, device, turns.get());
                       std::optional<ProfiledSteps> profiled;
                       if (neuronrt::profiling_in_task()) [[unlikely]] profiled.emplace(*names);
                       nc::StepObserver* observer = profiled ? &*profiled : nullptr;
                       if (turns == nullptr) {
                         nc::run_program(*program, buffers, calls, native::device_parallel_for, observer);
                         return;
                       }
                       try {
                         nc::run_program(*program, buffers, calls, native::device_parallel_for, observer);
                       } catch (...) {
                         turns->cancel("the program failed before it");
                         throw;
                       }
                     });
  return outputs;
}

}  // namespace torchneuron
