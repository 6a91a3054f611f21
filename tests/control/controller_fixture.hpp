// FakeBroker and the in-process controller fixture shared by the control-plane tests.
#pragma once

#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catena/control/controller.hpp>
#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/inproc_broker_admin.hpp>
#include <catena/fabric/clock.hpp>

#include "test_support.hpp"

namespace catena::control::testing {

// A broker's BrokerAdmin as the contract in catena.thrift describes it: it
// keeps the newest route per partition, refuses older epochs with
// STALE_EPOCH, treats a repeated epoch as a no-op. Records every call.
//
// Its reports (heartbeat stats and ping answers, see report()) carry the
// progress of every route it is a member of, at the installed epoch: a
// replica with a successor (a tail with a joining node behind it included)
// reports a backlog of 0 unless the test set one with set_backlog(), and a
// tail reports its joining successor synced when the backlog is 0 unless the
// test said otherwise with set_synced(), so a joining node is caught up as
// soon as its tail runs its epoch.
class FakeBroker final : public idl::BrokerAdminIf {
 public:
  explicit FakeBroker(std::string name) : name_(std::move(name)) {}

  // InProcBrokerAdmin never authenticates: the controller's credentials
  // are tested against the real BrokerAdmin server (node_agent_test.cpp).
  void authenticate(const std::string& /*admin_secret*/, std::int64_t /*controller_epoch*/) override {}

  void configureChain(const idl::ChainAssignment& a) override {
    std::lock_guard lock(mu_);
    configure_calls_.push_back(a);
    const auto key = std::make_pair(a.route.channel, a.route.partition);
    auto it = installed_.find(key);
    if (it != installed_.end() && a.route.epoch < it->second.epoch) {
      idl::CatenaError e;
      e.__set_code(idl::ErrorCode::STALE_EPOCH);
      e.__set_message(name_ + ": stale configureChain");
      e.__set_current_route(it->second);
      throw e;
    }
    installed_[key] = a.route;
  }
  void fence(const std::string& channel, std::int32_t partition, std::int64_t epoch) override {
    std::lock_guard lock(mu_);
    fences_.push_back({channel, partition, epoch});
  }
  void ping(idl::NodeStats& out) override {
    out = report();
    std::lock_guard lock(mu_);
    ++pings_;
  }
  // Seals as a head would: the end offset set by set_end_offset(), committed
  // up to it less set_commit_lag(), with the producers set_producers() gave.
  void seal(idl::SealReply& out, const std::string& channel, std::int32_t partition,
            std::int64_t epoch) override {
    std::lock_guard lock(mu_);
    seals_.push_back({channel, partition, epoch});
    if (seal_error_) {
      idl::CatenaError e;
      e.__set_code(idl::ErrorCode::INVALID_ARGUMENT);
      e.__set_message(name_ + ": cannot seal");
      throw e;
    }
    const auto key = std::make_pair(channel, partition);
    const auto e = end_offset_.find(key);
    out.__set_end_offset(e == end_offset_.end() ? 0 : e->second);
    out.__set_commit_offset(out.end_offset - commit_lag_);
    if (auto p = producers_.find(key); p != producers_.end()) out.__set_producers(p->second);
  }
  // Appends a marker as a head would: at the end offset (which grows by one),
  // committed unless set_commit_lag() holds the commit back; a marker of the
  // same or a newer generation already there is answered again.
  void appendMarker(idl::MarkerReply& out, const std::string& channel, std::int32_t partition,
                    std::int64_t epoch, std::int32_t generation, std::int32_t, std::int32_t) override {
    std::lock_guard lock(mu_);
    markers_calls_.push_back({channel, partition, epoch});
    if (marker_error_) {
      idl::CatenaError e;
      e.__set_code(idl::ErrorCode::INVALID_ARGUMENT);
      e.__set_message(name_ + ": not the head");
      throw e;
    }
    const auto key = std::make_pair(channel, partition);
    auto m = markers_.find(key);
    if (m == markers_.end() || m->second.first < generation) {
      auto& end = end_offset_[key];
      m = markers_.insert_or_assign(key, std::make_pair(generation, end)).first;
      ++end;
    }
    out.__set_offset(m->second.second);
    out.__set_commit_offset(end_offset_[key] - commit_lag_);
  }
  void set_marker_error(bool fail) {
    std::lock_guard lock(mu_);
    marker_error_ = fail;
  }
  // The offset of the newest marker it holds in channel/partition.
  [[nodiscard]] std::optional<std::int64_t> marker(const std::string& channel, std::int32_t p) const {
    std::lock_guard lock(mu_);
    auto m = markers_.find({channel, p});
    if (m == markers_.end()) return std::nullopt;
    return m->second.second;
  }
  void set_commit_lag(std::int64_t lag) {
    std::lock_guard lock(mu_);
    commit_lag_ = lag;
  }
  void set_seal_error(bool fail) {
    std::lock_guard lock(mu_);
    seal_error_ = fail;
  }
  void set_producers(const std::string& channel, std::int32_t p,
                     std::vector<idl::ProducerSnapshot> producers) {
    std::lock_guard lock(mu_);
    producers_[{channel, p}] = std::move(producers);
  }
  [[nodiscard]] std::size_t seal_calls() const {
    std::lock_guard lock(mu_);
    return seals_.size();
  }

  // What the broker reports about itself: load set by set_stats(), plus
  // progress of every installed route that lists node_id.
  [[nodiscard]] idl::NodeStats report() const {
    std::lock_guard lock(mu_);
    idl::NodeStats out = stats_;
    std::vector<idl::PartitionProgress> progress;
    for (const auto& [key, route] : installed_) {
      std::vector<std::string> line;
      for (const auto& r : route.replicas) line.push_back(r.node_id);
      for (const auto& r : route.joining) line.push_back(r.node_id);
      const auto at = std::find(line.begin(), line.end(), node_id_);
      if (at == line.end()) continue;
      idl::PartitionProgress p;
      p.__set_channel(key.first);
      p.__set_partition(key.second);
      p.__set_epoch(route.epoch);
      const bool has_successor = at + 1 != line.end();
      auto b = backlog_.find(key);
      p.__set_successor_backlog_bytes(!has_successor ? -1 : b == backlog_.end() ? 0 : b->second);
      auto sy = synced_.find(key);
      p.__set_successor_synced(has_successor &&
                               (sy != synced_.end() ? sy->second : p.successor_backlog_bytes == 0));
      if (auto e = end_offset_.find(key); e != end_offset_.end()) {
        p.__set_end_offset(e->second);
        p.__set_commit_offset(e->second);
      }
      progress.push_back(std::move(p));
    }
    out.partitions = std::move(progress);  // the generated setter would copy
    out.__isset.partitions = true;
    return out;
  }
  void set_node_id(const std::string& id) {
    std::lock_guard lock(mu_);
    node_id_ = id;
  }
  // The backlog this broker reports towards its successor in
  // channel/partition from now on (whenever it has one).
  void set_backlog(const std::string& channel, std::int32_t p, std::int64_t bytes) {
    std::lock_guard lock(mu_);
    backlog_[{channel, p}] = bytes;
  }

  // Whether it reports its joining successor synced from now on (otherwise:
  // when the backlog is 0).
  void set_synced(const std::string& channel, std::int32_t p, bool synced) {
    std::lock_guard lock(mu_);
    synced_[{channel, p}] = synced;
  }

  // The end (and commit) offset it reports for channel/partition from now on.
  void set_end_offset(const std::string& channel, std::int32_t p, std::int64_t offset) {
    std::lock_guard lock(mu_);
    end_offset_[{channel, p}] = offset;
  }

  [[nodiscard]] std::vector<idl::ChainAssignment> configure_calls() const {
    std::lock_guard lock(mu_);
    return configure_calls_;
  }
  // Epochs of every configureChain this broker accepted or refused, in order.
  [[nodiscard]] std::vector<std::int64_t> epochs_seen(const std::string& channel,
                                                      std::int32_t partition) const {
    std::lock_guard lock(mu_);
    std::vector<std::int64_t> out;
    for (const auto& a : configure_calls_) {
      if (a.route.channel == channel && a.route.partition == partition) out.push_back(a.route.epoch);
    }
    return out;
  }
  [[nodiscard]] std::optional<idl::PartitionRoute> installed(const std::string& channel,
                                                             std::int32_t p) const {
    std::lock_guard lock(mu_);
    auto it = installed_.find({channel, p});
    if (it == installed_.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] int pings() const {
    std::lock_guard lock(mu_);
    return pings_;
  }
  void set_stats(const idl::NodeStats& s) {
    std::lock_guard lock(mu_);
    stats_ = s;
  }

  struct Fence {
    std::string channel;
    std::int32_t partition;
    std::int64_t epoch;
  };
  [[nodiscard]] std::vector<Fence> fences() const {
    std::lock_guard lock(mu_);
    return fences_;
  }
  // appendMarker calls, in order.
  [[nodiscard]] std::vector<Fence> marker_calls() const {
    std::lock_guard lock(mu_);
    return markers_calls_;
  }

 private:
  std::string name_;
  mutable std::mutex mu_;
  std::string node_id_;
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> backlog_;
  std::map<std::pair<std::string, std::int32_t>, bool> synced_;
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> end_offset_;
  std::vector<idl::ChainAssignment> configure_calls_;
  std::map<std::pair<std::string, std::int32_t>, idl::PartitionRoute> installed_;
  std::vector<Fence> fences_;
  std::vector<Fence> seals_;
  std::vector<Fence> markers_calls_;
  std::map<std::pair<std::string, std::int32_t>, std::pair<std::int32_t, std::int64_t>> markers_;
  bool marker_error_ = false;
  std::map<std::pair<std::string, std::int32_t>, std::vector<idl::ProducerSnapshot>> producers_;
  std::int64_t commit_lag_ = 0;
  bool seal_error_ = false;
  idl::NodeStats stats_;
  int pings_ = 0;
};

// A controller over a ManualClock and in-process brokers. Nodes are added
// by name; each gets a FakeBroker at "<name>.test:7000" and heartbeats only
// when the test says so.
class ControllerFixture : public ::testing::Test {
 protected:
  struct Node {
    std::string id;
    std::int64_t epoch = 0;
    std::string admin_addr;
    std::string zone;
    std::string datacenter;
    std::shared_ptr<FakeBroker> broker;
  };

  Controller::Options options() {
    Controller::Options o;
    o.data_dir = dir_.path() / "meta";
    o.metadata = metadata_;
    o.heartbeat_interval = std::chrono::milliseconds(100);
    o.heartbeat_timeout = std::chrono::milliseconds(500);
    o.probe_attempts = 2;
    o.push_retry_initial = std::chrono::milliseconds(100);
    o.push_retry_max = std::chrono::milliseconds(1000);
    o.crash_point = [this](std::string_view point) { return point == crash_at_; };
    o.wall_clock_ms = [this] { return wall_ms_; };
    o.isolation_percent = isolation_percent_;
    o.heartbeat_loss = heartbeat_loss_;
    o.link_fault_timeout = std::chrono::milliseconds(3000);    // LinkFaults.* count reports against 3 s
    o.marker_commit_timeout = std::chrono::milliseconds(200);  // Alter.* wait this out for a held commit
    o.replacement_delay = replacement_delay_;
    return o;
  }

  void SetUp() override { open(); }

  void open() {
    auto c = Controller::open(options(), clock_, admin_);
    ASSERT_TRUE(c.ok()) << c.error().describe();
    controller_ = std::move(*c);
  }
  // Drops the controller object (as if its process died) and opens a new one
  // on the same data directory.
  void restart() {
    controller_.reset();
    crash_at_.clear();
    open();
  }

  Node& add_node(const std::string& name, const std::string& zone, std::string node_id = {},
                 const std::string& datacenter = {}) {
    Node n;
    n.admin_addr = name + ".test:7000";
    n.zone = zone;
    n.datacenter = datacenter;
    n.broker = std::make_shared<FakeBroker>(name);
    admin_.attach(n.admin_addr, n.broker);
    idl::NodeInfo info;
    info.__set_node_id(node_id);
    info.__set_admin_addr(n.admin_addr);
    info.__set_fabric_addr(name + ".test:9000");
    info.__set_zone(zone);
    info.__set_datacenter(datacenter);
    auto r = controller_->register_node(info);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    n.id = r->node_id;
    n.epoch = r->node_epoch;
    n.broker->set_node_id(n.id);
    nodes_[name] = n;
    return nodes_[name];
  }

  // The node registers again under its id, as a new incarnation. held: what
  // it says it kept (nothing: a restarted, empty process, which also gets a
  // fresh FakeBroker; otherwise the same broker, with its routes, answers).
  Node& register_again(const std::string& name, const std::vector<idl::PartitionProgress>& held = {}) {
    Node& n = nodes_.at(name);
    if (held.empty()) {
      n.broker = std::make_shared<FakeBroker>(name);
      n.broker->set_node_id(n.id);
    }
    admin_.attach(n.admin_addr, n.broker);
    idl::NodeInfo info;
    info.__set_node_id(n.id);
    info.__set_admin_addr(n.admin_addr);
    info.__set_fabric_addr(name + ".test:9000");
    info.__set_zone(n.zone);
    info.__set_datacenter(n.datacenter);
    auto r = controller_->register_node(info, held);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    if (r.ok()) n.epoch = r->node_epoch;
    return n;
  }

  void heartbeat(const std::string& name) {
    const auto& n = nodes_.at(name);
    idl::HeartbeatRequest req;
    req.__set_node_id(n.id);
    req.__set_node_epoch(n.epoch);
    req.__set_stats(n.broker->report());
    auto r = controller_->heartbeat(req);
    ASSERT_TRUE(r.ok()) << r.error().describe();
    ASSERT_FALSE(r->fenced) << name;
  }
  void heartbeat_all_but(const std::set<std::string>& silent = {}) {
    for (const auto& [name, n] : nodes_) {
      if (silent.count(name) == 0) heartbeat(name);
    }
  }
  // Takes a broker down: it stops heartbeating (the test decides) and no
  // longer answers BrokerAdmin calls.
  void kill_broker(const std::string& name) { admin_.detach(nodes_.at(name).admin_addr); }

  // Advances time in heartbeat-sized steps, heartbeating the living, and
  // ticks after each step.
  void run_for(std::chrono::milliseconds total, const std::set<std::string>& silent = {}) {
    for (auto t = std::chrono::milliseconds(0); t < total; t += std::chrono::milliseconds(100)) {
      clock_.advance(std::chrono::milliseconds(100));
      heartbeat_all_but(silent);
      controller_->tick();
    }
  }

  idl::NodeState::type state_of(const std::string& name) {
    auto status = controller_->cluster_status();
    EXPECT_TRUE(status.ok());
    for (const auto& s : status->nodes) {
      if (s.info.node_id == nodes_.at(name).id) return s.state;
    }
    ADD_FAILURE() << "no status for " << name;
    return idl::NodeState::DEAD;
  }

  idl::PartitionRoute route(const std::string& channel, int partition = 0) {
    auto r = controller_->get_route(channel, partition, 0);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    return r.ok() ? *r : idl::PartitionRoute{};
  }

  std::string id(const std::string& name) const { return nodes_.at(name).id; }

  TempDir dir_;
  std::string metadata_;  // Options::metadata; empty: the directory store in dir_
  ManualClock clock_;
  InProcBrokerAdmin admin_;
  std::unique_ptr<Controller> controller_;
  std::map<std::string, Node> nodes_;
  std::string crash_at_;
  std::int64_t wall_ms_ = 1'000'000'000;         // the controller's wall clock (sealed ranges); tests move it
  int isolation_percent_ = 50;                   // takes effect at open() / restart()
  std::chrono::milliseconds heartbeat_loss_{0};  // takes effect at open() / restart()
  std::chrono::milliseconds replacement_delay_{0};  // takes effect at open() / restart()
};

}  // namespace catena::control::testing
