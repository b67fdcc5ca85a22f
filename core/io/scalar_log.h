// ScalarLog: a run's scalars (loss, learning rate, accuracy, ...) written twice, for people
// and for tools: as JSON lines and as a TensorBoard event file (core/io/tensorboard.h).
//
// In `dir`:
//   scalars.jsonl   one JSON object per scalar and line, appended to (a resumed run continues
//                   the file): {"step": 100, "tag": "train/loss", "value": 0.4123,
//                   "wall_time": 1764151200.25}; value is a double, null when not finite
//                   (JSON has no NaN). Read with pandas.read_json(path, lines=True) or jq.
//   events.out.tfevents.<seconds>.<host>
//                   a new event file per ScalarLog: `tensorboard --logdir dir` plots every
//                   tag, and files of earlier (resumed) runs are read together by step.
// Both are flushed by flush(), so a reader sees whole lines and records. Throws
// std::runtime_error naming the file on an I/O error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/io/tensorboard.h"

namespace fjit::io {

inline constexpr const char* kScalarLinesFile = "scalars.jsonl";

class ScalarLog {
 public:
  // Creates `dir` if needed, opens its scalars.jsonl for appending and a new event file.
  explicit ScalarLog(const std::string& dir);
  ~ScalarLog();
  ScalarLog(const ScalarLog&) = delete;
  ScalarLog& operator=(const ScalarLog&) = delete;

  // The scalar `tag` at `step`, stamped with the current wall time, in both files.
  void write(int64_t step, const std::string& tag, double value);
  void flush();

  const std::string& lines_path() const { return lines_path_; }
  const std::string& events_path() const { return events_.path(); }

 private:
  EventFileWriter events_;
  std::string lines_path_;
  std::FILE* lines_ = nullptr;
};

}  // namespace fjit::io
