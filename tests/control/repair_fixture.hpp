// The chain-repair tests' fixture: five nodes on the in-process controller
// (controller_fixture.hpp), three of them holding channel "orders". The
// scenarios, by topic: repair_test.cpp (a node dies: order, epochs, pushes,
// replacement choice, re-registration), repair_joining_test.cpp (the
// joining stage and a chain's last member), link_fault_test.cpp (data-plane
// link faults reported while the suspect answers probes).
#pragma once

#include <chrono>
#include <cstdint>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "controller_fixture.hpp"

namespace catena::control::testing {

using Ids = std::vector<std::string>;

// a(z1) b(z2) c(z3) hold the chain [a, b, c]; d(z1) and e(z2) join later as
// spares, so a replacement choice between them shows zone awareness (d sorts
// first on every load key, e only wins on zone).
class Repair : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    auto ch = controller_->create_channel(channel_config("orders"));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    ASSERT_EQ(chain_of(ch->routes[0]), (Ids{id("a"), id("b"), id("c")}));
    add_node("d", "z1");
    add_node("e", "z2");
  }

  // Kills name and runs until its chains are back to three replicas.
  void kill_and_repair(const std::string& name) {
    using namespace std::chrono_literals;
    kill_broker(name);
    run_for(2000ms, {name});
    ASSERT_EQ(state_of(name), idl::NodeState::DEAD);
  }

  std::int32_t replicas_held_by(const std::string& name) {
    auto status = controller_->cluster_status();
    EXPECT_TRUE(status.ok());
    for (const auto& s : status->nodes) {
      if (s.info.node_id == id(name)) return s.replicas;
    }
    ADD_FAILURE() << "no status for " << name;
    return -1;
  }

  // Every broker in the final route has it installed, and the repair is closed.
  void expect_settled(const idl::PartitionRoute& r) {
    for (const auto& rep : r.replicas) {
      for (const auto& [name, n] : nodes_) {
        if (n.id != rep.node_id) continue;
        auto installed = n.broker->installed(r.channel, r.partition);
        ASSERT_TRUE(installed.has_value()) << name;
        EXPECT_EQ(*installed, r) << name;
      }
    }
    auto status = controller_->cluster_status();
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->repairs_in_progress, 0);
    EXPECT_TRUE(controller_->metadata().intents.empty());
  }
};

}  // namespace catena::control::testing
