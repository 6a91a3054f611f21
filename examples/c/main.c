/* The C API (<catena/catena.h>): publishes COUNT records ("record-0",
 * "record-1", ...) to CHANNEL, waits until each is acknowledged, then reads
 * the channel from its earliest record and prints each payload on a line.
 *
 *   c_pubsub CONTROLLER CHANNEL COUNT      e.g. c_pubsub 127.0.0.1:7400 orders 1000
 *
 * Exits 0 when all COUNT were acknowledged and COUNT records arrived.
 * Build: cc main.c $(pkg-config --cflags --libs catena) (examples/Makefile). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <catena/catena.h>

static void on_ack(void* opaque, const catena_publish_result* r) {
  unsigned long* acknowledged = opaque;
  if (r->status == CATENA_OK)
    ++*acknowledged;
  else
    fprintf(stderr, "c_pubsub: a record failed: %s\n", catena_strerror(r->status));
}

static void on_message(void* opaque, const catena_message* m) {
  unsigned long* received = opaque;
  fwrite(m->payload, 1, m->payload_len, stdout); /* valid during the call only */
  fputc('\n', stdout);
  ++*received;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CONTROLLER CHANNEL COUNT\n", argv[0]);
    return 2;
  }
  const char* channel = argv[2];
  const unsigned long count = strtoul(argv[3], NULL, 10);
  fprintf(stderr, "c_pubsub: libcatena %s\n", catena_version());

  catena_routes* routes = NULL;
  catena_err e = catena_connect(argv[1], NULL, &routes); /* or a tenant's token */
  if (e != CATENA_OK) {
    fprintf(stderr, "connect: %s\n", catena_last_error());
    return 1;
  }

  catena_publisher* pub = NULL;
  if ((e = catena_publisher_create(routes, channel, &pub)) != CATENA_OK) {
    fprintf(stderr, "publisher: %s\n", catena_last_error());
    return 1;
  }
  unsigned long acknowledged = 0;
  for (unsigned long i = 0; i < count; ++i) {
    char key[32], payload[32];
    snprintf(key, sizeof key, "key-%lu", i % 16); /* same key, same partition, in order */
    snprintf(payload, sizeof payload, "record-%lu", i);
    while ((e = catena_publish(pub, key, strlen(key), payload, strlen(payload), on_ack, &acknowledged)) ==
           CATENA_ERR_BACKPRESSURE)
      catena_publisher_poll(pub); /* a full window or ring: take acknowledgements, then retry */
    if (e != CATENA_OK) {
      fprintf(stderr, "publish: %s\n", catena_last_error());
      return 1;
    }
    catena_publisher_poll(pub);
  }
  if (catena_publisher_flush(pub, 30000) != CATENA_OK) fprintf(stderr, "flush: %s\n", catena_last_error());
  catena_publisher_destroy(pub);
  fprintf(stderr, "c_pubsub: published %lu, acknowledged %lu\n", count, acknowledged);

  catena_subscriber* sub = NULL;
  if ((e = catena_subscriber_create(routes, channel, CATENA_START_EARLIEST, &sub)) != CATENA_OK) {
    fprintf(stderr, "subscriber: %s\n", catena_last_error());
    return 1;
  }
  unsigned long received = 0;
  while (received < count) {
    /* Waits up to 10 s for the next records (catena_subscriber_poll never waits). */
    const int n = catena_subscriber_poll_wait(sub, on_message, &received, 1024, 10000);
    if (n <= 0) break; /* nothing for 10 s, or an error */
  }
  fflush(stdout);
  catena_subscriber_destroy(sub);
  catena_routes_destroy(routes);
  fprintf(stderr, "c_pubsub: received %lu of %lu\n", received, count);
  return acknowledged == count && received == count ? 0 : 1;
}
