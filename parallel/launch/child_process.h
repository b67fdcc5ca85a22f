// Child processes of the launcher (parallel/launch): each runs in a process group of its own,
// with stdin from /dev/null and stdout and stderr into one pipe the launcher reads, so that
// it can be read line by line, waited for with a deadline, and ended with all it started.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace fjit::launch {

class Child {
 public:
  // Starts argv[0] (searched in PATH) with the given arguments. Throws std::runtime_error
  // naming the program when it cannot be started.
  explicit Child(const std::vector<std::string>& argv);
  ~Child();  // ends the group (SIGKILL) if it still runs
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Appends complete lines of output to `lines`, waiting at most `wait_s` for the first;
  // false once the pipe is closed (every writer gone).
  bool read_lines(double wait_s, std::vector<std::string>& lines);
  // The exit status when the child has ended (128 + signal when a signal ended it).
  std::optional<int> poll_exit();
  // SIGTERM to the group, then SIGKILL after `grace_s`; returns the exit status.
  int end_group(double grace_s);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string partial_;
  std::optional<int> status_;
};

// Runs argv to its end or for at most `timeout_s`; the exit status, or nothing when it ran
// out of time (its group is then killed). Its output goes to `output` when given.
std::optional<int> run_bounded(const std::vector<std::string>& argv, double timeout_s,
                               std::string* output = nullptr);

}  // namespace fjit::launch
