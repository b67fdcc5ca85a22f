#include "parallel/launch/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace fjit::launch {
namespace {

int decode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

Child::Child(const std::vector<std::string>& argv) {
  if (argv.empty()) throw std::invalid_argument("Child: no program");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("cannot make a pipe for {}: {}", argv[0], std::strerror(errno)));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvp(args[0], args.data());
    const std::string message = fmt::format("fjit_launch: cannot run {}: {}\n", argv[0], std::strerror(errno));
    if (::write(2, message.data(), message.size()) < 0) _exit(127);
    _exit(127);
  }
  ::setpgid(pid_, pid_);  // also here, so that the group exists before any signal to it
  ::close(fds[1]);
  fd_ = fds[0];
}

Child::~Child() {
  if (!status_) end_group(0);
  if (fd_ >= 0) ::close(fd_);
}

bool Child::read_lines(double wait_s, std::vector<std::string>& lines) {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait_s * 1000)) <= 0) return true;
  char buffer[4096];
  const ssize_t n = ::read(fd_, buffer, sizeof buffer);
  if (n <= 0) {
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (!partial_.empty()) lines.push_back(std::move(partial_));
    partial_.clear();
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  partial_.append(buffer, static_cast<size_t>(n));
  for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
    lines.push_back(partial_.substr(0, nl));
    partial_.erase(0, nl + 1);
  }
  return true;
}

std::optional<int> Child::poll_exit() {
  if (status_) return status_;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = decode(status);
  return status_;
}

int Child::end_group(double grace_s) {
  if (poll_exit()) {
    ::kill(-pid_, SIGKILL);  // what the child left in its group
    return *status_;
  }
  if (grace_s > 0) {
    ::kill(-pid_, SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (!poll_exit() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid_, SIGKILL);
  if (!status_) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    status_ = decode(status);
  }
  return *status_;
}

std::optional<int> run_bounded(const std::vector<std::string>& argv, double timeout_s,
                               std::string* output) {
  Child child(argv);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<std::string> lines;
  bool open = true;
  while (std::chrono::steady_clock::now() < until) {
    if (open) open = child.read_lines(0.05, lines);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (child.poll_exit()) break;
  }
  if (const std::optional<int> status = child.poll_exit()) {
    for (size_t before = lines.size() + 1; open && before != lines.size();) {
      before = lines.size();
      open = child.read_lines(0.01, lines);
    }
    if (output)
      for (const std::string& l : lines) *output += l + "\n";
    return status;
  }
  child.end_group(0);
  return std::nullopt;
}

}  // namespace fjit::launch
