// Mesh from the command line and environment, and the intra-op threads each replica gets.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/base/threads.h"
#include "parallel/backends.h"
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

TEST(Mesh, BackendsAreChosenThroughTheRegistry) {
  std::vector<std::string> names;
  for (const Backend& b : backends()) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mpi", "threads"}));

  Mesh m = make_mesh("threads", 3, nullptr, nullptr);
  EXPECT_EQ(m.backend(), "threads");
  EXPECT_EQ(m.description(), "threads");
  EXPECT_EQ(m.size(), 3);
  EXPECT_EQ(m.local_size(), 3);
  EXPECT_EQ(m.processes(), 1);
  EXPECT_EQ(m.process_comm(), nullptr);  // one process: nothing to agree on with others
  EXPECT_EQ(m.comm(2).rank(), 2);
  EXPECT_EQ(m.comm(2).backend(), "threads");

  try {
    make_mesh("carrier-pigeon", 2, nullptr, nullptr);
    ADD_FAILURE() << "an unknown backend must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'carrier-pigeon' (known: mpi, threads)"),
              std::string::npos) << e.what();
  }

  // FJIT_BACKEND picks by name, and a wrong name says where it came from.
  char arg0[] = "prog";
  char* argv[] = {arg0, nullptr};
  int argc = 1;
  setenv("FJIT_BACKEND", "threads", 1);
  setenv("FJIT_REPLICAS", "2", 1);
  EXPECT_EQ(Mesh::from_environment(argc, argv).size(), 2);
  setenv("FJIT_BACKEND", "nccl", 1);
  try {
    Mesh::from_environment(argc, argv);
    ADD_FAILURE() << "FJIT_BACKEND=nccl must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FJIT_BACKEND: unknown backend 'nccl'"), std::string::npos)
        << e.what();
  }
  unsetenv("FJIT_BACKEND");
  unsetenv("FJIT_REPLICAS");
}

TEST(Mesh, ShardsOfOneProcessAreRowViews) {
  Mesh m = Mesh::threads(3);
  Array batch = Array::from_vector<float>({0, 1, 2, 3, 4, 5, 6}, {7});
  std::vector<Array> parts = m.shard(batch);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape()[0], 3);
  EXPECT_EQ(parts[1].shape()[0], 2);
  EXPECT_EQ(parts[2].shape()[0], 2);
  EXPECT_TRUE(parts[1].shares_storage_with(batch));
  EXPECT_EQ(parts[2].data<float>()[0], 5.0f);
}

}  // namespace
}  // namespace fjit
