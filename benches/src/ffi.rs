//! The C baselines (`c/baseline.c`, `c/verbs_loop.c`): mirrors of their structures and their
//! functions. The verbs structs they take (`struct ibv_send_wr`, `struct ibv_wc`) are zverbs'
//! binding's ([`zverbs_ffi::types`], checked against the headers by `zverbs-abi`).
//!
//! Sizes are checked against the C compiler's in the tests below.

use std::ffi::c_int;

use zverbs_ffi::types::{ibv_send_wr, ibv_wc};

/// `struct zvb_eth_frame`: a prepared frame of the C baseline.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ZvbEthFrame {
    /// The Ethernet segment and the headers.
    pub segs: [u8; 64],
    /// IPv4 total length of an empty payload.
    pub ip_base: u16,
    /// UDP length of an empty payload.
    pub udp_base: u16,
    /// Where the IPv4 total length goes.
    pub ip_at: u8,
    /// Where the UDP length goes.
    pub udp_at: u8,
}

/// `struct zvb_sq`: a send queue as libmlx5 keeps one.
#[repr(C)]
#[derive(Debug)]
pub struct ZvbSq {
    /// First basic block of the ring.
    pub buf: *mut u8,
    /// One past the last basic block.
    pub qend: *mut u8,
    /// Per basic block: the `wr_id` of the WQE starting there.
    pub wrid: *mut u64,
    /// Per basic block: `head` when that WQE was posted.
    pub wqe_head: *mut u32,
    /// Per basic block: the `ibv_wc_opcode` of a NOP.
    pub wr_data: *mut u32,
    /// The doorbell record (`[1]` is `MLX5_SND_DBR`).
    pub dbrec: *mut u32,
    /// The BlueFlame register: two buffers of `bf_size` bytes.
    pub bf_reg: *mut u8,
    /// BlueFlame buffer size (0: doorbell only).
    pub bf_size: u32,
    /// 0 or `bf_size`.
    pub bf_offset: u32,
    /// Basic blocks in the ring.
    pub wqe_cnt: u32,
    /// Requests that may be outstanding.
    pub max_post: u32,
    /// Gather entries per request.
    pub max_gs: u32,
    /// Inline bytes per request.
    pub max_inline: u32,
    /// Producer counter in basic blocks.
    pub cur_post: u32,
    /// Requests posted.
    pub head: u32,
    /// Requests completed (written by the poller).
    pub tail: u32,
    /// QP number.
    pub qpn: u32,
    /// Receive side: `wr_id` per receive entry.
    pub rq_wrid: *mut u64,
    /// Receive entries.
    pub rq_wqe_cnt: u32,
    /// Receives completed.
    pub rq_tail: u32,
    /// The receive ring: WQEs of data segments.
    pub rq_buf: *mut u8,
    /// log2 of a receive WQE's bytes.
    pub rq_wqe_shift: u32,
    /// Data segments per receive WQE.
    pub rq_max_gs: u32,
}

/// `struct zvb_cq`: a completion queue as libmlx5 keeps one.
#[repr(C)]
#[derive(Debug)]
pub struct ZvbCq {
    /// First CQE.
    pub buf: *mut u8,
    /// The CQ doorbell record (`[0]` is the consumer index).
    pub dbrec: *mut u32,
    /// The QP table the poller looks QP numbers up in.
    pub qps: *mut ZvbQpTable,
    /// `cqe_cnt - 1`.
    pub cqe_mask: u32,
    /// 64 or 128.
    pub cqe_sz: u32,
    /// Consumer index.
    pub cons_index: u32,
}

/// `struct zvb_mprq`: a striding receive work queue as DPDK's receive path keeps one.
#[repr(C)]
#[derive(Debug)]
pub struct ZvbMprq {
    /// The stride buffer.
    pub buf: *mut u8,
    /// The WQ's doorbell record (`[0]`: WQEs posted).
    pub dbrec: *mut u32,
    /// Per WQE, the strides given back.
    pub released: *mut u32,
    /// WQEs - 1.
    pub wqe_mask: u32,
    /// log2 of a stride's bytes.
    pub log_stride: u32,
    /// log2 of a WQE's strides.
    pub log_num: u32,
    /// WQEs posted.
    pub head: u32,
    /// The oldest WQE not posted again.
    pub tail: u32,
    /// CQEs naming strides outside their WQE.
    pub malformed: u32,
}

/// `struct zvb_qp_table` (opaque: allocated and filled by C).
#[repr(C)]
#[derive(Debug)]
pub struct ZvbQpTable {
    _private: [u8; 0],
}

/// `struct zvb_wr_desc`: one verbs request of one gather entry, for [`zvb_wrs_set`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZvbWrDesc {
    /// `wr_id`.
    pub wr_id: u64,
    /// Local address.
    pub addr: u64,
    /// Remote address.
    pub raddr: u64,
    /// Compare value (CS) or addend (FA).
    pub compare_add: u64,
    /// Swap value (CS).
    pub swap: u64,
    /// Local length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Immediate, big-endian as verbs takes it.
    pub imm: u32,
    /// `enum ibv_wr_opcode` (`IBV_WR_*` of [`zverbs_ffi::types`]).
    pub opcode: u32,
    /// `enum ibv_send_flags` (`IBV_SEND_*` of [`zverbs_ffi::types`]).
    pub send_flags: u32,
}

unsafe extern "C" {
    /// Requests that may be posted now.
    pub fn zvb_sq_room(sq: *const ZvbSq) -> u32;
    /// A signaled 1-SGE RDMA WRITE, posted and rung.
    pub fn zvb_post_write(
        sq: *mut ZvbSq,
        addr: u64,
        len: u32,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> c_int;
    /// A signaled RDMA WRITE of `len` inline bytes, posted and rung.
    pub fn zvb_post_write_inline(
        sq: *mut ZvbSq,
        data: *const u8,
        len: u32,
        raddr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> c_int;
    /// A signaled 1-SGE SEND, posted and rung.
    pub fn zvb_post_send(sq: *mut ZvbSq, addr: u64, len: u32, lkey: u32, wr_id: u64) -> c_int;
    /// A signaled 1-SGE RDMA READ, posted and rung.
    pub fn zvb_post_read(
        sq: *mut ZvbSq,
        addr: u64,
        len: u32,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> c_int;
    /// A signaled compare-and-swap, posted and rung.
    #[allow(clippy::too_many_arguments)]
    pub fn zvb_post_cas(
        sq: *mut ZvbSq,
        addr: u64,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
        wr_id: u64,
    ) -> c_int;
    /// A signaled fetch-and-add, posted and rung.
    pub fn zvb_post_faa(
        sq: *mut ZvbSq,
        addr: u64,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        add: u64,
        wr_id: u64,
    ) -> c_int;
    /// A signaled SEND of one frame with `IBV_SEND_IP_CSUM` on a raw packet QP, its first 18
    /// bytes inlined.
    pub fn zvb_post_eth(sq: *mut ZvbSq, addr: u64, len: u32, lkey: u32, wr_id: u64) -> c_int;
    /// Prepares a frame of 42 header bytes (not timed).
    pub fn zvb_prepare_eth_frame(
        f: *mut ZvbEthFrame,
        headers: *const u8,
        ip_total_at: u32,
        udp_len_at: u32,
    );
    /// A prepared frame's SEND with its payload.
    pub fn zvb_post_eth_frame(
        sq: *mut ZvbSq,
        f: *const ZvbEthFrame,
        addr: u64,
        len: u32,
        lkey: u32,
        wr_id: u64,
    ) -> c_int;
    /// A chain of verbs requests, rung once.
    pub fn zvb_post_send_wr(
        sq: *mut ZvbSq,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int;
    /// Polls up to `ne` completions (compiler barrier after the owner check).
    pub fn zvb_poll_cq(cq: *mut ZvbCq, ne: c_int, wc: *mut ibv_wc) -> c_int;
    /// Polls up to `ne` completions (`lfence` after the owner check, as rdma-core on x86).
    pub fn zvb_poll_cq_lfence(cq: *mut ZvbCq, ne: c_int, wc: *mut ibv_wc) -> c_int;
    /// As [`zvb_poll_cq`], each completion's timestamp into `ts` (`ne` entries).
    pub fn zvb_poll_cq_ts(cq: *mut ZvbCq, ne: c_int, wc: *mut ibv_wc, ts: *mut u64) -> c_int;
    /// As [`zvb_poll_cq`], receives scattered into their CQEs copied to their buffers.
    pub fn zvb_poll_cq_scatter(cq: *mut ZvbCq, ne: c_int, wc: *mut ibv_wc) -> c_int;
    /// Receives up to `max` packets of `rq` in place (touch: first 8 bytes and length into
    /// `sum`), giving their strides back and posting finished WQEs again; the packets.
    pub fn zvb_rx_stride(cq: *mut ZvbCq, rq: *mut ZvbMprq, max: c_int, sum: *mut u64) -> c_int;

    /// A new, empty QP table (null when out of memory).
    pub fn zvb_qp_table_new() -> *mut ZvbQpTable;
    /// Adds `sq` under its QP number; 0 or -1.
    pub fn zvb_qp_table_add(t: *mut ZvbQpTable, sq: *mut ZvbSq) -> c_int;
    /// Frees a table.
    pub fn zvb_qp_table_free(t: *mut ZvbQpTable);

    /// `n` chained requests of one gather entry each (null when out of memory).
    pub fn zvb_wrs_new(n: u32) -> *mut ibv_send_wr;
    /// Fills request `i` of a chain.
    pub fn zvb_wrs_set(wrs: *mut ibv_send_wr, i: u32, d: *const ZvbWrDesc);
    /// Frees a chain.
    pub fn zvb_wrs_free(wrs: *mut ibv_send_wr);
    /// `sizeof` of the structures mirrored here (0: sq, 1: cq, 2: ibv_wc, 3: wr_desc).
    pub fn zvb_sizeof(which: c_int) -> usize;
}

/// `struct zvb_vloop` of `c/verbs_loop.c` (opaque): two RC QPs of one device connected to
/// each other, driven with raw `ibv_post_send` / `ibv_poll_cq`.
#[repr(C)]
#[derive(Debug)]
pub struct ZvbVloop {
    _private: [u8; 0],
}

unsafe extern "C" {
    /// Opens device `dev` (null: the first), port `port`, GID index `gid_index` (-1: no GRH)
    /// and connects two RC QPs to each other for RDMA WRITEs of `size` bytes. 0, or -1 with a
    /// NUL-terminated message in `err`.
    pub fn zvb_vloop_open(
        dev: *const std::ffi::c_char,
        port: c_int,
        gid_index: c_int,
        size: u32,
        out: *mut *mut ZvbVloop,
        err: *mut std::ffi::c_char,
        errlen: usize,
    ) -> c_int;
    /// `n` iterations of: post one signaled RDMA WRITE, poll until its completion. 0 or -1.
    pub fn zvb_vloop_run(l: *mut ZvbVloop, n: u64) -> c_int;
    /// Destroys what `zvb_vloop_open` created (null: nothing).
    pub fn zvb_vloop_close(l: *mut ZvbVloop);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_have_the_c_sizes() {
        // SAFETY: a pure function of its argument.
        let c = |w| unsafe { zvb_sizeof(w) };
        assert_eq!(c(0), size_of::<ZvbSq>());
        assert_eq!(c(1), size_of::<ZvbCq>());
        assert_eq!(c(2), size_of::<ibv_wc>());
        assert_eq!(c(3), size_of::<ZvbWrDesc>());
        assert_eq!(c(4), size_of::<ZvbMprq>());
    }
}
