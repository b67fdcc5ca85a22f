// Reference attention and its gradient: for each query row, every score, its softmax and
// products as plain loops in double, from the definitions (core/trace/attention.h). Shares no
// code with the blocked kernels (attention.cc): no blocks, no running maximum.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

struct Dims {
  int64_t b, h, tq, tk, dh, dv;
  bool causal;
  double scale;
  const int32_t* lengths;  // null: every key
  // The number of keys query row i of batch index bi sees (the first ones).
  int64_t visible(int64_t bi, int64_t i) const {
    int64_t n = lengths ? std::clamp<int64_t>(lengths[bi], 0, tk) : tk;
    if (causal) n = std::min(n, i + tk - tq + 1);
    return std::max<int64_t>(n, 0);
  }
};

template <class T> void forward(const Dims& d, const T* q, const T* k, const T* v, T* out) {
  std::vector<double> s(d.tk);
  for (int64_t bh = 0; bh < d.b * d.h; ++bh)
    for (int64_t i = 0; i < d.tq; ++i) {
      T* o = out + (bh * d.tq + i) * (d.dv + 1);
      const int64_t n = d.visible(bh / d.h, i);
      if (n == 0) {
        for (int64_t c = 0; c < d.dv; ++c) o[c] = 0;
        o[d.dv] = -std::numeric_limits<T>::infinity();
        continue;
      }
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < d.dh; ++x)
          dot += static_cast<double>(q[(bh * d.tq + i) * d.dh + x]) * k[(bh * d.tk + j) * d.dh + x];
        s[j] = dot * d.scale;
        mx = std::max(mx, s[j]);
      }
      double total = 0;
      for (int64_t j = 0; j < n; ++j) total += std::exp(s[j] - mx);
      for (int64_t c = 0; c < d.dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += std::exp(s[j] - mx) / total * v[(bh * d.tk + j) * d.dv + c];
        o[c] = static_cast<T>(acc);
      }
      o[d.dv] = static_cast<T>(mx + std::log(total));
    }
}

// ins: q, k, v, the packed forward result (out | lse) and its cotangent (dout | dlse).
template <class T>
void backward(const Dims& d, const T* q, const T* k, const T* v, const T* out, const T* dout, T* grad) {
  const int64_t per_head = d.tq * d.dh + d.tk * (d.dh + d.dv), pw = d.dv + 1;
  std::vector<double> acc(per_head);
  for (int64_t bh = 0; bh < d.b * d.h; ++bh) {
    std::fill(acc.begin(), acc.end(), 0.0);
    double* dq = acc.data();
    double* dk = dq + d.tq * d.dh;
    double* dvv = dk + d.tk * d.dh;
    for (int64_t i = 0; i < d.tq; ++i) {
      const T* o = out + (bh * d.tq + i) * pw;
      const T* go = dout + (bh * d.tq + i) * pw;
      double delta = -static_cast<double>(go[d.dv]);
      for (int64_t c = 0; c < d.dv; ++c) delta += static_cast<double>(go[c]) * o[c];
      const int64_t n = d.visible(bh / d.h, i);
      for (int64_t j = 0; j < n; ++j) {
        const T* qi = q + (bh * d.tq + i) * d.dh;
        const T* kj = k + (bh * d.tk + j) * d.dh;
        const T* vj = v + (bh * d.tk + j) * d.dv;
        double dot = 0, dp = 0;
        for (int64_t x = 0; x < d.dh; ++x) dot += static_cast<double>(qi[x]) * kj[x];
        const double p = std::exp(dot * d.scale - static_cast<double>(o[d.dv]));
        for (int64_t c = 0; c < d.dv; ++c) {
          dp += static_cast<double>(go[c]) * vj[c];
          dvv[j * d.dv + c] += p * go[c];
        }
        const double ds = p * (dp - delta) * d.scale;
        for (int64_t x = 0; x < d.dh; ++x) {
          dq[i * d.dh + x] += ds * kj[x];
          dk[j * d.dh + x] += ds * qi[x];
        }
      }
    }
    for (int64_t e = 0; e < per_head; ++e) grad[bh * per_head + e] = static_cast<T>(acc[e]);
  }
}

// bf16 q, k, v (f32 results) are widened to f32 first: every bf16 is an f32, so the loops
// see the same values.
template <class T> void run(Op op, const Dims& d, std::span<const Array> ins, Array& result) {
  std::vector<T> wide[3];
  auto in = [&](int i) -> const T* {
    if (i >= 3 || ins[i].dtype() != DType::bf16) return ins[i].data<T>();
    const auto* bits = static_cast<const uint16_t*>(ins[i].raw());
    wide[i].resize(static_cast<size_t>(ins[i].size()));
    for (size_t e = 0; e < wide[i].size(); ++e) {
      const uint32_t u = uint32_t{bits[e]} << 16;
      float x;
      std::memcpy(&x, &u, sizeof x);
      wide[i][e] = static_cast<T>(x);
    }
    return wide[i].data();
  };
  if (op == Op::Attention) forward<T>(d, in(0), in(1), in(2), result.data<T>());
  else backward<T>(d, in(0), in(1), in(2), in(3), in(4), result.data<T>());
}

}  // namespace

bool reference_attention(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result) {
  const Shape& q = ins[0].shape();
  const size_t base = op == Op::Attention ? 3 : 5;
  const Dims d{q[0], q[1], q[2], ins[1].shape()[2], q[3], ins[2].shape()[3], attrs.index != 0,
               attrs.scalar, ins.size() > base ? ins[base].data<int32_t>() : nullptr};
  switch (result.dtype()) {
    case DType::f32: run<float>(op, d, ins, result); return true;
    case DType::f64: run<double>(op, d, ins, result); return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
