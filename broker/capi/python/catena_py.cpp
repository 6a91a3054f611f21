// The Python module `catena` (pybind11) over the C API (<catena/catena.h>):
//
//   import catena
//   routes = catena.connect("127.0.0.1:7400")           # token="..." for a tenant
//   pub = catena.Publisher(routes, "orders")
//   r = pub.publish(b"hello", key=b"k")                 # a PublishResult, filled at its ack
//   pub.flush()                                         # r.done, r.status == "ok", r.offset
//   sub = catena.Subscriber(routes, "orders", start="earliest")
//   pub = catena.Publisher(routes, "orders", provider="verbs:mlx5_0", linger_us=200)
//   sub = catena.Subscriber(routes, "orders", start=1000, partitions=[2], provider="verbs:mlx5_0")
//   for partition, offset, payload in sub.poll(timeout_ms=1000): ...
//   pub.publish(b"x", key=b"k", headers=[(b"schema", b"3")])  # key and headers stored
//   pub.publish(b"x", partition=2)                       # to partition 2
//   pub = catena.Publisher(routes, "orders", on_event=lambda kind, partition, message: print(kind, message))
//   for p, o, payload, key, headers in sub.poll(attributes=True): ...
//   sub = catena.Subscriber(routes, "orders", start="committed", group="g", on_notice=print); sub.commit()
//   with catena.Group(routes, "orders", "g", member_name="m1") as g: g.poll(timeout_ms=1000)
//
// Errors raise catena.Error (its .code is the catena_err name). Every call
// that may wait (flush, publish under back-pressure, poll with a timeout)
// releases the GIL; a publisher or subscriber serializes its own calls, so
// Python threads may share one.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <catena/catena.h>

namespace py = pybind11;

namespace {

struct CatenaError : std::runtime_error {
  CatenaError(catena_err c, const std::string& what) : std::runtime_error(what), code(c) {}
  catena_err code;
};

[[noreturn]] void raise(catena_err code) {
  throw CatenaError(code, std::string(catena_strerror(code)) + ": " + catena_last_error());
}

// Runs a C API call that may wait on the network with the GIL released,
// and raises its error.
template <typename Call>
void call_released(Call&& call) {
  catena_err e = CATENA_OK;
  {
    py::gil_scoped_release nogil;
    e = call();
  }
  if (e != CATENA_OK) raise(e);
}

struct Routes {
  catena_routes* h = nullptr;
  ~Routes() { catena_routes_destroy(h); }
};

// One record's outcome, written by the ack callback (inside poll/flush, the
// GIL released) and read from Python: atomics.
struct ResultState {
  std::atomic<bool> done{false};
  std::atomic<int> status{CATENA_OK};
  std::atomic<std::uint32_t> partition{0};
  std::atomic<std::uint64_t> offset{0};
};

class PublishResult {
 public:
  explicit PublishResult(std::shared_ptr<ResultState> s) : s_(std::move(s)) {}
  bool done() const { return s_->done.load(); }
  bool ok() const { return done() && s_->status.load() == CATENA_OK; }
  std::string status() const {
    return done() ? catena_strerror(static_cast<catena_err>(s_->status.load())) : "pending";
  }
  std::uint32_t partition() const { return s_->partition.load(); }
  py::object offset() const {
    if (!ok()) return py::none();
    return py::int_(s_->offset.load());
  }
  std::string repr() const {
    return "PublishResult(status=" + status() + ", partition=" + std::to_string(partition()) +
           ", offset=" + (ok() ? std::to_string(s_->offset.load()) : std::string("None")) + ")";
  }

 private:
  std::shared_ptr<ResultState> s_;
};

// Events a client told (catena_event_cb). The callback runs inside a poll,
// under the client's lock and without the GIL: it only queues; each call
// that polls takes the queue with it and hands the events to the Python
// callable once it holds the GIL again (so the callable may call the
// client).
struct Event {
  std::string kind;
  std::uint32_t partition;
  std::string message;
};
void queue_event(void* opaque, const catena_event* e) {
  static_cast<std::vector<Event>*>(opaque)->push_back({e->name, e->partition, e->message});
}
// An exception from the callable is reported as unraisable (as Python
// does for callbacks it cannot return into), not raised from the call that
// delivered it: that call's own outcome (a queued record) must not be lost.
void deliver(const py::object& handler, const std::vector<Event>& events) {
  for (const Event& e : events) {
    try {
      handler(e.kind, e.partition, e.message);
    } catch (py::error_already_set& err) {
      err.discard_as_unraisable("catena on_event");
    }
  }
}

// Notices a subscriber told (catena_notice_cb): queued and delivered as events.
struct NoticeEvent {
  std::string status;
  std::uint32_t partition;
  std::uint64_t next_offset;
  std::uint64_t lost_from;
};
void queue_notice(void* opaque, const catena_notice* n) {
  static_cast<std::vector<NoticeEvent>*>(opaque)->push_back(
      {catena_strerror(n->status), n->partition, n->next_offset, n->lost_from});
}
void deliver(const py::object& handler, const std::vector<NoticeEvent>& notices) {
  for (const NoticeEvent& n : notices) {
    try {
      handler(n.status, n.partition, n.next_offset, n.lost_from);
    } catch (py::error_already_set& err) {
      err.discard_as_unraisable("catena on_notice");
    }
  }
}

// start= as the Subscriber and Group take it: "earliest", "latest",
// "committed" (where allowed) or an offset.
catena_start parse_start(const py::object& start, bool committed_ok, std::uint64_t* offset) {
  if (py::isinstance<py::str>(start)) {
    const auto name = start.cast<std::string>();
    if (name == "earliest") return CATENA_START_EARLIEST;
    if (name == "latest") return CATENA_START_LATEST;
    if (name == "committed" && committed_ok) return CATENA_START_COMMITTED;
  } else if (offset != nullptr && py::isinstance<py::int_>(start) && !py::isinstance<py::bool_>(start)) {
    const auto at = start.cast<std::int64_t>();
    if (at < 0) throw py::value_error("start offset must be >= 0");
    *offset = static_cast<std::uint64_t>(at);
    return CATENA_START_OFFSET;
  }
  if (offset == nullptr) throw py::value_error("start must be \"earliest\" or \"latest\"");
  if (!py::isinstance<py::str>(start) && !py::isinstance<py::int_>(start))
    throw py::type_error("start must be \"earliest\", \"latest\", \"committed\" or an offset (int)");
  throw py::value_error(committed_ok
                            ? "start must be \"earliest\", \"latest\", \"committed\" or an offset (int)"
                            : "start must be \"earliest\", \"latest\" or an offset (int)");
}

catena_read_from parse_read_from(const std::string& r) {
  if (r == "tail") return CATENA_READ_TAIL;
  if (r == "head") return CATENA_READ_HEAD;
  if (r == "spread") return CATENA_READ_SPREAD;
  throw py::value_error("read_from must be \"tail\", \"head\" or \"spread\"");
}

// Waiting for a publisher's ring to have room: yield a little, then sleep
// from 50 us up to 1 ms (a head holding records back may take a ttl).
class Backoff {
 public:
  void idle(int work) {
    if (work > 0) {
      rounds_ = 0;
      return;
    }
    if (++rounds_ < 64) {
      std::this_thread::yield();
      return;
    }
    const auto pause = std::chrono::microseconds(std::min(1000, 50 << std::min(rounds_ - 64, 5)));
    std::this_thread::sleep_for(pause);
  }

 private:
  int rounds_ = 0;
};

void on_ack(void* opaque, const catena_publish_result* r) {
  auto* s = static_cast<ResultState*>(opaque);
  s->status.store(r->status);
  s->partition.store(r->partition);
  s->offset.store(r->offset);
  s->done.store(true);
}

class Publisher {
 public:
  // provider None: "soft". Zero: the default (catena_publisher_options).
  // on_event: None, or called as on_event(kind, partition, message).
  Publisher(std::shared_ptr<Routes> routes, const std::string& channel,
            const std::optional<std::string>& provider, std::uint64_t producer_id, std::uint32_t ring_bytes,
            std::uint32_t max_in_flight, std::int64_t linger_us, std::uint32_t max_batch_bytes,
            bool head_acks_only, const py::object& on_event, std::int64_t retry_timeout_ms,
            std::int64_t connect_timeout_ms, std::int64_t stall_check_ms, std::int64_t ring_shrink_after_ms,
            std::uint64_t ring_budget_bytes)
      : routes_(std::move(routes)), on_event_(on_event) {
    catena_publisher_options o;
    catena_publisher_options_init(&o);
    if (provider) o.provider = provider->c_str();
    o.producer_id = producer_id;
    o.ring_bytes = ring_bytes;
    o.max_in_flight = max_in_flight;
    o.linger_us = linger_us;
    o.max_batch_bytes = max_batch_bytes;
    o.head_acks_only = head_acks_only ? 1 : 0;
    o.retry_timeout_ms = retry_timeout_ms;
    o.connect_timeout_ms = connect_timeout_ms;
    o.stall_check_ms = stall_check_ms;
    o.ring_shrink_after_ms = ring_shrink_after_ms;
    o.ring_budget_bytes = ring_budget_bytes;
    if (!on_event_.is_none()) {
      o.on_event = queue_event;
      o.event_opaque = &events_;
    }
    call_released([&] { return catena_publisher_create_with(routes_->h, channel.c_str(), &o, &h_); });
  }
  ~Publisher() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    catena_publisher_destroy(h_);
  }

  // Queues one record; waits (polling, GIL released) while back-pressured,
  // up to timeout_ms.
  // With `headers` (a list of (name, value) bytes pairs, [] too), the
  // record carries its key and the headers (catena_publish_record). With
  // `partition`, it goes there (catena_publish_to: a key is only stored).
  PublishResult publish(const py::bytes& payload, const py::bytes& key, std::int64_t timeout_ms,
                        const std::optional<std::vector<std::pair<std::string, std::string>>>& headers,
                        std::optional<std::uint32_t> partition) {
    check_open();
    std::string p = payload;  // copies: the GIL is released below
    std::string k = key;
    std::vector<catena_header> hs;
    if (headers) {
      for (const auto& [name, value] : *headers)
        hs.push_back({name.data(), name.size(), value.data(), value.size()});
    }
    auto state = std::make_shared<ResultState>();
    catena_err e;
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      Backoff backoff;
      for (;;) {
        e = partition ? catena_publish_to(h_, *partition, k.data(), k.size(), hs.data(), hs.size(), p.data(),
                                          p.size(), on_ack, state.get())
            : headers ? catena_publish_record(h_, k.data(), k.size(), hs.data(), hs.size(), p.data(),
                                              p.size(), on_ack, state.get())
                      : catena_publish(h_, k.data(), k.size(), p.data(), p.size(), on_ack, state.get());
        if (e != CATENA_ERR_BACKPRESSURE || std::chrono::steady_clock::now() >= deadline) break;
        const int n = catena_publisher_poll(h_);
        if (n < 0) break;
        backoff.idle(n);
      }
      if (e == CATENA_OK) {
        pending_.push_back(state);  // kept alive until its ack ran
        (void)catena_publisher_poll(h_);
        reap();
      }
      events.swap(events_);
    }
    deliver(on_event_, events);
    if (e != CATENA_OK) raise(e);
    return PublishResult(std::move(state));
  }

  int poll() {
    check_open();
    int n = 0;
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      n = catena_publisher_poll(h_);
      reap();
      events.swap(events_);
    }
    deliver(on_event_, events);
    return n;
  }

  void flush(std::int64_t timeout_ms) {
    check_open();
    catena_err e;
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      e = catena_publisher_flush(h_, timeout_ms);
      reap();
      events.swap(events_);
    }
    deliver(on_event_, events);
    if (e != CATENA_OK) raise(e);
  }

  std::uint64_t in_flight() {
    check_open();
    std::lock_guard lock(mu_);
    return catena_publisher_in_flight(h_);
  }

  std::uint64_t ring_bytes() {
    check_open();
    std::lock_guard lock(mu_);
    return catena_publisher_ring_bytes(h_);
  }

  // Flushes (up to timeout_ms), then lets the publisher go; raises what the
  // flush did (records not acknowledged by then stay "pending": their fate
  // is unknown). Closing twice does nothing.
  void close(std::int64_t timeout_ms) {
    catena_err e = CATENA_OK;
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      if (h_ != nullptr) {
        e = catena_publisher_flush(h_, timeout_ms);
        reap();
        catena_publisher_destroy(h_);
        h_ = nullptr;
      }
      events.swap(events_);
    }
    deliver(on_event_, events);
    if (e != CATENA_OK) raise(e);
  }

 private:
  void check_open() const {
    if (h_ == nullptr) throw py::value_error("the publisher is closed");
  }
  void reap() {
    std::erase_if(pending_, [](const auto& s) { return s->done.load(); });
  }

  std::shared_ptr<Routes> routes_;
  py::object on_event_;        // None: no events asked for
  std::vector<Event> events_;  // queued by queue_event, under mu_
  std::mutex mu_;
  catena_publisher* h_ = nullptr;
  std::vector<std::shared_ptr<ResultState>> pending_;
};

struct Record {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::string payload;
  std::string key;
  std::vector<std::pair<std::string, std::string>> headers;
  bool marker = false;  // a channel alter's marker (control_records)
  std::uint64_t marker_generation = 0;
};

// A channel alter's marker, as Subscriber.poll() returns it with
// control_records=True (in place of a record's tuple).
struct Marker {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::uint64_t generation = 0;
  [[nodiscard]] std::string repr() const {
    return "Marker(partition=" + std::to_string(partition) + ", offset=" + std::to_string(offset) +
           ", generation=" + std::to_string(generation) + ")";
  }
};

void on_message(void* opaque, const catena_message* m) {
  Record r{m->partition,
           m->offset,
           std::string(static_cast<const char*>(m->payload), m->payload_len),
           m->key_len == 0 ? std::string() : std::string(static_cast<const char*>(m->key), m->key_len),
           {},
           m->marker != 0,
           m->marker_generation};
  for (std::size_t i = 0; i < m->header_count; ++i) {
    const catena_header& h = m->headers[i];
    r.headers.emplace_back(std::string(static_cast<const char*>(h.name), h.name_len),
                           std::string(static_cast<const char*>(h.value), h.value_len));
  }
  static_cast<std::vector<Record>*>(opaque)->push_back(std::move(r));
}

class Subscriber {
 public:
  // start: "earliest", "latest", "committed" (the group's positions) or an
  // offset (an int) in every partition read. partitions None: all.
  // provider None: "soft". Zero timeouts: the defaults.
  Subscriber(std::shared_ptr<Routes> routes, const std::string& channel, const py::object& start,
             const std::optional<std::string>& provider,
             const std::optional<std::vector<std::uint32_t>>& partitions, std::uint32_t ring_bytes,
             const py::object& on_event, const std::string& read_from,
             const std::optional<std::string>& group, const py::object& on_notice,
             std::int64_t connect_timeout_ms, std::int64_t stall_check_ms, std::int64_t delivery_stall_ms,
             bool control_records, bool markers_released_by_caller)
      : routes_(std::move(routes)), on_event_(on_event), on_notice_(on_notice) {
    catena_subscriber_options o;
    catena_subscriber_options_init(&o);
    o.control_records = control_records ? 1 : 0;
    o.markers_released_by_caller = markers_released_by_caller ? 1 : 0;
    o.start = parse_start(start, true, &o.start_offset);
    o.read_from = parse_read_from(read_from);
    if (group) o.group = group->c_str();
    o.connect_timeout_ms = connect_timeout_ms;
    o.stall_check_ms = stall_check_ms;
    o.delivery_stall_ms = delivery_stall_ms;
    if (!on_notice_.is_none()) {
      o.on_notice = queue_notice;
      o.notice_opaque = &notices_;
    }
    if (provider) o.provider = provider->c_str();
    if (partitions) {
      if (partitions->empty()) throw py::value_error("partitions must name at least one (None: all)");
      o.partitions = partitions->data();
      o.partition_count = partitions->size();
    }
    o.ring_bytes = ring_bytes;
    if (!on_event_.is_none()) {
      o.on_event = queue_event;
      o.event_opaque = &events_;
    }
    call_released([&] { return catena_subscriber_create_with(routes_->h, channel.c_str(), &o, &h_); });
  }
  ~Subscriber() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    catena_subscriber_destroy(h_);
  }

  // Up to max records; waits (GIL released) up to timeout_ms for the first.
  // attributes: (partition, offset, payload, key, [(name, value), ...]) tuples.
  py::list poll(int max, std::int64_t timeout_ms, bool attributes) {
    check_open();
    if (timeout_ms < 0) throw py::value_error("poll: timeout_ms is negative");
    std::vector<Record> got;
    int n = 0;
    std::vector<Event> events;
    std::vector<NoticeEvent> notices;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      n = catena_subscriber_poll_wait(h_, on_message, &got, max, timeout_ms);
      events.swap(events_);
      notices.swap(notices_);
    }
    deliver(on_event_, events);
    deliver(on_notice_, notices);
    if (n < 0) raise(CATENA_ERR_INTERNAL);
    return records(got, attributes);
  }

  std::uint64_t position(std::uint32_t partition) {
    check_open();
    std::lock_guard lock(mu_);
    return catena_subscriber_position(h_, partition);
  }

  void seek(std::uint32_t partition, std::uint64_t offset) {
    check_open();
    std::lock_guard lock(mu_);
    if (const catena_err e = catena_subscriber_seek(h_, partition, offset); e != CATENA_OK) raise(e);
  }

  std::uint64_t marker_reached(std::uint32_t partition) {
    check_open();
    std::lock_guard lock(mu_);
    return catena_subscriber_marker_reached(h_, partition);
  }

  bool held_at_marker(std::uint32_t partition) {
    check_open();
    std::lock_guard lock(mu_);
    return catena_subscriber_held_at_marker(h_, partition) != 0;
  }

  void release_markers(std::uint32_t partition, std::uint64_t generation) {
    check_open();
    std::lock_guard lock(mu_);
    if (const catena_err e = catena_subscriber_release_markers(h_, partition, generation); e != CATENA_OK)
      raise(e);
  }

  // Waits for the controller (GIL released).
  void commit() {
    check_open();
    catena_err e;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      e = catena_subscriber_commit(h_);
    }
    if (e != CATENA_OK) raise(e);
  }

  // Lets the subscriber go (its sessions, rings and worker threads). Closing
  // twice does nothing.
  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    catena_subscriber_destroy(h_);
    h_ = nullptr;
  }
  void check_open() const {
    if (h_ == nullptr) throw py::value_error("the subscriber is closed");
  }

  static py::list records(const std::vector<Record>& got, bool attributes) {
    py::list out;
    for (const Record& r : got) {
      if (r.marker) {
        out.append(py::cast(Marker{r.partition, r.offset, r.marker_generation}));
        continue;
      }
      if (!attributes) {
        out.append(py::make_tuple(r.partition, r.offset, py::bytes(r.payload)));
        continue;
      }
      py::list hs;
      for (const auto& [name, value] : r.headers)
        hs.append(py::make_tuple(py::bytes(name), py::bytes(value)));
      out.append(py::make_tuple(r.partition, r.offset, py::bytes(r.payload), py::bytes(r.key), hs));
    }
    return out;
  }

 private:
  std::shared_ptr<Routes> routes_;
  py::object on_event_;               // None: no events asked for
  py::object on_notice_;              // None: no notices asked for
  std::vector<Event> events_;         // queued by queue_event, under mu_
  std::vector<NoticeEvent> notices_;  // queued by queue_notice, under mu_
  std::mutex mu_;
  catena_subscriber* h_ = nullptr;
};

// One member of a subscriber group (catena_group_*). poll() returns a list:
// the member commits at the start of its next poll what earlier polls
// returned, so a record is never committed before the list holding it was
// handed back. close() (or leaving a `with` block) commits and leaves the
// group at once; otherwise the member leaves when it is collected.
class Group {
 public:
  Group(std::shared_ptr<Routes> routes, const std::string& channel, const std::string& group,
        const std::string& member_name, const py::object& start, const std::string& read_from,
        const std::optional<std::string>& provider, std::uint32_t ring_bytes, std::int64_t commit_interval_ms,
        std::int64_t join_timeout_ms, const py::object& on_event)
      : routes_(std::move(routes)), on_event_(on_event) {
    catena_group_options o;
    catena_group_options_init(&o);
    o.member_name = member_name.c_str();
    o.start = parse_start(start, false, nullptr);
    o.read_from = parse_read_from(read_from);
    if (provider) o.provider = provider->c_str();
    o.ring_bytes = ring_bytes;
    if (commit_interval_ms < 0) throw py::value_error("commit_interval_ms must be >= 0 (0: only commit())");
    o.commit_interval_ms = commit_interval_ms == 0 ? -1 : commit_interval_ms;
    o.join_timeout_ms = join_timeout_ms;
    if (!on_event_.is_none()) {
      o.on_event = queue_event;
      o.event_opaque = &events_;
    }
    call_released([&] { return catena_group_create(routes_->h, channel.c_str(), group.c_str(), &o, &h_); });
  }
  ~Group() { close(); }

  py::list poll(int max, std::int64_t timeout_ms, bool attributes) {
    if (timeout_ms < 0) throw py::value_error("poll: timeout_ms is negative");
    std::vector<Record> got;
    int n = 0;
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      n = h_ == nullptr ? -2 : catena_group_poll_wait(h_, on_message, &got, max, timeout_ms);
      events.swap(events_);
    }
    deliver(on_event_, events);
    if (n == -2) throw py::value_error("the group member is closed");
    if (n < 0) raise(CATENA_ERR_INTERNAL);
    return Subscriber::records(got, attributes);
  }

  void commit() {
    std::lock_guard lock(mu_);
    if (h_ == nullptr) throw py::value_error("the group member is closed");
    if (const catena_err e = catena_group_commit(h_); e != CATENA_OK) raise(e);
  }

  std::vector<std::uint32_t> partitions() {
    std::lock_guard lock(mu_);
    if (h_ == nullptr) return {};
    std::vector<std::uint32_t> out(catena_group_partitions(h_, nullptr, 0));
    out.resize(catena_group_partitions(h_, out.data(), out.size()));
    return out;
  }

  py::dict stats() {
    std::lock_guard lock(mu_);
    if (h_ == nullptr) throw py::value_error("the group member is closed");
    catena_group_stats st;
    catena_group_stats_init(&st);
    if (const catena_err e = catena_group_get_stats(h_, &st); e != CATENA_OK) raise(e);
    py::dict d;
    d["joins"] = st.joins;
    d["commits"] = st.commits;
    d["commit_refusals"] = st.commit_refusals;
    d["revoked"] = st.revoked;
    return d;
  }

  // Commits what poll() returned and leaves the group (waits for the
  // controller, GIL released). Again: nothing.
  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    catena_group_destroy(h_);
    h_ = nullptr;
  }

 private:
  std::shared_ptr<Routes> routes_;
  py::object on_event_;
  std::vector<Event> events_;
  std::mutex mu_;
  catena_group* h_ = nullptr;
};

// A channel as catena_channel_info has it.
struct ChannelInfo {
  std::string name;
  std::int32_t partitions = 0;
  std::int32_t replication = 0;
  std::int64_t segment_bytes = 0;
  std::int64_t ttl_ms = 0;
  std::uint32_t routed_partitions = 0;
  bool altering = false;

  explicit ChannelInfo(const catena_channel_info& c)
      : name(c.name),
        partitions(c.partitions),
        replication(c.replication),
        segment_bytes(c.segment_bytes),
        ttl_ms(c.ttl_ms),
        routed_partitions(c.routed_partitions),
        altering(c.altering != 0) {}
  std::string repr() const {
    return "ChannelInfo(name=" + name + ", partitions=" + std::to_string(partitions) +
           ", replication=" + std::to_string(replication) +
           ", segment_bytes=" + std::to_string(segment_bytes) + ", ttl_ms=" + std::to_string(ttl_ms) + ")";
  }
};

// Channel administration: one request to the controller each, the GIL
// released while it waits.
ChannelInfo channel_call(const std::function<catena_err(catena_channel_info*)>& call) {
  catena_channel_info info;
  catena_channel_info_init(&info);
  call_released([&] { return call(&info); });
  return ChannelInfo(info);
}

ChannelInfo create_channel(Routes& r, const std::string& name, std::int32_t partitions,
                           std::int32_t replication, std::int64_t segment_bytes, std::int64_t ttl_ms) {
  catena_channel_settings s;
  catena_channel_settings_init(&s);
  s.name = name.c_str();
  s.partitions = partitions;
  s.replication = replication;
  s.segment_bytes = segment_bytes;
  s.ttl_ms = ttl_ms;
  return channel_call([&](catena_channel_info* out) { return catena_channel_create(r.h, &s, out); });
}

ChannelInfo describe_channel(Routes& r, const std::string& name) {
  return channel_call(
      [&](catena_channel_info* out) { return catena_channel_describe(r.h, name.c_str(), out); });
}

ChannelInfo alter_channel(Routes& r, const std::string& name, std::optional<std::int32_t> partitions,
                          std::optional<std::int64_t> ttl_ms) {
  if (!partitions && !ttl_ms) throw py::value_error("alter_channel: give partitions=, ttl_ms= or both");
  std::optional<ChannelInfo> out;
  if (ttl_ms) {
    out = channel_call([&](catena_channel_info* o) {
      return catena_channel_alter_retention(r.h, name.c_str(), *ttl_ms, o);
    });
  }
  if (partitions) {
    out = channel_call([&](catena_channel_info* o) {
      return catena_channel_alter_partitions(r.h, name.c_str(), *partitions, o);
    });
  }
  return *out;
}

// A C list call's entries as Out. The list may grow between two calls:
// ask again, with room for the count the last call gave, until it fits.
template <typename Out, typename Entry, typename List>
std::vector<Out> list_call(void (*init)(Entry*) noexcept, List&& list) {
  std::vector<Entry> entries;
  std::size_t count = 0;
  call_released([&] {
    catena_err e = CATENA_OK;
    do {
      entries.resize(count + 8);
      for (auto& entry : entries) init(&entry);
      e = list(entries.data(), entries.size(), &count);
    } while (e == CATENA_OK && count > entries.size());
    return e;
  });
  return std::vector<Out>(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(count));
}

std::vector<ChannelInfo> list_channels(Routes& r) {
  return list_call<ChannelInfo>(catena_channel_info_init,
                                [&](catena_channel_info* out, std::size_t n, std::size_t* count) {
                                  return catena_channel_list(r.h, out, n, count);
                                });
}

// One partition's chain as catena_partition_chain has it.
struct PartitionChain {
  std::uint32_t partition;
  std::uint64_t epoch;
  std::uint64_t start_offset;
  std::vector<std::string> nodes;  // head first, tail last

  explicit PartitionChain(const catena_partition_chain& c)
      : partition(c.partition), epoch(c.epoch), start_offset(c.start_offset) {
    for (std::uint32_t m = 0; m < c.length; ++m) nodes.emplace_back(c.nodes[m]);
  }
  std::string repr() const {
    std::string chain;
    for (const auto& n : nodes) chain += (chain.empty() ? "" : ",") + n;
    return "PartitionChain(partition=" + std::to_string(partition) + ", epoch=" + std::to_string(epoch) +
           ", nodes=[" + chain + "])";
  }
};

std::vector<PartitionChain> channel_chains(Routes& r, const std::string& name) {
  return list_call<PartitionChain>(catena_partition_chain_init,
                                   [&](catena_partition_chain* out, std::size_t n, std::size_t* count) {
                                     return catena_channel_chains(r.h, name.c_str(), out, n, count);
                                   });
}

void delete_channel(Routes& r, const std::string& name) {
  call_released([&] { return catena_channel_delete(r.h, name.c_str()); });
}

// A tenant as catena_tenant_info has it: quotas (-1: no limit) and use.
struct TenantInfo {
  std::string name;
  std::int64_t max_channels, max_partitions, max_groups, max_segment_bytes, max_publisher_ring_bytes,
      max_publish_bytes_per_sec, max_sessions, max_producer_ids_per_minute;
  std::vector<std::string> zones;
  std::int64_t channels, partitions, groups, segment_bytes, created_at_ms;

  explicit TenantInfo(const catena_tenant_info& t)
      : name(t.name),
        max_channels(t.max_channels),
        max_partitions(t.max_partitions),
        max_groups(t.max_groups),
        max_segment_bytes(t.max_segment_bytes),
        max_publisher_ring_bytes(t.max_publisher_ring_bytes),
        max_publish_bytes_per_sec(t.max_publish_bytes_per_sec),
        max_sessions(t.max_sessions),
        max_producer_ids_per_minute(t.max_producer_ids_per_minute),
        channels(t.channels),
        partitions(t.partitions),
        groups(t.groups),
        segment_bytes(t.segment_bytes),
        created_at_ms(t.created_at_ms) {
    std::string_view rest(t.zones);
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      zones.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::string repr() const {
    return "TenantInfo(name=" + name + ", channels=" + std::to_string(channels) +
           ", max_channels=" + std::to_string(max_channels) + ")";
  }
};

// Keyword quotas (create_tenant, alter_tenant) as catena_tenant_quotas;
// `zones_text` holds the joined zones list. An unknown keyword is refused.
struct Quotas {
  catena_tenant_quotas q;
  std::string zones_text;

  explicit Quotas(const py::kwargs& kwargs) {
    catena_tenant_quotas_init(&q);
    static constexpr std::pair<const char*, std::int64_t catena_tenant_quotas::*> kLimits[] = {
        {"max_channels", &catena_tenant_quotas::max_channels},
        {"max_partitions", &catena_tenant_quotas::max_partitions},
        {"max_groups", &catena_tenant_quotas::max_groups},
        {"max_segment_bytes", &catena_tenant_quotas::max_segment_bytes},
        {"max_publisher_ring_bytes", &catena_tenant_quotas::max_publisher_ring_bytes},
        {"max_publish_bytes_per_sec", &catena_tenant_quotas::max_publish_bytes_per_sec},
        {"max_sessions", &catena_tenant_quotas::max_sessions},
        {"max_producer_ids_per_minute", &catena_tenant_quotas::max_producer_ids_per_minute},
    };
    for (const auto& [key, value] : kwargs) {
      const auto k = key.cast<std::string>();
      if (k == "zones") {
        // pybind11 refuses a str for a list with a bare cast error: say what is wrong.
        if (py::isinstance<py::str>(value)) throw py::type_error("zones: a list of zone names, not a string");
        for (const auto& z : value.cast<std::vector<std::string>>()) {
          if (z.empty() || z.find(',') != std::string::npos)
            throw py::value_error("zones: each zone is a non-empty name without ','");
          zones_text += (zones_text.empty() ? "" : ",") + z;
        }
        continue;
      }
      const auto* it =
          std::find_if(std::begin(kLimits), std::end(kLimits), [&](const auto& l) { return k == l.first; });
      if (it == std::end(kLimits)) throw py::type_error("unknown quota '" + k + "'");
      q.*(it->second) = value.cast<std::int64_t>();
    }
    q.zones = zones_text.c_str();
  }
  Quotas(const Quotas&) = delete;  // q.zones points into zones_text
  Quotas& operator=(const Quotas&) = delete;
};

std::string create_tenant(Routes& r, const std::string& name, const py::kwargs& kwargs) {
  const Quotas quotas(kwargs);
  char token[CATENA_TOKEN_SIZE] = {};
  call_released([&] { return catena_tenant_create(r.h, name.c_str(), &quotas.q, token, sizeof token); });
  return token;
}

void alter_tenant(Routes& r, const std::string& name, const py::kwargs& kwargs) {
  const Quotas quotas(kwargs);
  call_released([&] { return catena_tenant_alter(r.h, name.c_str(), &quotas.q); });
}

std::string rotate_tenant_token(Routes& r, const std::string& name) {
  char token[CATENA_TOKEN_SIZE] = {};
  call_released([&] { return catena_tenant_rotate_token(r.h, name.c_str(), token, sizeof token); });
  return token;
}

std::vector<TenantInfo> list_tenants(Routes& r) {
  return list_call<TenantInfo>(catena_tenant_info_init,
                               [&](catena_tenant_info* out, std::size_t n, std::size_t* count) {
                                 return catena_tenant_list(r.h, out, n, count);
                               });
}

void delete_tenant(Routes& r, const std::string& name) {
  call_released([&] { return catena_tenant_delete(r.h, name.c_str()); });
}

std::shared_ptr<Routes> connect(const std::string& controllers, const std::optional<std::string>& token) {
  auto r = std::make_shared<Routes>();
  const catena_err e = catena_connect(controllers.c_str(), token ? token->c_str() : nullptr, &r->h);
  if (e != CATENA_OK) raise(e);
  return r;
}

}  // namespace

PYBIND11_MODULE(catena, m) {
  m.doc() = "Catena client: publish to and subscribe from Catena channels (over libcatena's C API)";
  m.attr("__version__") = catena_version();
  m.def(
      "version", [] { return std::string(catena_version()); }, "The version libcatena.so was built as");

  static py::exception<CatenaError> error(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CatenaError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(error.ptr())(e.what());
      exc.attr("code") = catena_strerror(e.code);
      PyErr_SetObject(error.ptr(), exc.ptr());
    }
  });

  py::class_<ChannelInfo>(m, "ChannelInfo", "A channel as the controller has it")
      .def_readonly("name", &ChannelInfo::name)
      .def_readonly("partitions", &ChannelInfo::partitions, "The count keyed records map over")
      .def_readonly("replication", &ChannelInfo::replication)
      .def_readonly("segment_bytes", &ChannelInfo::segment_bytes)
      .def_readonly("ttl_ms", &ChannelInfo::ttl_ms)
      .def_readonly("routed_partitions", &ChannelInfo::routed_partitions,
                    "Partitions with a route: after a shrink, more than partitions")
      .def_readonly("altering", &ChannelInfo::altering, "A change of the partition count is under way")
      .def("__repr__", &ChannelInfo::repr);

  py::class_<PartitionChain>(m, "PartitionChain", "One partition's chain as the controller routes it now")
      .def_readonly("partition", &PartitionChain::partition)
      .def_readonly("epoch", &PartitionChain::epoch, "A new chain, a new epoch")
      .def_readonly("start_offset", &PartitionChain::start_offset, "The chain's first offset")
      .def_readonly("nodes", &PartitionChain::nodes, "Node ids, head first, tail last")
      .def("__repr__", &PartitionChain::repr);

  py::class_<TenantInfo>(m, "TenantInfo", "A tenant as the controller has it: quotas (-1: no limit), use")
      .def_readonly("name", &TenantInfo::name)
      .def_readonly("max_channels", &TenantInfo::max_channels)
      .def_readonly("max_partitions", &TenantInfo::max_partitions)
      .def_readonly("max_groups", &TenantInfo::max_groups)
      .def_readonly("max_segment_bytes", &TenantInfo::max_segment_bytes)
      .def_readonly("max_publisher_ring_bytes", &TenantInfo::max_publisher_ring_bytes)
      .def_readonly("max_publish_bytes_per_sec", &TenantInfo::max_publish_bytes_per_sec)
      .def_readonly("max_sessions", &TenantInfo::max_sessions)
      .def_readonly("max_producer_ids_per_minute", &TenantInfo::max_producer_ids_per_minute)
      .def_readonly("zones", &TenantInfo::zones, "Where its replicas may be placed; []: anywhere")
      .def_readonly("channels", &TenantInfo::channels)
      .def_readonly("partitions", &TenantInfo::partitions)
      .def_readonly("groups", &TenantInfo::groups)
      .def_readonly("segment_bytes", &TenantInfo::segment_bytes)
      .def_readonly("created_at_ms", &TenantInfo::created_at_ms, "Unix time")
      .def("__repr__", &TenantInfo::repr);

  py::class_<Routes, std::shared_ptr<Routes>>(
      m, "Routes",
      "Routes from the controller(s); see connect(). Also channel "
      "administration (what `catena channel ...` does), each call one "
      "request to the controller, never retried behind your back")
      .def("create_channel", &create_channel, py::arg("name"), py::kw_only(), py::arg("partitions") = 0,
           py::arg("replication") = 0, py::arg("segment_bytes") = 0, py::arg("ttl_ms") = 0,
           "Creates a channel (0: the controller's default: 1 partition, replication 3, 64 MiB segments, "
           "ttl one hour); a name taken raises Error code \"invalid_argument\"")
      .def("describe_channel", &describe_channel, py::arg("name"))
      .def("list_channels", &list_channels, "Every channel, by name")
      .def("channel_chains", &channel_chains, py::arg("name"),
           "Each routed partition's chain (PartitionChain: partition, epoch, start_offset, nodes head "
           "first), by partition")
      .def("alter_channel", &alter_channel, py::arg("name"), py::kw_only(),
           py::arg("partitions") = py::none(), py::arg("ttl_ms") = py::none(),
           "Changes the retention and/or the partition count (under traffic; waits for the markers)")
      .def("delete_channel", &delete_channel, py::arg("name"), "The channel and every record in it")
      .def("create_tenant", &create_tenant, py::arg("name"),
           "Creates a tenant (its channels are \"name.*\") and returns its token, which cannot be shown "
           "again (the admin's call). Quotas as keywords: max_channels, max_partitions, max_groups, "
           "max_segment_bytes, max_publisher_ring_bytes, max_publish_bytes_per_sec, max_sessions, "
           "max_producer_ids_per_minute (-1 or not given: no limit) and zones (a list; []: anywhere)")
      .def("list_tenants", &list_tenants, "Every tenant, by name: TenantInfo (quotas and use)")
      .def("alter_tenant", &alter_tenant, py::arg("name"),
           "Replaces every quota of a tenant, keywords as create_tenant's (those not given: no limit)")
      .def("rotate_tenant_token", &rotate_tenant_token, py::arg("name"),
           "A new token for the tenant; the old one stops working, also on connections that used it")
      .def("delete_tenant", &delete_tenant, py::arg("name"), "Refused while the tenant owns channels");
  m.def("connect", &connect, py::arg("controllers"), py::arg("token") = py::none(),
        "Routes from the controller(s) at \"host:port[,host:port...]\"");

  py::class_<PublishResult>(m, "PublishResult")
      .def_property_readonly("done", &PublishResult::done)
      .def_property_readonly("ok", &PublishResult::ok)
      .def_property_readonly("status", &PublishResult::status, "\"pending\", \"ok\" or the error's name")
      .def_property_readonly("partition", &PublishResult::partition)
      .def_property_readonly("offset", &PublishResult::offset, "The record's offset once ok, else None")
      .def("__repr__", &PublishResult::repr);

  py::class_<Publisher>(m, "Publisher")
      .def(py::init<std::shared_ptr<Routes>, const std::string&, const std::optional<std::string>&,
                    std::uint64_t, std::uint32_t, std::uint32_t, std::int64_t, std::uint32_t, bool,
                    const py::object&, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                    std::uint64_t>(),
           py::arg("routes"), py::arg("channel"), py::kw_only(), py::arg("provider") = py::none(),
           py::arg("producer_id") = 0, py::arg("ring_bytes") = 0, py::arg("max_in_flight") = 0,
           py::arg("linger_us") = 0, py::arg("max_batch_bytes") = 0, py::arg("head_acks_only") = false,
           py::arg("on_event") = py::none(), py::arg("retry_timeout_ms") = 0,
           py::arg("connect_timeout_ms") = 0, py::arg("stall_check_ms") = 0,
           py::arg("ring_shrink_after_ms") = 0, py::arg("ring_budget_bytes") = 0)
      .def("publish", &Publisher::publish, py::arg("payload"), py::arg("key") = py::bytes(),
           py::arg("timeout_ms") = 30000, py::arg("headers") = py::none(), py::arg("partition") = py::none(),
           "Queues one record (same key, same partition, in order; partition=N: to that partition, the "
           "key only stored); its result completes in poll()/flush()")
      .def("poll", &Publisher::poll, "Sends and takes acknowledgements; never waits")
      .def("flush", &Publisher::flush, py::arg("timeout_ms") = 30000,
           "Waits until every record is acknowledged or failed; raises catena.Error (timeout) otherwise")
      .def_property_readonly("in_flight", &Publisher::in_flight)
      .def_property_readonly("ring_bytes", &Publisher::ring_bytes,
                             "Bytes of the partitions' staging rings now (each head registers as much)")
      .def("close", &Publisher::close, py::arg("timeout_ms") = 30000,
           "Flushes (raising as flush() does), then lets the publisher go")
      .def(
          "__enter__", [](Publisher& p) -> Publisher& { return p; }, py::return_value_policy::reference)
      .def("__exit__", [](Publisher& p, const py::args&) { p.close(30000); });

  py::class_<Marker>(m, "Marker", "A channel alter's marker (Subscriber(control_records=True))")
      .def_readonly("partition", &Marker::partition)
      .def_readonly("offset", &Marker::offset)
      .def_readonly("generation", &Marker::generation, "The channel generation it brings in")
      .def("__repr__", &Marker::repr);

  py::class_<Subscriber>(m, "Subscriber")
      .def(py::init<std::shared_ptr<Routes>, const std::string&, const py::object&,
                    const std::optional<std::string>&, const std::optional<std::vector<std::uint32_t>>&,
                    std::uint32_t, const py::object&, const std::string&, const std::optional<std::string>&,
                    const py::object&, std::int64_t, std::int64_t, std::int64_t, bool, bool>(),
           py::arg("routes"), py::arg("channel"), py::arg("start") = "earliest", py::kw_only(),
           py::arg("provider") = py::none(), py::arg("partitions") = py::none(), py::arg("ring_bytes") = 0,
           py::arg("on_event") = py::none(), py::arg("read_from") = "tail", py::arg("group") = py::none(),
           py::arg("on_notice") = py::none(), py::arg("connect_timeout_ms") = 0,
           py::arg("stall_check_ms") = 0, py::arg("delivery_stall_ms") = 0,
           py::arg("control_records") = false, py::arg("markers_released_by_caller") = false)
      .def("poll", &Subscriber::poll, py::arg("max") = 1024, py::arg("timeout_ms") = 0,
           py::arg("attributes") = false,
           "Up to max records as (partition, offset, payload) tuples (attributes=True: (partition, offset, "
           "payload, key, [(name, value), ...])), and with control_records=True a Marker for each channel "
           "alter's marker; waits up to timeout_ms for the first")
      .def("marker_reached", &Subscriber::marker_reached, py::arg("partition"),
           "The generation of the last alter marker the partition delivered since it started or was sought "
           "(0: none)")
      .def("held_at_marker", &Subscriber::held_at_marker, py::arg("partition"),
           "Whether the partition is held at an alter marker (its position is the marker's offset)")
      .def("release_markers", &Subscriber::release_markers, py::arg("partition"), py::arg("generation"),
           "With markers_released_by_caller=True: the partition may pass markers up to this generation")
      .def("position", &Subscriber::position, py::arg("partition"))
      .def("seek", &Subscriber::seek, py::arg("partition"), py::arg("offset"),
           "Delivers the partition from this offset on")
      .def("commit", &Subscriber::commit, "Stores every partition's position as the group's (needs group=)")
      .def("close", &Subscriber::close, "Lets the subscriber go")
      .def(
          "__enter__", [](Subscriber& s) -> Subscriber& { return s; }, py::return_value_policy::reference)
      .def("__exit__", [](Subscriber& s, const py::args&) { s.close(); });

  py::class_<Group>(m, "Group")
      .def(py::init<std::shared_ptr<Routes>, const std::string&, const std::string&, const std::string&,
                    const py::object&, const std::string&, const std::optional<std::string>&, std::uint32_t,
                    std::int64_t, std::int64_t, const py::object&>(),
           py::arg("routes"), py::arg("channel"), py::arg("group"), py::kw_only(),
           py::arg("member_name") = "member", py::arg("start") = "earliest", py::arg("read_from") = "tail",
           py::arg("provider") = py::none(), py::arg("ring_bytes") = 0, py::arg("commit_interval_ms") = 1000,
           py::arg("join_timeout_ms") = 0, py::arg("on_event") = py::none())
      .def("poll", &Group::poll, py::arg("max") = 1024, py::arg("timeout_ms") = 0,
           py::arg("attributes") = false,
           "Up to max records of the partitions this member has, as Subscriber.poll")
      .def("commit", &Group::commit, "Commits what earlier polls returned (in the background)")
      .def_property_readonly("partitions", &Group::partitions, "The partitions this member reads now")
      .def("stats", &Group::stats, "joins, commits, commit_refusals, revoked: what the member did so far")
      .def("close", &Group::close, "Commits and leaves the group")
      .def(
          "__enter__", [](Group& g) -> Group& { return g; }, py::return_value_policy::reference)
      .def("__exit__", [](Group& g, const py::args&) { g.close(); });
}
