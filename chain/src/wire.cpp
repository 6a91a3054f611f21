#include <catena/chain/wire.hpp>

namespace catena::chain::wire {

std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::unknown_channel:
      return "unknown_channel";
    case Status::stale_epoch:
      return "stale_epoch";
    case Status::not_head:
      return "not_head";
    case Status::sequence_gap:
      return "sequence_gap";
    case Status::producer_fenced:
      return "producer_fenced";
    case Status::too_large:
      return "too_large";
    case Status::log_full:
      return "log_full";
    case Status::corrupt:
      return "corrupt";
    case Status::position_expired:
      return "position_expired";
    case Status::data_lost:
      return "data_lost";
    case Status::resource_exhausted:
      return "resource_exhausted";
    case Status::unauthenticated:
      return "unauthenticated";
    case Status::moved:
      return "moved";
    case Status::remap:
      return "remap";
    case Status::bad_request:
      return "bad_request";
    case Status::not_ready:
      return "not_ready";
    case Status::unavailable:
      return "unavailable";
    case Status::not_tail:
      return "not_tail";
  }
  return "unknown";
}

std::optional<Kind> peek(const std::byte* in, std::uint32_t len) {
  if (in == nullptr || len < sizeof(WireHeader) || len > kMaxMessage) return std::nullopt;
  WireHeader h;
  std::memcpy(&h, in, sizeof h);
  if (h.magic != kMagic || h.version != kVersion || h.length != len) return std::nullopt;
  const auto k = static_cast<std::uint16_t>(h.kind);
  if (k < static_cast<std::uint16_t>(Kind::replica_hello) ||
      k > static_cast<std::uint16_t>(Kind::publish_held)) {
    return std::nullopt;
  }
  return h.kind;
}

}  // namespace catena::chain::wire
