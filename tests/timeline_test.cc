// The timeline (core/base/timeline.h): a 2-replica pmap run is written as trace-event JSON
// with one track per replica, its last N steps (the ring), instructions inside their steps,
// collectives with their bytes, the compile, and a raised check; nothing is recorded when off.
#include "core/base/timeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "fjit.h"
#include "nlohmann/json.hpp"

namespace fjit {
namespace {

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid()) + ".json";
}

TEST(Timeline, TwoReplicasOneTrackEachWithTheLastStepsOnly) {
  const std::string path = temp_path("timeline");
  timeline::start(path, /*max_steps=*/3);
  Mesh mesh = Mesh::threads(2);
  auto total = pmap(mesh, "i", [](const Tensor& v) { return psum(sum(exp(v) * 2.0f), "i"); });
  Array x = Array::from_vector<float>({0, 1, 2, 3}, {4});
  for (int s = 0; s < 5; ++s) total(x);
  ASSERT_TRUE(timeline::stop());
  EXPECT_FALSE(timeline::enabled());

  const nlohmann::json j = load(path);
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<int, std::string> track_names;
  std::map<int, std::vector<std::pair<double, double>>> steps;  // per track: [ts, end)
  std::map<int, std::set<int64_t>> step_numbers;
  int compiles = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") track_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X" && e["cat"] == "step") {
      steps[e["tid"]].emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
      step_numbers[e["tid"]].insert(e["args"]["step"].get<int64_t>());
    }
    if (e["ph"] == "X" && e["cat"] == "compile") ++compiles;
  }
  ASSERT_EQ(track_names.size(), 2u);
  EXPECT_EQ(track_names[0], "replica 0");
  EXPECT_EQ(track_names[1], "replica 1");
  EXPECT_GE(compiles, 1);
  for (int tid : {0, 1}) EXPECT_EQ(step_numbers[tid], (std::set<int64_t>{2, 3, 4})) << tid;

  // Every instruction lies inside one of its own track's steps; each track has the psum with
  // the bytes of its f32 scalar.
  std::map<int, int> collectives;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || (e["cat"] != "op" && e["cat"] != "collective")) continue;
    const int tid = e["tid"];
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    bool inside = false;
    for (auto [a, b] : steps[tid]) inside |= a <= ts + 1e-3 && end <= b + 1e-3;
    EXPECT_TRUE(inside) << e.dump();
    if (e["cat"] == "collective") {
      ++collectives[tid];
      EXPECT_EQ(e["args"]["bytes"].get<int64_t>(), 4) << e.dump();
    }
  }
  for (int tid : {0, 1}) EXPECT_EQ(collectives[tid], 3) << "one psum per recorded step";
  std::remove(path.c_str());
}

TEST(Timeline, RaisedCheckIsAnInstantEventAndOffRecordsNothing) {
  const std::string path = temp_path("timeline_check");
  JitOptions o;
  o.policy = CheckPolicy::log;
  o.checks = CheckMode::user;
  auto f = jit([](const Tensor& x) {
    check(all(x > 0.0f), "x must be positive");
    return x * 2.0f;
  }, o);
  Array bad = Array::from_vector<float>({1, -1}, {2});
  timeline::start(path);
  f(bad);
  ASSERT_TRUE(timeline::stop());
  f(bad);  // off: must not reach the file or the recorder
  const nlohmann::json j = load(path);
  int raised = 0, recorded_steps = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "i" && e["name"] == "check raised") {
      ++raised;
      EXPECT_NE(e["args"]["message"].get<std::string>().find("x must be positive"), std::string::npos);
    }
    if (e["ph"] == "X" && e["cat"] == "step") ++recorded_steps;
  }
  EXPECT_EQ(raised, 1);
  EXPECT_EQ(recorded_steps, 1);
  std::remove(path.c_str());
}

TEST(Timeline, MetricsJsonHasTheReportsFigures) {
  metrics().reset();
  auto f = jit([](const Tensor& x) { return x + 1.0f; });
  Array x = Array::from_vector<float>({1, 2}, {2});
  f(x);
  f(x);
  const nlohmann::json m = nlohmann::json::parse(metrics_json());
  EXPECT_EQ(m["compile"]["compiles"].get<int64_t>(), 1);
  EXPECT_EQ(m["compile"]["cache_hits"].get<int64_t>(), metrics().cache_hits.load());
  EXPECT_EQ(m["execute"]["time"]["count"].get<int64_t>(), 2);
  EXPECT_GT(m["execute"]["time"]["total_ns"].get<int64_t>(), 0);
  EXPECT_TRUE(m["checks"].contains("raised"));
}

}  // namespace
}  // namespace fjit
