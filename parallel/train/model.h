// What the trainer trains: a classifier of examples ("images" [N, inputs], f32 or u8) into
// classes ("labels", i32 [N]), given as an initializer and a traced forward pass. A program
// offers its models by name through a ModelMenu (examples/lib/models.h has the examples').
//
// The trainer owns everything else: the loss (mean softmax cross entropy), the checks, the
// all-reduce, the optimizer (AdamW), the data order, checkpoints and logs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/trace/dict.h"
#include "core/trace/tensor.h"
#include "parallel/train/train_options.h"

namespace fjit::training {

struct Model {
  std::string name;            // for messages: "mlp"
  int64_t inputs = 0;          // features of one example: the columns of "images"
  DType pixels = DType::f32;   // how the program loads images (u8: scaled inside the step)
  // True when the forward pass draws random numbers in training (dropout): the step then
  // passes a key, fold_in(fold_in(PRNGKey(seed), step), axis_index), else an undefined Tensor.
  bool uses_key = false;
  // Parameters drawn from `seed`; the same seed gives the same bits.
  std::function<ArrayDict(uint64_t seed)> init;
  // Logits [batch, classes] of images [batch, inputs]. `training` turns dropout on.
  std::function<Tensor(const Params& p, const Tensor& images, bool training, const Tensor& key)>
      logits;
};

// The models a program offers: the names --model accepts, and the model the options pick
// (options.model, and whatever else of the options shapes it: layers, dropout). `build`
// throws std::invalid_argument for a name it does not know.
struct ModelMenu {
  std::vector<std::string> names;
  std::function<Model(const TrainOptions&)> build;
};

}  // namespace fjit::training
