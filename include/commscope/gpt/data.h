// Token streams for training: a synthetic one with learnable structure, and a byte-level text
// file. Both are stateless: sequence `index` depends on nothing else, so a run resumes from a data
// position and data-parallel ranks read disjoint indices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commscope/util/result.h"

namespace commscope::train {

// BERT's masked-LM input, deterministically: in sequence `index` (>= 0) of seq tokens, exactly
// max(1, seq * 15 / 100) positions are masked (BERT's 15%, the same count in every sequence so
// that every micro-batch's mean loss has the same weight), chosen by a partial Fisher-Yates
// shuffle driven by a stateless hash of (seed, index). A masked position's target becomes its
// token and its token becomes the [MASK] id, vocab - 1 (always [MASK]: no 80/10/10 split);
// every other target becomes kIgnoreTarget (-1). `targets` is overwritten (the next tokens a
// TokenSource gives are not BERT's targets). vocab >= 2, seq >= 1.
int masked_positions(int seq);
void mask_for_mlm(std::int64_t index, int seq, int vocab, std::uint64_t seed, std::int32_t* tokens,
                  std::int32_t* targets);

class TokenSource {
 public:
  // Deterministic, all tokens < vocab (vocab >= 2). Each sequence starts from a hashed token;
  // then with probability 7/8 the next token is (a * previous + c) mod vocab (a, c drawn from the
  // seed), else a hashed uniform token. Every draw is a stateless hash of (seed, index, position).
  static TokenSource synthetic(int vocab, std::uint64_t seed);
  // Byte-level tokenizer: token = byte value. Errors (one line): unreadable file, vocab < 256,
  // file shorter than seq + 1 bytes.
  static Result<TokenSource> text_file(const std::string& path, int vocab, int seq);

  // Sequence number `index` (>= 0) of an endless stream: fills seq inputs and the seq targets
  // (the next tokens). For a text file of len bytes, sequence i reads bytes [s, s + seq] with
  // s = (i * seq) mod (len - seq), so consecutive indices tile the file (requires
  // len >= seq + 1, and len below 2^32 bytes for the offset arithmetic).
  void sequence(std::int64_t index, int seq, std::int32_t* tokens, std::int32_t* targets) const;

  std::string describe() const;  // "synthetic (seed 1)" or "file.txt (12345 bytes)"
  int vocab() const { return vocab_; }

 private:
  TokenSource() = default;
  int vocab_ = 0;
  std::uint64_t seed_ = 0;
  std::uint64_t mul_ = 1, add_ = 0;  // synthetic rule
  std::string path_;
  std::shared_ptr<const std::vector<std::uint8_t>> bytes_;  // null for synthetic
};

}  // namespace commscope::train
