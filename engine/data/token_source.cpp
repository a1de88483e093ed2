#include "engine/data/token_source.hpp"

#include <glob.h>

#include <filesystem>

#include <algorithm>
#include <sstream>

#include "engine/errors.hpp"

namespace pipetune::data {

SyntheticSource::SyntheticSource(std::shared_ptr<const SyntheticCorpus> corpus)
    : corpus_(std::move(corpus)) {
  if (!corpus_) throw InputError("data: synthetic source without a corpus");
}

void SyntheticSource::read(int64_t, int64_t position, std::span<int32_t> out) {
  corpus_->read(position, out);
}

std::string SyntheticSource::describe(int64_t) const {
  const auto& c = corpus_->config();
  return "synthetic corpus (seed=" + std::to_string(c.seed) +
         ", vocab=" + std::to_string(c.vocab_size) + ")";
}

ShardSource::ShardSource(std::vector<std::string> paths, int64_t vocab_size)
    : paths_(std::move(paths)), vocab_size_(vocab_size) {
  if (paths_.empty()) throw InputError("data: no token shards given");
  headers_.reserve(paths_.size());
  for (const auto& p : paths_) headers_.push_back(read_llmc_shard_header(p));
}

int64_t ShardSource::part_tokens(int64_t part) const {
  return headers_.at(static_cast<size_t>(part)).num_tokens;
}

void ShardSource::read(int64_t part, int64_t position, std::span<int32_t> out) {
  if (part != open_part_) {
    open_.reset();
    open_.emplace(paths_.at(static_cast<size_t>(part)), vocab_size_);
    open_part_ = part;
  }
  open_->read(position, out);
}

std::string ShardSource::describe(int64_t part) const {
  return "token shard '" + paths_.at(static_cast<size_t>(part)) + "'";
}

std::vector<std::string> find_shards(const std::string& patterns) {
  std::vector<std::string> paths;
  std::stringstream list(patterns);
  std::string pattern;
  while (std::getline(list, pattern, ',')) {
    if (pattern.empty()) continue;
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    ::globfree(&g);
    if (matches.empty()) {
      throw InputError("data: no token shard matches '" + pattern +
                       "'; hint: check the path and quote the pattern so the shell does not "
                       "expand it");
    }
    std::sort(matches.begin(), matches.end());
    // Opening a FIFO for reading blocks until a writer comes, and a device never ends: only
    // regular files are shards.
    for (const std::string& m : matches) {
      std::error_code ec;
      const auto st = std::filesystem::status(m, ec);
      if (ec || !std::filesystem::exists(st))
        throw InputError("data: token shard '" + m + "' cannot be read (" +
                         (ec ? ec.message() : std::string("not found")) + ")");
      if (std::filesystem::is_directory(st))
        throw InputError("data: token shard '" + m + "' is a directory, not a token file");
      if (!std::filesystem::is_regular_file(st))
        throw InputError("data: token shard '" + m +
                         "' is not a regular file (a device, pipe or socket)");
    }
    paths.insert(paths.end(), matches.begin(), matches.end());
  }
  if (paths.empty()) throw InputError("data: empty token shard list '" + patterns + "'");
  return paths;
}

}  // namespace pipetune::data
