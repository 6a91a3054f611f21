/* catena.h: the C API of Catena's client library (libcatena.so).
 *
 * Opaque handles over the C++ client (<catena/broker/publisher.hpp> and
 * <catena/broker/subscriber.hpp>): a routes handle from catena_connect(),
 * publishers and subscribers made from it. Every function returns a
 * catena_err (or a count) and never lets a C++ exception out; after a
 * failed call, catena_last_error() is its message (this thread's).
 *
 * Threading: a publisher or subscriber is used by one thread at a time (the
 * C++ client's rule); callbacks run on that thread, inside
 * catena_publisher_poll/flush and catena_subscriber_poll. A routes handle
 * may be shared; publishers and subscribers keep it alive, so it may be
 * destroyed before them.
 *
 * Link: `pkg-config --cflags --libs catena` (or CMake's Catena::client).
 */
#ifndef CATENA_CATENA_H
#define CATENA_CATENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CATENA_NOEXCEPT noexcept
extern "C" {
#else
#define CATENA_NOEXCEPT
#endif
/* libcatena.so hides what it does not export: these are exported. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* The client's error vocabulary (catena::client::ErrorCode, same values). */
typedef enum catena_err {
  CATENA_OK = 0,
  /* The caller's mistake: retrying the same call fails the same way. */
  CATENA_ERR_INVALID_ARGUMENT = 1,
  CATENA_ERR_UNKNOWN_CHANNEL = 2,
  CATENA_ERR_TOO_LARGE = 3,
  CATENA_ERR_PRODUCER_FENCED = 4,
  CATENA_ERR_POSITION_EXPIRED = 5,
  CATENA_ERR_DATA_LOST = 6,
  CATENA_ERR_NO_COMMITTED_OFFSET = 7,
  CATENA_ERR_NOT_OWNER = 8,
  CATENA_ERR_UNAUTHENTICATED = 9,
  CATENA_ERR_NO_DEVICE = 10,
  CATENA_ERR_INTERNAL = 11,
  /* Retriable: the same call may succeed later. */
  CATENA_ERR_BACKPRESSURE = 12, /* a window or ring is full: poll and retry */
  CATENA_ERR_UNAVAILABLE = 13,
  CATENA_ERR_CONTROLLER_UNAVAILABLE = 14,
  CATENA_ERR_TIMEOUT = 15,
  CATENA_ERR_NOT_READY = 16,
  CATENA_ERR_RESOURCE_EXHAUSTED = 17,
  CATENA_ERR_CORRUPT = 18
} catena_err;

/* "ok", "unknown_channel", ... (static strings; "unknown" for other values).
 * An int, so that any value may be asked about. */
const char* catena_strerror(int err) CATENA_NOEXCEPT;
/* 1 if the same call may succeed later, unchanged. */
int catena_err_retriable(int err) CATENA_NOEXCEPT;
/* The message of this thread's last failed call ("" if none); valid until
 * this thread's next call into the library. */
const char* catena_last_error(void) CATENA_NOEXCEPT;
/* The version libcatena.so was built as, e.g. "0.1.0". */
const char* catena_version(void) CATENA_NOEXCEPT;

typedef struct catena_routes catena_routes;
typedef struct catena_publisher catena_publisher;
typedef struct catena_subscriber catena_subscriber;

/* Routes from the controller(s): "host:port[,host:port...]"; token may be
 * NULL (no tenant). Connects lazily: a controller that cannot be reached
 * shows in the first publisher or subscriber created. */
catena_err catena_connect(const char* controllers, const char* token, catena_routes** out) CATENA_NOEXCEPT;
void catena_routes_destroy(catena_routes* routes) CATENA_NOEXCEPT;

/* ---- Publisher ---- */

typedef struct catena_publish_result {
  catena_err status; /* CATENA_OK: stored by every replica */
  uint32_t partition;
  uint64_t offset; /* valid when status is CATENA_OK */
  uint64_t sequence;
} catena_publish_result;

/* Called once per record, from catena_publisher_poll/flush. */
typedef void (*catena_publish_cb)(void* opaque, const catena_publish_result* result);

/* What a publisher or subscriber tells about a partition besides records
 * (catena::ClientEvent): its route changed, its link was lost or came back,
 * acks stalled, records failed as unreachable, or the head holds records
 * back and why. For logs and alerts: the client recovers on its own. */
typedef enum catena_event_kind {
  CATENA_EVENT_ROUTE_CHANGED = 0,
  CATENA_EVENT_DISCONNECTED = 1,
  CATENA_EVENT_RECONNECTED = 2,
  CATENA_EVENT_ACK_STALLED = 3,           /* publisher: no ack for stall_check */
  CATENA_EVENT_PARTITION_UNAVAILABLE = 4, /* publisher: pending records failed after retry_timeout */
  /* publisher: the head holds records back, unread (nothing fails; they are
   * appended once it passes, and publishing reports BACKPRESSURE meanwhile) */
  CATENA_EVENT_LOG_FULL = 5,            /* every segment holds records within ttl + grace */
  CATENA_EVENT_SEGMENT_MEMORY_FULL = 6, /* the head's node spent its segment memory */
  CATENA_EVENT_RATE_LIMITED = 7         /* the tenant is at its publish rate on the head's node */
} catena_event_kind;
typedef struct catena_event {
  catena_event_kind kind;
  uint32_t partition;
  const char* name;    /* the kind's name, e.g. "log_full" */
  const char* message; /* for people; valid during the callback only */
} catena_event;
/* Called from poll/flush on the caller's thread, once per change of a
 * partition's state, never per record. It may not destroy the client. */
typedef void (*catena_event_cb)(void* opaque, const catena_event* event);

catena_err catena_publisher_create(catena_routes* routes, const char* channel,
                                   catena_publisher** out) CATENA_NOEXCEPT;
/* What catena_publisher_create_with takes. Fill it with
 * catena_publisher_options_init (the defaults), then set what you need: a
 * field added in a later version goes at the end and its default keeps
 * what the program asked for. Zero means the default everywhere. */
typedef struct catena_publisher_options {
  size_t size;            /* sizeof(catena_publisher_options), set by _init */
  const char* provider;   /* NULL: "soft"; "soft:tcp", "verbs:mlx5_0", "dpdk:<port>"... */
  uint64_t producer_id;   /* 0: the controller issues one; else 1..2^62-1, kept across restarts */
  uint32_t ring_bytes;    /* a partition's staging ring at most (0: 4 MiB) */
  uint32_t max_in_flight; /* records awaiting acknowledgement per partition (0: the default) */
  int64_t linger_us;      /* hold a partition's records this long to batch them (0: send at once) */
  /* Added later: a program built against the header before them passes its
   * smaller size and gets their defaults. */
  uint32_t max_batch_bytes; /* flush a partition's batch at this many bytes (0: 256 KiB) */
  int head_acks_only;       /* 1: acks come from the head only, no commit watch at the tail (less CPU
                               with many partitions, one chain round trip later); 0: both */
  catena_event_cb on_event; /* NULL: none */
  void* event_opaque;       /* passed to on_event */
  /* Added later still (0: the default; negative: CATENA_ERR_INVALID_ARGUMENT). */
  int64_t retry_timeout_ms;   /* a partition's pending records fail with CATENA_ERR_UNAVAILABLE after this
                                 long without a head that takes them (0: 30000) */
  int64_t connect_timeout_ms; /* a dial to a head that does not answer is given up after this (0: 3000) */
  int64_t stall_check_ms;     /* no ack for this long: re-read the route, CATENA_EVENT_ACK_STALLED (0: 250) */
  /* Added later again. */
  int64_t ring_shrink_after_ms; /* a partition's ring whose records took at most a quarter of it this long
                                   is halved, down to 64 KiB (0: 60000; CATENA_NEVER: rings never shrink;
                                   other negatives: CATENA_ERR_INVALID_ARGUMENT) */
  uint64_t ring_budget_bytes;   /* the sum of this publisher's rings at most (0: 64 MiB; at least 64 KiB a
                                   partition, else CATENA_ERR_INVALID_ARGUMENT) */
} catena_publisher_options;
#define CATENA_NEVER (-1)
void catena_publisher_options_init(catena_publisher_options* options) CATENA_NOEXCEPT;
/* catena_publisher_create with options (NULL: the defaults).
 * CATENA_ERR_INVALID_ARGUMENT for a size this library does not know or an
 * unknown provider spec; CATENA_ERR_NO_DEVICE when the provider has no
 * device here. */
catena_err catena_publisher_create_with(catena_routes* routes, const char* channel,
                                        const catena_publisher_options* options,
                                        catena_publisher** out) CATENA_NOEXCEPT;
/* Queues one record (the key picks the partition: same key, same partition,
 * in order; no key (NULL, 0): round-robin). Copies key and payload. Returns
 * CATENA_OK, CATENA_ERR_BACKPRESSURE (poll, then retry), CATENA_ERR_TOO_LARGE,
 * CATENA_ERR_UNAVAILABLE... cb may be NULL. */
catena_err catena_publish(catena_publisher* pub, const void* key, size_t key_len, const void* payload,
                          size_t payload_len, catena_publish_cb cb, void* opaque) CATENA_NOEXCEPT;
/* A record's header: a name (1..256 bytes) and a value (up to 8192 bytes),
 * byte strings. */
typedef struct catena_header {
  const void* name;
  size_t name_len;
  const void* value;
  size_t value_len;
} catena_header;
/* Queues one record that carries its key and headers to subscribers
 * (catena_message.key, .headers); the key places it as in catena_publish.
 * Up to 64 headers, a key of up to 4096 bytes: beyond, or a header without
 * a name, CATENA_ERR_INVALID_ARGUMENT. Copies everything. */
catena_err catena_publish_record(catena_publisher* pub, const void* key, size_t key_len,
                                 const catena_header* headers, size_t header_count, const void* payload,
                                 size_t payload_len, catena_publish_cb cb, void* opaque) CATENA_NOEXCEPT;
/* Queues one record to this partition (publish_to): its key and headers, if
 * any, are stored with it as catena_publish_record stores them (they do not
 * pick the partition). Errors as catena_publish_record, and
 * CATENA_ERR_INVALID_ARGUMENT for a partition the channel does not have. */
catena_err catena_publish_to(catena_publisher* pub, uint32_t partition, const void* key, size_t key_len,
                             const catena_header* headers, size_t header_count, const void* payload,
                             size_t payload_len, catena_publish_cb cb, void* opaque) CATENA_NOEXCEPT;
/* Zero-copy publish: a frame claimed in a partition's staging ring, filled
 * in place, then committed (a record exactly as catena_publish would make
 * it) or aborted (no record, no gap). One claim per partition at a time:
 * while it is open, another claim or a publish to that partition answers
 * CATENA_ERR_INVALID_ARGUMENT. A claim belongs to its publisher's thread;
 * catena_publisher_destroy aborts the open ones. */
typedef struct catena_claim {
  void* buffer; /* the record's payload: fill all `length` bytes */
  size_t length;
  uint32_t partition;
  uint32_t reserved;
  uint64_t id; /* which claim (internal) */
} catena_claim;
/* CATENA_OK (*out filled), CATENA_ERR_BACKPRESSURE (poll, then retry),
 * CATENA_ERR_TOO_LARGE, CATENA_ERR_INVALID_ARGUMENT, CATENA_ERR_UNAVAILABLE. */
catena_err catena_try_claim(catena_publisher* pub, uint32_t partition, size_t length,
                            catena_claim* out) CATENA_NOEXCEPT;
/* Commits the filled claim (cb as in catena_publish, may be NULL): CATENA_OK,
 * CATENA_ERR_UNAVAILABLE, or CATENA_ERR_INVALID_ARGUMENT (not open). The
 * claim is closed either way. */
catena_err catena_commit(catena_publisher* pub, catena_claim* claim, catena_publish_cb cb,
                         void* opaque) CATENA_NOEXCEPT;
/* Closes the claim without a record; a closed one is left as it is. */
void catena_abort(catena_publisher* pub, catena_claim* claim) CATENA_NOEXCEPT;
/* Sends, takes acknowledgements (running callbacks); never waits. Returns
 * the number of acknowledgements handled, or -1 (catena_last_error()). */
int catena_publisher_poll(catena_publisher* pub) CATENA_NOEXCEPT;
/* Polls until every queued record is acknowledged or failed: CATENA_OK, or
 * CATENA_ERR_TIMEOUT after timeout_ms. */
catena_err catena_publisher_flush(catena_publisher* pub, int64_t timeout_ms) CATENA_NOEXCEPT;
/* Records not yet acknowledged. */
uint64_t catena_publisher_in_flight(const catena_publisher* pub) CATENA_NOEXCEPT;
/* Bytes of the partitions' staging rings now (each grows from 64 KiB up to
 * ring_bytes when records find it full, within ring_budget_bytes, and
 * shrinks back after ring_shrink_after_ms of light use); each head
 * registers as much for the partitions it leads. */
uint64_t catena_publisher_ring_bytes(const catena_publisher* pub) CATENA_NOEXCEPT;
void catena_publisher_destroy(catena_publisher* pub) CATENA_NOEXCEPT;

/* ---- Subscriber ---- */

typedef enum catena_start {
  CATENA_START_EARLIEST = 0,
  CATENA_START_LATEST = 1,
  CATENA_START_OFFSET = 2,    /* catena_subscriber_options.start_offset in every partition it reads */
  CATENA_START_COMMITTED = 3, /* where catena_subscriber_options.group last committed (a partition it
                                 never committed: from its earliest record) */
  /* Not a value: makes every int one the library may check (and refuse). */
  CATENA_START_MAX_ENUM_ = 0x7fffffff
} catena_start;

/* Which replica of a partition's chain a subscriber reads from. */
typedef enum catena_read_from {
  CATENA_READ_TAIL = 0,                   /* committed records only, as they commit (the default) */
  CATENA_READ_HEAD = 1,                   /* still only committed records, from the head */
  CATENA_READ_SPREAD = 2,                 /* the subscriber's partitions spread over every replica */
  CATENA_READ_FROM_MAX_ENUM_ = 0x7fffffff /* not a value (as CATENA_START_MAX_ENUM_) */
} catena_read_from;

/* Something a subscriber must know that is not a record (catena::Notice):
 * status CATENA_ERR_POSITION_EXPIRED (records before next_offset passed
 * their ttl before they were read), CATENA_ERR_DATA_LOST (every replica of
 * the partition failed at once: records [lost_from, next_offset) are gone
 * for good) or CATENA_ERR_CORRUPT (the record at lost_from could not be
 * decoded and was skipped). Delivery goes on at next_offset. */
typedef struct catena_notice {
  uint32_t partition;
  catena_err status;
  uint64_t next_offset;
  uint64_t lost_from;
} catena_notice;
/* Called from catena_subscriber_poll on the caller's thread. */
typedef void (*catena_notice_cb)(void* opaque, const catena_notice* notice);

typedef struct catena_message {
  uint32_t partition;
  uint64_t offset;
  uint64_t timestamp_ns; /* the publisher's wall clock */
  const void* payload;   /* valid during the callback only */
  size_t payload_len;
  /* Published with catena_publish_record: its key and headers (else NULL/0).
   * Valid during the callback only. */
  const void* key;
  size_t key_len;
  const catena_header* headers;
  size_t header_count;
  /* 1 for a channel alter's marker (catena_subscriber_options.control_records
   * only): no payload, key or headers; marker_generation is the channel
   * generation it brings in (the partition count changes from here on). */
  int marker;
  uint64_t marker_generation;
} catena_message;

typedef void (*catena_message_cb)(void* opaque, const catena_message* message);

/* Every partition of the channel, from its earliest or latest record. */
catena_err catena_subscriber_create(catena_routes* routes, const char* channel, catena_start start,
                                    catena_subscriber** out) CATENA_NOEXCEPT;
/* What catena_subscriber_create_with takes; as catena_publisher_options. */
typedef struct catena_subscriber_options {
  size_t size;                /* sizeof(catena_subscriber_options), set by _init */
  const char* provider;       /* NULL: "soft" */
  catena_start start;         /* EARLIEST (the default), LATEST or OFFSET */
  uint64_t start_offset;      /* with CATENA_START_OFFSET */
  const uint32_t* partitions; /* the partitions to read (copied); NULL: all */
  size_t partition_count;
  uint32_t ring_bytes; /* per partition (0: 8 MiB; at least twice the channel's segment) */
  /* Added later: a program built against the header before them passes its
   * smaller size and gets their defaults. */
  catena_event_cb on_event; /* NULL: none */
  void* event_opaque;       /* passed to on_event */
  /* Added later still (0: the default; negative: CATENA_ERR_INVALID_ARGUMENT). */
  catena_read_from read_from;
  int64_t connect_timeout_ms; /* a dial to a replica that does not answer is given up (0: 3000) */
  int64_t stall_check_ms;     /* nothing delivered for this long: re-read the route (0: 1000) */
  int64_t delivery_stall_ms;  /* a replica that said records are committed and delivered none of them
                                 for this long is left for another (0: 3000) */
  const char* group;          /* for CATENA_START_COMMITTED and catena_subscriber_commit (copied) */
  catena_notice_cb on_notice; /* NULL: none (notices are then only seen in catena_subscriber_position) */
  void* notice_opaque;        /* passed to on_notice */
  /* Added in 0.1 after the rest (0: off). */
  int control_records; /* deliver channel alters' markers too (catena_message.marker); else skipped */
  /* Each partition stops at every alter marker of a generation newer than
   * catena_subscriber_release_markers named for it (for a caller that
   * coordinates readers itself, as a group's members do); else the
   * subscriber decides from the partitions it reads. */
  int markers_released_by_caller;
} catena_subscriber_options;
void catena_subscriber_options_init(catena_subscriber_options* options) CATENA_NOEXCEPT;
/* catena_subscriber_create with options (NULL: the defaults).
 * CATENA_ERR_INVALID_ARGUMENT for a size this library does not know, an
 * unknown provider spec, a start it does not know, partitions with a count
 * of 0 or a partition the channel does not have. */
catena_err catena_subscriber_create_with(catena_routes* routes, const char* channel,
                                         const catena_subscriber_options* options,
                                         catena_subscriber** out) CATENA_NOEXCEPT;
/* Delivers up to max records to cb; never waits. Returns how many, or -1
 * (catena_last_error()). */
int catena_subscriber_poll(catena_subscriber* sub, catena_message_cb cb, void* opaque,
                           int max) CATENA_NOEXCEPT;
/* As catena_subscriber_poll, and if nothing is ready waits up to timeout_ms
 * for the first record (spinning a few microseconds, then yielding, then
 * parking in steps that grow to 1 ms: a record that comes during a long
 * wait may be handed over up to 1 ms late). Returns how many (0 at the
 * timeout), or -1. */
int catena_subscriber_poll_wait(catena_subscriber* sub, catena_message_cb cb, void* opaque, int max,
                                int64_t timeout_ms) CATENA_NOEXCEPT;
/* The next offset to be delivered in a partition. */
uint64_t catena_subscriber_position(const catena_subscriber* sub, uint32_t partition) CATENA_NOEXCEPT;
/* Delivers a partition from this offset on (it reconnects there; an offset
 * that expired is told by a POSITION_EXPIRED notice). CATENA_ERR_INVALID_ARGUMENT
 * for a partition the subscriber does not read. */
catena_err catena_subscriber_seek(catena_subscriber* sub, uint32_t partition,
                                  uint64_t offset) CATENA_NOEXCEPT;
/* The generation of the last alter marker a partition delivered since it
 * started or was sought (0: none, or a partition the subscriber does not
 * read), and whether it is held there (1) or not (0). A partition held at a
 * marker stands at the marker's offset in catena_subscriber_position. */
uint64_t catena_subscriber_marker_reached(const catena_subscriber* sub, uint32_t partition) CATENA_NOEXCEPT;
int catena_subscriber_held_at_marker(const catena_subscriber* sub, uint32_t partition) CATENA_NOEXCEPT;
/* With options.markers_released_by_caller: the partition may pass markers
 * up to this generation (it never goes back down). CATENA_ERR_INVALID_ARGUMENT
 * for a partition the subscriber does not read, or a subscriber created
 * without markers_released_by_caller. */
catena_err catena_subscriber_release_markers(catena_subscriber* sub, uint32_t partition,
                                             uint64_t generation) CATENA_NOEXCEPT;
/* Stores the position of every partition it reads as the group's
 * (options.group; without one, CATENA_ERR_INVALID_ARGUMENT). Waits for the
 * controller: CATENA_ERR_CONTROLLER_UNAVAILABLE, ... */
catena_err catena_subscriber_commit(catena_subscriber* sub) CATENA_NOEXCEPT;
void catena_subscriber_destroy(catena_subscriber* sub) CATENA_NOEXCEPT;

/* ---- Subscriber group member (catena::GroupSubscriber) ----
 *
 * The controller assigns the group's partitions to its members; a member
 * reads the ones it is given and commits its positions (every
 * commit_interval_ms, at a revoke and when destroyed) so that the next
 * owner of a partition starts where it stopped. A partition moved between
 * live members is delivered once; a member that dies hands over at its last
 * commit (records after it are delivered again, never skipped). A commit
 * that a poll decides on (the interval, an alter's marker) is taken at the
 * start of the next catena_group_poll: it covers only records that earlier
 * polls handed out. */
typedef struct catena_group catena_group;
typedef struct catena_group_options {
  size_t size;                /* sizeof(catena_group_options), set by _init */
  const char* member_name;    /* for people (catena group describe); NULL: "member" */
  catena_start start;         /* where a partition the group never committed begins: EARLIEST or LATEST */
  catena_read_from read_from; /* as catena_subscriber_options */
  const char* provider;       /* NULL: "soft" */
  uint32_t ring_bytes;        /* per partition (0: 8 MiB) */
  int64_t commit_interval_ms; /* 0: 1000; -1: only catena_group_commit (and revokes, and destroy) */
  int64_t join_timeout_ms;    /* catena_group_create keeps trying the first join this long (0: 30000) */
  /* Called on the polling thread just before the member takes its positions
   * to commit: a consumer that buffers what it was handed writes it out here. */
  void (*before_commit)(void* opaque);
  void* before_commit_opaque;
  catena_event_cb on_event; /* NULL: none */
  void* event_opaque;
} catena_group_options;
void catena_group_options_init(catena_group_options* options) CATENA_NOEXCEPT;
/* Joins `group` on `channel` and waits for the first assignment (up to
 * join_timeout_ms). options may be NULL (the defaults). */
catena_err catena_group_create(catena_routes* routes, const char* channel, const char* group,
                               const catena_group_options* options, catena_group** out) CATENA_NOEXCEPT;
/* Delivers up to max records of the partitions this member has now; never
 * waits. Returns how many, or -1 (catena_last_error()). */
int catena_group_poll(catena_group* g, catena_message_cb cb, void* opaque, int max) CATENA_NOEXCEPT;
/* As catena_group_poll, waiting up to timeout_ms (as catena_subscriber_poll_wait). */
int catena_group_poll_wait(catena_group* g, catena_message_cb cb, void* opaque, int max,
                           int64_t timeout_ms) CATENA_NOEXCEPT;
/* Hands every partition's position to the member's worker to commit; returns at once. */
catena_err catena_group_commit(catena_group* g) CATENA_NOEXCEPT;
/* The partitions this member reads now: writes up to `capacity` of them to
 * out (ascending) and returns how many there are (may exceed capacity). */
size_t catena_group_partitions(const catena_group* g, uint32_t* out, size_t capacity) CATENA_NOEXCEPT;
/* What the member did since it was created; any thread. */
typedef struct catena_group_stats {
  size_t size;              /* sizeof(catena_group_stats), set by _init */
  uint64_t joins;           /* joins of the group (the first, and each after a lost membership) */
  uint64_t commits;         /* commit batches the controller accepted */
  uint64_t commit_refusals; /* batches it refused: the partition had moved to another member */
  uint64_t revoked;         /* partitions given back (each after a commit) */
} catena_group_stats;
void catena_group_stats_init(catena_group_stats* stats) CATENA_NOEXCEPT;
catena_err catena_group_get_stats(const catena_group* g, catena_group_stats* out) CATENA_NOEXCEPT;
/* Commits what was delivered and leaves the group (waits for the controller). */
void catena_group_destroy(catena_group* g) CATENA_NOEXCEPT;

/* ---- Channel administration ----
 * What `catena channel create/list/describe/alter/delete` does, through the
 * controllers catena_connect was given (with its token: a tenant's own
 * channels). Each call is one request that waits for the controller's
 * answer and is never retried behind the caller's back:
 * CATENA_ERR_CONTROLLER_UNAVAILABLE means it may or may not have been
 * carried out. A name already taken is CATENA_ERR_INVALID_ARGUMENT
 * ("channel exists: ..."); one not there, CATENA_ERR_UNKNOWN_CHANNEL. */
typedef struct catena_channel_settings {
  size_t size;           /* sizeof(catena_channel_settings), set by _init */
  const char* name;      /* [A-Za-z0-9._-]{1,128} */
  int32_t partitions;    /* 1..1024 (0: 1) */
  int32_t replication;   /* 1..7, the chain's length (0: 3) */
  int64_t segment_bytes; /* 4 KiB..512 MiB, a multiple of 4096 (0: 64 MiB) */
  int64_t ttl_ms;        /* retention, 1000..10^12 (0: one hour) */
} catena_channel_settings;
void catena_channel_settings_init(catena_channel_settings* settings) CATENA_NOEXCEPT;

/* A channel as the controller has it. */
typedef struct catena_channel_info {
  size_t size;        /* sizeof(catena_channel_info), set by _init */
  char name[129];     /* NUL-terminated */
  int32_t partitions; /* the count keyed records map over */
  int32_t replication;
  int64_t segment_bytes;
  int64_t ttl_ms;
  uint32_t routed_partitions; /* partitions with a route: after a shrink, more than `partitions` */
  int altering;               /* 1: a change of the partition count is under way */
} catena_channel_info;
void catena_channel_info_init(catena_channel_info* info) CATENA_NOEXCEPT;

/* One partition's chain as the controller routes it now. */
#define CATENA_MAX_REPLICATION 7
typedef struct catena_partition_chain {
  size_t size; /* sizeof(catena_partition_chain), set by _init */
  uint32_t partition;
  uint32_t length;                         /* members in nodes[] */
  uint64_t epoch;                          /* the route's epoch: a new chain, a new epoch */
  uint64_t start_offset;                   /* the chain's first offset (records below are in sealed ranges) */
  char nodes[CATENA_MAX_REPLICATION][129]; /* node ids, head first, tail last; NUL-terminated */
} catena_partition_chain;
void catena_partition_chain_init(catena_partition_chain* chain) CATENA_NOEXCEPT;

/* `out` may be NULL in create and the alters (else filled, its size set by _init). */
catena_err catena_channel_create(catena_routes* routes, const catena_channel_settings* settings,
                                 catena_channel_info* out) CATENA_NOEXCEPT;
catena_err catena_channel_describe(catena_routes* routes, const char* name,
                                   catena_channel_info* out) CATENA_NOEXCEPT;
/* Writes up to `capacity` channels to out (each initialised by _init), by
 * name, and sets *count to how many there are (may exceed capacity). */
catena_err catena_channel_list(catena_routes* routes, catena_channel_info* out, size_t capacity,
                               size_t* count) CATENA_NOEXCEPT;
/* Writes up to `capacity` of the channel's partition chains to out (each
 * initialised by _init), by partition: every partition with a route, after
 * a shrink also those past the channel's count that subscribers may still
 * read; sets *count to how many there are (may exceed capacity). */
catena_err catena_channel_chains(catena_routes* routes, const char* name, catena_partition_chain* out,
                                 size_t capacity, size_t* count) CATENA_NOEXCEPT;
/* Changes the partition count under traffic; waits until every marker is
 * committed (up to 30 s). */
catena_err catena_channel_alter_partitions(catena_routes* routes, const char* name, int32_t partitions,
                                           catena_channel_info* out) CATENA_NOEXCEPT;
catena_err catena_channel_alter_retention(catena_routes* routes, const char* name, int64_t ttl_ms,
                                          catena_channel_info* out) CATENA_NOEXCEPT;
/* The channel and every record in it, on every node. */
catena_err catena_channel_delete(catena_routes* routes, const char* name) CATENA_NOEXCEPT;

/* ---- Tenant administration (README "Tenants") ----
 * What `catena tenant create/list/alter/rotate-token/delete` does: the
 * cluster admin's calls, through the controllers catena_connect was given
 * with the admin token (a closed cluster) or none (an open one); with a
 * tenant's token they fail CATENA_ERR_UNAUTHENTICATED. Each waits for the
 * controller's answer and is never retried behind the caller's back
 * (CATENA_ERR_CONTROLLER_UNAVAILABLE: it may or may not have been carried
 * out). A tenant's token is returned by create and rotate_token only (the
 * controller keeps a hash of it): the caller must keep it. */

/* A token's 64 characters and the NUL: the least a token buffer holds. */
#define CATENA_TOKEN_SIZE 65
/* The longest zones list a tenant has: 64 zones of 64 characters, commas, NUL. */
#define CATENA_TENANT_ZONES_SIZE 4160

typedef struct catena_tenant_quotas {
  size_t size;                         /* sizeof(catena_tenant_quotas), set by _init */
  int64_t max_channels;                /* -1 (what _init sets): no limit */
  int64_t max_partitions;              /* the sum of its channels' partition counts */
  int64_t max_groups;                  /* groups with members or committed offsets */
  int64_t max_segment_bytes;           /* sum over its partitions of replication x segment_bytes */
  int64_t max_publisher_ring_bytes;    /* per node: staging rings its publishers may pin there */
  int64_t max_publish_bytes_per_sec;   /* per node: bytes per second its publishers may append there */
  int64_t max_sessions;                /* per node: client sessions it may hold there */
  int64_t max_producer_ids_per_minute; /* cluster-wide: new producer ids (or epochs) per minute */
  /* Zones its replicas may be placed in, comma-separated (at most 64, each
   * 1..64 characters); NULL or "": anywhere. */
  const char* zones;
} catena_tenant_quotas;
void catena_tenant_quotas_init(catena_tenant_quotas* quotas) CATENA_NOEXCEPT;

/* A tenant as the controller has it: its quotas (-1: no limit) and use. */
typedef struct catena_tenant_info {
  size_t size;   /* sizeof(catena_tenant_info), set by _init */
  char name[65]; /* NUL-terminated */
  int64_t max_channels;
  int64_t max_partitions;
  int64_t max_groups;
  int64_t max_segment_bytes;
  int64_t max_publisher_ring_bytes;
  int64_t max_publish_bytes_per_sec;
  int64_t max_sessions;
  int64_t max_producer_ids_per_minute;
  char zones[CATENA_TENANT_ZONES_SIZE]; /* comma-separated, NUL-terminated; "": anywhere */
  int64_t channels;                     /* current use */
  int64_t partitions;
  int64_t groups;
  int64_t segment_bytes;
  int64_t created_at_ms; /* Unix time */
} catena_tenant_info;
void catena_tenant_info_init(catena_tenant_info* info) CATENA_NOEXCEPT;

/* Creates tenant `name` ([A-Za-z0-9_-]{1,64}; its channels are named
 * "name.*") with `quotas` (NULL: no limits) and writes its token to `token`,
 * which holds at least CATENA_TOKEN_SIZE bytes (`token_size`; checked before
 * anything is asked of the controller). */
catena_err catena_tenant_create(catena_routes* routes, const char* name, const catena_tenant_quotas* quotas,
                                char* token, size_t token_size) CATENA_NOEXCEPT;
/* Writes up to `capacity` tenants to out (each initialised by _init), by
 * name, and sets *count to how many there are (may exceed capacity). */
catena_err catena_tenant_list(catena_routes* routes, catena_tenant_info* out, size_t capacity,
                              size_t* count) CATENA_NOEXCEPT;
/* Replaces every quota (NULL: no limits; read them with catena_tenant_list
 * to change one). */
catena_err catena_tenant_alter(catena_routes* routes, const char* name,
                               const catena_tenant_quotas* quotas) CATENA_NOEXCEPT;
/* A new token, written as by catena_tenant_create; the old one stops
 * working, also on connections that used it. */
catena_err catena_tenant_rotate_token(catena_routes* routes, const char* name, char* token,
                                      size_t token_size) CATENA_NOEXCEPT;
/* Refused (CATENA_ERR_INVALID_ARGUMENT) while the tenant owns channels. */
catena_err catena_tenant_delete(catena_routes* routes, const char* name) CATENA_NOEXCEPT;

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* CATENA_CATENA_H */
