// Point-to-point messages of the pipeline runtime. Every message is tagged with what it carries
// and for which (layer group, micro-batch), so a receive can never pick up the wrong tensor.
// Messages to oneself (two chunks of a V schedule meeting on one rank, pp = 1) stay in a local
// queue instead of going through the communicator.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/model/buffer_cache.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

enum class MessageKind : std::uint8_t {
  Activation = 1,      // output of layer group g-1 -> input of group g
  Gradient = 2,        // input gradient of group g+1 -> output gradient of group g
  FinalHidden = 3,     // vocabulary parallel: final hidden state -> every S pass
  EmbeddingGrad = 4,   // vocabulary parallel: gradient of the embedding output -> every IB pass
  Stats = 5,           // vocabulary parallel C1: per-shard max, sum of exp, target logit
  SoftmaxWeights = 6,  // vocabulary parallel C1 (Vocab2): sum_v p_v W_v and W_target partials
  OutputGrad = 7,      // vocabulary parallel C2 (Vocab1): partial gradient of the final hidden
  EmbeddingPart = 8,   // vocabulary parallel input reduce: partial embeddings
};

int message_tag(MessageKind kind, int group, int microbatch);

class Mailbox {
 public:
  // `recorder` (may be null) gets a span per send and receive on the P2P stream.
  explicit Mailbox(comm::Communicator& comm, profiler::RankRecorder* recorder = nullptr);

  void post(int dst, MessageKind kind, int group, int microbatch, std::span<const float> data);
  // Fills `data` (its size must match the message): from a message received ahead, else by
  // receiving it now.
  void take(int src, MessageKind kind, int group, int microbatch, std::span<float> data);
  // Receives a message of `count` floats now and keeps it for take(): the runtime waits for an
  // op's inputs before the op's span opens, so a measured op is its compute, not the wait for
  // its neighbour (as the simulator times it). No-op for a message to oneself.
  void receive_ahead(int src, MessageKind kind, int group, int microbatch, std::size_t count);

 private:
  comm::Communicator* comm_;
  profiler::RankRecorder* recorder_;
  profiler::NameId recv_name_ = 0;
  // Messages are kept in the rank's storage (model::Buffer: device memory on a GPU rank, so a
  // message received ahead goes device to device, never through the host).
  std::map<int, std::vector<model::Buffer>> local_;  // tag -> FIFO of messages to self
  // (source, tag) -> FIFO of messages received ahead
  std::map<std::pair<int, int>, std::vector<model::Buffer>> arrived_;
};

}  // namespace pipetune::runtime
