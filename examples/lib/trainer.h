// The trainer of parallel/train bound to the examples' models (lib/models.h): the model is
// the one options.model names, so that tests and example programs construct a Trainer from
// options and data alone.
#pragma once

#include <utility>

#include "fjit.h"
#include "lib/mlp_model.h"
#include "lib/models.h"

namespace fjit::examples {

class Trainer : public training::Trainer {
 public:
  // Throws std::invalid_argument for an unknown options.model, and as training::Trainer does.
  Trainer(Mesh mesh, training::TrainOptions options, io::Dataset train, io::Dataset test = {})
      : training::Trainer(std::move(mesh), options, classifier(model_spec(options)), std::move(train),
                       std::move(test)) {}
};

}  // namespace fjit::examples
