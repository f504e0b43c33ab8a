// How the host blocks on the device. Queued work may need the GIL (to drop
// the last reference to a tensor that has a Python object), so a thread
// that holds the GIL must release it while it waits, or both could wait for
// each other forever. The Python bindings install the hook that does this;
// without Python (C++ users) waits run as they are.
#pragma once

#include <functional>

namespace torchneuron {

using BlockingWaitHook = void (*)(const std::function<void()>& wait);
void set_blocking_wait_hook(BlockingWaitHook hook);
// Runs `wait` (a blocking runtime call) through the hook.
void blocking_wait(const std::function<void()>& wait);

}  // namespace torchneuron
