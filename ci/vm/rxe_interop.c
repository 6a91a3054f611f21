/* The rdma_rxe side of the dpdk provider's interoperability test
 * (ci/vm/dpdk-interop.sh): runs in the soft-RoCE VM with rxe0 on eth1,
 * whose far end is a host tap where the dpdk provider runs
 * (DpdkInterop.WithRxe in tests/fabric/dpdk_interop_test.cpp).
 *
 * Connections are set up as the dpdk provider does (dpdk_provider.cpp): TCP
 * to the host, one fixed-size Hello each way (QPN, PSN, IPv4-mapped GID,
 * MAC, MTU, depths), then the QP goes to RTS. The script, all over RDMA:
 *   1. SEND to the host: this MR's address and rkey.
 *   2. The host SENDs its key, WRITEs 3000 bytes here, WRITEs 100 bytes
 *      WITH IMMEDIATE, READs 2500 bytes from here: checked here.
 *   3. This side WRITEs 3000 bytes there (its addresses are offsets), WRITEs
 *      WITH IMMEDIATE, READs 2500 bytes back, checks them, and SENDs "done"
 *      which the host takes late (RNR NAKs from the dpdk responder).
 *   4. The host SENDs "bye" before a receive is posted here (RNR NAKs from
 *      rxe to the dpdk requester), then WRITEs with a bad key: a remote
 *      access NAK from rxe.
 *   5. A second connection: this side WRITEs with a bad key: the dpdk
 *      responder NAKs, rxe completes IBV_WC_REM_ACCESS_ERR.
 * Exit 0 when every step did what it should. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct hello {
  uint32_t magic;
  uint16_t version;
  uint8_t refused;
  uint8_t errc;
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint8_t mac[6];
  uint16_t mtu;
  uint32_t sq_depth;
  uint32_t rq_depth;
};
_Static_assert(sizeof(struct hello) == 48, "matches dpdk_provider.cpp");

static struct ibv_context* ctx;
static struct ibv_pd* pd;
static struct ibv_mr* mr;
static uint8_t* buf;

#define CHECK(cond, what)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      fprintf(stderr, "rxe_interop: FAILED %s\n", what);    \
      exit(1);                                              \
    }                                                       \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct conn {
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  int fd;
  int seen[256];
  struct ibv_wc wc[256];
};

static struct ibv_wc wait_wc(struct conn* c, uint64_t id) {
  double end = now_s() + 30;
  while (!c->seen[id] && now_s() < end) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(c->cq, 1, &wc);
    CHECK(n >= 0, "poll_cq");
    if (n == 1) {
      c->seen[wc.wr_id & 255] = 1;
      c->wc[wc.wr_id & 255] = wc;
    } else {
      usleep(200);
    }
  }
  CHECK(c->seen[id], "a completion in time");
  return c->wc[id];
}

static void post(struct conn* c, uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr,
                 uint32_t rkey, uint32_t imm) {
  struct ibv_sge sge = {(uintptr_t)(buf + off), len, mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  CHECK(ibv_post_send(c->qp, &wr, &bad) == 0, "post_send");
}

static void post_recv(struct conn* c, uint64_t id, uint32_t off, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)(buf + off), len, mr->lkey};
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  CHECK(ibv_post_recv(c->qp, &wr, &bad) == 0, "post_recv");
}

static void read_mac(uint8_t mac[6]) {
  FILE* f = fopen("/sys/class/net/eth1/address", "r");
  unsigned m[6];
  CHECK(f && fscanf(f, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6, "eth1's MAC");
  fclose(f);
  for (int i = 0; i < 6; ++i) mac[i] = (uint8_t)m[i];
}

static void connect_to(struct conn* c, const char* host, int port, uint32_t psn) {
  memset(c, 0, sizeof *c);
  c->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = c->cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  c->qp = c->cq ? ibv_create_qp(pd, &ia) : NULL;
  CHECK(c->qp, "create_qp");
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  CHECK(ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
  /* Receives first: the host may send as soon as it has our Hello. */
  post_recv(c, 100, 32768, 1024);
  post_recv(c, 101, 33792, 1024);

  struct hello mine, peer;
  memset(&mine, 0, sizeof mine);
  mine.magic = 0x43524f43;
  mine.version = 1;
  mine.qpn = c->qp->qp_num;
  mine.psn = psn;
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  memcpy(mine.gid, gid.raw, 16);
  read_mac(mine.mac);
  mine.mtu = 1024;
  mine.sq_depth = mine.rq_depth = 16;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, host, &sa.sin_addr);
  CHECK(connect(c->fd, (struct sockaddr*)&sa, sizeof sa) == 0, "TCP connect to the host");
  CHECK(write(c->fd, &mine, sizeof mine) == sizeof mine, "send Hello");
  size_t got = 0;
  while (got < sizeof peer) {
    ssize_t n = read(c->fd, (char*)&peer + got, sizeof peer - got);
    CHECK(n > 0, "read the host's Hello");
    got += (size_t)n;
  }
  CHECK(peer.magic == 0x43524f43 && !peer.refused, "the host's Hello");

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  CHECK(ibv_modify_qp(c->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
        "RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = psn;
  a.max_rd_atomic = 1;
  CHECK(ibv_modify_qp(c->qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) == 0,
        "RTS");
}

static int pattern_ok(uint32_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i)
    if (buf[off + i] != (uint8_t)(seed + i * 7)) return 0;
  return 1;
}
static void fill(uint32_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) buf[off + i] = (uint8_t)(seed + i * 7);
}

int main(int argc, char** argv) {
  CHECK(argc == 3, "usage: rxe_interop HOST_IP PORT");
  const int port = atoi(argv[2]);
  struct ibv_device** list = ibv_get_device_list(NULL);
  CHECK(list && list[0], "an RDMA device");
  ctx = ibv_open_device(list[0]);
  pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  buf = aligned_alloc(4096, 65536);
  memset(buf, 0, 65536);
  fill(8192, 2500, 77); /* what the host reads */
  mr = pd ? ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
          : NULL;
  CHECK(mr, "open, pd, mr");

  struct conn c;
  connect_to(&c, argv[1], port, 0x00abcd);
  /* 1. our address and key */
  uint64_t va = (uintptr_t)buf;
  uint32_t key[2] = {mr->rkey, 65536};
  memcpy(buf + 40960, &va, 8);
  memcpy(buf + 40968, key, 8);
  post(&c, 1, IBV_WR_SEND, 40960, 16, 0, 0, 0);
  CHECK(wait_wc(&c, 1).status == IBV_WC_SUCCESS, "SEND of our key");
  /* 2. the host's key, then its WRITE, WRITE WITH IMMEDIATE and READ */
  struct ibv_wc w = wait_wc(&c, 100);
  CHECK(w.status == IBV_WC_SUCCESS && w.byte_len == 16, "the host's key");
  uint64_t host_len;
  uint32_t host_rkey;
  memcpy(&host_len, buf + 32768, 8);
  memcpy(&host_rkey, buf + 32776, 4);
  w = wait_wc(&c, 101);
  CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_RECV_RDMA_WITH_IMM && ntohl(w.imm_data) == 0xC0FFEE,
        "the host's WRITE WITH IMMEDIATE");
  CHECK(pattern_ok(0, 3000, 11), "the host's 3000-byte WRITE landed");
  CHECK(pattern_ok(4096, 100, 22), "the host's WRITE WITH IMMEDIATE payload landed");
  printf("rxe_interop: host -> rxe WRITE, WRITE_IMM ok\n");
  /* 3. our WRITE, WRITE WITH IMMEDIATE, READ into the host (offsets) */
  fill(16384, 3000, 33);
  post(&c, 2, IBV_WR_RDMA_WRITE, 16384, 3000, 0, host_rkey, 0);
  CHECK(wait_wc(&c, 2).status == IBV_WC_SUCCESS, "WRITE to the host");
  fill(20480, 100, 44);
  post(&c, 3, IBV_WR_RDMA_WRITE_WITH_IMM, 20480, 100, 4096, host_rkey, 0xBEEF);
  CHECK(wait_wc(&c, 3).status == IBV_WC_SUCCESS, "WRITE WITH IMMEDIATE to the host");
  post(&c, 4, IBV_WR_RDMA_READ, 24576, 2500, 8192, host_rkey, 0);
  CHECK(wait_wc(&c, 4).status == IBV_WC_SUCCESS, "READ from the host");
  CHECK(pattern_ok(24576, 2500, 55), "READ from the host brought its bytes");
  printf("rxe_interop: rxe -> host WRITE, WRITE_IMM, READ ok\n");
  memcpy(buf + 28672, "done", 4);
  post(&c, 5, IBV_WR_SEND, 28672, 4, 0, 0, 0);
  CHECK(wait_wc(&c, 5).status == IBV_WC_SUCCESS, "SEND done (the host takes it late: RNR)");
  /* 4. the host's "bye" met no receive for 300 ms: rxe NAKed RNR */
  usleep(300000);
  post_recv(&c, 103, 32768, 1024);
  w = wait_wc(&c, 103);
  CHECK(w.status == IBV_WC_SUCCESS && w.byte_len == 3 && memcmp(buf + 32768, "bye", 3) == 0, "the host's bye");
  printf("rxe_interop: SEND with RNR both ways ok\n");
  /* 5. a key the host never gave, on a second connection */
  struct conn c2;
  connect_to(&c2, argv[1], port, 0x00beef);
  post(&c2, 6, IBV_WR_RDMA_WRITE, 16384, 64, 0, host_rkey ^ 0x5a5a0000, 0);
  w = wait_wc(&c2, 6);
  CHECK(w.status == IBV_WC_REM_ACCESS_ERR, "a bad key is a remote access error");
  printf("rxe_interop: bad rkey -> IBV_WC_REM_ACCESS_ERR ok\n");
  sleep(1); /* the host's own bad-key write to us may still be in flight */
  printf("RXE_INTEROP_OK\n");
  return 0;
}
