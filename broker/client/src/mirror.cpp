#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <spdlog/spdlog.h>
#include <sstream>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/mirror.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>

namespace catena {

namespace {

using Steady = std::chrono::steady_clock;
using client::ErrorCode;
using client::make_error;

constexpr const char* kMagic = "catena-mirror";
constexpr int kVersion = 1;

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t unix_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 100) return false;  // group mirror.<name>: 128
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

client::Error from_control(const control::ControlError& e, const std::string& where) {
  return make_error(broker::client_error_of(e.code), where + ": " + e.describe());
}

control::ControllerClient::Options controller_options(const std::string& address,
                                                      std::chrono::milliseconds timeout,
                                                      const std::string& token) {
  control::ControllerClient::Options o;
  o.address = address;
  o.token = token;
  o.connect_timeout = timeout;
  o.rpc_timeout = std::max(timeout, std::chrono::milliseconds(1000)) * 5;
  return o;
}

}  // namespace

std::string mirror_state_path(const std::string& state_dir, const std::string& name) {
  return state_dir + "/" + name + ".mirror";
}

std::uint64_t MirrorState::map(std::uint32_t partition, std::uint64_t source_offset) const {
  if (partition >= partitions.size()) return 0;
  const auto& p = partitions[partition];
  // Not mirrored (yet): the loss; go on from the destination's end.
  if (source_offset >= p.next.source) return p.next.destination;
  const auto it = std::upper_bound(p.runs.begin(), p.runs.end(), source_offset,
                                   [](std::uint64_t s, const MirrorPair& r) { return s < r.source; });
  if (it == p.runs.begin()) return p.runs.empty() ? p.next.destination : p.runs.front().destination;
  const auto& run = *std::prev(it);
  const std::uint64_t end = it == p.runs.end() ? p.next.destination : it->destination;
  return std::min(run.destination + (source_offset - run.source), end);
}

std::uint64_t MirrorState::lag_records() const {
  std::uint64_t sum = 0;
  for (const auto& p : partitions) sum += p.lag_records();
  return sum;
}

client::Result<MirrorState> MirrorState::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::invalid_argument, "no mirror state at " + path);
  MirrorState st;
  std::string line;
  std::string magic;
  int version = 0;
  if (!std::getline(in, line) || !(std::istringstream(line) >> magic >> version) || magic != kMagic ||
      version != kVersion) {
    return make_error(ErrorCode::invalid_argument, path + " is not a catena mirror state (version 1)");
  }
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    bool ok = true;
    if (key == "name") {
      ok = static_cast<bool>(ls >> st.name);
    } else if (key == "channel") {
      ok = static_cast<bool>(ls >> st.channel);
    } else if (key == "source") {
      ok = static_cast<bool>(ls >> st.source);
    } else if (key == "destination") {
      ok = static_cast<bool>(ls >> st.destination);
    } else if (key == "producer_id") {
      ok = static_cast<bool>(ls >> st.producer_id);
    } else if (key == "updated_unix_ms") {
      ok = static_cast<bool>(ls >> st.updated_unix_ms);
    } else if (key == "partitions") {
      std::size_t n = 0;
      ok = static_cast<bool>(ls >> n) && n <= 1024;
      if (ok) st.partitions.resize(n);
    } else if (key == "p") {
      std::size_t i = 0;
      MirrorPartition p;
      ok = static_cast<bool>(ls >> i >> p.next.source >> p.next.destination >> p.source_end >> p.lag_ms >>
                             p.last_timestamp_ns >> p.mirrored_records >> p.mirrored_bytes >>
                             p.skipped_on_restart) &&
           i < st.partitions.size();
      if (ok) {
        p.runs = std::move(st.partitions[i].runs);
        st.partitions[i] = std::move(p);
      }
    } else if (key == "run") {
      std::size_t i = 0;
      MirrorPair r;
      ok = static_cast<bool>(ls >> i >> r.source >> r.destination) && i < st.partitions.size();
      if (ok) st.partitions[i].runs.push_back(r);
    } else if (!key.empty()) {
      ok = false;
    }
    if (!ok) return make_error(ErrorCode::invalid_argument, path + ": bad line: " + line);
  }
  if (st.name.empty() || st.channel.empty() || st.partitions.empty())
    return make_error(ErrorCode::invalid_argument, path + ": incomplete mirror state");
  return st;
}

client::Result<void> MirrorState::save(const std::string& path) const {
  std::ostringstream out;
  out << kMagic << ' ' << kVersion << '\n'
      << "name " << name << '\n'
      << "channel " << channel << '\n'
      << "source " << source << '\n'
      << "destination " << destination << '\n'
      << "producer_id " << producer_id << '\n'
      << "updated_unix_ms " << updated_unix_ms << '\n'
      << "partitions " << partitions.size() << '\n';
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const auto& p = partitions[i];
    out << "p " << i << ' ' << p.next.source << ' ' << p.next.destination << ' ' << p.source_end << ' '
        << p.lag_ms << ' ' << p.last_timestamp_ns << ' ' << p.mirrored_records << ' ' << p.mirrored_bytes
        << ' ' << p.skipped_on_restart << '\n';
    for (const auto& r : p.runs) out << "run " << i << ' ' << r.source << ' ' << r.destination << '\n';
  }
  const std::string text = out.str();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(ErrorCode::internal, "cannot write " + tmp);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      return make_error(ErrorCode::internal, "cannot write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0)
    return make_error(ErrorCode::internal, "cannot replace " + path);
  return {};
}

client::Result<MirrorState> Mirror::create(const std::string& name, const std::string& channel,
                                           const std::string& source, const std::string& destination,
                                           const std::string& state_dir, const std::string& source_token,
                                           const std::string& destination_token) {
  if (!valid_name(name)) return make_error(ErrorCode::invalid_argument, "bad mirror name '" + name + "'");
  if (source.empty() || destination.empty() || source == destination)
    return make_error(ErrorCode::invalid_argument, "a mirror needs two distinct clusters");
  const auto timeout = std::chrono::milliseconds(1000);
  control::ControllerClient src(controller_options(source, timeout, source_token));
  auto info = src.describe_channel(channel);
  if (!info) return from_control(info.error(), "source cluster " + source);
  if (!info->generations.empty() && info->generations.back().partitions != info->config.partitions)
    return make_error(ErrorCode::invalid_argument, "channel " + channel + " is being altered: try again");
  const auto partitions = info->config.partitions;
  control::ControllerClient dst(controller_options(destination, timeout, destination_token));
  auto existing = dst.describe_channel(channel);
  if (existing) {
    if (existing->config.partitions != partitions) {
      return make_error(ErrorCode::invalid_argument,
                        "channel " + channel + " has " + std::to_string(existing->config.partitions) +
                            " partitions on the destination cluster and " + std::to_string(partitions) +
                            " on the source: a mirror maps partition to partition");
    }
  } else if (existing.error().code == control::idl::ErrorCode::UNKNOWN_CHANNEL) {
    auto made = dst.create_channel(info->config);
    if (!made && made.error().code != control::idl::ErrorCode::CHANNEL_EXISTS)
      return from_control(made.error(),
                          "destination cluster " + destination + ": creating channel " + channel);
  } else {
    return from_control(existing.error(), "destination cluster " + destination);
  }

  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  const std::string path = mirror_state_path(state_dir, name);
  if (std::filesystem::exists(path)) {
    auto old = MirrorState::load(path);
    if (!old) return old.error();
    if (old->channel != channel || old->source != source || old->destination != destination ||
        old->partitions.size() != static_cast<std::size_t>(partitions)) {
      return make_error(ErrorCode::invalid_argument, "mirror " + name + " exists (" + path +
                                                         ") for channel " + old->channel + " from " +
                                                         old->source + " to " + old->destination);
    }
    return old;
  }
  MirrorState st;
  st.name = name;
  st.channel = channel;
  st.source = source;
  st.destination = destination;
  std::random_device rd;
  // Application ids are 1 .. 2^62-1 (issued ones have bit 62 set).
  st.producer_id = ((static_cast<std::uint64_t>(rd()) << 32 | rd()) & ((std::uint64_t{1} << 62) - 1)) | 1;
  st.updated_unix_ms = unix_ms();
  st.partitions.resize(static_cast<std::size_t>(partitions));
  // The destination channel starts empty: source offset 0 lands at 0.
  for (auto& p : st.partitions) p.runs.push_back({0, 0});
  if (auto saved = st.save(path); !saved) return saved.error();
  return st;
}

Mirror::Mirror(MirrorState st, MirrorOptions opts)
    : opts_(std::move(opts)), path_(mirror_state_path(opts_.state_dir, st.name)), state_(std::move(st)) {}

Mirror::~Mirror() = default;

client::Result<std::unique_ptr<Mirror>> Mirror::open(const std::string& name, MirrorOptions opts) {
  if (!valid_name(name)) return make_error(ErrorCode::invalid_argument, "bad mirror name '" + name + "'");
  auto st = MirrorState::load(mirror_state_path(opts.state_dir, name));
  if (!st) return st.error();
  return std::unique_ptr<Mirror>(new Mirror(std::move(*st), std::move(opts)));
}

MirrorState Mirror::state() const {
  MutexLock lock(mu_);
  return state_;
}

// Records of this mirror the destination holds past `next.destination`:
// stored by a run that stopped before its state file said so.
client::Result<void> Mirror::reconcile(MirrorState& st) {
  broker::ControllerRoutes routes(
      controller_options(st.destination, opts_.controller_timeout, opts_.destination_token),
      "mirror:" + st.name + ":check");
  for (std::uint32_t p = 0; p < st.partitions.size(); ++p) {
    auto& part = st.partitions[p];
    SubscriberOptions so;
    so.provider = opts_.provider;
    so.start = Start::offset;
    so.start_offset = part.next.destination;
    so.partitions = {p};
    so.ring_bytes = 1u << 20;
    auto sub = Subscriber::create(routes, st.channel, so);
    if (!sub)
      return make_error(sub.error().code,
                        "destination cluster " + st.destination + ": " + sub.error().describe());
    std::uint64_t found = 0;
    std::uint64_t expect = part.next.destination;
    std::optional<client::Error> bad;
    auto quiet_since = Steady::now();
    while (Steady::now() - quiet_since < opts_.settle_time && !bad) {
      const int n = sub.value()->poll([&](const Message& m) {
        if (bad) return;
        if (m.producer_id != st.producer_id) {
          bad = make_error(ErrorCode::invalid_argument,
                           "destination partition " + std::to_string(p) + " holds a record at offset " +
                               std::to_string(m.offset) + " the mirror did not write");
        } else if (m.offset != expect) {
          bad =
              make_error(ErrorCode::internal, "destination partition " + std::to_string(p) + " skips from " +
                                                  std::to_string(expect) + " to " + std::to_string(m.offset));
        }
        ++expect;
        ++found;
        part.mirrored_bytes += m.payload.size();
        part.last_timestamp_ns = std::max(part.last_timestamp_ns, m.timestamp_ns);
      });
      if (n > 0) {
        quiet_since = Steady::now();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (bad) return *bad;
    if (found > 0) {
      spdlog::info("mirror {}: partition {}: {} records already in the destination past the saved state",
                   st.name, p, found);
    }
    part.next.source += found;
    part.next.destination += found;
    part.mirrored_records += found;
    part.skipped_on_restart += found;
  }
  return {};
}

client::Result<void> Mirror::run() {
  MirrorState st = state();
  if (auto r = reconcile(st); !r) return r.error();
  if (auto saved = st.save(path_); !saved) return saved.error();
  {
    MutexLock lock(mu_);
    state_ = st;
  }

  broker::ControllerRoutes src_routes(
      controller_options(st.source, opts_.controller_timeout, opts_.source_token),
      "mirror:" + st.name + ":source");
  broker::ControllerRoutes dst_routes(
      controller_options(st.destination, opts_.controller_timeout, opts_.destination_token),
      "mirror:" + st.name + ":destination");
  auto layout = src_routes.layout(st.channel);
  if (!layout)
    return make_error(layout.error().code, "source cluster " + st.source + ": " + layout.error().describe());
  if (layout->partitions != st.partitions.size()) {
    return make_error(ErrorCode::invalid_argument,
                      "channel " + st.channel + " now has " + std::to_string(layout->partitions) +
                          " partitions on the source: mirroring an alter is not done");
  }
  PublisherOptions po;
  po.provider = opts_.provider;
  po.producer_id = st.producer_id;
  auto pub = Publisher::create(dst_routes, st.channel, po);
  if (!pub)
    return make_error(pub.error().code,
                      "destination cluster " + st.destination + ": " + pub.error().describe());
  SubscriberOptions so;
  so.provider = opts_.provider;
  so.start = Start::offset;
  so.start_offset = 0;
  auto sub = Subscriber::create(src_routes, st.channel, so);
  if (!sub)
    return make_error(sub.error().code, "source cluster " + st.source + ": " + sub.error().describe());
  for (std::uint32_t p = 0; p < st.partitions.size(); ++p) sub.value()->seek(p, st.partitions[p].next.source);

  // A batch's records, their bytes (payload, key, header names and values)
  // one after another in `arena`: cleared per batch, their capacity kept,
  // so a steady stream allocates nothing per record.
  struct Slice {
    std::size_t at = 0;
    std::size_t size = 0;
  };
  struct Pending {
    std::uint32_t partition = 0;
    std::uint64_t offset = 0;
    std::uint64_t timestamp_ns = 0;
    Slice payload;
    Slice key;
    std::size_t first_header = 0;  // in header_slices (name, value pairs)
    std::size_t headers = 0;
  };
  std::vector<Pending> batch;
  std::string arena;
  std::vector<Slice> header_slices;
  std::vector<HeaderField> header_fields;
  const auto keep = [&arena](std::span<const std::byte> b) {
    const Slice sl{arena.size(), b.size()};
    arena.append(reinterpret_cast<const char*>(b.data()), b.size());
    return sl;
  };
  const auto view = [&arena](const Slice& sl) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(arena.data()) + sl.at, sl.size);
  };
  // Per partition: the next source offset of what was handed to the publisher.
  std::vector<std::uint64_t> handed(st.partitions.size());
  for (std::size_t p = 0; p < handed.size(); ++p) handed[p] = st.partitions[p].next.source;

  auto last_save = Steady::now();
  auto last_status = Steady::time_point{};
  std::vector<std::uint64_t> committed_source(st.partitions.size(), ~std::uint64_t{0});

  auto refresh_source_end = [&] {
    last_status = Steady::now();
    auto status = src_routes.client().cluster_status();
    if (!status) return;
    std::vector<std::uint64_t> end(st.partitions.size(), 0);
    for (const auto& n : status->nodes) {
      for (const auto& pp : n.stats.partitions) {
        if (pp.channel != st.channel || pp.partition < 0 ||
            static_cast<std::size_t>(pp.partition) >= end.size())
          continue;
        auto& e = end[static_cast<std::size_t>(pp.partition)];
        e = std::max(e, static_cast<std::uint64_t>(std::max<std::int64_t>(pp.commit_offset, 0)));
      }
    }
    for (std::size_t p = 0; p < end.size(); ++p)
      st.partitions[p].source_end = std::max(st.partitions[p].source_end, end[p]);
  };
  auto save = [&]() -> client::Result<void> {
    const std::uint64_t now_ns = unix_ns();
    for (auto& p : st.partitions) {
      p.source_end = std::max(p.source_end, p.next.source);
      p.lag_ms = p.lag_records() > 0 && p.last_timestamp_ns > 0 && now_ns > p.last_timestamp_ns
                     ? (now_ns - p.last_timestamp_ns) / 1000000
                     : 0;
    }
    st.updated_unix_ms = unix_ms();
    if (auto saved = st.save(path_); !saved) return saved;
    {
      MutexLock lock(mu_);
      state_ = st;
    }
    last_save = Steady::now();
    // Progress on the source too (after the destination acknowledged and
    // the state file has it): best effort, the source may be gone.
    for (std::uint32_t p = 0; p < st.partitions.size(); ++p) {
      const auto s = st.partitions[p].next.source;
      if (committed_source[p] == s) continue;
      if (auto c = src_routes.commit_offset("mirror." + st.name, st.channel, p, s); c) {
        committed_source[p] = s;
      } else {
        spdlog::debug("mirror {}: group offset on the source: {}", st.name, c.error().describe());
        break;
      }
    }
    return {};
  };

  // Publishes the batch, waits for every acknowledgement, checks that each
  // partition's records landed contiguously at next.destination, and moves
  // `next` past them.
  auto ship = [&]() -> client::Result<void> {
    if (batch.empty()) return {};
    struct Ack {
      bool done = false;
      PublishResult result;
    };
    std::vector<Ack> acks(batch.size());
    // The arena is complete: views into it stay put while the batch ships.
    header_fields.clear();
    for (std::size_t h = 0; h + 1 < header_slices.size(); h += 2) {
      const auto name = view(header_slices[h]);
      const auto value = view(header_slices[h + 1]);
      header_fields.push_back({{reinterpret_cast<const char*>(name.data()), name.size()},
                               {reinterpret_cast<const char*>(value.data()), value.size()}});
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& rec = batch[i];
      // The record's key and headers go with it (a record without either
      // is published as it came, without an attributes block).
      const Record record{view(rec.key),
                          std::span<const HeaderField>(header_fields).subspan(rec.first_header, rec.headers),
                          view(rec.payload)};
      const bool attributes = !record.key.empty() || !record.headers.empty();
      for (;;) {
        auto on_ack = [&acks, i](const PublishResult& r) {
          acks[i].done = true;
          acks[i].result = r;
        };
        const auto e = attributes ? pub.value()->publish_to(rec.partition, record, on_ack)
                                  : pub.value()->publish_to(rec.partition, record.payload, on_ack);
        if (e == ErrorCode::ok) break;
        if (e != ErrorCode::backpressure)
          return make_error(e, "destination cluster " + st.destination + ": publish refused");
        pub.value()->poll();
      }
    }
    pub.value()->flush(std::chrono::milliseconds(60000));
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& rec = batch[i];
      auto& part = st.partitions[rec.partition];
      if (!acks[i].done || acks[i].result.status != PublishStatus::ok) {
        return make_error(acks[i].done ? acks[i].result.error() : ErrorCode::timeout,
                          "destination cluster " + st.destination + ": partition " +
                              std::to_string(rec.partition) + " did not store source offset " +
                              std::to_string(rec.offset));
      }
      if (rec.offset != part.next.source) {
        // A gap in the source (not mirrored): a new run of the map.
        part.runs.push_back({rec.offset, part.next.destination});
        part.next.source = rec.offset;
      }
      if (acks[i].result.offset != part.next.destination) {
        return make_error(ErrorCode::internal, "destination partition " + std::to_string(rec.partition) +
                                                   " stored source offset " + std::to_string(rec.offset) +
                                                   " at " + std::to_string(acks[i].result.offset) +
                                                   ", expected " + std::to_string(part.next.destination) +
                                                   " (is someone else publishing to it?)");
      }
      part.next.source = rec.offset + 1;
      part.next.destination += 1;
      part.mirrored_records += 1;
      part.mirrored_bytes += rec.payload.size;
      part.last_timestamp_ns = std::max(part.last_timestamp_ns, rec.timestamp_ns);
    }
    batch.clear();
    arena.clear();
    header_slices.clear();
    return {};
  };

  client::Result<void> result;
  while (!stop_.load()) {
    std::optional<client::Result<void>> failed;
    const int n = sub.value()->poll(
        [&](const Message& m) {
          if (failed) return;
          // A gap must start its own run, recorded before the records after
          // it are published: a restart then resumes after the gap.
          if (m.offset != handed[m.partition]) {
            if (auto r = ship(); !r) {
              failed = r;
              return;
            }
            auto& part = st.partitions[m.partition];
            part.runs.push_back({m.offset, part.next.destination});
            part.next.source = m.offset;
            if (auto r = save(); !r) {
              failed = r;
              return;
            }
          }
          Pending rec{m.partition,     m.offset,    m.timestamp_ns,
                      keep(m.payload), keep(m.key), header_slices.size() / 2,
                      m.headers.size()};
          for (const HeaderField& h : m.headers) {
            header_slices.push_back(keep(std::as_bytes(std::span(h.name))));
            header_slices.push_back(keep(std::as_bytes(std::span(h.value))));
          }
          batch.push_back(rec);
          handed[m.partition] = m.offset + 1;
          auto& part = st.partitions[m.partition];
          part.source_end = std::max(part.source_end, m.offset + 1);
        },
        static_cast<int>(opts_.max_batch));
    if (failed) {
      result = *failed;
      break;
    }
    if (auto r = ship(); !r) {
      result = r;
      break;
    }
    const auto now = Steady::now();
    if (now - last_status >= opts_.source_status_interval) refresh_source_end();
    if (now - last_save >= opts_.save_interval) {
      if (auto r = save(); !r) {
        result = r;
        break;
      }
    }
    if (n == 0) {
      pub.value()->poll();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (auto r = save(); !r && result) result = r;
  return result;
}

}  // namespace catena
