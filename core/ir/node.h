// Node: the one uniform graph node {op, dtype, shape, inputs, attrs, site}.
//
// Nodes are immutable once inserted into a Graph, and are identified by their index in it.
// Two nodes with equal (op, dtype, shape, inputs, attrs) are the same value, which is what
// makes hash-consing (and so common-subexpression elimination) correct; ops with effects carry
// a unique attribute (a check site id, a collective sequence number) so they are never merged.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/ir/dtype.h"
#include "core/ir/op.h"

namespace fjit {

class StackTrace;  // core/trace/stack_trace.h
struct Region;     // core/ir/region.h

// Where a node was created in the user's code.
struct Site {
  const char* file = nullptr;
  int line = 0;
  const char* function = nullptr;
  // Captured only when checks are enabled (or for error reports); symbolized lazily.
  std::shared_ptr<const StackTrace> stack;

  static Site from(const std::source_location& loc) {
    return Site{loc.file_name(), static_cast<int>(loc.line()), loc.function_name(), nullptr};
  }
  bool known() const { return file != nullptr; }
  // "file:line" with the path relative to the source tree when under it; "<unknown>" if unknown.
  std::string str() const;
};

// Op-specific attributes. The comment on each field names the ops that use it (check nodes:
// core/ir/check_payload.h); the builders in core/trace/ (ops_*.cc, collectives.cc, tensor.cc)
// fill them and core/ir/shape_rules.cc validates them. Unused fields keep their defaults so
// equality and hashing stay exact.
struct Attrs {
  std::vector<int64_t> axes;    // reduce axes, transpose permutation
  std::vector<int64_t> starts;  // slice
  std::vector<int64_t> limits;  // slice
  std::vector<int64_t> steps;   // slice
  // patches, patches_adjoint, a matmul of an image's patches (patches_products.cc): {window_h,
  // window_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_bottom, pad_left, pad_right}
  std::vector<int64_t> window;
  int64_t axis = 0;             // concat, gather, argmax, argmin, iota, scatter_add, cumsum,
                                // top_k (the last axis); check: kind
  int64_t index = 0;            // parameter number, check site id, collective id; top_k: k;
                                // attention: causal (0 or 1); max_pool_grad: 1 = masked to
                                // the image's pixels > 0 (ReLU's rule, relu_pool_grad.cc)
  double scalar = 0;            // constant without value: every element; check: its bound;
                                // patches, windowed matmul: the padding; attention: the score scale
  bool keepdims = false;        // reductions
  bool trans_a = false;         // matmul: use A^T without materialising it
  bool trans_b = false;         // matmul: use B^T
  bool reverse = false;         // cumsum: sums from the end of the axis
  uint8_t reduce = 0;           // collectives: ReduceOp
  std::string name;             // collectives: axis name; parameter: argument path
  std::shared_ptr<const Array> value;  // constant data (absent: filled with scalar)
  // scan, cond, custom_vjp, while_loop, remat, output: the sub-graphs (compared by identity); output: attrs.index
  // is which result.
  std::shared_ptr<const Region> region;

  bool operator==(const Attrs& o) const;
  size_t hash() const;
};

struct Node {
  Op op;
  DType dtype;
  Shape shape;
  std::vector<int> inputs;
  Attrs attrs;
  Site site;

  int64_t size() const { return num_elements(shape); }
  // "%7 = add f32[128,512] %5, %6" with attributes; no site.
  std::string to_string(int id) const;
};

// Whether the node has effects beyond its value (a check, a collective, or a control op whose
// sub-graphs hold one): such nodes are kept by dead-code elimination and never merged.
bool node_has_effect(const Node& n);

}  // namespace fjit
