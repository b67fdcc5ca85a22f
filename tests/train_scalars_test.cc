// The trainer's scalar log (TrainOptions::log_dir, parallel/train/train_scalars.h) read back:
// the JSON lines hold the documented tags at the documented steps, with the values a run
// stepped by hand produces, and the TensorBoard event file (read by tests/event_file_reader.h,
// CRCs verified) holds the same scalars.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/scalar_log.h"
#include "lib/trainer.h"
#include "tests/fixture_data.h"
#include "tests/event_file_reader.h"

namespace fjit::examples {
namespace {

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

namespace fs = std::filesystem;

using fjit::testing::fixture;

TrainOptions options(const fs::path& log_dir) {
  TrainOptions o;
  o.batch_size = 8;  // 2 steps per epoch of the 16-example fixture
  o.epochs = 3;
  o.seed = 11;
  o.log_every = 2;
  o.eval_batch_size = 16;
  o.log_dir = log_dir.string();
  return o;
}

using Key = std::pair<std::string, int64_t>;  // tag, step

std::map<Key, nlohmann::json> read_lines(const fs::path& dir) {
  std::map<Key, nlohmann::json> out;
  std::ifstream in(dir / io::kScalarLinesFile);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_TRUE(out.emplace(Key{j["tag"], j["step"]}, j["value"]).second) << "twice: " << line;
  }
  return out;
}

TEST(TrainScalars, JsonLinesAndEventsHoldTheRunsScalars) {
  const fs::path dir = fs::temp_directory_path() / ("fjit_train_scalars_" + std::to_string(getpid()));
  fs::remove_all(dir);
  Trainer run(Mesh::threads(2), options(dir), fixture(), fixture());
  const double final_accuracy = run.run();

  // The same run stepped by hand: the per-step values the log averages.
  TrainOptions by_hand_options = options(dir);
  by_hand_options.log_dir.clear();
  Trainer by_hand(Mesh::threads(2), by_hand_options, fixture(), fixture());
  std::vector<double> loss, accuracy, norm, lr;
  while (std::optional<StepStats> s = by_hand.step()) {
    loss.push_back(s->loss);
    accuracy.push_back(by_hand.last_train_accuracy());
    norm.push_back(by_hand.last_grad_norm());
    lr.push_back(s->lr);
  }
  ASSERT_EQ(loss.size(), 6u);

  const std::map<Key, nlohmann::json> lines = read_lines(dir);
  for (int64_t step : {2, 4, 6}) {
    const size_t a = step - 2, b = step - 1;  // the two steps of the window
    EXPECT_DOUBLE_EQ(lines.at({"train/loss", step}).get<double>(), (loss[a] + loss[b]) / 2) << step;
    EXPECT_DOUBLE_EQ(lines.at({"train/accuracy", step}).get<double>(), (accuracy[a] + accuracy[b]) / 2);
    EXPECT_DOUBLE_EQ(lines.at({"train/grad_norm", step}).get<double>(), (norm[a] + norm[b]) / 2);
    EXPECT_DOUBLE_EQ(lines.at({"train/learning_rate", step}).get<double>(), lr[b]);
    EXPECT_GT(lines.at({"train/examples_per_second", step}).get<double>(), 0);
    EXPECT_EQ(lines.at({"checks/raised", step}).get<double>(), 0);
    EXPECT_EQ(lines.at({"checks/skipped_steps", step}).get<double>(), 0);
    EXPECT_TRUE(lines.count({"eval/accuracy", step})) << step;
  }
  EXPECT_EQ(lines.size(), 3u * 8u);
  EXPECT_DOUBLE_EQ(lines.at({"eval/accuracy", 6}).get<double>(), final_accuracy);

  // The event file: a version record, then the same scalars as floats.
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<testing::DecodedEvent> events = testing::read_event_file(files[0].string());
  ASSERT_EQ(events.size(), lines.size() + 1);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (size_t i = 1; i < events.size(); ++i) {
    const auto it = lines.find({events[i].tag, events[i].step});
    ASSERT_NE(it, lines.end()) << events[i].tag << " at " << events[i].step;
    EXPECT_EQ(events[i].value, static_cast<float>(it->second.get<double>())) << events[i].tag;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fjit::examples
