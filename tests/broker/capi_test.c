/* The C API against a live cluster: capi_test CONTROLLER CHANNEL (run by
 * capi_cluster.sh). Publishes N records with callbacks, flushes, subscribes
 * from the earliest record and checks that every record arrived once, with
 * its payload at the partition and offset its acknowledgement named; and
 * the error paths (unknown channel, NULL arguments, strerror); options,
 * publish_to, a full log's event; notices, seek, commit and a group member. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <catena/catena.h>

enum { N = 300 };

static int failures = 0;
#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

struct acked {
  int done;
  catena_err status;
  uint32_t partition;
  uint64_t offset;
};
static struct acked acks[N];
static int seen[N];

static void on_ack(void* opaque, const catena_publish_result* r) {
  struct acked* a = opaque;
  a->done++;
  a->status = r->status;
  a->partition = r->partition;
  a->offset = r->offset;
}

static void on_message(void* opaque, const catena_message* m) {
  int* received = opaque;
  char buf[64];
  int i = -1;
  ++*received;
  if (m->payload_len >= sizeof buf) {
    fprintf(stderr, "a payload of %zu bytes\n", m->payload_len);
    ++failures;
    return;
  }
  memcpy(buf, m->payload, m->payload_len);
  buf[m->payload_len] = '\0';
  if (sscanf(buf, "record-%d", &i) != 1 || i < 0 || i >= N) {
    fprintf(stderr, "unexpected payload '%s'\n", buf);
    ++failures;
    return;
  }
  seen[i]++;
  /* Odd records were published with catena_publish_record: key and one header. */
  if (i % 2 == 1) {
    char want_key[32], want_value[32];
    snprintf(want_key, sizeof want_key, "key-%d", i % 8);
    const int vlen = snprintf(want_value, sizeof want_value, "%d", i);
    CHECK(m->key_len == strlen(want_key) && memcmp(m->key, want_key, m->key_len) == 0, "record %d: key", i);
    CHECK(m->header_count == 1 && m->headers[0].name_len == 1 && memcmp(m->headers[0].name, "n", 1) == 0 &&
              m->headers[0].value_len == (size_t)vlen &&
              memcmp(m->headers[0].value, want_value, (size_t)vlen) == 0,
          "record %d: %zu headers, not n=%s", i, m->header_count, want_value);
  } else {
    CHECK(m->key == NULL && m->key_len == 0 && m->headers == NULL && m->header_count == 0,
          "record %d: a key or headers it was not published with", i);
  }
  CHECK(m->partition == acks[i].partition && m->offset == acks[i].offset,
        "record %d delivered at %u:%llu, acknowledged at %u:%llu", i, m->partition,
        (unsigned long long)m->offset, acks[i].partition, (unsigned long long)acks[i].offset);
}

/* What a subscriber that starts at an offset of one partition gets. */
struct from_offset {
  int count;
  uint64_t first;
  int other_partition;
};
static uint32_t offset_partition;
static void on_offset(void* opaque, const catena_message* m) {
  struct from_offset* f = opaque;
  if (m->partition != offset_partition) {
    f->other_partition++;
    return;
  }
  if (f->count == 0) f->first = m->offset;
  f->count++;
}

/* Events a publisher told (catena_publisher_options.on_event). */
struct events {
  int log_full;
  int other;
  uint32_t partition;
  char message[512];
};
static void on_event(void* opaque, const catena_event* ev) {
  struct events* e = opaque;
  if (ev->kind != CATENA_EVENT_LOG_FULL) {
    e->other++;
    return;
  }
  e->log_full++;
  e->partition = ev->partition;
  if (strcmp(ev->name, "log_full") != 0) e->other++;
  snprintf(e->message, sizeof e->message, "%s", ev->message);
}

/* Notices a subscriber told (catena_subscriber_options.on_notice). */
struct notices {
  int expired;
  int other;
  uint64_t next_offset;
};
static void on_notice(void* opaque, const catena_notice* n) {
  struct notices* t = opaque;
  if (n->status != CATENA_ERR_POSITION_EXPIRED) {
    t->other++;
    return;
  }
  t->expired++;
  t->next_offset = n->next_offset;
}

/* What a group member was handed: every partition's offsets must follow on
 * from 0 without a gap or a repeat. */
struct group_seen {
  int count;
  int out_of_order;
  uint64_t next[4];
  int before_commit;
};
static void on_group_message(void* opaque, const catena_message* m) {
  struct group_seen* g = opaque;
  g->count++;
  if (m->partition >= 4 || m->offset != g->next[m->partition]) {
    g->out_of_order++;
    return;
  }
  g->next[m->partition]++;
}
static void on_before_commit(void* opaque) {
  ((struct group_seen*)opaque)->before_commit++;
}
static int on_nothing_count;
static void on_nothing(void* opaque, const catena_message* m) {
  (void)opaque;
  (void)m;
  on_nothing_count++;
}

static void pause_200us(void) {
  struct timespec pause = {0, 200000};
  nanosleep(&pause, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* What a subscriber of capi-admin (altered from 3 to 4 partitions, one
 * record "p3" at partition 3 offset 1) was handed. */
struct seen_markers {
  int markers;
  int records;
  int bad; /* a marker or record not where it should be */
  uint64_t generation;
};

static void on_marker_or_record(void* opaque, const catena_message* m) {
  struct seen_markers* s = opaque;
  if (m->marker) {
    ++s->markers;
    if (m->offset != 0 || m->payload_len != 0 || m->marker_generation == 0 ||
        (s->generation != 0 && s->generation != m->marker_generation))
      ++s->bad;
    s->generation = m->marker_generation;
    return;
  }
  ++s->records;
  if (m->partition != 3 || m->offset != 1 || m->payload_len != 2 || memcmp(m->payload, "p3", 2) != 0)
    ++s->bad;
}

/* A channel of one partition for the ring checks: a burst of 16 KiB
 * records grows the partition's ring from 64 KiB; light traffic after it
 * (a 500-byte record every 5 ms) shrinks it back within
 * ring_shrink_after_ms; the options' bad values are refused. */
static void check_ring_size(catena_routes* routes, const char* topic) {
  catena_channel_settings cs;
  catena_channel_settings_init(&cs);
  cs.name = topic;
  cs.partitions = 1;
  cs.replication = 2;
  catena_err e = catena_channel_create(routes, &cs, NULL);
  CHECK(e == CATENA_OK, "channel create %s: %s", topic, catena_last_error());
  if (e != CATENA_OK) return;
  catena_publisher* pub = NULL;
  catena_publisher_options po;
  catena_publisher_options_init(&po);
  po.ring_shrink_after_ms = -2;
  CHECK(catena_publisher_create_with(routes, topic, &po, &pub) == CATENA_ERR_INVALID_ARGUMENT &&
            strstr(catena_last_error(), "ring_shrink_after_ms is negative") != NULL,
        "ring_shrink_after_ms -2: %s", catena_last_error());
  catena_publisher_options_init(&po);
  po.ring_budget_bytes = 1000;
  CHECK(catena_publisher_create_with(routes, topic, &po, &pub) == CATENA_ERR_INVALID_ARGUMENT &&
            strstr(catena_last_error(), "ring_budget_bytes") != NULL,
        "ring_budget_bytes 1000: %s", catena_last_error());
  catena_publisher_options_init(&po);
  po.size = 88; /* through stall_check_ms */
  po.ring_shrink_after_ms = -2;
  e = catena_publisher_create_with(routes, topic, &po, &pub);
  CHECK(e == CATENA_OK, "publisher options of the third size: %s", catena_last_error());
  if (e == CATENA_OK) catena_publisher_destroy(pub);

  catena_publisher_options_init(&po);
  po.ring_bytes = 1u << 20;
  po.ring_shrink_after_ms = 150;
  e = catena_publisher_create_with(routes, topic, &po, &pub);
  CHECK(e == CATENA_OK, "publisher on %s: %s", topic, catena_last_error());
  if (e != CATENA_OK) return;
  CHECK(catena_publisher_ring_bytes(pub) == 0, "a ring before the first record: %llu",
        (unsigned long long)catena_publisher_ring_bytes(pub));
  static char big[16 << 10];
  memset(big, 'r', sizeof big);
  for (int i = 0; i < 40; ++i) {
    while ((e = catena_publish_to(pub, 0, NULL, 0, NULL, 0, big, sizeof big, NULL, NULL)) ==
           CATENA_ERR_BACKPRESSURE) {
      if (catena_publisher_poll(pub) == 0) pause_200us();
    }
    CHECK(e == CATENA_OK, "burst record %d: %s", i, catena_last_error());
  }
  CHECK(catena_publisher_flush(pub, 30000) == CATENA_OK, "burst flush: %s", catena_last_error());
  const uint64_t grown = catena_publisher_ring_bytes(pub);
  CHECK(grown >= 256u << 10, "the burst grew the ring to %llu bytes only", (unsigned long long)grown);
  uint64_t smallest = grown;
  const double until = now_s() + 10;
  while (now_s() < until && smallest > 64u << 10) {
    e = catena_publish_to(pub, 0, NULL, 0, NULL, 0, big, 500, NULL, NULL);
    CHECK(e == CATENA_OK || e == CATENA_ERR_BACKPRESSURE, "light record: %s", catena_last_error());
    const double next = now_s() + 0.005;
    while (now_s() < next) {
      if (catena_publisher_poll(pub) == 0) pause_200us();
    }
    const uint64_t now_bytes = catena_publisher_ring_bytes(pub);
    if (now_bytes < smallest) smallest = now_bytes;
  }
  CHECK(catena_publisher_flush(pub, 30000) == CATENA_OK, "light flush: %s", catena_last_error());
  CHECK(catena_publisher_ring_bytes(pub) == 64u << 10, "ring %llu bytes after light traffic (grown to %llu)",
        (unsigned long long)catena_publisher_ring_bytes(pub), (unsigned long long)grown);
  fprintf(stderr, "capi_test: ring grown to %llu bytes by a burst, back to %llu\n", (unsigned long long)grown,
          (unsigned long long)catena_publisher_ring_bytes(pub));
  catena_publisher_destroy(pub);
  CHECK(catena_channel_delete(routes, topic) == CATENA_OK, "delete %s: %s", topic, catena_last_error());
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CONTROLLER CHANNEL\n", argv[0]);
    return 2;
  }
  CHECK(strlen(catena_version()) > 0, "empty version");
  CHECK(strcmp(catena_strerror(CATENA_ERR_UNKNOWN_CHANNEL), "unknown_channel") == 0, "%s",
        catena_strerror(CATENA_ERR_UNKNOWN_CHANNEL));
  CHECK(strcmp(catena_strerror((catena_err)200), "unknown") == 0, "%s", catena_strerror((catena_err)200));
  CHECK(catena_err_retriable(CATENA_ERR_BACKPRESSURE) == 1, "backpressure not retriable");
  CHECK(catena_err_retriable(CATENA_ERR_INVALID_ARGUMENT) == 0, "invalid_argument retriable");

  catena_routes* routes = NULL;
  CHECK(catena_connect(NULL, NULL, &routes) == CATENA_ERR_INVALID_ARGUMENT, "connect(NULL)");
  CHECK(strlen(catena_last_error()) > 0, "no message for connect(NULL)");
  catena_err e = catena_connect(argv[1], NULL, &routes);
  CHECK(e == CATENA_OK && routes != NULL, "connect: %s", catena_last_error());
  if (e != CATENA_OK) return 1;

  catena_publisher* bad = NULL;
  e = catena_publisher_create(routes, "no-such-channel", &bad);
  CHECK(e == CATENA_ERR_UNKNOWN_CHANNEL && bad == NULL, "create on a missing channel: %s (%s)",
        catena_strerror(e), catena_last_error());

  catena_publisher* pub = NULL;
  e = catena_publisher_create(routes, argv[2], &pub);
  CHECK(e == CATENA_OK, "publisher: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  /* The publisher keeps the routes alive: destroy them early. */
  catena_routes* sub_routes = NULL;
  CHECK(catena_connect(argv[1], NULL, &sub_routes) == CATENA_OK, "connect: %s", catena_last_error());

  const catena_header nameless = {"", 0, "v", 1};
  CHECK(catena_publish_record(pub, NULL, 0, &nameless, 1, "x", 1, NULL, NULL) == CATENA_ERR_INVALID_ARGUMENT,
        "a header without a name was taken");
  CHECK(strstr(catena_last_error(), "without a name") != NULL, "%s", catena_last_error());

  const double t0 = now_s();
  for (int i = 0; i < N; ++i) {
    char key[32], payload[32];
    snprintf(key, sizeof key, "key-%d", i % 8);
    const int len = snprintf(payload, sizeof payload, "record-%d", i);
    char value[16];
    const int vlen = snprintf(value, sizeof value, "%d", i);
    const catena_header header = {"n", 1, value, (size_t)vlen};
    if (i % 4 == 2) {
      /* Zero-copy: claimed on partition 0, filled in place, committed; an
       * aborted claim before it leaves nothing (its "record-999" would be an
       * unexpected payload). */
      catena_claim c;
      do {
        e = catena_try_claim(pub, 0, (size_t)len, &c);
        if (e == CATENA_ERR_BACKPRESSURE) catena_publisher_poll(pub);
      } while (e == CATENA_ERR_BACKPRESSURE);
      CHECK(e == CATENA_OK && c.length == (size_t)len && c.partition == 0, "claim %d: %s (%s)", i,
            catena_strerror(e), catena_last_error());
      if (e != CATENA_OK) continue;
      catena_claim second;
      CHECK(catena_try_claim(pub, 0, 8, &second) == CATENA_ERR_INVALID_ARGUMENT,
            "a second claim on partition 0");
      memcpy(c.buffer, "record-999", (size_t)len < 10 ? (size_t)len : 10);
      catena_abort(pub, &c);
      CHECK(catena_commit(pub, &c, on_ack, &acks[i]) == CATENA_ERR_INVALID_ARGUMENT,
            "commit of an aborted claim");
      do {
        e = catena_try_claim(pub, 0, (size_t)len, &c);
        if (e == CATENA_ERR_BACKPRESSURE) catena_publisher_poll(pub);
      } while (e == CATENA_ERR_BACKPRESSURE);
      CHECK(e == CATENA_OK, "claim %d: %s (%s)", i, catena_strerror(e), catena_last_error());
      if (e != CATENA_OK) continue;
      memcpy(c.buffer, payload, (size_t)len);
      e = catena_commit(pub, &c, on_ack, &acks[i]);
      CHECK(e == CATENA_OK, "commit %d: %s (%s)", i, catena_strerror(e), catena_last_error());
      catena_publisher_poll(pub);
      continue;
    }
    for (;;) {
      e = i % 2 == 1 ? catena_publish_record(pub, key, strlen(key), &header, 1, payload, (size_t)len, on_ack,
                                             &acks[i])
                     : catena_publish(pub, key, strlen(key), payload, (size_t)len, on_ack, &acks[i]);
      if (e != CATENA_ERR_BACKPRESSURE) break;
      CHECK(catena_publisher_poll(pub) >= 0, "poll: %s", catena_last_error());
    }
    CHECK(e == CATENA_OK, "publish %d: %s (%s)", i, catena_strerror(e), catena_last_error());
    catena_publisher_poll(pub);
  }
  catena_routes_destroy(routes);
  e = catena_publisher_flush(pub, 15000);
  CHECK(e == CATENA_OK, "flush: %s", catena_last_error());
  CHECK(catena_publisher_in_flight(pub) == 0, "%llu in flight after flush",
        (unsigned long long)catena_publisher_in_flight(pub));
  int acked_ok = 0;
  for (int i = 0; i < N; ++i) {
    CHECK(acks[i].done == 1, "record %d acknowledged %d times", i, acks[i].done);
    if (acks[i].done == 1 && acks[i].status == CATENA_OK) ++acked_ok;
    for (int j = 0; j < i; ++j)
      CHECK(!(acks[j].partition == acks[i].partition && acks[j].offset == acks[i].offset),
            "records %d and %d both at %u:%llu", j, i, acks[i].partition, (unsigned long long)acks[i].offset);
  }
  CHECK(acked_ok == N, "%d of %d acknowledged ok", acked_ok, N);
  catena_publisher_destroy(pub);
  fprintf(stderr, "capi_test: published and acknowledged %d in %.2f s\n", acked_ok, now_s() - t0);

  catena_subscriber* sub = NULL;
  e = catena_subscriber_create(sub_routes, argv[2], CATENA_START_EARLIEST, &sub);
  CHECK(e == CATENA_OK, "subscriber: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  int received = 0;
  const double deadline = now_s() + 10;
  while (received < N && now_s() < deadline) {
    const int n = catena_subscriber_poll_wait(sub, on_message, &received, 64, 1000);
    CHECK(n >= 0, "subscriber poll: %s", catena_last_error());
  }
  CHECK(received == N, "received %d of %d", received, N);
  for (int i = 0; i < N; ++i) CHECK(seen[i] == 1, "record %d delivered %d times", i, seen[i]);
  /* Nothing more: a wait runs to its timeout and hands over nothing. */
  const double wait_start = now_s();
  const int waited = catena_subscriber_poll_wait(sub, on_message, &received, 64, 200);
  CHECK(waited == 0 && now_s() - wait_start >= 0.2 && received == N,
        "poll_wait on a drained subscriber: %d after %.3f s", waited, now_s() - wait_start);
  CHECK(catena_subscriber_poll_wait(sub, on_message, &received, 64, -1) == -1, "a negative timeout taken");
  catena_subscriber_destroy(sub);

  /* Options: a publisher on another provider with its own producer id and a
   * linger; a subscriber on that provider reading one partition from an
   * offset. */
  catena_publisher_options po;
  catena_publisher_options_init(&po);
  CHECK(po.size == sizeof po && po.provider == NULL && po.producer_id == 0 && po.linger_us == 0,
        "publisher options defaults");
  po.provider = "nope";
  CHECK(catena_publisher_create_with(sub_routes, argv[2], &po, &pub) == CATENA_ERR_INVALID_ARGUMENT &&
            pub == NULL,
        "an unknown provider was taken");
  CHECK(strstr(catena_last_error(), "unknown provider spec 'nope'") != NULL, "%s", catena_last_error());
  po.size = sizeof po - 1;
  CHECK(catena_publisher_create_with(sub_routes, argv[2], &po, &pub) == CATENA_ERR_INVALID_ARGUMENT,
        "options of an unknown size were taken");
  CHECK(strstr(catena_last_error(), "catena_publisher_options_init") != NULL, "%s", catena_last_error());
  catena_publisher_options_init(&po);
  po.provider = "soft:tcp";
  po.producer_id = 4242;
  po.linger_us = 200;
  po.ring_bytes = 1u << 20;
  e = catena_publisher_create_with(sub_routes, argv[2], &po, &pub);
  CHECK(e == CATENA_OK, "publisher with options: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  enum { M = 20 };
  static struct acked more[M];
  for (int i = 0; i < M; ++i) {
    char payload[32];
    const int len = snprintf(payload, sizeof payload, "record-%d", i);
    while ((e = catena_publish(pub, "k", 1, payload, (size_t)len, on_ack, &more[i])) ==
           CATENA_ERR_BACKPRESSURE)
      catena_publisher_poll(pub);
    CHECK(e == CATENA_OK, "publish with options %d: %s", i, catena_last_error());
  }
  CHECK(catena_publisher_flush(pub, 15000) == CATENA_OK, "flush with options: %s", catena_last_error());
  catena_publisher_destroy(pub);
  /* One key: one partition, consecutive offsets. */
  const uint32_t part = more[0].partition;
  for (int i = 0; i < M; ++i) {
    CHECK(more[i].done == 1 && more[i].status == CATENA_OK, "record %d with options not acknowledged", i);
    CHECK(more[i].partition == part && more[i].offset == more[0].offset + (uint64_t)i, "record %d at %u:%llu",
          i, more[i].partition, (unsigned long long)more[i].offset);
  }
  catena_subscriber_options so;
  catena_subscriber_options_init(&so);
  CHECK(so.size == sizeof so && so.start == CATENA_START_EARLIEST && so.partitions == NULL,
        "subscriber defaults");
  const uint32_t missing = 99;
  so.partitions = &missing;
  so.partition_count = 1;
  CHECK(catena_subscriber_create_with(sub_routes, argv[2], &so, &sub) == CATENA_ERR_INVALID_ARGUMENT &&
            sub == NULL,
        "a partition the channel does not have was taken");
  CHECK(strstr(catena_last_error(), "partition 99 does not exist") != NULL, "%s", catena_last_error());
  so.partition_count = 0;
  CHECK(catena_subscriber_create_with(sub_routes, argv[2], &so, &sub) == CATENA_ERR_INVALID_ARGUMENT,
        "partitions without a count were taken");
  so.provider = "soft:tcp";
  so.partitions = &part;
  so.partition_count = 1;
  so.start = CATENA_START_OFFSET;
  so.start_offset = more[M / 2].offset;
  e = catena_subscriber_create_with(sub_routes, argv[2], &so, &sub);
  CHECK(e == CATENA_OK, "subscriber with options: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  struct from_offset got = {0, 0, 0};
  offset_partition = part;
  const double deadline2 = now_s() + 10;
  while (got.count < M / 2 && now_s() < deadline2) {
    if (catena_subscriber_poll(sub, on_offset, &got, 64) <= 0) {
      struct timespec pause = {0, 200000};
      nanosleep(&pause, NULL);
    }
  }
  CHECK(got.count == M / 2, "from offset %llu: %d records, not %d", (unsigned long long)so.start_offset,
        got.count, M / 2);
  CHECK(got.first == more[M / 2].offset && got.other_partition == 0, "first offset %llu, %d elsewhere",
        (unsigned long long)got.first, got.other_partition);
  CHECK(catena_subscriber_position(sub, part) == more[M - 1].offset + 1, "position %llu",
        (unsigned long long)catena_subscriber_position(sub, part));
  catena_subscriber_destroy(sub);

  /* Options a program built against the first header passes (its smaller
   * size): taken, the later fields at their defaults. */
  catena_publisher_options_init(&po);
  po.size = 40; /* through linger_us */
  e = catena_publisher_create_with(sub_routes, argv[2], &po, &pub);
  CHECK(e == CATENA_OK, "publisher options of the first size: %s", catena_last_error());
  if (e == CATENA_OK) catena_publisher_destroy(pub);
  catena_publisher_options_init(&po);
  po.head_acks_only = 2;
  CHECK(catena_publisher_create_with(sub_routes, argv[2], &po, &pub) == CATENA_ERR_INVALID_ARGUMENT,
        "head_acks_only 2 was taken");

  /* publish_to: every record on the partition named (a key is only stored),
   * acks from the heads only, small batches. */
  catena_publisher_options_init(&po);
  po.head_acks_only = 1;
  po.max_batch_bytes = 4096;
  e = catena_publisher_create_with(sub_routes, argv[2], &po, &pub);
  CHECK(e == CATENA_OK, "publisher for publish_to: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  CHECK(catena_publish_to(pub, 99, NULL, 0, NULL, 0, "x", 1, NULL, NULL) == CATENA_ERR_INVALID_ARGUMENT,
        "publish_to a partition the channel does not have");
  static struct acked to[M];
  const catena_header tag = {"t", 1, "v", 1};
  for (int i = 0; i < M; ++i) {
    char payload[32];
    const int len = snprintf(payload, sizeof payload, "to-%d", i);
    const int keyed = i % 2;
    while ((e = catena_publish_to(pub, 3, keyed ? "kk" : NULL, keyed ? 2 : 0, keyed ? &tag : NULL,
                                  keyed ? 1 : 0, payload, (size_t)len, on_ack, &to[i])) ==
           CATENA_ERR_BACKPRESSURE)
      catena_publisher_poll(pub);
    CHECK(e == CATENA_OK, "publish_to %d: %s", i, catena_last_error());
  }
  CHECK(catena_publisher_flush(pub, 15000) == CATENA_OK, "flush publish_to: %s", catena_last_error());
  catena_publisher_destroy(pub);
  for (int i = 0; i < M; ++i) {
    CHECK(to[i].done == 1 && to[i].status == CATENA_OK && to[i].partition == 3 &&
              to[i].offset == to[0].offset + (uint64_t)i,
          "publish_to record %d: done %d at %u:%llu", i, to[i].done, to[i].partition,
          (unsigned long long)to[i].offset);
  }

  /* A log that fills within its ttl (capi_cluster.sh's "<channel>-full":
   * 64 KiB segments kept 500 ms): the head holds records back and the
   * publisher is told why, once per hold; none is lost. */
  char full[128];
  snprintf(full, sizeof full, "%s-full", argv[2]);
  struct events events = {0, 0, 0, ""};
  catena_publisher_options_init(&po);
  po.on_event = on_event;
  po.event_opaque = &events;
  e = catena_publisher_create_with(sub_routes, full, &po, &pub);
  CHECK(e == CATENA_OK, "publisher on %s: %s", full, catena_last_error());
  if (e != CATENA_OK) return 1;
  enum { F = 1200 };
  static struct acked fa[F];
  static char blob[1000];
  memset(blob, 'b', sizeof blob);
  const double full_deadline = now_s() + 30;
  for (int i = 0; i < F && now_s() < full_deadline; ++i) {
    while ((e = catena_publish_to(pub, 0, NULL, 0, NULL, 0, blob, sizeof blob, on_ack, &fa[i])) ==
               CATENA_ERR_BACKPRESSURE &&
           now_s() < full_deadline) {
      if (catena_publisher_poll(pub) == 0) {
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
      }
    }
    CHECK(e == CATENA_OK, "publish to %s %d: %s", full, i, catena_last_error());
  }
  CHECK(catena_publisher_flush(pub, 15000) == CATENA_OK, "flush %s: %s", full, catena_last_error());
  catena_publisher_destroy(pub);
  int full_ok = 0;
  for (int i = 0; i < F; ++i)
    full_ok += fa[i].done == 1 && fa[i].status == CATENA_OK && fa[i].offset == (uint64_t)i;
  CHECK(full_ok == F, "%s: %d of %d acknowledged ok at their offsets", full, full_ok, F);
  CHECK(events.log_full >= 1 && events.partition == 0 && strstr(events.message, "log is full") != NULL &&
            strstr(events.message, "ttl 500 ms") != NULL,
        "%s: %d log_full events (%s)", full, events.log_full, events.message);
  fprintf(stderr, "capi_test: %s: %d log_full event(s), %d other(s): %s\n", full, events.log_full,
          events.other, events.message);

  /* Reading the full log from offset 0, whose first segments were reused
   * long ago: a POSITION_EXPIRED notice names where delivery resumes, and
   * it goes on from there to the end (read from the head this time). */
  struct notices nt = {0, 0, 0};
  catena_subscriber_options_init(&so);
  so.start = CATENA_START_OFFSET;
  so.start_offset = 0;
  so.read_from = CATENA_READ_HEAD;
  so.on_notice = on_notice;
  so.notice_opaque = &nt;
  e = catena_subscriber_create_with(sub_routes, full, &so, &sub);
  CHECK(e == CATENA_OK, "subscriber on %s: %s", full, catena_last_error());
  if (e != CATENA_OK) return 1;
  struct from_offset tail_of_full = {0, 0, 0};
  offset_partition = 0;
  const double expired_deadline = now_s() + 10;
  while (catena_subscriber_position(sub, 0) < F && now_s() < expired_deadline) {
    if (catena_subscriber_poll(sub, on_offset, &tail_of_full, 256) <= 0) pause_200us();
  }
  CHECK(nt.expired >= 1 && nt.other == 0 && nt.next_offset > 0 && nt.next_offset <= F,
        "%s from 0: %d position_expired notices (next offset %llu), %d others", full, nt.expired,
        (unsigned long long)nt.next_offset, nt.other);
  CHECK(tail_of_full.count == 0 || tail_of_full.first == nt.next_offset,
        "%s: delivery resumed at %llu, the notice said %llu", full, (unsigned long long)tail_of_full.first,
        (unsigned long long)nt.next_offset);
  CHECK(catena_subscriber_position(sub, 0) == F && tail_of_full.count == (int)(F - nt.next_offset),
        "%s: position %llu after %d records", full, (unsigned long long)catena_subscriber_position(sub, 0),
        tail_of_full.count);
  catena_subscriber_destroy(sub);
  fprintf(stderr, "capi_test: %s from 0: expired up to %llu, then %d records\n", full,
          (unsigned long long)nt.next_offset, tail_of_full.count);

  /* Options the later header added: bad values refused, the earlier sizes taken. */
  catena_publisher_options_init(&po);
  po.retry_timeout_ms = -5;
  CHECK(catena_publisher_create_with(sub_routes, argv[2], &po, &pub) == CATENA_ERR_INVALID_ARGUMENT &&
            strstr(catena_last_error(), "retry_timeout_ms is negative") != NULL,
        "a negative retry_timeout_ms: %s", catena_last_error());
  catena_publisher_options_init(&po);
  po.size = 64;             /* through event_opaque */
  po.retry_timeout_ms = -5; /* beyond that size: not read */
  e = catena_publisher_create_with(sub_routes, argv[2], &po, &pub);
  CHECK(e == CATENA_OK, "publisher options of the second size: %s", catena_last_error());
  if (e == CATENA_OK) catena_publisher_destroy(pub);
  catena_publisher_options_init(&po);
  po.retry_timeout_ms = 2000;
  po.connect_timeout_ms = 500;
  po.stall_check_ms = 100;
  e = catena_publisher_create_with(sub_routes, argv[2], &po, &pub);
  CHECK(e == CATENA_OK, "publisher with timeouts: %s", catena_last_error());
  if (e == CATENA_OK) catena_publisher_destroy(pub);
  catena_subscriber_options_init(&so);
  so.start = CATENA_START_COMMITTED;
  CHECK(catena_subscriber_create_with(sub_routes, argv[2], &so, &sub) == CATENA_ERR_INVALID_ARGUMENT &&
            strstr(catena_last_error(), "needs a group") != NULL,
        "START_COMMITTED without a group: %s", catena_last_error());
  catena_subscriber_options_init(&so);
  so.read_from = (catena_read_from)9;
  CHECK(catena_subscriber_create_with(sub_routes, argv[2], &so, &sub) == CATENA_ERR_INVALID_ARGUMENT,
        "read_from 9 was taken");
  catena_subscriber_options_init(&so);
  so.delivery_stall_ms = -1;
  CHECK(catena_subscriber_create_with(sub_routes, argv[2], &so, &sub) == CATENA_ERR_INVALID_ARGUMENT,
        "a negative delivery_stall_ms was taken");
  catena_subscriber_options_init(&so);
  so.size = 72; /* through event_opaque */
  so.read_from = (catena_read_from)9;
  e = catena_subscriber_create_with(sub_routes, argv[2], &so, &sub);
  CHECK(e == CATENA_OK, "subscriber options of the second size: %s", catena_last_error());
  if (e == CATENA_OK) catena_subscriber_destroy(sub);

  /* Seek, commit and START_COMMITTED: a subscriber of group "capi-c" reads
   * partition 3 to its end, seeks back to publish_to's 6th record and gets
   * it and what follows again, seeks to the 11th and commits there; a new
   * one starting at the group's position begins with the 11th. */
  const uint32_t three = 3;
  const uint64_t end3 = to[M - 1].offset + 1;
  catena_subscriber_options_init(&so);
  so.partitions = &three;
  so.partition_count = 1;
  so.group = "capi-c";
  so.stall_check_ms = 500;
  so.connect_timeout_ms = 2000;
  e = catena_subscriber_create_with(sub_routes, argv[2], &so, &sub);
  CHECK(e == CATENA_OK, "subscriber of group capi-c: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  const double seek_deadline = now_s() + 10;
  while (catena_subscriber_position(sub, 3) < end3 && now_s() < seek_deadline) {
    if (catena_subscriber_poll(sub, on_nothing, NULL, 256) <= 0) pause_200us();
  }
  CHECK(catena_subscriber_position(sub, 3) == end3, "partition 3 read to %llu, not %llu",
        (unsigned long long)catena_subscriber_position(sub, 3), (unsigned long long)end3);
  CHECK(catena_subscriber_seek(sub, 0, 0) == CATENA_ERR_INVALID_ARGUMENT &&
            strstr(catena_last_error(), "does not read partition 0") != NULL,
        "seek on a partition it does not read: %s", catena_last_error());
  CHECK(catena_subscriber_seek(sub, 3, to[5].offset) == CATENA_OK, "seek: %s", catena_last_error());
  struct from_offset again = {0, 0, 0};
  offset_partition = 3;
  while (again.count < M - 5 && now_s() < seek_deadline + 10) {
    if (catena_subscriber_poll(sub, on_offset, &again, 256) <= 0) pause_200us();
  }
  CHECK(again.count == M - 5 && again.first == to[5].offset && again.other_partition == 0,
        "after the seek: %d records from %llu, not %d from %llu", again.count,
        (unsigned long long)again.first, M - 5, (unsigned long long)to[5].offset);
  CHECK(catena_subscriber_seek(sub, 3, to[10].offset) == CATENA_OK, "seek: %s", catena_last_error());
  CHECK(catena_subscriber_position(sub, 3) == to[10].offset, "position %llu after the seek",
        (unsigned long long)catena_subscriber_position(sub, 3));
  e = catena_subscriber_commit(sub);
  CHECK(e == CATENA_OK, "commit: %s", catena_last_error());
  catena_subscriber_destroy(sub);
  so.start = CATENA_START_COMMITTED;
  e = catena_subscriber_create_with(sub_routes, argv[2], &so, &sub);
  CHECK(e == CATENA_OK, "subscriber from the group's position: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  struct from_offset resumed = {0, 0, 0};
  const double resume_deadline = now_s() + 10;
  while (resumed.count < M - 10 && now_s() < resume_deadline) {
    if (catena_subscriber_poll(sub, on_offset, &resumed, 256) <= 0) pause_200us();
  }
  CHECK(resumed.count == M - 10 && resumed.first == to[10].offset, "from the commit: %d records from %llu",
        resumed.count, (unsigned long long)resumed.first);
  catena_subscriber_destroy(sub);

  /* A group member: the only one, so every partition is its; it is handed
   * every record of the channel once, in order, and commits where it
   * stopped when destroyed: a subscriber starting at the group's positions
   * is at each partition's end. */
  catena_group* grp = NULL;
  CHECK(catena_group_create(sub_routes, argv[2], "", NULL, &grp) == CATENA_ERR_INVALID_ARGUMENT,
        "a group without a name");
  catena_group_options go;
  catena_group_options_init(&go);
  CHECK(go.size == sizeof go && go.start == CATENA_START_EARLIEST && go.commit_interval_ms == 0,
        "group defaults");
  go.start = CATENA_START_OFFSET;
  CHECK(catena_group_create(sub_routes, argv[2], "capi-grp", &go, &grp) == CATENA_ERR_INVALID_ARGUMENT,
        "a group starting at an offset");
  catena_group_options_init(&go);
  struct group_seen gs;
  memset(&gs, 0, sizeof gs);
  go.member_name = "capi-member";
  go.commit_interval_ms = -1;
  go.before_commit = on_before_commit;
  go.before_commit_opaque = &gs;
  go.join_timeout_ms = 10000;
  e = catena_group_create(sub_routes, argv[2], "capi-grp", &go, &grp);
  CHECK(e == CATENA_OK, "group member: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  const int total = N + 2 * M;
  const double group_deadline = now_s() + 15;
  while (gs.count < total && now_s() < group_deadline) {
    const int n = catena_group_poll_wait(grp, on_group_message, &gs, 256, 100);
    CHECK(n >= 0, "group poll: %s", catena_last_error());
  }
  uint32_t owned[8];
  const size_t owned_n = catena_group_partitions(grp, owned, 8);
  CHECK(owned_n == 4 && owned[0] == 0 && owned[3] == 3, "the member has %zu partitions", owned_n);
  CHECK(gs.count == total && gs.out_of_order == 0, "the member was handed %d of %d records, %d out of order",
        gs.count, total, gs.out_of_order);
  CHECK(catena_group_commit(grp) == CATENA_OK, "group commit: %s", catena_last_error());
  catena_group_stats gst;
  catena_group_stats_init(&gst);
  const double commit_deadline = now_s() + 5;
  do {
    CHECK(catena_group_get_stats(grp, &gst) == CATENA_OK, "group stats: %s", catena_last_error());
    if (gst.commits == 0) pause_200us();
  } while (gst.commits == 0 && now_s() < commit_deadline);
  CHECK(gst.joins == 1 && gst.commits >= 1 && gst.commit_refusals == 0 && gst.revoked == 0,
        "group stats: %llu joins, %llu commits, %llu refusals, %llu revoked", (unsigned long long)gst.joins,
        (unsigned long long)gst.commits, (unsigned long long)gst.commit_refusals,
        (unsigned long long)gst.revoked);
  catena_group_stats unsized;
  memset(&unsized, 0, sizeof unsized);
  CHECK(catena_group_get_stats(grp, &unsized) == CATENA_ERR_INVALID_ARGUMENT, "group stats into a zero size");
  CHECK(gs.before_commit >= 1, "before_commit ran %d times", gs.before_commit);
  catena_group_destroy(grp);
  catena_subscriber_options_init(&so);
  so.start = CATENA_START_COMMITTED;
  so.group = "capi-grp";
  e = catena_subscriber_create_with(sub_routes, argv[2], &so, &sub);
  CHECK(e == CATENA_OK, "subscriber at capi-grp's positions: %s", catena_last_error());
  if (e != CATENA_OK) return 1;
  on_nothing_count = 0;
  const double settle = now_s() + 0.5;
  while (now_s() < settle) {
    if (catena_subscriber_poll(sub, on_nothing, NULL, 256) <= 0) pause_200us();
  }
  for (uint32_t p = 0; p < 4; ++p)
    CHECK(catena_subscriber_position(sub, p) == gs.next[p],
          "partition %u: the group committed %llu, not %llu", p,
          (unsigned long long)catena_subscriber_position(sub, p), (unsigned long long)gs.next[p]);
  CHECK(on_nothing_count == 0, "%d records after the group's commit", on_nothing_count);
  catena_subscriber_destroy(sub);
  fprintf(stderr, "capi_test: group member handed %d records, before_commit %d\n", gs.count,
          gs.before_commit);

  /* Channel administration through the same routes. */
  catena_channel_settings cs;
  catena_channel_settings_init(&cs);
  cs.name = "capi-admin";
  cs.partitions = 3;
  cs.replication = 2;
  cs.ttl_ms = 60000;
  catena_channel_info info;
  catena_channel_info_init(&info);
  e = catena_channel_create(sub_routes, &cs, &info);
  CHECK(e == CATENA_OK, "channel create: %s", catena_last_error());
  CHECK(strcmp(info.name, "capi-admin") == 0 && info.partitions == 3 && info.replication == 2 &&
            info.ttl_ms == 60000 && info.segment_bytes == 64 << 20 && info.routed_partitions == 3 &&
            info.altering == 0,
        "created: %s %d partitions, replication %d, ttl %lld, segment %lld, routed %u, altering %d",
        info.name, info.partitions, info.replication, (long long)info.ttl_ms, (long long)info.segment_bytes,
        info.routed_partitions, info.altering);
  /* Its chains: one per partition, by number, two distinct nodes each. */
  {
    catena_partition_chain chains[4];
    for (int i = 0; i < 4; ++i) catena_partition_chain_init(&chains[i]);
    size_t n = 0;
    e = catena_channel_chains(sub_routes, "capi-admin", chains, 4, &n);
    CHECK(e == CATENA_OK && n == 3, "chains: %s, %zu", catena_last_error(), n);
    for (size_t i = 0; i < n && i < 4; ++i) {
      CHECK(chains[i].partition == i && chains[i].length == 2 && chains[i].epoch >= 1 &&
                chains[i].start_offset == 0 && strlen(chains[i].nodes[0]) > 0 &&
                strcmp(chains[i].nodes[0], chains[i].nodes[1]) != 0,
            "chain %zu: partition %u, %u members (%s, %s), epoch %llu", i, chains[i].partition,
            chains[i].length, chains[i].nodes[0], chains[i].nodes[1], (unsigned long long)chains[i].epoch);
    }
    CHECK(catena_channel_chains(sub_routes, "capi-admin", chains, 1, &n) == CATENA_OK && n == 3,
          "a short array: %zu", n);
    CHECK(catena_channel_chains(sub_routes, "no-such-channel", chains, 4, &n) == CATENA_ERR_UNKNOWN_CHANNEL,
          "chains of a missing channel: %s", catena_last_error());
    chains[2].size = 4;
    CHECK(catena_channel_chains(sub_routes, "capi-admin", chains, 3, &n) == CATENA_ERR_INVALID_ARGUMENT,
          "an unsized chain taken");
  }
  e = catena_channel_create(sub_routes, &cs, NULL);
  CHECK(e == CATENA_ERR_INVALID_ARGUMENT && strstr(catena_last_error(), "exists") != NULL,
        "a second create: %s (%s)", catena_strerror(e), catena_last_error());
  cs.name = "bad name!";
  e = catena_channel_create(sub_routes, &cs, NULL);
  CHECK(e == CATENA_ERR_INVALID_ARGUMENT, "a create with a bad name: %s (%s)", catena_strerror(e),
        catena_last_error());
  cs.name = "capi-admin-2";
  cs.size = 8;
  e = catena_channel_create(sub_routes, &cs, NULL);
  CHECK(
      e == CATENA_ERR_INVALID_ARGUMENT && strstr(catena_last_error(), "catena_channel_settings_init") != NULL,
      "settings of an unknown size: %s (%s)", catena_strerror(e), catena_last_error());
  catena_channel_info raw;
  memset(&raw, 0, sizeof raw);
  e = catena_channel_describe(sub_routes, "capi-admin", &raw);
  CHECK(e == CATENA_ERR_INVALID_ARGUMENT, "describe into an uninitialised info: %s", catena_strerror(e));
  e = catena_channel_describe(sub_routes, "no-such-channel", &info);
  CHECK(e == CATENA_ERR_UNKNOWN_CHANNEL, "describe a missing channel: %s (%s)", catena_strerror(e),
        catena_last_error());
  catena_channel_info list[8];
  for (int i = 0; i < 8; ++i) catena_channel_info_init(&list[i]);
  size_t channels = 0;
  e = catena_channel_list(sub_routes, list, 8, &channels);
  CHECK(e == CATENA_OK && channels == 3, "list: %s, %zu channels", catena_last_error(), channels);
  CHECK(channels == 3 && strcmp(list[0].name, "capi") == 0 && strcmp(list[1].name, "capi-admin") == 0 &&
            strcmp(list[2].name, "capi-full") == 0 && list[0].partitions == 4 && list[1].partitions == 3,
        "listed %s (%d) %s (%d) %s", list[0].name, list[0].partitions, list[1].name, list[1].partitions,
        list[2].name);
  size_t counted = 0;
  CHECK(catena_channel_list(sub_routes, NULL, 0, &counted) == CATENA_OK && counted == 3, "count only: %zu",
        counted);
  e = catena_channel_alter_retention(sub_routes, "capi-admin", 120000, &info);
  CHECK(e == CATENA_OK && info.ttl_ms == 120000, "alter retention: %s, ttl %lld", catena_last_error(),
        (long long)info.ttl_ms);
  e = catena_channel_alter_partitions(sub_routes, "capi-admin", 4, &info);
  CHECK(e == CATENA_OK && info.partitions == 4 && info.routed_partitions == 4 && info.altering == 0,
        "alter partitions: %s, %d partitions, routed %u", catena_last_error(), info.partitions,
        info.routed_partitions);
  e = catena_channel_describe(sub_routes, "capi-admin", &info);
  CHECK(e == CATENA_OK && info.partitions == 4 && info.ttl_ms == 120000, "described: %s, %d partitions",
        catena_last_error(), info.partitions);
  /* The new partition takes records, after the alter's marker (offset 0). */
  catena_publisher* admin_pub = NULL;
  e = catena_publisher_create(sub_routes, "capi-admin", &admin_pub);
  CHECK(e == CATENA_OK, "publisher on capi-admin: %s", catena_last_error());
  if (e == CATENA_OK) {
    struct acked a = {0};
    e = catena_publish_to(admin_pub, 3, NULL, 0, NULL, 0, "p3", 2, on_ack, &a);
    CHECK(e == CATENA_OK, "publish to partition 3: %s", catena_last_error());
    CHECK(catena_publisher_flush(admin_pub, 10000) == CATENA_OK && a.done == 1 && a.partition == 3 &&
              a.offset == 1,
          "partition 3's first record: done %d, %u@%llu (%s)", a.done, a.partition,
          (unsigned long long)a.offset, catena_last_error());
    catena_publisher_destroy(admin_pub);
  }
  /* The alter's markers (offset 0 of every partition), seen with
   * control_records; and held, with markers_released_by_caller, until
   * released. */
  {
    catena_subscriber_options mo;
    catena_subscriber_options_init(&mo);
    mo.control_records = 1;
    catena_subscriber* ms = NULL;
    e = catena_subscriber_create_with(sub_routes, "capi-admin", &mo, &ms);
    CHECK(e == CATENA_OK, "subscriber with control_records: %s", catena_last_error());
    struct seen_markers got = {0};
    const double until = now_s() + 15;
    while (e == CATENA_OK && (got.markers < 4 || got.records < 1) && now_s() < until) {
      if (catena_subscriber_poll(ms, on_marker_or_record, &got, 64) <= 0) pause_200us();
    }
    CHECK(got.markers == 4 && got.records == 1 && got.bad == 0 && got.generation >= 1,
          "markers %d (generation %llu), records %d, bad %d", got.markers, (unsigned long long)got.generation,
          got.records, got.bad);
    for (uint32_t p = 0; e == CATENA_OK && p < 4; ++p) {
      CHECK(catena_subscriber_marker_reached(ms, p) == got.generation &&
                catena_subscriber_held_at_marker(ms, p) == 0,
            "partition %u: marker reached %llu, held %d", p,
            (unsigned long long)catena_subscriber_marker_reached(ms, p),
            catena_subscriber_held_at_marker(ms, p));
    }
    if (e == CATENA_OK) {
      CHECK(catena_subscriber_release_markers(ms, 0, got.generation) == CATENA_ERR_INVALID_ARGUMENT &&
                strstr(catena_last_error(), "markers_released_by_caller") != NULL,
            "release without markers_released_by_caller: %s", catena_last_error());
    }
    catena_subscriber_destroy(ms);

    mo.markers_released_by_caller = 1;
    e = catena_subscriber_create_with(sub_routes, "capi-admin", &mo, &ms);
    CHECK(e == CATENA_OK, "subscriber with markers_released_by_caller: %s", catena_last_error());
    struct seen_markers held = {0};
    int all_held = 0;
    const double hold_until = now_s() + 15;
    while (e == CATENA_OK && !all_held && now_s() < hold_until) {
      if (catena_subscriber_poll(ms, on_marker_or_record, &held, 64) <= 0) pause_200us();
      all_held = 1;
      for (uint32_t p = 0; p < 4; ++p) all_held = all_held && catena_subscriber_held_at_marker(ms, p);
    }
    /* Each partition hands out its marker and stops there. */
    CHECK(all_held && held.markers == 4 && held.records == 0 && held.bad == 0,
          "before the release: held at every marker %d, markers %d, records %d, bad %d", all_held,
          held.markers, held.records, held.bad);
    for (uint32_t p = 0; e == CATENA_OK && p < 4; ++p) {
      CHECK(catena_subscriber_position(ms, p) == 0, "partition %u held at %llu, not at its marker (0)", p,
            (unsigned long long)catena_subscriber_position(ms, p));
    }
    if (e == CATENA_OK) {
      CHECK(catena_subscriber_release_markers(ms, 9, got.generation) == CATENA_ERR_INVALID_ARGUMENT,
            "release on a partition not read: %s", catena_last_error());
      for (uint32_t p = 0; p < 4; ++p)
        CHECK(catena_subscriber_release_markers(ms, p, got.generation) == CATENA_OK, "release %u: %s", p,
              catena_last_error());
    }
    const double release_until = now_s() + 15;
    while (e == CATENA_OK && held.records < 1 && now_s() < release_until) {
      if (catena_subscriber_poll(ms, on_marker_or_record, &held, 64) <= 0) pause_200us();
    }
    CHECK(held.markers == 4 && held.records == 1 && held.bad == 0 && held.generation == got.generation,
          "after the release: markers %d (generation %llu), records %d, bad %d", held.markers,
          (unsigned long long)held.generation, held.records, held.bad);
    catena_subscriber_destroy(ms);
    fprintf(stderr, "capi_test: alter markers checked (generation %llu)\n",
            (unsigned long long)got.generation);
  }
  e = catena_channel_delete(sub_routes, "capi-admin");
  CHECK(e == CATENA_OK, "delete: %s", catena_last_error());
  e = catena_channel_describe(sub_routes, "capi-admin", &info);
  CHECK(e == CATENA_ERR_UNKNOWN_CHANNEL, "describe after delete: %s", catena_strerror(e));
  e = catena_channel_delete(sub_routes, "capi-admin");
  CHECK(e == CATENA_ERR_UNKNOWN_CHANNEL, "a second delete: %s (%s)", catena_strerror(e), catena_last_error());
  CHECK(catena_channel_delete(NULL, "x") == CATENA_ERR_INVALID_ARGUMENT, "delete with NULL routes");
  fprintf(stderr, "capi_test: channel administration checked\n");

  /* Tenants: created with quotas, a token that opens its own namespace
   * only, listed with its use, altered, its token rotated (the old one
   * refused), deleted once it owns no channel. */
  {
    catena_tenant_quotas q;
    catena_tenant_quotas_init(&q);
    CHECK(
        q.size == sizeof q && q.max_channels == -1 && q.max_producer_ids_per_minute == -1 && q.zones == NULL,
        "quota defaults");
    q.max_channels = 1;
    q.zones = "zone-a,zone-b,zone-c";
    char token[CATENA_TOKEN_SIZE];
    char small[16];
    CHECK(catena_tenant_create(sub_routes, "capit", &q, small, sizeof small) == CATENA_ERR_INVALID_ARGUMENT,
          "a token buffer too small taken");
    CHECK(strstr(catena_last_error(), "CATENA_TOKEN_SIZE") != NULL, "%s", catena_last_error());
    CHECK(
        catena_tenant_create(sub_routes, "bad name", &q, token, sizeof token) == CATENA_ERR_INVALID_ARGUMENT,
        "a bad tenant name taken");
    e = catena_tenant_create(sub_routes, "capit", &q, token, sizeof token);
    CHECK(e == CATENA_OK, "tenant create: %s (%s)", catena_strerror(e), catena_last_error());
    CHECK(strlen(token) == 64, "token of %zu characters", strlen(token));
    CHECK(
        catena_tenant_create(sub_routes, "capit", &q, token + 0, sizeof token) == CATENA_ERR_INVALID_ARGUMENT,
        "a tenant created twice");
    CHECK(strlen(token) == 64, "a refused create wrote the token buffer");

    catena_routes* as_tenant = NULL;
    CHECK(catena_connect(argv[1], token, &as_tenant) == CATENA_OK, "connect with the tenant's token: %s",
          catena_last_error());
    catena_channel_settings t;
    catena_channel_settings_init(&t);
    t.name = "capit.orders";
    t.replication = 1;
    e = catena_channel_create(as_tenant, &t, NULL);
    CHECK(e == CATENA_OK, "tenant's channel: %s (%s)", catena_strerror(e), catena_last_error());
    t.name = "capit.more";
    CHECK(catena_channel_create(as_tenant, &t, NULL) == CATENA_ERR_INVALID_ARGUMENT, "past max_channels");
    CHECK(strstr(catena_last_error(), "max_channels") != NULL, "%s", catena_last_error());
    t.name = "elsewhere";
    CHECK(catena_channel_create(as_tenant, &t, NULL) == CATENA_ERR_UNAUTHENTICATED, "outside its namespace");
    char other[CATENA_TOKEN_SIZE];
    CHECK(catena_tenant_create(as_tenant, "capit2", NULL, other, sizeof other) == CATENA_ERR_UNAUTHENTICATED,
          "a tenant created another tenant");

    catena_tenant_info tenants[4];
    for (int i = 0; i < 4; ++i) catena_tenant_info_init(&tenants[i]);
    size_t count = 0;
    e = catena_tenant_list(sub_routes, tenants, 4, &count);
    CHECK(e == CATENA_OK && count == 1, "tenant list: %s, %zu", catena_last_error(), count);
    CHECK(strcmp(tenants[0].name, "capit") == 0 && tenants[0].max_channels == 1 &&
              tenants[0].max_partitions == -1,
          "listed: %s, max_channels %lld", tenants[0].name, (long long)tenants[0].max_channels);
    CHECK(strcmp(tenants[0].zones, "zone-a,zone-b,zone-c") == 0, "zones '%s'", tenants[0].zones);
    CHECK(tenants[0].channels == 1 && tenants[0].partitions == 1 && tenants[0].created_at_ms > 0,
          "use: %lld channels, %lld partitions", (long long)tenants[0].channels,
          (long long)tenants[0].partitions);
    tenants[1].size = 8;
    CHECK(catena_tenant_list(sub_routes, tenants, 2, &count) == CATENA_ERR_INVALID_ARGUMENT,
          "unsized info taken");

    q.max_channels = 2;
    q.zones = NULL;
    e = catena_tenant_alter(sub_routes, "capit", &q);
    CHECK(e == CATENA_OK, "tenant alter: %s", catena_last_error());
    CHECK(catena_channel_create(as_tenant, &t, NULL) == CATENA_ERR_UNAUTHENTICATED, "still outside");
    t.name = "capit.more";
    CHECK(catena_channel_create(as_tenant, &t, NULL) == CATENA_OK, "within the raised quota: %s",
          catena_last_error());
    catena_tenant_info_init(&tenants[0]);
    CHECK(catena_tenant_list(sub_routes, tenants, 1, &count) == CATENA_OK && tenants[0].max_channels == 2 &&
              tenants[0].zones[0] == '\0' && tenants[0].channels == 2,
          "after alter: max_channels %lld, zones '%s'", (long long)tenants[0].max_channels, tenants[0].zones);
    q.max_sessions = -2;
    CHECK(catena_tenant_alter(sub_routes, "capit", &q) == CATENA_ERR_INVALID_ARGUMENT,
          "a quota below -1 taken");
    CHECK(catena_tenant_alter(sub_routes, "nobody", NULL) == CATENA_ERR_INVALID_ARGUMENT,
          "an unknown tenant");

    char rotated[CATENA_TOKEN_SIZE];
    e = catena_tenant_rotate_token(sub_routes, "capit", rotated, sizeof rotated);
    CHECK(e == CATENA_OK && strlen(rotated) == 64 && strcmp(rotated, token) != 0, "rotate: %s",
          catena_last_error());
    catena_channel_info gone;
    catena_channel_info_init(&gone);
    CHECK(catena_channel_describe(as_tenant, "capit.orders", &gone) == CATENA_ERR_UNAUTHENTICATED,
          "the old token still works: %s", catena_last_error());
    catena_routes_destroy(as_tenant);
    CHECK(catena_connect(argv[1], rotated, &as_tenant) == CATENA_OK, "connect: %s", catena_last_error());
    CHECK(catena_channel_describe(as_tenant, "capit.orders", &gone) == CATENA_OK, "the new token: %s",
          catena_last_error());

    CHECK(catena_tenant_delete(sub_routes, "capit") == CATENA_ERR_INVALID_ARGUMENT,
          "deleted owning channels");
    CHECK(strstr(catena_last_error(), "owns 2 channel") != NULL, "%s", catena_last_error());
    CHECK(catena_channel_delete(as_tenant, "capit.orders") == CATENA_OK, "%s", catena_last_error());
    CHECK(catena_channel_delete(as_tenant, "capit.more") == CATENA_OK, "%s", catena_last_error());
    catena_routes_destroy(as_tenant);
    e = catena_tenant_delete(sub_routes, "capit");
    CHECK(e == CATENA_OK, "tenant delete: %s", catena_last_error());
    CHECK(catena_tenant_list(sub_routes, NULL, 0, &count) == CATENA_OK && count == 0, "%zu tenants left",
          count);
    CHECK(catena_tenant_delete(NULL, "capit") == CATENA_ERR_INVALID_ARGUMENT, "delete with NULL routes");
    fprintf(stderr, "capi_test: tenant administration checked\n");
  }

  check_ring_size(sub_routes, "capi-ring");

  catena_routes_destroy(sub_routes);
  fprintf(stderr, "capi_test: received %d, %s\n", received, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
