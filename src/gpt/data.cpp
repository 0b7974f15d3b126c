// Token streams: see data.h.
#include "commscope/gpt/data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace commscope::train {

namespace {

std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t hash3(std::uint64_t seed, std::uint64_t index, std::uint64_t pos) {
  return mix64(mix64(mix64(seed) ^ index) ^ pos);
}

}  // namespace

int masked_positions(int seq) {
  return std::max(1, static_cast<int>(static_cast<std::int64_t>(seq) * 15 / 100));
}

void mask_for_mlm(std::int64_t index, int seq, int vocab, std::uint64_t seed, std::int32_t* tokens,
                  std::int32_t* targets) {
  CS_CHECK(index >= 0 && seq >= 1 && vocab >= 2);
  std::vector<int> order(static_cast<std::size_t>(seq));
  for (int i = 0; i < seq; ++i) order[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < seq; ++i) targets[i] = -1;  // kIgnoreTarget (kernels.h)
  const int k = masked_positions(seq);
  for (int i = 0; i < k; ++i) {  // partial Fisher-Yates: order[0..k) are the masked positions
    const std::uint64_t r = hash3(seed ^ 0x4D41534B4D41534Bull, static_cast<std::uint64_t>(index),
                                  static_cast<std::uint64_t>(i));
    const int j = i + static_cast<int>(r % static_cast<std::uint64_t>(seq - i));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    const int p = order[static_cast<std::size_t>(i)];
    targets[p] = tokens[p];
    tokens[p] = vocab - 1;  // [MASK]
  }
}

TokenSource TokenSource::synthetic(int vocab, std::uint64_t seed) {
  CS_CHECK(vocab >= 2);
  TokenSource s;
  s.vocab_ = vocab;
  s.seed_ = seed;
  const std::uint64_t h = mix64(seed ^ 0x5EED5EED5EED5EEDull);
  s.mul_ = 1 + 2 * (h % 8);  // odd, small: 1..15
  s.add_ = (h >> 8) % static_cast<std::uint64_t>(vocab);
  return s;
}

Result<TokenSource> TokenSource::text_file(const std::string& path, int vocab, int seq) {
  if (vocab < 256) {
    return Error{"text data " + path + ": vocab: expected >= 256 for byte-level tokens, got " +
                 std::to_string(vocab)};
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Error{"text data " + path + ": expected a file, got a directory"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"text data " + path + ": cannot open the file for reading"};
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(std::istreambuf_iterator<char>(in),
                                                           std::istreambuf_iterator<char>());
  if (in.bad()) return Error{"text data " + path + ": read error"};
  const std::int64_t need = static_cast<std::int64_t>(seq) + 1;
  if (seq < 1 || static_cast<std::int64_t>(bytes->size()) < need) {
    return Error{"text data " + path + ": size: expected at least seq + 1 = " +
                 std::to_string(need) + " bytes, got " + std::to_string(bytes->size())};
  }
  TokenSource s;
  s.vocab_ = vocab;
  s.path_ = path;
  s.bytes_ = std::move(bytes);
  return s;
}

void TokenSource::sequence(std::int64_t index, int seq, std::int32_t* tokens,
                           std::int32_t* targets) const {
  CS_CHECK(index >= 0 && seq >= 1);
  if (bytes_) {
    const auto len = static_cast<std::uint64_t>(bytes_->size());
    CS_CHECK(len >= static_cast<std::uint64_t>(seq) + 1);
    const std::uint64_t m = len - static_cast<std::uint64_t>(seq);
    const std::uint64_t start =
        (static_cast<std::uint64_t>(index) % m) * static_cast<std::uint64_t>(seq) % m;
    const std::uint8_t* b = bytes_->data() + start;
    for (int t = 0; t < seq; ++t) {
      tokens[t] = b[t];
      targets[t] = b[t + 1];
    }
    return;
  }
  const auto vocab = static_cast<std::uint64_t>(vocab_);
  const auto idx = static_cast<std::uint64_t>(index);
  std::uint64_t prev = hash3(seed_, idx, 0) % vocab;
  for (int t = 0; t <= seq; ++t) {
    std::uint64_t tok = prev;
    if (t > 0) {
      const std::uint64_t h = hash3(seed_, idx, static_cast<std::uint64_t>(t));
      tok = (h & 7) != 0 ? (mul_ * prev + add_) % vocab : (h >> 3) % vocab;
    }
    if (t < seq) tokens[t] = static_cast<std::int32_t>(tok);
    if (t > 0) targets[t - 1] = static_cast<std::int32_t>(tok);
    prev = tok;
  }
}

std::string TokenSource::describe() const {
  if (bytes_) return path_ + " (" + std::to_string(bytes_->size()) + " bytes)";
  return "synthetic (seed " + std::to_string(seed_) + ")";
}

}  // namespace commscope::train
