// StaticRoutes: a RouteSource whose routes are set by hand (tests, tools,
// pointing a client at brokers without a controller). Internal to the
// library; the public RouteSource and its types are in
// <catena/client/routes.hpp>.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/client/routes.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena {

// Routes set by hand (tests, tools). Thread-safe.
class StaticRoutes final : public RouteSource {
 public:
  void set(const Route& r, std::uint32_t partitions, std::uint32_t segment_bytes);
  // The channel generation layout() says (0 until set).
  void set_generation(const std::string& channel, std::uint64_t generation);
  client::Result<ChannelLayout> layout(const std::string& channel) override;
  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override;
  // Issues from an in-memory counter (ids issued here have bit 62 set).
  client::Result<ProducerIdentity> init_producer(std::uint64_t producer_id) override;
  void report_unreachable(const std::string& node_id, const Route& route, const std::string& reason) override;
  client::Result<void> commit_offset(const std::string& group, const std::string& channel,
                                     std::uint32_t partition, std::uint64_t offset) override;
  client::Result<std::uint64_t> committed_offset(const std::string& group, const std::string& channel,
                                                 std::uint32_t partition) override;
  std::vector<std::string> unreachable_reports() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, ChannelLayout> layouts_ GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::uint32_t>, Route> routes_ GUARDED_BY(mu_);
  std::map<std::string, std::uint64_t> group_offsets_ GUARDED_BY(mu_);
  std::vector<std::string> reports_ GUARDED_BY(mu_);
  std::uint64_t next_producer_number_ GUARDED_BY(mu_) = 1;
};

}  // namespace catena
