//! Safe wrappers over the C probe: what the tests call.

use std::ffi::CStr;

use zverbs_core::Sge;

use crate::ffi::{self, ZvAvFields, ZvCqeFields, ZvDgramArgs, ZvRq, ZvSq, ZvSrq, ZvWr, qpt};
use crate::mem::DeviceMem;

/// The fact table: `(C expression, value)` for every size, offset and constant the Rust side
/// relies on, computed by the C compiler from rdma-core's headers.
pub fn facts() -> Vec<(&'static str, u64)> {
    let mut len = 0usize;
    // SAFETY: the probe writes the length and returns a static array of that many entries.
    let table = unsafe { std::slice::from_raw_parts(ffi::zv_facts(&mut len), len) };
    table
        .iter()
        .map(|f| {
            // SAFETY: each name is a static NUL-terminated string literal of the probe.
            let name = unsafe { CStr::from_ptr(f.name) };
            (name.to_str().expect("fact names are ASCII"), f.value)
        })
        .collect()
}

/// The value of the fact named `name`.
///
/// # Panics
///
/// When the table has no such entry.
pub fn fact(name: &str) -> u64 {
    facts()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fact {name:?} in the C probe"))
        .1
}

/// The arguments of `mlx5dv_set_ctrl_seg`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlArgs {
    /// The WQE index (`pi`).
    pub pi: u16,
    /// The mlx5 opcode.
    pub opcode: u8,
    /// The opcode modifier.
    pub opmod: u8,
    /// The QP number.
    pub qpn: u32,
    /// `fm_ce_se`.
    pub fm_ce_se: u8,
    /// Size in 16-byte units.
    pub ds: u8,
    /// `signature`.
    pub signature: u8,
    /// The immediate, host order (the helper gets it big-endian, as verbs' `imm_data`).
    pub imm: u32,
}

/// `mlx5dv_set_ctrl_seg(buf, …)`.
pub fn set_ctrl_seg(buf: &mut [u8; 16], a: &CtrlArgs) {
    // SAFETY: `buf` is 16 writable bytes, a whole control segment.
    unsafe {
        ffi::zv_set_ctrl_seg(
            buf.as_mut_ptr().cast(),
            a.pi,
            a.opcode,
            a.opmod,
            a.qpn,
            a.fm_ce_se,
            a.ds,
            a.signature,
            a.imm,
        )
    }
}

/// `mlx5dv_x86_set_ctrl_seg(buf, …)`, the header's SSSE3 variant (run on a 16-byte aligned
/// copy of `buf`, as the helper needs); `false` (and nothing written) when this is not an
/// x86_64 CPU with SSSE3.
pub fn set_ctrl_seg_x86(buf: &mut [u8; 16], a: &CtrlArgs) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("ssse3") {
            // The helper stores one aligned 128-bit word, as a segment in a ring is.
            #[repr(C, align(16))]
            struct Aligned([u8; 16]);
            let mut seg = Aligned(*buf);
            // SAFETY: `seg` is 16 writable, 16-byte aligned bytes; the CPU has SSSE3 (checked
            // above).
            unsafe {
                ffi::zv_x86_set_ctrl_seg(
                    seg.0.as_mut_ptr().cast(),
                    a.pi,
                    a.opcode,
                    a.opmod,
                    a.qpn,
                    a.fm_ce_se,
                    a.ds,
                    a.signature,
                    a.imm,
                )
            };
            *buf = seg.0;
            return true;
        }
    }
    let _ = (buf, a);
    false
}

/// `mlx5dv_set_data_seg(buf, length, lkey, addr)`.
pub fn set_data_seg(buf: &mut [u8; 16], length: u32, lkey: u32, addr: u64) {
    // SAFETY: `buf` is 16 writable bytes, a whole data segment.
    unsafe { ffi::zv_set_data_seg(buf.as_mut_ptr().cast(), length, lkey, addr) }
}

/// `struct mlx5_wqe_raddr_seg` filled field by field (reserved word zero).
pub fn set_raddr_seg(buf: &mut [u8; 16], raddr: u64, rkey: u32) {
    // SAFETY: `buf` is 16 writable bytes, a whole remote address segment.
    unsafe { ffi::zv_set_raddr_seg(buf.as_mut_ptr().cast(), raddr, rkey) }
}

/// `struct mlx5_wqe_atomic_seg` filled field by field.
pub fn set_atomic_seg(buf: &mut [u8; 16], swap_add: u64, compare: u64) {
    // SAFETY: `buf` is 16 writable bytes, a whole atomic segment.
    unsafe { ffi::zv_set_atomic_seg(buf.as_mut_ptr().cast(), swap_add, compare) }
}

/// `mlx5dv_set_dgram_seg(buf, …)`.
pub fn set_dgram_seg(buf: &mut [u8; 48], a: &ZvDgramArgs) {
    // SAFETY: `buf` is 48 writable bytes, a whole datagram segment; `a` is a valid struct.
    unsafe { ffi::zv_set_dgram_seg(buf.as_mut_ptr().cast(), a) }
}

/// The datagram segment libmlx5's `set_datagram_seg` writes for the address vector `av`, the
/// remote QPN and the Q_Key.
pub fn set_datagram_from_av(buf: &mut [u8; 48], av: &[u8; 48], remote_qpn: u32, qkey: u32) {
    // SAFETY: `buf` is 48 writable bytes, `av` 48 readable ones, not overlapping.
    unsafe {
        ffi::zv_set_datagram_from_av(
            buf.as_mut_ptr().cast(),
            av.as_ptr().cast(),
            remote_qpn,
            qkey,
        )
    }
}

/// The datagram segment libmlx5's `mlx5dv_wr_set_dc_addr` writes for a DC initiator's send:
/// the address vector `av` with the DCT number or-ed into `dqp_dct` and the access key.
pub fn set_dc_datagram_from_av(buf: &mut [u8; 48], av: &[u8; 48], dctn: u32, dc_key: u64) {
    // SAFETY: `buf` is 48 writable bytes, `av` 48 readable ones, not overlapping.
    unsafe {
        ffi::zv_set_dc_datagram_from_av(buf.as_mut_ptr().cast(), av.as_ptr().cast(), dctn, dc_key)
    }
}

/// Every field of the address vector `av`, read through `struct mlx5_wqe_av`.
pub fn read_av(av: &[u8; 48]) -> ZvAvFields {
    let mut out = ZvAvFields::default();
    // SAFETY: `av` is 48 readable bytes, `out` a writable `struct zv_av_fields`.
    unsafe { ffi::zv_read_av(av.as_ptr().cast(), &mut out) };
    out
}

/// One receive of `sgl` into WQE `idx` of the shared receive ring `ring` (WQEs of `stride`
/// bytes), as libmlx5's `mlx5_post_srq_recv` writes it: the WQE's `next_wqe_index` (where the
/// next receive goes), or the errno.
///
/// # Panics
///
/// When WQE `idx` does not lie inside `ring`.
pub fn post_srq_recv(ring: &mut [u8], stride: u32, idx: u32, sgl: &[Sge]) -> Result<u16, i32> {
    let end = (idx as usize + 1) * stride as usize;
    assert!(
        stride >= 16 && end <= ring.len(),
        "WQE {idx} outside the ring"
    );
    let mut next = 0u16;
    // SAFETY: WQE `idx` lies inside `ring` (checked above), which is writable; the list is
    // valid for the call and only its fields are read.
    let rc = unsafe {
        ffi::zv_post_srq_recv(
            ring.as_mut_ptr(),
            stride,
            idx,
            sgl.as_ptr(),
            sgl.len() as u32,
            &mut next,
        )
    };
    if rc == 0 { Ok(next) } else { Err(rc) }
}

/// Links WQEs `start..end` of the shared receive ring `ring` as libmlx5's `set_srq_buf_ll`.
///
/// # Panics
///
/// When WQE `end - 1` does not lie inside `ring`.
pub fn srq_link(ring: &mut [u8], stride: u32, start: u32, end: u32) {
    assert!(stride >= 16 && end as usize * stride as usize <= ring.len());
    // SAFETY: every WQE written (below `end`) lies inside `ring` (checked above).
    unsafe { ffi::zv_srq_link(ring.as_mut_ptr(), stride, start, end) }
}

/// `(next_wqe_index, signature)` of the next segment `seg`, read through
/// `struct mlx5_wqe_srq_next_seg`.
pub fn read_srq_next(seg: &[u8; 16]) -> (u16, u8) {
    let (mut next, mut sig) = (0u16, 0u8);
    // SAFETY: `seg` is 16 readable bytes; the outputs are writable locals.
    unsafe { ffi::zv_read_srq_next(seg.as_ptr().cast(), &mut next, &mut sig) };
    (next, sig)
}

/// Every field of the CQE `cqe`, read through `struct mlx5_cqe64`, `struct mlx5_err_cqe` and
/// the `mlx5dv_get_cqe_*` helpers.
pub fn read_cqe(cqe: &[u8; 64]) -> ZvCqeFields {
    let mut out = ZvCqeFields::default();
    // SAFETY: `cqe` is 64 readable bytes, `out` a writable `struct zv_cqe_fields`.
    unsafe { ffi::zv_read_cqe(cqe.as_ptr().cast(), &mut out) };
    out
}

/// libmlx5's `ibv_wc_status` number for an error syndrome.
pub fn wc_status_of_syndrome(syndrome: u8) -> u32 {
    ffi::zv_wc_status_of_syndrome(syndrome)
}

/// A send request for [`CSq::post`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CRequest<'a> {
    /// One of [`ffi::op`].
    pub op: u32,
    /// The scatter/gather list (an atomic's local buffer is its single entry).
    pub sgl: &'a [Sge],
    /// `IBV_SEND_*` flags.
    pub send_flags: u32,
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Immediate, host order.
    pub imm: u32,
    /// Compare value (CS) or addend (FA).
    pub compare_add: u64,
    /// Swap value (CS).
    pub swap: u64,
    /// UD: the destination's address vector (`None` on an RC queue).
    pub av: Option<&'a [u8; 48]>,
    /// UD: the destination QP number.
    pub remote_qpn: u32,
    /// UD: the destination's Q_Key.
    pub qkey: u32,
}

/// One of the probe's libmlx5-style queues (`Q`: the C side's state of a send or a receive
/// queue) over its own ring, with a map of the ring bytes the C builder stored.
#[derive(Debug)]
pub struct CQueue<Q> {
    ring: DeviceMem,
    written: DeviceMem,
    q: Q,
}

/// The C state of a queue: where its doorbell record is.
pub trait CQueueState {
    /// The doorbell record's two words.
    fn dbrec(&self) -> [u32; 2];
}

impl CQueueState for ZvSq {
    fn dbrec(&self) -> [u32; 2] {
        self.dbrec
    }
}

impl CQueueState for ZvRq {
    fn dbrec(&self) -> [u32; 2] {
        self.dbrec
    }
}

/// A queue's ring and state at one moment ([`CQueue::snapshot`]).
#[derive(Clone, Debug)]
pub struct CSnapshot<Q> {
    ring: Vec<u8>,
    q: Q,
}

impl<Q: CQueueState + Copy> CQueue<Q> {
    /// The ring and the C state as they are now.
    pub fn snapshot(&self) -> CSnapshot<Q> {
        CSnapshot {
            ring: self.ring.to_vec(),
            q: self.q,
        }
    }

    /// Puts back the ring and the C state of `s` (the written map is cleared).
    pub fn restore(&mut self, s: &CSnapshot<Q>) {
        self.ring.write_at(0, &s.ring);
        self.q = s.q;
        self.clear_written();
    }
}

impl<Q: CQueueState> CQueue<Q> {
    /// The ring.
    pub fn ring(&self) -> &DeviceMem {
        &self.ring
    }

    /// Which ring bytes the builder stored since the last [`clear_written`](Self::clear_written).
    pub fn written(&self) -> &DeviceMem {
        &self.written
    }

    /// Forgets which bytes were stored.
    pub fn clear_written(&self) {
        self.written.fill(0);
    }

    /// The doorbell record's 8 bytes, as they lie in memory.
    pub fn dbrec_bytes(&self) -> [u8; 8] {
        let [a, b] = self.q.dbrec();
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&a.to_ne_bytes());
        out[4..].copy_from_slice(&b.to_ne_bytes());
        out
    }
}

/// The probe's libmlx5-style send queue over its own ring.
pub type CSq = CQueue<ZvSq>;

impl CSq {
    /// An RC queue of `wqe_cnt` basic blocks (a power of two) whose ring starts as `initial`;
    /// it takes any number of entries.
    pub fn new(
        wqe_cnt: u32,
        qpn: u32,
        sig_all: bool,
        max_inline_data: u32,
        initial: &[u8],
    ) -> Self {
        Self::with_type(
            qpt::RC,
            wqe_cnt,
            qpn,
            sig_all,
            max_inline_data,
            u32::MAX,
            initial,
        )
    }

    /// A UD queue of `wqe_cnt` basic blocks (a power of two) whose ring starts as `initial`,
    /// refusing requests of more than `max_gs` entries or `max_inline_data` inline bytes.
    pub fn new_ud(
        wqe_cnt: u32,
        qpn: u32,
        sig_all: bool,
        max_inline_data: u32,
        max_gs: u32,
        initial: &[u8],
    ) -> Self {
        Self::with_type(
            qpt::UD,
            wqe_cnt,
            qpn,
            sig_all,
            max_inline_data,
            max_gs,
            initial,
        )
    }

    /// A raw packet QP's queue of `wqe_cnt` basic blocks (a power of two) whose ring starts as
    /// `initial`, inlining each frame's first `eth_min_inline` bytes (0 or 18), refusing
    /// requests of more than `max_gs` entries or more inline bytes than `max_inline_data`
    /// after them.
    pub fn new_raw(
        wqe_cnt: u32,
        qpn: u32,
        sig_all: bool,
        max_inline_data: u32,
        max_gs: u32,
        eth_min_inline: u32,
        initial: &[u8],
    ) -> Self {
        let mut q = Self::with_type(
            qpt::RAW,
            wqe_cnt,
            qpn,
            sig_all,
            max_inline_data,
            max_gs,
            initial,
        );
        q.q.eth_min_inline = eth_min_inline;
        q
    }

    fn with_type(
        qp_type: u32,
        wqe_cnt: u32,
        qpn: u32,
        sig_all: bool,
        max_inline_data: u32,
        max_gs: u32,
        initial: &[u8],
    ) -> Self {
        assert!(wqe_cnt.is_power_of_two());
        let len = wqe_cnt as usize * 64;
        assert_eq!(initial.len(), len);
        let ring = DeviceMem::new(len, 64);
        ring.write_at(0, initial);
        let written = DeviceMem::new(len, 64);
        let sq = ZvSq {
            buf: ring.ptr().as_ptr(),
            written: written.ptr().as_ptr(),
            wqe_cnt,
            cur_post: 0,
            qpn,
            sig_all: u32::from(sig_all),
            max_inline_data,
            dbrec: [0; 2],
            qp_type,
            max_gs,
            eth_min_inline: 0,
        };
        Self {
            ring,
            written,
            q: sq,
        }
    }

    /// The producer counter in basic blocks.
    pub fn producer(&self) -> u32 {
        self.q.cur_post
    }

    /// Builds one WQE at the producer counter; its size in 16-byte units, or the errno.
    ///
    /// # Safety
    ///
    /// With `IBV_SEND_INLINE`, every entry of `req.sgl` names `length` readable bytes at
    /// `addr`.
    ///
    /// # Panics
    ///
    /// On a UD queue, when `req.av` is `None` for an operation other than NOP.
    pub unsafe fn post(&mut self, req: &CRequest<'_>) -> Result<u32, i32> {
        assert!(
            self.q.qp_type != qpt::UD || req.op == ffi::op::NOP || req.av.is_some(),
            "a UD request needs an address vector"
        );
        let wr = ZvWr {
            sg_list: req.sgl.as_ptr(),
            av: req.av.map_or(std::ptr::null(), |av| av.as_ptr()),
            remote_addr: req.remote_addr,
            compare_add: req.compare_add,
            swap: req.swap,
            op: req.op,
            num_sge: req.sgl.len() as u32,
            send_flags: req.send_flags,
            rkey: req.rkey,
            imm: req.imm,
            remote_qpn: req.remote_qpn,
            qkey: req.qkey,
            pad: 0,
        };
        let mut ds = 0;
        // SAFETY: `self.sq` points to this queue's live ring and written map; `wr`, its list
        // and (on a UD queue, checked above) its 48-byte address vector are valid for the
        // call; inline sources are readable (caller).
        let rc = unsafe { ffi::zv_post_send(&mut self.q, &wr, &mut ds) };
        if rc == 0 { Ok(ds) } else { Err(rc) }
    }

    /// Writes the doorbell record as `post_send_db` does.
    pub fn ring_db(&mut self) {
        // SAFETY: `self.sq` is a valid queue.
        unsafe { ffi::zv_ring_db(&mut self.q) }
    }
}

/// The probe's libmlx5-style receive queue over its own ring.
pub type CRq = CQueue<ZvRq>;

impl CRq {
    /// A queue of `wqe_cnt` entries of `stride` bytes (powers of two) whose ring starts as
    /// `initial`.
    pub fn new(wqe_cnt: u32, stride: u32, initial: &[u8]) -> Self {
        assert!(wqe_cnt.is_power_of_two() && stride.is_power_of_two() && stride >= 16);
        let len = wqe_cnt as usize * stride as usize;
        assert_eq!(initial.len(), len);
        let ring = DeviceMem::new(len, 64);
        ring.write_at(0, initial);
        let written = DeviceMem::new(len, 64);
        let rq = ZvRq {
            buf: ring.ptr().as_ptr(),
            written: written.ptr().as_ptr(),
            wqe_cnt,
            stride,
            head: 0,
            dbrec: [0; 2],
            pad: 0,
        };
        Self {
            ring,
            written,
            q: rq,
        }
    }

    /// Receives posted.
    pub fn head(&self) -> u32 {
        self.q.head
    }

    /// Builds one receive WQE for `sgl` and updates the doorbell record, or returns the errno.
    pub fn post(&mut self, sgl: &[Sge]) -> Result<(), i32> {
        // SAFETY: `self.rq` points to this queue's live ring and written map; the list is
        // valid for the call and only its fields are read.
        let rc = unsafe { ffi::zv_post_recv(&mut self.q, sgl.as_ptr(), sgl.len() as u32) };
        if rc == 0 { Ok(()) } else { Err(rc) }
    }
}

/// The probe's libmlx5-style (rdma-core 44) shared receive queue over its own ring.
#[derive(Debug)]
pub struct CSharedRecvQueue {
    ring: DeviceMem,
    written: DeviceMem,
    q: ZvSrq,
}

impl CSharedRecvQueue {
    /// A queue of `nwqes` WQEs of `stride` bytes (powers of two) whose ring starts as
    /// `initial` and whose free list runs from `head` to `tail` (linked in `initial`).
    pub fn new(nwqes: u32, stride: u32, head: u32, tail: u32, initial: &[u8]) -> Self {
        assert!(nwqes.is_power_of_two() && stride.is_power_of_two() && stride >= 32);
        assert!(head < nwqes && tail < nwqes);
        let len = nwqes as usize * stride as usize;
        assert_eq!(initial.len(), len);
        let ring = DeviceMem::new(len, 64);
        ring.write_at(0, initial);
        let written = DeviceMem::new(len, 64);
        let q = ZvSrq {
            buf: ring.ptr().as_ptr(),
            written: written.ptr().as_ptr(),
            stride,
            nwqes,
            max_gs: (stride - 16) / 16,
            head,
            tail,
            counter: 0,
            dbrec: 0,
            pad: 0,
        };
        Self { ring, written, q }
    }

    /// The ring.
    pub fn ring(&self) -> &DeviceMem {
        &self.ring
    }

    /// Which ring bytes the queue stored since the last [`clear_written`](Self::clear_written).
    pub fn written(&self) -> &DeviceMem {
        &self.written
    }

    /// Forgets which bytes were stored.
    pub fn clear_written(&self) {
        self.written.fill(0);
    }

    /// The head of the free list.
    pub fn head(&self) -> u32 {
        self.q.head
    }

    /// The tail of the free list.
    pub fn tail(&self) -> u32 {
        self.q.tail
    }

    /// The doorbell record's 4 bytes, as they lie in memory.
    pub fn dbrec_bytes(&self) -> [u8; 4] {
        self.q.dbrec.to_ne_bytes()
    }

    /// One receive of `sgl` at the head of the free list: the WQE it went into, or the errno.
    pub fn post(&mut self, sgl: &[Sge]) -> Result<u32, i32> {
        assert!(self.q.head < self.q.nwqes, "a link outside the ring");
        let mut idx = 0;
        // SAFETY: `self.q` points to this queue's live ring and written map, its head inside
        // the ring (checked above); the list is valid for the call and only its fields are
        // read.
        let rc = unsafe { ffi::zv_srq_post(&mut self.q, sgl.as_ptr(), sgl.len() as u32, &mut idx) };
        if rc == 0 { Ok(idx) } else { Err(rc) }
    }

    /// WQE `ind` back on the free list, behind the tail.
    ///
    /// # Panics
    ///
    /// When `ind` is outside the ring.
    pub fn free(&mut self, ind: u32) {
        assert!(ind < self.q.nwqes, "WQE {ind} outside the ring");
        // SAFETY: `self.q` points to this queue's live ring and written map; its tail is
        // inside the ring (`new` and this check).
        unsafe { ffi::zv_srq_free(&mut self.q, ind) }
    }
}
