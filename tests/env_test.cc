// Integer FJIT_* environment variables are read strictly (core/base/config.def, parsed by
// core/base/env.h): a good value is honoured, unset or empty gives the default, and anything
// else is a std::invalid_argument naming the variable, thrown on the caller's thread when the
// jit, pmap or Mesh is made (never on a replica thread), after which the library keeps working
// once the variable is fixed.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/base/env.h"
#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::EnvVar;

const char* const kBadCounts[] = {"0", "-3", "abc", "12x", "1.5", "1e3", "2147483648"};

// Runs `f`, which must throw std::invalid_argument whose message names `variable` and `bad`.
template <class F>
void expect_rejected(const char* variable, const char* bad, F f) {
  try {
    f();
    ADD_FAILURE() << "accepted " << variable << "='" << bad << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
  }
}

using testing::random_f32;

TEST(Env, ParseCountAcceptsOnlyIntegersInRange) {
  EXPECT_EQ(parse_count("1", "N", 10), 1);
  EXPECT_EQ(parse_count("10", "N", 10), 10);
  for (const char* bad : {"", "0", "11", "-1", "x", "3 ", "3.0", " 3", "\v3", "+3", "\n3"}) {
    try {
      parse_count(bad, "N", 10);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("N must be an integer from 1 to 10, got '") + bad + "'");
    }
  }
}

TEST(Env, CountRowsFallBackOnlyWhenUnsetOrEmpty) {
  {
    EnvVar unset("FJIT_TIMELINE_STEPS", nullptr);
    EXPECT_EQ(config::timeline_steps(), 100);
  }
  {
    EnvVar empty("FJIT_TIMELINE_STEPS", "");
    EXPECT_EQ(config::timeline_steps(), 100);
  }
  {
    EnvVar set("FJIT_TIMELINE_STEPS", "42");
    EXPECT_EQ(config::timeline_steps(), 42);
  }
  EnvVar bad("FJIT_TIMELINE_STEPS", "1048577");  // 2^20 + 1
  expect_rejected("FJIT_TIMELINE_STEPS", "1048577", [] { config::timeline_steps(); });
}

TEST(Env, RecompileWarnIsStrict) {
  {
    EnvVar unset("FJIT_RECOMPILE_WARN", nullptr);
    EXPECT_EQ(JitOptions{}.resolved().recompile_warn_threshold, 8);
  }
  {
    EnvVar set("FJIT_RECOMPILE_WARN", "2");
    testing::LogCapture logs;
    JitOptions o;
    o.name = "churn";
    auto f = jit([](const Tensor& x) { return sum(x); }, o);
    EXPECT_EQ(f.core().options().recompile_warn_threshold, 2);
    for (int n = 1; n <= 3; ++n) f(Array::full(DType::f32, {n}, 1.0));
    EXPECT_TRUE(logs.contains("'churn' has been compiled 3 times")) << logs.text();
  }
  for (const char* bad : kBadCounts) {
    EnvVar set("FJIT_RECOMPILE_WARN", bad);
    expect_rejected("FJIT_RECOMPILE_WARN", bad, [] { jit([](const Tensor& x) { return sum(x); }); });
    JitOptions o;
    o.recompile_warn_threshold = 4;  // an API setting means the variable is not read
    o.large_constant_bytes = 1 << 20;
    EXPECT_EQ(o.resolved().recompile_warn_threshold, 4);
  }
}

TEST(Env, LargeConstantBytesIsStrict) {
  {
    EnvVar unset("FJIT_LARGE_CONSTANT_BYTES", nullptr);
    EXPECT_EQ(JitOptions{}.resolved().large_constant_bytes, 1 << 20);
  }
  {
    EnvVar set("FJIT_LARGE_CONSTANT_BYTES", "64");
    testing::LogCapture logs;
    Array c = Array::full(DType::f32, {32}, 2.0);  // 128 bytes > 64
    auto f = jit([&](const Tensor& x) { return x * Tensor(c); });
    EXPECT_FLOAT_EQ(f(Array::full(DType::f32, {32}, 1.0)).data<float>()[0], 2.0f);
    EXPECT_TRUE(logs.contains("captured a large constant f32[32]")) << logs.text();
  }
  for (const char* bad : kBadCounts) {
    EnvVar set("FJIT_LARGE_CONSTANT_BYTES", bad);
    expect_rejected("FJIT_LARGE_CONSTANT_BYTES", bad, [] { JitOptions{}.resolved(); });
  }
}

TEST(Env, FusionBytesIsStrictAndRaisedTo1024) {
  auto bytes = [] { return JitOptions{}.resolved().fusion_bytes; };
  {
    EnvVar unset("FJIT_FUSION_BYTES", nullptr);
    EXPECT_EQ(bytes(), 1 << 20);
  }
  {
    EnvVar empty("FJIT_FUSION_BYTES", "");
    EXPECT_EQ(bytes(), 1 << 20);
  }
  {
    EnvVar set("FJIT_FUSION_BYTES", "4096");
    EXPECT_EQ(bytes(), 4096);
  }
  {
    EnvVar set("FJIT_FUSION_BYTES", "100");
    EXPECT_EQ(bytes(), 1024);  // the documented minimum
  }
  for (const char* bad : kBadCounts) {
    EnvVar set("FJIT_FUSION_BYTES", bad);
    expect_rejected("FJIT_FUSION_BYTES", bad, bytes);
    JitOptions o;
    o.fusion_bytes = 2048;  // an API setting means the variable is not read
    EXPECT_EQ(o.resolved().fusion_bytes, 2048);
  }
}

// The variable is read once, when the pmap is made: a malformed one is refused there, on the
// caller's thread, and the mesh works on; a good one holds for that pmap's traces whatever the
// environment says later.
TEST(Env, FusionBytesIsReadWhenThePmapIsMade) {
  Mesh mesh = Mesh::threads(2);
  auto reduce = [](const Params& g, const Tensor&) { return pmean(g, "b"); };
  ArrayDict g{{"a", random_f32({64, 32}, 1)}, {"b", random_f32({32}, 2)}, {"c", random_f32({32, 10}, 3)}};
  const Array x(DType::f32, {2, 1});
  {
    EnvVar set("FJIT_FUSION_BYTES", "1MiB");
    expect_rejected("FJIT_FUSION_BYTES", "1MiB", [&] { pmap(mesh, "b", reduce); });
  }
  auto f = [&] {
    EnvVar set("FJIT_FUSION_BYTES", "1024");  // every tensor here is reduced alone
    return pmap(mesh, "b", reduce);
  }();
  ArrayDict r = f(g, x);
  int collectives = 0;
  for (const Node& n : f.core().last_entry()->exe->graph->nodes()) collectives += n.op == Op::AllReduce;
  EXPECT_EQ(collectives, 3);
  for (const char* k : {"a", "b", "c"})
    for (int64_t i = 0; i < g[k].size(); ++i) EXPECT_FLOAT_EQ(r[k].data<float>()[i], g[k].data<float>()[i]);
}

auto drifting_pmap(Mesh& mesh) {
  return pmap(mesh, "b", [](const Params& p, const Tensor&) {
    TensorDict next;
    next.set("drifting", p["drifting"] + cast(axis_index("b"), DType::f32));  // differs per replica
    return next;
  });
}

TEST(Env, DivergenceCheckEveryIsStrictAndZeroIsOff) {
  Mesh mesh = Mesh::threads(2);
  ArrayDict p{{"drifting", random_f32({3}, 2)}};
  const Array x(DType::f32, {2, 1});
  for (const char* off : {"0", ""}) {
    EnvVar set("FJIT_DIVERGENCE_CHECK_EVERY", off);
    auto f = drifting_pmap(mesh);
    EXPECT_NO_THROW(f(p, x)) << "FJIT_DIVERGENCE_CHECK_EVERY='" << off << "'";
  }
  {
    EnvVar set("FJIT_DIVERGENCE_CHECK_EVERY", "2");
    auto f = drifting_pmap(mesh);
    EXPECT_NO_THROW(f(p, x));                          // step 1: not compared
    EXPECT_THROW(f(p, x), ReplicaMismatchError);       // step 2: compared
  }
  for (const char* bad : {"-1", "abc", "2x", "1.5", " ", "2147483648"}) {
    EnvVar set("FJIT_DIVERGENCE_CHECK_EVERY", bad);
    try {
      drifting_pmap(mesh);
      ADD_FAILURE() << "accepted FJIT_DIVERGENCE_CHECK_EVERY='" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("FJIT_DIVERGENCE_CHECK_EVERY must be 0 (off) or an integer"),
                std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
    PmapOptions o;
    o.divergence_check_every = 0;  // an API setting means the variable is not read
    EXPECT_NO_THROW(pmap(mesh, "b", [](const Tensor& t) { return psum(sum(t), "b"); }, o));
  }
  auto f = drifting_pmap(mesh);  // the mesh still works after the rejected constructions
  EXPECT_NO_THROW(f(p, x));
}

}  // namespace
}  // namespace fjit
