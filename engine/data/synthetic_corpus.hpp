// A seeded synthetic token corpus with learnable structure, generated in-process so that any
// vocabulary (512 up to 256k and beyond) trains without a download.
//
// The process (one hidden state: the last token, or a position inside a motif):
//  - Free step after token a: with probability `noise` emit a uniform token; otherwise emit one of
//    K+1 distinct tokens chosen by a seeded hash of a: a's motif start with probability
//    `motif_rate`, else successor j with probability (1 - motif_rate) * p_j, p_j ∝ 1/(j+1)
//    (Zipf). Successors are drawn with a skew towards low ids (the product of two uniforms), so
//    the unigram distribution is heavy-headed like real text and a model sees frequent tokens
//    first even with a 256k vocabulary.
//  - Motifs: `num_motifs` fixed n-grams of `motif_length` tokens; token a owns motif
//    hash(a) mod num_motifs. Once its first token is emitted the rest follow deterministically,
//    then the chain is free again after the motif's last token.
//  - The stream is cut into documents of `document_length` tokens, each generated independently
//    from its own seed, so any position is reachable in O(document_length) without a V^2 table
//    and without replaying the stream (what a resumed data loader needs).
//
// Entropy rate: every free step has the same distribution shape (K+1 distinct outcomes plus the
// uniform noise), so H_free is one closed form, and the motif continuations carry no entropy.
// With pi_free = 1 / (1 + (1 - noise) * motif_rate * (motif_length - 1)) the share of free
// steps, entropy_rate_nats() = pi_free * H_free. This is H(next | hidden state): the floor that a
// model with enough context approaches (the hidden state is readable from the context except
// after a noise token collides with a motif start, probability O(noise / V)); the per-document
// restart adds at most log(V) / document_length on top. A bigram model cannot see where it is in
// a motif, so its cross-entropy sits above this floor; with motif_rate = 0 the process is a
// first-order Markov chain and the bigram model reaches it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pipetune::data {

struct SyntheticCorpusConfig {
  int64_t vocab_size = 512;
  uint64_t seed = 1234;
  int successors = 4;       // K: likely next tokens of every token
  double motif_rate = 0.1;  // probability that a free step starts the token's motif
  int num_motifs = 64;
  int motif_length = 8;
  double noise = 0.05;  // probability that a free step emits a uniform token
  int64_t document_length = 16384;
};

class SyntheticCorpus {
 public:
  // Throws InputError when a field is out of range (the message names the field).
  explicit SyntheticCorpus(SyntheticCorpusConfig config);

  const SyntheticCorpusConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  // Nats per token of the process given its hidden state; see the header comment.
  double entropy_rate_nats() const { return entropy_rate_nats_; }

  // Tokens [position, position + out.size()) of the unbounded stream; const and thread-safe, so
  // one corpus can feed every rank's loader.
  void read(int64_t position, std::span<int32_t> out) const;
  std::vector<int32_t> tokens(int64_t position, int64_t count) const;

  // The K likely successors of a token, most likely first, and the first token of its motif.
  std::span<const int32_t> successors_of(int32_t token) const;
  std::span<const int32_t> motif_of(int32_t token) const;

 private:
  // Tokens [begin, begin + out.size()) of document `doc`; begin + out.size() <= document_length.
  // Runs the chain from the document start, since the hidden state has no shortcut.
  void generate(int64_t doc, int64_t begin, std::span<int32_t> out) const;
  int64_t motif_index(int32_t token) const;

  SyntheticCorpusConfig config_;
  std::vector<int32_t> successors_;        // (V, K)
  std::vector<int32_t> motifs_;            // (num_motifs, motif_length)
  std::vector<uint64_t> free_thresholds_;  // (K + 1): cumulative motif, successor 0..K-1, in 2^-64
  uint64_t noise_threshold_ = 0;
  double entropy_rate_nats_ = 0;
};

}  // namespace pipetune::data
