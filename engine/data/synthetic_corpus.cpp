#include "engine/data/synthetic_corpus.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/data/random.hpp"
#include "engine/errors.hpp"

namespace pipetune::data {
namespace {

// Domain tags keep the hashes of different tables independent of each other.
constexpr uint64_t kSuccessorTag = 0x5cc;
constexpr uint64_t kMotifTokenTag = 0x307f;
constexpr uint64_t kMotifIndexTag = 0x3071;
constexpr uint64_t kDocumentTag = 0xd0c;

void require(bool ok, const std::string& rule) {
  if (!ok) throw InputError("synthetic corpus: " + rule);
}

// Probability c in [0, 1] as a threshold on 64 random bits. Only IEEE +, * and / feed it, which
// round the same everywhere, so the thresholds (and hence the tokens) are platform independent.
uint64_t to_threshold(double c) {
  if (c >= 1.0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(c * 18446744073709551616.0);
}

double plogp(double p) {
  return p > 0 ? -p * std::log(p) : 0.0;
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(SyntheticCorpusConfig config) : config_(config) {
  const auto& c = config_;
  require(c.successors >= 1 && c.successors <= 64,
          "successors=" + std::to_string(c.successors) + " must be in [1, 64]");
  require(c.vocab_size >= c.successors + 2 && c.vocab_size <= std::numeric_limits<int32_t>::max(),
          "vocab_size=" + std::to_string(c.vocab_size) + " must be in [successors + 2, 2^31 - 1]");
  require(c.motif_rate >= 0 && c.motif_rate < 1, "motif_rate must be in [0, 1)");
  require(c.noise >= 0 && c.noise <= 1, "noise must be in [0, 1]");
  require(c.num_motifs >= 1 && c.num_motifs <= (1 << 20), "num_motifs must be in [1, 2^20]");
  require(c.motif_length >= 1 && c.motif_length <= 4096, "motif_length must be in [1, 4096]");
  require(c.document_length >= 1, "document_length must be at least 1");

  const auto V = static_cast<uint64_t>(c.vocab_size);
  const int K = c.successors;
  const int L = c.motif_length;

  motifs_.resize(static_cast<size_t>(c.num_motifs) * L);  // (num_motifs, L), uniform ids
  for (size_t i = 0; i < motifs_.size(); ++i)
    motifs_[i] = static_cast<int32_t>(bounded(hash64(c.seed, kMotifTokenTag, i), V));

  // (V, K). The product of two uniform 32-bit fractions has density -ln(x), so low ids are
  // likelier successors; rejection keeps a token's K successors and its motif start distinct,
  // which is what makes every free step's entropy the same closed form.
  successors_.resize(static_cast<size_t>(V) * K);
  for (uint64_t a = 0; a < V; ++a) {
    const int32_t motif_start =
        motifs_[static_cast<size_t>(motif_index(static_cast<int32_t>(a))) * L];
    int32_t* row = &successors_[a * K];
    uint64_t attempt = 0;
    for (int j = 0; j < K;) {
      const uint64_t x = hash64(c.seed, kSuccessorTag, a, attempt++);
      const uint64_t product = (x >> 32) * (x & 0xffffffffULL);
      const auto id = static_cast<int32_t>(bounded(product, V));
      if (id == motif_start || std::find(row, row + j, id) != row + j) continue;
      row[j++] = id;
    }
  }

  // Outcomes of a free step without noise: motif start, then successor j with weight 1/(j+1).
  std::vector<double> weight(K + 1);
  double zipf_sum = 0;
  for (int j = 0; j < K; ++j) zipf_sum += 1.0 / (j + 1);
  weight[0] = c.motif_rate;
  for (int j = 0; j < K; ++j) weight[j + 1] = (1 - c.motif_rate) * (1.0 / (j + 1)) / zipf_sum;

  free_thresholds_.resize(K + 1);
  double cumulative = 0;
  for (int j = 0; j <= K; ++j) {
    cumulative += weight[j];
    free_thresholds_[j] = j == K ? std::numeric_limits<uint64_t>::max() : to_threshold(cumulative);
  }
  noise_threshold_ = to_threshold(c.noise);

  // H_free: K+1 distinct outcomes each with (1 - noise) * w + noise / V, the other V - K - 1
  // tokens with noise / V each.
  const double uniform = c.noise / static_cast<double>(V);
  double h_free = static_cast<double>(V - K - 1) * plogp(uniform);
  for (double w : weight) h_free += plogp((1 - c.noise) * w + uniform);
  const double motif_steps = (1 - c.noise) * c.motif_rate * (L - 1);
  entropy_rate_nats_ = h_free / (1 + motif_steps);
}

int64_t SyntheticCorpus::motif_index(int32_t token) const {
  return static_cast<int64_t>(
      bounded(hash64(config_.seed, kMotifIndexTag, static_cast<uint64_t>(token)),
              static_cast<uint64_t>(config_.num_motifs)));
}

std::span<const int32_t> SyntheticCorpus::successors_of(int32_t token) const {
  const size_t K = static_cast<size_t>(config_.successors);
  return {successors_.data() + static_cast<size_t>(token) * K, K};
}

std::span<const int32_t> SyntheticCorpus::motif_of(int32_t token) const {
  const size_t L = static_cast<size_t>(config_.motif_length);
  return {motifs_.data() + static_cast<size_t>(motif_index(token)) * L, L};
}

void SyntheticCorpus::generate(int64_t doc, int64_t begin, std::span<int32_t> out) const {
  const auto V = static_cast<uint64_t>(config_.vocab_size);
  const int K = config_.successors;
  const int64_t end = begin + static_cast<int64_t>(out.size());
  Xoshiro256 rng(hash64(config_.seed, kDocumentTag, static_cast<uint64_t>(doc)));
  // The document starts in the free state after a random (unseen) token.
  auto prev = static_cast<int32_t>(rng.below(V));
  const int32_t* motif = nullptr;  // the motif being emitted, or null in the free state
  int motif_pos = 0;
  for (int64_t i = 0; i < end; ++i) {
    int32_t token;
    if (motif != nullptr) {
      token = motif[motif_pos++];
    } else if (rng.next() < noise_threshold_) {
      token = static_cast<int32_t>(rng.below(V));
    } else {
      const uint64_t r = rng.next();
      int outcome = 0;
      while (outcome < K && r >= free_thresholds_[outcome]) ++outcome;
      if (outcome == 0) {
        motif = motif_of(prev).data();
        token = motif[0];
        motif_pos = 1;
      } else {
        token = successors_[static_cast<size_t>(prev) * K + outcome - 1];
      }
    }
    if (motif != nullptr && motif_pos == config_.motif_length) motif = nullptr;
    if (i >= begin) out[i - begin] = token;
    prev = token;
  }
}

void SyntheticCorpus::read(int64_t position, std::span<int32_t> out) const {
  if (position < 0)
    throw InputError("synthetic corpus: negative position " + std::to_string(position));
  if (static_cast<uint64_t>(position) + out.size() >
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw InputError("synthetic corpus: tokens from position " + std::to_string(position) +
                     " run past the last int64 position");
  const int64_t D = config_.document_length;
  size_t done = 0;
  while (done < out.size()) {
    const int64_t at = position + static_cast<int64_t>(done);
    const int64_t doc = at / D, begin = at % D;
    const size_t n = std::min<size_t>(out.size() - done, static_cast<size_t>(D - begin));
    generate(doc, begin, out.subspan(done, n));
    done += n;
  }
}

std::vector<int32_t> SyntheticCorpus::tokens(int64_t position, int64_t count) const {
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  read(position, out);
  return out;
}

}  // namespace pipetune::data
