// fork(): a child forked before any worker thread works normally; one forked
// after gets nrtErrorForkedChild from every call.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "support.hpp"

namespace {

// Runs in a child; returns its exit code (0 = all good).
int child_uses_runtime() {
  nrtStream_t s = nullptr;
  if (nrtStreamGetDefault(&s, 0) != nrtSuccess) return 1;
  void* p = nullptr;
  if (nrtMalloc(&p, 64, 0) != nrtSuccess) return 2;
  try {
    neuronrt::launch(s, "write", [p] { static_cast<int*>(p)[0] = 42; });
    neuronrt::synchronize(s);
  } catch (...) {
    return 3;
  }
  if (static_cast<int*>(p)[0] != 42) return 4;
  if (nrtFree(p) != nrtSuccess) return 5;
  return 0;
}

int child_is_refused() {
  int n = -1;
  if (nrtGetDeviceCount(&n) != nrtErrorForkedChild || n != 0) return 1;
  const std::string message = nrtGetLastErrorMessage();
  if (message.find("started before fork()") == std::string::npos) return 2;
  if (message.find("multiprocessing.set_start_method('spawn')") == std::string::npos) return 3;
  void* p = nullptr;
  if (nrtMalloc(&p, 64, 0) != nrtErrorForkedChild) return 4;
  nrtStream_t s = nullptr;
  if (nrtStreamGetDefault(&s, 0) != nrtErrorForkedChild) return 5;
  try {
    neuronrt::CachingAllocator::get().allocate(64, 0, s);
    return 6;
  } catch (const neuronrt::Error& e) {
    if (e.status() != nrtErrorForkedChild) return 7;
  }
  return 0;
}

int run_in_child(int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 100;
  return WEXITSTATUS(status);
}

// Runs in a fresh process (a death-test child): nothing started yet.
[[noreturn]] void fork_before_and_after_threads() {
  if (neuronrt::testing::worker_threads_started()) std::exit(20);
  int n = 0;
  if (nrtGetDeviceCount(&n) != nrtSuccess || n != 2) std::exit(21);
  nrtStream_t s = nullptr;
  if (nrtStreamGetDefault(&s, 0) != nrtSuccess) std::exit(22);
  if (neuronrt::testing::worker_threads_started()) std::exit(23);  // no threads yet
  if (int rc = run_in_child(child_uses_runtime); rc != 0) std::exit(30 + rc);
  // The parent is unaffected and now starts its workers.
  if (int rc = child_uses_runtime(); rc != 0) std::exit(40 + rc);
  if (!neuronrt::testing::worker_threads_started()) std::exit(24);
  if (int rc = run_in_child(child_is_refused); rc != 0) std::exit(50 + rc);
  std::exit(0);
}

}  // namespace

TEST(Fork, ChildBeforeThreadsWorksChildAfterThreadsIsRefused) {
  // "threadsafe" re-executes the test binary, so the statement runs in a
  // process where the runtime has not started anything yet.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fork_before_and_after_threads(), ::testing::ExitedWithCode(0), "");
}

TEST(Fork, ChildOfThisProcessAfterThreadsIsRefused) {
  nrtStream_t s = nrt_test::default_stream(0);
  neuronrt::launch(s, "start", [] {});
  neuronrt::synchronize(s);
  ASSERT_TRUE(neuronrt::testing::worker_threads_started());
  EXPECT_EQ(run_in_child(child_is_refused), 0);
  // The parent keeps working.
  neuronrt::launch(s, "still fine", [] {});
  EXPECT_NO_THROW(neuronrt::synchronize(s));
}

// ---- Process exit ------------------------------------------------------------

namespace {

void* g_late_block = nullptr;
nrtStream_t g_late_stream = nullptr;

// Registered before any worker starts, so it runs after the runtime has
// stopped its workers: like a tensor freed during interpreter shutdown.
void free_after_workers_stopped() {
  neuronrt::CachingAllocator::get().free(g_late_block);
  neuronrt::launch(g_late_stream, "late", [] { std::fprintf(stderr, "inline-ran\n"); });
  neuronrt::synchronize(g_late_stream);
}

[[noreturn]] void exit_with_queued_work() {
  nrtStream_t s = nrt_test::default_stream(0);
  g_late_stream = nrt_test::default_stream(1);
  g_late_block = neuronrt::CachingAllocator::get().allocate(4096, 0, s);
  neuronrt::CachingAllocator::get().record_stream(g_late_block, g_late_stream);
  std::atexit(free_after_workers_stopped);
  neuronrt::launch(g_late_stream, "use", [] {});
  neuronrt::launch(s, "slow", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::fprintf(stderr, "drained\n");
  });
  std::exit(0);  // no synchronize: the runtime must drain and join by itself
}

}  // namespace

TEST(Exit, DrainsQueuedWorkAndAcceptsLateFrees) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_with_queued_work(), ::testing::ExitedWithCode(0), "drained.*inline-ran");
}
