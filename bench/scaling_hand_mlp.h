// The hand-written data-parallel reference for bench/scaling_bench.cc: the relu MLP step of
// bench/mlp_reference.h (same math, Eigen, preallocated buffers), but with every gradient in
// one flat buffer, so that a data-parallel step reduces them with a single MPI_Allreduce the
// way a careful programmer would, before the SGD update.
#pragma once

#include "core/base/eigen.h"
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench/mlp_reference.h"

namespace fjit::bench {

class FlatHandMlp {
 public:
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatMap = Eigen::Map<Mat>;
  using VecMap = Eigen::Map<Eigen::Matrix<float, 1, Eigen::Dynamic>>;
  // Receives the flat gradient buffer between backward and update; must leave the mean over
  // replicas in it.
  using Reduce = std::function<void(float* grads, int64_t count)>;

  // sizes = {in, hidden..., classes}. Parameters start at small deterministic values.
  FlatHandMlp(std::vector<int64_t> sizes, int64_t batch) : sizes_(std::move(sizes)), batch_(batch) {
    int64_t total = 0;
    for (size_t k = 0; k + 1 < sizes_.size(); ++k) total += (sizes_[k] + 1) * sizes_[k + 1];
    params_.resize(total);
    grads_.resize(total);
    for (int64_t i = 0; i < total; ++i)
      params_[i] = 0.01f * static_cast<float>((i * 37) % 101 - 50) / 50.0f;
    int64_t at = 0;
    for (size_t k = 0; k + 1 < sizes_.size(); ++k) {
      const int64_t in = sizes_[k], out = sizes_[k + 1];
      w_.emplace_back(params_.data() + at, in, out);
      dw_.emplace_back(grads_.data() + at, in, out);
      at += in * out;
      b_.emplace_back(params_.data() + at, out);
      db_.emplace_back(grads_.data() + at, out);
      at += out;
      act_.emplace_back(Mat::Zero(batch, out));
      delta_.emplace_back(Mat::Zero(batch, out));
    }
  }

  // One step on x [batch, in] and labels y [batch]; `reduce` (may be null: one replica)
  // combines the gradients across replicas. Returns the local loss before the update.
  float step(const float* x_data, const int32_t* y, float lr, const Reduce& reduce) {
    const size_t layers = w_.size();
    Eigen::Map<const Mat> x(x_data, batch_, sizes_[0]);
    for (size_t k = 0; k < layers; ++k) {
      Mat& a = act_[k];
      if (k == 0)
        a.noalias() = x * w_[k];
      else
        a.noalias() = act_[k - 1] * w_[k];
      if (k + 1 < layers)
        a = (a.rowwise() + b_[k]).cwiseMax(0.0f);
      else
        a.rowwise() += b_[k];
    }
    Mat& z = act_.back();
    Mat& g = delta_.back();
    const double total = softmax_cross_entropy_grad(z, y, g);
    const float inv_n = 1.0f / static_cast<float>(batch_);
    for (size_t k = layers; k-- > 0;) {
      const Mat& gk = delta_[k];
      if (k == 0)
        dw_[k].noalias() = x.transpose() * gk;
      else
        dw_[k].noalias() = act_[k - 1].transpose() * gk;
      db_[k] = gk.colwise().sum();
      if (k > 0) {
        delta_[k - 1].noalias() = gk * w_[k].transpose();
        delta_[k - 1] = (act_[k - 1].array() > 0.0f).select(delta_[k - 1], 0.0f);
      }
    }
    if (reduce) reduce(grads_.data(), static_cast<int64_t>(grads_.size()));
    float* p = params_.data();
    const float* d = grads_.data();
    for (size_t i = 0; i < params_.size(); ++i) p[i] -= lr * d[i];
    return static_cast<float>(total * inv_n);
  }

  int64_t parameter_count() const { return static_cast<int64_t>(params_.size()); }

 private:
  std::vector<int64_t> sizes_;
  int64_t batch_;
  std::vector<float> params_, grads_;
  std::vector<MatMap> w_, dw_;
  std::vector<VecMap> b_, db_;
  std::vector<Mat> act_, delta_;
};

}  // namespace fjit::bench
