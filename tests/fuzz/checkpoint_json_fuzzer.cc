// Fuzzes the JSON that fjit parses: a checkpoint's safetensors header, with its
// "__metadata__" strings and the run configuration recorded in them ("config.<key>").
// The input is the header text itself; the harness frames it as a file (its length first,
// then a data section), so every mutation reaches the JSON parser and the schema checks
// instead of stopping at the length field. The data section is 8 * the first input byte
// long (zeros), enough for the small tensors a header can describe.
//
// Checked for every input: no crash, leak or undefined behaviour; an error names the file;
// for a header that loads, its configuration matches itself (no differences, check_config
// passes), the checkpoint is compatible with its own tensors, and a comparison with a
// model's tensors either passes or names the file.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "tests/fuzz/fuzz_input.h"

using namespace fjit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t data_bytes = 8 * size_t{data[0]};
  const size_t header_bytes = size - 1;
  std::vector<uint8_t> file(8 + header_bytes + data_bytes, 0);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(uint64_t{header_bytes} >> (8 * i));
  std::copy(data + 1, data + size, file.begin() + 8);
  const std::string path = fuzz::write_input(file.data(), file.size(), "header.safetensors");

  io::Checkpoint ckpt;
  try {
    ckpt = io::load_checkpoint(path);
  } catch (const std::runtime_error& e) {
    fuzz::expect_names_file(e, path);
    return 0;
  }
  const io::RunConfig config = io::config_of(ckpt);
  if (!io::config_differences(ckpt, config).empty())
    fuzz::fail("a checkpoint's configuration differs from itself");
  io::check_config(ckpt, config, "(fuzz)");
  io::check_compatible(ckpt, ckpt.tensors);
  try {
    io::check_config(ckpt, {{"lr", "0.001"}, {"layers", "784,512,10"}}, "(fuzz)");
  } catch (const std::runtime_error& e) {
    fuzz::expect_names_file(e, path);
  }
  try {
    io::check_compatible(ckpt, {{"w", Array(DType::f32, Shape{2, 3})}});
  } catch (const std::runtime_error& e) {
    fuzz::expect_names_file(e, path);
  }
  return 0;
}
