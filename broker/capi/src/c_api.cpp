// The C API (<catena/catena.h>) over the C++ client: opaque handles that own
// the C++ objects, error codes and a per-thread message instead of
// exceptions. Every entry point catches everything: nothing C++ crosses the
// C boundary.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/record_views.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/catena.h>
#include <catena/chain/limits.hpp>
#include <catena/client/admin.hpp>
#include <catena/client/connect.hpp>

namespace client = catena::client;

struct catena_routes {
  std::shared_ptr<catena::RouteSource> routes;
  std::string controllers;  // what catena_connect was given: a group member's coordinator
  std::string token;
  // The catena_channel_* calls' client, made by the first of them.
  std::mutex admin_mu;
  std::unique_ptr<catena::Admin> admin;
};
struct catena_publisher {
  std::shared_ptr<catena::RouteSource> routes;  // outlives the publisher
  std::unique_ptr<catena::Publisher> pub;
  // Open claims by partition, with the id handed out (catena_claim.id);
  // destroyed (aborted) before the publisher. Grows at a claim on a
  // partition not seen yet: per partition, never per claim.
  struct OpenClaim {
    catena::Claim claim;
    std::uint64_t id = 0;
  };
  std::vector<OpenClaim> claims;
  std::uint64_t next_claim = 1;
};
struct catena_subscriber {
  std::shared_ptr<catena::RouteSource> routes;
  std::unique_ptr<catena::Subscriber> sub;
  bool markers_released_by_caller = false;
};
struct catena_group {
  std::shared_ptr<catena::RouteSource> routes;
  std::unique_ptr<catena::GroupSubscriber> group;
};

namespace {

// The same values on both sides: catena_err is the C spelling of ErrorCode.
static_assert(static_cast<int>(client::ErrorCode::invalid_argument) == CATENA_ERR_INVALID_ARGUMENT);
static_assert(static_cast<int>(client::ErrorCode::internal) == CATENA_ERR_INTERNAL);
static_assert(static_cast<int>(client::ErrorCode::backpressure) == CATENA_ERR_BACKPRESSURE);
static_assert(static_cast<int>(client::ErrorCode::controller_unavailable) ==
              CATENA_ERR_CONTROLLER_UNAVAILABLE);
static_assert(static_cast<int>(client::ErrorCode::corrupt) == CATENA_ERR_CORRUPT);
constexpr int kLastCode = CATENA_ERR_CORRUPT;

thread_local std::string last_error;

catena_err to_c(client::ErrorCode code) {
  return static_cast<catena_err>(code);
}

catena_err fail(catena_err code, std::string message) {
  last_error = std::move(message);
  return code;
}
catena_err fail(const client::Error& e) {
  return fail(to_c(e.code), e.describe());
}

// What a C++ exception escaping the client becomes.
catena_err caught() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(CATENA_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(CATENA_ERR_INTERNAL, std::string("internal: ") + e.what());
  } catch (...) {
    return fail(CATENA_ERR_INTERNAL, "internal: unknown exception");
  }
}

std::span<const std::byte> bytes(const void* p, std::size_t n) {
  return {static_cast<const std::byte*>(p), n};
}

// The sizes each options struct has had: a program built against an earlier
// header passes its size (fields are only appended) and gets the later
// fields' defaults.
constexpr std::array<std::size_t, 4> kPublisherOptionsSizes{
    offsetof(catena_publisher_options, max_batch_bytes), offsetof(catena_publisher_options, retry_timeout_ms),
    offsetof(catena_publisher_options, ring_shrink_after_ms), sizeof(catena_publisher_options)};
constexpr std::array<std::size_t, 4> kSubscriberOptionsSizes{
    offsetof(catena_subscriber_options, on_event), offsetof(catena_subscriber_options, read_from),
    offsetof(catena_subscriber_options, control_records), sizeof(catena_subscriber_options)};
constexpr std::array<std::size_t, 1> kGroupOptionsSizes{sizeof(catena_group_options)};
static_assert(kPublisherOptionsSizes[0] == 40 && kPublisherOptionsSizes[1] == 64 &&
                  kPublisherOptionsSizes[2] == 88 && kSubscriberOptionsSizes[0] == 56 &&
                  kSubscriberOptionsSizes[1] == 72 && kSubscriberOptionsSizes[2] == 128,
              "fields added to an options struct go after the ones a program built earlier knows");

// Copies the caller's options (NULL: none) over `out`, which holds the
// defaults; a size the header never had is refused.
template <typename T, std::size_t N>
catena_err read_options(const char* fn, const char* init, const T* in,
                        const std::array<std::size_t, N>& sizes, T* out) {
  if (in == nullptr) return CATENA_OK;
  if (std::find(sizes.begin(), sizes.end(), in->size) == sizes.end()) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": options.size is " + std::to_string(in->size) + ", not " +
                    std::to_string(sizeof(T)) + " (fill the options with " + init + ")");
  }
  std::memcpy(out, in, in->size);
  return CATENA_OK;
}

// A millisecond option: 0 keeps `*out` (the default), negative is refused.
catena_err millis(const char* fn, const char* field, std::int64_t ms, std::chrono::milliseconds* out) {
  if (ms < 0) return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + field + " is negative");
  if (ms > 0) *out = std::chrono::milliseconds(ms);
  return CATENA_OK;
}

catena_err read_from(const char* fn, catena_read_from r, catena::SubscriberOptions::ReadFrom* out) {
  switch (r) {
    case CATENA_READ_TAIL:
      *out = catena::SubscriberOptions::ReadFrom::tail;
      return CATENA_OK;
    case CATENA_READ_HEAD:
      *out = catena::SubscriberOptions::ReadFrom::head;
      return CATENA_OK;
    case CATENA_READ_SPREAD:
      *out = catena::SubscriberOptions::ReadFrom::spread;
      return CATENA_OK;
    case CATENA_READ_FROM_MAX_ENUM_:
      break;
  }
  return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": read_from is not TAIL, HEAD or SPREAD");
}

static_assert(static_cast<int>(catena::ClientEvent::Kind::route_changed) == CATENA_EVENT_ROUTE_CHANGED &&
              static_cast<int>(catena::ClientEvent::Kind::ack_stalled) == CATENA_EVENT_ACK_STALLED &&
              static_cast<int>(catena::ClientEvent::Kind::partition_unavailable) ==
                  CATENA_EVENT_PARTITION_UNAVAILABLE &&
              static_cast<int>(catena::ClientEvent::Kind::log_full) == CATENA_EVENT_LOG_FULL &&
              static_cast<int>(catena::ClientEvent::Kind::rate_limited) == CATENA_EVENT_RATE_LIMITED);

catena::ClientEventHandler event_handler(catena_event_cb cb, void* opaque) {
  if (cb == nullptr) return {};
  return [cb, opaque](const catena::ClientEvent& e) {
    const catena_event c{static_cast<catena_event_kind>(e.kind), e.partition,
                         catena::to_string(e.kind).data(),  // a literal: NUL-terminated
                         e.message.c_str()};
    cb(opaque, &c);
  };
}

catena::PublishCallback ack_callback(catena_publish_cb cb, void* opaque) {
  if (cb == nullptr) return {};
  return [cb, opaque](const catena::PublishResult& r) {
    const catena_publish_result c{to_c(r.error()), r.partition, r.offset, r.sequence};
    cb(opaque, &c);
  };
}

// A message as the C callback sees it; the headers' views on the stack (at
// most kMaxRecordHeaders): no allocation per message.
catena::Subscriber::Handler message_handler(catena_message_cb cb, void* opaque) {
  return [cb, opaque](const catena::Message& m) {
    std::array<catena_header, catena::chain::limits::kMaxRecordHeaders> hs;
    std::size_t n = 0;
    for (const catena::HeaderField& h : m.headers) {
      if (n == hs.size()) break;  // decode_record bounds the count: never taken
      hs[n++] = catena_header{h.name.data(), h.name.size(), h.value.data(), h.value.size()};
    }
    const catena_message c{m.partition,
                           m.offset,
                           m.timestamp_ns,
                           m.marker ? nullptr : m.payload.data(),  // a marker's body is the broker's
                           m.marker ? 0 : m.payload.size(),
                           m.key.empty() ? nullptr : m.key.data(),
                           m.key.size(),
                           n == 0 ? nullptr : hs.data(),
                           n,
                           m.marker ? 1 : 0,
                           m.marker ? m.sequence : 0};
    cb(opaque, &c);
  };
}

// INVALID_ARGUMENT (fn's) unless the subscriber reads `partition`.
catena_err check_reads(const char* fn, const catena_subscriber& sub, std::uint32_t partition) {
  const auto parts = sub.sub->partitions();
  if (std::find(parts.begin(), parts.end(), partition) != parts.end()) return CATENA_OK;
  return fail(CATENA_ERR_INVALID_ARGUMENT,
              std::string(fn) + ": the subscriber does not read partition " + std::to_string(partition));
}

}  // namespace

extern "C" {

const char* catena_strerror(int err) noexcept {
  if (err < CATENA_OK || err > kLastCode) return "unknown";
  // to_string's views are of string literals: NUL-terminated.
  return client::to_string(static_cast<client::ErrorCode>(err)).data();
}

int catena_err_retriable(int err) noexcept {
  if (err <= CATENA_OK || err > kLastCode) return 0;
  return client::retriable(static_cast<client::ErrorCode>(err)) ? 1 : 0;
}

const char* catena_last_error(void) noexcept {
  return last_error.c_str();
}

catena_err catena_connect(const char* controllers, const char* token, catena_routes** out) noexcept {
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_connect: out is NULL");
  *out = nullptr;
  if (controllers == nullptr || *controllers == '\0')
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_connect: no controller address");
  try {
    catena::ConnectOptions options;
    if (token != nullptr) options.token = token;
    options.client_name = "c-client";
    auto connected = catena::connect(controllers, options);  // invalid_argument: a malformed list
    if (!connected) return fail(connected.error());
    auto r = std::make_unique<catena_routes>();
    r->routes = std::move(connected.value());
    r->controllers = controllers;
    if (token != nullptr) r->token = token;
    *out = r.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_routes_destroy(catena_routes* routes) noexcept {
  try {
    delete routes;
  } catch (...) {
    (void)caught();
  }
}

void catena_publisher_options_init(catena_publisher_options* options) noexcept {
  if (options == nullptr) return;
  *options = catena_publisher_options{};
  options->size = sizeof(catena_publisher_options);
}

catena_err catena_publisher_create(catena_routes* routes, const char* channel,
                                   catena_publisher** out) noexcept {
  return catena_publisher_create_with(routes, channel, nullptr, out);
}

catena_err catena_publisher_create_with(catena_routes* routes, const char* channel,
                                        const catena_publisher_options* options,
                                        catena_publisher** out) noexcept {
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create: out is NULL");
  *out = nullptr;
  if (routes == nullptr || channel == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create: routes or channel is NULL");
  catena_publisher_options o;
  catena_publisher_options_init(&o);
  if (const catena_err e = read_options("catena_publisher_create_with", "catena_publisher_options_init",
                                        options, kPublisherOptionsSizes, &o))
    return e;
  if (o.linger_us < 0)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create_with: linger_us is negative");
  if (o.head_acks_only != 0 && o.head_acks_only != 1)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create_with: head_acks_only is not 0 or 1");
  try {
    catena::PublisherOptions po;
    if (o.provider != nullptr) po.provider = o.provider;
    po.producer_id = o.producer_id;
    if (o.ring_bytes != 0) po.ring_bytes = o.ring_bytes;
    if (o.max_in_flight != 0) po.max_in_flight = o.max_in_flight;
    po.linger = std::chrono::microseconds(o.linger_us);
    if (o.max_batch_bytes != 0) po.max_batch_bytes = o.max_batch_bytes;
    po.tail_acks = o.head_acks_only == 0;
    po.on_event = event_handler(o.on_event, o.event_opaque);
    const char* fn = "catena_publisher_create_with";
    if (catena_err e = millis(fn, "retry_timeout_ms", o.retry_timeout_ms, &po.retry_timeout); e != CATENA_OK)
      return e;
    if (catena_err e = millis(fn, "connect_timeout_ms", o.connect_timeout_ms, &po.connect_timeout);
        e != CATENA_OK)
      return e;
    if (catena_err e = millis(fn, "stall_check_ms", o.stall_check_ms, &po.stall_check); e != CATENA_OK)
      return e;
    if (o.ring_shrink_after_ms == CATENA_NEVER) {
      po.ring_shrink_after = std::chrono::milliseconds(0);
    } else if (catena_err e =
                   millis(fn, "ring_shrink_after_ms", o.ring_shrink_after_ms, &po.ring_shrink_after);
               e != CATENA_OK) {
      return e;
    }
    if (o.ring_budget_bytes != 0) po.ring_budget_bytes = o.ring_budget_bytes;
    auto created = catena::Publisher::create(*routes->routes, channel, po);
    if (!created) return fail(created.error());
    auto p = std::make_unique<catena_publisher>();
    p->routes = routes->routes;
    p->pub = std::move(created.value());
    *out = p.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

catena_err catena_publish(catena_publisher* pub, const void* key, std::size_t key_len, const void* payload,
                          std::size_t payload_len, catena_publish_cb cb, void* opaque) noexcept {
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publish: publisher is NULL");
  if ((key == nullptr && key_len != 0) || (payload == nullptr && payload_len != 0))
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publish: NULL key or payload with a length");
  try {
    catena::PublishCallback on_ack = ack_callback(cb, opaque);
    const auto e = pub->pub->publish(bytes(key, key_len), bytes(payload, payload_len), std::move(on_ack));
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

namespace {

// catena_publish_record and catena_publish_to: `fn` names the call in
// errors; with a partition, the record goes there (its key is only stored).
catena_err enqueue_record(const char* fn, catena_publisher* pub, const std::uint32_t* partition,
                          const void* key, std::size_t key_len, const catena_header* headers,
                          std::size_t header_count, const void* payload, std::size_t payload_len,
                          catena_publish_cb cb, void* opaque) noexcept {
  const std::string name(fn);
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": publisher is NULL");
  if ((key == nullptr && key_len != 0) || (payload == nullptr && payload_len != 0) ||
      (headers == nullptr && header_count != 0))
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": NULL key, headers or payload with a length");
  if (header_count > catena::chain::limits::kMaxRecordHeaders)
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": more than 64 headers");
  // On the stack: no allocation for the headers' views.
  std::array<catena::HeaderField, catena::chain::limits::kMaxRecordHeaders> fields;
  for (std::size_t i = 0; i < header_count; ++i) {
    const catena_header& h = headers[i];
    if ((h.name == nullptr && h.name_len != 0) || (h.value == nullptr && h.value_len != 0))
      return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": a header with a NULL name or value");
    fields[i] = {{static_cast<const char*>(h.name), h.name_len},
                 {static_cast<const char*>(h.value), h.value_len}};
  }
  const catena::Record record{
      bytes(key, key_len), {fields.data(), header_count}, bytes(payload, payload_len)};
  std::size_t block = 0;
  if (const auto ac =
          catena::chain::attributes_size({record.key, catena::chain_headers(record.headers)}, &block);
      ac != catena::chain::AttributesCheck::ok) {
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": " + catena::chain::describe(ac));
  }
  try {
    catena::PublishCallback on_ack = ack_callback(cb, opaque);
    const bool plain = key_len == 0 && header_count == 0;
    const auto e = partition == nullptr ? pub->pub->publish(record, std::move(on_ack))
                   : plain              ? pub->pub->publish_to(*partition, record.payload, std::move(on_ack))
                                        : pub->pub->publish_to(*partition, record, std::move(on_ack));
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

}  // namespace

catena_err catena_publish_record(catena_publisher* pub, const void* key, std::size_t key_len,
                                 const catena_header* headers, std::size_t header_count, const void* payload,
                                 std::size_t payload_len, catena_publish_cb cb, void* opaque) noexcept {
  return enqueue_record("catena_publish_record", pub, nullptr, key, key_len, headers, header_count, payload,
                        payload_len, cb, opaque);
}

catena_err catena_publish_to(catena_publisher* pub, std::uint32_t partition, const void* key,
                             std::size_t key_len, const catena_header* headers, std::size_t header_count,
                             const void* payload, std::size_t payload_len, catena_publish_cb cb,
                             void* opaque) noexcept {
  return enqueue_record("catena_publish_to", pub, &partition, key, key_len, headers, header_count, payload,
                        payload_len, cb, opaque);
}

catena_err catena_try_claim(catena_publisher* pub, std::uint32_t partition, std::size_t length,
                            catena_claim* out) noexcept {
  if (pub == nullptr || out == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_try_claim: publisher or claim is NULL");
  try {
    catena::Claim c = pub->pub->try_claim(partition, length);
    if (!c) return fail(to_c(c.error()), std::string(client::to_string(c.error())));
    if (pub->claims.size() <= partition) pub->claims.resize(partition + 1);
    auto& slot = pub->claims[partition];
    slot.claim = std::move(c);  // the slot's was closed: try_claim refuses a second
    slot.id = pub->next_claim++;
    *out = catena_claim{slot.claim.buffer().data(), slot.claim.buffer().size(), partition, 0, slot.id};
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

namespace {
catena_publisher::OpenClaim* open_claim(catena_publisher* pub, const catena_claim* claim) {
  if (pub == nullptr || claim == nullptr || claim->id == 0 || claim->partition >= pub->claims.size())
    return nullptr;
  auto& slot = pub->claims[claim->partition];
  return slot.id == claim->id && slot.claim ? &slot : nullptr;
}
}  // namespace

catena_err catena_commit(catena_publisher* pub, catena_claim* claim, catena_publish_cb cb,
                         void* opaque) noexcept {
  auto* slot = open_claim(pub, claim);
  if (slot == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_commit: the claim is not open");
  try {
    const auto e = pub->pub->commit(slot->claim, ack_callback(cb, opaque));
    slot->id = 0;
    claim->id = 0;
    claim->buffer = nullptr;
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_abort(catena_publisher* pub, catena_claim* claim) noexcept {
  auto* slot = open_claim(pub, claim);
  if (slot == nullptr) return;
  pub->pub->abort(slot->claim);
  slot->id = 0;
  claim->id = 0;
  claim->buffer = nullptr;
}

int catena_publisher_poll(catena_publisher* pub) noexcept {
  if (pub == nullptr)
    return (fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_poll: publisher is NULL"), -1);
  try {
    return pub->pub->poll();
  } catch (...) {
    (void)caught();
    return -1;
  }
}

catena_err catena_publisher_flush(catena_publisher* pub, std::int64_t timeout_ms) noexcept {
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_flush: publisher is NULL");
  try {
    if (pub->pub->flush(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms))) return CATENA_OK;
    return fail(CATENA_ERR_TIMEOUT,
                "timeout: " + std::to_string(pub->pub->in_flight()) + " records still in flight after flush");
  } catch (...) {
    return caught();
  }
}

std::uint64_t catena_publisher_in_flight(const catena_publisher* pub) noexcept {
  if (pub == nullptr) return 0;
  try {
    return pub->pub->in_flight();
  } catch (...) {
    (void)caught();
    return 0;
  }
}

std::uint64_t catena_publisher_ring_bytes(const catena_publisher* pub) noexcept {
  if (pub == nullptr) return 0;
  try {
    return pub->pub->ring_bytes_in_use();
  } catch (...) {
    (void)caught();
    return 0;
  }
}

void catena_publisher_destroy(catena_publisher* pub) noexcept {
  try {
    delete pub;
  } catch (...) {
    (void)caught();
  }
}

void catena_subscriber_options_init(catena_subscriber_options* options) noexcept {
  if (options == nullptr) return;
  *options = catena_subscriber_options{};
  options->size = sizeof(catena_subscriber_options);
  options->start = CATENA_START_EARLIEST;
}

catena_err catena_subscriber_create(catena_routes* routes, const char* channel, catena_start start,
                                    catena_subscriber** out) noexcept {
  if (start != CATENA_START_EARLIEST && start != CATENA_START_LATEST) {
    if (out != nullptr) *out = nullptr;
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: start is not EARLIEST or LATEST");
  }
  catena_subscriber_options options;
  catena_subscriber_options_init(&options);
  options.start = start;
  return catena_subscriber_create_with(routes, channel, &options, out);
}

catena_err catena_subscriber_create_with(catena_routes* routes, const char* channel,
                                         const catena_subscriber_options* options,
                                         catena_subscriber** out) noexcept {
  const char* fn = "catena_subscriber_create_with";
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: out is NULL");
  *out = nullptr;
  if (routes == nullptr || channel == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: routes or channel is NULL");
  catena_subscriber_options o;
  catena_subscriber_options_init(&o);
  if (const catena_err e =
          read_options(fn, "catena_subscriber_options_init", options, kSubscriberOptionsSizes, &o))
    return e;
  if (o.start != CATENA_START_EARLIEST && o.start != CATENA_START_LATEST && o.start != CATENA_START_OFFSET &&
      o.start != CATENA_START_COMMITTED) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": start is not EARLIEST, LATEST, OFFSET or COMMITTED");
  }
  if ((o.partitions == nullptr) != (o.partition_count == 0)) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": partitions and partition_count must both be set or both be NULL/0");
  }
  if (o.start == CATENA_START_COMMITTED && (o.group == nullptr || *o.group == '\0'))
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": start COMMITTED needs a group");
  try {
    catena::SubscriberOptions so;
    if (o.provider != nullptr) so.provider = o.provider;
    so.start = o.start == CATENA_START_EARLIEST ? catena::Start::earliest
               : o.start == CATENA_START_LATEST ? catena::Start::latest
               : o.start == CATENA_START_OFFSET ? catena::Start::offset
                                                : catena::Start::committed;
    so.start_offset = o.start_offset;
    if (o.partitions != nullptr) so.partitions.assign(o.partitions, o.partitions + o.partition_count);
    if (o.ring_bytes != 0) so.ring_bytes = o.ring_bytes;
    so.on_event = event_handler(o.on_event, o.event_opaque);
    if (catena_err e = read_from(fn, o.read_from, &so.read_from); e != CATENA_OK) return e;
    if (catena_err e = millis(fn, "connect_timeout_ms", o.connect_timeout_ms, &so.connect_timeout);
        e != CATENA_OK)
      return e;
    if (catena_err e = millis(fn, "stall_check_ms", o.stall_check_ms, &so.stall_check); e != CATENA_OK)
      return e;
    if (catena_err e = millis(fn, "delivery_stall_ms", o.delivery_stall_ms, &so.delivery_stall);
        e != CATENA_OK)
      return e;
    if (o.group != nullptr) so.group = o.group;
    so.control_records = o.control_records != 0;
    so.markers_released_by_caller = o.markers_released_by_caller != 0;
    auto created = catena::Subscriber::create(*routes->routes, channel, so);
    if (!created) return fail(created.error());
    auto s = std::make_unique<catena_subscriber>();
    s->routes = routes->routes;
    s->sub = std::move(created.value());
    s->markers_released_by_caller = so.markers_released_by_caller;
    if (o.on_notice != nullptr) {
      s->sub->on_notice([cb = o.on_notice, opaque = o.notice_opaque](const catena::Notice& n) {
        const catena_notice c{n.partition, to_c(n.status), n.next_offset, n.lost_from};
        cb(opaque, &c);
      });
    }
    *out = s.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

int catena_subscriber_poll(catena_subscriber* sub, catena_message_cb cb, void* opaque, int max) noexcept {
  if (sub == nullptr || cb == nullptr || max <= 0)
    return (
        fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_poll: NULL subscriber or callback, or max <= 0"),
        -1);
  try {
    return sub->sub->poll(message_handler(cb, opaque), max);
  } catch (...) {
    (void)caught();
    return -1;
  }
}

int catena_subscriber_poll_wait(catena_subscriber* sub, catena_message_cb cb, void* opaque, int max,
                                std::int64_t timeout_ms) noexcept {
  if (sub == nullptr || cb == nullptr || max <= 0 || timeout_ms < 0)
    return (fail(CATENA_ERR_INVALID_ARGUMENT,
                 "catena_subscriber_poll_wait: NULL subscriber or callback, max <= 0 or timeout_ms < 0"),
            -1);
  try {
    return sub->sub->poll_for(message_handler(cb, opaque), std::chrono::milliseconds(timeout_ms), max);
  } catch (...) {
    (void)caught();
    return -1;
  }
}

std::uint64_t catena_subscriber_position(const catena_subscriber* sub, std::uint32_t partition) noexcept {
  if (sub == nullptr) return 0;
  try {
    return sub->sub->position(partition);
  } catch (...) {
    (void)caught();
    return 0;
  }
}

catena_err catena_subscriber_seek(catena_subscriber* sub, std::uint32_t partition,
                                  std::uint64_t offset) noexcept {
  if (sub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_seek: subscriber is NULL");
  try {
    if (const catena_err e = check_reads("catena_subscriber_seek", *sub, partition); e != CATENA_OK) return e;
    sub->sub->seek(partition, offset);
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

std::uint64_t catena_subscriber_marker_reached(const catena_subscriber* sub,
                                               std::uint32_t partition) noexcept {
  if (sub == nullptr) return 0;
  try {
    return sub->sub->marker_reached(partition);
  } catch (...) {
    (void)caught();
    return 0;
  }
}

int catena_subscriber_held_at_marker(const catena_subscriber* sub, std::uint32_t partition) noexcept {
  if (sub == nullptr) return 0;
  try {
    return sub->sub->held_at_marker(partition) ? 1 : 0;
  } catch (...) {
    (void)caught();
    return 0;
  }
}

catena_err catena_subscriber_release_markers(catena_subscriber* sub, std::uint32_t partition,
                                             std::uint64_t generation) noexcept {
  const char* fn = "catena_subscriber_release_markers";
  if (sub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": subscriber is NULL");
  if (!sub->markers_released_by_caller) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": the subscriber was created without markers_released_by_caller");
  }
  try {
    if (const catena_err e = check_reads(fn, *sub, partition); e != CATENA_OK) return e;
    sub->sub->release_markers(partition, generation);
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

catena_err catena_subscriber_commit(catena_subscriber* sub) noexcept {
  if (sub == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_commit: subscriber is NULL");
  try {
    if (auto r = sub->sub->commit(); !r) return fail(r.error());
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_subscriber_destroy(catena_subscriber* sub) noexcept {
  try {
    delete sub;
  } catch (...) {
    (void)caught();
  }
}

void catena_group_options_init(catena_group_options* options) noexcept {
  if (options == nullptr) return;
  *options = catena_group_options{};
  options->size = sizeof(catena_group_options);
  options->start = CATENA_START_EARLIEST;
  options->read_from = CATENA_READ_TAIL;
}

catena_err catena_group_create(catena_routes* routes, const char* channel, const char* group,
                               const catena_group_options* options, catena_group** out) noexcept {
  const char* fn = "catena_group_create";
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_create: out is NULL");
  *out = nullptr;
  if (routes == nullptr || channel == nullptr || group == nullptr || *group == '\0')
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                "catena_group_create: routes, channel or group is NULL or empty");
  catena_group_options o;
  catena_group_options_init(&o);
  if (const catena_err e = read_options(fn, "catena_group_options_init", options, kGroupOptionsSizes, &o))
    return e;
  if (o.start != CATENA_START_EARLIEST && o.start != CATENA_START_LATEST)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_create: start is not EARLIEST or LATEST");
  if (o.commit_interval_ms < -1)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_create: commit_interval_ms is below -1");
  try {
    catena::GroupSubscriberOptions go;
    go.controller = routes->controllers;
    go.token = routes->token;
    go.group = group;
    if (o.member_name != nullptr) go.member_name = o.member_name;
    go.subscriber.start = o.start == CATENA_START_EARLIEST ? catena::Start::earliest : catena::Start::latest;
    if (catena_err e = read_from(fn, o.read_from, &go.subscriber.read_from); e != CATENA_OK) return e;
    if (o.provider != nullptr) go.subscriber.provider = o.provider;
    if (o.ring_bytes != 0) go.subscriber.ring_bytes = o.ring_bytes;
    go.subscriber.on_event = event_handler(o.on_event, o.event_opaque);
    if (o.commit_interval_ms == -1)
      go.commit_interval = std::chrono::milliseconds(0);
    else if (o.commit_interval_ms > 0)
      go.commit_interval = std::chrono::milliseconds(o.commit_interval_ms);
    if (catena_err e = millis(fn, "join_timeout_ms", o.join_timeout_ms, &go.join_timeout); e != CATENA_OK)
      return e;
    if (o.before_commit != nullptr)
      go.before_commit = [cb = o.before_commit, opaque = o.before_commit_opaque] { cb(opaque); };
    auto created = catena::GroupSubscriber::create(*routes->routes, channel, go);
    if (!created) return fail(created.error());
    auto g = std::make_unique<catena_group>();
    g->routes = routes->routes;
    g->group = std::move(created.value());
    *out = g.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

int catena_group_poll(catena_group* g, catena_message_cb cb, void* opaque, int max) noexcept {
  if (g == nullptr || cb == nullptr || max <= 0)
    return (fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_poll: NULL group or callback, or max <= 0"), -1);
  try {
    return g->group->poll(message_handler(cb, opaque), max);
  } catch (...) {
    (void)caught();
    return -1;
  }
}

int catena_group_poll_wait(catena_group* g, catena_message_cb cb, void* opaque, int max,
                           std::int64_t timeout_ms) noexcept {
  if (g == nullptr || cb == nullptr || max <= 0 || timeout_ms < 0)
    return (fail(CATENA_ERR_INVALID_ARGUMENT,
                 "catena_group_poll_wait: NULL group or callback, max <= 0 or timeout_ms < 0"),
            -1);
  try {
    return g->group->poll_for(message_handler(cb, opaque), std::chrono::milliseconds(timeout_ms), max);
  } catch (...) {
    (void)caught();
    return -1;
  }
}

catena_err catena_group_commit(catena_group* g) noexcept {
  if (g == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_commit: group is NULL");
  try {
    g->group->commit_async();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

std::size_t catena_group_partitions(const catena_group* g, std::uint32_t* out,
                                    std::size_t capacity) noexcept {
  if (g == nullptr || (out == nullptr && capacity != 0)) return 0;
  try {
    const auto parts = g->group->partitions();
    std::copy_n(parts.begin(), std::min(capacity, parts.size()), out);
    return parts.size();
  } catch (...) {
    (void)caught();
    return 0;
  }
}

void catena_group_stats_init(catena_group_stats* stats) noexcept {
  if (stats == nullptr) return;
  *stats = catena_group_stats{};
  stats->size = sizeof(catena_group_stats);
}

catena_err catena_group_get_stats(const catena_group* g, catena_group_stats* out) noexcept {
  if (g == nullptr || out == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_group_get_stats: g or out is NULL");
  if (out->size != sizeof(catena_group_stats)) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                "catena_group_get_stats: out->size is " + std::to_string(out->size) + ", not " +
                    std::to_string(sizeof(catena_group_stats)) + " (fill it with catena_group_stats_init)");
  }
  try {
    const catena::GroupSubscriber::Stats st = g->group->stats();
    out->joins = st.joins;
    out->commits = st.commits;
    out->commit_refusals = st.commit_refusals;
    out->revoked = st.revoked;
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_group_destroy(catena_group* g) noexcept {
  try {
    delete g;
  } catch (...) {
    (void)caught();
  }
}

// ------------------------------------------------------------ administration

void catena_channel_settings_init(catena_channel_settings* settings) noexcept {
  if (settings == nullptr) return;
  *settings = catena_channel_settings{};
  settings->size = sizeof(catena_channel_settings);
}

void catena_channel_info_init(catena_channel_info* info) noexcept {
  if (info == nullptr) return;
  *info = catena_channel_info{};
  info->size = sizeof(catena_channel_info);
}

}  // extern "C"

namespace {

constexpr std::array<std::size_t, 1> kChannelSettingsSizes{sizeof(catena_channel_settings)};

// The routes' Admin, made on first use (with catena_connect's controllers and token).
catena::Admin* admin_of(catena_routes* routes, const char* fn, catena_err* err) {
  if (routes == nullptr) {
    *err = fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": routes is NULL");
    return nullptr;
  }
  std::lock_guard lock(routes->admin_mu);
  if (!routes->admin) {
    catena::ConnectOptions options;
    options.token = routes->token;
    options.client_name = "c-client";
    auto made = catena::Admin::connect(routes->controllers, options);
    if (!made) {
      *err = fail(made.error());
      return nullptr;
    }
    routes->admin = std::move(made.value());
  }
  return routes->admin.get();
}

catena_err check_name(const char* fn, const char* name) {
  if (name == nullptr || *name == '\0')
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": no channel name");
  return CATENA_OK;
}

// An output struct: NULL (where allowed) or initialised by catena_channel_info_init.
catena_err check_info(const char* fn, const catena_channel_info* out, bool required) {
  if (out == nullptr) {
    return required ? fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": out is NULL") : CATENA_OK;
  }
  if (out->size != sizeof(catena_channel_info)) {
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": out->size is " + std::to_string(out->size) +
                                                 ", not " + std::to_string(sizeof(catena_channel_info)) +
                                                 " (fill it with catena_channel_info_init)");
  }
  return CATENA_OK;
}

// A list call's arguments: *count set to 0, out NULL only with no
// capacity, each of its `capacity` entries initialised by `init`.
template <typename T>
catena_err check_list(const char* fn, const char* init, const T* out, std::size_t capacity,
                      std::size_t* count) {
  if (count == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": count is NULL");
  *count = 0;
  if (out == nullptr && capacity != 0)
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": out is NULL with a capacity");
  for (std::size_t i = 0; i < capacity; ++i) {
    if (out[i].size != sizeof(T)) {
      return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": out[" + std::to_string(i) + "].size is " +
                                                   std::to_string(out[i].size) + ", not " +
                                                   std::to_string(sizeof(T)) + " (fill it with " + init +
                                                   ")");
    }
  }
  return CATENA_OK;
}

// `src` into a fixed C string field, cut to fit, NUL-terminated.
template <std::size_t N>
void copy_cstr(char (&dst)[N], const std::string& src) {
  const std::size_t n = std::min(src.size(), N - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

void fill_info(const catena::ChannelInfo& ch, catena_channel_info* out) {
  if (out == nullptr) return;
  catena_channel_info_init(out);
  copy_cstr(out->name, ch.settings.name);
  out->partitions = ch.settings.partitions;
  out->replication = ch.settings.replication;
  out->segment_bytes = ch.settings.segment_bytes;
  out->ttl_ms = ch.settings.ttl_ms;
  out->routed_partitions = static_cast<std::uint32_t>(ch.partitions.size());
  out->altering = ch.altering ? 1 : 0;
}

void fill_chain(const catena::PartitionChain& part, catena_partition_chain* out) {
  catena_partition_chain_init(out);
  out->partition = part.partition;
  out->epoch = part.epoch;
  out->start_offset = part.start_offset;
  out->length = static_cast<std::uint32_t>(std::min<std::size_t>(part.chain.size(), CATENA_MAX_REPLICATION));
  for (std::uint32_t m = 0; m < out->length; ++m) copy_cstr(out->nodes[m], part.chain[m]);
}

// One administration call: the routes' Admin, `call` returning a
// client::Result<T>; `done` takes the result when it holds a value.
template <typename Call, typename Done>
catena_err admin_call(const char* fn, catena_routes* routes, Call&& call, Done&& done) {
  try {
    catena_err err = CATENA_OK;
    catena::Admin* admin = admin_of(routes, fn, &err);
    if (admin == nullptr) return err;
    auto r = call(*admin);
    if (!r) return fail(r.error());
    return done(r);
  } catch (...) {
    return caught();
  }
}

// A channel call: `out` checked, then admin_call with the
// client::Result<ChannelInfo> copied into out.
template <typename Call>
catena_err channel_call(const char* fn, catena_routes* routes, catena_channel_info* out, bool out_required,
                        Call&& call) {
  if (catena_err e = check_info(fn, out, out_required); e != CATENA_OK) return e;
  return admin_call(fn, routes, std::forward<Call>(call), [&](auto& r) {
    fill_info(r.value(), out);
    return CATENA_OK;
  });
}

}  // namespace

extern "C" {

catena_err catena_channel_create(catena_routes* routes, const catena_channel_settings* settings,
                                 catena_channel_info* out) noexcept {
  const char* fn = "catena_channel_create";
  if (settings == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": settings is NULL");
  catena_channel_settings s;
  catena_channel_settings_init(&s);
  if (catena_err e = read_options(fn, "catena_channel_settings_init", settings, kChannelSettingsSizes, &s))
    return e;
  if (catena_err e = check_name(fn, s.name); e != CATENA_OK) return e;
  if (s.partitions < 0 || s.replication < 0 || s.segment_bytes < 0 || s.ttl_ms < 0)
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": a negative setting");
  return channel_call(fn, routes, out, false, [&](catena::Admin& admin) {
    catena::ChannelSettings cs;
    cs.name = s.name;
    if (s.partitions != 0) cs.partitions = s.partitions;
    if (s.replication != 0) cs.replication = s.replication;
    if (s.segment_bytes != 0) cs.segment_bytes = s.segment_bytes;
    if (s.ttl_ms != 0) cs.ttl_ms = s.ttl_ms;
    return admin.create_channel(cs);
  });
}

catena_err catena_channel_describe(catena_routes* routes, const char* name,
                                   catena_channel_info* out) noexcept {
  const char* fn = "catena_channel_describe";
  if (catena_err e = check_name(fn, name); e != CATENA_OK) return e;
  return channel_call(fn, routes, out, true,
                      [&](catena::Admin& admin) { return admin.describe_channel(name); });
}

catena_err catena_channel_alter_partitions(catena_routes* routes, const char* name, std::int32_t partitions,
                                           catena_channel_info* out) noexcept {
  const char* fn = "catena_channel_alter_partitions";
  if (catena_err e = check_name(fn, name); e != CATENA_OK) return e;
  return channel_call(fn, routes, out, false,
                      [&](catena::Admin& admin) { return admin.alter_partitions(name, partitions); });
}

catena_err catena_channel_alter_retention(catena_routes* routes, const char* name, std::int64_t ttl_ms,
                                          catena_channel_info* out) noexcept {
  const char* fn = "catena_channel_alter_retention";
  if (catena_err e = check_name(fn, name); e != CATENA_OK) return e;
  return channel_call(fn, routes, out, false,
                      [&](catena::Admin& admin) { return admin.alter_retention(name, ttl_ms); });
}

catena_err catena_channel_list(catena_routes* routes, catena_channel_info* out, std::size_t capacity,
                               std::size_t* count) noexcept {
  const char* fn = "catena_channel_list";
  if (catena_err e = check_list(fn, "catena_channel_info_init", out, capacity, count)) return e;
  return admin_call(
      fn, routes, [](catena::Admin& admin) { return admin.list_channels(); },
      [&](auto& r) {
        auto& channels = r.value();
        std::sort(channels.begin(), channels.end(),
                  [](const auto& x, const auto& y) { return x.settings.name < y.settings.name; });
        for (std::size_t i = 0; i < std::min(capacity, channels.size()); ++i) fill_info(channels[i], &out[i]);
        *count = channels.size();
        return CATENA_OK;
      });
}

static_assert(CATENA_MAX_REPLICATION == catena::chain::limits::kMaxReplication &&
                  sizeof(catena_partition_chain::nodes[0]) == catena::chain::limits::kMaxNodeIdLength + 1,
              "catena_partition_chain holds a chain of the longest and its longest node ids");

void catena_partition_chain_init(catena_partition_chain* chain) noexcept {
  if (chain == nullptr) return;
  std::memset(chain, 0, sizeof *chain);
  chain->size = sizeof(catena_partition_chain);
}

catena_err catena_channel_chains(catena_routes* routes, const char* name, catena_partition_chain* out,
                                 std::size_t capacity, std::size_t* count) noexcept {
  const char* fn = "catena_channel_chains";
  if (catena_err e = check_name(fn, name); e != CATENA_OK) return e;
  if (catena_err e = check_list(fn, "catena_partition_chain_init", out, capacity, count)) return e;
  return admin_call(
      fn, routes, [&](catena::Admin& admin) { return admin.describe_channel(name); },
      [&](auto& r) {
        const auto& parts = r.value().partitions;
        for (std::size_t i = 0; i < std::min(capacity, parts.size()); ++i) fill_chain(parts[i], &out[i]);
        *count = parts.size();
        return CATENA_OK;
      });
}

catena_err catena_channel_delete(catena_routes* routes, const char* name) noexcept {
  const char* fn = "catena_channel_delete";
  if (catena_err e = check_name(fn, name); e != CATENA_OK) return e;
  return admin_call(
      fn, routes, [&](catena::Admin& admin) { return admin.delete_channel(name); },
      [](auto&) { return CATENA_OK; });
}

}  // extern "C"

// --- tenants -------------------------------------------------------------------

extern "C" {

void catena_tenant_quotas_init(catena_tenant_quotas* quotas) noexcept {
  if (quotas == nullptr) return;
  *quotas = catena_tenant_quotas{};
  quotas->size = sizeof(catena_tenant_quotas);
  quotas->max_channels = -1;
  quotas->max_partitions = -1;
  quotas->max_groups = -1;
  quotas->max_segment_bytes = -1;
  quotas->max_publisher_ring_bytes = -1;
  quotas->max_publish_bytes_per_sec = -1;
  quotas->max_sessions = -1;
  quotas->max_producer_ids_per_minute = -1;
}

void catena_tenant_info_init(catena_tenant_info* info) noexcept {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->size = sizeof(catena_tenant_info);
}

}  // extern "C"

namespace {

constexpr std::array<std::size_t, 1> kTenantQuotasSizes{sizeof(catena_tenant_quotas)};

catena_err check_tenant_name(const char* fn, const char* name) {
  if (name == nullptr || *name == '\0')
    return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": no tenant name");
  return CATENA_OK;
}

// The caller's quotas (NULL: none) as the client's; the zones list split at
// commas (the controller checks each zone).
catena_err read_quotas(const char* fn, const catena_tenant_quotas* in, catena::TenantQuotas* out) {
  catena_tenant_quotas q;
  catena_tenant_quotas_init(&q);
  if (catena_err e = read_options(fn, "catena_tenant_quotas_init", in, kTenantQuotasSizes, &q)) return e;
  out->max_channels = q.max_channels;
  out->max_partitions = q.max_partitions;
  out->max_groups = q.max_groups;
  out->max_segment_bytes = q.max_segment_bytes;
  out->max_publisher_ring_bytes = q.max_publisher_ring_bytes;
  out->max_publish_bytes_per_sec = q.max_publish_bytes_per_sec;
  out->max_sessions = q.max_sessions;
  out->max_producer_ids_per_minute = q.max_producer_ids_per_minute;
  out->zones.clear();
  if (q.zones != nullptr && *q.zones != '\0') {
    std::string_view rest(q.zones);
    for (;;) {
      const auto comma = rest.find(',');
      out->zones.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return CATENA_OK;
}

// A token buffer the caller passes: checked before the controller is asked,
// so that a token is never made and then lost for want of room.
catena_err check_token_buffer(const char* fn, const char* token, std::size_t token_size) {
  if (token == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, std::string(fn) + ": token is NULL");
  if (token_size < CATENA_TOKEN_SIZE) {
    return fail(CATENA_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": token_size is " + std::to_string(token_size) +
                    ", less than CATENA_TOKEN_SIZE (" + std::to_string(CATENA_TOKEN_SIZE) + ")");
  }
  return CATENA_OK;
}

catena_err write_token(const char* fn, const std::string& made, char* token, std::size_t token_size) {
  if (made.size() >= token_size) {  // the controller's tokens are 64 characters: not seen
    return fail(CATENA_ERR_INTERNAL, std::string(fn) + ": the controller's token has " +
                                         std::to_string(made.size()) +
                                         " characters, more than token_size holds");
  }
  std::memcpy(token, made.data(), made.size());
  token[made.size()] = '\0';
  return CATENA_OK;
}

void fill_tenant(const catena::TenantInfo& t, catena_tenant_info* out) {
  catena_tenant_info_init(out);
  copy_cstr(out->name, t.name);
  out->max_channels = t.quotas.max_channels;
  out->max_partitions = t.quotas.max_partitions;
  out->max_groups = t.quotas.max_groups;
  out->max_segment_bytes = t.quotas.max_segment_bytes;
  out->max_publisher_ring_bytes = t.quotas.max_publisher_ring_bytes;
  out->max_publish_bytes_per_sec = t.quotas.max_publish_bytes_per_sec;
  out->max_sessions = t.quotas.max_sessions;
  out->max_producer_ids_per_minute = t.quotas.max_producer_ids_per_minute;
  std::string zones;
  for (const auto& z : t.quotas.zones) zones += (zones.empty() ? "" : ",") + z;
  copy_cstr(out->zones, zones);
  out->channels = t.channels;
  out->partitions = t.partitions;
  out->groups = t.groups;
  out->segment_bytes = t.segment_bytes;
  out->created_at_ms = t.created_at_ms;
}

}  // namespace

extern "C" {

catena_err catena_tenant_create(catena_routes* routes, const char* name, const catena_tenant_quotas* quotas,
                                char* token, std::size_t token_size) noexcept {
  const char* fn = "catena_tenant_create";
  if (catena_err e = check_tenant_name(fn, name)) return e;
  if (catena_err e = check_token_buffer(fn, token, token_size)) return e;
  try {
    catena::TenantQuotas q;
    if (catena_err e = read_quotas(fn, quotas, &q)) return e;
    return admin_call(
        fn, routes, [&](catena::Admin& admin) { return admin.create_tenant(name, q); },
        [&](auto& r) { return write_token(fn, r.value(), token, token_size); });
  } catch (...) {
    return caught();
  }
}

catena_err catena_tenant_list(catena_routes* routes, catena_tenant_info* out, std::size_t capacity,
                              std::size_t* count) noexcept {
  const char* fn = "catena_tenant_list";
  if (catena_err e = check_list(fn, "catena_tenant_info_init", out, capacity, count)) return e;
  return admin_call(
      fn, routes, [&](catena::Admin& admin) { return admin.list_tenants(); },
      [&](auto& r) {
        auto& tenants = r.value();
        std::sort(tenants.begin(), tenants.end(),
                  [](const auto& a, const auto& b) { return a.name < b.name; });
        for (std::size_t i = 0; i < std::min(capacity, tenants.size()); ++i) fill_tenant(tenants[i], &out[i]);
        *count = tenants.size();
        return CATENA_OK;
      });
}

catena_err catena_tenant_alter(catena_routes* routes, const char* name,
                               const catena_tenant_quotas* quotas) noexcept {
  const char* fn = "catena_tenant_alter";
  if (catena_err e = check_tenant_name(fn, name)) return e;
  try {
    catena::TenantQuotas q;
    if (catena_err e = read_quotas(fn, quotas, &q)) return e;
    return admin_call(
        fn, routes, [&](catena::Admin& admin) { return admin.alter_tenant(name, q); },
        [](auto&) { return CATENA_OK; });
  } catch (...) {
    return caught();
  }
}

catena_err catena_tenant_rotate_token(catena_routes* routes, const char* name, char* token,
                                      std::size_t token_size) noexcept {
  const char* fn = "catena_tenant_rotate_token";
  if (catena_err e = check_tenant_name(fn, name)) return e;
  if (catena_err e = check_token_buffer(fn, token, token_size)) return e;
  return admin_call(
      fn, routes, [&](catena::Admin& admin) { return admin.rotate_tenant_token(name); },
      [&](auto& r) { return write_token(fn, r.value(), token, token_size); });
}

catena_err catena_tenant_delete(catena_routes* routes, const char* name) noexcept {
  const char* fn = "catena_tenant_delete";
  if (catena_err e = check_tenant_name(fn, name)) return e;
  return admin_call(
      fn, routes, [&](catena::Admin& admin) { return admin.delete_tenant(name); },
      [](auto&) { return CATENA_OK; });
}

}  // extern "C"
