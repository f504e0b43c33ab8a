#include "harness.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

namespace nctest {

const std::string& test_prefix() {
  static const std::string prefix = "p" + std::to_string(::getpid()) + "-";
  return prefix;
}

namespace {

std::string make_store_dir() {
  test_prefix();  // fixed before any fork
  char tmpl[] = "/tmp/neuroncoll-test-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  return dir ? dir : "";
}

std::string run_rank(const Options& o, const std::string& dir, int rank, const Body& body) {
  Ctx c;
  c.rank = rank;
  c.options = &o;
  std::shared_ptr<neuroncoll::Store> store;
  neuroncoll::Status s = neuroncoll::make_file_store(dir, &store);
  if (!s.ok()) return "store: " + s.to_string();
  std::unique_ptr<neuroncoll::Group> group;
  if (rank != o.skip_create_rank) {
    neuroncoll::GroupOptions go;
    go.store = store;
    go.rank = rank;
    go.size = o.size;
    go.timeout = o.timeout;
    go.name = test_prefix() + o.name;
    go.staging_bytes = o.staging_bytes;
    go.small_message_bytes = o.small_message_bytes;
    go.rank_labels = o.rank_labels;
    c.create_status = neuroncoll::Group::create(go, &group);
    c.group = group.get();
  } else {
    c.create_status = neuroncoll::Status(neuroncoll::Code::kAborted, "skipped");
  }
  return body(c);
}

}  // namespace

std::vector<std::string> run_threads(const Options& o, const Body& body) {
  const std::string dir = make_store_dir();
  std::vector<std::string> results(o.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.size; ++r) {
    threads.emplace_back([&, r] { results[r] = run_rank(o, dir, r, body); });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return results;
}

std::vector<std::string> run_processes(const Options& o, const Body& body,
                                       std::chrono::seconds deadline) {
  const std::string dir = make_store_dir();
  std::vector<std::string> results(o.size);
  std::vector<pid_t> pids(o.size, -1);
  std::vector<int> fds(o.size, -1);
  for (int r = 0; r < o.size; ++r) {
    int p[2];
    if (::pipe(p) != 0) {
      results[r] = "pipe failed";
      continue;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::string result = run_rank(o, dir, r, body);
      size_t done = 0;
      while (done < result.size()) {
        ssize_t w = ::write(p[1], result.data() + done, result.size() - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      ::close(p[1]);
      ::_exit(result.empty() ? 0 : 1);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (int r = 0; r < o.size; ++r) {
    if (pids[r] < 0) continue;
    std::string text;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      pollfd pfd{fds[r], POLLIN, 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (ready <= 0) {
        text += "[killed at the test deadline]";
        for (pid_t pid : pids) {
          if (pid > 0) ::kill(pid, SIGKILL);
        }
        break;
      }
      ssize_t n = ::read(fds[r], buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (WIFSIGNALED(status)) {
      text += "[died of signal " + std::to_string(WTERMSIG(status)) + "]";
    } else if (WEXITSTATUS(status) != 0 && text.empty()) {
      text = "[exit status " + std::to_string(WEXITSTATUS(status)) + "]";
    }
    results[r] = text;
  }
  std::filesystem::remove_all(dir);
  return results;
}

std::string failures(const std::vector<std::string>& results) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    if (!results[r].empty()) out += "rank " + std::to_string(r) + ": " + results[r] + "\n";
  }
  return out;
}

std::vector<std::string> shm_leftovers() {
  std::vector<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string mine = "neuroncoll-" + test_prefix();
    if (std::strncmp(e->d_name, mine.c_str(), mine.size()) == 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace nctest
