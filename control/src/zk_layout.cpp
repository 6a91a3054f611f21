#include "zk_layout.hpp"

#include <charconv>
#include <fmt/format.h>

#include "thrift_codec.hpp"

namespace catena::control::zk {
namespace {

using Kind = Key::Kind;

bool plain(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         (c == '.' && !first);
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || s.empty()) return std::nullopt;
  return v;
}

// "<name>:<n>" of moves/ and handoffs/.
std::optional<std::pair<std::string, std::int64_t>> split_partition(std::string_view name) {
  const auto colon = name.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto channel = unescape_name(name.substr(0, colon));
  auto n = parse_int(name.substr(colon + 1));
  if (!channel || !n) return std::nullopt;
  return std::make_pair(std::move(*channel), *n);
}

template <class T>
std::optional<std::string> encoded(const T& value) {
  return detail::encode(value);
}

template <class Map, class K>
const typename Map::mapped_type* find_in(const Map& map, const K& k) {
  auto it = map.find(k);
  return it == map.end() ? nullptr : &it->second;
}

template <class T>
bool decode_into(const std::string& data, T& out) {
  return detail::decode(data, out);
}

meta::ZkOffsets offsets_of(const std::map<std::int32_t, std::int64_t>& m) {
  meta::ZkOffsets o;
  o.__set_offsets(m);
  return o;
}

}  // namespace

std::string escape_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (plain(c, i == 0)) {
      out.push_back(c);
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

std::optional<std::string> unescape_name(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') {
      if (!plain(name[i], i == 0)) return std::nullopt;
      out.push_back(name[i]);
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= name.size()) return std::nullopt;
    auto [p, ec] = std::from_chars(name.data() + i + 1, name.data() + i + 3, v, 16);
    if (ec != std::errc() || p != name.data() + i + 3) return std::nullopt;
    out.push_back(static_cast<char>(v));
    i += 2;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string path_of(const Key& key) {
  switch (key.kind) {
    case Kind::counters:
      return "counters";
    case Kind::node:
      return "nodes/" + escape_name(key.a);
    case Kind::channel:
      return "channels/" + escape_name(key.a);
    case Kind::route:
      return fmt::format("channels/{}/{}", escape_name(key.a), key.n);
    case Kind::intent:
      return fmt::format("intents/{}", key.n);
    case Kind::offsets:
      return fmt::format("offsets/{}:{}", escape_name(key.a), escape_name(key.b));
    case Kind::high_water:
      return "high_water/" + escape_name(key.a);
    case Kind::move:
      return fmt::format("moves/{}:{}", escape_name(key.a), key.n);
    case Kind::handoff:
      return fmt::format("handoffs/{}:{}", escape_name(key.a), key.n);
    case Kind::tenant:
      return "tenants/" + escape_name(key.a);
  }
  return {};
}

std::optional<Key> key_in_folder(std::string_view folder, std::string_view name) {
  if (folder == "nodes" || folder == "channels" || folder == "high_water" || folder == "tenants") {
    auto a = unescape_name(name);
    if (!a) return std::nullopt;
    const Kind kind = folder == "nodes"      ? Kind::node
                      : folder == "channels" ? Kind::channel
                      : folder == "tenants"  ? Kind::tenant
                                             : Kind::high_water;
    return Key{kind, std::move(*a), {}, 0};
  }
  if (folder == "intents") {
    auto n = parse_int(name);
    if (!n) return std::nullopt;
    return Key{Kind::intent, {}, {}, *n};
  }
  if (folder == "offsets") {
    const auto colon = name.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    auto group = unescape_name(name.substr(0, colon));
    auto channel = unescape_name(name.substr(colon + 1));
    if (!group || !channel) return std::nullopt;
    return Key{Kind::offsets, std::move(*group), std::move(*channel), 0};
  }
  if (folder == "moves" || folder == "handoffs") {
    auto split = split_partition(name);
    if (!split) return std::nullopt;
    return Key{folder == "moves" ? Kind::move : Kind::handoff, std::move(split->first), {}, split->second};
  }
  return std::nullopt;
}

std::set<Key> keys_touched(const meta::MetaState& before, const meta::MetaRecord& record) {
  std::set<Key> keys;
  if (record.__isset.put_node) keys.insert({Kind::node, record.put_node.info.node_id, {}, 0});
  if (record.__isset.put_channel) {
    const auto& name = record.put_channel.config.name;
    keys.insert({Kind::channel, name, {}, 0});
    std::size_t routes = record.put_channel.routes.size();
    if (const auto* old = find_in(before.channels, name)) routes = std::max(routes, old->routes.size());
    for (std::size_t p = 0; p < routes; ++p)
      keys.insert({Kind::route, name, {}, static_cast<std::int64_t>(p)});
  }
  if (record.__isset.put_routes) {
    for (const auto& r : record.put_routes) keys.insert({Kind::route, r.channel, {}, r.partition});
  }
  if (record.__isset.move_route) {
    keys.insert({Kind::route, record.move_route.channel, {}, record.move_route.partition});
  }
  if (record.__isset.begin_repair) keys.insert({Kind::intent, {}, {}, record.begin_repair.id});
  if (record.__isset.end_repair) keys.insert({Kind::intent, {}, {}, record.end_repair});
  if (record.__isset.commit_offset) {
    keys.insert({Kind::offsets, record.commit_offset.group, record.commit_offset.channel, 0});
  }
  if (record.__isset.commit_offsets) {
    for (const auto& c : record.commit_offsets) keys.insert({Kind::offsets, c.group, c.channel, 0});
  }
  if (record.__isset.raise_high_water) {
    for (const auto& [channel, parts] : record.raise_high_water)
      keys.insert({Kind::high_water, channel, {}, 0});
  }
  if (record.__isset.begin_move) {
    keys.insert({Kind::move, record.begin_move.channel, {}, record.begin_move.partition});
  }
  if (record.__isset.end_move)
    keys.insert({Kind::move, record.end_move.channel, {}, record.end_move.partition});
  if (record.__isset.handoff_key && record.__isset.set_handoff) {
    keys.insert({Kind::handoff, record.handoff_key.channel, {}, record.handoff_key.partition});
  }
  if (record.__isset.put_tenant) keys.insert({Kind::tenant, record.put_tenant.name, {}, 0});
  if (record.__isset.delete_tenant) keys.insert({Kind::tenant, record.delete_tenant, {}, 0});
  if (record.__isset.delete_channel) {
    // Every znode under the channel's name, as the state holds them now.
    const auto& name = record.delete_channel;
    keys.insert({Kind::channel, name, {}, 0});
    if (const auto* ch = find_in(before.channels, name)) {
      for (std::size_t p = 0; p < ch->routes.size(); ++p)
        keys.insert({Kind::route, name, {}, static_cast<std::int64_t>(p)});
    }
    keys.insert({Kind::high_water, name, {}, 0});
    if (const auto* m = find_in(before.moves, name)) {
      for (const auto& [p, move] : *m) keys.insert({Kind::move, name, {}, p});
    }
    if (const auto* h = find_in(before.handoffs, name)) {
      for (const auto& [p, handoff] : *h) keys.insert({Kind::handoff, name, {}, p});
    }
    for (const auto& [group, channels] : before.group_offsets) {
      if (channels.count(name) != 0) keys.insert({Kind::offsets, group, name, 0});
    }
  }
  if (record.__isset.next_node_seq || record.__isset.next_node_epoch || record.__isset.next_intent_id ||
      record.__isset.producer_numbers_reserved || record.__isset.set_link_key ||
      record.__isset.delete_channel || record.__isset.add_drops || record.__isset.end_drops) {
    keys.insert({Kind::counters, {}, {}, 0});  // deleteChannel: the epoch floor and the drops owed
  }
  return keys;
}

std::optional<std::string> encode_key(const meta::MetaState& state, const Key& key) {
  switch (key.kind) {
    case Kind::counters: {
      meta::ZkCounters c;
      c.__set_next_node_seq(state.next_node_seq);
      c.__set_next_node_epoch(state.next_node_epoch);
      c.__set_next_intent_id(state.next_intent_id);
      c.__set_producer_numbers_reserved(state.producer_numbers_reserved);
      c.__set_link_key(state.link_key);
      c.__set_channel_epoch_floor(state.channel_epoch_floor);
      c.__set_pending_drops(state.pending_drops);
      return encoded(c);
    }
    case Kind::node:
      if (const auto* n = find_in(state.nodes, key.a)) return encoded(*n);
      return std::nullopt;
    case Kind::channel:
      if (const auto* ch = find_in(state.channels, key.a)) {
        meta::ChannelRecord bare;
        bare.__set_config(ch->config);
        bare.__set_generations(ch->generations);
        bare.__set_first_epoch(ch->first_epoch);
        return encoded(bare);
      }
      return std::nullopt;
    case Kind::route:
      if (const auto* ch = find_in(state.channels, key.a);
          ch != nullptr && key.n >= 0 && static_cast<std::size_t>(key.n) < ch->routes.size()) {
        return encoded(ch->routes[static_cast<std::size_t>(key.n)]);
      }
      return std::nullopt;
    case Kind::intent:
      if (const auto* i = find_in(state.intents, key.n)) return encoded(*i);
      return std::nullopt;
    case Kind::offsets:
      if (const auto* g = find_in(state.group_offsets, key.a)) {
        if (const auto* c = find_in(*g, key.b)) return encoded(offsets_of(*c));
      }
      return std::nullopt;
    case Kind::high_water:
      if (const auto* h = find_in(state.high_water, key.a)) return encoded(offsets_of(*h));
      return std::nullopt;
    case Kind::move:
      if (const auto* m = find_in(state.moves, key.a)) {
        if (const auto* p = find_in(*m, static_cast<std::int32_t>(key.n))) return encoded(*p);
      }
      return std::nullopt;
    case Kind::handoff:
      if (const auto* h = find_in(state.handoffs, key.a)) {
        if (const auto* p = find_in(*h, static_cast<std::int32_t>(key.n))) return encoded(*p);
      }
      return std::nullopt;
    case Kind::tenant:
      if (const auto* t = find_in(state.tenants, key.a)) return encoded(*t);
      return std::nullopt;
  }
  return std::nullopt;
}

namespace {

// Sets or erases map[k] (and the outer entry when it empties).
template <class Outer, class Value>
bool put_nested(Outer& outer, const std::string& a, std::int32_t k, const std::optional<std::string>& data) {
  if (!data) {
    auto it = outer.find(a);
    if (it == outer.end()) return true;
    it->second.erase(k);
    if (it->second.empty()) outer.erase(it);
    return true;
  }
  Value v;
  if (!decode_into(*data, v)) return false;
  outer[a][k] = std::move(v);
  return true;
}

}  // namespace

bool put_key(meta::MetaState& state, const Key& key, const std::optional<std::string>& data) {
  switch (key.kind) {
    case Kind::counters: {
      meta::ZkCounters c;
      if (!data || !decode_into(*data, c)) return false;
      state.next_node_seq = c.next_node_seq;
      state.next_node_epoch = c.next_node_epoch;
      state.next_intent_id = c.next_intent_id;
      state.producer_numbers_reserved = c.producer_numbers_reserved;
      state.link_key = c.link_key;
      state.channel_epoch_floor = c.channel_epoch_floor;
      state.pending_drops = std::move(c.pending_drops);
      state.__isset.pending_drops = !state.pending_drops.empty();
      return true;
    }
    case Kind::node: {
      if (!data) {
        state.nodes.erase(key.a);
        return true;
      }
      meta::NodeRecord n;
      if (!decode_into(*data, n)) return false;
      state.nodes[key.a] = std::move(n);
      return true;
    }
    case Kind::channel: {
      if (!data) {
        state.channels.erase(key.a);
        return true;
      }
      meta::ChannelRecord bare;
      if (!decode_into(*data, bare)) return false;
      auto& ch = state.channels[key.a];
      ch.config = std::move(bare.config);  // its routes are znodes of their own
      ch.generations = std::move(bare.generations);
      ch.__isset.generations = !ch.generations.empty();
      ch.first_epoch = bare.first_epoch;
      return true;
    }
    case Kind::route: {
      auto it = state.channels.find(key.a);
      const auto p = static_cast<std::size_t>(key.n);
      if (!data) {
        // Routes go only with their channel or from its end (undoing a
        // record that added them).
        if (it != state.channels.end() && p < it->second.routes.size()) it->second.routes.resize(p);
        return true;
      }
      if (key.n < 0) return false;
      idl::PartitionRoute route;
      if (!decode_into(*data, route)) return false;
      // Undoing a refused deleteChannel puts its routes back before the
      // channel's own znode (keys in reverse): the entry is made here and
      // the channel's put fills in the rest.
      if (it == state.channels.end()) it = state.channels.try_emplace(key.a).first;
      if (it->second.routes.size() <= p) it->second.routes.resize(p + 1);
      it->second.routes[p] = std::move(route);
      return true;
    }
    case Kind::intent: {
      if (!data) {
        state.intents.erase(key.n);
        return true;
      }
      meta::RepairIntent i;
      if (!decode_into(*data, i)) return false;
      state.intents[key.n] = std::move(i);
      return true;
    }
    case Kind::offsets: {
      if (!data) {
        auto g = state.group_offsets.find(key.a);
        if (g != state.group_offsets.end()) {
          g->second.erase(key.b);
          if (g->second.empty()) state.group_offsets.erase(g);
        }
        return true;
      }
      meta::ZkOffsets o;
      if (!decode_into(*data, o)) return false;
      state.group_offsets[key.a][key.b] = std::move(o.offsets);
      return true;
    }
    case Kind::high_water: {
      if (!data) {
        state.high_water.erase(key.a);
        return true;
      }
      meta::ZkOffsets o;
      if (!decode_into(*data, o)) return false;
      state.high_water[key.a] = std::move(o.offsets);
      return true;
    }
    case Kind::move:
      return put_nested<decltype(state.moves), meta::MoveIntent>(state.moves, key.a,
                                                                 static_cast<std::int32_t>(key.n), data);
    case Kind::handoff:
      return put_nested<decltype(state.handoffs), meta::Handoff>(state.handoffs, key.a,
                                                                 static_cast<std::int32_t>(key.n), data);
    case Kind::tenant: {
      if (!data) {
        state.tenants.erase(key.a);
        return true;
      }
      meta::TenantRecord t;
      if (!decode_into(*data, t)) return false;
      state.tenants[key.a] = std::move(t);
      return true;
    }
  }
  return false;
}

}  // namespace catena::control::zk
