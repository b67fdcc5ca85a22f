// Tensor: a handle to a value in the function being traced. Building an op on Tensors checks
// shapes and dtypes and records a node into the current trace; it never computes.
//
// A trace is active on a thread while a TraceContext lives (jit, grad and pmap open one). Using
// a Tensor outside its trace (a leaked tracer) or building an op with no trace active throws
// TraceError. Every TraceError names the op, the operand types and the user's file:line.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/check_site.h"
#include "core/ir/graph.h"
#include "core/ir/array.h"

namespace fjit {

using Loc = std::source_location;

// A user error found while tracing: bad shapes, dtypes, axes, or misuse of the API.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a trace is told; jit and pmap fill it from their resolved JitOptions (tracing reads no
// environment).
struct TraceOptions {
  CheckMode checks = CheckMode::off;
  // Record a symbolized-on-demand stack for every node (on whenever checks are on).
  bool capture_stacks = false;
  // Captured constants above this size are reported as warnings (FJIT_LARGE_CONSTANT_BYTES).
  int64_t large_constant_bytes = 1 << 20;
  // The plan will overlap its all-reduces with the instructions after them
  // (core/compile/schedule.h): the dict forms of psum and pmean then fill their buckets in
  // the order the tensors were computed, so the first buckets are ready first.
  bool overlap_collectives = false;
  // Bucket size of the dict forms of psum and pmean (core/trace/collectives.h;
  // FJIT_FUSION_BYTES). REQUIRES: >= 1024.
  int64_t fusion_bytes = 1 << 20;
  // A differentiated parameter that never reaches the output is a TraceError, not a warning
  // (core/autodiff/autodiff.h; FJIT_STRICT_UNUSED).
  bool strict_unused = false;
  // while_loop's guards, recorded when checks are on (core/trace/control_flow.h): the default
  // trip limit of a while_loop that sets none (0: none; FJIT_WHILE_MAX_TRIPS), and whether
  // steps run under a deadline (FJIT_STEP_TIMEOUT), so each while_loop gets a step_timeout site.
  int64_t while_max_trips = 0;
  bool step_deadline = false;
};

class Tensor;

class TraceContext {
 public:
  explicit TraceContext(TraceOptions options);
  ~TraceContext();
  TraceContext(const TraceContext&) = delete;
  TraceContext& operator=(const TraceContext&) = delete;

  // The innermost active trace on this thread, or nullptr.
  static TraceContext* current();

  Graph graph;
  TraceOptions options;
  std::vector<CheckSite> check_sites;
  std::vector<std::string> warnings;  // also logged when raised
  // Axis names a collective may use (set by pmap); empty outside pmap.
  std::vector<std::string> axis_names;
  int num_replicas = 1;
  // The size of each of axis_names (a mesh with named axes, parallel/shard_map.h); empty:
  // every axis spans all num_replicas replicas (pmap).
  std::vector<int> axis_sizes;
  // pmap's split of the batch when it is uneven: every replica's rows in replica order, and
  // the rows of the replica being traced (all_gather then concatenates shards of these
  // sizes); empty and -1 otherwise.
  std::vector<int64_t> shard_rows;
  int64_t local_rows = -1;

  // Adds an input of the traced function.
  Tensor parameter(DType dtype, const Shape& shape, const std::string& name);
  int next_effect_id() { return effect_counter_++; }
  // Unique per trace in this process (a later trace may reuse this object's address).
  uint64_t trace_id() const { return trace_id_; }

 private:
  TraceContext* previous_;
  uint64_t trace_id_;
  int effect_counter_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  // Captures a host array as a constant of the graph. Large captures warn, naming `loc`:
  // pass parameters as arguments instead, or a stale copy may be trained against.
  Tensor(const Array& value, Loc loc = Loc::current());  // NOLINT: implicit on purpose

  bool defined() const { return ctx_ != nullptr; }
  DType dtype() const { return node().dtype; }
  // By value: building another op may grow the graph and move its nodes.
  Shape shape() const { return node().shape; }
  int rank() const { return static_cast<int>(shape().size()); }
  int64_t size() const { return num_elements(shape()); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int id() const { return id_; }
  TraceContext* context() const { return ctx_; }
  uint64_t trace_id() const { return trace_id_; }
  // Valid until the next op is built in this trace (the graph may reallocate).
  const Node& node() const;
  std::string type_string() const { return type_str(dtype(), shape()); }

  // Internal: the handle of node `id` in trace `ctx`.
  static Tensor from_node(TraceContext* ctx, int id) { return Tensor(ctx, id); }

 private:
  Tensor(TraceContext* ctx, int id) : ctx_(ctx), id_(id), trace_id_(ctx->trace_id()) {}
  TraceContext* ctx_ = nullptr;
  int id_ = -1;
  uint64_t trace_id_ = 0;
};

namespace detail {
// Records node `op` over `inputs` in the current trace after checking them with the op's shape
// rule. `hint` fixes what the builder decides (see shape_rules.h). Throws TraceError naming
// `name` (the user-facing op), the operand types and the call site.
Tensor build(const char* name, Op op, const std::vector<Tensor>& inputs, Attrs attrs,
             const ValueType& hint, const Loc* loc);
// Throws a TraceError for a misuse found by a builder before the shape rule runs.
[[noreturn]] void fail(const char* name, const std::vector<Tensor>& inputs, const std::string& what,
                       const Loc* loc);
// The user call site of the op being built: `loc` if known, else found on the stack.
std::string call_site(const Loc* loc);

// Marks the building of a composite op (log_softmax, gather, ...) out of others: while one
// is alive on this thread, a TraceError from any op built inside names the outermost
// composite and its operands, the op the user called, and says which inner op failed.
class CompositeScope {
 public:
  CompositeScope(const char* name, std::initializer_list<Tensor> inputs);
  ~CompositeScope();
  CompositeScope(const CompositeScope&) = delete;
  CompositeScope& operator=(const CompositeScope&) = delete;

 private:
  const char* name_;
  std::vector<Tensor> inputs_;
  CompositeScope* outer_;
  friend void fail(const char*, const std::vector<Tensor>&, const std::string&, const Loc*);
};
}  // namespace detail

}  // namespace fjit
