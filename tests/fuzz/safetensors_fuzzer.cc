// Fuzzes load_checkpoint (core/io/checkpoint.h) with whole files: the 8-byte header length,
// the JSON header and the tensor data, as a checkpoint directory could hold them.
//
// Checked for every input: no crash, leak or undefined behaviour; an error names the file;
// a file that loads holds exactly what its header says (the tensors fill the data section),
// and saving what was loaded and loading that again gives the same names, dtypes, shapes,
// bytes and metadata.
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "tests/fuzz/fuzz_input.h"

using namespace fjit;

namespace {

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void expect_same(const io::Checkpoint& a, const io::Checkpoint& b) {
  if (a.tensors.size() != b.tensors.size()) fuzz::fail("round trip changed the tensor count");
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name_a, x] = a.tensors[i];
    const auto& [name_b, y] = b.tensors[i];
    if (name_a != name_b || x.dtype() != y.dtype() || x.shape() != y.shape() ||
        x.nbytes() != y.nbytes() || (x.nbytes() > 0 && std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0))
      fuzz::fail("round trip changed tensor \"" + name_a + "\"");
  }
  for (const auto& [key, value] : a.metadata) {
    // The save writes its own checksum of the file (and drops the legacy data-only one).
    if (key == io::kChecksumKey || key == io::kLegacyChecksumKey) continue;
    auto it = b.metadata.find(key);
    if (it == b.metadata.end() || it->second != value)
      fuzz::fail("round trip changed metadata \"" + key + "\"");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "input.safetensors");
  io::Checkpoint ckpt;
  try {
    ckpt = io::load_checkpoint(path);
  } catch (const std::runtime_error& e) {
    fuzz::expect_names_file(e, path);
    return 0;
  }
  // Loaded: the length field, the header and the data section agree.
  uint64_t data_bytes = 0;
  for (const auto& [name, a] : ckpt.tensors) data_bytes += a.nbytes();
  if (size < 8 || 8 + le64(data) + data_bytes != size)
    fuzz::fail("loaded, but the tensors do not fill the data section exactly");

  const std::string copy = fuzz::scratch_dir() + "/copy.safetensors";
  io::save_checkpoint(copy, ckpt);
  expect_same(ckpt, io::load_checkpoint(copy));
  return 0;
}
