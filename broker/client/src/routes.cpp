#include <catena/broker/routes.hpp>

namespace catena {

using client::ErrorCode;
using client::make_error;

void StaticRoutes::set(const Route& r, std::uint32_t partitions, std::uint32_t segment_bytes) {
  MutexLock lk(mu_);
  ChannelLayout& l = layouts_[r.channel];
  l.partitions = partitions;
  l.segment_bytes = segment_bytes;
  routes_[{r.channel, r.partition}] = r;
}

void StaticRoutes::set_generation(const std::string& channel, std::uint64_t generation) {
  MutexLock lk(mu_);
  layouts_[channel].generation = generation;
}

client::Result<ChannelLayout> StaticRoutes::layout(const std::string& channel) {
  MutexLock lk(mu_);
  auto it = layouts_.find(channel);
  if (it == layouts_.end())
    return make_error(ErrorCode::unknown_channel, "unknown channel '" + channel + "'");
  return it->second;
}

client::Result<Route> StaticRoutes::route(const std::string& channel, std::uint32_t partition,
                                          std::uint64_t) {
  MutexLock lk(mu_);
  auto it = routes_.find({channel, partition});
  if (it == routes_.end()) {
    return make_error(ErrorCode::invalid_argument,
                      "unknown partition " + channel + "/" + std::to_string(partition));
  }
  return it->second;
}

client::Result<ProducerIdentity> StaticRoutes::init_producer(std::uint64_t producer_id) {
  MutexLock lk(mu_);
  ProducerIdentity id;
  id.producer_epoch = next_producer_number_++;
  id.producer_id = producer_id != 0 ? producer_id : (std::uint64_t{1} << 62 | next_producer_number_++);
  return id;
}

void StaticRoutes::report_unreachable(const std::string& node_id, const Route&, const std::string&) {
  MutexLock lk(mu_);
  reports_.push_back(node_id);
}

client::Result<void> StaticRoutes::commit_offset(const std::string& group, const std::string& channel,
                                                 std::uint32_t partition, std::uint64_t offset) {
  MutexLock lk(mu_);
  group_offsets_[group + "\n" + channel + "\n" + std::to_string(partition)] = offset;
  return {};
}

client::Result<std::uint64_t> StaticRoutes::committed_offset(const std::string& group,
                                                             const std::string& channel,
                                                             std::uint32_t partition) {
  MutexLock lk(mu_);
  auto it = group_offsets_.find(group + "\n" + channel + "\n" + std::to_string(partition));
  if (it == group_offsets_.end()) return make_error(ErrorCode::no_committed_offset, "no committed offset");
  return it->second;
}

std::vector<std::string> StaticRoutes::unreachable_reports() const {
  MutexLock lk(mu_);
  return reports_;
}

}  // namespace catena
