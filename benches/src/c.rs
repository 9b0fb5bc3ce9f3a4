//! The C side: the baselines of `c/baseline.c` over [`QpMem`], sized and configured like the
//! zverbs queues they are compared with.

use std::ptr::null_mut;

use crate::ffi::{self, ZvbCq, ZvbMprq, ZvbQpTable, ZvbSq, ZvbWrDesc};
use crate::mem::{Block, QpMem, STRIDE_LOG_NUM, STRIDE_LOG_SIZE, STRIDE_WQES, StrideMem};
use crate::ours::{CAPS, SMALL, SMALL_MSG};
use crate::{Fixture, QPN};
use zverbs_ffi::types::{ibv_send_wr, ibv_wc};

/// A send queue and CQ driven by the C baselines over [`QpMem`].
pub struct CBase {
    /// The memory.
    pub mem: QpMem,
    /// The send queue (boxed: C keeps pointers to it in the QP table).
    pub sq: Box<ZvbSq>,
    /// The completion queue.
    pub cq: Box<ZvbCq>,
    table: *mut ZvbQpTable,
}

impl CBase {
    /// Queues over `mem` (used by nothing else) for QP [`QPN`], with [`CAPS`]. As libmlx5
    /// sizes a QP, `max_post` is the ring size over the largest WQE the capabilities allow.
    pub fn new(mem: QpMem) -> Self {
        Self::with_qpn(mem, QPN)
    }

    /// As [`CBase::new`], for QP `qpn`.
    pub fn with_qpn(mem: QpMem, qpn: u32) -> Self {
        let max_ds =
            2 + (CAPS.max_send_sge as usize).max((CAPS.max_inline_data as usize + 4).div_ceil(16));
        let max_blocks = max_ds.div_ceil(4) as u32;
        let n = mem.blocks as usize;
        let buf = mem.sq.as_ptr();
        let mut sq = Box::new(ZvbSq {
            buf,
            // SAFETY: one past the end of the leaked ring of `blocks` blocks.
            qend: unsafe { buf.add(mem.blocks as usize * 64) },
            wrid: leak_array(0u64, n),
            wqe_head: leak_array(0u32, n),
            wr_data: leak_array(0u32, n),
            dbrec: mem.dbrec.as_ptr(),
            bf_reg: mem.bf.as_ptr().cast(),
            bf_size: mem.bf_size,
            bf_offset: 0,
            wqe_cnt: mem.blocks,
            max_post: mem.blocks / max_blocks,
            max_gs: CAPS.max_send_sge,
            max_inline: CAPS.max_inline_data,
            cur_post: 0,
            head: 0,
            tail: 0,
            qpn,
            rq_wrid: null_mut(),
            rq_wqe_cnt: 0,
            rq_tail: 0,
            rq_buf: null_mut(),
            rq_wqe_shift: 0,
            rq_max_gs: 0,
        });
        // SAFETY: allocation only.
        let table = unsafe { ffi::zvb_qp_table_new() };
        assert!(!table.is_null(), "out of memory");
        // SAFETY: `table` is live and `sq` is boxed, so its address is stable for as long as
        // the table (both live as long as this value).
        assert_eq!(unsafe { ffi::zvb_qp_table_add(table, &mut *sq) }, 0);
        let cq = Box::new(ZvbCq {
            buf: mem.cq.as_ptr(),
            dbrec: mem.cq_dbrec.as_ptr(),
            qps: table,
            cqe_mask: mem.cqes - 1,
            cqe_sz: 64,
            cons_index: 0,
        });
        Self { mem, sq, cq, table }
    }
}

impl Drop for CBase {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; the CQ that points at it is dropped with this value.
        unsafe { ffi::zvb_qp_table_free(self.table) };
    }
}

impl Fixture for CBase {
    fn room(&mut self, blocks_per_call: u32, requests_per_call: u32) -> u64 {
        // SAFETY: a live queue.
        let requests = unsafe { ffi::zvb_sq_room(&*self.sq) };
        // `sq_full` refuses the request that would make `head - tail` reach `max_post`.
        // The ring holds `max_post` of the largest WQEs, so blocks never run out first.
        let _ = blocks_per_call;
        u64::from(requests / requests_per_call)
    }

    fn complete_all(&mut self, _requests: u64) {
        // What the poller writes once the last request's completion is polled.
        self.sq.tail = self.sq.head;
    }

    fn write_cqes(&mut self, n: u32) {
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            self.mem
                .write_cqes(self.sq.qpn, self.cq.cons_index, n, |i| (i % 8) as u16)
        };
    }

    fn cq_room(&self) -> u32 {
        self.mem.cqes
    }
}

/// What the receive CQEs of a [`CRecv`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvKind {
    /// `RESP_SEND` of 64 bytes, the data in the receive buffers (what `poll16_recv` polls).
    Plain,
    /// `RESP_SEND` of [`SMALL`] bytes, the device wrote the buffer.
    Small,
    /// `RESP_SEND` of [`SMALL`] bytes scattered into the CQE (`INLINE_SCATTER_32`).
    Scattered,
}

/// A CQ serving one receive queue, driven by the C baseline over [`QpMem`]: the same receive
/// CQEs as the zverbs receive fixtures (`OursRecv`, `OursSmall`), polled by a poller that
/// reads the receive ring's `wr_id` (and copies scattered data into the receive WQE's buffer),
/// as libmlx5's does.
pub struct CRecv {
    /// The queues (the send side unused).
    pub base: CBase,
    kind: RecvKind,
    /// Receives posted (the fixture's producer counter).
    head: u32,
    /// The receive buffers, [`SMALL`] bytes each, one per ring entry (leaked).
    bufs: *mut u8,
}

impl CRecv {
    /// A receive ring of as many 16-byte (1-SGE) entries as `mem`'s CQ has CQEs, with its
    /// `wr_id` array and buffers.
    pub fn new(mem: QpMem, kind: RecvKind) -> Self {
        let n = mem.cqes as usize;
        let mut base = CBase::new(mem);
        base.sq.rq_wrid = leak_array(0u64, n);
        base.sq.rq_wqe_cnt = n as u32;
        base.sq.rq_buf = leak_array(Block([0; 64]), n.div_ceil(4)).cast();
        base.sq.rq_wqe_shift = 4;
        base.sq.rq_max_gs = 1;
        let bufs = leak_array(Block([0; 64]), (n * SMALL).div_ceil(64)).cast();
        Self {
            base,
            kind,
            head: 0,
            bufs,
        }
    }

    /// The buffer of receive ring entry `i`.
    pub fn buf(&self, i: u32) -> [u8; SMALL] {
        let at = (i % self.base.mem.cqes) as usize * SMALL;
        // SAFETY: in the leaked buffers; the fixtures are single-threaded.
        core::array::from_fn(|k| unsafe { self.bufs.add(at + k).read_volatile() })
    }
}

impl Fixture for CRecv {
    fn room(&mut self, _: u32, _: u32) -> u64 {
        0
    }

    fn complete_all(&mut self, _: u64) {}

    /// Posts `n` receives (the `wr_id` and, with data, the data segment of each, as libmlx5's
    /// `post_recv` writes them), then writes their CQEs as the device would.
    fn write_cqes(&mut self, n: u32) {
        let entries = self.base.mem.cqes;
        for _ in 0..n {
            let slot = (self.head % entries) as usize;
            let buf = (slot * SMALL) as u64 + self.bufs as u64;
            let fill = if self.kind == RecvKind::Small {
                SMALL_MSG
            } else {
                [0; SMALL]
            };
            let mut seg = [0u8; 16];
            seg[0..4].copy_from_slice(&(SMALL as u32).to_be_bytes());
            seg[4..8].copy_from_slice(&0x1100u32.to_be_bytes());
            seg[8..16].copy_from_slice(&buf.to_be_bytes());
            // SAFETY: entry `slot` of the leaked wr_id array, ring and buffers, which only
            // this fixture and (after this returns, on this thread) the poller use.
            unsafe {
                self.base.sq.rq_wrid.add(slot).write(u64::from(self.head));
                self.base
                    .sq
                    .rq_buf
                    .add(slot * 16)
                    .cast::<[u8; 16]>()
                    .write(seg);
                self.bufs
                    .add(slot * SMALL)
                    .cast::<[u8; SMALL]>()
                    .write_volatile(fill);
            }
            self.head = self.head.wrapping_add(1);
        }
        let (qpn, ci) = (self.base.sq.qpn, self.base.cq.cons_index);
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            match self.kind {
                RecvKind::Plain => self.base.mem.write_recv_cqes(qpn, ci, n, None),
                RecvKind::Small | RecvKind::Scattered => self.base.mem.write_small_recv_cqes(
                    qpn,
                    ci,
                    n,
                    &SMALL_MSG,
                    self.kind == RecvKind::Scattered,
                ),
            }
        }
    }

    fn cq_room(&self) -> u32 {
        self.base.mem.cqes
    }
}

/// `n` copies of `v` in leaked memory (the fixtures live as long as the benchmark).
fn leak_array<T: Clone>(v: T, n: usize) -> *mut T {
    Box::leak(vec![v; n].into_boxed_slice()).as_mut_ptr()
}

/// A chain of `n` verbs requests (one gather entry each), built by C, freed on drop.
pub struct WrChain {
    head: *mut ibv_send_wr,
}

impl WrChain {
    /// A chain of `descs.len()` requests.
    pub fn new(descs: &[ZvbWrDesc]) -> Self {
        // SAFETY: allocation only.
        let head = unsafe { ffi::zvb_wrs_new(descs.len() as u32) };
        assert!(!head.is_null(), "out of memory");
        for (i, d) in descs.iter().enumerate() {
            // SAFETY: `i` is below the chain's length.
            unsafe { ffi::zvb_wrs_set(head, i as u32, d) };
        }
        Self { head }
    }

    /// The first request.
    pub fn head(&self) -> *mut ibv_send_wr {
        self.head
    }
}

impl Drop for WrChain {
    fn drop(&mut self) {
        // SAFETY: allocated by `zvb_wrs_new`.
        unsafe { ffi::zvb_wrs_free(self.head) };
    }
}

/// A zeroed `ibv_wc` array for polling.
pub fn wcs<const N: usize>() -> [ibv_wc; N] {
    [ibv_wc::default(); N]
}

/// A CQ serving one striding receive work queue, driven by the C baseline over [`QpMem`] and
/// a [`StrideMem`]: the same CQEs as the zverbs fixture (`OursStride`), the packets received
/// in place by [`ffi::zvb_rx_stride`].
pub struct CStride {
    /// The CQ (the send side unused).
    pub base: CBase,
    /// The striding queue.
    pub rq: Box<ZvbMprq>,
    /// Its memory.
    pub smem: StrideMem,
}

impl CStride {
    /// The queue over a new [`StrideMem`], all its WQEs posted, polled from `mem`'s CQ.
    pub fn new(mem: QpMem) -> Self {
        let base = CBase::new(mem);
        let smem = StrideMem::new();
        let rq = Box::new(ZvbMprq {
            buf: smem.buf.as_ptr(),
            dbrec: smem.dbrec.as_ptr(),
            released: leak_array(0u32, STRIDE_WQES as usize),
            wqe_mask: STRIDE_WQES - 1,
            log_stride: STRIDE_LOG_SIZE,
            log_num: STRIDE_LOG_NUM,
            head: STRIDE_WQES,
            tail: 0,
            malformed: 0,
        });
        // Every WQE posted (their data segments are what the zverbs queue writes; nothing
        // reads them here).
        // SAFETY: word 0 of the leaked record.
        unsafe { smem.dbrec.write_volatile(STRIDE_WQES.to_be()) };
        Self { base, rq, smem }
    }
}

impl Fixture for CStride {
    fn room(&mut self, _: u32, _: u32) -> u64 {
        0
    }

    fn complete_all(&mut self, _: u64) {}

    fn write_cqes(&mut self, n: u32) {
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            self.smem
                .write_cqes(&self.base.mem, self.base.cq.cons_index, n)
        };
    }

    fn cq_room(&self) -> u32 {
        self.base.mem.cqes
    }
}
