//! Ordinary memory laid out as one mlx5 QP and its CQ: what the benchmarks post into and poll
//! from, for both the Rust queues and the C baselines.
//!
//! The send ring, the doorbell records, the BlueFlame register and the CQE ring are leaked heap
//! memory (benchmarks build a handful), reached only through raw pointers, as a device's is.

use std::ptr::NonNull;

use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};

/// 64-byte aligned memory block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Block(pub [u8; 64]);

fn leak<T>(v: Vec<T>) -> NonNull<T> {
    NonNull::from(Box::leak(v.into_boxed_slice())).cast()
}

/// The queue memory of one QP (send side only) and its CQ.
#[derive(Clone, Copy, Debug)]
pub struct QpMem {
    /// The send ring.
    pub sq: NonNull<u8>,
    /// Basic blocks in the send ring.
    pub blocks: u32,
    /// The QP doorbell record (two big-endian words: receive, send).
    pub dbrec: NonNull<u32>,
    /// The BlueFlame register: two buffers of `bf_size` bytes (8 bytes when 0).
    pub bf: NonNull<u64>,
    /// BlueFlame buffer size (0: doorbell only).
    pub bf_size: u32,
    /// The CQE ring.
    pub cq: NonNull<u8>,
    /// CQEs in the ring.
    pub cqes: u32,
    /// The CQ doorbell record.
    pub cq_dbrec: NonNull<u32>,
}

impl QpMem {
    /// `blocks` send basic blocks, `cqes` 64-byte CQEs (initialised invalid, as libmlx5 does),
    /// BlueFlame buffers of `bf_size` bytes (0: doorbell only). Counts must be powers of two.
    pub fn new(blocks: u32, cqes: u32, bf_size: u32) -> Self {
        let mut cq = vec![Block([0; 64]); cqes as usize];
        for c in &mut cq {
            c.0[63] = 0xf0;
        }
        Self {
            sq: leak(vec![Block([0; 64]); blocks as usize]).cast(),
            blocks,
            dbrec: leak(vec![0u32; 2]),
            // Whole blocks, 64-byte aligned as a BlueFlame buffer is in its UAR page.
            bf: leak(vec![
                Block([0; 64]);
                (2 * bf_size as usize).div_ceil(64).max(1)
            ])
            .cast(),
            bf_size,
            cq: leak(cq).cast(),
            cqes,
            cq_dbrec: leak(vec![0u32; 2]),
        }
    }

    /// The layout `mlx5dv_init_obj` would report for this memory as QP `qpn`.
    pub fn qp_layout(&self, qpn: u32) -> QpLayout {
        QpLayout {
            qpn,
            dbrec: self.dbrec,
            sq: WqLayout {
                buf: self.sq,
                wqe_cnt: self.blocks,
                stride: 64,
            },
            rq: WqLayout {
                buf: NonNull::dangling(),
                wqe_cnt: 0,
                stride: 16,
            },
            bf: BfLayout {
                reg: self.bf.cast(),
                size: self.bf_size,
            },
        }
    }

    /// The layout of the CQ.
    pub fn cq_layout(&self) -> CqLayout {
        CqLayout {
            buf: self.cq,
            dbrec: self.cq_dbrec,
            cqe_cnt: self.cqes,
            cqe_size: 64,
            cqn: 1,
        }
    }

    /// Writes requester CQEs at consumer counters `ci..ci + n`, the `i`th naming QP `qpn` and
    /// the WQE starting at basic block `wqe(i)`, as the device writes them (with the owner bit
    /// of their pass).
    ///
    /// # Safety
    ///
    /// No poller reads these CQEs during the call.
    pub unsafe fn write_cqes(&self, qpn: u32, ci: u32, n: u32, wqe: impl Fn(u32) -> u16) {
        for i in 0..n {
            let at = ci.wrapping_add(i);
            let mut c = [0u8; 64];
            c[56..60].copy_from_slice(&((u32::from(opcode::RDMA_WRITE) << 24) | qpn).to_be_bytes());
            c[60..62].copy_from_slice(&wqe(i).to_be_bytes());
            c[63] = ((at / self.cqes) & 1) as u8;
            // SAFETY: the slot is in the leaked ring and (caller) no poller reads it now.
            unsafe {
                self.cq
                    .cast::<Block>()
                    .add((at % self.cqes) as usize)
                    .write(Block(c))
            };
        }
    }

    /// Writes `n` successful receive CQEs (`RESP_SEND`, `byte_cnt` 64) of QP `qpn` at consumer
    /// counters `ci..ci + n`, as the device writes them: one by one, or, with `session`, as
    /// compressed sessions of `session` completions each (a title CQE and its arrays of
    /// mini-CQEs, `n` a multiple of `session`, no session across the ring's end).
    ///
    /// # Safety
    ///
    /// No poller reads these CQEs during the call.
    pub unsafe fn write_recv_cqes(&self, qpn: u32, ci: u32, n: u32, session: Option<u32>) {
        use zverbs_mlx5dv::prm::mini::{FORMAT_MASK, PER_ARRAY, array_entry};
        let put = |at: u32, c: [u8; 64]| {
            // SAFETY: the slot is in the leaked ring and (caller) no poller reads it now.
            unsafe {
                self.cq
                    .cast::<Block>()
                    .add((at % self.cqes) as usize)
                    .write(Block(c))
            };
        };
        let cqe = |at: u32, byte_cnt: u32, format: u8| {
            let mut c = [0u8; 64];
            c[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
            c[56..60].copy_from_slice(&qpn.to_be_bytes());
            c[60..62].copy_from_slice(&(at as u16).to_be_bytes());
            c[63] = (2 << 4) | format | ((at / self.cqes) & 1) as u8;
            c
        };
        let Some(size) = session else {
            for i in 0..n {
                let at = ci.wrapping_add(i);
                put(at, cqe(at, 64, 0));
            }
            return;
        };
        for s in 0..n / size {
            let title = ci.wrapping_add(s * size);
            for k in 0..size.div_ceil(PER_ARRAY as u32) {
                let mut a = [0u8; 64];
                for m in 0..PER_ARRAY {
                    if k as usize * PER_ARRAY + m < size as usize {
                        a[m * 8 + 4..m * 8 + 8].copy_from_slice(&64u32.to_be_bytes());
                    }
                }
                put(title.wrapping_add(array_entry(k)), a);
            }
            put(title, cqe(title, size, FORMAT_MASK));
        }
    }

    /// Writes `n` successful receive CQEs (`RESP_SEND`) of QP `qpn` at consumer counters
    /// `ci..ci + n`, each for a message of `data.len()` bytes (at most 32): with `scatter`, the
    /// data in the CQE's first 32 bytes and `INLINE_SCATTER_32` in `op_own`, as a ConnectX
    /// writes a receive of a QP created allowing scatter-to-CQE; without, the CQE alone (the
    /// device wrote the data into the receive buffer).
    ///
    /// # Safety
    ///
    /// No poller reads these CQEs during the call.
    pub unsafe fn write_small_recv_cqes(
        &self,
        qpn: u32,
        ci: u32,
        n: u32,
        data: &[u8],
        scatter: bool,
    ) {
        use zverbs_mlx5dv::prm::cqe::INLINE_SCATTER_32;
        assert!(
            data.len() <= 32,
            "at most 32 bytes scatter into a 64-byte CQE"
        );
        for i in 0..n {
            let at = ci.wrapping_add(i);
            let mut c = [0u8; 64];
            if scatter {
                c[..data.len()].copy_from_slice(data);
            }
            c[44..48].copy_from_slice(&(data.len() as u32).to_be_bytes());
            c[56..60].copy_from_slice(&qpn.to_be_bytes());
            c[60..62].copy_from_slice(&(at as u16).to_be_bytes());
            let format = if scatter { INLINE_SCATTER_32 } else { 0 };
            c[63] = (2 << 4) | format | ((at / self.cqes) & 1) as u8;
            // SAFETY: the slot is in the leaked ring and (caller) no poller reads it now.
            unsafe {
                self.cq
                    .cast::<Block>()
                    .add((at % self.cqes) as usize)
                    .write(Block(c))
            };
        }
    }

    /// The `op_own` byte of the CQE at consumer counter `ci`.
    pub fn op_own(&self, ci: u32) -> u8 {
        // SAFETY: byte 63 of a slot of the leaked ring; the fixtures are single-threaded.
        unsafe {
            self.cq
                .add((ci % self.cqes) as usize * 64 + 63)
                .read_volatile()
        }
    }

    /// The send ring's bytes.
    pub fn sq_bytes(&self) -> Vec<u8> {
        // SAFETY: the ring holds `blocks` blocks; no one writes it during the copy (the
        // fixtures are single-threaded).
        unsafe { bytes(self.sq, self.blocks as usize * 64) }
    }

    /// Zeroes the bytes after the WQE that starts at block `block` (its `ds` units) to the
    /// end of its last block, which the device never reads: for comparing rings written by
    /// posts that leave those bytes stale and posts that zero them.
    pub fn clear_past_wqe(&self, block: u32) {
        let ring = self.sq_bytes();
        let at = (block % self.blocks) as usize * 64;
        let ds = usize::from(ring[at + 7] & 0x3f);
        let end = ds.div_ceil(4) * 64;
        for i in ds * 16..end {
            let pos = (at + i) % ring.len();
            // SAFETY: `pos` is inside the ring of `blocks` blocks; the fixtures are
            // single-threaded, and no device reads the ring.
            unsafe { self.sq.as_ptr().add(pos).write(0) };
        }
    }

    /// The BlueFlame register's bytes.
    pub fn bf_bytes(&self) -> Vec<u8> {
        // SAFETY: as above, for the register's length.
        unsafe { bytes(self.bf.cast(), (2 * self.bf_size as usize).max(8)) }
    }

    /// The send doorbell record as the counter it encodes.
    pub fn sq_dbrec(&self) -> u32 {
        // SAFETY: word 1 of the leaked two-word record.
        u32::from_be(unsafe { self.dbrec.add(1).read_volatile() })
    }

    /// The CQ doorbell record as the counter it encodes.
    pub fn cq_dbrec(&self) -> u32 {
        // SAFETY: word 0 of the leaked record.
        u32::from_be(unsafe { self.cq_dbrec.read_volatile() })
    }
}

/// log2 of a striding queue's strides per WQE in the packet cases (64 strides).
pub const STRIDE_LOG_NUM: u32 = 6;
/// log2 of its stride size (64 bytes).
pub const STRIDE_LOG_SIZE: u32 = 6;
/// Its WQEs.
pub const STRIDE_WQES: u32 = 16;
/// Bytes of each packet of the packet cases (one stride each: a WQE is posted again every 64
/// packets).
pub const PACKET_LEN: u32 = 60;

/// A striding work queue's memory (its ring of 32-byte WQEs, its one-word doorbell record, its
/// stride buffer with a packet already in every stride) and where the device puts the next
/// packet: what the packet cases receive from, on both sides.
#[derive(Debug)]
pub struct StrideMem {
    /// The WQE ring.
    pub ring: NonNull<u8>,
    /// The doorbell record.
    pub dbrec: NonNull<u32>,
    /// The stride buffer, `STRIDE_WQES` WQEs of `2^(STRIDE_LOG_NUM + STRIDE_LOG_SIZE)` bytes.
    pub buf: NonNull<u8>,
    /// The device's next WQE (free-running) and stride.
    next: (u32, u32),
}

impl Default for StrideMem {
    fn default() -> Self {
        Self::new()
    }
}

impl StrideMem {
    /// The ring, record and buffer (leaked), the buffer's strides each holding a packet.
    pub fn new() -> Self {
        let bytes = (STRIDE_WQES << (STRIDE_LOG_NUM + STRIDE_LOG_SIZE)) as usize;
        let mut b = vec![Block([0; 64]); bytes / 64];
        for (i, blk) in b.iter_mut().enumerate() {
            for (k, x) in blk.0.iter_mut().enumerate() {
                *x = (i * 7 + k) as u8;
            }
        }
        Self {
            ring: leak(vec![Block([0; 64]); (STRIDE_WQES / 2) as usize]).cast(),
            dbrec: leak(vec![0u32; 2]),
            buf: leak(b).cast(),
            next: (0, 0),
        }
    }

    /// Bytes of the stride buffer.
    pub fn buf_len(&self) -> usize {
        (STRIDE_WQES << (STRIDE_LOG_NUM + STRIDE_LOG_SIZE)) as usize
    }

    /// The WQ's doorbell record as the count it encodes.
    pub fn dbrec(&self) -> u32 {
        // SAFETY: word 0 of the leaked record.
        u32::from_be(unsafe { self.dbrec.read_volatile() })
    }

    /// Writes `n` CQEs of packets of [`PACKET_LEN`] bytes, one stride each, at consumer
    /// counters `ci..ci + n` of `cq`'s ring, as the device writes a striding queue's: `wqe_id`,
    /// the stride index in `wqe_counter`, the striding `byte_cnt`, the flow tag (1), the
    /// queue's user index and the checksum bits.
    ///
    /// # Safety
    ///
    /// No poller reads these CQEs during the call.
    pub unsafe fn write_cqes(&mut self, cq: &QpMem, ci: u32, n: u32) {
        for i in 0..n {
            let at = ci.wrapping_add(i);
            let (wqe, stride) = self.next;
            let mut c = [0u8; 64];
            c[2..4].copy_from_slice(&((wqe % STRIDE_WQES) as u16).to_be_bytes());
            c[28] = 0x7;
            c[32..36].copy_from_slice(&0x400u32.to_be_bytes());
            c[44..48].copy_from_slice(&((1 << 16) | PACKET_LEN).to_be_bytes());
            c[56..60].copy_from_slice(&1u32.to_be_bytes());
            c[60..62].copy_from_slice(&(stride as u16).to_be_bytes());
            c[63] = (2 << 4) | ((at / cq.cqes) & 1) as u8;
            // SAFETY: the slot is in the leaked ring and (caller) no poller reads it now.
            unsafe {
                cq.cq
                    .cast::<Block>()
                    .add((at % cq.cqes) as usize)
                    .write(Block(c))
            };
            self.next = if stride + 1 == 1 << STRIDE_LOG_NUM {
                (wqe + 1, 0)
            } else {
                (wqe, stride + 1)
            };
        }
    }
}

/// Copies `len` bytes at `p`.
///
/// # Safety
///
/// `p..p+len` is readable and not written during the call.
unsafe fn bytes(p: NonNull<u8>, len: usize) -> Vec<u8> {
    (0..len)
        // SAFETY: (caller) in bounds.
        .map(|i| unsafe { p.add(i).read_volatile() })
        .collect()
}
