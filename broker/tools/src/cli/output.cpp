#include "output.hpp"

#include <cstdint>
#include <cstdio>
#include <openssl/evp.h>
#include <vector>

#include <catena/broker/subscriber.hpp>
#include <catena/control/result.hpp>

#include "commands.hpp"

namespace catena::cli {

using nlohmann::json;
namespace idl = control::idl;

int exit_code_of(const control::ControlError& e) noexcept {
  switch (e.code) {
    case idl::ErrorCode::OK:
      return kExitOk;
    case idl::ErrorCode::UNKNOWN_CHANNEL:
    case idl::ErrorCode::UNKNOWN_NODE:
      return kExitNotFound;
    case idl::ErrorCode::CHANNEL_EXISTS:
      return kExitExists;
    case idl::ErrorCode::INVALID_ARGUMENT:
      return kExitUsage;
    case idl::ErrorCode::UNAUTHENTICATED:
    case idl::ErrorCode::PERMISSION_DENIED:
    case idl::ErrorCode::RESOURCE_EXHAUSTED:
      return kExitRefused;
    // The same call may work later: the controller is back, a leader is
    // elected, enough nodes have registered.
    case idl::ErrorCode::UNAVAILABLE:
    case idl::ErrorCode::NOT_LEADER:
    case idl::ErrorCode::NOT_ENOUGH_NODES:
      return kExitUnavailable;
    default:
      return kExitError;
  }
}

int exit_code_of(client::ErrorCode code) noexcept {
  switch (code) {
    case client::ErrorCode::ok:
      return kExitOk;
    case client::ErrorCode::invalid_argument:
      return kExitUsage;
    case client::ErrorCode::unknown_channel:
      return kExitNotFound;
    case client::ErrorCode::unauthenticated:
      return kExitRefused;
    default:
      return client::retriable(code) ? kExitUnavailable : kExitError;
  }
}

int fail(const std::string& what, const std::string& why, int code) {
  std::fprintf(stderr, "catena: %s: %s\n", what.c_str(), why.c_str());
  return code;
}

int fail(const std::string& what, const control::ControlError& e) {
  return fail(what, e.describe(), exit_code_of(e));
}

int fail(const std::string& what, const client::Error& e) {
  return fail(what, e.describe(), exit_code_of(e.code));
}

void print_json(const json& doc) {
  const std::string text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

namespace {

json replicas_json(const std::vector<idl::Replica>& rs) {
  json out = json::array();
  for (const auto& r : rs) {
    out.push_back({{"node_id", r.node_id},
                   {"fabric_addr", r.fabric_addr},
                   {"admin_addr", r.admin_addr},
                   {"node_epoch", r.node_epoch}});
  }
  return out;
}

// -1 (and any negative) is "none" or "unlimited": null.
json or_null(std::int64_t v) {
  return v < 0 ? json(nullptr) : json(v);
}

json or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

}  // namespace

json route_json(const idl::PartitionRoute& r) {
  json sealed = json::array();
  for (const auto& s : r.sealed) {
    sealed.push_back({{"start_offset", s.start_offset},
                      {"end_offset", s.end_offset},
                      {"epoch", s.epoch},
                      {"sealed_at_ms", s.sealed_at_ms},
                      {"chain", replicas_json(s.replicas)}});
  }
  return {{"partition", r.partition},
          {"epoch", r.epoch},
          {"start_offset", r.start_offset},
          {"chain", replicas_json(r.replicas)},
          {"joining", replicas_json(r.joining)},
          {"sealed", std::move(sealed)}};
}

json channel_json(const idl::ChannelInfo& ch) {
  json routes = json::array();
  for (const auto& r : ch.routes) routes.push_back(route_json(r));
  json generations = json::array();
  for (const auto& g : ch.generations) {
    json markers = json::array();
    for (const auto& [p, offset] : g.markers)
      markers.push_back({{"partition", p}, {"offset", or_null(offset)}});
    generations.push_back({{"generation", g.generation},
                           {"partitions", g.partitions},
                           {"complete", g.complete},
                           {"markers", std::move(markers)},
                           {"nodes_told", g.nodes_told},
                           {"control_messages", g.control_messages}});
  }
  return {{"name", ch.config.name},
          {"partitions", ch.config.partitions},
          {"replication", ch.config.replication},
          {"segment_bytes", ch.config.segment_bytes},
          {"ttl_ms", ch.config.ttl_ms},
          {"routes", std::move(routes)},
          {"generations", std::move(generations)}};
}

json cluster_status_json(const idl::ClusterStatus& s, const std::string& controller) {
  json nodes = json::array();
  for (const auto& n : s.nodes) {
    // The replicas it reported in its last heartbeat.
    json partitions = json::array();
    for (const auto& p : n.stats.partitions) {
      partitions.push_back({{"channel", p.channel},
                            {"partition", p.partition},
                            {"epoch", p.epoch},
                            {"end_offset", p.end_offset},
                            {"commit_offset", p.commit_offset}});
    }
    json node = {
        {"node_id", n.info.node_id},
        {"state", idl::to_string(n.state)},
        {"drain", idl::to_string(n.drain)},
        {"zone", n.info.zone},
        {"datacenter", n.info.datacenter},
        {"admin_addr", n.info.admin_addr},
        {"fabric_addr", n.info.fabric_addr},
        {"node_epoch", n.node_epoch},
        {"replicas", n.replicas},
        {"sealed_ranges", n.sealed_ranges},
        {"segments", n.stats.segments},
        {"bytes", n.stats.bytes},
        {"connections", n.stats.connections},
        {"last_heartbeat_ms_ago", n.last_heartbeat_ms_ago},
        {"zeroed_bytes", n.stats.__isset.zeroed_bytes ? json(n.stats.zeroed_bytes) : json(nullptr)},
        {"link_rebuilds", n.stats.__isset.link_rebuilds ? json(n.stats.link_rebuilds) : json(nullptr)},
        {"partitions", std::move(partitions)}};
    nodes.push_back(std::move(node));
  }
  json out = {{"controller", controller},
              {"repairs_in_progress", s.repairs_in_progress},
              {"nodes", std::move(nodes)},
              {"recoveries", nullptr}};
  if (s.__isset.recoveries) {
    const auto& rc = s.recoveries;
    out["recoveries"] = {{"since_ms", rc.since_ms},
                         {"kept_data_rejoins", rc.kept_data_rejoins},
                         {"replaced_in_lost_zone", rc.replaced_in_lost_zone},
                         {"replaced_in_other_zone", rc.replaced_in_other_zone},
                         {"replaced_in_other_datacenter", rc.replaced_in_other_datacenter}};
  }
  return out;
}

json group_json(const idl::GroupStatus& g) {
  json members = json::array();
  for (const auto& m : g.members) {
    members.push_back({{"member_id", m.member_id},
                       {"name", m.name},
                       {"partitions", m.partitions},
                       {"revoking", m.revoking},
                       {"last_heard_ms_ago", m.last_heard_ms_ago}});
  }
  json partitions = json::array();
  for (const auto& p : g.partitions) {
    partitions.push_back({{"partition", p.partition},
                          {"owner", or_null(p.owner)},
                          {"moving_to", or_null(p.moving_to)},
                          {"committed", or_null(p.committed)},
                          {"end_offset", p.end_offset},
                          {"lag", p.lag}});
  }
  return {{"group", g.group},
          {"channel", or_null(g.channel)},
          {"generation", g.generation},
          {"members", std::move(members)},
          {"partitions", std::move(partitions)}};
}

json tenant_json(const idl::TenantInfo& t) {
  const auto& q = t.quotas;
  return {{"name", t.name},
          {"created_at_ms", t.created_at_ms},
          {"channels", t.channels},
          {"partitions", t.partitions},
          {"groups", t.groups},
          {"segment_bytes", t.segment_bytes},
          {"quotas",
           {{"max_channels", or_null(q.max_channels)},
            {"max_partitions", or_null(q.max_partitions)},
            {"max_groups", or_null(q.max_groups)},
            {"max_segment_bytes", or_null(q.max_segment_bytes)},
            {"max_publisher_ring_bytes", or_null(q.max_publisher_ring_bytes)},
            {"max_publish_bytes_per_sec", or_null(q.max_publish_bytes_per_sec)},
            {"max_sessions", or_null(q.max_sessions)},
            {"max_producer_ids_per_minute", or_null(q.max_producer_ids_per_minute)},
            {"zones", q.zones}}}};
}

json plan_json(const idl::RebalancePlan& plan) {
  json moves = json::array();
  for (const auto& m : plan.moves) {
    moves.push_back({{"channel", m.channel},
                     {"partition", m.partition},
                     {"current", m.current},
                     {"to", m.to},
                     {"reason", m.reason},
                     {"error", or_null(m.error)}});
  }
  return {{"dry_run", plan.dry_run}, {"moves", std::move(moves)}};
}

bool valid_utf8(std::span<const std::byte> bytes) noexcept {
  std::size_t i = 0;
  const std::size_t n = bytes.size();
  const auto at = [&](std::size_t k) { return static_cast<unsigned>(bytes[k]); };
  while (i < n) {
    const unsigned c = at(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (at(i + 1) < lo || at(i + 1) > hi) return false;
    for (std::size_t k = 2; k < len; ++k) {
      if ((at(i + k) & 0xC0U) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

std::string base64(std::span<const std::byte> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const auto b : bytes) {
    const auto v = static_cast<unsigned>(b);
    out.push_back(kDigits[v >> 4]);
    out.push_back(kDigits[v & 0xFU]);
  }
  return out;
}

json record_json(const Message& m) {
  json out = {{"partition", m.partition},
              {"offset", m.offset},
              {"timestamp_ns", m.timestamp_ns},
              {"producer_id", m.producer_id},
              {"sequence", m.sequence}};
  if (valid_utf8(m.payload)) {
    out["payload"] = std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
  } else {
    out["payload_base64"] = base64(m.payload);
  }
  // The key and headers, when the record was published with them
  // (publish(Record)): as text when valid UTF-8, else as base64.
  const auto put = [](json& o, const char* name, std::span<const std::byte> bytes) {
    if (valid_utf8(bytes)) {
      o[name] = std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    } else {
      o[std::string(name) + "_base64"] = base64(bytes);
    }
  };
  if (!m.key.empty()) put(out, "key", m.key);
  if (!m.headers.empty()) {
    json headers = json::array();
    for (const HeaderField& h : m.headers) {
      json one;
      put(one, "name", std::as_bytes(std::span(h.name)));
      put(one, "value", std::as_bytes(std::span(h.value)));
      headers.push_back(std::move(one));
    }
    out["headers"] = std::move(headers);
  }
  return out;
}

}  // namespace catena::cli
