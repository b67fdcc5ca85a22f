// A result mapper for Eigen's panel kernel (gebp_kernel, Eigen 3.4) that turns the kernel's
// store of each finished register tile into the GEMM update's epilogue (gemm_update.cc):
//
//   out[e] = fma(alpha, c, out[e])    the update, rounded once, as affine_update rounds it
//   product[e] = c                    when the product is read elsewhere (a check on dW)
//   squares += c * c                  when a gradient norm reads the product
//
// where c is the product element the kernel has just accumulated over the whole depth. The
// kernel computes "res = res + kernel_alpha * c" through this mapper; the kernel is called with
// kernel_alpha = 1 and every load of res returns zero, so what reaches the store is c itself,
// exactly. The product then never goes through memory: the norm a production check reads
// costs one fma per stored packet, in registers, instead of a round trip through a scratch
// block.
//
// REQUIRES: the kernel sees the whole depth in one call (kc >= K), so that every element is
// stored exactly once; the output already holds the addend. The kernel's order of stores is
// fixed by the blocking, so the sum of squares is deterministic (and independent of the
// thread count, since blocks of output rows are summed in block order); it is not the order of
// an unfused sum over the product, so it may differ from that sum in the last bits.
#pragma once

#include "core/base/eigen.h"
#include <cmath>

namespace fjit {

template <class T>
class GemmEpilogue {
 public:
  using Index = Eigen::Index;
  using Packet = typename Eigen::internal::packet_traits<T>::type;

  GemmEpilogue(T* out, T* product, Index stride, T alpha, bool squares)
      : out_(out), product_(product), stride_(stride), alpha_(alpha), squares_(squares) {
    for (Packet& a : sq_) a = Eigen::internal::pset1<Packet>(T(0));
  }

  // The sum of the squares of every element stored so far. Call flush() after each kernel
  // call first.
  double squares() const { return done_ + tail_; }
  // Moves the packet accumulators into the double total: each accumulator lane then holds the
  // squares of one kernel call only, so its error stays that of a short float sum.
  void flush() {
    namespace ei = Eigen::internal;
    if (!squares_) return;
    for (Packet& a : sq_) {
      done_ += static_cast<double>(ei::predux(a));
      a = ei::pset1<Packet>(T(0));
    }
  }

  // Element e (column-major offset) is c: apply the epilogue to it and the size(P) - 1 after.
  // `slot` picks the accumulator: consecutive stores of a register tile go to different ones,
  // so that the squares add up in parallel chains, not one chain of fma latencies.
  template <class P>
  void store(Index e, const P& c, Index slot) {
    namespace ei = Eigen::internal;
    T* o = out_ + e;
    ei::pstoreu(o, ei::pmadd(ei::pset1<P>(alpha_), c, ei::ploadu<P>(o)));
    if (product_ != nullptr) ei::pstoreu(product_ + e, c);
    if (!squares_) return;
    if constexpr (int{ei::unpacket_traits<P>::size} == int{ei::packet_traits<T>::size}) {
      Packet& a = sq_[slot & (kSlots - 1)];
      a = ei::pmadd(c, c, a);
    } else {
      tail_ += static_cast<double>(ei::predux(ei::pmul(c, c)));
    }
  }
  void store(Index e, T c) {
    out_[e] = std::fma(alpha_, c, out_[e]);
    if (product_ != nullptr) product_[e] = c;
    if (squares_) tail_ += static_cast<double>(c) * c;
  }

  // What gebp_kernel's DataMapper must provide, over the column-major block at `at`.
  class Linear {
   public:
    Linear(GemmEpilogue* e, Index at, Index slot) : e_(e), at_(at), slot_(slot) {}
    void prefetch(Index i) const { Eigen::internal::prefetch(e_->out_ + at_ + i); }
    template <class P>
    P loadPacket(Index) const { return Eigen::internal::pset1<P>(T(0)); }
    template <class P>
    void storePacket(Index i, const P& c) const { e_->store(at_ + i, c, slot_ + i / kPacket); }

   private:
    GemmEpilogue* e_;
    Index at_, slot_;
  };
  class Mapper {
   public:
    using LinearMapper = Linear;
    Mapper(GemmEpilogue* e, Index at) : e_(e), at_(at) {}
    // The tile's column j and packet row i / kPacket pick its accumulators (store's slot).
    Linear getLinearMapper(Index i, Index j) const {
      return Linear(e_, at_ + i + j * e_->stride_, 3 * j + i / kPacket);
    }
    // The kernel's partial-packet paths: res(i, j .. j + size(P)) across columns.
    template <class P>
    P gatherPacket(Index, Index) const { return Eigen::internal::pset1<P>(T(0)); }
    template <class P>
    void scatterPacket(Index i, Index j, const P& c) const {
      alignas(64) T lanes[Eigen::internal::unpacket_traits<P>::size];
      Eigen::internal::pstore(lanes, c);
      for (int l = 0; l < Eigen::internal::unpacket_traits<P>::size; ++l)
        e_->store(at_ + i + (j + l) * e_->stride_, lanes[l]);
    }
    // The kernel's scalar tail: res(i, j) += c.
    struct Element {
      GemmEpilogue* e;
      Index at;
      void operator+=(T c) const { e->store(at, c); }
    };
    Element operator()(Index i, Index j) const { return Element{e_, at_ + i + j * e_->stride_}; }

   private:
    GemmEpilogue* e_;
    Index at_;
  };
  Mapper mapper(Index at) { return Mapper(this, at); }

 private:
  static constexpr Index kPacket = Eigen::internal::packet_traits<T>::size;
  static constexpr Index kSlots = 8;  // a power of two
  T* out_;
  T* product_;
  Index stride_;
  T alpha_;
  bool squares_;
  Packet sq_[kSlots];
  double done_ = 0, tail_ = 0;
};

}  // namespace fjit
