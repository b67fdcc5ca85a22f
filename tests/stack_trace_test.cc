// Stack capture and symbolization (core/trace/stack_trace.h): captures taken in named functions of
// this file must come back with their names, this file and the right lines; fjit-internal and
// runtime frames must be dropped from what users see; concurrent use must be safe.
#include "core/trace/stack_trace.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <string>
#include <thread>
#include <vector>

namespace {

using fjit::StackFrame;
using fjit::StackTrace;

// Placed after a call, this keeps the call out of tail position: a tail call would replace the
// caller's frame, and the tests need the caller on the stack.
#define KEEP_CALLER_FRAME() asm volatile("" ::: "memory")

struct Captured {
  StackTrace trace;
  int line;  // the line of the call that the innermost expected frame made
};

__attribute__((noinline)) Captured CaptureInNamedFunction(int skip) {
  Captured c{StackTrace::capture(skip), __LINE__};
  KEEP_CALLER_FRAME();
  return c;
}

// Returns the capture, with `line` set to the line where this function calls the one above.
__attribute__((noinline)) Captured CallerOfCapture(int skip, int* line) {
  Captured c = CaptureInNamedFunction(skip); *line = __LINE__;
  KEEP_CALLER_FRAME();
  return c;
}

// Inlined into its caller, so its frame exists only in the debug info.
__attribute__((always_inline)) inline Captured InlinedCapture() {
  return Captured{StackTrace::capture(), __LINE__};
}

__attribute__((noinline)) Captured CallsInlinedCapture(int* line) {
  Captured c = InlinedCapture(); *line = __LINE__;
  KEEP_CALLER_FRAME();
  return c;
}

__attribute__((noinline)) Captured CallsInlinedLambda(int* line) {
  auto lambda = []() __attribute__((always_inline)) {
    return Captured{StackTrace::capture(), __LINE__};
  };
  Captured c = lambda(); *line = __LINE__;
  KEEP_CALLER_FRAME();
  return c;
}

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Index of the first frame whose function name contains `name`, or -1.
int Find(const std::vector<StackFrame>& frames, const std::string& name, int from = 0) {
  for (int i = from; i < static_cast<int>(frames.size()); ++i)
    if (frames[i].function.find(name) != std::string::npos) return i;
  return -1;
}

TEST(StackTrace, CaptureSymbolizesToNamedFunctionFileAndLine) {
  int caller_line = 0;
  Captured c = CallerOfCapture(0, &caller_line);
  ASSERT_FALSE(c.trace.empty());
  EXPECT_LE(c.trace.size(), static_cast<size_t>(StackTrace::kMaxFrames));
  std::vector<StackFrame> frames = c.trace.symbolize();
  ASSERT_FALSE(frames.empty());

  // capture() leaves itself out: the innermost frame is the function that called it.
  EXPECT_NE(frames[0].function.find("CaptureInNamedFunction"), std::string::npos)
      << frames[0].function;
  EXPECT_EQ(Basename(frames[0].file), "stack_trace_test.cc");
  EXPECT_NEAR(frames[0].line, c.line, 2);
  EXPECT_FALSE(frames[0].module.empty());
  EXPECT_EQ(frames[0].pc, c.trace.pcs()[0]);

  int caller = Find(frames, "CallerOfCapture", 1);
  ASSERT_GE(caller, 1);
  EXPECT_EQ(Basename(frames[caller].file), "stack_trace_test.cc");
  EXPECT_NEAR(frames[caller].line, caller_line, 2);
  EXPECT_GT(Find(frames, "CaptureSymbolizesToNamedFunctionFileAndLine", caller + 1), caller);
}

TEST(StackTrace, SkipDropsFramesAboveTheCaller) {
  int caller_line = 0;
  std::vector<StackFrame> frames = CallerOfCapture(1, &caller_line).trace.symbolize();
  ASSERT_FALSE(frames.empty());
  EXPECT_NE(frames[0].function.find("CallerOfCapture"), std::string::npos) << frames[0].function;
  EXPECT_EQ(Find(frames, "CaptureInNamedFunction"), -1);
}

TEST(StackTrace, InlinedFunctionsGetTheirOwnFrames) {
  int outer_line = 0;
  Captured c = CallsInlinedCapture(&outer_line);
  std::vector<StackFrame> frames = c.trace.symbolize();
  ASSERT_GE(frames.size(), 2u);
  EXPECT_NE(frames[0].function.find("InlinedCapture"), std::string::npos) << frames[0].function;
  EXPECT_NEAR(frames[0].line, c.line, 2);
  EXPECT_NE(frames[1].function.find("CallsInlinedCapture"), std::string::npos)
      << frames[1].function;
  EXPECT_NEAR(frames[1].line, outer_line, 2);
  EXPECT_EQ(Basename(frames[0].file), "stack_trace_test.cc");
  EXPECT_EQ(Basename(frames[1].file), "stack_trace_test.cc");  // from the inlining's call_file
  EXPECT_EQ(frames[0].pc, frames[1].pc);  // one return address, two frames
}

TEST(StackTrace, InlinedLambdaIsNamedAfterItsFunction) {
  for (int round = 0; round < 2; ++round) {  // the second time the name comes from a cache
    int outer_line = 0;
    Captured c = CallsInlinedLambda(&outer_line);
    std::vector<StackFrame> frames = c.trace.symbolize();
    ASSERT_GE(frames.size(), 2u);
    EXPECT_NE(frames[0].function.find("CallsInlinedLambda"), std::string::npos)
        << frames[0].function;
    EXPECT_NE(frames[0].function.find("{lambda}::operator()"), std::string::npos)
        << frames[0].function;
    EXPECT_NEAR(frames[0].line, c.line, 2);
    EXPECT_NE(frames[1].function.find("CallsInlinedLambda"), std::string::npos)
        << frames[1].function;
    EXPECT_NEAR(frames[1].line, outer_line, 2);
  }
}

TEST(StackTrace, UserFramesDropRuntimeFrames) {
  int caller_line = 0;
  Captured c = CallerOfCapture(0, &caller_line);
  std::vector<StackFrame> all = c.trace.symbolize();
  // Under GoogleTest the test body is called by testing::internal code, and main by libc.
  auto is_gtest = [](const StackFrame& f) {
    return f.function.find("testing::") != std::string::npos;
  };
  auto is_libc = [](const StackFrame& f) {
    return f.module.find("libc.so") != std::string::npos;
  };
  ASSERT_TRUE(std::any_of(all.begin(), all.end(), is_gtest));
  ASSERT_TRUE(std::any_of(all.begin(), all.end(), is_libc));

  std::vector<StackFrame> user = c.trace.user_frames();
  EXPECT_FALSE(std::any_of(user.begin(), user.end(), is_gtest));
  EXPECT_FALSE(std::any_of(user.begin(), user.end(), is_libc));
  ASSERT_GE(user.size(), 3u);
  EXPECT_EQ(Find(user, "CaptureInNamedFunction"), 0);
  EXPECT_EQ(Find(user, "CallerOfCapture"), 1);
  EXPECT_EQ(Find(user, "UserFramesDropRuntimeFrames"), 2);
}

TEST(StackTrace, IsUserFrameClassifiesInternalAndRuntimeFrames) {
  const std::string src = FJIT_SOURCE_DIR;
  const std::string exe = "/work/app/build/train";
  auto frame = [&](std::string fn, std::string file, std::string module) {
    return StackFrame{0x1234, std::move(fn), std::move(file), 10, std::move(module)};
  };
  // fjit's own code, by path or by name when there is no debug info.
  EXPECT_FALSE(fjit::is_user_frame(frame("fjit::matmul()", src + "/core/tensor.cc", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("f()", src + "/parallel/pmap.h", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("f()", src + "/checks/check.cc", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("fjit::detail::build(int)", "", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("fjit::Tensor fjit::apply<float>(float)", "", exe)));
  // The runtime.
  EXPECT_FALSE(fjit::is_user_frame(
      frame("__libc_start_call_main", "", "/usr/lib/x86_64-linux-gnu/libc.so.6")));
  EXPECT_FALSE(fjit::is_user_frame(frame("_start", "", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("std::function<void ()>::operator()() const",
                                         "/usr/include/c++/12/bits/std_function.h", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame(
      "void testing::internal::HandleExceptionsInMethodIfSupported<testing::Test, void>"
      "(testing::Test*, void (testing::Test::*)(), char const*)",
      "", exe)));
  EXPECT_FALSE(fjit::is_user_frame(frame("main", "", exe)));  // gtest_main's
  EXPECT_FALSE(fjit::is_user_frame(frame("", "", exe)));
  // User code: tests and examples of this tree, other trees, names that merely look alike.
  EXPECT_TRUE(fjit::is_user_frame(frame("loss_fn()", src + "/examples/mnist.cc", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("main", src + "/examples/mnist.cc", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("T::TestBody()", src + "/tests/x_test.cc", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("model::step()", "/work/app/core/step.cc", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("fjit::user_hook()", src + "/examples/a.cc", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("_start_engine()", "", exe)));
  EXPECT_TRUE(fjit::is_user_frame(frame("clone_params()", "", exe)));
}

TEST(StackTrace, ToStringShowsUserFramesRelativeToSourceTree) {
  int caller_line = 0;
  Captured c = CallerOfCapture(0, &caller_line);
  std::string s = c.trace.to_string();
  EXPECT_EQ(s.rfind("  at ", 0), 0u) << s;
  EXPECT_NE(s.find("CaptureInNamedFunction"), std::string::npos) << s;
  EXPECT_NE(s.find("CallerOfCapture"), std::string::npos) << s;
  EXPECT_NE(s.find("(tests/stack_trace_test.cc:" + std::to_string(c.line)), std::string::npos)
      << s;
  EXPECT_EQ(s.find("testing::"), std::string::npos) << s;
  EXPECT_EQ(s.find(std::string(FJIT_SOURCE_DIR) + "/"), std::string::npos) << s;

  std::string one = c.trace.to_string(1);
  EXPECT_EQ(one.find("  at ", 1), std::string::npos) << one;  // exactly one frame line
  EXPECT_NE(one.find("CaptureInNamedFunction"), std::string::npos) << one;
  EXPECT_NE(one.find("more frames"), std::string::npos) << one;
}

TEST(StackTrace, UserCallSiteIsInnermostUserFrame) {
  int caller_line = 0;
  Captured c = CallerOfCapture(0, &caller_line);
  std::string site = fjit::user_call_site(c.trace);
  const std::string prefix = "tests/stack_trace_test.cc:";
  ASSERT_EQ(site.rfind(prefix, 0), 0u) << site;
  EXPECT_NEAR(std::stoi(site.substr(prefix.size())), c.line, 2) << site;
  EXPECT_NE(site.find("CaptureInNamedFunction(int))"), std::string::npos) << site;
  // Skipping the capturing function makes its caller the call site.
  EXPECT_NE(fjit::user_call_site(CallerOfCapture(1, &caller_line).trace).find("CallerOfCapture"),
            std::string::npos);
}

TEST(StackTrace, EmptyTraceSymbolizesToNothing) {
  StackTrace t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.pcs().empty());
  EXPECT_TRUE(t.symbolize().empty());
  EXPECT_TRUE(t.user_frames().empty());
  EXPECT_EQ(t.to_string(), "");
  EXPECT_EQ(fjit::user_call_site(t), "<unknown>");
  // Skipping more frames than the stack holds gives an empty trace, not garbage.
  EXPECT_TRUE(StackTrace::capture(StackTrace::kMaxFrames).empty());
}

TEST(StackTrace, AddressesWithoutDebugInfoNeverCrash) {
  const auto in_libc = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "getpid"));
  ASSERT_NE(in_libc, 0u);
  const std::vector<uintptr_t> pcs = {0, 1, 0xdeadbeef, ~uintptr_t{0}, in_libc + 1};
  StackTrace t = StackTrace::from_pcs(pcs);
  ASSERT_EQ(t.pcs(), pcs);
  std::vector<StackFrame> frames = t.symbolize();
  ASSERT_EQ(frames.size(), pcs.size());
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(frames[i].pc, pcs[i]);
    EXPECT_TRUE(frames[i].file.empty()) << frames[i].file;
    EXPECT_EQ(frames[i].line, 0);
  }
  EXPECT_NE(frames[4].module.find("libc.so"), std::string::npos) << frames[4].module;
  EXPECT_NE(frames[4].function.find("getpid"), std::string::npos) << frames[4].function;
  EXPECT_TRUE(t.user_frames().empty());  // nothing here is user code
  EXPECT_EQ(fjit::user_call_site(t), "<unknown>");
  EXPECT_EQ(StackTrace::from_pcs(std::vector<uintptr_t>(100, in_libc)).size(),
            static_cast<size_t>(StackTrace::kMaxFrames));
}

TEST(StackTrace, ConcurrentCaptureAndSymbolizeIsSafe) {
  constexpr int kThreads = 4, kIterations = 100;
  int shared_line = 0;
  const Captured shared = CallerOfCapture(0, &shared_line);  // symbolized by every thread
  std::atomic<int> good{0}, bad{0};
  std::latch start(kThreads);
  auto ok = [](const std::vector<StackFrame>& frames) {
    int i = Find(frames, "CaptureInNamedFunction");
    return i >= 0 && Basename(frames[i].file) == "stack_trace_test.cc" &&
           Find(frames, "CallerOfCapture", i + 1) > i;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();  // all threads start symbolizing together
      for (int k = 0; k < kIterations; ++k) {
        int line = 0;
        Captured mine = CallerOfCapture(0, &line);
        // An address in no module makes the session re-read the process's modules, racing
        // with the other threads' lookups.
        StackTrace stray = StackTrace::from_pcs({0xdeadbeef});
        // The thread's own user frames are all in this file: std::thread's are dropped.
        std::vector<StackFrame> user = mine.trace.user_frames();
        bool fine = ok(mine.trace.symbolize()) && ok(shared.trace.symbolize()) &&
                    user.size() >= 3 &&
                    std::all_of(user.begin(), user.end(), [](const StackFrame& f) {
                      return Basename(f.file) == "stack_trace_test.cc";
                    }) &&
                    stray.symbolize().size() == 1 &&
                    fjit::user_call_site(mine.trace).rfind("tests/stack_trace_test.cc:", 0) == 0;
        (fine ? good : bad).fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(good.load(), kThreads * kIterations);
}

}  // namespace
