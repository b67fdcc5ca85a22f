// The hand-written baseline for bench/train_step_bench.cc: one SGD training step of a relu MLP
// with a softmax cross-entropy (mean) loss, written directly in Eigen the way a careful
// programmer would: row-major Maps over preallocated buffers, noalias GEMMs with transposes
// folded into the products, fused elementwise loops, parameters updated in place.
// It computes the same math as fjit's jit(value_and_grad(mlp_loss) + sgd) step.
#pragma once

#include "core/base/eigen.h"
#include <cmath>
#include <cstdint>
#include <vector>

namespace fjit::bench {

// Loss and its gradient in one pass per row of the logits z [batch, classes]:
// g = (softmax(z) - onehot(y)) / batch. Returns the summed (not yet averaged) loss.
template <class Mat>
double softmax_cross_entropy_grad(const Mat& z, const int32_t* y, Mat& g) {
  const auto batch = z.rows();
  const float inv_n = 1.0f / static_cast<float>(batch);
  double total = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const float m = z.row(i).maxCoeff();
    g.row(i) = (z.row(i).array() - m).exp();
    const float s = g.row(i).sum();
    total += std::log(s) + m - z(i, y[i]);
    g.row(i) *= inv_n / s;
    g(i, y[i]) -= inv_n;
  }
  return total;
}

class HandWrittenMlp {
 public:
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<float, 1, Eigen::Dynamic>;

  // sizes = {in, hidden..., classes}; w[k] is [sizes[k], sizes[k+1]], b[k] is [sizes[k+1]].
  HandWrittenMlp(std::vector<int64_t> sizes, int64_t batch) : sizes_(std::move(sizes)), batch_(batch) {
    const size_t layers = sizes_.size() - 1;
    for (size_t k = 0; k < layers; ++k) {
      w.emplace_back(Mat::Zero(sizes_[k], sizes_[k + 1]));
      b.emplace_back(Vec::Zero(sizes_[k + 1]));
      dw_.emplace_back(Mat::Zero(sizes_[k], sizes_[k + 1]));
      db_.emplace_back(Vec::Zero(sizes_[k + 1]));
      act_.emplace_back(Mat::Zero(batch, sizes_[k + 1]));
      grad_.emplace_back(Mat::Zero(batch, sizes_[k + 1]));
    }
  }

  // One step on x [batch, in] (row-major) and labels y [batch]; returns the loss before the
  // update.
  float step(const float* x_data, const int32_t* y, float lr) {
    const size_t layers = w.size();
    Eigen::Map<const Mat> x(x_data, batch_, sizes_[0]);
    // Forward: act[k] = relu(act[k-1] w[k] + b[k]); the last layer's act holds the logits.
    for (size_t k = 0; k < layers; ++k) {
      Mat& a = act_[k];
      if (k == 0) a.noalias() = x * w[k];
      else a.noalias() = act_[k - 1] * w[k];
      if (k + 1 < layers) a = (a.rowwise() + b[k]).cwiseMax(0.0f);
      else a.rowwise() += b[k];
    }
    // Loss and its gradient in one pass per row: g = (softmax(z) - onehot(y)) / batch.
    Mat& z = act_.back();
    Mat& g = grad_.back();
    const double total = softmax_cross_entropy_grad(z, y, g);
    const float inv_n = 1.0f / static_cast<float>(batch_);
    // Backward: dW = act^T g, db = colsum(g), g_prev = (g w^T) * relu'(act_prev).
    for (size_t k = layers; k-- > 0;) {
      const Mat& gk = grad_[k];
      if (k == 0) dw_[k].noalias() = x.transpose() * gk;
      else dw_[k].noalias() = act_[k - 1].transpose() * gk;
      db_[k] = gk.colwise().sum();
      if (k > 0) {
        grad_[k - 1].noalias() = gk * w[k].transpose();
        grad_[k - 1] = (act_[k - 1].array() > 0.0f).select(grad_[k - 1], 0.0f);
      }
    }
    for (size_t k = 0; k < layers; ++k) {
      w[k] -= lr * dw_[k];
      b[k] -= lr * db_[k];
    }
    return static_cast<float>(total * inv_n);
  }

  std::vector<Mat> w;
  std::vector<Vec> b;

 private:
  std::vector<int64_t> sizes_;
  int64_t batch_;
  std::vector<Mat> dw_, act_, grad_;
  std::vector<Vec> db_;
};

}  // namespace fjit::bench
