#include "csrc/aten/native/Streams.h"

#include "csrc/runtime/NeuronAllocator.h"

namespace torchneuron::native {

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1 &&
                  stream.device_index() == self.device().index(),
              "[neuron] record_stream: the stream is on ", stream.device(),
              " but the tensor is on ", self.device());
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace torchneuron::native
