// `catena node add`, `catena node drain` and `catena rebalance`: putting
// a node that joined to work (a broker started with --controller registers
// itself; `node add` waits for that, then rebalances), emptying a node before
// it is stopped, and spreading partitions evenly.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <catena/control/controller_client.hpp>

#include "commands.hpp"
#include "output.hpp"

namespace catena::cli {
namespace {

using namespace std::chrono_literals;

std::string join(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : " -> ") + id;
  return out;
}

const control::idl::NodeStatus* find_node(const control::idl::ClusterStatus& status, const std::string& id) {
  for (const auto& n : status.nodes) {
    if (n.info.node_id == id) return &n;
  }
  return nullptr;
}

// Prints a plan's moves; returns how many failed.
int print_plan(const control::idl::RebalancePlan& plan, const std::string& node_id = {}) {
  if (plan.moves.empty()) {
    std::printf("balanced: nothing to move\n");
    return 0;
  }
  int failed = 0, onto = 0;
  std::printf("%s%zu move(s):\n", plan.dry_run ? "plan (dry run), " : "", plan.moves.size());
  for (const auto& m : plan.moves) {
    std::printf("  %s/%d  [%s] => [%s]  (%s)%s%s\n", m.channel.c_str(), m.partition, join(m.current).c_str(),
                join(m.to).c_str(), m.reason.c_str(), m.error.empty() ? "" : "  FAILED: ", m.error.c_str());
    if (!m.error.empty()) ++failed;
    const bool to_node = std::find(m.to.begin(), m.to.end(), node_id) != m.to.end();
    if (to_node && m.error.empty()) ++onto;
  }
  if (!node_id.empty()) {
    std::printf("%s %s %d partition(s)\n", node_id.c_str(), plan.dry_run ? "would take" : "took", onto);
  }
  return failed;
}

// The plan as JSON (with node_id and how many partitions it took for
// `node add`); the exit code as print_plan's caller gives it.
int print_plan_json(const control::idl::RebalancePlan& plan, const std::string& node_id = {}) {
  nlohmann::json doc = plan_json(plan);
  int failed = 0, onto = 0;
  for (const auto& m : plan.moves) {
    if (!m.error.empty()) ++failed;
    if (m.error.empty() && std::find(m.to.begin(), m.to.end(), node_id) != m.to.end()) ++onto;
  }
  if (!node_id.empty()) {
    doc["node_id"] = node_id;
    doc["partitions_onto_node"] = onto;
  }
  print_json(doc);
  return failed == 0 ? kExitOk : kExitError;
}

}  // namespace

NodeCommands add_node_commands(CLI::App& app) {
  NodeCommands c;
  auto* node = app.add_subcommand("node", "operator actions on one node");
  node->require_subcommand(1);
  c.add = node->add_subcommand(
      "add",
      "put a node to work: wait until it registered (start catenad with --controller) and is ALIVE, then "
      "rebalance so that partition roles move onto it at their tail offset (no history copied)");
  c.add->add_option("node", c.node_id, "node id (catenad --node-id)")->required();
  c.add->add_option("--timeout-ms", c.timeout_ms, "how long to wait for the node to be registered and ALIVE")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c.add->add_flag("--dry-run", c.dry_run, "print the plan, change nothing");
  c.drain = node->add_subcommand(
      "drain",
      "empty a node so that it can be stopped with nothing lost: each of its replicas gets a replacement "
      "that copies the partition while the chain keeps acknowledging, then takes its place");
  c.drain->add_option("node", c.node_id, "node id (see `catena status`)")->required();
  c.drain->add_flag("--no-wait", c.no_wait, "return once the drain is recorded");
  c.drain->add_option("--timeout-s", c.timeout_s, "give up waiting after this long (the drain goes on)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c.rebalance = app.add_subcommand(
      "rebalance",
      "even out replicas and heads across the serving nodes (a newly added one among them) by moving "
      "partitions at their tail offset: no history is copied");
  c.rebalance->add_flag("--dry-run", c.dry_run, "print the plan, change nothing");
  return c;
}

int node_add(const Common& common, const NodeCommands& c) {
  const std::string what = "node add " + c.node_id;
  control::ControllerClient::Options opts = common.client_options();
  control::ControllerClient client(opts);
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::milliseconds(c.timeout_ms);
  std::string last = "the controller did not answer";
  int last_code = kExitUnavailable;
  for (;;) {
    auto status = client.cluster_status();
    if (status) {
      const auto* n = find_node(*status, c.node_id);
      last_code = n == nullptr ? kExitNotFound : kExitUnavailable;
      if (n == nullptr) {
        last = "it has not registered (start it: catenad --controller " + opts.address + " --node-id " +
               c.node_id + ")";
      } else if (n->drain != control::idl::DrainState::SERVING) {
        return fail(what,
                    c.node_id + " is " +
                        (n->drain == control::idl::DrainState::DRAINING ? "DRAINING" : "DRAINED") +
                        ": it takes no partitions (a drained node serves again once it registers again)",
                    kExitError);
      } else if (n->state == control::idl::NodeState::ALIVE) {
        break;
      } else {
        last = "it is " + control::idl::to_string(n->state) + " (see `catena status`)";
      }
    } else {
      last_code = exit_code_of(status.error());
      last = "the controller did not answer: " + status.error().describe();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail(what, c.node_id + " is not ALIVE after " + std::to_string(c.timeout_ms) + " ms: " + last,
                  last_code);
    }
    std::this_thread::sleep_for(100ms);
  }
  if (!common.json) {
    std::printf("%s is ALIVE; %s\n", c.node_id.c_str(),
                c.dry_run ? "planning (dry run)" : "rebalancing onto it");
  }
  control::ControllerClient::Options long_opts = opts;
  long_opts.rpc_timeout = std::max(opts.rpc_timeout, std::chrono::milliseconds(600000));  // every move waits
  control::ControllerClient mover(long_opts);
  auto r = mover.add_node(c.node_id, c.dry_run);
  if (!r) return fail(what, r.error());
  if (common.json) return print_plan_json(*r, c.node_id);
  return print_plan(*r, c.node_id) == 0 ? kExitOk : kExitError;
}

int node_drain(const Common& common, const NodeCommands& c) {
  control::ControllerClient::Options opts = common.client_options();
  control::ControllerClient client(opts);
  const auto started = std::chrono::steady_clock::now();
  auto r = client.drain_node(c.node_id);
  if (!r) return fail("node drain " + c.node_id, r.error());
  const auto print_drain = [&](const char* drain, int replicas, int ranges, long long elapsed_ms) {
    print_json({{"node_id", c.node_id},
                {"drain", drain},
                {"replicas", replicas},
                {"sealed_ranges", ranges},
                {"elapsed_ms", elapsed_ms}});
  };
  if (common.json && c.no_wait) {
    print_drain("DRAINING", r->replicas, r->sealed_ranges, 0);
    return 0;
  }
  if (!common.json) {
    std::printf("%s is draining: %d replica(s) and %d sealed range(s) to hand over\n", c.node_id.c_str(),
                r->replicas, r->sealed_ranges);
  }
  if (c.no_wait) return 0;
  int last_replicas = r->replicas;
  int last_ranges = r->sealed_ranges;
  while (std::chrono::steady_clock::now() - started < std::chrono::seconds(c.timeout_s)) {
    std::this_thread::sleep_for(100ms);
    auto status = client.cluster_status();
    if (!status) continue;  // the controller may be restarting: the drain resumes there
    const auto* n = find_node(*status, c.node_id);
    if (n == nullptr) return fail("node drain " + c.node_id, "the node is no longer known", kExitNotFound);
    if (n->state == control::idl::NodeState::DEAD) {
      return fail("node drain " + c.node_id,
                  "the node died during the drain; its chains are repaired without it (an empty "
                  "process that registers again is DRAINED at once)");
    }
    if (!common.json && (n->replicas != last_replicas || n->sealed_ranges != last_ranges)) {
      std::printf("  %d replica(s), %d sealed range(s) left\n", n->replicas, n->sealed_ranges);
      last_replicas = n->replicas;
      last_ranges = n->sealed_ranges;
    }
    if (n->drain == control::idl::DrainState::DRAINED) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      if (common.json) {
        print_drain("DRAINED", n->replicas, n->sealed_ranges, static_cast<long long>(ms.count()));
      } else {
        std::printf("%s is DRAINED after %lld ms: no route names it; it can be stopped\n", c.node_id.c_str(),
                    static_cast<long long>(ms.count()));
      }
      return 0;
    }
  }
  return fail("node drain " + c.node_id,
              "not drained yet after " + std::to_string(c.timeout_s) +
                  " s; it goes on (see `catena status`: a chain may lack a replacement)",
              kExitUnavailable);
}

int rebalance(const Common& common, const NodeCommands& c) {
  control::ControllerClient::Options opts = common.client_options();
  opts.rpc_timeout = std::max(opts.rpc_timeout, std::chrono::milliseconds(600000));  // every move waits
  control::ControllerClient client(opts);
  auto r = client.rebalance(c.dry_run);
  if (!r) return fail("rebalance", r.error());
  if (common.json) return print_plan_json(*r);
  return print_plan(*r) == 0 ? kExitOk : kExitError;
}

}  // namespace catena::cli
