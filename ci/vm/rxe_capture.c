/* Makes rdma_rxe send one of each RC frame the dpdk provider builds, on a
 * wire where the host can record them (ci/vm/capture-rxe-frames.sh).
 *
 * Runs inside the soft-RoCE VM with rxe0 on eth1 (run-in-vm.sh --wire). Two
 * RC QPs, A and B, are each connected to a peer at 10.9.0.2, the host end
 * of the wire, naming the other's QP number: every frame leaves the VM, the
 * host's reflector (rxe_reflector.py) sends it back as if from 10.9.0.2,
 * and rxe's other QP answers it. So the wire carries rxe's requests and its
 * responses: WRITE (ONLY, FIRST/MIDDLE/LAST, with immediate), SEND (the
 * same), READ request and responses, ACK, RNR NAK and a remote access NAK.
 * Fixed PSNs and path MTU 1024 keep the capture reproducible but for the
 * QP numbers and IP ids rxe picks. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct ibv_cq* cq;

static void fail(const char* what) {
  fprintf(stderr, "rxe_capture: %s\n", what);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for the completion of wr_id (< 256); returns its status. A
 * completion of another request seen meanwhile is kept for its own wait. */
static int seen[256];
static int status_of[256];
static int wait_wc(uint64_t wr_id) {
  double end = now_s() + 20;
  while (!seen[wr_id] && now_s() < end) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) fail("poll_cq");
    if (n == 1) {
      seen[wc.wr_id & 255] = 1;
      status_of[wc.wr_id & 255] = (int)wc.status;
    } else {
      usleep(1000);
    }
  }
  if (!seen[wr_id]) fail("no completion");
  return status_of[wr_id];
}

static void connect_qp(struct ibv_qp* qp, uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) fail("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1; /* the IPv4-mapped GID of 10.9.0.1 */
  a.ah_attr.grh.hop_limit = 64;
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 2};
  memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    fail("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = sq_psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    fail("RTS");
}

static struct ibv_mr* mr;
static uint8_t* buf;

static void post(struct ibv_qp* qp, uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
                 uint32_t remote_off, uint32_t rkey, uint32_t imm) {
  struct ibv_sge sge = {(uintptr_t)(buf + off), len, mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = (uintptr_t)(buf + remote_off);
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(qp, &wr, &bad)) fail("post_send");
}

static void post_recv(struct ibv_qp* qp, uint64_t id, uint32_t off, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)(buf + off), len, mr->lkey};
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(qp, &wr, &bad)) fail("post_recv");
}

int main(void) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  if (!list || !list[0]) fail("no RDMA device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  struct ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (!pd) fail("open/pd");
  buf = aligned_alloc(4096, 65536);
  for (int i = 0; i < 16384; ++i) buf[i] = (uint8_t)(i * 7 + 1);
  memcpy(buf, "catena", 6);
  memset(buf + 16384, 0, 65536 - 16384);
  mr = ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  if (!mr || !cq) fail("mr/cq");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  struct ibv_qp* a = ibv_create_qp(pd, &ia);
  struct ibv_qp* b = ibv_create_qp(pd, &ia);
  if (!a || !b) fail("create_qp");
  connect_qp(a, b->qp_num, 0x000100, 0x000200);
  connect_qp(b, a->qp_num, 0x000200, 0x000100);

  const uint32_t dst = 16384;
  if (wait_wc((post(a, 1, IBV_WR_RDMA_WRITE, 0, 6, dst, mr->rkey, 0), 1))) fail("write");
  post_recv(b, 100, 32768, 4096);
  if (wait_wc((post(a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 6, dst, mr->rkey, 0x01020304), 2))) fail("write imm");
  wait_wc(100);
  if (wait_wc((post(a, 3, IBV_WR_RDMA_WRITE, 0, 2500, dst, mr->rkey, 0), 3))) fail("long write");
  post_recv(b, 101, 32768, 4096);
  if (wait_wc((post(a, 4, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 2500, dst, mr->rkey, 0x0a0b0c0d), 4)))
    fail("long write imm");
  wait_wc(101);
  post_recv(b, 102, 32768, 4096);
  if (wait_wc((post(a, 5, IBV_WR_SEND, 0, 6, 0, 0, 0), 5))) fail("send");
  wait_wc(102);
  post_recv(b, 103, 32768, 4096);
  if (wait_wc((post(a, 6, IBV_WR_SEND_WITH_IMM, 0, 6, 0, 0, 0x11223344), 6))) fail("send imm");
  wait_wc(103);
  post_recv(b, 104, 32768, 4096);
  if (wait_wc((post(a, 7, IBV_WR_SEND, 0, 2500, 0, 0, 0), 7))) fail("long send");
  wait_wc(104);
  if (wait_wc((post(a, 8, IBV_WR_RDMA_READ, 40960, 6, 0, mr->rkey, 0), 8))) fail("read");
  if (wait_wc((post(a, 9, IBV_WR_RDMA_READ, 40960, 2500, 0, mr->rkey, 0), 9))) fail("long read");
  /* No receive posted: B answers RNR NAKs until one is. */
  post(a, 10, IBV_WR_SEND, 0, 6, 0, 0, 0);
  usleep(200000);
  post_recv(b, 105, 32768, 4096);
  if (wait_wc(10)) fail("rnr send");
  wait_wc(105);
  /* A key B never gave: a remote access NAK, and A's QP goes to error. */
  int st = wait_wc((post(a, 11, IBV_WR_RDMA_WRITE, 0, 6, dst, mr->rkey ^ 0x5a5a00, 0), 11));
  printf("RXE_CAPTURE_DONE bad-rkey status=%d qpn_a=%u qpn_b=%u\n", st, a->qp_num, b->qp_num);
  return st == IBV_WC_REM_ACCESS_ERR ? 0 : 2;
}
