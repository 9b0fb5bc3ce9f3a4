//! The send queue of a raw packet QP on an Ethernet port, [`SendQueue<P, Ethernet>`]: each
//! [`SendOp::Send`] is one whole frame, from its Ethernet header on.
//!
//! Its WQE is the control segment (opcode SEND, `qpn` the SQN), the Ethernet segment
//! (`struct mlx5_wqe_eth_seg`: `cs_flags` [`IP_CSUM`](crate::prm::cs_flags::IP_CSUM) for
//! [`SendFlags::IP_CSUM`], `mss` 0, `inline_hdr_sz` the queue's minimum inline, those first
//! frame bytes from byte 14 of the segment on, gathered across entries when the first is
//! shorter), then data segments for the rest of the frame (zero-length entries skipped, the
//! entry the inlined bytes end in resumed after them) or, with [`SendFlags::INLINE`], one
//! inline segment with the rest: libmlx5's `_mlx5_post_send` for `IBV_QPT_RAW_PACKET`. The
//! queue's minimum inline is the context's `eth_min_inline` as libmlx5 reads it: none
//! (`MLX5_USER_INLINE_MODE_NONE`) is 0 bytes, anything else 18
//! ([`ETH_L2_INLINE_HEADER_SIZE`]).
//!
//! The Ethernet segment is one more segment kind of the one writer (`SendQueue::write_after`):
//! single posts, batches, staged requests, inline frames, NOPs (the drain marker) and the
//! room, gate and flush rules are those of every queue.
//!
//! A [`PreparedFrame`] is a frame whose headers stay the same from post to post: the control
//! and Ethernet segments with every header byte inlined are built once; a post
//! ([`SendQueue::post_frame`]) writes them with the IPv4 total length and the UDP length
//! patched for its payload, and one data segment for the payload. The checksums are the
//! device's (`cs_flags`).

use zverbs_core::{MIN_FRAME, PostError, SendFlags, SendOp, SendWr, Sge, SqCaps};

use super::{
    CheckedSend, Ethernet, FM_CE_SE, FM_CE_SE_FLAGS, Plan, Room, SendQueue, SqTransport, Vouched,
    VouchedList, gather_in,
};
use crate::bf::SharedBf;
use crate::devmem::Wqe;
use crate::doorbell::{Back, BackSegs, Words};
use crate::layout::{LayoutError, QpLayout};
use crate::prm::wqe::{DataSeg, eth, eth_ds, inline_ds, words};
use crate::prm::{
    ETH_L2_INLINE_HEADER_SIZE, MAX_DS, SEGS_PER_BB, SEND_WQE_BB, WQE_SEG, cs_flags, opcode,
};
use crate::state::SqStateRef;

/// The most header bytes a [`PreparedFrame`] inlines: the Ethernet segment's first unit
/// and five more, so that its WQE (control, Ethernet, data segment) is at most two basic
/// blocks (Ethernet, a VLAN tag, IPv6 and TCP fit: 78 bytes).
pub const FRAME_HEADERS_MAX: usize = 2 + 5 * WQE_SEG;

/// Units of a [`PreparedFrame`]'s Ethernet segment at most.
const FRAME_ETH_DS: usize = eth_ds(FRAME_HEADERS_MAX);
const _: () = assert!(FRAME_ETH_DS == 6 && 2 + FRAME_ETH_DS == 2 * SEGS_PER_BB);

impl<P: SqStateRef> SendQueue<P, Ethernet> {
    /// Drives the send queue of the raw packet QP that `layout` describes: it posts
    /// [`SendOp::Send`] (one frame each) and NOP. `min_inline` is how many of each frame's
    /// first bytes the device wants inlined into the WQE: 0, or 18 when the context's
    /// `eth_min_inline` names any inline mode but none (libmlx5's rule). `shared` as for
    /// [`SendQueue::new`].
    ///
    /// # Safety
    ///
    /// As [`SendQueue::new`], for a raw packet QP (whose QPN is its SQN); and each frame's first
    /// `min_inline` bytes are read by the post, as libmlx5 reads them: a frame posted by
    /// reference must have them readable by the CPU at the post (registered host memory is).
    ///
    /// # Errors
    ///
    /// As [`SendQueue::new`]; [`LayoutError::Transport`] when `caps.transport` is not
    /// [`Transport::Ethernet`](zverbs_core::Transport::Ethernet); [`LayoutError::MinInline`]
    /// when `min_inline` is neither 0 nor 18.
    pub unsafe fn new_eth(
        layout: &QpLayout,
        caps: SqCaps,
        min_inline: u16,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: (caller) the contract of `with_register`, which is this function's.
        unsafe { Self::with_register(layout, caps, min_inline, state, shared) }
    }

    /// How many of each frame's first bytes the queue inlines (0 or 18).
    #[inline]
    pub fn min_inline(&self) -> u16 {
        self.eth_inline
    }

    /// Prepares a frame whose first bytes are `headers` (14 bytes to
    /// [`FRAME_HEADERS_MAX`], at least the queue's minimum inline, and no more than the
    /// queue's largest WQE holds with one data segment) for [`SendQueue::post_frame`]: the
    /// control and Ethernet segments, all of `headers` inlined, built once. `flags` are those
    /// of a SEND on this queue ([`SendFlags::IP_CSUM`], [`SendFlags::SIGNALED`],
    /// [`SendFlags::SOLICITED`], [`SendFlags::FENCE`]; not [`SendFlags::INLINE`]). `lengths`
    /// names the length fields each post sets for its payload.
    ///
    /// # Errors
    ///
    /// What the core's check of a SEND of `headers` with `flags` refuses (for example
    /// [`PostError::FrameTooShort`]); [`PostError::FrameTooShort`] for headers shorter than
    /// the queue's minimum inline; [`PostError::InlineTooLarge`] for headers the WQE cannot
    /// hold; [`PostError::InlineNotAllowed`] with [`SendFlags::INLINE`];
    /// [`PostError::FrameLengthField`] for a length field outside `headers`.
    pub fn prepare_frame(
        &self,
        headers: &[u8],
        flags: SendFlags,
        lengths: FrameLengths,
    ) -> Result<PreparedFrame, PostError> {
        let sgl = [Sge::from_slice(headers, 0)];
        let checked = SendWr::send(0, &sgl)
            .with_flags(flags)
            .check_ethernet(&self.caps)?;
        if checked.is_inline() {
            return Err(PostError::InlineNotAllowed);
        }
        let h = headers.len();
        if h < usize::from(self.eth_inline) {
            return Err(PostError::FrameTooShort {
                len: h as u32,
                min: u32::from(self.eth_inline),
            });
        }
        // Control, Ethernet with the headers, one data segment: within what the queue was
        // sized for and what a prepared frame holds.
        let most = (self.max_wqe_ds() - 2).min(FRAME_ETH_DS);
        let max_headers = 2 + (most - 1) * WQE_SEG;
        if h > max_headers {
            return Err(PostError::InlineTooLarge {
                len: h as u32,
                max: max_headers as u32,
            });
        }
        let eth_segs = eth_ds(h);
        // The WQE's image: the control segment (set per post), the Ethernet segment with the
        // headers, zeros after them.
        let mut image = [0u8; 2 * SEND_WQE_BB];
        let cs = if checked.flags().contains(SendFlags::IP_CSUM) {
            cs_flags::IP_CSUM
        } else {
            0
        };
        let eth_at = WQE_SEG;
        let start = eth_at + eth::INLINE_HDR_START;
        image[eth_at..eth_at + WQE_SEG].copy_from_slice(&words::to_bytes(words::eth(
            cs,
            h as u16,
            [0, 0],
        )));
        image[start..start + h].copy_from_slice(headers);
        // A length field: inside the headers, at least `before` bytes from their start (the
        // header it belongs to starts there), at an even offset (headers are whole 16-bit
        // words; the headers start at an even byte of the WQE, so the field never straddles
        // two units); zeroed in the image, the post stores its value.
        let mut field = |at: Option<usize>, before: usize| match at {
            None => Ok(LengthPatch::NONE),
            Some(at) if at >= before && at + 2 <= h && at.is_multiple_of(2) => {
                let pos = start + at;
                image[pos..pos + 2].fill(0);
                // The field's value for an empty payload: the header's bytes to the end.
                Ok(LengthPatch {
                    unit: (pos / WQE_SEG) as u8,
                    off: (pos % WQE_SEG) as u8,
                    base: (h - (at - before)) as u16,
                    mask: !0,
                })
            }
            Some(at) => Err(PostError::FrameLengthField {
                at: at.min(u32::MAX as usize) as u32,
                headers: h as u32,
            }),
        };
        // IPv4 total length: bytes 2..4 of the IPv4 header; UDP length: bytes 4..6 of UDP.
        let ip = field(lengths.ipv4_total_at, 2)?;
        let udp = field(lengths.udp_len_at, 4)?;
        let (words, _) = image.as_chunks::<8>();
        let image: [[u64; 8]; 2] = core::array::from_fn(|b| {
            core::array::from_fn(|i| u64::from_ne_bytes(words[8 * b + i]))
        });
        // With a data segment, and without (an empty payload); the WQE index 0, or-ed in per
        // post.
        let ds = 2 + eth_segs as u32;
        let fm_ce_se = FM_CE_SE[(checked.flags().bits() & FM_CE_SE_FLAGS) as usize];
        let ctrl = |ds: u32| words::ctrl(0, opcode::SEND, 0, self.qpn, fm_ce_se, ds as u8, 0);
        let max_frame = match self.caps.transport {
            zverbs_core::Transport::Ethernet { max_frame, .. } => max_frame,
            _ => 0,
        };
        let mut image = image;
        [image[0][0], image[0][1]] = ctrl(ds);
        let blocks = [
            (ds - 1).div_ceil(SEGS_PER_BB as u32) as u8,
            ds.div_ceil(SEGS_PER_BB as u32) as u8,
        ];
        Ok(PreparedFrame {
            qpn: self.qpn,
            signaled: checked.signaled(),
            headers: h as u16,
            max_payload: max_frame.saturating_sub(h as u32),
            data_unit: 1 + eth_segs as u8,
            blocks,
            ctrl0: [ctrl(ds - 1)[0], ctrl(ds)[0]],
            image,
            lengths: [ip, udp],
        })
    }

    /// Posts a prepared frame with `payload` after its headers and rings: the prepared control
    /// and Ethernet segments, the IPv4 total length and the UDP length (those
    /// [`FrameLengths`] named) set for the frame's length, one data segment for the payload
    /// (none for an empty one). The WQE and the doorbell are those of
    /// [`PostSend::post`](zverbs_core::PostSend::post) for a SEND of the same bytes with
    /// the headers inlined.
    ///
    /// A payload of at least one byte (the common case) is rung with the BlueFlame copy read
    /// back from the ring a segment at a time, without a loop
    /// (`doorbell::BackSegs`).
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`](zverbs_core::PostSend) for the payload: it is
    /// registered under `payload.lkey` and stays valid until the request completes.
    ///
    /// # Errors
    ///
    /// [`PostError::FrameTooLong`] for a frame longer than the queue's largest;
    /// [`PostError::Unsupported`] for a frame prepared for another queue;
    /// [`PostError::NotReady`] when the queue pair is in the error state or RESET;
    /// [`PostError::QueueFull`] or [`PostError::CqFull`] when it does not fit now. Then
    /// nothing was written.
    #[inline(always)]
    pub unsafe fn post_frame(
        &mut self,
        p: &PreparedFrame,
        wr_id: u64,
        payload: Sge,
    ) -> Result<(), PostError> {
        // The common case in one compare each: a payload of 1 byte to the largest (one data
        // segment: the WQE's size prepared), the frame this queue's.
        if payload.length.wrapping_sub(1) >= p.max_payload || p.qpn != self.qpn {
            return self.post_frame_other(p, wr_id, payload.addr, payload.length, payload.lkey);
        }
        let blocks = u32::from(p.blocks[1]);
        let room = self.single_room(blocks, u32::from(p.signaled))?;
        let pi = self.pi;
        self.write_frame::<true>(p, wr_id, &payload, blocks, room);
        let word0 = p.ctrl0[1] | words::ctrl_index(pi as u16)[0];
        let wqe = BackSegs {
            sq: &self.ring,
            first: pi,
            blocks,
            word0,
        };
        self.doorbell.ring(pi.wrapping_add(blocks), wqe, true);
        Ok(())
    }

    /// [`SendQueue::post_frame`] of an empty payload (no data segment), or refused, out of
    /// line. (The payload as scalars: an `Sge` argument would be kept in memory on the common
    /// path.)
    #[cold]
    #[inline(never)]
    fn post_frame_other(
        &mut self,
        p: &PreparedFrame,
        wr_id: u64,
        addr: u64,
        len: u32,
        lkey: u32,
    ) -> Result<(), PostError> {
        let payload = Sge::new(addr, len, lkey);
        let blocks = self.check_frame(p, &payload)?;
        let room = self.single_room(blocks, u32::from(p.signaled))?;
        let start = if len != 0 {
            self.write_frame::<true>(p, wr_id, &payload, blocks, room)
        } else {
            self.write_frame::<false>(p, wr_id, &payload, blocks, room)
        };
        let wqe = Back::new(&self.ring, start, blocks);
        self.doorbell.ring(self.pi, wqe, true);
        Ok(())
    }

    /// Writes a prepared frame without ringing, as
    /// [`PostSend::stage`](zverbs_core::PostSend::stage) does; the doorbell is
    /// [`PostSend::ring`](zverbs_core::PostSend::ring).
    ///
    /// # Safety
    ///
    /// As [`SendQueue::post_frame`].
    ///
    /// # Errors
    ///
    /// As [`SendQueue::post_frame`].
    #[inline(always)]
    pub unsafe fn stage_frame(
        &mut self,
        p: &PreparedFrame,
        wr_id: u64,
        payload: Sge,
    ) -> Result<(), PostError> {
        let blocks = self.check_frame(p, &payload)?;
        let room = self.room_for(blocks, u32::from(p.signaled))?;
        let start = if payload.length != 0 {
            self.write_frame::<true>(p, wr_id, &payload, blocks, room)
        } else {
            self.write_frame::<false>(p, wr_id, &payload, blocks, room)
        };
        self.note_pending(start, blocks);
        Ok(())
    }

    /// The per-post checks of a prepared frame that do not depend on the ring: the frame's
    /// length and the queue. Its WQE's size in basic blocks.
    #[inline(always)]
    fn check_frame(&self, p: &PreparedFrame, payload: &Sge) -> Result<u32, PostError> {
        if payload.length > p.max_payload || p.qpn != self.qpn {
            // (The length by value: a reference would keep the payload in memory on the
            // fast path too.)
            return Err(frame_refused(p, payload.length));
        }
        Ok(u32::from(p.blocks[usize::from(payload.length != 0)]))
    }

    /// Writes a prepared frame's WQE (`blocks` basic blocks) at the producer counter, records
    /// it and advances the counters; the segment counter of its control segment. `DATA` says
    /// whether the payload has bytes (a data segment).
    #[inline(always)]
    fn write_frame<const DATA: bool>(
        &mut self,
        p: &PreparedFrame,
        wr_id: u64,
        payload: &Sge,
        blocks: u32,
        room: Room,
    ) -> u32 {
        // Counted first, so that the count is not held in a register while the WQE is
        // written (the slot's record then adds 0), as a prepared request's post does.
        self.sig_posted = self.sig_posted.wrapping_add(u16::from(p.signaled));
        // Locals, not fields, as in `SendQueue::write_after`.
        let pi = self.pi;
        let start = pi.wrapping_mul(SEGS_PER_BB as u32);
        let wqe = self.take::<true, true>(room, blocks, wr_id, opcode::SEND, p.signaled, 0);
        debug_assert_eq!(DATA, payload.length != 0);
        let has_data = DATA;
        // `opmod_idx_opcode` bytes 1..3: the WQE index (opmod and opcode are prepared).
        let mut first = p.image[0];
        first[0] = p.ctrl0[usize::from(has_data)] | words::ctrl_index(pi as u16)[0];
        wqe.block_words_in(0, &first, 8);
        if blocks > 1 {
            // The second block's first three units: the most of the Ethernet segment it
            // holds ([`FRAME_HEADERS_MAX`]); its last unit is the data segment or past the WQE.
            // (From a local copy, as the first block: loaded before the stores, 16 bytes at a
            // time, rather than word by word between them.)
            let second = p.image[1];
            wqe.block_words_in(1, &second, 6);
        }
        // The two lengths stored into their fields, 16 bits each.
        let grow = payload.length as u16;
        for f in &p.lengths {
            let v = f.value(grow);
            // (Addressed by the ring's counter: one masked address, not a choice of two.)
            wqe.seg_at(start.wrapping_add(u32::from(f.unit)), |b| {
                // (An even offset below 16: the field is inside the unit, no check left.)
                let off = usize::from(f.off & 14);
                if let Some(w) = b.get_mut(off..).and_then(|t| t.first_chunk_mut::<2>()) {
                    *w = v;
                }
            });
        }
        if has_data {
            wqe.seg_at(start.wrapping_add(u32::from(p.data_unit)), |b| {
                DataSeg::new_unchecked(b).set(payload.length, payload.lkey, payload.addr)
            });
        }
        start
    }
}

/// Why a prepared frame was refused ([`SendQueue::check_frame`]), out of line: too long, or
/// another queue's.
#[cold]
/// The longest frame the one-entry fast path of an Ethernet queue with `caps` takes with
/// [`SendFlags::IP_CSUM`] ([`SendQueue::post_eth_one`]): its largest frame, or 0 on a queue
/// that takes no entry or whose device computes no checksums (every such frame then takes the
/// general path, whose check refuses the flag).
pub(super) fn csum_most(caps: &SqCaps) -> u32 {
    match caps.transport {
        zverbs_core::Transport::Ethernet {
            max_frame,
            ip_csum: true,
        } if caps.max_send_sge != 0 => max_frame,
        _ => 0,
    }
}

#[inline(never)]
fn frame_refused(p: &PreparedFrame, payload_len: u32) -> PostError {
    if payload_len > p.max_payload {
        let len = u64::from(p.headers) + u64::from(payload_len);
        PostError::FrameTooLong {
            len: len.min(u64::from(u32::MAX)) as u32,
            max: p.max_payload + u32::from(p.headers),
        }
    } else {
        PostError::Unsupported
    }
}

impl<P: SqStateRef, T: SqTransport> SendQueue<P, T> {
    /// [`PostSend::post`](zverbs_core::PostSend::post) of one request on an Ethernet queue:
    /// the common frame, a SEND of one entry by reference holding more than the bytes the
    /// queue inlines and at most the queue's largest frame, is checked here with what it
    /// needs of the core's check (the queue's transport, its entry count, the frame's length,
    /// the flags' inline bit, and the checksum bit on a queue whose device has no checksum
    /// offload) and written as the
    /// words of its one basic block (control, Ethernet, one data segment), stored to the ring
    /// and to the BlueFlame register, as the single posts of the other transports; every
    /// other request takes the general path ([`SendQueue::post_one`]). The WQE and the result
    /// are those of the general path.
    #[inline(always)]
    pub(super) fn post_eth_one(&mut self, v: Vouched<'_, '_>) -> Result<(), PostError> {
        let wr = v.wr();
        let SendOp::Send { sgl: [s] } = wr.op else {
            return self.post_one(v);
        };
        // The largest frame, or 0 (no frame passes) on a queue that takes no entry: one
        // compare for both. (An Ethernet queue's transport is Ethernet: `new_eth` checked it.)
        let zverbs_core::Transport::Ethernet { max_frame, .. } = self.caps.transport else {
            return self.post_one(v);
        };
        // With checksum offload, the longest frame the queue's device takes it for (0 where
        // it has none: the general path refuses the flag), set when the queue was made.
        let most = if wr.flags.contains(SendFlags::IP_CSUM) {
            self.eth_csum_most
        } else if self.caps.max_send_sge != 0 {
            max_frame
        } else {
            0
        };
        if s.length > most || wr.flags.contains(SendFlags::INLINE) {
            return self.post_one(v);
        }
        // The queue inlines 0 or 18 bytes (`new_eth`). The shortest frame of this shape: 14
        // bytes without inlining (the shortest frame), 19 with 18 inlined (a data segment
        // after them).
        if self.eth_inline == 0 {
            if s.length < MIN_FRAME {
                return self.post_one(v);
            }
            self.post_frame_block::<false>(v, s)
        } else {
            debug_assert_eq!(self.eth_inline, ETH_L2_INLINE_HEADER_SIZE);
            if s.length <= u32::from(ETH_L2_INLINE_HEADER_SIZE) {
                return self.post_one(v);
            }
            self.post_frame_block::<true>(v, s)
        }
    }

    /// [`SendQueue::post_eth_one`] of a frame whose one entry `s` holds more than the bytes the
    /// queue inlines (`HDR`: 18, else none) and at most its largest frame: its block in
    /// registers, stored to the ring and rung. (A path of its own for each kind of queue: the
    /// words of the two are kept in registers of their own.)
    #[inline(always)]
    fn post_frame_block<const HDR: bool>(
        &mut self,
        v: Vouched<'_, '_>,
        s: &Sge,
    ) -> Result<(), PostError> {
        let wr = v.wr();
        let flags = if self.caps.sig_all {
            wr.flags.union(SendFlags::SIGNALED)
        } else {
            wr.flags
        };
        let signaled = flags.contains(SendFlags::SIGNALED);
        // The frame's first bytes, read before the room check (which may go out of line) as
        // the general path reads them; `None` only for an entry shorter than 18 bytes, which
        // the caller's check refused.
        let head = if HDR {
            let Some(h) = frame_head(v) else {
                return self.post_one(v);
            };
            h
        } else {
            [0; 18]
        };
        let room = self.single_room(1, u32::from(signaled))?;
        // The producer counter after the room check, which restarts it on a queue pair reset
        // and connected again.
        let pi = self.pi;
        let ctrl = |n: u32| {
            let fm_ce_se = FM_CE_SE[(flags.bits() & FM_CE_SE_FLAGS) as usize];
            self.ctrl(pi, opcode::SEND, n / 2, fm_ce_se, 0)
        };
        let cs = cs_flags_of(flags);
        let words = if !HDR {
            let [c0, c1] = ctrl(6);
            let [e0, e1] = words::eth(cs, 0, [0, 0]);
            let [d0, d1] = words::data(s.length, s.lkey, s.addr);
            [c0, c1, e0, e1, d0, d1, 0, 0]
        } else {
            let n = u32::from(ETH_L2_INLINE_HEADER_SIZE);
            let [c0, c1] = ctrl(8);
            let [e0, e1, e2, e3] = words::eth_l2(cs, &head);
            let [d0, d1] = words::data(s.length - n, s.lkey, s.addr.wrapping_add(u64::from(n)));
            [c0, c1, e0, e1, e2, e3, d0, d1]
        };
        let sig = u16::from(signaled);
        let wqe = self.take::<true, true>(room, 1, wr.wr_id, opcode::SEND, signaled, sig);
        wqe.block_words_in(0, &words, 8);
        self.doorbell.ring(pi.wrapping_add(1), Words(words), true);
        Ok(())
    }

    /// Plans a frame's SEND on an Ethernet queue (`plan` is the request's, from its
    /// check `c`): the Ethernet segment with the queue's minimum inline, then the rest of the
    /// frame as data segments (the entries after the inlined bytes, the one they end in
    /// resumed) or as inline data.
    ///
    /// # Errors
    ///
    /// [`PostError::FrameTooShort`] for a frame shorter than the queue's minimum inline.
    #[inline(always)]
    pub(super) fn plan_frame(
        &self,
        plan: &mut Plan<'_>,
        c: &CheckedSend<'_>,
    ) -> Result<(), PostError> {
        let hdr = u32::from(self.eth_inline);
        match (plan.inline, plan.sgl) {
            // The common shape without a walk: one entry holding the inlined bytes and more.
            // Control, Ethernet (one unit, or two with 18 bytes), one data segment: one basic
            // block.
            (None, [s]) if s.length > hdr => {
                plan.ds = 3 + u32::from(hdr != 0);
                plan.blocks = 1;
            }
            (inline, sgl) => {
                let (ds, inline) = plan_frame_walk(sgl, inline, c.data_sges(), self.eth_inline)?;
                plan.ds = ds;
                plan.inline = inline;
                plan.blocks = ds.div_ceil(SEGS_PER_BB as u32);
            }
        }
        Ok(())
    }

    /// A frame's SEND (or a NOP) on an Ethernet queue as the 64-bit words of its one basic
    /// block ([`SendQueue::block_words`] of the other transports): the common shape, one entry
    /// by reference holding more than the inlined bytes. The bytes are those
    /// [`SendQueue::write`] writes.
    #[inline(always)]
    pub(super) fn frame_words(
        &self,
        v: Vouched<'_, '_>,
        plan: &Plan<'_>,
        pi: u32,
    ) -> Option<([u64; 8], usize)> {
        if plan.inline.is_some() {
            return None;
        }
        // The control segment of a WQE of `n` words (as `block_words`).
        let ctrl = |n: u32| self.ctrl(pi, plan.opcode, n / 2, plan.fm_ce_se, 0);
        match v.wr().op {
            SendOp::Send { .. } => {}
            SendOp::Nop => {
                let [c0, c1] = ctrl(2);
                return Some(([c0, c1, 0, 0, 0, 0, 0, 0], 2));
            }
            _ => return None,
        }
        let [s] = plan.sgl else {
            return None;
        };
        let cs = cs_flags_of(v.wr().flags);
        // The plan's size tells the shapes apart (`plan_frame`), without the queue's minimum
        // inline read again and the entry's length compared again: one entry by reference
        // has 4 units only with 18 bytes inlined from an entry that holds more; 3 without
        // inlining (or with 18 bytes inlined from an entry of exactly 18: no data segment).
        if plan.ds != 4 {
            if plan.ds == 3 && self.eth_inline == 0 {
                // (A frame is at least 14 bytes: the entry has data.)
                let [c0, c1] = ctrl(6);
                let [e0, e1] = words::eth(cs, 0, [0, 0]);
                let [d0, d1] = words::data(s.length, s.lkey, s.addr);
                // Eight words, the last two zeros past the WQE in its block: the count a
                // constant, so that the stores are eight moves, not a copy of variable length.
                return Some(([c0, c1, e0, e1, d0, d1, 0, 0], 8));
            }
            return None;
        }
        debug_assert!(
            self.eth_inline == ETH_L2_INLINE_HEADER_SIZE
                && s.length > u32::from(ETH_L2_INLINE_HEADER_SIZE)
        );
        let h = frame_head(v)?;
        let n = u32::from(ETH_L2_INLINE_HEADER_SIZE);
        let [c0, c1] = ctrl(8);
        let [e0, e1, e2, e3] = words::eth_l2(cs, &h);
        let [d0, d1] = words::data(s.length - n, s.lkey, s.addr.wrapping_add(u64::from(n)));
        Some(([c0, c1, e0, e1, e2, e3, d0, d1], 8))
    }

    /// The largest WQE the queue was sized for, in units (checked at construction to fit).
    fn max_wqe_ds(&self) -> usize {
        let head = 1 + eth_ds(usize::from(self.eth_inline));
        let data =
            (self.caps.max_send_sge as usize).max(inline_ds(self.caps.max_inline_data as usize));
        (head + data).min(MAX_DS)
    }
}

/// [`SendQueue::plan_frame`] for the other shapes (several entries, inline, an entry with no
/// more than the inlined bytes): the frame `sgl` (inline when `inline`, else with
/// `data_sges` entries of data) on a queue inlining `min_inline` bytes. Its `ds`, and its
/// inline length after the inlined bytes.
///
/// # Errors
///
/// [`PostError::FrameTooShort`] for a frame shorter than `min_inline`.
#[inline(always)]
fn plan_frame_walk(
    sgl: &[Sge],
    inline: Option<u32>,
    data_sges: u32,
    min_inline: u16,
) -> Result<(u32, Option<u32>), PostError> {
    let hdr = u32::from(min_inline);
    let head = 1 + eth_ds(usize::from(min_inline)) as u32;
    if inline.is_none() && hdr == 0 {
        return Ok((head + data_sges, None));
    }
    let (segs, bytes, short) = after_header(sgl, hdr);
    if short != 0 {
        return Err(PostError::FrameTooShort {
            len: hdr - short,
            min: hdr,
        });
    }
    Ok(match inline {
        Some(_) => (head + inline_ds(bytes as usize) as u32, Some(bytes)),
        None => (head + segs, None),
    })
}

/// What is left of gather list `sgl` after its first `hdr` bytes: the entries of a non-zero
/// length left (the one the bytes end in counted for its rest), their bytes, and how many of
/// the `hdr` bytes the list lacks (0: it has them all).
#[inline]
fn after_header(sgl: &[Sge], hdr: u32) -> (u32, u32, u32) {
    let (mut need, mut segs, mut bytes) = (hdr, 0u32, 0u32);
    for s in sgl {
        let taken = need.min(s.length);
        need -= taken;
        let left = s.length - taken;
        segs += u32::from(left != 0);
        bytes = bytes.wrapping_add(left);
    }
    (segs, bytes, need)
}

/// The Ethernet segment's `cs_flags` for a request's flags: both checksums for
/// [`SendFlags::IP_CSUM`], as libmlx5 sets them.
#[inline(always)]
pub(super) fn cs_flags_of(flags: SendFlags) -> u8 {
    if flags.contains(SendFlags::IP_CSUM) {
        cs_flags::IP_CSUM
    } else {
        0
    }
}

/// The first 18 bytes of a frame's SEND (`v`'s request) when its first entry holds them, read
/// as libmlx5 reads the bytes it inlines.
#[inline(always)]
fn frame_head(v: Vouched<'_, '_>) -> Option<[u8; 18]> {
    let [s, ..] = v.wr().op.sgl() else {
        return None;
    };
    if s.length < 18 {
        return None;
    }
    // SAFETY: the request is vouched for (`v`): a frame's first bytes, as many as an Ethernet
    // queue inlines (18 here), are readable (`new_eth`'s contract); the entry holds 18 bytes.
    Some(unsafe {
        core::ptr::with_exposed_provenance::<[u8; 18]>(s.addr as usize).read_unaligned()
    })
}

/// Writes the Ethernet segment of a frame's SEND (`list` its gather list) at segment 1 of `wqe`, whose
/// control segment is ring segment `start`: `cs_flags`, `inline_hdr_sz` = `hdr` and the
/// frame's first `hdr` bytes from byte 14 on (0 or 18: they end at a unit's end, so no
/// padding). Returns the units it takes.
#[inline(always)]
pub(super) fn write_eth(wqe: &Wqe, start: u32, list: VouchedList<'_>, cs: u8, hdr: u16) -> u32 {
    wqe.seg(1, |b| words::put(b, words::eth(cs, hdr, [0, 0])));
    if hdr != 0 {
        let at = start
            .wrapping_add(1)
            .wrapping_mul(WQE_SEG as u32)
            .wrapping_add(eth::INLINE_HDR_START as u32);
        gather_in::<false>(wqe, at, list, 0, u32::from(hdr));
    }
    eth_ds(usize::from(hdr)) as u32
}

/// Which length fields of a [`PreparedFrame`]'s headers each post sets for its frame: each an
/// offset into the headers, or `None` for no such field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameLengths {
    /// Where the IPv4 header's total length (be16) is: the IPv4 header starts 2 bytes
    /// before it (16 for Ethernet + IPv4).
    pub ipv4_total_at: Option<usize>,
    /// Where the UDP header's length (be16) is: the UDP header starts 4 bytes before it
    /// (38 for Ethernet + IPv4 without options + UDP).
    pub udp_len_at: Option<usize>,
}

impl FrameLengths {
    /// The length fields of an Ethernet + IPv4 (no options) + UDP header, 42 bytes.
    pub const IPV4_UDP: Self = Self {
        ipv4_total_at: Some(16),
        udp_len_at: Some(38),
    };
}

/// A frame prepared for one Ethernet queue by [`SendQueue::prepare_frame`]: the control
/// segment's constant part and the Ethernet segment with every header byte inlined, the
/// length fields zeroed for the post to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreparedFrame {
    /// The QP number of the queue it was prepared for.
    qpn: u32,
    signaled: bool,
    /// Header bytes inlined.
    headers: u16,
    /// The longest payload: the queue's largest frame less the headers.
    max_payload: u32,
    /// The unit of the data segment (after the Ethernet segment's).
    data_unit: u8,
    /// Basic blocks of a post without payload and with one.
    blocks: [u8; 2],
    /// The control segment's first word (the opcode and `qpn_ds`, the WQE index 0) without a
    /// data segment and with one, in memory order.
    ctrl0: [u64; 2],
    /// The WQE's two basic blocks as stored (64-bit words in memory order): the control
    /// segment (its first word set per post, its second `fm_ce_se`), the Ethernet segment
    /// with the headers, the length fields zero, zeros after.
    image: [[u64; 8]; 2],
    /// The IPv4 total length and the UDP length.
    lengths: [LengthPatch; 2],
}

/// Where a post stores a length field of a [`PreparedFrame`], and its value for an empty
/// payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LengthPatch {
    /// The unit of the WQE that holds the field.
    unit: u8,
    /// The field's first byte in the unit (even: never across two units).
    off: u8,
    /// The field's value for an empty payload.
    base: u16,
    /// All ones for a field, 0 for none.
    mask: u16,
}

impl LengthPatch {
    /// No field: a zero stored into the control segment's `imm` (bytes 12..14), which a
    /// frame's SEND has zero, so the store changes nothing.
    const NONE: Self = Self {
        unit: 0,
        off: 12,
        base: 0,
        mask: 0,
    };

    /// The field's big-endian bytes for a payload of `grow` bytes.
    #[inline(always)]
    fn value(&self, grow: u16) -> [u8; 2] {
        (self.base.wrapping_add(grow) & self.mask).to_be_bytes()
    }
}

impl PreparedFrame {
    /// The header bytes it inlines.
    #[inline]
    pub fn headers_len(&self) -> usize {
        usize::from(self.headers)
    }

    /// Whether posts of it ask for a completion.
    #[inline]
    pub fn signaled(&self) -> bool {
        self.signaled
    }

    /// The QP number of the queue it was prepared for.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}
