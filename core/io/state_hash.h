// The hash chain of certified runs: a SHA-256 of a training state (parameters and optimizer
// state), and a chain that links each checkpoint's state hash to the previous checkpoint's, so
// that a run's checkpoints vouch for each other in order (`fjit_verify` re-executes an interval
// between two of them and compares).
//
// Promises:
//  - state_hash covers, for each tensor in name order (whatever order it is given in): the
//    name, dtype, shape and raw little-endian bytes, each field length-prefixed, so two states
//    hash equal exactly when they hold the same names with bit-identical arrays.
//  - chain_hash(prev, state, step) = SHA-256 over a version tag, prev, state and the step;
//    the first checkpoint of a run chains to kChainStart.
//  - Hashes are 64 lowercase hex digits.
#pragma once

#include <cstdint>
#include <string>

#include "core/io/checkpoint.h"

namespace fjit::io {

// Metadata keys of a checkpoint's chain (under its whole-file checksum).
inline constexpr const char* kStateHashKey = "fjit.state_sha256";
inline constexpr const char* kChainKey = "fjit.chain_sha256";
inline constexpr const char* kChainPrevKey = "fjit.chain_prev";
// The chain value before a run's first checkpoint: 64 zeros.
extern const std::string kChainStart;

std::string state_hash(const NamedArrays& tensors);
std::string chain_hash(const std::string& prev, const std::string& state, int64_t step);

// Records the chain in ckpt.metadata: the state hash of ckpt.tensors, `prev`, and the chain
// value for `step`, which it returns.
std::string set_chain(Checkpoint& ckpt, const std::string& prev, int64_t step);
// Recomputes the state hash and the chain value of a loaded checkpoint for `step`; throws
// std::runtime_error naming the file and both values when either differs from its metadata,
// or when the chain entries are missing. Returns the chain value.
std::string verify_chain(const Checkpoint& ckpt, int64_t step);

}  // namespace fjit::io
