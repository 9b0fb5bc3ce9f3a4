//! The send queue: builds WQEs in the ring and rings the doorbell.
//!
//! Posting validates the request completely (its plan: opcode, size in segments and basic
//! blocks, the control flags) before it writes a byte; a refused request leaves the ring,
//! the bookkeeping and the counters untouched. Then the segments are written at the producer
//! counter, each segment index masked into the ring, so a WQE that meets the end of the ring
//! continues at slot 0 whatever its size and alignment (as rdma-core does, without padding
//! NOPs). Nothing is visible to the device until [`PostSend::ring`].

use zverbs_core::mmio::MmioRegion;
use zverbs_core::ring::Ring;
use zverbs_core::{BatchError, PostError, PostSend, SendFlags, SendOp, SendWr, Sge};

use crate::devmem::{SegRing, dbrec_word};
use crate::doorbell::Doorbell;
use crate::layout::{LayoutError, QpLayout, SqCaps};
use crate::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, inline_byte_count, inline_ds};
use crate::prm::{MAX_DS, SEGS_PER_BB, SND_DBR, fm_ce_se, opcode};
use crate::state::{SlotData, SqState};

/// The largest message an RDMA operation can carry (2 GiB).
const MAX_MESSAGE: u64 = 1 << 31;

/// What a validated request will write.
#[derive(Clone, Copy, Debug)]
struct Plan {
    opcode: u8,
    /// Size in 16-byte segments (`ds`).
    ds: u32,
    /// Size in basic blocks.
    blocks: u32,
    fm_ce_se: u8,
    signaled: bool,
    /// Inline payload length, or `None` for data segments.
    inline: Option<u32>,
}

/// The send queue of an mlx5 QP, driven directly.
///
/// Owned by one thread at a time (`&mut self` to post); its completions are polled through a
/// [`CompletionQueue`](crate::CompletionQueue) bound to the same [`SqState`], possibly on
/// another thread.
#[derive(Debug)]
pub struct SendQueue<'a> {
    ring: SegRing,
    blocks: Ring,
    /// Producer counter in basic blocks (free-running).
    pi: u32,
    /// Consumer counter last read from the credit word.
    ci: u32,
    /// Signaled requests posted (16-bit wrapping, as in the credit word).
    sig_posted: u16,
    /// Signaled requests completed, last read from the credit word.
    sig_done: u16,
    /// `qpn << 8`, ready for `qpn_ds`.
    qpn_shifted: u32,
    /// WQEs written since the last ring, and where the last one starts.
    pending: u32,
    last_seg: u32,
    last_blocks: u32,
    caps: SqCaps,
    state: &'a SqState<'a>,
    doorbell: Doorbell<'a>,
}

// SAFETY: the queue owns its part of the ring and the doorbell register; moving it to another
// thread moves that ownership. Shared state goes through `SqState` (Sync) and atomics.
unsafe impl Send for SendQueue<'_> {}

impl<'a> SendQueue<'a> {
    /// Drives the send queue of the QP that `layout` describes.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live RC QP (or the software
    ///   device's equivalent): the ring, the doorbell record and the BlueFlame register
    ///   (`2 × bf.size` bytes, or 8 bytes when `bf.size == 0`) stay mapped for `'a`;
    /// - nothing else posts to this send queue or writes its doorbell while this value lives
    ///   (libibverbs' `ibv_post_send` must not be used on the QP);
    /// - `caps` are the QP's real capabilities (the ring was sized for them);
    /// - `state` is bound to the CQ that receives this QP's send completions, and no other
    ///   send queue uses it;
    /// - the producer counter starts at 0: the QP is new or was reset, and its ring is idle;
    /// - the QP was created without scatter-to-CQE for requester completions (reported as an
    ///   error completion otherwise: see [`CompletionQueue`](crate::CompletionQueue));
    /// - under `cfg(zverbs_loom)` the ring and doorbell record are loom cells (see `devmem`).
    ///
    /// # Errors
    ///
    /// A [`LayoutError`] when the ring is not a power of two of 64-byte blocks, is larger than
    /// the 16-bit counters allow, does not match `state`, or cannot hold the largest WQE the
    /// capabilities allow.
    pub unsafe fn new(
        layout: &QpLayout,
        caps: SqCaps,
        state: &'a SqState<'a>,
    ) -> Result<Self, LayoutError> {
        let cnt = layout.sq.wqe_cnt;
        let blocks = Ring::new(cnt).ok_or(LayoutError::NotPowerOfTwo { count: cnt })?;
        if cnt > 1 << 15 {
            return Err(LayoutError::RingTooLarge { count: cnt });
        }
        if layout.sq.stride != 64 {
            return Err(LayoutError::BadStride {
                stride: layout.sq.stride,
            });
        }
        if state.len() != cnt {
            return Err(LayoutError::StorageLength {
                needed: cnt,
                given: state.len() as usize,
            });
        }
        if caps.max_signaled == 0 {
            return Err(LayoutError::ZeroCapacity);
        }
        // The largest WQE: ctrl + raddr + the larger of the data segments and the inline
        // segment; atomics are one block.
        let max_ds = 2 + (caps.max_send_sge as usize).max(inline_ds(caps.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(SEGS_PER_BB) as u32;
        if max_ds > MAX_DS || max_blocks > cnt {
            return Err(LayoutError::WqeTooLarge { blocks: max_blocks });
        }
        let mut caps = caps;
        caps.max_signaled = caps.max_signaled.min(1 << 15);
        let bf_len = if layout.bf.size == 0 {
            8
        } else {
            2 * layout.bf.size as usize
        };
        // SAFETY: (caller) the register is mapped for 'a with `bf_len` bytes and only this queue
        // writes it.
        let reg = unsafe { MmioRegion::new(layout.bf.reg, bf_len) };
        // SAFETY: (caller) the doorbell record is valid for 'a; word 1 is MLX5_SND_DBR.
        let dbrec = unsafe { dbrec_word(layout.dbrec, SND_DBR) };
        Ok(Self {
            // SAFETY: (caller) the ring holds `cnt` 64-byte blocks for 'a, owned by this queue.
            ring: unsafe { SegRing::new(layout.sq.buf, cnt * SEGS_PER_BB as u32) },
            blocks,
            pi: 0,
            ci: 0,
            sig_posted: 0,
            sig_done: 0,
            qpn_shifted: layout.qpn << 8,
            pending: 0,
            last_seg: 0,
            last_blocks: 0,
            caps,
            state,
            doorbell: Doorbell::new(dbrec, reg, layout.bf.size),
        })
    }

    /// The QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn_shifted >> 8
    }

    /// The capabilities the queue enforces.
    #[inline]
    pub fn caps(&self) -> SqCaps {
        self.caps
    }

    /// The producer counter in basic blocks (its low 16 bits are the next WQE's index).
    #[inline]
    pub fn producer(&self) -> u32 {
        self.pi
    }

    /// Ring size in basic blocks.
    #[inline]
    pub fn blocks(&self) -> u32 {
        self.blocks.size()
    }

    /// WQEs written but not yet rung.
    #[inline]
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Whether the queue rings with BlueFlame (false: doorbell only).
    #[inline]
    pub fn has_blueflame(&self) -> bool {
        self.doorbell.bf_size() != 0
    }

    /// Free basic blocks, after taking any credits the poller has returned.
    #[inline]
    pub fn free_blocks(&mut self) -> u32 {
        self.refresh();
        self.blocks.free(self.pi, self.ci)
    }

    /// Signaled requests posted whose completions have not been polled yet.
    #[inline]
    pub fn outstanding_signaled(&mut self) -> u32 {
        self.refresh();
        u32::from(self.sig_posted.wrapping_sub(self.sig_done))
    }

    /// Reads the credit word the poller writes.
    #[inline]
    fn refresh(&mut self) {
        let done = self.state.load_done();
        let ci16 = done as u16;
        self.ci = self
            .pi
            .wrapping_sub(u32::from((self.pi as u16).wrapping_sub(ci16)));
        self.sig_done = (done >> 16) as u16;
    }

    /// Validates `wr` against the queue's limits and sizes it. Writes nothing.
    #[inline(always)]
    fn plan(&self, wr: &SendWr<'_>) -> Result<Plan, PostError> {
        let (opcode, mut ds, sgl) = match &wr.op {
            SendOp::Write { sgl, .. } => (opcode::RDMA_WRITE, 2, *sgl),
            SendOp::WriteImm { sgl, .. } => (opcode::RDMA_WRITE_IMM, 2, *sgl),
            SendOp::Send { sgl } => (opcode::SEND, 1, *sgl),
            SendOp::SendImm { sgl, .. } => (opcode::SEND_IMM, 1, *sgl),
            SendOp::Read { sgl, .. } => (opcode::RDMA_READ, 2, *sgl),
            SendOp::CompareSwap { local, remote, .. } | SendOp::FetchAdd { local, remote, .. } => {
                check_atomic(local, remote.addr)?;
                let op = if matches!(wr.op, SendOp::CompareSwap { .. }) {
                    opcode::ATOMIC_CS
                } else {
                    opcode::ATOMIC_FA
                };
                (op, 4, &[][..])
            }
            SendOp::Nop => (opcode::NOP, 1, &[][..]),
        };
        if sgl.len() > self.caps.max_send_sge as usize {
            return Err(PostError::TooManySges {
                got: sgl.len() as u32,
                max: self.caps.max_send_sge,
            });
        }
        let mut inline = None;
        if wr.flags.contains(SendFlags::INLINE) {
            if !wr.op.can_inline() {
                return Err(PostError::InlineNotAllowed);
            }
            let len: u64 = sgl.iter().map(|s| u64::from(s.length)).sum();
            if len > u64::from(self.caps.max_inline_data) {
                return Err(PostError::InlineTooLarge {
                    len: len.min(u64::from(u32::MAX)) as u32,
                    max: self.caps.max_inline_data,
                });
            }
            ds += inline_ds(len as usize) as u32;
            inline = Some(len as u32);
        } else {
            let mut len = 0u64;
            for s in sgl {
                len += u64::from(s.length);
                // Zero-length entries are skipped, as libmlx5 does: on mlx5 a zero byte count
                // means 2 GiB.
                ds += u32::from(s.length != 0);
            }
            if len > MAX_MESSAGE {
                return Err(PostError::MessageTooLong);
            }
        }
        let signaled = self.caps.sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let mut flags = if signaled { fm_ce_se::CQ_UPDATE } else { 0 };
        if wr.flags.contains(SendFlags::SOLICITED) {
            flags |= fm_ce_se::SOLICITED;
        }
        if wr.flags.contains(SendFlags::FENCE) {
            flags |= fm_ce_se::FENCE;
        }
        Ok(Plan {
            opcode,
            ds,
            blocks: ds.div_ceil(SEGS_PER_BB as u32),
            fm_ce_se: flags,
            signaled,
            inline,
        })
    }

    /// Checks that `blocks` basic blocks and `signaled` more CQEs fit now.
    #[inline(always)]
    fn check_room(&mut self, blocks: u32, signaled: u32) -> Result<(), PostError> {
        if self.blocks.free(self.pi, self.ci) < blocks
            || u32::from(self.sig_posted.wrapping_sub(self.sig_done)) + signaled
                > self.caps.max_signaled
        {
            self.refresh();
            let free = self.blocks.free(self.pi, self.ci);
            if free < blocks {
                return Err(PostError::QueueFull {
                    needed: blocks,
                    free,
                });
            }
            let outstanding = u32::from(self.sig_posted.wrapping_sub(self.sig_done));
            if outstanding + signaled > self.caps.max_signaled {
                return Err(PostError::CqFull {
                    limit: self.caps.max_signaled,
                });
            }
        }
        Ok(())
    }

    /// Writes the planned WQE at the producer counter and records it.
    ///
    /// # Safety
    ///
    /// `plan` is `self.plan(wr)`'s, room was checked, and the caller upholds the posting
    /// contract of [`PostSend`] (inline sources are readable).
    #[inline(always)]
    unsafe fn write(&mut self, wr: &SendWr<'_>, plan: &Plan) {
        let start = self.pi.wrapping_mul(SEGS_PER_BB as u32);
        let ring = &self.ring;
        let imm = wr.op.imm().unwrap_or(0);
        // SAFETY: this and every `with_mut` below write segments of blocks `pi..pi+blocks`,
        // which are free (room was checked) and not yet published.
        unsafe {
            ring.with_mut(start, |b| {
                CtrlSeg::new_unchecked(b).set(
                    self.pi as u16,
                    plan.opcode,
                    0,
                    self.qpn_shifted >> 8,
                    plan.fm_ce_se,
                    plan.ds as u8,
                    imm,
                )
            });
        }
        let mut seg = start.wrapping_add(1);
        match &wr.op {
            SendOp::Write { remote, .. }
            | SendOp::WriteImm { remote, .. }
            | SendOp::Read { remote, .. } => {
                // SAFETY: as above.
                unsafe {
                    ring.with_mut(seg, |b| {
                        RaddrSeg::new_unchecked(b).set(remote.addr, remote.rkey)
                    })
                };
                seg = seg.wrapping_add(1);
            }
            SendOp::CompareSwap {
                local,
                remote,
                compare,
                swap,
            } => {
                // SAFETY: as above.
                unsafe {
                    write_atomic(ring, seg, local, remote.addr, remote.rkey, *swap, *compare)
                };
            }
            SendOp::FetchAdd { local, remote, add } => {
                // SAFETY: as above.
                unsafe { write_atomic(ring, seg, local, remote.addr, remote.rkey, *add, 0) };
            }
            SendOp::Send { .. } | SendOp::SendImm { .. } | SendOp::Nop => {}
        }
        if !matches!(
            wr.op,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } | SendOp::Nop
        ) {
            let sgl = wr.op.sgl();
            match plan.inline {
                // SAFETY: the segments are free (as above); the sources are readable (caller).
                Some(len) => unsafe { write_inline(ring, seg, sgl, len) },
                None => {
                    for s in sgl.iter().filter(|s| s.length != 0) {
                        // SAFETY: as above.
                        unsafe {
                            ring.with_mut(seg, |b| {
                                DataSeg::new_unchecked(b).set(s.length, s.lkey, s.addr)
                            })
                        };
                        seg = seg.wrapping_add(1);
                    }
                }
            }
        }
        let next = self.pi.wrapping_add(plan.blocks);
        // SAFETY: the slot of block `pi` is free (room was checked: the poller has retired
        // every earlier WQE there) and the WQE is not published yet.
        unsafe {
            self.state.record(
                self.pi,
                SlotData {
                    wr_id: wr.wr_id,
                    next,
                    opcode: plan.opcode,
                    signaled: plan.signaled,
                },
            )
        };
        self.last_seg = start;
        self.last_blocks = plan.blocks;
        self.pending += 1;
        self.sig_posted = self.sig_posted.wrapping_add(u16::from(plan.signaled));
        self.pi = next;
    }
}

/// Checks an atomic's operands: an 8-byte, 8-byte-aligned local buffer and an aligned target.
#[inline(always)]
fn check_atomic(local: &Sge, raddr: u64) -> Result<(), PostError> {
    if local.length != 8 {
        return Err(PostError::AtomicSize { len: local.length });
    }
    if !local.addr.is_multiple_of(8) || !raddr.is_multiple_of(8) {
        return Err(PostError::AtomicAlignment);
    }
    Ok(())
}

/// Writes raddr, atomic and data segments from `seg` on.
///
/// # Safety
///
/// The three segments are free and unpublished.
#[inline(always)]
unsafe fn write_atomic(
    ring: &SegRing,
    seg: u32,
    local: &Sge,
    raddr: u64,
    rkey: u32,
    swap_add: u64,
    compare: u64,
) {
    // SAFETY: (caller) the segments are free and unpublished.
    unsafe {
        ring.with_mut(seg, |b| RaddrSeg::new_unchecked(b).set(raddr, rkey));
        ring.with_mut(seg.wrapping_add(1), |b| {
            AtomicSeg::new_unchecked(b).set(swap_add, compare)
        });
        ring.with_mut(seg.wrapping_add(2), |b| {
            DataSeg::new_unchecked(b).set(8, local.lkey, local.addr)
        });
    }
}

/// Writes an inline segment carrying the bytes of `sgl` (`len` in all) from segment `seg` on,
/// continuing across the end of the ring, and zeroes the padding of its last segment.
///
/// # Safety
///
/// The segments are free and unpublished; every entry's bytes are readable.
#[inline(always)]
unsafe fn write_inline(ring: &SegRing, mut seg: u32, sgl: &[Sge], len: u32) {
    if len == 0 {
        return;
    }
    // SAFETY: (caller) the segment is free.
    unsafe {
        ring.with_mut(seg, |b| {
            b[..4].copy_from_slice(&inline_byte_count(len).to_be_bytes())
        })
    };
    let mut off = 4usize;
    for s in sgl {
        let mut src = s.addr as usize as *const u8;
        let mut left = s.length as usize;
        while left > 0 {
            let n = left.min(16 - off);
            // SAFETY: (caller) `src..src+left` is readable and the segment is free; `off + n
            // <= 16`.
            unsafe {
                ring.with_mut(seg, |b| {
                    core::ptr::copy_nonoverlapping(src, b.as_mut_ptr().add(off), n)
                });
                src = src.add(n);
            }
            left -= n;
            off += n;
            if off == 16 {
                seg = seg.wrapping_add(1);
                off = 0;
            }
        }
    }
    if off != 0 {
        // SAFETY: (caller) the segment is free.
        unsafe { ring.with_mut(seg, |b| b[off..].fill(0)) };
    }
}

impl PostSend for SendQueue<'_> {
    #[inline]
    unsafe fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        let plan = self.plan(wr)?;
        self.check_room(plan.blocks, u32::from(plan.signaled))?;
        // SAFETY: planned and room checked; the caller upholds the posting contract.
        unsafe { self.write(wr, &plan) };
        Ok(())
    }

    #[inline]
    fn ring(&mut self) {
        if self.pending == 0 {
            return;
        }
        self.doorbell.ring(
            &self.ring,
            self.pi,
            self.last_seg,
            self.last_blocks,
            self.pending == 1,
        );
        self.pending = 0;
    }

    unsafe fn post_send_batch(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
        let mut blocks = 0u32;
        let mut signaled = 0u32;
        for (index, wr) in wrs.iter().enumerate() {
            let plan = self.plan(wr).map_err(|error| BatchError { index, error })?;
            blocks += plan.blocks;
            signaled += u32::from(plan.signaled);
            self.check_room(blocks, signaled)
                .map_err(|error| BatchError { index, error })?;
        }
        for wr in wrs {
            // Infallible: the same plan succeeded above and nothing changed since.
            if let Ok(plan) = self.plan(wr) {
                // SAFETY: planned, and room for the whole batch was checked; the caller
                // upholds the posting contract for every request.
                unsafe { self.write(wr, &plan) };
            }
        }
        self.ring();
        Ok(())
    }
}
