// The timeline's job-wide view (core/base/timeline_merge.h, core/base/timeline.h): hand-written
// rank files merge into one process per replica on a time base starting at 0; bad inputs are
// refused naming the file; a file is written on the aligned time base with its offset and
// error bound; the HTML view draws every replica with no network resources.
#include "core/base/timeline_merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "core/base/timeline.h"
#include "core/base/timeline_testing.h"
#include "nlohmann/json.hpp"

namespace fjit::timeline {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid()) + ".json";
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Rank 0 of a 2-rank job on host h0, and rank 1 on host h1 whose clock was 5 s ahead.
const char* kRank0 = R"({"traceEvents": [
  {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "fjit rank 0"}},
  {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "replica 0"}},
  {"name": "compile f", "cat": "compile", "ph": "X", "pid": 0, "tid": 0, "ts": 990.0, "dur": 5.0},
  {"name": "step 0", "cat": "step", "ph": "X", "pid": 0, "tid": 0, "ts": 1000.0, "dur": 100.0,
   "args": {"step": 0}},
  {"name": "psum", "cat": "collective", "ph": "X", "pid": 0, "tid": 0, "ts": 1010.0, "dur": 20.0,
   "args": {"bytes": 4}}],
 "otherData": {"process": 0, "processes": 2, "host": "h0", "time_base": "rank 0 clock",
               "clock_offset_ns": 0, "clock_error_ns": 0}})";
const char* kRank1 = R"({"traceEvents": [
  {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "fjit rank 1"}},
  {"name": "step 0", "cat": "step", "ph": "X", "pid": 1, "tid": 1, "ts": 1005.0, "dur": 90.0,
   "args": {"step": 0}},
  {"name": "psum", "cat": "collective", "ph": "X", "pid": 1, "tid": 1, "ts": 1025.0, "dur": 5.0},
  {"name": "check raised", "cat": "check", "ph": "i", "s": "t", "pid": 1, "tid": 1, "ts": 1060.0,
   "args": {"message": "nan in log"}}],
 "otherData": {"process": 1, "processes": 2, "host": "h1", "time_base": "rank 0 clock",
               "clock_offset_ns": -5000000000, "clock_error_ns": 300}})";

TEST(TimelineMerge, OneProcessPerReplicaFromZeroWithTheSourcesClocks) {
  const std::string a = write_file("merge_r0", kRank0), b = write_file("merge_r1", kRank1);
  const std::string out = temp_path("merge_out");
  const MergeResult r = merge({a, b}, out);
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.replicas, 2);
  EXPECT_TRUE(r.aligned);
  EXPECT_EQ(r.clock_error_ns, 300);

  const nlohmann::json j = load(out);
  std::map<int, std::string> names;
  std::map<std::string, double> ts;  // "pid:name" -> ts
  double last = -1;
  int events = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
      continue;
    }
    ++events;
    EXPECT_EQ(e["pid"], e["tid"]);
    EXPECT_GE(e["ts"].get<double>(), last) << "events in time order";
    last = e["ts"].get<double>();
    ts[std::to_string(e["pid"].get<int>()) + ":" + e["name"].get<std::string>()] = last;
  }
  EXPECT_EQ(events, 6);
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "replica 0 (rank 0, host h0)"},
                                                {1, "replica 1 (rank 1, host h1)"}}));
  // The earliest event (rank 0's compile at 990 us) is the origin; the rest keep their gaps.
  EXPECT_DOUBLE_EQ(ts["0:compile f"], 0.0);
  EXPECT_DOUBLE_EQ(ts["0:step 0"], 10.0);
  EXPECT_DOUBLE_EQ(ts["1:step 0"], 15.0);
  EXPECT_DOUBLE_EQ(ts["1:psum"], 35.0);
  EXPECT_DOUBLE_EQ(ts["1:check raised"], 70.0);
  EXPECT_EQ(j["otherData"]["time_base"], "rank 0 clock");
  EXPECT_DOUBLE_EQ(j["otherData"]["origin_us"].get<double>(), 990.0);
  ASSERT_EQ(j["otherData"]["sources"].size(), 2u);
  EXPECT_EQ(j["otherData"]["sources"][1]["clock_offset_ns"].get<int64_t>(), -5000000000);
  EXPECT_EQ(j["otherData"]["sources"][1]["host"], "h1");

  // The picture of it: both rows, every category's colour, nothing fetched from a network.
  const std::string html = temp_path("merge_view") + ".html";
  write_html_view(out, html, ViewOptions{.last_steps = 1, .width = 800, .title = "two ranks"});
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("replica 0 (rank 0, host h0)"), std::string::npos);
  EXPECT_NE(page.find("replica 1 (rank 1, host h1)"), std::string::npos);
  EXPECT_NE(page.find("psum (0.020 ms)"), std::string::npos);
  EXPECT_NE(page.find("nan in log"), std::string::npos);  // the check's mark
  EXPECT_NE(page.find("clocks aligned to rank 0's within 0.3 us"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);
  for (const std::string& p : {a, b, out, html}) std::remove(p.c_str());
}

TEST(TimelineMerge, FilesOnTheirOwnClocksMergeButSaySo) {
  nlohmann::json r1 = nlohmann::json::parse(kRank1);
  r1.erase("otherData");
  const std::string a = write_file("own_r0", kRank0), b = write_file("own_r1", r1.dump());
  const std::string out = temp_path("own_out");
  const MergeResult r = merge({a, b}, out);
  EXPECT_FALSE(r.aligned);
  EXPECT_EQ(load(out)["otherData"]["time_base"], "unaligned");
  for (const std::string& p : {a, b, out}) std::remove(p.c_str());
}

void expect_refused(const std::vector<std::string>& inputs, const std::string& out,
                    const std::vector<std::string>& mentions) {
  try {
    merge(inputs, out);
    ADD_FAILURE() << "merge accepted bad input";
  } catch (const std::runtime_error& e) {
    for (const std::string& m : mentions) EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << e.what();
  }
}

TEST(TimelineMerge, BadInputsAreRefusedNamingTheFile) {
  const std::string a = write_file("bad_r0", kRank0);
  const std::string copy = write_file("bad_r0_copy", kRank0);
  const std::string not_json = write_file("bad_text", "step 0 took 3 ms\n");
  const std::string no_events = write_file("bad_obj", R"({"events": []})");
  const std::string no_ts = write_file("bad_ts", R"({"traceEvents": [{"ph": "X", "tid": 0}]})");
  const std::string out = temp_path("bad_out");
  expect_refused({a, copy}, out, {"replica 0", a, copy});
  expect_refused({a, not_json}, out, {not_json, "not JSON"});
  expect_refused({no_events}, out, {no_events, "traceEvents"});
  expect_refused({no_ts}, out, {no_ts, "ts"});
  expect_refused({a, temp_path("missing")}, out, {temp_path("missing")});
  expect_refused({a}, "/nonexistent_dir/x.json", {"/nonexistent_dir/x.json"});
  EXPECT_THROW(merge({}, out), std::invalid_argument);
  for (const std::string& p : {a, copy, not_json, no_events, no_ts, out}) std::remove(p.c_str());
}

// A file written after set_clock_offset(): every timestamp is this process's reading plus the
// skew and the offset, on the absolute time base, and the metadata carries the offset.
TEST(TimelineMerge, AlignedFileIsOnTheJobsTimeBaseWithItsOffset) {
  const std::string path = temp_path("aligned");
  testing::set_clock_skew(2'000'000);
  set_clock_offset({.offset_ns = -2'000'500, .error_ns = 700});
  start(path, 4);
  set_track(0);
  begin_step(7, 10'000'000);
  event("mul", "op", 10'001'000, 10'003'000, 64);
  end_step(10'010'000);
  ASSERT_TRUE(stop());
  const nlohmann::json j = load(path);
  EXPECT_EQ(j["otherData"]["time_base"], "rank 0 clock");
  EXPECT_EQ(j["otherData"]["clock_offset_ns"], -2'000'500);
  EXPECT_EQ(j["otherData"]["clock_error_ns"], 700);
  std::map<std::string, double> ts;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") ts[e["name"]] = e["ts"].get<double>();
  // (reading + 2'000'000 - 2'000'500) ns, in microseconds.
  EXPECT_DOUBLE_EQ(ts["step 7"], 9'999.5);
  EXPECT_DOUBLE_EQ(ts["mul"], 10'000.5);
  EXPECT_GE(clock_ns(), 2'000'000);
  testing::set_clock_skew(0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace fjit::timeline
