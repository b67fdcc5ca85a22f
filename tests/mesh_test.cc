// Mesh from the command line and environment, and the intra-op threads each replica gets.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/threads.h"
#include "parallel/mesh.h"

namespace fjit {
namespace {

// argv as a main() would get it, with its terminating null.
struct Argv {
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (auto& s : args) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
    argc = static_cast<int>(args.size());
  }
  std::vector<std::string> args;
  std::vector<char*> ptrs;
  int argc;
};

TEST(Mesh, ReplicasOptionInBothFormsIsReadAndRemoved) {
  unsetenv("FJIT_REPLICAS");
  {
    Argv a({"prog", "--epochs", "2", "--replicas", "3", "--seed", "1"});
    Mesh m = Mesh::from_environment(a.argc, a.ptrs.data());
    EXPECT_EQ(m.size(), 3);
    ASSERT_EQ(a.argc, 5);
    EXPECT_STREQ(a.ptrs[3], "--seed");
    EXPECT_EQ(a.ptrs[5], nullptr);
  }
  {
    Argv a({"prog", "--replicas=2", "--seed", "1"});
    Mesh m = Mesh::from_environment(a.argc, a.ptrs.data());
    EXPECT_EQ(m.size(), 2);
    ASSERT_EQ(a.argc, 3);
    EXPECT_STREQ(a.ptrs[1], "--seed");
    EXPECT_EQ(a.ptrs[3], nullptr);
  }
  {
    setenv("FJIT_REPLICAS", "4", 1);
    Argv a({"prog"});
    EXPECT_EQ(Mesh::from_environment(a.argc, a.ptrs.data()).size(), 4);
    unsetenv("FJIT_REPLICAS");
  }
}

TEST(Mesh, BadReplicaCountsAreClearErrors) {
  unsetenv("FJIT_REPLICAS");
  for (const char* bad : {"0", "two", "2x", "-1"}) {
    Argv a({"prog", std::string("--replicas=") + bad});
    try {
      Mesh::from_environment(a.argc, a.ptrs.data());
      ADD_FAILURE() << "accepted --replicas=" << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--replicas"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  setenv("FJIT_REPLICAS", "lots", 1);
  Argv a({"prog"});
  EXPECT_THROW(Mesh::from_environment(a.argc, a.ptrs.data()), std::invalid_argument);
  unsetenv("FJIT_REPLICAS");
}

TEST(Mesh, EachReplicaRunsWithItsShareOfTheCores) {
  unsetenv("FJIT_INTRA_OP_THREADS");
  for (int n : {1, 2, 3}) {
    Mesh m = Mesh::threads(n);
    EXPECT_EQ(m.intra_op_threads(), default_intra_op_threads(n));
    set_intra_op_threads(7);  // the caller's own setting, restored after each step
    std::vector<int> seen(n, -1);
    m.pool().run([&](int r) { seen[r] = intra_op_threads(); });
#ifdef _OPENMP
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], default_intra_op_threads(n)) << "replica " << r;
    EXPECT_EQ(intra_op_threads(), 7);
#endif
  }
  setenv("FJIT_INTRA_OP_THREADS", "2", 1);
  EXPECT_EQ(Mesh::threads(4).intra_op_threads(), 2);
  unsetenv("FJIT_INTRA_OP_THREADS");
}

}  // namespace
}  // namespace fjit
