// Checkpoints: named fjit::Arrays plus string metadata, saved in the safetensors format so
// that PyTorch (safetensors.torch.load_file), JAX/NumPy (safetensors.numpy) and other tools
// read them as they are.
//
// File layout (safetensors): an 8-byte little-endian header length N; N bytes of JSON
//   {"__metadata__": {"key": "value", ...},
//    "<name>": {"dtype": "F32"|"F64"|"I32"|"BOOL", "shape": [...], "data_offsets": [b, e]}, ...}
// padded with spaces to a multiple of 8; then the tensors' raw little-endian bytes with no
// gaps, widest dtype first so each tensor is aligned to its element size (what zero-copy,
// memory-mapping readers need). Offsets are relative to the first data byte. The header
// lists the tensors in the order they were saved, and loading gives that order back.
//
// Promises:
//  - save_checkpoint replaces the target atomically: it writes a temporary file in the same
//    directory, fsyncs it, renames it over the target and fsyncs the directory. If anything
//    fails, the previous file is left as it was, the temporary file is removed, and
//    std::runtime_error says what failed. A crash leaves either the old or the new file.
//  - The metadata records "fjit.checksum": the zlib crc32 (8 hex digits) of the whole file —
//    length field, JSON header (metadata, names, dtypes, shapes, data_offsets, padding) and
//    data — computed with the checksum's own 8 digits written as "00000000". load_checkpoint
//    verifies it when present, so an edited header (a step changed by sed, two tensors'
//    offsets swapped) is refused like corrupt data. Files from other tools lack it and load
//    unverified (Checkpoint::integrity says so); a training run's resume requires it
//    (require_checksum).
//  - Legacy: fjit up to commit 4284e34 wrote "fjit.crc32", the crc32 of the tensor data only.
//    Such a file still loads as a plain safetensors file (its data crc is verified, integrity
//    kDataOnly), but require_checksum refuses it, saying which fjit wrote it: its header was
//    never protected.
//  - load_checkpoint validates everything before trusting it — header length against the
//    file size, JSON syntax, dtype names, shapes against data_offsets, offsets against each
//    other and the file size, bool bytes being 0/1, the checksum — and throws
//    std::runtime_error "<path>: <problem>" on the first failure. The header is parsed by
//    nlohmann-json; a name given twice in one JSON object is refused, as the format requires.
//  - Every error about a checkpoint, from loading or from comparing it with a model or a
//    run's configuration, starts with the file's path.
//
// Tests make save_checkpoint fail as a full disk would, once K bytes of the temporary file
// are written, through testing::set_fail_save_after_bytes(K) (core/io/atomic_file_testing.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/array.h"

namespace fjit::io {

inline constexpr const char* kChecksumKey = "fjit.checksum";
inline constexpr const char* kLegacyChecksumKey = "fjit.crc32";  // data only (fjit <= 4284e34)

// What load_checkpoint could verify of a file.
enum class Integrity {
  kNone,       // no fjit checksum (another tool's file, or the entry was removed)
  kDataOnly,   // the legacy fjit.crc32: the tensor data, not the header
  kWholeFile,  // fjit.checksum: header and data
};

using NamedArrays = std::vector<std::pair<std::string, Array>>;

// What a run was configured with, as strings: {"lr": "0.001", "layers": "784,512,10"}.
using RunConfig = std::map<std::string, std::string>;

struct Checkpoint {
  NamedArrays tensors;                          // in the header's order
  std::map<std::string, std::string> metadata;  // e.g. {"step": "1200", "seed": "7"}
  std::string path;                             // the file it was loaded from ("" if none)
  Integrity integrity = Integrity::kNone;       // what load_checkpoint verified

  // The tensor called `name`, or nullptr.
  const Array* find(const std::string& name) const;
};

// Requires unique, non-empty tensor names other than "__metadata__", and defined arrays.
// Any "fjit.checksum" or "fjit.crc32" entry in ckpt.metadata is replaced by the checksum of
// this file.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// The returned metadata includes "fjit.checksum" (or the legacy "fjit.crc32") when the file
// has one.
Checkpoint load_checkpoint(const std::string& path);

// Throws std::runtime_error "<path>: ..." unless the checkpoint was verified whole
// (Integrity::kWholeFile): for a legacy file, that fjit up to 4284e34 wrote it with an
// unprotected header; for one without a checksum, that the entry is missing. `what` names the
// use ("cannot resume from it").
void require_checksum(const Checkpoint& ckpt, const std::string& what);

// Throws std::runtime_error naming the file and every difference between the checkpoint and
// the tensors a model expects: a tensor the model expects that the checkpoint lacks, one
// whose dtype or shape differs ("checkpoint has w1 f32[784,512], model expects
// f32[784,256]"), one in the checkpoint the model does not expect. Only names, dtypes and
// shapes count.
void check_compatible(const Checkpoint& ckpt, const NamedArrays& expected);

// Records `config` in the metadata as "config.<key>" entries (replacing earlier ones).
void set_config(Checkpoint& ckpt, const RunConfig& config);
// The "config.<key>" entries of the metadata, keys without the prefix.
RunConfig config_of(const Checkpoint& ckpt);
// One line per key whose value differs between the checkpoint's configuration and
// `current`, or that only one of them has: "lr: checkpoint 0.001, now 0.002".
std::vector<std::string> config_differences(const Checkpoint& ckpt, const RunConfig& current);
// Throws std::runtime_error "<path>: this run's configuration differs from the checkpoint's:
// <differences>; <override_hint>" when config_differences is not empty.
void check_config(const Checkpoint& ckpt, const RunConfig& current,
                  const std::string& override_hint);

// Throws std::runtime_error "<path>: the checkpoint holds model <saved>, this run's is <model>"
// when the checkpoint's configuration (config_of) records another "model" than `model`, or
// none ("(not recorded)").
void check_model(const Checkpoint& ckpt, const std::string& model);

// The metadata entry `key` as a non-negative integer; throws std::runtime_error naming the
// file when it is missing ("not a training checkpoint") or not such an integer.
int64_t metadata_int(const Checkpoint& ckpt, const std::string& key);
// The metadata entry `key`, or "" when there is none.
std::string metadata_str(const Checkpoint& ckpt, const std::string& key);

// Naming scheme for periodic checkpoints: "<dir>/ckpt-<step>.safetensors".
std::string checkpoint_path(const std::string& dir, int64_t step);
// The path of the checkpoint with the highest step in `dir`, or "" when there is none
// (or `dir` does not exist). Temporary files of an interrupted save are never chosen.
std::string latest_checkpoint(const std::string& dir);

}  // namespace fjit::io
