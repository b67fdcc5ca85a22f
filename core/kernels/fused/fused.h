// Fused instructions: one Instr that computes several graph nodes (chosen by the fusion
// planner, core/compile/fusion/fusion.h).
//
// Fused elementwise: a small program of elementwise ops (unary, binary and compare with
// broadcasting, logical, select, cast) evaluated in one pass over memory. The output is walked
// in blocks of at most ~1-2 thousand elements; each op of the program runs over a block with
// the ordinary fast elementwise kernel, its intermediate results held in block-sized registers
// on the stack. So intermediates never leave L1, the values are exactly those of the unfused
// kernels (the same kernels compute them), and dispatch is paid once per op and block. A large
// pass splits its blocks among the intra-op threads, which changes no value. Programs known
// when fjit is built (the optimizers' updates, recorded from their declarations) run compiled
// instead, one loop over vector packets with every intermediate in a register, with the same
// values (fused_compiled.h).
//
// Fused sum: the same program with a full reduce_sum as its root, so sum(x*x) for a global
// gradient norm reads x once and never writes the squares.
//
// GEMM update: out = addend + alpha * op(A) op(B) (addend optional, broadcast from a row
// vector or a scalar allowed), the product made block by block and the update applied to each
// block while it is in cache (core/kernels/gemm/gemm_update.cc). This is the SGD update
// p - lr * (x^T g) with the weight gradient never written to memory.
#pragma once

#include <string>
#include <vector>

#include "core/kernels/kernel.h"

namespace fjit {

// One op of a fused elementwise program.
struct FusedOp {
  int node = -1;  // the graph node it computes (plan dumps)
  Op op = Op::Add;
  DType dtype = DType::f32;
  Attrs attrs;
  // args[i] >= 0: the result of program step args[i] (an earlier step);
  // args[i] < 0: external operand -1 - args[i], i.e. instr.ins[-1 - args[i]].
  std::vector<int> args;
};

// Prepares `instr` to run `program`: instr.out is the type of the program's last step, which
// every step's result has too; instr.ins / in_bufs are the external operands, each of which
// broadcasts to instr.out.shape. Operands of unary ops (and cast) must have the output's shape.
// Returns false, leaving instr.fn null, when the program cannot run fused (a broadcast pattern
// that does not collapse to rows, too many operands, an op without a block kernel); the caller
// then runs its nodes one by one.
// extras: steps of the program (before the last) whose values are further results, each
// written to one more buffer the caller appends to in_bufs after the operands', in this order,
// with the output's shape and the step's dtype (multi-output fusion: Adam's new moments and
// parameters in one pass). A further result is written by its step when no later step reads
// an operand it overlaps, else after every step of the block has run; the output is written by
// the last step, which reads each element before it writes it: so any result may alias an
// external operand of its shape and element size.
bool select_fused_elementwise(Instr& instr, const std::vector<FusedOp>& program,
                              const std::vector<int>& extras = {});

// The name of the compiled program (fused_compiled.h: an optimizer's update such as "adamw" or
// "sgd_momentum", run as one loop with its intermediates in registers) that an instruction
// prepared by select_fused_elementwise runs; null when it runs op by op.
const char* compiled_fused_name(const Instr& instr);

// Prepares a fused full sum: instr.out is a scalar (size 1) of value.dtype (f32 or f64), the
// sum of every element of `program`'s last result, of type `value`; instr.ins as above, each
// broadcasting to value.shape along one collapsed row (same shape or scalar). The result is
// bit-identical to the unfused reduce_sum of the materialized value. False when unsupported.
bool select_fused_sum(Instr& instr, const ValueType& value, const std::vector<FusedOp>& program);

// Prepares a fused row sum: the sum of each row of `row_len` consecutive elements of
// `program`'s last result (of type `value`, f32 or f64), written to instr.out (value.size() /
// row_len elements of value.dtype: a reduce_sum over value's trailing axes). instr.ins as for
// select_fused_elementwise (each broadcasting to value.shape); extras as there, each with
// value's shape. Every row is summed as the unfused row reduction sums it (one Eigen redux per
// row, 16 <= row_len <= 2048), from the same values, so the sums are bit-identical to reducing
// the materialized value, whatever the thread count. False when unsupported.
bool select_fused_row_sum(Instr& instr, const ValueType& value, int64_t row_len,
                          const std::vector<FusedOp>& program, const std::vector<int>& extras = {});

// What a GEMM update instruction reads and writes besides A, B and the addend.
struct GemmUpdateForm {
  bool alpha_operand = false;   // alpha is the last operand (a scalar of the output's type,
                                // read when the step runs), not attrs.scalar
  bool product = false;         // also write P
  bool sum_of_squares = false;  // also write the full sum of P's squares
};

// Prepares a GEMM update: instr.ins = {A, B} or {A, B, addend}, then the alpha operand if
// form.alpha_operand; instr.attrs carries trans_a / trans_b and, otherwise, alpha in
// attrs.scalar; rank-2 f32 or f64 operands. The addend broadcasts to the output (same shape, a
// row vector [N], or a scalar); the output may alias the addend, never A or B. Every element is
// rounded once: fma(alpha, P, addend), P being the product as the packed GEMM computes it for
// f32 products that pay for the packing (core/kernels/gemm/packed_update.h: the plain packed
// product's bits, on either instruction set), else as Eigen's panel kernel accumulates it;
// either whatever the thread count. Further results, each in one more buffer the caller appends to
// in_bufs after the operands' (in this order):
//   form.product         P itself;
//   form.sum_of_squares  the full sum of P's squares (a scalar of the output's type): added
//                        as the kernel stores P on the packed path, or on Eigen's when the
//                        depth fits one of its blocks (gemm_update_in_epilogue), in a double
//                        total, so within rounding of the unfused sum(P * P); otherwise
//                        bit-identical to it.
// So the output does not depend on which results are asked for, and the order of the squares
// depends only on the shapes. False, with instr.fn null, for other operands, or for a sum
// without the product when the blocks cannot hold whole summation leaves (then ask again with
// the product).
bool select_gemm_update(Instr& instr, const GemmUpdateForm& form);

// Prepares the plain product out[m, n] = op(A) op(B) over depth k (instr.ins = {A, B}, the
// attrs' trans_a / trans_b; A may be [batch, M, K] folded into m = batch * M rows) on the GEMM
// update's driver: threads split fixed blocks of output rows, so every element is the same
// whatever the thread count. False, with instr.fn untouched, unless f32 or f64 and non-empty.
bool select_blocked_matmul(Instr& instr, int64_t m, int64_t k, int64_t n);

// Whether a prepared GEMM update applies its update in the panel kernel's stores
// (core/kernels/gemm/gemm_epilogue.h) rather than through a scratch block.
bool gemm_update_in_epilogue(const Instr& instr);

// Prepares an all-reduce update: out = addend + alpha * psum(g) (alpha = instr.attrs.scalar)
// as one collective that applies the update to each block of the sum as it is reduced
// (core/kernels/fused/reduce_update.cc). instr.ins = {g} or {g, addend}, f32 or f64, g of the
// output's shape, the addend broadcast as for select_gemm_update. Each element is rounded
// once, fma(alpha, sum, addend). with_reduced: the sum itself is written too, to one more
// buffer after the operands'. The output aliases no operand.
bool select_reduce_update(Instr& instr, bool with_reduced);

// Whether a plain matmul of this size runs faster through the narrow-output kernel (few
// output columns, core/kernels/gemm/matmul.cc) than as a GEMM: such products are not fused.
bool matmul_is_narrow(int64_t m, int64_t k, int64_t n, int64_t esize);

// "%9 = add(%8, in1); %10 = relu(%9)": a program with its nodes, for plan dumps.
std::string fused_program_string(const std::vector<FusedOp>& program);

}  // namespace fjit
