#include <algorithm>
#include <spdlog/spdlog.h>
#include <string>
#include <utility>
#include <vector>

#include <catena/broker/join_rebalance.hpp>

namespace catena::broker {
namespace {

std::string chain_text(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : " -> ") + id;
  return out;
}

}  // namespace

JoinRebalance::JoinRebalance(AddNode add_node, const Clock& clock, Options options)
    : add_node_(std::move(add_node)), clock_(clock), options_(options) {}

JoinRebalance::~JoinRebalance() {
  if (thread_.joinable()) thread_.join();
}

void JoinRebalance::start(const std::string& node_id, const std::atomic<bool>& stop) {
  if (thread_.joinable()) return;  // once per start of the process
  thread_ = std::thread([this, node_id, &stop] { (void)run(node_id, stop); });
}

JoinRebalance::Outcome JoinRebalance::run(const std::string& node_id, const std::atomic<bool>& stop) const {
  const auto deadline = clock_.now() + options_.give_up_after;
  for (int attempt = 1;; ++attempt) {
    auto plan = add_node_(node_id);
    if (plan) {
      int failed = 0, onto = 0;
      for (const auto& m : plan->moves) {
        const bool to_us = std::find(m.to.begin(), m.to.end(), node_id) != m.to.end();
        onto += to_us ? 1 : 0;
        if (!m.error.empty()) {
          ++failed;
          spdlog::warn("join rebalance: {}/{} [{}] => [{}] failed: {}", m.channel, m.partition,
                       chain_text(m.current), chain_text(m.to), m.error);
        } else {
          spdlog::info("join rebalance: {}/{} moved: [{}] => [{}] ({})", m.channel, m.partition,
                       chain_text(m.current), chain_text(m.to), m.reason);
        }
      }
      if (plan->moves.empty()) {
        spdlog::info("join rebalance: the cluster is balanced with {} in it; nothing moved", node_id);
      } else {
        spdlog::log(failed == 0 ? spdlog::level::info : spdlog::level::warn,
                    "join rebalance: {} move(s), {} onto {}, {} failed{}", plan->moves.size(), onto, node_id,
                    failed, failed == 0 ? "" : " (`catena rebalance` retries them)");
      }
      return Outcome::rebalanced;
    }
    const auto code = plan.code();
    // UNAVAILABLE: not (yet) live, or a controller that does not answer.
    const bool retriable = code == control::idl::ErrorCode::UNAVAILABLE;
    if (!retriable) {
      spdlog::error("join rebalance refused, this node takes only what placement and repair give it: {}",
                    plan.error().describe());
      return Outcome::refused;
    }
    if (stop || clock_.now() + options_.retry_every > deadline) {
      spdlog::error(
          "join rebalance: gave up after {} attempt(s) over {} ms: {}; run `catena rebalance` "
          "once the node is ALIVE",
          attempt, options_.give_up_after.count(), plan.error().describe());
      return Outcome::gave_up;
    }
    if (attempt == 1) spdlog::info("join rebalance: not yet ({}); retrying", plan.error().describe());
    clock_.sleep_for(options_.retry_every);
  }
}

}  // namespace catena::broker
