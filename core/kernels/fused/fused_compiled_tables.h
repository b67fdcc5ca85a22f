// The tables of the compiled fused programs (internal to core/kernels/fused/fused_compiled.cc): each
// is one program exactly as the fusion planner emits it for an update of core/lib/optimizers.cc,
// step by step, with its operand kinds and further results. A program the planner emits for
// other options (another operand order, a constant shared by two hyper-parameters of equal
// value, a step fused in front) matches no table and runs op by op.
//
// Reading a table against a plan dump's "fused[...]" label: step i is the label's i-th "%n =",
// S(i) names it, X(k) is the label's in<k> (external operands are numbered by first use), and
// the further results are the steps the label "also writes".
#pragma once

#include <array>
#include <cstddef>

#include "core/ir/op.h"

namespace fjit::compiled {

// An operand of a compiled step: an earlier step's value, or an external operand numbered in
// the order of its first use in the program.
struct Arg {
  bool step = false;
  int i = 0;
};
constexpr Arg S(int i) { return {true, i}; }
constexpr Arg X(int i) { return {false, i}; }

// One step: add, sub, mul, div (a, b) or sqrt (a).
struct CStep {
  Op op = Op::Add;
  Arg a, b;
};

enum class Kind { full, scalar };  // an external operand: the output's shape, or one element

template <size_t N, size_t K, size_t E>
struct Program {
  const char* name;  // plan dumps: "[compiled: <name>]"
  std::array<CStep, N> steps;
  std::array<Kind, K> ext;
  std::array<int, E> extras;
};

constexpr Kind F = Kind::full, C = Kind::scalar;
constexpr Op Add = Op::Add, Sub = Op::Sub, Mul = Op::Mul, Div = Op::Div, Sqrt = Op::Sqrt;

// The Adam family (adam_update in optimizers.cc). With g the gradient (after Adam's L2 term),
// m, v the moments, p the parameter and sq = g*g:
//   m2 = m*b1 + g*(1-b1);  v2 = v*b2 + sq*(1-b2);
//   p2 = p - step_size * (m2 / (sqrt(v2) * inv_sqrt_bc2 + eps))      further results m2, v2
// AdamW with weight decay replaces p by p * (1 - lr*wd) (a scalar operand or constant).

// Adam, and AdamW without weight decay. g, m, v, p: x0, x2, x5, x10.
constexpr Program<13, 11, 2> kAdam{
    "adam",
    {{{Mul, X(0), X(1)}, {Mul, X(2), X(3)}, {Add, S(1), S(0)},
      {Mul, X(0), X(0)}, {Mul, S(3), X(4)}, {Mul, X(5), X(6)}, {Add, S(5), S(4)},
      {Sqrt, S(6), {}}, {Mul, S(7), X(7)}, {Add, S(8), X(8)}, {Div, S(2), S(9)},
      {Mul, X(9), S(10)}, {Sub, X(10), S(11)}}},
    {F, C, F, C, C, F, C, C, C, C, F},
    {2, 6}};

// Adam when g*g is an operand computed elsewhere: a step that also takes the global norm of
// the gradients shares the square with the norm's sum. g, m, sq, v, p: x0, x2, x4, x6, x11.
constexpr Program<12, 12, 2> kAdamSquareIn{
    "adam_sq_operand",
    {{{Mul, X(0), X(1)}, {Mul, X(2), X(3)}, {Add, S(1), S(0)},
      {Mul, X(4), X(5)}, {Mul, X(6), X(7)}, {Add, S(4), S(3)},
      {Sqrt, S(5), {}}, {Mul, S(6), X(8)}, {Add, S(7), X(9)}, {Div, S(2), S(8)},
      {Mul, X(10), S(9)}, {Sub, X(11), S(10)}}},
    {F, C, F, C, F, C, F, C, C, C, C, F},
    {2, 5}};

// Adam with weight decay (L2): g = g0 + p*wd first. p, g0, m, v: x0, x2, x4, x7.
constexpr Program<15, 12, 2> kAdamL2{
    "adam_l2",
    {{{Mul, X(0), X(1)}, {Add, X(2), S(0)},
      {Mul, S(1), X(3)}, {Mul, X(4), X(5)}, {Add, S(3), S(2)},
      {Mul, S(1), S(1)}, {Mul, S(5), X(6)}, {Mul, X(7), X(8)}, {Add, S(7), S(6)},
      {Sqrt, S(8), {}}, {Mul, S(9), X(9)}, {Add, S(10), X(10)}, {Div, S(4), S(11)},
      {Mul, X(11), S(12)}, {Sub, X(0), S(13)}}},
    {F, C, F, C, F, C, C, F, C, C, C, C},
    {4, 8}};

// AdamW with weight decay: p * (1 - lr*wd) first. p, g, m, v: x0, x2, x4, x7.
constexpr Program<14, 12, 2> kAdamW{
    "adamw",
    {{{Mul, X(0), X(1)},
      {Mul, X(2), X(3)}, {Mul, X(4), X(5)}, {Add, S(2), S(1)},
      {Mul, X(2), X(2)}, {Mul, S(4), X(6)}, {Mul, X(7), X(8)}, {Add, S(6), S(5)},
      {Sqrt, S(7), {}}, {Mul, S(8), X(9)}, {Add, S(9), X(10)}, {Div, S(3), S(10)},
      {Mul, X(11), S(11)}, {Sub, S(0), S(12)}}},
    {F, C, F, C, F, C, C, F, C, C, C, C},
    {3, 7}};

// AdamW with weight decay and g*g an operand: the examples' training step (a global norm of
// the gradients, then AdamW). p, g, m, sq, v: x0, x2, x4, x6, x8.
constexpr Program<13, 13, 2> kAdamWSquareIn{
    "adamw_sq_operand",
    {{{Mul, X(0), X(1)},
      {Mul, X(2), X(3)}, {Mul, X(4), X(5)}, {Add, S(2), S(1)},
      {Mul, X(6), X(7)}, {Mul, X(8), X(9)}, {Add, S(5), S(4)},
      {Sqrt, S(6), {}}, {Mul, S(7), X(10)}, {Add, S(8), X(11)}, {Div, S(3), S(9)},
      {Mul, X(12), S(10)}, {Sub, S(0), S(11)}}},
    {F, C, F, C, F, C, F, C, F, C, C, C, C},
    {3, 6}};

// SGD with momentum (SGD::update): buf2 = buf*momentum + g; d = buf2, or g + buf2*momentum
// (Nesterov); p2 = p - lr*d, further result buf2. With weight decay, g = g0 + p*wd first.

// Momentum. buf, g, p: x0, x2, x4.
constexpr Program<4, 5, 1> kSgdMomentum{
    "sgd_momentum",
    {{{Mul, X(0), X(1)}, {Add, S(0), X(2)}, {Mul, X(3), S(1)}, {Sub, X(4), S(2)}}},
    {F, C, F, C, F},
    {1}};

// Nesterov momentum. buf, g, p: x0, x2, x4.
constexpr Program<6, 5, 1> kSgdNesterov{
    "sgd_nesterov",
    {{{Mul, X(0), X(1)}, {Add, S(0), X(2)}, {Mul, S(1), X(1)}, {Add, X(2), S(2)},
      {Mul, X(3), S(3)}, {Sub, X(4), S(4)}}},
    {F, C, F, C, F},
    {1}};

// Momentum with weight decay. p, g0, buf: x0, x2, x3.
constexpr Program<6, 6, 1> kSgdMomentumL2{
    "sgd_momentum_l2",
    {{{Mul, X(0), X(1)}, {Add, X(2), S(0)}, {Mul, X(3), X(4)}, {Add, S(2), S(1)},
      {Mul, X(5), S(3)}, {Sub, X(0), S(4)}}},
    {F, C, F, F, C, C},
    {3}};

// Nesterov momentum with weight decay. p, g0, buf: x0, x2, x3.
constexpr Program<8, 6, 1> kSgdNesterovL2{
    "sgd_nesterov_l2",
    {{{Mul, X(0), X(1)}, {Add, X(2), S(0)}, {Mul, X(3), X(4)}, {Add, S(2), S(1)},
      {Mul, S(3), X(4)}, {Add, S(1), S(4)}, {Mul, X(5), S(5)}, {Sub, X(0), S(6)}}},
    {F, C, F, F, C, C},
    {3}};

}  // namespace fjit::compiled
