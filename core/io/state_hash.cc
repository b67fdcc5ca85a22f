#include "core/io/state_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

namespace fjit::io {

const std::string kChainStart(64, '0');

namespace {

// SHA-256 through OpenSSL's EVP interface, fed in pieces.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("SHA-256: OpenSSL could not start a digest");
  }
  void add(const void* p, size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_.get(), p, n) != 1) throw std::runtime_error("SHA-256: update failed");
  }
  void add_u64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    add(b, 8);
  }
  void add_str(const std::string& s) {
    add_u64(s.size());
    add(s.data(), s.size());
  }
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), d, &n) != 1) throw std::runtime_error("SHA-256: final failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out += digits[d[i] >> 4];
      out += digits[d[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::string where(const Checkpoint& ckpt) { return ckpt.path.empty() ? "checkpoint" : ckpt.path; }

std::string entry(const Checkpoint& ckpt, const char* key) {
  auto it = ckpt.metadata.find(key);
  if (it == ckpt.metadata.end())
    throw std::runtime_error(where(ckpt) + ": no " + key + " entry: the checkpoint carries no hash chain");
  return it->second;
}

}  // namespace

std::string state_hash(const NamedArrays& tensors) {
  std::vector<const std::pair<std::string, Array>*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Sha256 h;
  h.add_str("fjit-state-v1");
  h.add_u64(sorted.size());
  for (const auto* t : sorted) {
    const Array& a = t->second;
    h.add_str(t->first);
    h.add_str(type_str(a.dtype(), a.shape()));
    h.add_u64(static_cast<uint64_t>(a.nbytes()));
    h.add(a.raw(), static_cast<size_t>(a.nbytes()));
  }
  return h.hex();
}

std::string chain_hash(const std::string& prev, const std::string& state, int64_t step) {
  Sha256 h;
  h.add_str("fjit-chain-v1");
  h.add_str(prev);
  h.add_str(state);
  h.add_u64(static_cast<uint64_t>(step));
  return h.hex();
}

std::string set_chain(Checkpoint& ckpt, const std::string& prev, int64_t step) {
  const std::string state = state_hash(ckpt.tensors);
  const std::string chain = chain_hash(prev, state, step);
  ckpt.metadata[kStateHashKey] = state;
  ckpt.metadata[kChainPrevKey] = prev;
  ckpt.metadata[kChainKey] = chain;
  return chain;
}

std::string verify_chain(const Checkpoint& ckpt, int64_t step) {
  const std::string state = state_hash(ckpt.tensors);
  if (entry(ckpt, kStateHashKey) != state)
    throw std::runtime_error(where(ckpt) + ": " + kStateHashKey + " is " + entry(ckpt, kStateHashKey) +
                             " but the tensors hash to " + state);
  const std::string chain = chain_hash(entry(ckpt, kChainPrevKey), state, step);
  if (entry(ckpt, kChainKey) != chain)
    throw std::runtime_error(where(ckpt) + ": " + kChainKey + " is " + entry(ckpt, kChainKey) +
                             " but (previous link, state, step " + std::to_string(step) +
                             ") hash to " + chain);
  return chain;
}

}  // namespace fjit::io
