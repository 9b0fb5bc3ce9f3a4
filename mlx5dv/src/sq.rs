//! The send queue: builds WQEs in the ring and rings the doorbell.
//!
//! Posting checks the request completely before it writes a byte (the core's
//! [`SendWr::check`], then room in the ring and the CQ) and plans it from the check's summary
//! (opcode, size in segments and basic blocks, the control flags); a refused request leaves the
//! ring, the bookkeeping and the counters untouched. Then the segments are written at the producer
//! counter, each segment index masked into the ring, so a WQE that meets the end of the ring
//! continues at slot 0 whatever its size and alignment (as rdma-core does, without padding
//! NOPs). Nothing is visible to the device until [`PostSend::ring`].

use core::marker::PhantomData;
use core::ptr::NonNull;

use zverbs_core::mmio::MmioRegion;
use zverbs_core::ring::Ring;
use zverbs_core::{
    BatchError, CheckedSend, PostError, PostSend, SendFlags, SendOp, SendWr, Sge, UdDest,
};

use crate::bf::{BfMode, SharedBf};
use crate::devmem::{DbrecWord, SegRing, Wqe};
use crate::doorbell::{Back, Doorbell, Words};
use crate::layout::{LayoutError, QpLayout, SqCaps};
use crate::prm::wqe::{UD_HEADER_DS, eth_ds, inline_ds, words};
// The field views, for the tests (`use super::*`), which read the segments back through them.
#[cfg(test)]
use crate::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, inline_byte_count};
use crate::prm::{MAX_DS, SEGS_PER_BB, SND_DBR, fm_ce_se, opcode};
use crate::state::{SlotData, SlotsAt, SqStateRef};

mod eth;
mod prepared;
use eth::write_eth;
pub use eth::{FRAME_HEADERS_MAX, FrameLengths, PreparedFrame};
pub use prepared::{Changes, Prepared, PreparedRdma, PreparedSend};

/// What a checked request will write.
#[derive(Clone, Copy, Debug)]
struct Plan<'w> {
    /// The data entries (of a WRITE, SEND or READ; none for atomics and NOP).
    sgl: &'w [Sge],
    opcode: u8,
    /// Size in 16-byte segments (`ds`).
    ds: u32,
    /// Size in basic blocks.
    blocks: u32,
    fm_ce_se: u8,
    signaled: bool,
    /// Inline payload length, or `None` for data segments.
    inline: Option<u32>,
    /// The immediate value (0 for the operations without one).
    imm: u32,
}

impl<'w> Plan<'w> {
    /// The WQE for `op`, from its check's summary `c`. Cannot fail: every operation has a WQE,
    /// and the check bounded its size (the queue's construction checked that the largest fits).
    /// Kept apart from [`SendQueue::plan`], its one caller: the same code written into it
    /// costs a batch six instructions a request more (`cargo xtask bench --instructions`).
    #[inline(always)]
    fn of(op: &SendOp<'w>, c: &CheckedSend<'w>) -> Self {
        let e = WQE_HEAD[op_index(op)];
        let (opcode, head) = (e as u8, u32::from(e >> 8));
        // An inline request has no data entries; any other has no inline length (and
        // `inline_ds(0)` is 0).
        let ds = head + c.data_sges() + inline_ds(c.inline_len() as usize) as u32;
        // `ds` is at most `MAX_DS` (the construction checked the largest request), so the sum
        // below cannot overflow; `div_ceil`, which allows for it, costs three more
        // instructions on every post.
        #[allow(clippy::manual_div_ceil)]
        let blocks = (ds + (SEGS_PER_BB as u32 - 1)) / SEGS_PER_BB as u32;
        Plan {
            sgl: c.sgl(),
            opcode,
            ds,
            blocks,
            fm_ce_se: FM_CE_SE[(c.flags().bits() & FM_CE_SE_FLAGS) as usize],
            signaled: c.signaled(),
            inline: c.is_inline().then_some(c.inline_len()),
            imm: c.imm(),
        }
    }
}

/// The position of `op` in [`WQE_HEAD`]: the order of [`SendOp`]'s variants, so that the
/// compiler reads it from the operation's discriminant.
#[inline(always)]
const fn op_index(op: &SendOp<'_>) -> usize {
    match op {
        SendOp::Write { .. } => 0,
        SendOp::WriteImm { .. } => 1,
        SendOp::Send { .. } => 2,
        SendOp::SendImm { .. } => 3,
        SendOp::Read { .. } => 4,
        SendOp::CompareSwap { .. } => 5,
        SendOp::FetchAdd { .. } => 6,
        SendOp::Nop => 7,
        SendOp::SendTo { .. } => 8,
        SendOp::SendToImm { .. } => 9,
    }
}

/// For each operation ([`op_index`]): its WQE opcode and the segments before its data (ctrl;
/// raddr for the operations with a remote address; atomic and the one data segment of an
/// atomic; the datagram segment of a UD SEND). One table lookup for both, not a branch per
/// operation.
const WQE_HEAD: [u16; 10] = [
    opcode::RDMA_WRITE as u16 | 2 << 8,
    opcode::RDMA_WRITE_IMM as u16 | 2 << 8,
    opcode::SEND as u16 | 1 << 8,
    opcode::SEND_IMM as u16 | 1 << 8,
    opcode::RDMA_READ as u16 | 2 << 8,
    opcode::ATOMIC_CS as u16 | 4 << 8,
    opcode::ATOMIC_FA as u16 | 4 << 8,
    opcode::NOP as u16 | 1 << 8,
    opcode::SEND as u16 | (UD_HEADER_DS as u16) << 8,
    opcode::SEND_IMM as u16 | (UD_HEADER_DS as u16) << 8,
];

/// The request flags that map to bits of `fm_ce_se` (the low three).
const FM_CE_SE_FLAGS: u32 = SendFlags::FENCE
    .union(SendFlags::SIGNALED)
    .union(SendFlags::SOLICITED)
    .bits();
const _: () = assert!(FM_CE_SE_FLAGS == 0b111);

/// The control segment's `fm_ce_se` for each combination of [`FM_CE_SE_FLAGS`], looked up
/// without branches: a signaled request asks for a CQE, a solicited one sets the solicited
/// event, a fenced one waits for earlier READs and atomics (as libmlx5 maps `IBV_SEND_*`).
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let flags = SendFlags::from_bits_truncate(i as u32);
        if flags.contains(SendFlags::SIGNALED) {
            t[i] |= fm_ce_se::CQ_UPDATE;
        }
        if flags.contains(SendFlags::SOLICITED) {
            t[i] |= fm_ce_se::SOLICITED;
        }
        if flags.contains(SendFlags::FENCE) {
            t[i] |= fm_ce_se::FENCE;
        }
        i += 1;
    }
    t
};

mod sealed {
    pub trait Sealed {}
}

/// A request whose posting contract the caller of an unsafe post vouched for ([`PostSend`]'s:
/// its local entries name registered memory valid until it completes, its inline sources are
/// readable). Made once, where the post enters the queue (the trait's methods,
/// [`SendQueue::post_to`] and [`SendQueue::stage_to`]), so that the code below them argues it
/// no more: with a [`Wqe`] reservation, writing a request is safe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vouched<'a, 'w>(&'a SendWr<'w>);

impl<'a, 'w> Vouched<'a, 'w> {
    /// Vouches for `wr`.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`] holds for `wr`.
    #[inline(always)]
    pub(crate) unsafe fn new(wr: &'a SendWr<'w>) -> Self {
        Self(wr)
    }

    /// The request.
    #[inline(always)]
    pub(crate) fn wr(self) -> &'a SendWr<'w> {
        self.0
    }

    /// The request's gather list, vouched for with it: the list of an operation that carries
    /// one (WRITE, SEND, READ, with or without immediate, datagrams), empty for the others
    /// (atomics, whose one entry is the device's to write, and NOP). Every operation with a
    /// list has it first (`SendOp` is `repr(C)`), so this is one load and a select.
    #[inline(always)]
    pub(crate) fn list(self) -> VouchedList<'a> {
        VouchedList(match self.0.op {
            SendOp::Write { sgl, .. }
            | SendOp::WriteImm { sgl, .. }
            | SendOp::Send { sgl }
            | SendOp::SendImm { sgl, .. }
            | SendOp::Read { sgl, .. }
            | SendOp::SendTo { sgl, .. }
            | SendOp::SendToImm { sgl, .. } => sgl,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } | SendOp::Nop => &[],
        })
    }
}

/// The gather list of a request vouched for ([`Vouched::list`]): its entries' bytes that the
/// post copies (inline data, a frame's first bytes) are readable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VouchedList<'a>(&'a [Sge]);

/// Requests vouched for together ([`Vouched`], for each): a batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VouchedAll<'a, 'w>(pub(crate) &'a [SendWr<'w>]);

impl<'a, 'w> VouchedAll<'a, 'w> {
    /// Vouches for every request of `wrs`.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`] holds for each.
    #[inline(always)]
    pub(crate) unsafe fn new(wrs: &'a [SendWr<'w>]) -> Self {
        Self(wrs)
    }

    /// One of them (`wr` is an element of the batch).
    #[inline(always)]
    pub(crate) fn one(self, wr: &'a SendWr<'w>) -> Vouched<'a, 'w> {
        Vouched(wr)
    }
}

/// Proof that room was checked for the request about to be written at the producer counter:
/// its blocks are free (the device completed what was there) and past the counter the device
/// was given. Made by the room checks of the post paths, the one unsafe step of writing a
/// request; spent by [`SendQueue::take`], which records the request and hands out the WQE's
/// blocks. Costs nothing: the reservation is made where the blocks are written.
#[derive(Debug)]
pub(crate) struct Room(());

impl Room {
    /// Room was checked.
    ///
    /// # Safety
    ///
    /// The request about to be written at the producer counter fits the free blocks (and
    /// the CQ), as the room checks found.
    #[inline(always)]
    pub(crate) unsafe fn checked() -> Self {
        Self(())
    }
}

/// The transport of a send queue, as a type: [`Connected`] (RC, the default), [`Datagram`]
/// (UD), [`Dci`] (a DC initiator) or [`Ethernet`] (a raw packet QP). Known at compile time, so that a connected queue pays
/// nothing for the other transports: the queue refuses the operations its transport lacks
/// ([`PostError::WrongTransport`]), as its [`SqCaps::transport`] says, which its construction
/// checks against this type, and only a DCI writes the DC address, only an Ethernet queue the
/// Ethernet segment. Sealed: these four are the transports.
pub trait SqTransport: sealed::Sealed {
    /// Whether the queue is an unreliable-datagram queue.
    const UD: bool;
    /// Whether the queue is a DC initiator's: each request is addressed at its post
    /// ([`SendQueue::post_to`]), its WQE carries the DC address after the control segment.
    const DC: bool;
    /// Whether the queue is a raw packet QP's on an Ethernet port: each SEND is a whole
    /// frame, its WQE carries the Ethernet segment after the control segment.
    const ETH: bool;
}

/// The transports whose requests say themselves where they go (RC: to the connected peer;
/// UD: [`SendOp::SendTo`]; Ethernet: the frame's own header): their queues post through
/// [`PostSend`]. A DCI's requests are
/// given their target at the post ([`SendQueue::post_to`]), so [`Dci`] is not one: a request
/// without a target does not compile.
pub trait SelfAddressed: SqTransport {}

/// A reliable-connected send queue ([`SqTransport`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Connected;

/// An unreliable-datagram send queue ([`SqTransport`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Datagram;

/// The send queue of a DC initiator ([`SqTransport`]): reliable-connection operations, each
/// addressed to a DC target at its post (`sq/dc.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Dci;

/// The send queue of a raw packet QP on an Ethernet port ([`SqTransport`]): each
/// [`SendOp::Send`] is one whole frame, written behind an Ethernet segment (`sq/eth.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ethernet;

impl sealed::Sealed for Connected {}
impl sealed::Sealed for Datagram {}
impl sealed::Sealed for Dci {}
impl sealed::Sealed for Ethernet {}

impl SqTransport for Connected {
    const UD: bool = false;
    const DC: bool = false;
    const ETH: bool = false;
}

impl SqTransport for Datagram {
    const UD: bool = true;
    const DC: bool = false;
    const ETH: bool = false;
}

impl SqTransport for Dci {
    const UD: bool = false;
    const DC: bool = true;
    const ETH: bool = false;
}

impl SqTransport for Ethernet {
    const UD: bool = false;
    const DC: bool = false;
    const ETH: bool = true;
}

impl SelfAddressed for Connected {}
impl SelfAddressed for Datagram {}
impl SelfAddressed for Ethernet {}

/// The send queue of an mlx5 QP, driven directly.
///
/// Owned by one thread at a time (`&mut self` to post); its completions are polled through a
/// [`CompletionQueue`](crate::CompletionQueue) bound to the same [`SqState`](crate::SqState),
/// possibly on another thread. `P` is the handle through which it reaches that state
/// (`&SqState<_>` or an owning pointer: see [`SqStateRef`]). `T` is its transport:
/// [`Connected`] (RC: [`SendQueue::new`]), [`Datagram`] (UD: [`SendQueue::new_ud`]),
/// [`Dci`] (DC initiator: [`SendQueue::new_dc`]) or [`Ethernet`] (raw packet QP:
/// [`SendQueue::new_eth`]). How it holds its BlueFlame register
/// ([`BfMode`]) is decided when it is built: see [`crate::bf`].
#[derive(Debug)]
pub struct SendQueue<P, T = Connected> {
    ring: SegRing,
    blocks: Ring,
    /// Producer counter in basic blocks (free-running).
    pi: u32,
    /// The producer counter the ring has room up to: the consumer counter last read from the
    /// credit word plus the ring size. Posting checks `limit - pi` alone.
    limit: u32,
    /// Signaled requests posted (16-bit wrapping, as in the credit word).
    sig_posted: u16,
    /// Signaled requests completed, last read from the credit word.
    sig_done: u16,
    /// `sig_done + max_signaled` (16-bit wrapping): how far `sig_posted` may go.
    sig_limit: u16,
    /// Basic blocks a post may take on the fast path with one compare: at most the free
    /// blocks (`limit - pi`) and the free CQEs (`sig_limit - sig_posted`), and 0 while
    /// requests are staged. Set by the exact checks of the slow path
    /// ([`SendQueue::reload_credit`]), taken down by each fast post, and zeroed by whatever
    /// else moves the counters or stages (a restart, a stage, a refused batch). The gate is
    /// compared on its own: another thread closes it. A DCI (`sq/dc.rs`) posts through the
    /// exact checks alone and never reads it.
    credit: u32,
    /// The QP number.
    qpn: u32,
    /// The frame bytes an Ethernet queue inlines into each WQE's Ethernet segment (0 or 18:
    /// the device's minimum); 0 on the other transports.
    eth_inline: u16,
    /// The longest frame an Ethernet queue's one-entry fast path takes with
    /// [`SendFlags::IP_CSUM`]: 0 (the general path, which refuses the flag) where the device
    /// has no checksum offload; see `sq/eth.rs`.
    eth_csum_most: u32,
    /// The control segment's QP number, the first word of [`words::ctrl_qpn`]: a post ors
    /// the rest of its control segment in ([`SendQueue::ctrl`]).
    qpn_word: u64,
    /// WQEs written since the last ring, and where the last one starts.
    pending: u32,
    last_seg: u32,
    last_blocks: u32,
    caps: SqCaps,
    state: P,
    /// The state's first slot, one per basic block: the slots' address, read once here rather
    /// than through `state` on every post (`P` and the slots' storage are [`StableDeref`],
    /// so it stays put while `state` lives).
    ///
    /// [`StableDeref`]: stable_deref_trait::StableDeref
    slots: SlotsAt,
    /// The gate word this queue posts under: open, of the incarnation its counters belong
    /// to (`gate.rs`).
    gate: u32,
    /// What [`PostSend::ring`] compares the gate word with, zero-extended: `gate` when the
    /// register is the queue's own; `u64::MAX`, which no gate word is, when it is shared, so
    /// that every ring of such a queue goes out of line, where the lock is taken: the one
    /// compare the ring makes of the gate says both.
    fast_gate: u64,
    doorbell: Doorbell,
    transport: PhantomData<T>,
    /// What a prepared post compares the gate word, or-ed with its request's QPN, with: this
    /// queue's gate and QPN as the last prepared post found them (`sq/prepared.rs`), or
    /// `u64::MAX` (matches no request) until then; kept in `prep_key` when the queue has
    /// BlueFlame, in `prep_key_db` when it rings the doorbell only (the other stays
    /// `u64::MAX`), so that the compare that passes says which, and the post tests it no
    /// more.
    prep_key: u64,
    prep_key_db: u64,
    /// The changes of a prepared post that went out of line, for its slow path to read: so
    /// few arguments are left that the call needs no stack (`sq/prepared.rs`).
    held: Changes,
}

// SAFETY: the queue owns its part of the ring and its hold on the doorbell register; moving
// it to another thread moves that ownership. Shared state goes through `SqState` (Sync),
// atomics and, for a shared register, `SharedBf` (Sync).
unsafe impl<P: Send, T> Send for SendQueue<P, T> {}

impl<P: SqStateRef> SendQueue<P> {
    /// Drives the send queue of the RC QP that `layout` describes. Its BlueFlame register is
    /// its own, unless `shared` is the [`SharedBf`] of a register other queues write too: then
    /// every ring takes `shared`'s lock around its doorbell write and uses its buffer toggle
    /// ([`BfMode`]).
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live RC QP (or the software
    ///   device's equivalent): the ring, the doorbell record and the BlueFlame register
    ///   (`2 × bf.size` bytes, or 8 bytes when `bf.size == 0`) stay mapped while the queue
    ///   lives (the register's alignment is checked: see `# Errors`);
    /// - nothing else posts to this send queue or writes its doorbell while this value lives
    ///   (libibverbs' `ibv_post_send` must not be used on the QP);
    /// - with `shared` `None` and `bf.size > 0`, no other queue, and no QP posted through
    ///   libmlx5, writes the BlueFlame register `bf.reg` while this value lives (it came from
    ///   a thread domain, or libmlx5 dedicates it to this QP); with `shared`, every queue that
    ///   writes `bf.reg` while this value lives was built with this same `shared` (one
    ///   [`SharedBf`] per register), no QP on it is posted through libmlx5 (whose lock for it
    ///   is another), and `shared` outlives this value;
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
    /// capabilities allow; [`LayoutError::BfSize`] when `bf.size` is not a multiple of 64;
    /// [`LayoutError::BfMisaligned`] when the register is not 16-byte aligned with BlueFlame
    /// (`bf.size > 0`: posts store 16-byte segments into it) or not 8-byte aligned without
    /// (the 8-byte doorbell); [`LayoutError::SharedBfSize`] when `shared` was made for another
    /// buffer size than `bf.size`; [`LayoutError::Transport`] when `caps.transport` is not
    /// [`Transport::Rc`](zverbs_core::Transport::Rc). A refused layout is not written to.
    pub unsafe fn new(
        layout: &QpLayout,
        caps: SqCaps,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: (caller) the contract of `with_register`, which is this function's.
        unsafe { Self::with_register(layout, caps, 0, state, shared) }
    }
}

impl<P: SqStateRef> SendQueue<P, Datagram> {
    /// Drives the send queue of the unreliable-datagram QP that `layout` describes: it posts
    /// [`SendOp::SendTo`], [`SendOp::SendToImm`] and NOP. `shared` as for [`SendQueue::new`]
    /// (a register may be shared by queues of either transport).
    ///
    /// # Safety
    ///
    /// As [`SendQueue::new`], for a UD QP.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::new`], with [`LayoutError::Transport`] when `caps.transport` is not
    /// [`Transport::Ud`](zverbs_core::Transport::Ud).
    pub unsafe fn new_ud(
        layout: &QpLayout,
        caps: SqCaps,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: (caller) the contract of `with_register`, which is this function's.
        unsafe { Self::with_register(layout, caps, 0, state, shared) }
    }
}

impl<P: SqStateRef, T: SqTransport> SendQueue<P, T> {
    /// The constructors' common part.
    ///
    /// # Safety
    ///
    /// The contract of [`SendQueue::new`], for a QP of transport `T`.
    /// `min_inline` is the frame bytes an Ethernet queue inlines (0 on the other transports).
    pub(crate) unsafe fn with_register(
        layout: &QpLayout,
        caps: SqCaps,
        min_inline: u16,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        if caps.is_ud() != T::UD || caps.is_ethernet() != T::ETH {
            return Err(LayoutError::Transport);
        }
        // 0, or (an Ethernet queue's) libmlx5's 18.
        let inline_ok =
            min_inline == 0 || (T::ETH && min_inline == crate::prm::ETH_L2_INLINE_HEADER_SIZE);
        if !inline_ok {
            return Err(LayoutError::MinInline { bytes: min_inline });
        }
        if let Some(s) = shared
            && s.bf_size() != layout.bf.size
        {
            return Err(LayoutError::SharedBfSize {
                register: s.bf_size(),
                queue: layout.bf.size,
            });
        }
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
        // The largest WQE: ctrl + raddr (on a UD queue: ctrl + datagram; on a DCI: ctrl + DC
        // address + raddr) + the larger of the data segments and the inline segment; atomics
        // are one block (a DCI's: two).
        let head = if T::UD {
            UD_HEADER_DS
        } else if T::DC {
            2 + DC_AV_DS as usize
        } else if T::ETH {
            1 + eth_ds(usize::from(min_inline))
        } else {
            2
        };
        let max_ds =
            head + (caps.max_send_sge as usize).max(inline_ds(caps.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(SEGS_PER_BB) as u32;
        if max_ds > MAX_DS || max_blocks > cnt {
            return Err(LayoutError::WqeTooLarge { blocks: max_blocks });
        }
        let mut caps = caps;
        caps.max_signaled = caps.max_signaled.min(1 << 15);
        // The register takes 16-byte segment stores with BlueFlame, 8-byte doorbells without,
        // at its base and (with BlueFlame) at `bf.size`, where the second buffer starts:
        // checked here, so no post needs to.
        if !layout.bf.size.is_multiple_of(64) {
            return Err(LayoutError::BfSize {
                size: layout.bf.size,
            });
        }
        let (bf_len, align) = if layout.bf.size == 0 {
            (8, 8)
        } else {
            (2 * layout.bf.size as usize, 16)
        };
        let addr = layout.bf.reg.as_ptr() as usize;
        if !addr.is_multiple_of(align) {
            return Err(LayoutError::BfMisaligned {
                addr,
                align: align as u32,
            });
        }
        // SAFETY: (caller) the register is mapped with `bf_len` bytes while the queue lives, and
        // only this queue writes it, or (`shared`) only queues that take its lock; aligned
        // (checked above). The doorbell record is valid while the queue lives; word 1 is
        // MLX5_SND_DBR. The ring holds `cnt` 64-byte blocks while the queue lives, owned by it.
        let (reg, dbrec, ring) = unsafe {
            (
                MmioRegion::new(layout.bf.reg, bf_len),
                DbrecWord::new(layout.dbrec, SND_DBR),
                SegRing::new(layout.sq.buf, cnt * SEGS_PER_BB as u32),
            )
        };
        let gate = state.gate().peek() | crate::gate::OPEN;
        let mut q = Self {
            ring,
            blocks,
            pi: 0,
            limit: cnt,
            sig_posted: 0,
            sig_done: 0,
            sig_limit: caps.max_signaled as u16,
            credit: 0,
            qpn: layout.qpn,
            eth_inline: min_inline,
            eth_csum_most: eth::csum_most(&caps),
            qpn_word: words::ctrl_qpn(layout.qpn)[0],
            pending: 0,
            last_seg: 0,
            last_blocks: 0,
            caps,
            gate: 0,
            fast_gate: 0,
            slots: SlotsAt::of(state.slots()),
            state,
            doorbell: Doorbell::new(dbrec, reg, layout.bf.size, shared.map(NonNull::from)),
            transport: PhantomData,
            prep_key: u64::MAX,
            prep_key_db: u64::MAX,
            held: Changes::default(),
        };
        q.set_gate(gate);
        Ok(q)
    }

    /// Takes `gate` as the gate word the queue posts under, and the key of its fast paths
    /// ([`SendQueue::fast_gate`]).
    #[inline]
    fn set_gate(&mut self, gate: u32) {
        self.gate = gate;
        self.fast_gate = if self.doorbell.lock().is_some() {
            u64::MAX
        } else {
            u64::from(gate)
        };
    }

    /// The QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn
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

    /// Whether the BlueFlame register is shared with other queues (and ringing takes its
    /// lock).
    #[inline]
    pub fn shares_register(&self) -> bool {
        self.doorbell.lock().is_some()
    }

    /// How the queue holds its BlueFlame register.
    #[inline]
    pub fn bf_mode(&self) -> BfMode {
        self.doorbell.mode()
    }

    /// Free basic blocks, after taking any credits the poller has returned.
    #[inline]
    pub fn free_blocks(&mut self) -> u32 {
        if self.state.gate().peek() != self.gate {
            let _ = self.pass_gate();
        }
        self.refresh();
        self.limit.wrapping_sub(self.pi)
    }

    /// Signaled requests posted whose completions have not been polled yet.
    #[inline]
    pub fn outstanding_signaled(&mut self) -> u32 {
        if self.state.gate().peek() != self.gate {
            let _ = self.pass_gate();
        }
        self.refresh();
        u32::from(self.sig_posted.wrapping_sub(self.sig_done))
    }

    /// Reads the credit word the poller writes and moves the limits.
    #[inline]
    fn refresh(&mut self) {
        let done = self.state.load_done();
        let ci16 = done as u16;
        let ci = self
            .pi
            .wrapping_sub(u32::from((self.pi as u16).wrapping_sub(ci16)));
        self.limit = ci.wrapping_add(self.blocks.size());
        self.sig_done = (done >> 16) as u16;
        // `max_signaled <= 2^15` (clamped in `new`), so the 16-bit difference is exact.
        self.sig_limit = self.sig_done.wrapping_add(self.caps.max_signaled as u16);
        self.reload_credit();
    }

    /// Sets the fast path's [`credit`](SendQueue::credit) from the limits last read: the
    /// smaller of the free blocks and the free CQEs (each post takes at least one block and
    /// at most one CQE), or 0 while requests are staged.
    #[inline(always)]
    fn reload_credit(&mut self) {
        let blocks = self.limit.wrapping_sub(self.pi);
        let cqes = u32::from(self.sig_limit.wrapping_sub(self.sig_posted));
        self.credit = if self.pending == 0 {
            blocks.min(cqes)
        } else {
            0
        };
    }

    /// Whether `blocks` more basic blocks and `signaled` more CQEs fit the limits last read,
    /// with the gate as this queue last found it (open, same incarnation).
    #[inline(always)]
    fn fits(&self, blocks: u32, signaled: u32) -> bool {
        self.limit.wrapping_sub(self.pi) >= blocks
            && u32::from(self.sig_limit.wrapping_sub(self.sig_posted)) >= signaled
            && self.state.gate().peek() == self.gate
    }

    /// The gate changed: refuses when it is closed; when it is open for a later incarnation
    /// (the QP was reset and connected again), restarts the counters at 0, as the device
    /// restarted its own, and forgets requests written and not rung (the old incarnation's:
    /// the device never saw them). The BlueFlame toggle is kept: the device takes either
    /// buffer, and alternating keeps consecutive copies apart across the reset too.
    #[cold]
    #[inline(never)]
    fn pass_gate(&mut self) -> Result<(), PostError> {
        let g = self.state.gate().load();
        if g & crate::gate::OPEN == 0 {
            return Err(PostError::NotReady);
        }
        if g != self.gate {
            self.pi = 0;
            self.limit = self.blocks.size();
            self.sig_posted = 0;
            self.sig_done = 0;
            self.sig_limit = self.caps.max_signaled as u16;
            self.pending = 0;
            self.last_seg = 0;
            self.last_blocks = 0;
            self.credit = 0;
            self.set_gate(g);
        }
        Ok(())
    }

    /// The control segment of a WQE at producer counter `pi` of `ds` units: the request's
    /// part ([`words::ctrl_op`]) or-ed with the queue's (`qpn_word`, [`words::ctrl_qpn`]).
    #[inline(always)]
    fn ctrl(&self, pi: u32, opcode: u8, ds: u32, fm_ce_se: u8, imm: u32) -> words::Seg {
        let [c0, c1] = words::ctrl_op(pi as u16, opcode, 0, ds, fm_ce_se, imm);
        [c0 | self.qpn_word, c1]
    }

    /// Checks `wr` against the queue's limits ([`SendWr::check_as`]) and plans its WQE: the
    /// opcode, the size in segments and basic blocks, the control flags. Writes nothing.
    #[inline(always)]
    fn plan<'w>(&self, wr: &SendWr<'w>) -> Result<Plan<'w>, PostError> {
        // The transport is a type: a connected queue has no code for datagrams past the
        // check, which refuses them.
        let checked = if T::ETH {
            wr.check_ethernet(&self.caps)?
        } else if T::UD {
            wr.check_as::<true>(&self.caps)?
        } else {
            wr.check_as::<false>(&self.caps)?
        };
        let mut plan = Plan::of(&wr.op, &checked);
        if T::ETH && matches!(wr.op, SendOp::Send { .. }) {
            // The Ethernet segment with the frame's first bytes, then the rest of the frame.
            self.plan_frame(&mut plan, &checked)?;
        }
        if T::DC {
            // The DC address between the control segment and the operation's.
            plan.ds += DC_AV_DS;
            plan.blocks = plan.ds.div_ceil(SEGS_PER_BB as u32);
        }
        Ok(plan)
    }

    /// Checks that `blocks` basic blocks and `signaled` more CQEs fit now, and hands out the
    /// proof ([`Room`]) for writing them.
    #[inline(always)]
    fn room_for(&mut self, blocks: u32, signaled: u32) -> Result<Room, PostError> {
        self.check_room(blocks, signaled)?;
        // SAFETY: room checked.
        Ok(unsafe { Room::checked() })
    }

    /// The fast path's room for a single post of `blocks` basic blocks and `signaled` CQEs
    /// (the request rung alone): one compare for the gate (and the register: a shared one's
    /// queue has no fast path), one for the credit (the room in the ring and the CQ, nothing
    /// staged); the exact checks out of line ([`SendQueue::post_room`]).
    #[inline(always)]
    fn single_room(&mut self, blocks: u32, signaled: u32) -> Result<Room, PostError> {
        if self.state.gate().peek() != self.gate {
            self.post_room(blocks, signaled)?;
        }
        // Taken down before the compare: a short credit is set again by the exact checks.
        let (credit, short) = self.credit.overflowing_sub(blocks);
        self.credit = credit;
        if short {
            self.post_room(blocks, signaled)?;
            self.credit -= blocks;
        }
        // SAFETY: the credit covers its blocks (and its CQE) with nothing staged.
        Ok(unsafe { Room::checked() })
    }

    /// Checks that `blocks` basic blocks and `signaled` more CQEs fit now.
    #[inline(always)]
    fn check_room(&mut self, blocks: u32, signaled: u32) -> Result<(), PostError> {
        if self.fits(blocks, signaled) {
            Ok(())
        } else {
            self.check_room_again(blocks, signaled)
        }
    }

    /// [`SendQueue::check_room`] when the limits last read are reached: reads the credit word
    /// and checks again (out of line, so the posting code keeps its registers).
    #[cold]
    #[inline(never)]
    fn check_room_again(&mut self, blocks: u32, signaled: u32) -> Result<(), PostError> {
        if self.state.gate().peek() != self.gate {
            self.pass_gate()?;
        }
        {
            self.refresh();
            let free = self.limit.wrapping_sub(self.pi);
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

    /// Writes the planned WQE at the producer counter (for which `room` was checked), records
    /// it and advances the counters. Returns the segment counter of its control segment.
    /// `plan` is [`SendQueue::plan`] of the request.
    #[inline(always)]
    fn write(&mut self, v: Vouched<'_, '_>, plan: &Plan<'_>, room: Room) -> u32 {
        // No header segments.
        self.write_after::<0>(v, plan, room, |_| {})
    }

    /// [`SendQueue::write`] with `HDR` segments between the control segment and the
    /// operation's, written by `header` (given the ring and the control segment's counter;
    /// they lie in the first basic block): 0 for RC and UD queues, the datagram segment of a
    /// DCI. A constant, so that the RC path has no table of positions (a load per segment).
    ///
    /// As [`SendQueue::write`], with `plan` counting the `HDR` segments; `header` writes only
    /// segments `1..1 + HDR` of the WQE, and `HDR < 4` (checked).
    #[inline(always)]
    fn write_after<const HDR: u32>(
        &mut self,
        v: Vouched<'_, '_>,
        plan: &Plan<'_>,
        room: Room,
        header: impl FnOnce(&Wqe),
    ) -> u32 {
        const { assert!(HDR < SEGS_PER_BB as u32) };
        let wr = v.wr();
        // Locals, not fields: the compiler cannot prove that the ring stores below do not
        // alias `self`, and would reload fields after each one.
        let (pi, qpn_word) = (self.pi, self.qpn_word);
        let start = pi.wrapping_mul(SEGS_PER_BB as u32);
        let sig = u16::from(plan.signaled);
        let wqe =
            self.take::<true, true>(room, plan.blocks, wr.wr_id, plan.opcode, plan.signaled, sig);
        // The plan's fields by value: a closure holding the plan by reference would keep the
        // whole plan in memory wherever the compiler does not inline it.
        let (opcode, fm_ce_se, ds, imm) = (plan.opcode, plan.fm_ce_se, plan.ds, plan.imm);
        wqe.seg(0, move |b| {
            let [c0, c1] = words::ctrl_op(pi as u16, opcode, 0, ds, fm_ce_se, imm);
            words::put(b, [c0 | qpn_word, c1]);
        });
        header(&wqe);
        // The next segment to write, counted from the control segment.
        let mut k = 1 + HDR;
        match &wr.op {
            SendOp::Write { remote, .. }
            | SendOp::WriteImm { remote, .. }
            | SendOp::Read { remote, .. } => {
                put(&wqe, k, words::raddr(remote.addr, remote.rkey));
                k += 1;
            }
            SendOp::CompareSwap {
                local,
                remote,
                compare,
                swap,
            } => write_atomic(&wqe, k, local, remote.addr, remote.rkey, *swap, *compare),
            SendOp::FetchAdd { local, remote, add } => {
                write_atomic(&wqe, k, local, remote.addr, remote.rkey, *add, 0)
            }
            SendOp::SendTo { dest, .. } | SendOp::SendToImm { dest, .. } if T::UD => {
                write_datagram(&wqe, dest);
                k += 3;
            }
            SendOp::Send { .. } if T::ETH => {
                k += write_eth(
                    &wqe,
                    start,
                    v.list(),
                    eth::cs_flags_of(wr.flags),
                    self.eth_inline,
                );
            }
            // (A datagram on a connected queue (`T::UD` false, a constant): never here, as the
            // check refused it, so the code has no arm for it.)
            SendOp::Send { .. }
            | SendOp::SendImm { .. }
            | SendOp::Nop
            | SendOp::SendTo { .. }
            | SendOp::SendToImm { .. } => {}
        }
        // The data: none for atomics (written above) and NOP, whose list is empty. A frame's
        // first `skip` bytes are in its Ethernet segment (written above): the data resumes
        // after them.
        let sgl = plan.sgl;
        let skip = if T::ETH && matches!(wr.op, SendOp::Send { .. }) {
            u32::from(self.eth_inline)
        } else {
            0
        };
        match plan.inline {
            Some(len) => write_inline(&wqe, start.wrapping_add(k), v.list(), skip, len),
            // One entry, the common case, as straight-line code.
            None if sgl.len() == 1 => {
                if let Some(s) = sgl.first()
                    && s.length > skip
                {
                    write_data(&wqe, k, &skipped(s, skip));
                }
            }
            None => {
                let mut skip = skip;
                for s in sgl {
                    // Bytes of this entry already inlined (a frame's first ones).
                    let taken = skip.min(s.length);
                    skip -= taken;
                    if s.length == taken {
                        continue;
                    }
                    write_data(&wqe, k, &skipped(s, taken));
                    k += 1;
                }
            }
        }
        start
    }

    /// [`PostSend::post`] of one request: checks and plans it ([`SendQueue::plan`]); then,
    /// when the gate is as this queue last found it and the fast path's credit covers its
    /// blocks ([`SendQueue::single_room`]: one compare each), writes it and rings it alone. A one-block WQE of the common shapes is built
    /// as words in registers ([`SendQueue::block_words`]), stored to the ring and to the
    /// BlueFlame register; an inline WRITE or SEND of one entry is written with fixed-size
    /// moves ([`SendQueue::write_inline_and_ring`]), any other by the field-wise writer,
    /// each with the BlueFlame copy read back from the ring.
    #[inline(always)]
    fn post_one(&mut self, v: Vouched<'_, '_>) -> Result<(), PostError> {
        let wr = v.wr();
        let plan = self.plan(wr)?;
        let room = self.single_room(plan.blocks, u32::from(plan.signaled))?;
        let pi = self.pi;
        if let Some((words, n)) = self.block_words(v, &plan, pi) {
            let sig = u16::from(plan.signaled);
            let wqe = self.take::<true, true>(room, 1, wr.wr_id, plan.opcode, plan.signaled, sig);
            wqe.block_words_in(0, &words, n);
            self.doorbell.ring(pi.wrapping_add(1), Words(words), true);
        } else if let Some((head, k)) = self.inline_head_words(wr, &plan, pi) {
            self.write_inline_and_ring(v, &plan, &head, k, room);
        } else {
            let start = self.write(v, &plan, room);
            self.doorbell
                .ring_any(self.ring, self.pi, start, plan.blocks);
        }
        Ok(())
    }

    /// [`SendQueue::post_one`] when the gate or the credit turned it away: the exact checks
    /// (the gate passed or refused, the credit word read again), then the requests staged
    /// before it rung and the credit set again, to at least `blocks` (which the post takes
    /// down at once: the exact checks passed, so the request fits whatever the credit says).
    #[cold]
    #[inline(never)]
    fn post_room(&mut self, blocks: u32, signaled: u32) -> Result<(), PostError> {
        // No credit until the checks pass (the post may have taken it below zero).
        self.credit = 0;
        self.check_room(blocks, signaled)?;
        if self.pending != 0 {
            self.ring();
        }
        self.reload_credit();
        self.credit = self.credit.max(blocks);
        Ok(())
    }

    /// The WQE of `wr` (planned as `plan`, at producer counter `pi`) as the 64-bit words of
    /// its one basic block, holding its bytes in memory order, and how many of them it
    /// fills; `None` unless it has one of the common shapes: a WRITE, READ or SEND with one
    /// entry of at least one byte, an atomic, a NOP (not inline, not a datagram). The bytes
    /// are those [`SendQueue::write`] writes.
    #[inline(always)]
    fn block_words(
        &self,
        v: Vouched<'_, '_>,
        plan: &Plan<'_>,
        pi: u32,
    ) -> Option<([u64; 8], usize)> {
        if T::ETH {
            return self.frame_words(v, plan, pi);
        }
        if T::UD || T::DC || plan.inline.is_some() {
            return None;
        }
        let wr = v.wr();
        // The control segment's first word for a WQE of `n` words (`n / 2` segments: the
        // same `ds` as the plan's, a constant here), the request's part or-ed with the
        // queue's; and its second word, which does not depend on the size. (Each written as
        // it is, rather than both words from one call per size: that costs `write_inline8`
        // three instructions, `cargo xtask bench --instructions`.)
        let ctrl0 =
            |n: u32| words::ctrl_op(pi as u16, plan.opcode, 0, n / 2, 0, 0)[0] | self.qpn_word;
        let ctrl1 = self.ctrl(pi, plan.opcode, 0, plan.fm_ce_se, plan.imm)[1];
        let data = match plan.sgl {
            [s] if s.length != 0 => Some(words::data(s.length, s.lkey, s.addr)),
            _ => None,
        };
        match &wr.op {
            SendOp::Write { remote, .. }
            | SendOp::WriteImm { remote, .. }
            | SendOp::Read { remote, .. } => {
                let [d0, d1] = data?;
                let [r0, r1] = words::raddr(remote.addr, remote.rkey);
                Some(([ctrl0(6), ctrl1, r0, r1, d0, d1, 0, 0], 6))
            }
            SendOp::Send { .. } | SendOp::SendImm { .. } => {
                let [d0, d1] = data?;
                Some(([ctrl0(4), ctrl1, d0, d1, 0, 0, 0, 0], 4))
            }
            SendOp::CompareSwap {
                local,
                remote,
                compare,
                swap,
            } => {
                let [r0, r1] = words::raddr(remote.addr, remote.rkey);
                let [a0, a1] = words::atomic(*swap, *compare);
                let [d0, d1] = words::data(8, local.lkey, local.addr);
                Some(([ctrl0(8), ctrl1, r0, r1, a0, a1, d0, d1], 8))
            }
            SendOp::FetchAdd { local, remote, add } => {
                let [r0, r1] = words::raddr(remote.addr, remote.rkey);
                let [a0, a1] = words::atomic(*add, 0);
                let [d0, d1] = words::data(8, local.lkey, local.addr);
                Some(([ctrl0(8), ctrl1, r0, r1, a0, a1, d0, d1], 8))
            }
            SendOp::Nop => Some(([ctrl0(2), ctrl1, 0, 0, 0, 0, 0, 0], 2)),
            SendOp::SendTo { .. } | SendOp::SendToImm { .. } => None,
        }
    }

    /// The control and remote-address segments of `wr` (planned as `plan`, at producer
    /// counter `pi`) as 64-bit words holding their bytes in memory order, and how many
    /// segments they are (the inline segment's place); `None` unless it is an inline WRITE or
    /// SEND (with or without immediate) of one entry of at least one byte, on a connected
    /// queue. The bytes are those [`SendQueue::write`] writes.
    #[inline(always)]
    fn inline_head_words(
        &self,
        wr: &SendWr<'_>,
        plan: &Plan<'_>,
        pi: u32,
    ) -> Option<([u64; 8], u32)> {
        if T::UD || T::DC || T::ETH {
            return None;
        }
        // One branch for the conditions on the entry (each branch more would make the
        // field-wise writer's call sites colder to the compiler, which then inlines less of
        // them).
        let len = plan.inline?;
        if !((len != 0) & (plan.sgl.len() == 1)) {
            return None;
        }
        let [c0, c1] = self.ctrl(pi, plan.opcode, plan.ds, plan.fm_ce_se, plan.imm);
        match &wr.op {
            SendOp::Write { remote, .. } | SendOp::WriteImm { remote, .. } => {
                let [r0, r1] = words::raddr(remote.addr, remote.rkey);
                Some(([c0, c1, r0, r1, 0, 0, 0, 0], 2))
            }
            SendOp::Send { .. } | SendOp::SendImm { .. } => Some(([c0, c1, 0, 0, 0, 0, 0, 0], 1)),
            _ => None,
        }
    }

    /// Writes an inline request of one entry ([`SendQueue::inline_head_words`]: `head`, its
    /// first `k` segments) and rings it alone: the head as words, the inline segment with
    /// fixed-size moves and its last segment zeroed first (the padding), or, when the inline
    /// segment meets the ring's end, out of line by the field-wise writer's copy. A WQE of
    /// one block is read back as words and rung as [`SendQueue::block_words`]' are; a larger
    /// one as the field-wise writer's.
    ///
    /// As [`SendQueue::post_one`]; `plan` is an inline request of one entry of at least
    /// one byte.
    #[inline(always)]
    fn write_inline_and_ring(
        &mut self,
        v: Vouched<'_, '_>,
        plan: &Plan<'_>,
        head: &[u64; 8],
        k: u32,
        room: Room,
    ) {
        let pi = self.pi;
        let start = pi.wrapping_mul(SEGS_PER_BB as u32);
        let next = pi.wrapping_add(plan.blocks);
        let sig = u16::from(plan.signaled);
        let wqe = self.take::<false, false>(
            room,
            plan.blocks,
            v.wr().wr_id,
            plan.opcode,
            plan.signaled,
            sig,
        );
        // A local, as in `SendQueue::write`.
        let ring = self.ring;
        let seg = ring.seg_of(start);
        // The head: in the first block of the WQE.
        wqe.block_words_at(head, 2 * k as usize);
        let (src, len) = match plan.sgl {
            [s] => (s.addr, s.length),
            _ => (0, 0),
        };
        debug_assert!(plan.inline == Some(len) && len != 0);
        // The inline segment: segments `k..ds` of the WQE.
        let inl = seg + k;
        // SAFETY: the request is vouched for (`v`): `src..src + len` is readable. The
        // segments from `inl` on are the WQE's (taken above): contiguous up to segment `ds`
        // when they fit before the ring's end (checked), else copied across it by the token.
        unsafe {
            if ring.fits_before_end(inl, plan.ds - k) {
                // The last segment zeroed first: the payload then overwrites all of it but
                // the padding.
                wqe.zero_seg_at(seg + plan.ds - 1);
                // (`k < 4`: in the first block.)
                wqe.seg(k, |b| b[..4].copy_from_slice(&words::inline_head(len)));
                wqe.copy_in_short_at(
                    inl as usize * 16 + 4,
                    core::ptr::with_exposed_provenance(src as usize),
                    len as usize,
                );
            } else {
                write_inline_wrapping(wqe, inl, src, len);
            }
        }
        if plan.blocks == 1 {
            // One block: its words read back once and rung as a one-block WQE's.
            let mut words = [0u64; 8];
            ring.for_each_word(pi, |i, w| words[i] = w);
            self.doorbell.ring(next, Words(words), true);
        } else {
            self.doorbell.ring_any(ring, next, start, plan.blocks);
        }
    }

    /// Takes the WQE of `blocks` basic blocks at the producer counter, for the request `room`
    /// was checked for: records it in the slot of its first block (`SlotData`: `wr_id`, the
    /// counter after it, `opcode`, `signaled`), advances the counters past it (`sig`:
    /// `signaled` as a count, or 0 when the caller counted it already) and hands out its
    /// blocks. The one place a send path records a WQE and reserves its blocks: the slot is
    /// the producer counter's block's, in the state's slots by construction (one slot per
    /// block of the ring: checked by `new`), and the blocks are free and unpublished
    /// (`room`). Recorded before the WQE is written, so that nothing of the record is held in
    /// a register across the WQE's stores.
    ///
    /// `RING_FIRST` and `SIG_FIRST` change no byte written, only the order of the loads and
    /// stores, which the compiler keeps (it cannot prove that the slot's stores leave `self`
    /// alone): the ring read before the slot's stores (and the slot addressed from its first
    /// segment) or after them (from its first word), the signaled count added before or after
    /// them. Each path takes the order that costs it least (`cargo xtask bench
    /// --instructions`).
    #[inline(always)]
    fn take<const RING_FIRST: bool, const SIG_FIRST: bool>(
        &mut self,
        room: Room,
        blocks: u32,
        wr_id: u64,
        opcode: u8,
        signaled: bool,
        sig: u16,
    ) -> Wqe {
        let Room(()) = room;
        let pi = self.pi;
        let next = pi.wrapping_add(blocks);
        // Records in the slot at byte offset `at` (16 a block) and advances the counters.
        let record = |q: &mut Self, at: usize| {
            // Counted before the slot's stores or after them: whichever keeps fewer values in
            // registers across them (`sig` 0, counted by the caller: before, so that it costs
            // nothing).
            if SIG_FIRST {
                q.sig_posted = q.sig_posted.wrapping_add(sig);
            }
            // SAFETY: `at` is block `pi`'s slot, masked into the ring (below), so in bounds of
            // the state's slots (one per block: checked by `new`), which `q.slots` starts and
            // `q.state` keeps alive; the slot is free (room was checked: `room`) and the WQE
            // is not published yet.
            unsafe {
                q.slots.slot(at).record(SlotData {
                    wr_id,
                    next,
                    opcode,
                    signaled,
                })
            };
            if !SIG_FIRST {
                q.sig_posted = q.sig_posted.wrapping_add(sig);
            }
            q.pi = next;
        };
        // The slot addressed from the block's first segment (4 a block, so times 4) or first
        // word (8 a block, so times 2) in the ring; the ring (its address and mask) read
        // before the slot's stores, which the compiler cannot prove leave `self` alone, or
        // after them.
        let ring = if RING_FIRST {
            let ring = self.ring;
            record(
                self,
                ring.seg_of(pi.wrapping_mul(SEGS_PER_BB as u32)) as usize * 4,
            );
            ring
        } else {
            record(self, self.ring.word_of_block(pi) as usize * 2);
            self.ring
        };
        // SAFETY: the room check (`room`): the blocks at the producer counter are free and
        // unpublished, and a checked request's blocks fit the ring (the largest WQE was
        // checked at construction). The counter moved past them: no later take covers them.
        unsafe { ring.reserve(pi.wrapping_mul(SEGS_PER_BB as u32), blocks) }
    }

    /// [`PostSend::stage`] of one request: checked, its room checked, then written
    /// ([`SendQueue::write_staged`]) and noted for the next ring.
    #[inline(always)]
    fn stage_one(&mut self, v: Vouched<'_, '_>) -> Result<(), PostError> {
        let plan = self.plan(v.wr())?;
        let room = self.room_for(plan.blocks, u32::from(plan.signaled))?;
        // Noted in each branch, so that the one-block WQE's size stays a constant there.
        self.write_staged(v, &plan, room, |q, start, blocks| {
            q.note_pending(start, blocks)
        });
        Ok(())
    }

    /// Writes the planned request to be rung later (staged or in a batch): a one-block WQE
    /// of the common shapes as the words [`SendQueue::block_words`] builds, stored with
    /// whole-word stores, any other by the field-wise writer; records it and advances the
    /// counters; then calls `then` with the queue, the segment counter of its control segment
    /// and its size in blocks, and returns what it returns. As [`SendQueue::write`].
    #[inline(always)]
    fn write_staged<O>(
        &mut self,
        v: Vouched<'_, '_>,
        plan: &Plan<'_>,
        room: Room,
        then: impl FnOnce(&mut Self, u32, u32) -> O,
    ) -> O {
        let wr = v.wr();
        let pi = self.pi;
        if let Some((words, n)) = self.block_words(v, plan, pi) {
            let start = pi.wrapping_mul(SEGS_PER_BB as u32);
            let sig = u16::from(plan.signaled);
            let wqe = self.take::<true, true>(room, 1, wr.wr_id, plan.opcode, plan.signaled, sig);
            wqe.block_words_in(0, &words, n);
            then(self, start, 1)
        } else {
            let start = self.write(v, plan, room);
            then(self, start, plan.blocks)
        }
    }

    /// [`PostSend::ring`] out of line, for [`PostSend::post`] after requests were written and
    /// not rung (not the latency path).
    #[cold]
    #[inline(never)]
    fn ring_pending(&mut self) {
        self.ring();
    }

    /// Notes a WQE written by [`SendQueue::write`] for the next [`PostSend::ring`].
    #[inline(always)]
    fn note_pending(&mut self, start: u32, blocks: u32) {
        self.last_seg = start;
        self.last_blocks = blocks;
        self.pending += 1;
        // Staged: the next post rings these first, out of line.
        self.credit = 0;
    }
}

impl<P: SqStateRef, T: SqTransport> SendQueue<P, T> {
    /// Rings the doorbell for the requests written since the last ring ([`PostSend::ring`]);
    /// nothing when there are none.
    #[inline]
    pub fn ring(&mut self) {
        if self.pending == 0 {
            return;
        }
        if u64::from(self.state.gate().peek()) != self.fast_gate {
            self.ring_slow();
            return;
        }
        // Nothing pending from here: the ring is the last step (a shared register's, out of
        // line, a jump).
        let single = self.pending == 1;
        self.pending = 0;
        // SAFETY: `fast_gate` is `u64::MAX` for a shared register, which no gate word equals:
        // the register is the queue's own.
        let wqe = unsafe { Back::own(&self.ring, self.last_seg, self.last_blocks) };
        self.doorbell.ring(self.pi, wqe, single);
    }

    /// [`SendQueue::ring`] when the fast compare turned it away: the gate changed, or the
    /// register is shared (whose lock this ring takes).
    #[cold]
    #[inline(never)]
    fn ring_slow(&mut self) {
        if self.state.gate().peek() != self.gate {
            // Written before the QP left RTS: discarded when the queue restarts (a closed gate
            // keeps them until then; nothing reaches the device). Staged: no credit (a batch
            // may have left some).
            self.credit = 0;
            return;
        }
        // Nothing pending from here: the ring is the last step (a shared register's, out of
        // line, a jump).
        let single = self.pending == 1;
        self.pending = 0;
        let wqe = Back::new(&self.ring, self.last_seg, self.last_blocks);
        self.doorbell.ring(self.pi, wqe, single);
    }
}

/// Stores segment `seg` ([`words`]) as segment `k` of `wqe`.
#[inline(always)]
fn put(wqe: &Wqe, k: u32, seg: words::Seg) {
    wqe.seg(k, |b| words::put(b, seg));
}

/// Writes an atomic's segments (remote address, atomic, the 8-byte local data segment) as
/// segments `k..k + 3` of `wqe` (RC: 1, 2, 3; DC: after the address vector, in the second
/// basic block, which may wrap to slot 0).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn write_atomic(
    wqe: &Wqe,
    k: u32,
    local: &Sge,
    raddr: u64,
    rkey: u32,
    swap_add: u64,
    compare: u64,
) {
    put(wqe, k, words::raddr(raddr, rkey));
    put(wqe, k + 1, words::atomic(swap_add, compare));
    put(wqe, k + 2, words::data(8, local.lkey, local.addr));
}

/// Writes the datagram segment for `dest`, segments 1, 2 and 3 of `wqe` (with the control
/// segment, the first basic block: it never wraps).
#[inline(never)]
fn write_datagram(wqe: &Wqe, dest: &UdDest) {
    let seg = words::datagram(&dest.av, dest.remote_qpn, dest.qkey);
    write_datagram_seg(wqe, &seg);
}

/// Stores a datagram segment `seg` ([`words::datagram`], [`words::dc_datagram`]: a UD or DC
/// address) as segments 1, 2 and 3 of `wqe`.
#[inline(always)]
pub(super) fn write_datagram_seg(wqe: &Wqe, seg: &[u64; 6]) {
    for (k, part) in (1..).zip(seg.as_chunks::<2>().0) {
        put(wqe, k, *part);
    }
}

/// The part of entry `s` after its first `n` bytes (`n` at most its length).
#[inline(always)]
fn skipped(s: &Sge, n: u32) -> Sge {
    Sge::new(s.addr.wrapping_add(u64::from(n)), s.length - n, s.lkey)
}

/// Writes a data segment for `s` as segment `k` of `wqe`.
#[inline(always)]
fn write_data(wqe: &Wqe, k: u32, s: &Sge) {
    put(wqe, k, words::data(s.length, s.lkey, s.addr));
}

/// Writes an inline segment carrying bytes `skip..skip + len` of the request's gather list
/// (`list`: all of them, or a frame's after its inlined first bytes) from segment `seg` on (a
/// segment counter of the ring, in `wqe`), continuing across the end of the ring, and zeroes
/// the padding of its last segment.
#[inline(always)]
fn write_inline(wqe: &Wqe, seg: u32, list: VouchedList<'_>, skip: u32, len: u32) {
    if len == 0 {
        return;
    }
    wqe.seg_at(seg, |b| b[..4].copy_from_slice(&words::inline_head(len)));
    // A byte counter into the ring (free-running like the segment counter, 16 per segment).
    let at = seg.wrapping_mul(16).wrapping_add(4);
    // All of the list (every transport but a frame's, whose first bytes are elsewhere): each
    // entry whole, without counting down what is left (a constant `skip` of 0 keeps the
    // other transports' posts free of the frame's loop).
    let end = if skip == 0 {
        gather_in::<true>(wqe, at, list, 0, len)
    } else {
        gather_in::<false>(wqe, at, list, skip, len)
    };
    let off = end % 16;
    if off != 0 {
        // Zero the padding, bytes `off..16`, with a mask over the whole segment rather than a
        // fill of variable length (a call to memset).
        let keep = (1u128 << (8 * off)) - 1;
        wqe.seg_at(end / 16, |b| {
            *b = (u128::from_le_bytes(*b) & keep).to_le_bytes();
        });
    }
}

/// Copies bytes `skip..skip + len` of a request's gather list (`list`, which has at least
/// that many) into `wqe` at ring byte counter `at` (16 a segment, free-running), continuing
/// across the end of the ring; returns the byte counter after them. The inline data of a WQE,
/// and a frame's first bytes in its Ethernet segment. `WHOLE`: the whole list (`skip` 0,
/// `len` its bytes), each entry copied whole without counting down what is left, the loop
/// of every transport's inline data but a frame's.
#[inline(always)]
fn gather_in<const WHOLE: bool>(
    wqe: &Wqe,
    at: u32,
    list: VouchedList<'_>,
    skip: u32,
    len: u32,
) -> u32 {
    debug_assert!(!WHOLE || skip == 0);
    let (mut at, mut skip, mut left) = (at, skip, len);
    for s in list.0 {
        let (taken, n) = if WHOLE {
            (0, s.length)
        } else {
            if left == 0 {
                break;
            }
            let taken = skip.min(s.length);
            skip -= taken;
            let n = (s.length - taken).min(left);
            left -= n;
            (taken, n)
        };
        // SAFETY: the request is vouched for (`list`): its entries' bytes are readable (inline
        // sources, or a frame's first bytes: `new_eth`'s contract); `n` bytes from `taken`
        // lie in this entry, and the plan counted them in the WQE.
        unsafe {
            wqe.copy_in(
                at,
                core::ptr::with_exposed_provenance(s.addr.wrapping_add(u64::from(taken)) as usize),
                n as usize,
            )
        };
        at = at.wrapping_add(n);
    }
    at
}

/// [`write_inline`] of one entry at `src`, `len` bytes, from ring segment `seg` on, into the
/// WQE `wqe` (the caller's token, handed over), out of line: for an inline segment that meets
/// the end of the ring (rare), so that the posting code keeps its registers (nothing by
/// reference: the request stays in registers on the fast path).
///
/// # Safety
///
/// `src..src + len` is readable.
#[cold]
#[inline(never)]
unsafe fn write_inline_wrapping(wqe: Wqe, seg: u32, src: u64, len: u32) {
    let sge = Sge::new(src, len, 0);
    let wr = SendWr::send(0, core::slice::from_ref(&sge));
    // SAFETY: (caller) the one entry of `wr` is readable.
    let v = unsafe { Vouched::new(&wr) };
    write_inline(&wqe, seg, v.list(), 0, len);
}

impl<P: SqStateRef, T: SelfAddressed> PostSend for SendQueue<P, T> {
    // Inlined into the caller where the build optimises; an ordinary call where it does not
    // (a debug build), whose stack frame would otherwise hold every arm's locals in each
    // function that posts, once per call site.
    #[cfg_attr(not(debug_assertions), inline(always))]
    unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: the caller upholds the posting contract.
        let v = unsafe { Vouched::new(wr) };
        // One arm per operation, as in `post`.
        match wr.op {
            SendOp::Write { .. } => self.stage_one(v),
            SendOp::WriteImm { .. } => self.stage_one(v),
            SendOp::Send { .. } => self.stage_one(v),
            SendOp::SendImm { .. } => self.stage_one(v),
            SendOp::Read { .. } => self.stage_one(v),
            SendOp::CompareSwap { .. } => self.stage_one(v),
            SendOp::FetchAdd { .. } => self.stage_one(v),
            SendOp::Nop | SendOp::SendTo { .. } | SendOp::SendToImm { .. } => self.stage_one(v),
        }
    }

    /// Posts and rings, inlined into the caller like [`PostSend::stage`], so that a request
    /// whose operation is known at the call compiles to that operation's code alone (the
    /// trait's provided `post` is an ordinary call, where the request is opaque). The WQE goes
    /// straight to the doorbell; requests written earlier and not yet rung are rung first
    /// (once this one is known to be valid and to fit), so that this one alone rides on
    /// BlueFlame. (An ordinary call in a build without optimisation, as `stage`.)
    #[cfg_attr(not(debug_assertions), inline(always))]
    unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // One arm per operation, as in `post_all` (`sq/batch.rs`): for a request whose
        // operation is opaque here, each arm is that operation's code alone; for one known at
        // the call, the other arms are dead.
        // SAFETY: the caller upholds the posting contract.
        let v = unsafe { Vouched::new(wr) };
        match wr.op {
            SendOp::Write { .. } => self.post_one(v),
            SendOp::WriteImm { .. } => self.post_one(v),
            // A frame's own checks and plan on an Ethernet queue (`sq/eth.rs`).
            SendOp::Send { .. } if T::ETH => self.post_eth_one(v),
            SendOp::Send { .. } => self.post_one(v),
            SendOp::SendImm { .. } => self.post_one(v),
            SendOp::Read { .. } => self.post_one(v),
            SendOp::CompareSwap { .. } => self.post_one(v),
            SendOp::FetchAdd { .. } => self.post_one(v),
            SendOp::Nop | SendOp::SendTo { .. } | SendOp::SendToImm { .. } => self.post_one(v),
        }
    }

    #[inline]
    fn ring(&mut self) {
        SendQueue::ring(self);
    }

    /// In one pass (`sq/batch.rs`): each request checked and written in turn, the queue
    /// rolled back at a refused one.
    ///
    /// "Nothing written" for a refused batch means nothing the device may read: the doorbell
    /// record, the BlueFlame register, the producer counter, the signaled count and the
    /// ring below the producer counter are as the batch found them, and requests staged
    /// before it stay staged. The ring's blocks past the producer counter (free: retired by
    /// the poller) and their bookkeeping slots may hold the refused batch's WQEs: scratch,
    /// never published, overwritten by the next post.
    unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
        // SAFETY: (caller) the posting contract, for every request.
        self.post_batch(unsafe { VouchedAll::new(wrs) })
    }
}

mod dc;
pub use dc::DC_AV_DS;

#[cfg(test)]
mod dc_tests;

mod batch;
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod credit_tests;
#[cfg(test)]
mod eth_tests;
#[cfg(test)]
mod frame;
#[cfg(test)]
mod inline_tests;
#[cfg(test)]
mod ud_tests;

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::batch_tests::visible;
    use super::frame::{advance, expect_wqe, read_wrapped};
    use super::*;
    use crate::testutil::{QPN, Rig, caps};
    use zverbs_core::RemoteBuf;

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn post(rig: &mut Rig, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: requests in these tests are never executed by a device; inline sources are
        // live slices.
        unsafe { rig.sq.stage(wr) }
    }

    // Golden WQEs: what libmlx5 (rdma-core 44) wrote on an emulated ConnectX for the same
    // requests on QPN 0x100 with 128 basic blocks and a 256-byte BlueFlame buffer.
    #[test]
    fn matches_libmlx5_golden_wqes() {
        let mut rig = Rig::new(128, 256, caps(4, 124));
        let sgl = [Sge::new(0x55a7_b9cd_5000, 0x100, 0x1100)];
        let wr = SendWr::write(1, &sgl, RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef)).signaled();
        post(&mut rig, &wr).unwrap();
        rig.sq.ring();
        let ring = rig.mem.sq_bytes();
        assert_eq!(
            words(&ring[..48]),
            [
                0x0000_0008,
                0x0001_0003,
                0x0000_0008,
                0,
                0x0000_7f00,
                0x0000_1000,
                0xdead_beef,
                0,
                0x0000_0100,
                0x0000_1100,
                0x0000_55a7,
                0xb9cd_5000
            ]
        );
        assert_eq!(rig.mem.dbrec(1), 1);
        // Single WQE with BlueFlame: the whole WQE (one block) in the first buffer.
        assert_eq!(rig.mem.bf_bytes()[..64], ring[..64]);

        let hello = *b"Hello, mlx5 inline!\0";
        let sgl = [Sge::from_slice(&hello, 0)];
        post(&mut rig, &SendWr::send(2, &sgl).inline().signaled()).unwrap();
        rig.sq.ring();
        let ring = rig.mem.sq_bytes();
        assert_eq!(
            words(&ring[64..112]),
            [
                0x0000_010a,
                0x0001_0003,
                0x0000_0008,
                0,
                0x8000_0014,
                0x4865_6c6c,
                0x6f2c_206d,
                0x6c78_3520,
                0x696e_6c69,
                0x6e65_2100,
                0,
                0
            ]
        );
        assert_eq!(rig.mem.dbrec(1), 2);
        // The second BlueFlame buffer.
        assert_eq!(rig.mem.bf_bytes()[256..320], ring[64..128]);

        let rd = [
            Sge::new(0x55a7_b9cd_5000, 0x40, 0x1100),
            Sge::new(0x55a7_b9cd_5400, 0x20, 0x1100),
        ];
        let wsgl = [Sge::new(0x55a7_b9cd_5000, 0x100, 0x1100)];
        let chain = [
            SendWr::read(3, &rd, RemoteBuf::new(0x7f00_0000_3000, 0x5678)).signaled(),
            SendWr::write_imm(4, &wsgl, RemoteBuf::new(0x7f00_0000_2000, 0x1234), 0xcafe),
        ];
        // SAFETY: never executed.
        unsafe { rig.sq.post_all(&chain) }.unwrap();
        let ring = rig.mem.sq_bytes();
        assert_eq!(
            words(&ring[128..256]),
            [
                0x0000_0210,
                0x0001_0004,
                0x0000_0008,
                0,
                0x0000_7f00,
                0x0000_3000,
                0x0000_5678,
                0,
                0x0000_0040,
                0x0000_1100,
                0x0000_55a7,
                0xb9cd_5000,
                0x0000_0020,
                0x0000_1100,
                0x0000_55a7,
                0xb9cd_5400,
                0x0000_0309,
                0x0001_0003,
                0,
                0x0000_cafe,
                0x0000_7f00,
                0x0000_2000,
                0x0000_1234,
                0,
                0x0000_0100,
                0x0000_1100,
                0x0000_55a7,
                0xb9cd_5000,
                0,
                0,
                0,
                0
            ]
        );
        assert_eq!(rig.mem.dbrec(1), 4);
        // A chain rings the 8-byte doorbell with the last WQE's control segment, at the
        // buffer after the two BlueFlame copies: the first one again.
        let bf = rig.mem.bf_bytes();
        assert_eq!(bf[..8], ring[192..200]);
        assert_eq!(
            bf[8..64],
            ring[8..64],
            "rest of buffer 0 still holds the first copy"
        );
    }

    #[test]
    fn doorbell_only_writes_eight_bytes_at_the_register() {
        let mut rig = Rig::new(8, 0, caps(2, 64));
        let sgl = [Sge::new(0x1000, 8, 1)];
        for i in 0..3u64 {
            post(&mut rig, &SendWr::send(i, &sgl).signaled()).unwrap();
            rig.sq.ring();
            let ring = rig.mem.sq_bytes();
            let at = i as usize * 64;
            assert_eq!(rig.mem.bf_bytes()[..8], ring[at..at + 8]);
            assert_eq!(rig.mem.dbrec(1), i as u32 + 1);
        }
        assert!(!rig.sq.has_blueflame());
    }

    #[test]
    fn large_wqe_skips_blueflame() {
        // A WQE larger than the BlueFlame buffer goes by doorbell.
        let mut rig = Rig::new(16, 64, caps(8, 64));
        let sgl: Vec<Sge> = (0..6).map(|i| Sge::new(0x1000 * i, 4, 9)).collect();
        post(&mut rig, &SendWr::write(1, &sgl, RemoteBuf::new(0, 1))).unwrap();
        rig.sq.ring();
        let ring = rig.mem.sq_bytes();
        let bf = rig.mem.bf_bytes();
        assert_eq!(bf[..8], ring[..8]);
        assert!(bf[8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn ring_without_posts_does_nothing() {
        let mut rig = Rig::new(8, 256, caps(2, 64));
        rig.sq.ring();
        assert_eq!(rig.mem.dbrec(1), 0);
        assert!(rig.mem.bf_bytes().iter().all(|&b| b == 0));
    }

    /// Two QPs whose layouts name the same BlueFlame register (the rig's), as libmlx5 reports
    /// them once it shares a register: each queue rings into the buffer the other did not use
    /// last, because they share one toggle, and each takes and gives back the lock.
    #[test]
    fn queues_sharing_a_register_share_its_toggle() {
        use crate::bf::SharedBf;
        use crate::testutil::Mem;
        extern crate std;
        use std::boxed::Box;
        use std::sync::Arc;

        let a = Rig::new(8, 256, caps(2, 64));
        let b_mem = Mem::new(8, 8, 32, 256, 8);
        let mut b_layout = b_mem.qp_layout(QPN + 1, 8, 256);
        b_layout.bf = a.mem.qp_layout(QPN, 8, 256).bf;
        let shared = Arc::new(SharedBf::new(256));
        let state = || {
            let slots: Box<[crate::SqSlot]> = (0..8).map(|_| crate::SqSlot::new()).collect();
            Arc::new(crate::SqState::new(slots).unwrap())
        };
        let a_layout = a.mem.qp_layout(QPN, 8, 256);
        // SAFETY: both layouts describe live memory that outlives the queues (dropped at the
        // end of the test, before `a` and `b_mem`); each ring is driven by one queue only, and
        // the shared register by the two queues holding `shared`. (The rig's own queue is
        // never used.)
        let (mut qa, mut qb) = unsafe {
            (
                SendQueue::new(&a_layout, caps(2, 64), state(), Some(&*shared)).unwrap(),
                SendQueue::new(&b_layout, caps(2, 64), state(), Some(&*shared)).unwrap(),
            )
        };
        assert!(qa.shares_register() && qb.shares_register());
        assert!(!a.sq.shares_register());
        let sgl = [Sge::new(0x1000, 8, 0x1100)];
        let mut rings = Vec::new();
        for (on_a, wr_id) in [(true, 1), (false, 2), (false, 3), (true, 4)] {
            let q = if on_a { &mut qa } else { &mut qb };
            // SAFETY: nothing executes the requests.
            unsafe { q.post(&SendWr::send(wr_id, &sgl).signaled()) }.unwrap();
            // The register is free again for the other queue (checked here: the next ring
            // would spin for ever on a lock never given back).
            assert!(!shared.is_locked(), "ring {wr_id}");
            rings.push((q.qpn(), a.mem.bf_bytes()));
        }
        // Which QP's control segment (QPN in `qpn_ds`) each buffer held after each ring.
        let qpn_at = |bf: &[u8], off: usize| {
            u32::from_be_bytes(bf[off + 4..off + 8].try_into().unwrap()) >> 8
        };
        let held: Vec<(u32, u32, u32)> = rings
            .iter()
            .map(|(qpn, bf)| (*qpn, qpn_at(bf, 0), qpn_at(bf, 256)))
            .collect();
        assert_eq!(
            held,
            [
                (QPN, QPN, 0),               // A: buffer 0
                (QPN + 1, QPN, QPN + 1),     // B: buffer 1, although B never rang before
                (QPN + 1, QPN + 1, QPN + 1), // B again: buffer 0
                (QPN, QPN + 1, QPN),         // A: buffer 1
            ]
        );
        // The lock is free after every ring.
        qa.ring();
        assert!(!shared.is_locked());
        drop((qa, qb));
    }

    /// A UD queue on a register shared with an RC queue ([`SendQueue::new_ud`] with `shared`): the
    /// one lock and toggle serve both; RC capabilities, or a register state of another buffer
    /// size, are refused.
    #[test]
    fn ud_and_rc_queues_share_a_register() {
        use crate::bf::SharedBf;
        use crate::testutil::Mem;
        extern crate std;
        use std::boxed::Box;
        use std::sync::Arc;

        let a = Rig::new(8, 256, caps(2, 64));
        let b_mem = Mem::new(8, 8, 32, 256, 8);
        let mut b_layout = b_mem.qp_layout(QPN + 1, 8, 256);
        b_layout.bf = a.mem.qp_layout(QPN, 8, 256).bf;
        let a_layout = a.mem.qp_layout(QPN, 8, 256);
        let ud = SqCaps {
            transport: zverbs_core::Transport::Ud { mtu: 4096 },
            ..caps(2, 64)
        };
        let shared = Arc::new(SharedBf::new(256));
        let state = || {
            let slots: Box<[crate::SqSlot]> = (0..8).map(|_| crate::SqSlot::new()).collect();
            Arc::new(crate::SqState::new(slots).unwrap())
        };
        // SAFETY: the layouts describe live memory that outlives the queues (dropped at the
        // end of the test, before `a` and `b_mem`); each ring is driven by one queue only, and
        // the shared register by the queues holding `shared`. (The rig's own queue is never
        // used.)
        let (rc_caps, wrong_size) = unsafe {
            (
                SendQueue::new_ud(&b_layout, caps(2, 64), state(), Some(&*shared)).err(),
                SendQueue::new_ud(&b_layout, ud, state(), Some(&*Arc::new(SharedBf::new(128))))
                    .err(),
            )
        };
        assert_eq!(rc_caps, Some(LayoutError::Transport));
        assert_eq!(
            wrong_size,
            Some(LayoutError::SharedBfSize {
                register: 128,
                queue: 256
            })
        );
        // SAFETY: as above.
        let (mut qa, mut qb) = unsafe {
            (
                SendQueue::new(&a_layout, caps(2, 64), state(), Some(&*shared)).unwrap(),
                SendQueue::new_ud(&b_layout, ud, state(), Some(&*shared)).unwrap(),
            )
        };
        assert!(qb.shares_register() && qb.caps().is_ud());
        let qpn_at = |bf: &[u8], off: usize| {
            u32::from_be_bytes(bf[off + 4..off + 8].try_into().unwrap()) >> 8
        };
        let mut held = Vec::new();
        for (on_a, wr_id) in [(false, 1), (true, 2), (true, 3), (false, 4)] {
            let wr = SendWr::nop(wr_id).signaled();
            // SAFETY: nothing executes the NOPs.
            unsafe { if on_a { qa.post(&wr) } else { qb.post(&wr) } }.unwrap();
            assert!(!shared.is_locked(), "ring {wr_id}");
            let bf = a.mem.bf_bytes();
            held.push((qpn_at(&bf, 0), qpn_at(&bf, 256)));
        }
        // One toggle: the UD queue's first ring takes buffer 0, the RC queue's next buffer 1.
        assert_eq!(
            held,
            [(QPN + 1, 0), (QPN + 1, QPN), (QPN, QPN), (QPN, QPN + 1)]
        );
        drop((qa, qb));
    }

    #[test]
    fn shared_register_of_another_size_is_refused() {
        let rig = Rig::new(8, 256, caps(2, 64));
        let shared = crate::bf::SharedBf::new(128);
        let slots: Vec<crate::SqSlot> = (0..8).map(|_| crate::SqSlot::new()).collect();
        let state = crate::SqState::new(&slots[..]).unwrap();
        // SAFETY: the layout is the rig's live memory; the queue is refused before it exists.
        let r = unsafe {
            SendQueue::new(
                &rig.mem.qp_layout(QPN, 8, 256),
                caps(2, 64),
                &state,
                Some(&shared),
            )
        };
        assert_eq!(
            r.err(),
            Some(LayoutError::SharedBfSize {
                register: 128,
                queue: 256
            })
        );
    }

    /// A register a post could not store to is refused by every constructor (RC, UD, DC,
    /// dedicated or shared) before anything is built, in every build: with BlueFlame it must
    /// be 16-byte aligned, without it 8-byte aligned. Nothing is written.
    #[test]
    fn misaligned_register_is_refused_by_every_constructor() {
        use crate::bf::SharedBf;
        use crate::testutil::Mem;
        use std::string::ToString;

        // A register of two 256-byte buffers, 64-byte aligned, with room to move its base.
        let mem = Mem::new(8, 8, 32, 512, 8);
        let slots: Vec<crate::SqSlot> = (0..8).map(|_| crate::SqSlot::new()).collect();
        let state = crate::SqState::new(&slots[..]).unwrap();
        let ud = SqCaps {
            transport: zverbs_core::Transport::Ud { mtu: 4096 },
            ..caps(2, 64)
        };
        let rc = caps(2, 64);
        let at = |shift: usize, size: u32| {
            let mut l = mem.qp_layout(QPN, 8, size);
            // SAFETY: `shift` < 64 bytes into the 1024-byte register.
            l.bf.reg = unsafe { l.bf.reg.add(shift) };
            l
        };
        let base = mem.qp_layout(QPN, 8, 256).bf.reg.as_ptr() as usize;
        let shared = SharedBf::new(256);
        let db_shared = SharedBf::new(0);
        for (shift, size, align) in [(8, 256, 16), (4, 256, 16), (1, 256, 16), (4, 0, 8)] {
            let l = at(shift, size);
            let want = Some(LayoutError::BfMisaligned {
                addr: base + shift,
                align,
            });
            let sh = if size == 0 { &db_shared } else { &shared };
            // SAFETY: the layout is `mem`'s live memory, which outlives the calls; every queue
            // is refused before it exists.
            let got = unsafe {
                [
                    SendQueue::new(&l, rc, &state, None).err(),
                    SendQueue::new(&l, rc, &state, Some(sh)).err(),
                    SendQueue::new_ud(&l, ud, &state, None).err(),
                    SendQueue::new_ud(&l, ud, &state, Some(sh)).err(),
                    SendQueue::new_dc(&l, rc, &state, None).err(),
                    SendQueue::new_dc(&l, rc, &state, Some(sh)).err(),
                ]
            };
            assert_eq!(got, [want; 6], "register at base + {shift}, bf.size {size}");
        }
        assert_eq!(
            LayoutError::BfMisaligned {
                addr: 0x1008,
                align: 16
            }
            .to_string(),
            "the doorbell/BlueFlame register at 0x1008 is not 16-byte aligned"
        );
        assert!(!shared.is_locked() && !db_shared.is_locked());
        assert!(
            mem.sq_bytes().iter().all(|&b| b == 0),
            "the ring is untouched"
        );
        assert_eq!((mem.dbrec(0), mem.dbrec(1)), (0, 0), "the doorbell record");
        assert!(mem.bf_bytes().iter().all(|&b| b == 0), "the register");
        // What a post stores to is taken: 16-byte aligned with BlueFlame, 8-byte without.
        // SAFETY: as above; never posted to.
        unsafe {
            assert!(SendQueue::new(&at(16, 256), rc, &state, None).is_ok());
            assert!(SendQueue::new_dc(&at(16, 256), rc, &state, None).is_ok());
            assert!(SendQueue::new_ud(&at(8, 0), ud, &state, None).is_ok());
            assert!(SendQueue::new(&at(8, 0), rc, &state, Some(&db_shared)).is_ok());
        }
    }

    /// BlueFlame buffers that are not whole basic blocks are refused by every constructor:
    /// the second buffer, at `bf.reg + bf.size`, would take the stores of a post unaligned (or,
    /// under 64 bytes, fit no block). Nothing is written.
    #[test]
    fn blueflame_buffers_not_whole_blocks_are_refused_by_every_constructor() {
        use crate::bf::SharedBf;
        use crate::testutil::Mem;

        let mem = Mem::new(8, 8, 32, 512, 8);
        let slots: Vec<crate::SqSlot> = (0..8).map(|_| crate::SqSlot::new()).collect();
        let state = crate::SqState::new(&slots[..]).unwrap();
        let ud = SqCaps {
            transport: zverbs_core::Transport::Ud { mtu: 4096 },
            ..caps(2, 64)
        };
        let rc = caps(2, 64);
        for size in [4, 8, 16, 32, 72, 80, 96, 200, 264] {
            let l = mem.qp_layout(QPN, 8, size);
            let sh = SharedBf::new(size);
            // SAFETY: the layout is `mem`'s live memory, which outlives the calls; every queue
            // is refused before it exists.
            let got = unsafe {
                [
                    SendQueue::new(&l, rc, &state, None).err(),
                    SendQueue::new(&l, rc, &state, Some(&sh)).err(),
                    SendQueue::new_ud(&l, ud, &state, None).err(),
                    SendQueue::new_ud(&l, ud, &state, Some(&sh)).err(),
                    SendQueue::new_dc(&l, rc, &state, None).err(),
                    SendQueue::new_dc(&l, rc, &state, Some(&sh)).err(),
                ]
            };
            assert_eq!(
                got,
                [Some(LayoutError::BfSize { size }); 6],
                "bf.size {size}"
            );
            assert!(!sh.is_locked());
        }
        assert!(mem.sq_bytes().iter().all(|&b| b == 0), "the ring");
        assert_eq!((mem.dbrec(0), mem.dbrec(1)), (0, 0), "the doorbell record");
        assert!(mem.bf_bytes().iter().all(|&b| b == 0), "the register");
        for size in [64, 128, 256, 512] {
            // SAFETY: as above; never posted to.
            let q = unsafe { SendQueue::new(&mem.qp_layout(QPN, 8, size), rc, &state, None) };
            assert!(q.is_ok(), "bf.size {size}");
        }
    }

    /// Builds the expected segments of a WRITE with `n` SGEs or inline `data`, at `pi`.
    fn expect_write(pi: u32, n: usize, inline: Option<&[u8]>) -> Vec<u8> {
        let mut r = [0u8; 16];
        RaddrSeg::new_unchecked(&mut r).set(0xabc0, 0x77);
        expect_wqe(pi, opcode::RDMA_WRITE, 0, &r, n, inline)
    }

    #[test]
    fn every_wrap_position_and_size() {
        // For WQEs of 1..=4 blocks (up to 14 SGEs) and inline payloads of every length up to
        // the limit, start at every block of an 8-block ring.
        let blocks = 8u32;
        for n in 0..=14usize {
            // Under Miri (100 times slower), each number of entries from block
            // `7 - (n + 1) % 4` (over the four entry counts of each size of two blocks or more,
            // the block from which it ends at the ring's end and each from which it wraps), the
            // first four also from block `n`: every size at every wrap offset, and every block.
            let starts: Vec<u32> = if cfg!(miri) {
                let mut starts = std::vec![7 - (n as u32 + 1) % 4];
                if n < 4 {
                    starts.push(n as u32);
                }
                starts
            } else {
                (0..blocks).collect()
            };
            for &start in &starts {
                let mut rig = Rig::new(blocks, 256, caps(14, 200));
                advance(&mut rig, start);
                let sgl: Vec<Sge> = (0..n)
                    .map(|i| Sge::new(0x1000 * (i as u64 + 1), i as u32 + 1, 0x10 + i as u32))
                    .collect();
                let pi = rig.sq.producer();
                post(
                    &mut rig,
                    &SendWr::write(9, &sgl, RemoteBuf::new(0xabc0, 0x77)),
                )
                .unwrap();
                let want = expect_write(pi, n, None);
                assert_eq!(
                    read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                    want,
                    "n={n} start={start}"
                );
                rig.sq.ring();
                assert_eq!(rig.mem.dbrec(1), rig.sq.producer() & 0xffff);
                // BlueFlame carries the wrapped WQE in ring order.
                let bf = rig.mem.bf_bytes();
                let off = if start % 2 == 0 { 0 } else { 256 };
                if want.len() <= 256 {
                    assert_eq!(
                        bf[off..off + want.len()],
                        want[..],
                        "BlueFlame n={n} start={start}"
                    );
                }
            }
        }
        // Under Miri, the lengths at a segment boundary (after 32 bytes of control and address
        // segments and the 4-byte inline header) and at the third block boundary from block 0,
        // at the first two block boundaries from the block where the shorter ends at the
        // ring's end (the longer's data wraps by a byte), and the limit from the last block.
        #[rustfmt::skip]
        let miri = [
            (0, 0), (1, 0), (12, 0), (13, 0), (28, 7), (29, 7), (92, 6), (93, 6), (156, 0),
            (157, 0), (200, 7),
        ];
        for len in 0..=200usize {
            for start in [0, blocks - 1, blocks - 2] {
                if cfg!(miri) && !miri.contains(&(len, start)) {
                    continue;
                }
                let mut rig = Rig::new(blocks, 256, caps(2, 200));
                advance(&mut rig, start);
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let sgl = [Sge::from_slice(&data, 0)];
                let pi = rig.sq.producer();
                post(
                    &mut rig,
                    &SendWr::write(9, &sgl, RemoteBuf::new(0xabc0, 0x77)).inline(),
                )
                .unwrap();
                let want = expect_write(pi, 0, Some(&data));
                assert_eq!(
                    read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                    want,
                    "len={len} start={start}"
                );
            }
        }
    }

    #[test]
    fn inline_gathers_across_entries() {
        let mut rig = Rig::new(8, 0, caps(4, 64));
        rig.mem.fill_sq(0xaa); // stale bytes from earlier WQEs
        let a = [1u8, 2, 3];
        let b = [4u8; 20];
        let c = [5u8, 6];
        let sgl = [
            Sge::from_slice(&a, 0),
            Sge::from_slice(&b, 0),
            Sge::from_slice(&c, 0),
        ];
        post(&mut rig, &SendWr::send(1, &sgl).inline()).unwrap();
        let ring = rig.mem.sq_bytes();
        let mut want = std::vec![0x80, 0, 0, 25];
        want.extend_from_slice(&a);
        want.extend_from_slice(&b);
        want.extend_from_slice(&c);
        assert_eq!(&ring[16..16 + 29], &want[..]);
        assert!(ring[45..48].iter().all(|&x| x == 0), "padding is zeroed");
        assert!(
            ring[48..64].iter().all(|&x| x == 0xaa),
            "nothing past the WQE is written"
        );
        assert_eq!(CtrlSeg::new_unchecked(&ring[..16]).ds(), 1 + 2);
    }

    #[test]
    fn zero_length_entries_are_skipped() {
        let mut rig = Rig::new(8, 0, caps(4, 64));
        let sgl = [
            Sge::new(0x10, 0, 1),
            Sge::new(0x20, 5, 2),
            Sge::new(0x30, 0, 3),
        ];
        post(&mut rig, &SendWr::send(1, &sgl)).unwrap();
        let ring = rig.mem.sq_bytes();
        assert_eq!(CtrlSeg::new_unchecked(&ring[..16]).ds(), 2);
        let d = DataSeg::new_unchecked(&ring[16..32]);
        assert_eq!((d.byte_count(), d.lkey(), d.addr()), (5, 2, 0x20));
    }

    #[test]
    fn atomics_are_one_block() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let local = Sge::new(0x2000, 8, 0x33);
        post(
            &mut rig,
            &SendWr::compare_swap(1, local, RemoteBuf::new(0x4000, 0x44), 5, 6).signaled(),
        )
        .unwrap();
        post(
            &mut rig,
            &SendWr::fetch_add(2, local, RemoteBuf::new(0x4008, 0x44), 9),
        )
        .unwrap();
        let ring = rig.mem.sq_bytes();
        assert_eq!(
            words(&ring[..64]),
            [
                0x0000_0011,
                0x0001_0004,
                0x0000_0008,
                0,
                0,
                0x4000,
                0x44,
                0,
                0,
                6,
                0,
                5,
                8,
                0x33,
                0,
                0x2000
            ]
        );
        assert_eq!(
            words(&ring[64..128]),
            [
                0x0000_0112,
                0x0001_0004,
                0,
                0,
                0,
                0x4008,
                0x44,
                0,
                0,
                9,
                0,
                0,
                8,
                0x33,
                0,
                0x2000
            ]
        );
        assert_eq!(rig.sq.producer(), 2);
    }

    #[test]
    fn nop_and_flags() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        post(&mut rig, &SendWr::nop(1).signaled().fenced().solicited()).unwrap();
        let ring = rig.mem.sq_bytes();
        let c = CtrlSeg::new_unchecked(&ring[..16]);
        assert_eq!((c.opcode(), c.ds()), (opcode::NOP, 1));
        assert_eq!(
            c.fm_ce_se(),
            fm_ce_se::CQ_UPDATE | fm_ce_se::FENCE | fm_ce_se::SOLICITED
        );
        assert_eq!(c.fm_ce_se(), 0x8a);
    }

    #[test]
    fn sig_all_signals_everything() {
        let mut rig = Rig::new(
            8,
            256,
            SqCaps {
                sig_all: true,
                ..caps(1, 0)
            },
        );
        post(&mut rig, &SendWr::nop(1)).unwrap();
        assert_eq!(
            CtrlSeg::new_unchecked(&rig.mem.sq_bytes()[..16]).fm_ce_se(),
            fm_ce_se::CQ_UPDATE
        );
        assert_eq!(rig.sq.outstanding_signaled(), 1);
    }

    /// Every refused request leaves the ring, the doorbell record, the BlueFlame buffer and the
    /// counters exactly as they were.
    #[test]
    fn bad_input_changes_nothing() {
        let mut rig = Rig::with_cq(
            8,
            256,
            SqCaps {
                max_signaled: 2,
                ..caps(2, 32)
            },
            64,
        );
        let sgl = [Sge::new(0x1000, 8, 1)];
        post(&mut rig, &SendWr::send(1, &sgl)).unwrap();
        let before = (
            rig.mem.sq_bytes(),
            rig.mem.dbrec(1),
            rig.mem.bf_bytes(),
            rig.sq.producer(),
            rig.sq.pending(),
        );
        let three = [Sge::new(0x1000, 8, 1); 3];
        let big = [0u8; 33];
        let big_sgl = [Sge::from_slice(&big, 0)];
        let r = RemoteBuf::new(0x4000, 1);
        let huge = [Sge::new(0, u32::MAX, 1), Sge::new(0, 2, 1)];
        let cases: [(SendWr<'_>, PostError); 9] = [
            (
                SendWr::write(2, &three, r),
                PostError::TooManySges { got: 3, max: 2 },
            ),
            (
                SendWr::send(2, &big_sgl).inline(),
                PostError::InlineTooLarge { len: 33, max: 32 },
            ),
            (
                SendWr::read(2, &sgl, r).inline(),
                PostError::InlineNotAllowed,
            ),
            (SendWr::nop(2).inline(), PostError::InlineNotAllowed),
            (
                SendWr::fetch_add(2, Sge::new(0x1000, 4, 1), r, 1),
                PostError::AtomicSize { len: 4 },
            ),
            (
                SendWr::fetch_add(2, Sge::new(0x1004, 8, 1), r, 1),
                PostError::AtomicAlignment,
            ),
            (
                SendWr::compare_swap(2, Sge::new(0x1000, 8, 1), r.offset(4), 1, 2),
                PostError::AtomicAlignment,
            ),
            (SendWr::write(2, &huge, r), PostError::MessageTooLong),
            (
                SendWr::compare_swap(2, Sge::new(0x1000, 16, 1), r, 1, 2),
                PostError::AtomicSize { len: 16 },
            ),
        ];
        for (wr, err) in &cases {
            assert_eq!(post(&mut rig, wr), Err(*err), "{wr:?}");
            let after = (
                rig.mem.sq_bytes(),
                rig.mem.dbrec(1),
                rig.mem.bf_bytes(),
                rig.sq.producer(),
                rig.sq.pending(),
            );
            assert_eq!(after, before, "{wr:?} changed the queue");
        }

        // The CQ share: two signaled requests may be outstanding, not three.
        post(&mut rig, &SendWr::send(3, &sgl).signaled()).unwrap();
        post(&mut rig, &SendWr::send(4, &sgl).signaled()).unwrap();
        let before = (rig.mem.sq_bytes(), rig.sq.producer());
        assert_eq!(
            post(&mut rig, &SendWr::send(5, &sgl).signaled()),
            Err(PostError::CqFull { limit: 2 })
        );
        assert_eq!((rig.mem.sq_bytes(), rig.sq.producer()), before);
        // Unsignaled work still fits.
        post(&mut rig, &SendWr::send(6, &sgl)).unwrap();

        // A full ring: 4 blocks used, 4 free.
        let two = [Sge::new(0x1000, 8, 1); 2];
        for i in 0..4 {
            post(&mut rig, &SendWr::write(7 + i, &two, r)).unwrap();
        }
        let before = (rig.mem.sq_bytes(), rig.sq.producer());
        assert_eq!(
            post(&mut rig, &SendWr::nop(9)),
            Err(PostError::QueueFull { needed: 1, free: 0 })
        );
        assert_eq!((rig.mem.sq_bytes(), rig.sq.producer()), before);
    }

    #[test]
    fn send_rings_what_was_written_before_it_and_leaves_nothing_pending() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        post(&mut rig, &SendWr::send(0, &sgl)).unwrap();
        assert_eq!(rig.sq.pending(), 1);
        // SAFETY: never executed.
        unsafe { rig.sq.post(&SendWr::send(1, &sgl)) }.unwrap();
        assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 2));
        // Nothing is left to ring: ringing now writes nothing.
        let bf = rig.mem.bf_bytes();
        rig.sq.ring();
        assert_eq!((rig.mem.bf_bytes(), rig.mem.dbrec(1)), (bf, 2));
    }

    /// The room the poller hands back is all usable: a request that needs exactly the blocks
    /// and the share of the CQ that came back fits.
    #[test]
    fn sends_fit_in_exactly_what_the_poller_returns() {
        use crate::testutil::req_cqe;
        use zverbs_core::{Completion, PollCq};
        let mut rig = Rig::with_cq(
            8,
            256,
            SqCaps {
                max_signaled: 2,
                ..caps(1, 0)
            },
            64,
        );
        assert_eq!(
            (rig.sq.blocks(), rig.sq.pending(), rig.sq.has_blueflame()),
            (8, 0, true)
        );
        let sgl = [Sge::new(0x1000, 8, 1)];
        // The CQ share (two signaled sends) and the ring (eight one-block sends), both full.
        post(&mut rig, &SendWr::send(0, &sgl).signaled()).unwrap();
        post(&mut rig, &SendWr::send(1, &sgl).signaled()).unwrap();
        for i in 2..8 {
            post(&mut rig, &SendWr::send(i, &sgl)).unwrap();
        }
        assert_eq!(rig.sq.pending(), 8);
        rig.sq.ring();
        assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 8));
        // The poller completes the first send: one block and one CQE of the share come back,
        // what one more signaled one-block send needs.
        rig.mem.put_cqe(0, req_cqe(QPN, opcode::SEND, 0, 0, 0));
        assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 1]), 1);
        post(&mut rig, &SendWr::send(8, &sgl).signaled()).unwrap();
        assert_eq!(rig.sq.producer(), 9);
    }

    #[test]
    fn refused_batch_writes_nothing() {
        let mut rig = Rig::new(8, 256, caps(2, 16));
        let sgl = [Sge::new(0x1000, 8, 1)];
        let three = [Sge::new(0x1000, 8, 1); 3];
        let before = visible(&mut rig);
        let bad = [
            SendWr::send(1, &sgl),
            SendWr::send(2, &sgl),
            SendWr::send(3, &three),
        ];
        // SAFETY: never executed.
        let err = unsafe { rig.sq.post_all(&bad) }.unwrap_err();
        assert_eq!(err.index, 2);
        assert_eq!(err.error, PostError::TooManySges { got: 3, max: 2 });
        // Too many for the ring in total: 9 one-block WQEs in 8 blocks.
        let many = [SendWr::send(1, &sgl); 9];
        // SAFETY: never executed.
        let err = unsafe { rig.sq.post_all(&many) }.unwrap_err();
        assert_eq!(err.index, 8);
        assert!(matches!(err.error, PostError::QueueFull { .. }));
        // Nothing the device or the poller may read: the blocks the one pass wrote are past
        // the producer counter.
        visible(&mut rig).assert_same(&before, "refused batches");
        assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (0, 0));

        // A full-ring batch rings once, by doorbell (more than one WQE).
        let eight = [SendWr::send(1, &sgl); 8];
        // SAFETY: never executed.
        unsafe { rig.sq.post_all(&eight) }.unwrap();
        assert_eq!(
            (rig.sq.producer(), rig.sq.pending(), rig.mem.dbrec(1)),
            (8, 0, 8)
        );
        let bf = rig.mem.bf_bytes();
        assert_eq!(bf[..8], rig.mem.sq_bytes()[7 * 64..7 * 64 + 8]);
        assert!(bf[8..64].iter().all(|&b| b == 0));
    }

    /// Requests of every kind and size, more than a batch's first pass could once keep.
    fn mixed<'a>(sgl: &'a [Sge], inline: &'a [Sge]) -> Vec<SendWr<'a>> {
        let r = RemoteBuf::new(0x4000, 7);
        let local = Sge::new(0x2000, 8, 3);
        (0..40u64)
            .map(|i| {
                let n = (i % 4) as usize;
                let wr = match i % 9 {
                    0 => SendWr::write(i, &sgl[..n], r),
                    1 => SendWr::write_imm(i, &sgl[..n], r, i as u32),
                    2 => SendWr::send(i, &sgl[..n]).solicited(),
                    3 => SendWr::send_imm(i, &sgl[..n], 5).fenced(),
                    4 => SendWr::read(i, &sgl[..n], r),
                    5 => SendWr::write(i, &inline[..n], r).inline(),
                    6 => SendWr::compare_swap(i, local, r, i, 2),
                    7 => SendWr::fetch_add(i, local, r.offset(8), i),
                    _ => SendWr::nop(i),
                };
                if i % 3 == 0 { wr.signaled() } else { wr }
            })
            .collect()
    }

    #[test]
    fn a_batch_writes_what_posting_one_by_one_writes() {
        let data = [0x5au8; 60];
        let sgl = [
            Sge::new(0x1000, 16, 1),
            Sge::new(0x2000, 0, 2),
            Sge::new(0x3000, 32, 3),
        ];
        let inline = [
            Sge::from_slice(&data[..7], 0),
            Sge::from_slice(&data[7..40], 0),
            Sge::from_slice(&data[40..], 0),
        ];
        let wrs = mixed(&sgl, &inline);
        let mut one_by_one = Rig::new(128, 256, caps(3, 60));
        for wr in &wrs {
            post(&mut one_by_one, wr).unwrap();
        }
        one_by_one.sq.ring();
        let mut batched = Rig::new(128, 256, caps(3, 60));
        // SAFETY: never executed; the inline sources are live.
        unsafe { batched.sq.post_all(&wrs) }.unwrap();
        assert_eq!(batched.mem.sq_bytes(), one_by_one.mem.sq_bytes());
        assert_eq!(batched.sq.producer(), one_by_one.sq.producer());
        assert_eq!(batched.mem.dbrec(1), one_by_one.mem.dbrec(1));
        assert_eq!(
            batched.sq.outstanding_signaled(),
            one_by_one.sq.outstanding_signaled()
        );
    }

    #[test]
    fn a_refused_batch_names_the_request_posting_one_by_one_would() {
        let sgl = [Sge::new(0x1000, 8, 1)];
        let four = [sgl[0]; 4];
        let three = [sgl[0]; 3];
        let r = RemoteBuf::new(0x4000, 1);
        // 8 blocks, 2 signaled requests at most. Each case: the batch, and the error posting
        // its requests one by one meets first.
        let many: Vec<SendWr<'_>> = (0..12).map(SendWr::nop).collect();
        let mut late_fault = many.clone();
        late_fault[10] = SendWr::write(10, &four, r);
        let mut early_fault = many.clone();
        early_fault[1] = SendWr::write(1, &four, r);
        let cases: [(&[SendWr<'_>], BatchError); 7] = [
            // The ring fills at the ninth request, before the fault at the eleventh; the
            // batch is longer than the ring.
            (
                &late_fault,
                BatchError {
                    index: 8,
                    error: PostError::QueueFull { needed: 9, free: 8 },
                },
            ),
            // A fault before the ring fills.
            (
                &early_fault,
                BatchError {
                    index: 1,
                    error: PostError::TooManySges { got: 4, max: 3 },
                },
            ),
            // A two-block request that does not fit after seven blocks, before a fault.
            (
                &[
                    many[0],
                    many[1],
                    many[2],
                    many[3],
                    many[4],
                    many[5],
                    many[6],
                    SendWr::write(7, &three, r),
                    SendWr::write(8, &four, r),
                ],
                BatchError {
                    index: 7,
                    error: PostError::QueueFull { needed: 9, free: 8 },
                },
            ),
            // The third signaled request overflows the CQ share, before a fault.
            (
                &[
                    many[0].signaled(),
                    many[1],
                    many[2].signaled(),
                    many[3].signaled(),
                    SendWr::write(4, &four, r),
                ],
                BatchError {
                    index: 3,
                    error: PostError::CqFull { limit: 2 },
                },
            ),
            // Valid requests, no more than the ring's blocks, that need more blocks than it
            // has.
            (
                &[
                    many[0],
                    many[1],
                    many[2],
                    many[3],
                    many[4],
                    many[5],
                    many[6],
                    SendWr::write(7, &three, r),
                ],
                BatchError {
                    index: 7,
                    error: PostError::QueueFull { needed: 9, free: 8 },
                },
            ),
            // Valid requests, three of them signaled.
            (
                &[many[0].signaled(), many[1].signaled(), many[2].signaled()],
                BatchError {
                    index: 2,
                    error: PostError::CqFull { limit: 2 },
                },
            ),
            // A fault with room for all: the fault.
            (
                &[many[0], SendWr::nop(1).inline(), many[2]],
                BatchError {
                    index: 1,
                    error: PostError::InlineNotAllowed,
                },
            ),
        ];
        for (wrs, want) in cases {
            let mut rig = Rig::new(
                8,
                256,
                SqCaps {
                    max_signaled: 2,
                    ..caps(3, 0)
                },
            );
            let before = visible(&mut rig);
            // SAFETY: never executed.
            assert_eq!(unsafe { rig.sq.post_all(wrs) }, Err(want));
            visible(&mut rig).assert_same(&before, &std::format!("{want:?}"));
            assert_eq!(
                (rig.sq.producer(), rig.sq.pending(), rig.mem.dbrec(1)),
                (0, 0, 0)
            );
            // One by one: the same request is the first refused, for the same reason (the
            // batch's room errors count the whole batch up to it).
            let mut rig = Rig::new(
                8,
                256,
                SqCaps {
                    max_signaled: 2,
                    ..caps(3, 0)
                },
            );
            let first = wrs.iter().enumerate().find_map(|(index, wr)| {
                let e = post(&mut rig, wr).err()?;
                Some((index, core::mem::discriminant(&e)))
            });
            assert_eq!(
                first,
                Some((want.index, core::mem::discriminant(&want.error)))
            );
        }
    }

    #[test]
    fn a_batch_takes_the_credits_returned_since_the_last_post() {
        // The ring went round once; the queue last read the credit word when it was empty, so
        // the batch fits only with the credits the poller has returned since.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        advance(&mut rig, 8);
        let wrs: Vec<SendWr<'_>> = (0..8).map(|i| SendWr::nop(i).signaled()).collect();
        // SAFETY: never executed.
        unsafe { rig.sq.post_all(&wrs) }.unwrap();
        assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (16, 16));
    }

    #[test]
    fn wqe_index_wraps_at_16_bits() {
        let mut rig = Rig::new(4, 256, caps(1, 0));
        advance(&mut rig, 3);
        // Under Miri (100 times slower), start just below the wrap: the queue and its credit
        // word are set as 0xfff0 - 3 more completed NOPs would have left them.
        let first = if cfg!(miri) { 0xfff0 } else { 3 };
        if first > 3 {
            let signaled = first as u16;
            rig.sq.pi = first;
            rig.sq.sig_posted = signaled;
            rig.sq.credit = 0;
            rig.sq.state.force_done(first, signaled);
            rig.sq.refresh();
        }
        // Drive the producer past 0xffff through completions and check the index field.
        use crate::testutil::req_cqe;
        use zverbs_core::{Completion, PollCq};
        let mut wc = [Completion::EMPTY; 1];
        for i in first..0x1_0003 {
            post(&mut rig, &SendWr::nop(u64::from(i)).signaled()).unwrap();
            let ring = rig.mem.sq_bytes();
            let slot = (i % 4) as usize * 64;
            assert_eq!(
                CtrlSeg::new_unchecked(&ring[slot..slot + 16]).wqe_index(),
                i as u16
            );
            rig.sq.ring();
            let ci = rig.cq.consumer();
            let owner = ((ci / rig.cq.cqe_cnt()) & 1) as u8;
            rig.mem.put_cqe(
                (ci % rig.cq.cqe_cnt()) as usize,
                req_cqe(QPN, opcode::NOP, i as u16, 0, owner),
            );
            assert_eq!(rig.cq.poll(&mut wc), 1);
            assert_eq!(wc[0].wr_id, u64::from(i));
        }
        assert_eq!(rig.mem.dbrec(1), 0x0003);
    }
}
