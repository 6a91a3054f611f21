/* nats_bench: the peer figures for `catena bench`, measured the same way on
 * NATS JetStream (a stream with R replicas in memory on a 3-server cluster).
 *
 *   commit_ack_latency  js_Publish -> its PubAck (stored by the stream's
 *                       replicas), one message in flight
 *   delivery_latency    js_Publish -> a push consumer's callback, one message
 *                       in flight (the next goes once both arrived)
 *   throughput          js_PublishAsync with up to --window messages awaiting
 *                       their PubAck, per payload size, for --seconds
 *
 * Prints one JSON object per line in the schema of `catena bench --json`
 * (system "nats"). The first 8 bytes of each payload carry the send time
 * (CLOCK_MONOTONIC ns): payloads must be at least 8 bytes.
 *
 * --samples-dir DIR: each latency row's samples also go to
 * DIR/nats-<mode>-<bytes>B.samples (ns, one a line), which
 * `catena bench --replot --out-dir DIR` turns into .hgrm files and plots
 * beside Catena's rows.
 *
 * The harness waits like Catena's does: spin, then sched_yield, then sleep
 * with exponential back-off (1 us .. 1 ms), so neither side is favoured by
 * the way the benchmark itself idles.
 */
#define _GNU_SOURCE
#include <nats/nats.h>

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() sched_yield()
#endif

static const int64_t kStreamBytes = 256ll << 20;

typedef struct {
  const char *servers;
  const char *stream;
  const char *latency_sizes;
  const char *sizes;
  int replicas;
  int iters;
  int warmup;
  int window;
  double seconds;
  int pin_cpu;
  int64_t floor_p50_ns;
  int64_t warm_bytes;
  int json;
  const char *samples_dir;
} Options;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* catena::fabric::BackoffIdle with its default configuration. */
typedef struct {
  uint32_t spins, yields, park_ns;
} Backoff;

static void backoff_reset(Backoff *b) {
  b->spins = b->yields = 0;
  b->park_ns = 1000;
}

static void backoff_idle(Backoff *b) {
  if (b->spins < 200) {
    ++b->spins;
    CPU_RELAX();
  } else if (b->yields < 50) {
    ++b->yields;
    sched_yield();
  } else {
    struct timespec ts = {0, (long)b->park_ns};
    nanosleep(&ts, NULL);
    b->park_ns = b->park_ns * 2 > 1000000 ? 1000000 : b->park_ns * 2;
  }
}

static void die(const char *what, natsStatus s) {
  fprintf(stderr, "nats_bench: %s: %s (%s)\n", what, natsStatus_GetText(s), nats_GetLastError(NULL));
  exit(1);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  uint64_t p50, p99, p999, max;
  size_t count;
} Pct;

/* Same rounding as catena::bench::percentiles. */
static Pct percentiles(uint64_t *v, size_t n) {
  Pct p = {0, 0, 0, 0, n};
  if (n == 0) return p;
  qsort(v, n, sizeof *v, cmp_u64);
#define AT(q) v[(size_t)((q) * (double)(n - 1) + 0.5) < n - 1 ? (size_t)((q) * (double)(n - 1) + 0.5) : n - 1]
  p.p50 = AT(0.50);
  p.p99 = AT(0.99);
  p.p999 = AT(0.999);
#undef AT
  p.max = v[n - 1];
  return p;
}

static void emit(const Options *o, const char *mode, int bytes, Pct p, double msgs_per_s, const char *note) {
  if (o->json) {
    printf("{\"system\":\"nats\",\"replicas\":%d,\"bytes\":%d,\"mode\":\"%s\",\"p50_ns\":%llu,\"p99_ns\":%llu,"
           "\"p999_ns\":%llu,\"max_ns\":%llu,\"samples\":%zu,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f",
           o->replicas, bytes, mode, (unsigned long long)p.p50, (unsigned long long)p.p99,
           (unsigned long long)p.p999, (unsigned long long)p.max, p.count, msgs_per_s, msgs_per_s * bytes / 1e6);
    if (strcmp(mode, "throughput") != 0) printf(",\"floor_p50_ns\":%lld", (long long)o->floor_p50_ns);
    printf(",\"pinning\":\"%s\",\"note\":\"%s\"}\n", o->pin_cpu >= 0 ? "client thread pinned" : "none", note);
  } else if (strcmp(mode, "throughput") == 0) {
    printf("  %-18s %6d B  %10.0f msg/s  %8.1f MB/s   ack latency p50 %8.1f us  p99 %9.1f us\n", mode, bytes,
           msgs_per_s, msgs_per_s * bytes / 1e6, p.p50 / 1e3, p.p99 / 1e3);
  } else {
    printf("  %-18s %6d B  p50 %7.1f us  p99 %7.1f us  p99.9 %8.1f us  max %8.1f us\n", mode, bytes, p.p50 / 1e3,
           p.p99 / 1e3, p.p999 / 1e3, p.max / 1e3);
  }
  fflush(stdout);
}

static int parse_sizes(const char *s, int *out, int max) {
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    long v = strtol(t, &end, 10);
    if (end && (*end == 'k' || *end == 'K')) v *= 1024;
    if (v < 8) {
      fprintf(stderr, "nats_bench: payloads must be at least 8 bytes (they carry the send time)\n");
      exit(2);
    }
    out[n++] = (int)v;
  }
  free(copy);
  return n;
}

static void fill(char *buf, int bytes) {
  for (int i = 0; i < bytes; ++i) buf[i] = (char)('a' + i % 26);
}

static void stamp(char *buf) {
  uint64_t t = now_ns();
  memcpy(buf, &t, sizeof t);
}

static uint64_t stamp_of(const void *data) {
  uint64_t t;
  memcpy(&t, data, sizeof t);
  return t;
}

/* --- the stream ------------------------------------------------------------------ */

static void recreate_stream(jsCtx *js, const Options *o) {
  jsErrCode jerr = 0;
  js_DeleteStream(js, o->stream, NULL, &jerr);
  char subject[128];
  snprintf(subject, sizeof subject, "%s.>", o->stream);
  const char *subjects[] = {subject};
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = o->stream;
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_MemoryStorage;
  cfg.Replicas = o->replicas;
  cfg.MaxBytes = kStreamBytes; /* throughput runs recycle memory, as Catena's segments expire */
  cfg.Discard = js_DiscardOld;
  /* The cluster elects a meta leader after start: retry for a while. */
  natsStatus s = NATS_OK;
  for (int attempt = 0; attempt < 60; ++attempt) {
    jsStreamInfo *si = NULL;
    s = js_AddStream(&si, js, &cfg, NULL, &jerr);
    if (s == NATS_OK) {
      jsStreamInfo_Destroy(si);
      return;
    }
    nats_Sleep(500);
  }
  die("add stream (is the JetStream cluster up?)", s);
}

/* Moves the stream's leadership to the server this client is connected to
 * (servers are named nats-<client port> by compare.sh), as Catena's
 * publisher talks straight to its chain's head: NATS's best case. Returns
 * whether it got there. */
static int lead_locally(natsConnection *nc, jsCtx *js, const Options *o) {
  char url[256] = {0};
  if (natsConnection_GetConnectedUrl(nc, url, sizeof url) != NATS_OK) return 0;
  const char *colon = strrchr(url, ':');
  if (colon == NULL) return 0;
  char want[64];
  snprintf(want, sizeof want, "nats-%s", colon + 1);
  char api[160];
  snprintf(api, sizeof api, "$JS.API.STREAM.LEADER.STEPDOWN.%s", o->stream);
  for (int attempt = 0; attempt < 12; ++attempt) {
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    if (js_GetStreamInfo(&si, js, o->stream, NULL, &jerr) == NATS_OK) {
      int here = si->Cluster != NULL && si->Cluster->Leader != NULL && strcmp(si->Cluster->Leader, want) == 0;
      int none = si->Cluster == NULL || si->Cluster->Leader == NULL || si->Cluster->Leader[0] == 0;
      jsStreamInfo_Destroy(si);
      if (here) return 1;
      if (!none) {
        natsMsg *reply = NULL;
        if (natsConnection_Request(&reply, nc, api, NULL, 0, 5000) == NATS_OK) natsMsg_Destroy(reply);
      }
    }
    nats_Sleep(1000);
  }
  return 0;
}

/* A latency row's samples, for --samples-dir. */
static void write_samples(const Options *o, const char *mode, int bytes, const uint64_t *v, size_t n) {
  if (o->samples_dir == NULL) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/nats-%s-%dB.samples", o->samples_dir, mode, bytes);
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "nats_bench: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  for (size_t i = 0; i < n; ++i) fprintf(f, "%llu\n", (unsigned long long)v[i]);
  if (fclose(f) != 0) fprintf(stderr, "nats_bench: cannot write %s: %s\n", path, strerror(errno));
}

/* --- measurements ---------------------------------------------------------------- */

static void commit_ack_latency(jsCtx *js, const Options *o, int bytes) {
  char subject[128];
  snprintf(subject, sizeof subject, "%s.lat", o->stream);
  char *buf = malloc((size_t)bytes);
  fill(buf, bytes);
  uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)o->iters);
  size_t n = 0;
  uint64_t start = now_ns();
  for (int i = 0; i < o->iters + o->warmup; ++i) {
    uint64_t t0 = now_ns();
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(NULL, js, subject, buf, bytes, NULL, &jerr);
    uint64_t t1 = now_ns();
    if (s != NATS_OK) die("js_Publish", s);
    if (i >= o->warmup) lat[n++] = t1 - t0;
  }
  double rate = (double)n * 1e9 / (double)(now_ns() - start);
  emit(o, "commit_ack_latency", bytes, percentiles(lat, n), rate, "js_Publish, 1 in flight");
  write_samples(o, "commit_ack_latency", bytes, lat, n);
  free(lat);
  free(buf);
}

typedef struct {
  uint64_t *lat;
  size_t cap;
  volatile uint64_t delivered; /* written by the delivery thread, read with __atomic */
} Delivery;

static void on_delivery(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)nc;
  (void)sub;
  Delivery *d = closure;
  uint64_t t = now_ns() - stamp_of(natsMsg_GetData(msg));
  uint64_t k = __atomic_load_n(&d->delivered, __ATOMIC_RELAXED);
  if (k < d->cap) d->lat[k] = t;
  __atomic_store_n(&d->delivered, k + 1, __ATOMIC_RELEASE);
  natsMsg_Destroy(msg);
}

static void delivery_latency(jsCtx *js, const Options *o, int bytes) {
  char subject[128];
  snprintf(subject, sizeof subject, "%s.del%d", o->stream, bytes);
  Delivery d = {0};
  d.cap = (size_t)(o->iters + o->warmup);
  d.lat = malloc(sizeof(uint64_t) * d.cap);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Config.DeliverPolicy = js_DeliverNew;
  so.Config.AckPolicy = js_AckNone;
  natsSubscription *sub = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_Subscribe(&sub, js, subject, on_delivery, &d, NULL, &so, &jerr);
  if (s != NATS_OK) die("js_Subscribe", s);
  char *buf = malloc((size_t)bytes);
  fill(buf, bytes);
  Backoff idle;
  uint64_t start = now_ns();
  for (int i = 0; i < o->iters + o->warmup; ++i) {
    stamp(buf);
    s = js_Publish(NULL, js, subject, buf, bytes, NULL, &jerr);
    if (s != NATS_OK) die("js_Publish", s);
    backoff_reset(&idle);
    uint64_t deadline = now_ns() + 2000000000ull;
    while (__atomic_load_n(&d.delivered, __ATOMIC_ACQUIRE) < (uint64_t)i + 1) {
      if (now_ns() > deadline) {
        fprintf(stderr, "nats_bench: message %d not delivered within 2 s\n", i);
        exit(1);
      }
      backoff_idle(&idle);
    }
  }
  double rate = (double)o->iters * 1e9 / (double)(now_ns() - start);
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  emit(o, "delivery_latency", bytes, percentiles(d.lat + o->warmup, (size_t)o->iters), rate,
       "push consumer, AckNone, 1 in flight");
  write_samples(o, "delivery_latency", bytes, d.lat + o->warmup, (size_t)o->iters);
  free(d.lat);
  free(buf);
}

typedef struct {
  uint64_t *lat;
  size_t cap;
  uint64_t acked;
  uint64_t failed;
} Acks;

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
  (void)js;
  Acks *a = closure;
  if (pa != NULL && pae == NULL) {
    uint64_t t = now_ns() - stamp_of(natsMsg_GetData(msg));
    if (a->acked < a->cap) a->lat[a->acked] = t;
    __atomic_store_n(&a->acked, a->acked + 1, __ATOMIC_RELEASE);
  } else {
    __atomic_add_fetch(&a->failed, 1, __ATOMIC_RELAXED);
  }
  natsMsg_Destroy(msg);
}

/* Publishes pipelined for o->seconds, or (max_records > 0, a warm-up) until
 * that many were acknowledged; reports the run unless it is a warm-up. */
static void throughput(natsConnection *nc, const Options *o, int bytes, uint64_t max_records) {
  Acks a = {0};
  a.cap = 1u << 22;
  a.lat = malloc(sizeof(uint64_t) * a.cap);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.MaxPending = o->window;
  jo.PublishAsync.AckHandler = on_ack;
  jo.PublishAsync.AckHandlerClosure = &a;
  jsCtx *js = NULL;
  natsStatus s = natsConnection_JetStream(&js, nc, &jo);
  if (s != NATS_OK) die("jetstream context", s);
  char subject[128];
  snprintf(subject, sizeof subject, "%s.tput%d", o->stream, bytes);
  char *buf = malloc((size_t)bytes);
  fill(buf, bytes);
  uint64_t sent = 0;
  uint64_t start = now_ns();
  uint64_t end = start + (uint64_t)(o->seconds * 1e9);
  while (max_records > 0 ? sent < max_records : now_ns() < end) {
    stamp(buf);
    /* Blocks (StallWait) while `window` messages await their ack. */
    s = js_PublishAsync(js, subject, buf, bytes, NULL);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) die("js_PublishAsync", s);
    ++sent;
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 30000;
  s = js_PublishAsyncComplete(js, &po);
  if (s != NATS_OK) die("js_PublishAsyncComplete", s);
  uint64_t elapsed = now_ns() - start;
  uint64_t acked = __atomic_load_n(&a.acked, __ATOMIC_ACQUIRE);
  if (a.failed > 0) fprintf(stderr, "nats_bench: %llu publishes failed\n", (unsigned long long)a.failed);
  if (max_records > 0) {
    fprintf(stderr, "nats_bench: warm-up: %llu MiB at %.0f MB/s\n", (unsigned long long)(acked * (uint64_t)bytes >> 20),
            (double)acked * bytes * 1e3 / (double)elapsed);
  } else {
    char note[96];
    snprintf(note, sizeof note, "js_PublishAsync, window %d", o->window);
    emit(o, "throughput", bytes, percentiles(a.lat, acked < a.cap ? acked : a.cap),
         (double)acked * 1e9 / (double)elapsed, note);
  }
  jsCtx_Destroy(js);
  free(a.lat);
  free(buf);
}

static void usage(void) {
  fprintf(stderr,
          "usage: nats_bench --servers URL[,URL...] [--replicas 3] [--iters 5000] [--warmup 500]\n"
          "                  [--latency-sizes 64] [--sizes 64,1024,16384,65536] [--seconds 2]\n"
          "                  [--window 4096] [--stream BENCH] [--pin-cpu N] [--floor-p50-ns N]\n"
          "                  [--warm-bytes N (default: the stream's 256 MiB; 0: none)] [--json]\n"
          "                  [--samples-dir DIR (latency samples as DIR/nats-<mode>-<bytes>B.samples)]\n");
  exit(2);
}

int main(int argc, char **argv) {
  Options o = {"nats://127.0.0.1:4222", "BENCH", "64", "64,1024,16384,65536", 3, 5000, 500, 4096, 2.0, -1, 0,
               kStreamBytes, 0, NULL};
  static struct option longopts[] = {{"servers", required_argument, 0, 's'},
                                     {"stream", required_argument, 0, 'S'},
                                     {"latency-sizes", required_argument, 0, 'L'},
                                     {"sizes", required_argument, 0, 'z'},
                                     {"replicas", required_argument, 0, 'r'},
                                     {"iters", required_argument, 0, 'i'},
                                     {"warmup", required_argument, 0, 'w'},
                                     {"window", required_argument, 0, 'W'},
                                     {"seconds", required_argument, 0, 't'},
                                     {"pin-cpu", required_argument, 0, 'p'},
                                     {"floor-p50-ns", required_argument, 0, 'f'},
                                     {"warm-bytes", required_argument, 0, 'b'},
                                     {"json", no_argument, 0, 'j'},
                                     {"samples-dir", required_argument, 0, 'D'},
                                     {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
      case 's': o.servers = optarg; break;
      case 'S': o.stream = optarg; break;
      case 'L': o.latency_sizes = optarg; break;
      case 'z': o.sizes = optarg; break;
      case 'r': o.replicas = atoi(optarg); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'W': o.window = atoi(optarg); break;
      case 't': o.seconds = atof(optarg); break;
      case 'p': o.pin_cpu = atoi(optarg); break;
      case 'f': o.floor_p50_ns = atoll(optarg); break;
      case 'b': o.warm_bytes = atoll(optarg); break;
      case 'j': o.json = 1; break;
      case 'D': o.samples_dir = optarg; break;
      default: usage();
    }
  }
  if (o.iters <= 0 || o.window <= 0 || o.replicas <= 0) usage();
  if (o.pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(o.pin_cpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* the library's threads inherit it */
  }
  int lat_sizes[16], tput_sizes[16];
  int n_lat = parse_sizes(o.latency_sizes, lat_sizes, 16);
  int n_tput = parse_sizes(o.sizes, tput_sizes, 16);

  natsOptions *opts = NULL;
  natsStatus s = natsOptions_Create(&opts);
  if (s != NATS_OK) die("options", s);
  /* The first URL is the one to use; the others are only for reconnects. */
  s = natsOptions_SetURL(opts, o.servers);
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(opts, true);
  if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true); /* latency: no flusher hop */
  if (s != NATS_OK) die("options", s);
  natsConnection *nc = NULL;
  s = natsConnection_Connect(&nc, opts);
  if (s != NATS_OK) die("connect", s);
  jsCtx *js = NULL;
  s = natsConnection_JetStream(&js, nc, NULL);
  if (s != NATS_OK) die("jetstream context", s);
  recreate_stream(js, &o);
  const int local = lead_locally(nc, js, &o);
  fprintf(stderr, "nats_bench: stream %s, %d replicas, memory storage, servers %s; the client %s the stream leader\n",
          o.stream, o.replicas, o.servers, local ? "is connected to" : "could not be placed on");

  for (int i = 0; i < n_lat; ++i) commit_ack_latency(js, &o, lat_sizes[i]);
  for (int i = 0; i < n_lat; ++i) delivery_latency(js, &o, lat_sizes[i]);

  /* Throughput on a connection that batches writes (the client's flusher),
   * as Catena's publisher batches with its linger. */
  natsOptions *topts = NULL;
  natsConnection *tnc = NULL;
  s = natsOptions_Create(&topts);
  if (s == NATS_OK) s = natsOptions_SetURL(topts, o.servers);
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(topts, true);
  if (s == NATS_OK) s = natsConnection_Connect(&tnc, topts);
  if (s != NATS_OK) die("connect (throughput)", s);
  /* Warm-up, as `catena bench` warms its log: until the stream's memory
   * (MaxBytes) has been filled once, the servers' heaps grow, and on this
   * kind of VM every first touch of a page costs ~20 us. */
  if (n_tput > 0 && o.warm_bytes > 0) throughput(tnc, &o, 64 << 10, (uint64_t)(o.warm_bytes >> 16) + 1);
  for (int i = 0; i < n_tput; ++i) throughput(tnc, &o, tput_sizes[i], 0);

  jsErrCode jerr = 0;
  js_DeleteStream(js, o.stream, NULL, &jerr);
  jsCtx_Destroy(js);
  natsConnection_Destroy(tnc);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(topts);
  natsOptions_Destroy(opts);
  nats_Close();
  return 0;
}
