//! The striding ("multi-packet") receive work queue, and its packets polled in place.
//!
//! A striding WQ (`mlx5dv_create_wq` with `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`) has WQEs of
//! a next segment (16 bytes, left zero in a cyclic queue) and one data segment naming a buffer
//! of `2^log_num_strides` strides of `2^log_stride_size` bytes (`struct mlx5_mprq_wqe`). The
//! device places each packet at a stride boundary of the current WQE, contiguous, consuming
//! `ceil(len / stride)` strides, and writes one CQE for it: `wqe_id` (bytes 2..3) the WQE,
//! `wqe_counter` the first stride, `byte_cnt` the consumed strides (bits 30..16) and the
//! length (15..0). When the strides left cannot hold the next packet it writes a **filler**
//! CQE (bit 31: no packet, the strides left consumed) and goes on in the next WQE.
//!
//! The queue hands packets out **in place**: a [`Packet`] borrows its strides in the buffer
//! the caller registered (nothing is copied or allocated) and gives them back when it is
//! dropped (or [`Packet::release`]d). Each WQE counts the strides given back (fillers count at
//! once); a WQE whose strides are all back is posted again. WQEs are posted again in ring
//! order (the device takes them in that order): a WQE finished early waits for the ones before
//! it. Each WQE always names the same part of the buffer (WQE `i`: bytes `i × wqe_bytes ..`),
//! so posting again only moves the doorbell record (`dbrec[0] = be32(WQEs posted)`), after a
//! [`to_device`](zverbs_core::barrier::to_device) barrier.
//!
//! Two ways to poll ([`StridingRq::poll_packets`] with a callback, [`StridingRq::poll_burst`]
//! into an array the caller keeps): packets may be kept across polls, as long as the queue is
//! borrowed; a queue whose packets are all kept stops receiving (its WQEs are not posted
//! again), so keep fewer than a ring's worth.
//!
//! **Compressed CQEs** (a CQ created with the `CSUM_STRIDX` mini-CQE format): each mini-CQE is
//! a packet (its stride index and striding byte count); everything else (the WQE, flow tag,
//! checksum bits, timestamp) is the session title's. A session's packets therefore all carry
//! the title's timestamp ([`Packet::in_session`] says so): per-packet timestamps need a CQ
//! without compression (DPDK turns compression off for queues with the timestamp offload).
//!
//! **Sharing the CQ.** A CQ serving only this queue needs nothing more (DPDK's arrangement).
//! One shared with other queues polls their completions with [`CompletionQueue`]'s polls and
//! this queue's packets here: tell the queue its user index ([`StridingRq::set_user_index`])
//! and the CQ the same ([`CompletionQueue::set_striding_user_index`]); each poll then stops at
//! a CQE of the other kind. On such a CQ the flow tags of the rules that steer to the queue
//! must not be the QP number of a queue pair bound to the CQ (an Ethernet CQE carries the
//! tag where a queue pair's carries its number), and CQE compression must be off (the
//! ordinary poll does not tell the striding queue's compressed sessions apart). A CQ of its
//! own may compress (the stride-index format).
//!
//! **Thread safety**: the queue is owned by one thread: its bookkeeping is plain cells
//! (`Send`, not `Sync`), shared with no poller on another thread, so nothing in it needs an
//! atomic or a loom model. Packets borrow the queue and stay on its thread.

use core::cell::Cell;
use core::ptr::NonNull;

use stable_deref_trait::StableDeref;
use zverbs_core::WcStatus;
use zverbs_core::barrier;
use zverbs_core::sync::atomic::Ordering;

use crate::cq::{CompletionQueue, status_of};
use crate::devmem::{DbrecWord, OwnedCqe, SegRing};
use crate::layout::{LayoutError, WqLayout};
use crate::prm::cqe::{
    CQE_L2_OK, CQE_L3_OK, CQE_L4_OK, Cqe64, OPCODE_SHIFT, SRQN_UIDX_MASK, mpwrq, op,
};
use crate::prm::mini::{MiniCqe, PER_ARRAY, is_title};
use crate::prm::wqe::DataSeg;
use crate::prm::{INVALID_LKEY, RCV_DBR};
use crate::state::Bindings;

/// The stride layout of a striding queue's WQEs (`mlx5dv_striding_rq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrideConfig {
    /// log2 of the strides in a WQE (`single_wqe_log_num_of_strides`), 3 to 16.
    pub log_num_strides: u32,
    /// log2 of a stride's bytes (`single_stride_log_num_of_bytes`), 6 to 13.
    pub log_stride_size: u32,
}

impl StrideConfig {
    /// Bytes per stride.
    #[inline]
    pub const fn stride_size(&self) -> u32 {
        1 << self.log_stride_size
    }

    /// Strides per WQE.
    #[inline]
    pub const fn num_strides(&self) -> u32 {
        1 << self.log_num_strides
    }

    /// Bytes per WQE (its data segment's `byte_count`).
    #[inline]
    pub const fn wqe_bytes(&self) -> u32 {
        1 << (self.log_num_strides + self.log_stride_size)
    }

    fn check(self) -> Result<Self, LayoutError> {
        if (3..=16).contains(&self.log_num_strides) && (6..=13).contains(&self.log_stride_size) {
            Ok(self)
        } else {
            Err(LayoutError::Strides {
                log_num_strides: self.log_num_strides,
                log_stride_size: self.log_stride_size,
            })
        }
    }
}

/// The buffer the strides are in: registered memory (its lkey) of at least `wqe_cnt ×`
/// [`StrideConfig::wqe_bytes`] bytes, addressed by the device as the process does (a
/// memory region registered at its virtual address, as `ibv_reg_mr` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrideBuffer {
    /// The first byte.
    pub addr: NonNull<u8>,
    /// Its length in bytes.
    pub len: usize,
    /// The lkey of the region it is in.
    pub lkey: u32,
}

/// Per-WQE bookkeeping of a striding queue: the strides given back. Allocate `wqe_cnt` once.
#[derive(Debug, Default)]
pub struct StrideSlot(Cell<u32>);

impl StrideSlot {
    /// An empty slot.
    pub const fn new() -> Self {
        Self(Cell::new(0))
    }
}

/// The bookkeeping of a striding queue, in storage `S` (`&[StrideSlot]`, `Box<[StrideSlot]>`,
/// ...), so that the owner of the queue may own it too (`Box<StridingState<Box<[_]>>>`).
#[derive(Debug)]
pub struct StridingState<S> {
    slots: S,
}

/// A handle through which a striding queue reaches its [`StridingState`].
pub trait StridingStateRef: StableDeref<Target = StridingState<Self::Slots>> {
    /// The storage of the state's slots.
    type Slots: StableDeref<Target = [StrideSlot]>;
}

impl<P, S> StridingStateRef for P
where
    P: StableDeref<Target = StridingState<S>>,
    S: StableDeref<Target = [StrideSlot]>,
{
    type Slots = S;
}

impl<S: StableDeref<Target = [StrideSlot]>> StridingState<S> {
    /// State over `slots`, one per WQE (`wqe_cnt`, a power of two ≤ 2^15).
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] or [`LayoutError::RingTooLarge`] for other lengths.
    pub fn new(slots: S) -> Result<Self, LayoutError> {
        let n = slots.len();
        if n == 0 || !n.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo { count: n as u32 });
        }
        if n > 1 << 15 {
            return Err(LayoutError::RingTooLarge { count: n as u32 });
        }
        Ok(Self { slots })
    }

    /// Number of slots.
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Whether there are none (never, for a state `new` made).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// What a packet carries besides its bytes: from its CQE, or its session's title.
#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    timestamp: u64,
    flow_tag: u32,
    hds_ip_ext: u8,
    in_session: bool,
}

impl Meta {
    /// What a packet's CQE (or, for a session's packets, its title) says beside the packet.
    #[inline(always)]
    fn of(cqe: &OwnedCqe, in_session: bool) -> Self {
        cqe.with(|b| {
            let c = Cqe64::new_unchecked(b);
            Meta {
                timestamp: c.timestamp(),
                flow_tag: c.qpn(),
                hds_ip_ext: c.hds_ip_ext(),
                in_session,
            }
        })
    }
}

/// A compressed session being expanded (kept between polls when one ends inside it).
#[derive(Clone, Copy, Debug)]
struct Session {
    /// Packets (and fillers) not taken yet; 0: none open.
    left: u32,
    /// Place in the session of the next.
    next: u32,
    /// The WQE of every completion of the session (the title's `wqe_id`).
    wqe_id: u16,
    meta: Meta,
    /// The array of mini-CQEs holding the next one's, copied out of the ring.
    array: [[u8; 8]; PER_ARRAY],
}

impl Session {
    const NONE: Self = Self {
        left: 0,
        next: 0,
        wqe_id: 0,
        meta: Meta {
            timestamp: 0,
            flow_tag: 0,
            hds_ip_ext: 0,
            in_session: true,
        },
        array: [[0; 8]; PER_ARRAY],
    };
}

/// `op_own` of a session entry handed back: the invalid opcode, which no pass's owner check
/// takes.
const INVALID_OP_OWN: u8 = op::INVALID << OPCODE_SHIFT;

/// The part of the queue packets reach to give their strides back: not generic, so a
/// [`Packet`] is one type whatever the state's storage.
#[derive(Debug)]
struct Core {
    /// The stride buffer.
    buf: NonNull<u8>,
    buf_len: usize,
    dbrec: DbrecWord,
    /// WQEs in the ring, minus one.
    mask: u32,
    log_stride: u32,
    log_num: u32,
    /// Strides per WQE (`1 << log_num`).
    num: u32,
    /// WQEs posted (free-running).
    head: Cell<u32>,
    /// The oldest WQE not posted again yet (free-running): `head - tail` is the ring's size.
    tail: Cell<u32>,
}

impl Core {
    /// Gives `strides` of WQE `slot` back; posts again the WQEs from the oldest on whose
    /// strides are all back.
    #[inline(always)]
    fn release(&self, slots: &[StrideSlot], slot: u32, strides: u32) {
        let Some(s) = slots.get(slot as usize) else {
            return;
        };
        let done = s.0.get() + strides;
        s.0.set(done);
        if done >= self.num && slot == self.tail.get() & self.mask {
            self.repost(slots);
        }
    }

    /// Posts again every finished WQE from the oldest on: the doorbell record moves by as
    /// many (their data segments name the same strides as before).
    #[inline(never)]
    fn repost(&self, slots: &[StrideSlot]) {
        let (mut tail, mut head) = (self.tail.get(), self.head.get());
        while let Some(s) = slots.get((tail & self.mask) as usize)
            && s.0.get() >= self.num
        {
            s.0.set(0);
            tail = tail.wrapping_add(1);
            head = head.wrapping_add(1);
        }
        self.tail.set(tail);
        self.head.set(head);
        // The WQEs are unchanged since the device last read them; the barrier orders the
        // strides' last reads (through the packets given back) before the record.
        barrier::to_device();
        self.dbrec.publish(head & 0xffff, Ordering::Relaxed);
    }
}

/// A striding receive work queue of an mlx5 device, driven directly: its WQEs, doorbell
/// record and the packets in its strides.
#[derive(Debug)]
pub struct StridingRq<P> {
    core: Core,
    state: P,
    /// The user index whose CQEs are this queue's, when it shares its CQ.
    uidx: Option<u32>,
    session: Cell<Session>,
    /// The first receive error CQE: its status and vendor syndrome.
    error: Cell<Option<(WcStatus, u32)>>,
    /// CQEs that named strides outside their WQE or a length longer than their strides.
    malformed: Cell<u32>,
}

// SAFETY: the queue owns its ring, doorbell record and stride buffer (constructor contract);
// its cells are reached only through `&self` on the thread that holds it, and packets borrow
// it, so they cannot outlive a move to another thread.
unsafe impl<P: Send> Send for StridingRq<P> {}

impl<P: StridingStateRef> StridingRq<P> {
    /// Drives the striding work queue whose ring `layout` and doorbell record `dbrec` are
    /// (`mlx5dv_init_obj(MLX5DV_OBJ_RWQ)`: `buf`, `wqe_cnt`, `stride`, `dbrec`), with strides
    /// as `strides` in `buffer`, bookkeeping in `state`: writes every WQE and posts them all.
    ///
    /// # Safety
    ///
    /// - `layout` and `dbrec` are a live work queue's (or the software device's equivalent),
    ///   created with `strides`; they stay valid while the queue lives, and nothing else
    ///   posts to it (no `ibv_post_wq_recv`);
    /// - the WQ is ready (`IBV_WQS_RDY`: libmlx5 clears the doorbell record when it makes it
    ///   so) and new: nothing posted;
    /// - `buffer` is memory of the region `lkey` names, valid while the queue lives, which no
    ///   one but the device (and this queue, reading the packets it reports) accesses;
    /// - the CQs polled with it ([`StridingRq::poll_packets`]) are the WQ's.
    ///
    /// # Errors
    ///
    /// A [`LayoutError`] for a ring that is not a power of two ≤ 2^15 or does not match
    /// `state`, a WQE stride that is not a power of two ≥ 32, strides outside a ConnectX's
    /// range, or a buffer smaller than the WQEs name.
    pub unsafe fn new(
        layout: &WqLayout,
        dbrec: NonNull<u32>,
        strides: StrideConfig,
        buffer: StrideBuffer,
        state: P,
    ) -> Result<Self, LayoutError> {
        let cnt = layout.wqe_cnt;
        if cnt == 0 || !cnt.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo { count: cnt });
        }
        if cnt > 1 << 15 {
            return Err(LayoutError::RingTooLarge { count: cnt });
        }
        if state.len() != cnt {
            return Err(LayoutError::StorageLength {
                needed: cnt,
                given: state.len() as usize,
            });
        }
        let stride = layout.stride;
        if stride < 32 || !stride.is_power_of_two() {
            return Err(LayoutError::BadStride { stride });
        }
        let strides = strides.check()?;
        let needed = cnt as usize * strides.wqe_bytes() as usize;
        if buffer.len < needed {
            return Err(LayoutError::StrideBuffer {
                needed,
                given: buffer.len,
            });
        }
        let segs = stride / 16;
        // SAFETY: (caller) the ring holds `cnt × stride` bytes while the queue lives, its own.
        let ring = unsafe { SegRing::new(layout.buf, cnt * segs) };
        let addr = buffer.addr.as_ptr() as u64;
        for i in 0..cnt {
            // SAFETY: nothing is posted yet (caller: the queue is new), so every WQE is free.
            let wqe = unsafe { ring.reserve_recv(i * segs, segs) };
            wqe.seg(0, |b| *b = [0; 16]);
            let at = addr + u64::from(i) * u64::from(strides.wqe_bytes());
            wqe.seg(1, |b| {
                DataSeg::new_unchecked(b).set(strides.wqe_bytes(), buffer.lkey, at)
            });
            if segs > 2 {
                wqe.seg(2, |b| DataSeg::new_unchecked(b).set(0, INVALID_LKEY, 0));
            }
        }
        let core = Core {
            buf: buffer.addr,
            buf_len: needed,
            // SAFETY: (caller) the record is valid while the queue lives; a WQ's is one word.
            dbrec: unsafe { DbrecWord::new(dbrec, RCV_DBR) },
            mask: cnt - 1,
            log_stride: strides.log_stride_size,
            log_num: strides.log_num_strides,
            num: strides.num_strides(),
            head: Cell::new(cnt),
            tail: Cell::new(0),
        };
        for s in state.slots.iter() {
            s.0.set(0);
        }
        barrier::to_device();
        core.dbrec.publish(cnt & 0xffff, Ordering::Relaxed);
        Ok(Self {
            core,
            state,
            uidx: None,
            session: Cell::new(Session::NONE),
            error: Cell::new(None),
            malformed: Cell::new(0),
        })
    }

    /// Takes only the CQEs of user index `uidx` (CQE version 1, the WQ's `user_index`): for a
    /// queue whose CQ serves other queues too (see the module docs). `None` (the default):
    /// every receive CQE of the CQ is this queue's.
    pub fn set_user_index(&mut self, uidx: Option<u32>) {
        self.uidx = uidx.map(|u| u & SRQN_UIDX_MASK);
    }

    /// The stride layout.
    pub fn strides(&self) -> StrideConfig {
        StrideConfig {
            log_num_strides: self.core.log_num,
            log_stride_size: self.core.log_stride,
        }
    }

    /// Number of WQEs in the ring.
    pub fn entries(&self) -> u32 {
        self.core.mask + 1
    }

    /// WQEs posted (free-running): the doorbell record's count.
    pub fn head(&self) -> u32 {
        self.core.head.get()
    }

    /// The first receive error the queue's CQ reported (its status and vendor syndrome): the
    /// WQ is in the error state and places no more packets.
    pub fn error(&self) -> Option<(WcStatus, u32)> {
        self.error.get()
    }

    /// CQEs that named strides outside their WQE, or a length longer than their strides: not
    /// handed out (their strides are taken as given back). A device never writes them.
    pub fn malformed(&self) -> u32 {
        self.malformed.get()
    }

    /// Polls `cq` for at most `max` packets of this queue, calling `f` with each, in order.
    /// A packet gives its strides back when dropped: at the end of `f`, or later if `f` keeps
    /// it. Fillers are taken without a call. Stops early at a CQE of another queue (a shared
    /// CQ: see the module docs) and after a receive error ([`StridingRq::error`]). Returns the
    /// packets handed to `f`.
    #[inline]
    pub fn poll_packets<'a, B: Bindings>(
        &'a self,
        cq: &mut CompletionQueue<B>,
        max: usize,
        mut f: impl FnMut(Packet<'a>),
    ) -> usize {
        self.poll_with(cq, max, |_, p| f(p))
    }

    /// Polls `cq` for at most `out.len()` packets of this queue, into `out[0..n]`, returning
    /// `n`: a burst the caller keeps until it is done with each (dropping a packet, or setting
    /// its place to `None`, gives its strides back; one still in a place written is given back
    /// then). As [`StridingRq::poll_packets`] otherwise.
    #[inline]
    pub fn poll_burst<'a, B: Bindings>(
        &'a self,
        cq: &mut CompletionQueue<B>,
        out: &mut [Option<Packet<'a>>],
    ) -> usize {
        let max = out.len();
        self.poll_with(cq, max, |n, p| {
            if let Some(o) = out.get_mut(n) {
                *o = Some(p);
            }
        })
    }

    /// The poll both forms share: `emit(k, packet)` for the `k`-th packet of this poll.
    ///
    /// `emit` is never handed to a function out of line (which would make what it captures,
    /// a caller's running sum say, live in memory through the whole poll): a compressed
    /// session's entries are decoded out of line ([`StridingRq::take_session`]) and emitted
    /// here.
    #[inline(always)]
    fn poll_with<'a, B: Bindings>(
        &'a self,
        cq: &mut CompletionQueue<B>,
        max: usize,
        mut emit: impl FnMut(usize, Packet<'a>),
    ) -> usize {
        let mut n = 0;
        let mut consumed = false;
        'polls: loop {
            if self.session.get().left != 0 {
                // A session is open (a poll ended inside one, or a title was just read): its
                // next entry is at the consumer counter.
                consumed = true;
                let mut batch = [(0u16, 0u32); PER_ARRAY];
                let k = self.take_session(cq, max - n, &mut batch);
                let s = self.session.get();
                for &(stride, byte_cnt) in batch.iter().take(k) {
                    if let Some(p) = self.packet(s.wqe_id, u32::from(stride), byte_cnt, s.meta) {
                        emit(n, p);
                        n += 1;
                    }
                }
                if s.left != 0 {
                    if n < max {
                        continue 'polls;
                    }
                    break 'polls;
                }
            }
            while n < max {
                let Some((cqe, op_own)) = cq.peek_owned() else {
                    break 'polls;
                };
                let c = cqe.with(|b| {
                    let c = Cqe64::new_unchecked(b);
                    (c.srqn(), c.wqe_id(), c.wqe_counter(), c.byte_cnt())
                });
                let (uidx, wqe_id, stride, byte_cnt) = c;
                if self.uidx.is_some_and(|u| u != uidx) {
                    break 'polls;
                }
                let cqe_op = op_own >> OPCODE_SHIFT;
                if !(op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&cqe_op) {
                    if cqe_op == op::RESP_ERR {
                        self.failed(cqe);
                        cq.advance();
                        consumed = true;
                    }
                    break 'polls;
                }
                if is_title(op_own) {
                    consumed = true;
                    if self.open(cq, cqe, byte_cnt, wqe_id) {
                        continue 'polls;
                    }
                    continue;
                }
                let meta = Meta::of(&cqe, false);
                cq.advance();
                consumed = true;
                if let Some(p) = self.packet(wqe_id, u32::from(stride), byte_cnt, meta) {
                    emit(n, p);
                    n += 1;
                }
            }
            break;
        }
        if consumed {
            cq.publish_ci();
        }
        n
    }

    /// The packet a (mini-)CQE reports: WQE `wqe_id`, first stride `stride`, striding
    /// `byte_cnt`. A filler, or a CQE naming strides outside its WQE, gives its strides back at
    /// once and is no packet.
    #[inline(always)]
    fn packet(&self, wqe_id: u16, stride: u32, byte_cnt: u32, meta: Meta) -> Option<Packet<'_>> {
        let core = &self.core;
        let slot = u32::from(wqe_id) & core.mask;
        let strides = (byte_cnt >> mpwrq::STRIDES_SHIFT) & mpwrq::STRIDES_MASK;
        let slots = &*self.state.slots;
        if byte_cnt & mpwrq::FILLER != 0 {
            core.release(slots, slot, strides);
            return None;
        }
        let len = byte_cnt & mpwrq::LEN_MASK;
        // A packet lies in the strides it consumes, inside its WQE: at least one stride, the
        // last within the WQE, and `len` bytes (1 at least) in them (`ceil(len / stride)` of
        // them at most: `(len - 1) >> log_stride < strides`, which 0 strides or bytes fail).
        if stride + strides > core.num || len.wrapping_sub(1) >> core.log_stride >= strides {
            self.malformed.set(self.malformed.get() + 1);
            core.release(slots, slot, strides.min(core.num));
            return None;
        }
        let off = (((slot << core.log_num) + stride) as usize) << core.log_stride;
        debug_assert!(off + len as usize <= core.buf_len);
        // SAFETY: the bytes are inside the buffer (`stride + strides` within the WQE, whose
        // buffer part the constructor checked) and the device wrote them before the CQE (whose
        // ownership check and barrier came first); it writes them again only after the WQE is
        // posted again, which waits for this packet to give its strides back, and the packet
        // borrows the queue, which keeps the buffer valid (constructor contract).
        let bytes = unsafe {
            core::slice::from_raw_parts(core.buf.as_ptr().add(off).cast_const(), len as usize)
        };
        Some(Packet {
            bytes,
            core,
            slots,
            slot,
            strides,
            meta,
        })
    }

    /// A receive error CQE: recorded (the first), its WQE's strides left as they are (the WQ
    /// places nothing more).
    #[cold]
    #[inline(never)]
    fn failed(&self, cqe: OwnedCqe) {
        if self.error.get().is_none() {
            let e = cqe.with(|b| {
                let c = Cqe64::new_unchecked(b);
                (status_of(c.syndrome()), u32::from(c.vendor_err_synd()))
            });
            self.error.set(Some(e));
        }
    }

    /// Entry `ahead` of the open session (from the consumer counter on). The one place the
    /// queue argues a session's entries are software's: it is called only while
    /// `self.session` is open (`left > ahead`), which [`StridingRq::open`] makes so only for a
    /// title the CQ's ownership check passed, whose count is within the ring; the poll
    /// publishes the consumer counter only after its last use of the entries.
    #[inline(always)]
    fn session_entry<B: Bindings>(&self, cq: &CompletionQueue<B>, ahead: u32) -> OwnedCqe {
        debug_assert!(self.session.get().left > ahead);
        // SAFETY: as above: the session is open and covers the entry.
        unsafe { cq.session_entry(ahead) }
    }

    /// Opens the compressed session whose title `cqe` (`count` completions, WQE `wqe_id`) is
    /// at the consumer counter, software's. Returns `false`, having consumed the title alone,
    /// for a count below 2 or above the ring's size.
    #[cold]
    #[inline(never)]
    fn open<B: Bindings>(
        &self,
        cq: &mut CompletionQueue<B>,
        cqe: OwnedCqe,
        count: u32,
        wqe_id: u16,
    ) -> bool {
        if count < 2 || count > cq.cqe_cnt() {
            self.malformed.set(self.malformed.get() + 1);
            cqe.set_op_own(INVALID_OP_OWN);
            cq.advance();
            return false;
        }
        let meta = Meta::of(&cqe, true);
        let mut s = Session {
            left: count,
            next: 0,
            wqe_id,
            meta,
            array: [[0; 8]; PER_ARRAY],
        };
        self.session.set(s);
        s.array = read_array(self.session_entry(cq, 1));
        self.session.set(s);
        true
    }

    /// Takes up to `room` (and at most [`PER_ARRAY`]) entries of the open session into
    /// `out` as (first stride, striding byte count), advancing past them; the count taken.
    /// Leaves the session open when it has more.
    #[cold]
    #[inline(never)]
    fn take_session<B: Bindings>(
        &self,
        cq: &mut CompletionQueue<B>,
        room: usize,
        out: &mut [(u16, u32); PER_ARRAY],
    ) -> usize {
        let mut s = self.session.get();
        let mut k = 0;
        while s.left != 0 && k < room.min(PER_ARRAY) {
            let mini = MiniCqe::new_unchecked(&s.array[s.next as usize % PER_ARRAY]);
            out[k] = (mini.stride_idx(), mini.byte_cnt());
            k += 1;
            self.session_entry(cq, 0).set_op_own(INVALID_OP_OWN);
            cq.advance();
            s.next += 1;
            s.left -= 1;
            self.session.set(s);
            if s.left != 0 && (s.next as usize).is_multiple_of(PER_ARRAY) {
                // The next array is in the entry of its first completion, now at the counter.
                s.array = read_array(self.session_entry(cq, 0));
            }
        }
        if s.left != 0 {
            // Stopped inside: the entry at the counter (its array, if any, copied) must not
            // pass any poll's ownership check; this queue resumes from its own record.
            self.session_entry(cq, 0).set_op_own(INVALID_OP_OWN);
        }
        self.session.set(s);
        k
    }
}

/// Copies the array of mini-CQEs in the entry `cqe`.
#[inline(always)]
fn read_array(cqe: OwnedCqe) -> [[u8; 8]; PER_ARRAY] {
    cqe.with(|b| {
        let mut a = [[0u8; 8]; PER_ARRAY];
        for (i, m) in a.iter_mut().enumerate() {
            m.copy_from_slice(&b[i * 8..i * 8 + 8]);
        }
        a
    })
}

/// A packet in a striding queue's strides, borrowed in place. Gives its strides back when
/// dropped ([`Packet::release`] says so explicitly); its WQE is posted again once all of its
/// strides are back.
#[derive(Debug)]
#[must_use = "a packet gives its strides back when dropped"]
pub struct Packet<'a> {
    bytes: &'a [u8],
    core: &'a Core,
    slots: &'a [StrideSlot],
    slot: u32,
    strides: u32,
    meta: Meta,
}

impl Packet<'_> {
    /// The packet's bytes (the frame as received, from the destination MAC on), in the stride
    /// buffer.
    #[inline(always)]
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }

    /// Its length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it has no bytes.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The CQE's timestamp, raw: free-running device ticks (convert with
    /// [`ClockInfo::ts_to_ns`](crate::clock::ClockInfo::ts_to_ns)), or on a CQ in real-time
    /// mode `seconds << 32 | nanoseconds` ([`ClockInfo::REAL_TIME`](crate::clock::ClockInfo::REAL_TIME)).
    /// Meaningful on a CQ created with timestamps; in a compressed session, the title's (the
    /// same for every packet of the session: [`Packet::in_session`]).
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        self.meta.timestamp
    }

    /// The flow tag of the rule that steered the packet (`IBV_FLOW_SPEC_ACTION_TAG`; 0
    /// without one): bits 23..0 of the CQE's `sop_drop_qpn`.
    #[inline(always)]
    pub fn flow_tag(&self) -> u32 {
        self.meta.flow_tag
    }

    /// The device found the L2 header valid (`MLX5_CQE_L2_OK`).
    #[inline(always)]
    pub fn l2_ok(&self) -> bool {
        self.meta.hds_ip_ext & CQE_L2_OK != 0
    }

    /// The IP header checksum is right (`MLX5_CQE_L3_OK`).
    #[inline(always)]
    pub fn l3_ok(&self) -> bool {
        self.meta.hds_ip_ext & CQE_L3_OK != 0
    }

    /// The TCP/UDP checksum is right (`MLX5_CQE_L4_OK`).
    #[inline(always)]
    pub fn l4_ok(&self) -> bool {
        self.meta.hds_ip_ext & CQE_L4_OK != 0
    }

    /// Both checksums are right (libmlx5's `IBV_WC_IP_CSUM_OK` for IPv4).
    #[inline(always)]
    pub fn csum_ok(&self) -> bool {
        self.l3_ok() && self.l4_ok()
    }

    /// The packet came in a compressed session: its timestamp, flow tag and checksum bits are
    /// the session title's.
    #[inline(always)]
    pub fn in_session(&self) -> bool {
        self.meta.in_session
    }

    /// The ring slot of the WQE the packet is in.
    #[inline(always)]
    pub fn wqe_index(&self) -> u32 {
        self.slot
    }

    /// The strides it takes.
    #[inline(always)]
    pub fn strides(&self) -> u32 {
        self.strides
    }

    /// Gives the strides back now (what dropping the packet does).
    #[inline(always)]
    pub fn release(self) {}
}

impl Drop for Packet<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.core.release(self.slots, self.slot, self.strides);
    }
}

#[cfg(test)]
mod tests;
