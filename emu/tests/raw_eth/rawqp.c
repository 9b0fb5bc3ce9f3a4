/* A small raw packet program on libibverbs, for the emulated ConnectX's Ethernet tests
 * (emu/tests/raw_ethernet.rs compiles and runs it under the emulator).
 *
 *   rawqp recv DEV DST_MAC DST_IP UDP_PORT EXPECT IDLE_MS
 *     One raw packet QP and one flow rule (ETH dst MAC, IPv4 dst address, UDP dst port);
 *     prints "ready" once the rule is in place, then counts the datagrams that arrive, each
 *     carrying an 8-byte big-endian sequence number at the start of its UDP payload, until
 *     EXPECT have come or none came for IDLE_MS. Prints one line:
 *     "received R distinct D in_order I out_of_order O duplicates U lost L behind B span_us S"
 *     (I: datagrams that follow their predecessor; O: the others, after a gap or not; B: those
 *     whose sequence number is below the one expected, i.e. that came late or twice; S: from the
 *     first datagram to the last).
 *
 *   rawqp send DEV SRC_MAC DST_MAC SRC_IP DST_IP UDP_PORT COUNT
 *     Sends COUNT UDP datagrams (sequence numbers 0..COUNT-1, 64-byte frames) from a raw
 *     packet QP, the checksums left to the device (IBV_SEND_IP_CSUM). Prints "sent N".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RX_DEPTH 8192
#define BUF 2048
#define TX_DEPTH 256

static void die(const char *what) {
    fprintf(stderr, "rawqp: %s failed: %s\n", what, strerror(errno));
    exit(1);
}

/* ibv_post_send/ibv_post_recv return the error instead of setting errno. */
static void die_rc(const char *what, int rc) {
    fprintf(stderr, "rawqp: %s failed: %s\n", what, strerror(rc));
    exit(1);
}

static void mac_of(const char *s, uint8_t m[6]) {
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        die("MAC address");
    for (int i = 0; i < 6; i++)
        m[i] = (uint8_t)v[i];
}

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static struct ibv_context *open_dev(const char *name) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        die("ibv_get_device_list");
    for (int i = 0; i < n; i++)
        if (!strcmp(ibv_get_device_name(list[i]), name)) {
            struct ibv_context *c = ibv_open_device(list[i]);
            ibv_free_device_list(list);
            if (!c)
                die("ibv_open_device");
            return c;
        }
    die("finding the device");
    return NULL;
}

static void to_rts(struct ibv_qp *qp) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT))
        die("modify to INIT");
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
        die("modify to RTR");
    a.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
        die("modify to RTS");
}

struct rule {
    struct ibv_flow_attr attr;
    struct ibv_flow_spec_eth eth;
    struct ibv_flow_spec_ipv4 ip;
    struct ibv_flow_spec_tcp_udp udp;
};

static int recv_main(char **argv) {
    struct ibv_context *ctx = open_dev(argv[0]);
    uint8_t mac[6];
    mac_of(argv[1], mac);
    uint32_t ip = inet_addr(argv[2]);
    uint16_t port = (uint16_t)atoi(argv[3]);
    uint64_t expect = strtoull(argv[4], NULL, 10);
    uint64_t idle = strtoull(argv[5], NULL, 10);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    char *mem = calloc(RX_DEPTH, BUF);
    struct ibv_mr *mr = ibv_reg_mr(pd, mem, (size_t)RX_DEPTH * BUF, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, RX_DEPTH, NULL, NULL, 0);
    if (!pd || !mem || !mr || !cq)
        die("setup");
    struct ibv_qp_init_attr qa = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
        .cap = {.max_send_wr = 1, .max_recv_wr = RX_DEPTH, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &qa);
    if (!qp)
        die("ibv_create_qp(RAW_PACKET)");
    struct rule r;
    memset(&r, 0, sizeof r);
    r.attr.type = IBV_FLOW_ATTR_NORMAL;
    r.attr.size = sizeof r;
    r.attr.num_of_specs = 3;
    r.attr.port = 1;
    r.eth.type = IBV_FLOW_SPEC_ETH;
    r.eth.size = sizeof r.eth;
    memcpy(r.eth.val.dst_mac, mac, 6);
    memset(r.eth.mask.dst_mac, 0xff, 6);
    r.ip.type = IBV_FLOW_SPEC_IPV4;
    r.ip.size = sizeof r.ip;
    r.ip.val.dst_ip = ip;
    r.ip.mask.dst_ip = 0xffffffff;
    r.udp.type = IBV_FLOW_SPEC_UDP;
    r.udp.size = sizeof r.udp;
    r.udp.val.dst_port = htons(port);
    r.udp.mask.dst_port = 0xffff;
    struct ibv_flow *flow = ibv_create_flow(qp, &r.attr);
    if (!flow)
        die("ibv_create_flow");
    to_rts(qp);
    for (int i = 0; i < RX_DEPTH; i++) {
        struct ibv_sge sge = {(uintptr_t)(mem + (size_t)i * BUF), BUF, mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_recv(qp, &wr, &bad))
            die("ibv_post_recv");
    }
    printf("ready\n");
    fflush(stdout);
    uint8_t *seen = calloc(expect ? expect : 1, 1);
    uint64_t received = 0, distinct = 0, in_order = 0, out_of_order = 0, dup = 0, behind = 0;
    uint64_t next = 0;
    uint64_t last = now_ms();
    struct timespec first_ts = {0, 0}, last_ts = {0, 0};
    while (received < expect && now_ms() - last < idle) {
        struct ibv_wc wc[32];
        int n = ibv_poll_cq(cq, 32, wc);
        if (n < 0)
            die("ibv_poll_cq");
        for (int k = 0; k < n; k++) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "rawqp: completion status %d\n", wc[k].status);
                return 1;
            }
            const uint8_t *p = (const uint8_t *)mem + wc[k].wr_id * BUF;
            uint64_t seq = 0;
            for (int b = 0; b < 8; b++)
                seq = seq << 8 | p[42 + b];
            if (received == 0)
                clock_gettime(CLOCK_MONOTONIC, &first_ts);
            clock_gettime(CLOCK_MONOTONIC, &last_ts);
            received++;
            if (seq < expect && !seen[seq]) {
                seen[seq] = 1;
                distinct++;
            } else {
                dup++;
            }
            if (seq == next)
                in_order++;
            else
                out_of_order++;
            if (seq < next)
                behind++;
            next = seq + 1;
            struct ibv_sge sge = {(uintptr_t)p, BUF, mr->lkey};
            struct ibv_recv_wr wr = {.wr_id = wc[k].wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
            if (ibv_post_recv(qp, &wr, &bad))
                die("ibv_post_recv");
            last = now_ms();
        }
    }
    long long span_us = (last_ts.tv_sec - first_ts.tv_sec) * 1000000LL +
                        (last_ts.tv_nsec - first_ts.tv_nsec) / 1000;
    printf("received %llu distinct %llu in_order %llu out_of_order %llu duplicates %llu lost %llu "
           "behind %llu span_us %lld\n",
           (unsigned long long)received, (unsigned long long)distinct,
           (unsigned long long)in_order, (unsigned long long)out_of_order,
           (unsigned long long)dup, (unsigned long long)(expect - distinct),
           (unsigned long long)behind, span_us);
    if (ibv_destroy_flow(flow) || ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr))
        die("teardown");
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return 0;
}

static int send_main(char **argv) {
    struct ibv_context *ctx = open_dev(argv[0]);
    uint8_t src[6], dst[6];
    mac_of(argv[1], src);
    mac_of(argv[2], dst);
    uint32_t sip = inet_addr(argv[3]), dip = inet_addr(argv[4]);
    uint16_t port = (uint16_t)atoi(argv[5]);
    uint64_t count = strtoull(argv[6], NULL, 10);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    char *mem = calloc(TX_DEPTH, 64);
    struct ibv_mr *mr = ibv_reg_mr(pd, mem, TX_DEPTH * 64, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, TX_DEPTH, NULL, NULL, 0);
    if (!pd || !mem || !mr || !cq)
        die("setup");
    struct ibv_qp_init_attr qa = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
        .cap = {.max_send_wr = TX_DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &qa);
    if (!qp)
        die("ibv_create_qp(RAW_PACKET)");
    to_rts(qp);
    uint64_t posted = 0, done = 0;
    while (done < count) {
        while (posted < count && posted - done < TX_DEPTH) {
            uint8_t *f = (uint8_t *)mem + (posted % TX_DEPTH) * 64;
            memset(f, 0, 64);
            memcpy(f, dst, 6);
            memcpy(f + 6, src, 6);
            f[12] = 0x08;
            f[14] = 0x45;
            f[16] = 0, f[17] = 50; /* total length: 20 + 8 + 22 */
            f[20] = 0x40;          /* DF */
            f[22] = 64;
            f[23] = 17;
            memcpy(f + 26, &sip, 4);
            memcpy(f + 30, &dip, 4);
            f[34] = (uint8_t)(port >> 8), f[35] = (uint8_t)port;
            f[36] = (uint8_t)(port >> 8), f[37] = (uint8_t)port;
            f[38] = 0, f[39] = 30;
            for (int b = 0; b < 8; b++)
                f[42 + b] = (uint8_t)(posted >> (56 - 8 * b));
            struct ibv_sge sge = {(uintptr_t)f, 64, mr->lkey};
            struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
                                     .opcode = IBV_WR_SEND,
                                     .send_flags = IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM},
                               *bad;
            int rc = ibv_post_send(qp, &wr, &bad);
            if (rc)
                die_rc("ibv_post_send", rc);
            posted++;
        }
        struct ibv_wc wc[32];
        int n = ibv_poll_cq(cq, 32, wc);
        if (n < 0)
            die("ibv_poll_cq");
        for (int k = 0; k < n; k++) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "rawqp: send completion status %d\n", wc[k].status);
                return 1;
            }
            done++;
        }
    }
    printf("sent %llu\n", (unsigned long long)done);
    if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr))
        die("teardown");
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && !strcmp(argv[1], "recv"))
        return recv_main(argv + 2);
    if (argc == 9 && !strcmp(argv[1], "send"))
        return send_main(argv + 2);
    fprintf(stderr, "usage: rawqp recv DEV DST_MAC DST_IP UDP_PORT EXPECT IDLE_MS\n"
                    "       rawqp send DEV SRC_MAC DST_MAC SRC_IP DST_IP UDP_PORT COUNT\n");
    return 2;
}
