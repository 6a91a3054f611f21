// The client halves of the simulation: a publisher and a subscriber of one
// partition, stepped by the simulation thread.
//
// They are not catena::Publisher and catena::Subscriber: those read the
// steady clock and block in Link::dial and in route lookups, which a single
// thread that also steps the brokers cannot allow. These follow the same
// protocol with the same rules (chain::FrameRingWriter / FrameRingReader,
// the head's welcome resyncs sequences, unacknowledged records are resent
// on a new head, a subscriber resumes at its next offset on any replica),
// over polled dials (Link::Dialing) and SimClock, and report what they see
// to the checker through callbacks.
//
// Threading: the simulation thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>

#include <catena/chain/delivery.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/control/idl/catena_types.h>
#include <catena/fabric/fault_provider.hpp>

#include "sim_node.hpp"

namespace catena::sim {

class SimPublisher {
 public:
  // publish id, sequence, offset (~0: a duplicate beyond the window), the
  // epoch of the replica that acknowledged it.
  using OnAck =
      std::function<void(std::uint64_t id, std::uint64_t seq, std::uint64_t offset, std::uint64_t epoch)>;

  SimPublisher(SimNet& net, std::string channel, OnAck on_ack);
  ~SimPublisher();
  SimPublisher(const SimPublisher&) = delete;
  SimPublisher& operator=(const SimPublisher&) = delete;

  [[nodiscard]] bool start();
  // Queues a record carrying `id` (payload: id, then `filler` bytes). False
  // if the ring has no room (back-pressure).
  bool publish(std::uint64_t id, std::uint32_t filler);
  void step();

  [[nodiscard]] std::size_t pending() const { return pending_.size(); }
  [[nodiscard]] fabric::FaultInjector& faults() { return *faults_; }
  [[nodiscard]] std::uint64_t producer_id() const { return producer_id_; }
  // Test-only: the first ok acknowledgement is reported one offset off, so
  // the checker's own test can see it fail.
  void corrupt_first_ack() { corrupt_ack_ = true; }

 private:
  struct Pending {
    std::uint64_t id = 0;
    std::uint64_t seq = 0;
    std::uint32_t pos = 0;
    std::uint32_t frame_bytes = 0;
  };

  void connect();
  void on_welcome(const chain::wire::PublisherWelcome& w, std::unique_ptr<chain::Link> link);
  void lost_head(const std::string& why);
  void flush();
  void on_ack(const chain::wire::PublishAck& ack);
  bool place(std::uint32_t frame_bytes, std::uint32_t* pos);
  void log(const std::string& line) { net_.log("publisher " + line); }

  SimNet& net_;
  std::string channel_;
  OnAck on_ack_;
  std::shared_ptr<fabric::FaultInjector> faults_;
  std::unique_ptr<fabric::Provider> provider_;
  std::unique_ptr<fabric::MemoryRegion> mirror_;  // the ring's image, flushed to the head's ring
  std::uint64_t producer_id_ = 0;
  std::uint64_t producer_epoch_ = 0;
  control::idl::PartitionRoute route_;
  std::optional<chain::Link::Dialing<chain::wire::PublisherWelcome>> dialing_;
  std::uint64_t dial_deadline_ns_ = 0;
  std::unique_ptr<chain::Link> link_;
  fabric::RemoteRegion ring_{};
  chain::FrameRingWriter writer_;
  std::deque<Pending> pending_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t retry_at_ns_ = 0;
  std::uint64_t last_progress_ns_ = 0;
  std::uint64_t route_check_at_ns_ = 0;
  bool resync_ = false;
  bool corrupt_ack_ = false;
};

class SimSubscriber {
 public:
  // offset and publish id of each record delivered, in delivery order.
  using OnRecord = std::function<void(std::uint64_t offset, std::uint64_t id)>;
  // A protocol violation the subscriber saw (a garbled frame, a bad checksum).
  using OnViolation = std::function<void(const std::string&)>;

  SimSubscriber(SimNet& net, std::string channel, std::uint32_t segment_bytes, std::uint64_t seed,
                OnRecord on_record, OnViolation on_violation);
  ~SimSubscriber();
  SimSubscriber(const SimSubscriber&) = delete;
  SimSubscriber& operator=(const SimSubscriber&) = delete;

  [[nodiscard]] bool start();
  // `behind`: records the publisher has had acknowledged that this
  // subscriber has not seen (a stalled session is dropped only then).
  void step(bool behind);

  [[nodiscard]] std::uint64_t next_offset() const { return next_; }
  [[nodiscard]] fabric::FaultInjector& faults() { return *faults_; }

 private:
  void connect();
  void drop(const std::string& why);
  void log(const std::string& line) { net_.log("subscriber " + line); }

  SimNet& net_;
  std::string channel_;
  OnRecord on_record_;
  OnViolation on_violation_;
  std::mt19937_64 rng_;
  std::shared_ptr<fabric::FaultInjector> faults_;
  std::unique_ptr<fabric::Provider> provider_;
  std::unique_ptr<fabric::MemoryRegion> ring_;
  std::uint32_t ring_bytes_ = 0;
  chain::FrameRingReader reader_;
  std::optional<chain::Link::Dialing<chain::wire::SubscriberWelcome>> dialing_;
  std::uint64_t dial_deadline_ns_ = 0;
  std::string replica_;
  std::unique_ptr<chain::Link> link_;
  std::uint64_t next_ = 0;
  bool started_ = false;
  std::uint64_t retry_at_ns_ = 0;
  std::uint64_t last_progress_ns_ = 0;
};

}  // namespace catena::sim
