//! What the differential checks against libmlx5 (`differential.rs`, `differential_dc.rs`)
//! share: the registered arena and its regions, the randomized request, the run's mode, the
//! address handles, reading and comparing the WQEs of two rings (with what is masked and why),
//! the direct path's send queue state, and polling both CQs and comparing what libmlx5 and the
//! direct path decoded.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use crate::common::{Rng, env_u64, in_emulator};
use zverbs_core::{Completion, PollCq, RemoteBuf, SendFlags, SendWr, Sge, WcFlags};
use zverbs_emu::verbs::{Ah, Context, Cq, Mr};
use zverbs_ffi::types::{
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, ibv_ah_attr, ibv_qp_cap, ibv_wc,
};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, CqLayout, QpLayout, RqRef, RqSlot, RqState, SqCaps, SqRef, SqSlot,
    SqState,
};

/// A direct poller over bindings leaked for the process's life.
pub type StaticCq = CompletionQueue<&'static [CqBinding<SqRef<'static>, RqRef<'static>>]>;

/// The registered arena's size, and where in it each kind of request reads or writes.
pub const ARENA: usize = 1 << 20;
/// Gather entries and inline data of WRITEs and SENDs.
pub const SRC: u64 = 0;
/// WRITE targets.
pub const WRITE_DST: u64 = 64 << 10;
/// READ scatter entries.
pub const READ_DST: u64 = 128 << 10;
/// READ sources.
pub const READ_SRC: u64 = 192 << 10;
/// Atomic targets (64 words), and from `ATOMIC + 512` their results.
pub const ATOMIC: u64 = 256 << 10;
/// Receive buffers.
pub const RECV: u64 = 512 << 10;

/// The operations, as `ibv_wr_opcode` numbers them (0 to 6).
pub const OPS: [&str; 7] = ["WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", "CS", "FA"];

/// One randomized request, as both sides post it.
#[derive(Clone, Debug)]
pub struct Req {
    pub wr_id: u64,
    /// The `ibv_wr_opcode`.
    pub op: u32,
    pub sgl: Vec<(u64, u32)>,
    pub inline: bool,
    pub signaled: bool,
    pub fence: bool,
    pub solicited: bool,
    pub imm: u32,
    pub raddr: u64,
    pub compare: u64,
    pub swap_add: u64,
    /// DC: the index of the target and of the address handle it goes through.
    pub target: usize,
    pub ah: usize,
}

/// What bounds the randomized requests of a run.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// Bytes of one gather entry at most.
    pub max_sge_len: u64,
    /// Bytes of inline data at most.
    pub max_inline: u32,
    /// DC: the number of targets and of address handles to choose from (`None` for RC, which
    /// draws neither).
    pub dc: Option<(usize, usize)>,
}

impl Req {
    /// A random request of any of the seven operations: an atomic on one word, a READ into
    /// 1..=`max_send_sge` entries, or a WRITE or SEND, inline (30 %) or from 1..=`max_send_sge`
    /// entries; signaled half the time, fenced one time in ten, a SEND solicited one in five.
    pub fn random(rng: &mut Rng, base: u64, id: u64, caps: &ibv_qp_cap, d: Draw) -> Self {
        let op = rng.below(7) as u32;
        let mut r = Req {
            wr_id: id,
            op,
            sgl: Vec::new(),
            inline: false,
            signaled: rng.chance(50),
            fence: rng.chance(10),
            solicited: false,
            imm: rng.next_u64() as u32,
            raddr: 0,
            compare: rng.next_u64(),
            swap_add: rng.next_u64(),
            target: 0,
            ah: 0,
        };
        if let Some((targets, ahs)) = d.dc {
            r.target = rng.below(targets as u64) as usize;
            r.ah = rng.below(ahs as u64) as usize;
        }
        match op {
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                r.sgl.push((base + ATOMIC + 512 + 8 * rng.below(64), 8));
                r.raddr = base + ATOMIC + 8 * rng.below(64);
            }
            IBV_WR_RDMA_READ => {
                let n = 1 + rng.below(u64::from(caps.max_send_sge));
                let mut off = READ_DST;
                for _ in 0..n {
                    let len = 1 + rng.below(d.max_sge_len) as u32;
                    r.sgl.push((base + off, len));
                    off += u64::from(len) + rng.below(64);
                }
                r.raddr = base + READ_SRC + rng.below(4096);
            }
            _ => {
                r.solicited = matches!(op, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) && rng.chance(20);
                (r.inline, r.sgl) = random_source(rng, base, caps, d);
                r.raddr = base + WRITE_DST + rng.below(32 << 10);
            }
        }
        r
    }

    /// Whether the request consumes a receive (SEND, SEND with immediate, WRITE with
    /// immediate).
    pub fn consumes_recv(&self) -> bool {
        matches!(
            self.op,
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM
        )
    }

    /// Its flags (`IBV_SEND_*`, the same bits as `SendFlags`).
    pub fn flags(&self) -> SendFlags {
        flags(self.signaled, self.inline, self.fence, self.solicited)
    }

    /// The request for the direct path, over entries `sgl`, to `remote`, without its flags.
    pub fn direct_wr<'a>(&self, sgl: &'a [Sge], remote: RemoteBuf) -> SendWr<'a> {
        match self.op {
            IBV_WR_RDMA_WRITE => SendWr::write(self.wr_id, sgl, remote),
            IBV_WR_RDMA_WRITE_WITH_IMM => SendWr::write_imm(self.wr_id, sgl, remote, self.imm),
            IBV_WR_SEND => SendWr::send(self.wr_id, sgl),
            IBV_WR_SEND_WITH_IMM => SendWr::send_imm(self.wr_id, sgl, self.imm),
            IBV_WR_RDMA_READ => SendWr::read(self.wr_id, sgl, remote),
            IBV_WR_ATOMIC_CMP_AND_SWP => {
                SendWr::compare_swap(self.wr_id, sgl[0], remote, self.compare, self.swap_add)
            }
            _ => SendWr::fetch_add(self.wr_id, sgl[0], remote, self.swap_add),
        }
    }
}

/// What a WRITE or SEND sends: inline data (30 %, 1 to `d.max_inline` bytes), or
/// 1..=`max_send_sge` entries of 1 to `d.max_sge_len` bytes, all in the source region.
pub fn random_source(
    rng: &mut Rng,
    base: u64,
    caps: &ibv_qp_cap,
    d: Draw,
) -> (bool, Vec<(u64, u32)>) {
    if rng.chance(30) {
        let len = 1 + rng.below(u64::from(d.max_inline)) as u32;
        (true, vec![(base + SRC + rng.below(4096), len)])
    } else {
        let n = 1 + rng.below(u64::from(caps.max_send_sge));
        let sgl = (0..n)
            .map(|_| {
                let len = 1 + rng.below(d.max_sge_len) as u32;
                (base + SRC + rng.below(32 << 10), len)
            })
            .collect();
        (false, sgl)
    }
}

/// The flags of a request that is `signaled`, `inline`, `fence`d and `solicited` or not.
pub fn flags(signaled: bool, inline: bool, fence: bool, solicited: bool) -> SendFlags {
    let mut f = SendFlags::NONE;
    for (on, flag) in [
        (signaled, SendFlags::SIGNALED),
        (inline, SendFlags::INLINE),
        (fence, SendFlags::FENCE),
        (solicited, SendFlags::SOLICITED),
    ] {
        if on {
            f |= flag;
        }
    }
    f
}

/// A page-aligned arena of [`ARENA`] bytes, leaked (it lives as long as the process), its
/// bytes a pattern when `pattern`, registered: its address and its MR.
pub fn arena(ctx: &Context, pattern: bool) -> (u64, Mr) {
    let arena: &'static mut [u8] = Box::leak(vec![0u8; ARENA + 4096].into_boxed_slice());
    let base_ptr = ((arena.as_mut_ptr() as usize + 4095) & !4095) as *mut u8;
    if pattern {
        for i in 0..ARENA {
            // SAFETY: inside the leaked arena.
            unsafe { base_ptr.add(i).write((i as u8).wrapping_mul(13)) };
        }
    }
    // SAFETY: the arena is leaked: valid for the process's life.
    let mr = unsafe { ctx.reg_mr(base_ptr, ARENA) }.unwrap();
    (base_ptr as u64, mr)
}

/// What a run starts with.
pub struct Start {
    /// Its randomness: `ZVERBS_EMU_DIFF_SEED` (else a fixed seed) mixed with the run's salt.
    pub rng: Rng,
    /// Its number of cases: `ZVERBS_EMU_DIFF_CASES`, else the run's default.
    pub cases: u64,
    /// The emulated device.
    pub ctx: Context,
    /// The [`arena`]'s address and MR.
    pub base: u64,
    pub mr: Mr,
}

/// Opens the device and registers the [`arena`] (its bytes a pattern when `pattern`), for a
/// run whose randomness is salted with `salt` and which has `cases` cases by default.
pub fn start(salt: u64, cases: u64, pattern: bool) -> Start {
    let seed = env_u64("ZVERBS_EMU_DIFF_SEED", 0x5eed_d1ff);
    let cases = env_u64("ZVERBS_EMU_DIFF_CASES", cases);
    let ctx = Context::open().unwrap();
    let (base, mr) = arena(&ctx, pattern);
    Start {
        rng: Rng((seed ^ salt) | 1),
        cases,
        ctx,
        base,
        mr,
    }
}

/// Runs `run` as the test `name` in the emulator, in `mode`: `BlueFlame`, or `doorbell-only`,
/// a device without BlueFlame (libmlx5 and the direct path both ring 8-byte doorbells).
pub fn in_mode(name: &str, mode: &str, run: fn(&str)) {
    let env: &[(&str, &str)] = if mode == "doorbell-only" {
        &[("ZVERBS_EMU_BF", "0"), ("MLX5_SHUT_UP_BF", "1")]
    } else {
        &[]
    };
    if in_emulator(name, env, Duration::from_secs(240)) {
        run(mode);
    }
}

/// Checks that the QP of `l` has BlueFlame in the `BlueFlame` mode and none (`bf.size` 0) in
/// the `doorbell-only` one.
pub fn assert_mode(mode: &str, l: &QpLayout) {
    if mode == "doorbell-only" {
        assert_eq!(l.bf.size, 0, "a device without BlueFlame gives bf.size 0");
    } else {
        assert!(l.bf.size > 0, "a BlueFlame register");
    }
}

/// `n` address handles to this port, random SL, every other one with a GRH (random GID, flow
/// label, hop limit and traffic class); and how many have one.
pub fn random_ahs(ctx: &Context, rng: &mut Rng, n: usize) -> (Vec<Ah>, usize) {
    let mut grh = 0;
    let ahs = (0..n)
        .map(|i| {
            let mut a = ibv_ah_attr {
                dlid: ctx.lid,
                sl: rng.below(16) as u8,
                port_num: 1,
                ..ibv_ah_attr::default()
            };
            if i % 2 == 1 {
                a.is_global = 1;
                for b in &mut a.grh.dgid.raw {
                    *b = rng.next_u64() as u8;
                }
                a.grh.flow_label = rng.below(1 << 20) as u32;
                a.grh.hop_limit = 1 + rng.below(255) as u8;
                a.grh.traffic_class = rng.next_u64() as u8;
                grh += 1;
            }
            ctx.create_ah(a).unwrap()
        })
        .collect();
    (ahs, grh)
}

/// The direct path's send-queue state for the QP of `l` (and, with `rq`, its receive-queue
/// state), its CQ of `c` polled through one binding for `qpn`: leaked, like the rings libmlx5
/// allocated, so that the queues built on them live as long as the process.
pub fn direct_state(
    l: &QpLayout,
    c: &CqLayout,
    qpn: u32,
    rq: bool,
) -> (SqRef<'static>, Option<RqRef<'static>>, StaticCq) {
    let sq_slots: &'static [SqSlot] = (0..l.sq.wqe_cnt)
        .map(|_| SqSlot::new())
        .collect::<Vec<_>>()
        .leak();
    let sq: SqRef<'static> = Box::leak(Box::new(SqState::new(sq_slots).unwrap()));
    let rq: Option<RqRef<'static>> = rq.then(|| {
        let rq_slots: &'static [RqSlot] = (0..l.rq.wqe_cnt)
            .map(|_| RqSlot::new())
            .collect::<Vec<_>>()
            .leak();
        &*Box::leak(Box::new(RqState::new(rq_slots).unwrap()))
    });
    let bindings: &'static [CqBinding<SqRef<'static>, RqRef<'static>>] =
        Box::leak(Box::new([CqBinding::new(qpn, Some(sq), rq)]));
    // SAFETY: libmlx5 allocated the CQ, which lives as long as the process; nothing else polls
    // it.
    let cq = unsafe { CompletionQueue::new(c, bindings) }.unwrap();
    (sq, rq, cq)
}

/// The send queue's capabilities for the QP granted `caps`, with `max_signaled` signaled
/// requests in flight at most.
pub fn sq_caps(caps: &ibv_qp_cap, max_signaled: u32, transport: zverbs_core::Transport) -> SqCaps {
    SqCaps {
        max_send_sge: caps.max_send_sge,
        max_inline_data: caps.max_inline_data,
        sig_all: false,
        max_signaled,
        transport,
    }
}

/// The raw WQE bytes at block `pi` of a ring, with wrap, cut at `ds × 16` (the bytes past it
/// in the last basic block are not part of the WQE).
pub fn wqe_bytes(l: &QpLayout, pi: u32) -> Vec<u8> {
    let cnt = l.sq.wqe_cnt;
    let ring = l.sq.buf.as_ptr();
    let read = |block: u32| {
        let mut b = [0u8; 64];
        // SAFETY: the block is masked into the ring, which libmlx5 allocated for the QP.
        unsafe {
            core::ptr::copy_nonoverlapping(
                ring.add((block & (cnt - 1)) as usize * 64),
                b.as_mut_ptr(),
                64,
            )
        };
        b
    };
    let first = read(pi);
    let ds = usize::from(first[7] & 0x3f);
    let blocks = ds.div_ceil(4).max(1) as u32;
    let mut v: Vec<u8> = (0..blocks).flat_map(|k| read(pi + k)).collect();
    v.truncate(ds * 16);
    v
}

/// The send counter the poster published in the QP's doorbell record (16 bits).
pub fn sq_pi(l: &QpLayout) -> u32 {
    // SAFETY: word 1 of the QP's doorbell record (MLX5_SND_DBR), written by the poster.
    u32::from_be(unsafe { l.dbrec.as_ptr().add(1).read_volatile() }) & 0xffff
}

/// Masks the QPN in the `qpn_ds` word (bytes 4..8) of a control segment after checking that
/// it carries `qpn` and `ds` 16-byte segments: the two QPs differ, and each side must carry
/// its own QP's number.
pub fn mask_qpn(w: &mut [u8], qpn: u32, ds: u32) {
    assert_eq!(w[4..8], ((qpn << 8) | ds).to_be_bytes(), "qpn_ds");
    w[4..8].fill(0);
}

/// Masks what the device ignores and libmlx5 does not write in the WQE of `op` whose segments
/// after the control segment (and, for UD and DC, the datagram segment) start at byte `at`:
/// the padding after inline data (libmlx5 leaves stale ring bytes there, the direct path
/// zeroes them), and the `compare` field of a fetch-and-add's atomic segment (libmlx5's
/// `set_atomic_seg` writes only `swap_add` for FA; the direct path writes 0).
pub fn mask_unwritten(w: &mut [u8], op: u32, at: usize) {
    // The atomic segment follows the 16-byte remote address segment.
    if op == IBV_WR_ATOMIC_FETCH_AND_ADD && w.len() >= at + 32 {
        w[at + 24..at + 32].fill(0);
    }
    match op {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => mask_inline_pad(w, at),
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => mask_inline_pad(w, at + 16),
        _ => {}
    }
}

/// Masks the padding after inline data whose segment starts at byte `at` of the WQE: not
/// part of the message; libmlx5 leaves stale ring bytes there, the direct path zeroes them.
pub fn mask_inline_pad(w: &mut [u8], at: usize) {
    if w.len() < at + 4 || w[at] & 0x80 == 0 {
        return;
    }
    let len = u32::from_be_bytes(w[at..at + 4].try_into().unwrap()) & 0x7fff_ffff;
    let end = at + 4 + len as usize;
    for b in w.iter_mut().skip(end) {
        *b = 0;
    }
}

/// The WQEs compared so far, and where they met the ring end.
#[derive(Default)]
pub struct Compared {
    /// WQEs compared.
    pub done: u64,
    /// WQEs that met the ring end.
    pub wrapped: u64,
    /// (blocks, first block's slot) of every WQE that met the ring end.
    pub wrap_positions: BTreeSet<(u32, u32)>,
    /// The sizes of the WQEs in blocks.
    pub sizes: BTreeSet<u32>,
}

impl Compared {
    /// Compares the WQE at block `at` of libmlx5's ring (`lib`: its layout and QPN) with the
    /// one of ours, after masking the QPN and what `mask` masks; `what` (a `kind` WQE) names
    /// it when they differ. Returns its size in blocks.
    pub fn wqe(
        &mut self,
        lib: (&QpLayout, u32),
        ours: (&QpLayout, u32),
        at: u32,
        kind: &str,
        what: &dyn fmt::Debug,
        mask: impl Fn(&mut [u8]),
    ) -> u32 {
        let mut a = wqe_bytes(lib.0, at);
        let mut b = wqe_bytes(ours.0, at);
        assert_eq!(
            a.len(),
            b.len(),
            "ds differs for {what:?}\nlibmlx5 {a:02x?}\nours {b:02x?}"
        );
        let ds = (a.len() / 16) as u32;
        mask_qpn(&mut a, lib.1, ds);
        mask_qpn(&mut b, ours.1, ds);
        mask(&mut a);
        mask(&mut b);
        assert_eq!(
            a, b,
            "{kind} bytes differ at block {at} for {what:?}\nlibmlx5 {a:02x?}\nours    {b:02x?}"
        );
        let cnt = lib.0.sq.wqe_cnt;
        let blocks = (ds as usize).div_ceil(4) as u32;
        let slot = at & (cnt - 1);
        self.sizes.insert(blocks);
        if slot + blocks > cnt {
            self.wrapped += 1;
            self.wrap_positions.insert((blocks, slot));
        }
        self.done += 1;
        blocks
    }

    /// Checks that WQEs of every size met the end of the ring of `cnt` blocks at every
    /// position they can.
    pub fn assert_every_wrap_position(&self, cnt: u32) {
        let want: usize = self.sizes.iter().map(|&b| (b - 1) as usize).sum();
        assert_eq!(
            self.wrap_positions.len(),
            want,
            "every WQE size {:?} at every position that meets the ring end ({cnt} blocks)",
            self.sizes
        );
    }
}

/// Polls `cq_lib` (libmlx5) and `ours` until each has given `expect` completions (20 s at
/// most), checks that each gave that many, and returns them; `what` names the requests when
/// they fall short.
pub fn poll_both(
    ctx: &Context,
    cq_lib: Cq,
    ours: &mut impl PollCq,
    expect: usize,
    what: &dyn fmt::Debug,
) -> (Vec<ibv_wc>, Vec<Completion>) {
    let (mut lib, mut our) = (Vec::new(), Vec::new());
    let mut wl = vec![ibv_wc::default(); 64];
    let mut wo = vec![Completion::EMPTY; 64];
    let t = Instant::now();
    while (lib.len() < expect || our.len() < expect) && t.elapsed() < Duration::from_secs(20) {
        wl.fill(ibv_wc::default());
        let n = ctx.poll_cq(cq_lib, &mut wl);
        assert!(n >= 0, "ibv_poll_cq: {n}");
        lib.extend_from_slice(&wl[..n as usize]);
        let m = ours.poll(&mut wo);
        our.extend_from_slice(&wo[..m]);
        if n == 0 && m == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(lib.len(), expect, "libmlx5's completions for {what:?}");
    assert_eq!(our.len(), expect, "our completions for {what:?}");
    (lib, our)
}

/// Checks that libmlx5's completions `lib` (of the QP numbered `qpns.0`) and ours (of
/// `qpns.1`) say the same, pairwise: request, status, and for a success the opcode, the flags
/// both decoders report, the immediate and the byte count where libmlx5 sets it; for an error
/// the vendor syndrome. Returns how many were compared.
pub fn assert_same_completions(lib: &[ibv_wc], ours: &[Completion], qpns: (u32, u32)) -> u64 {
    for (l, o) in lib.iter().zip(ours) {
        assert_eq!(l.wr_id, o.wr_id);
        assert_eq!(l.status, o.status.to_raw(), "status of {:#x}", l.wr_id);
        assert_eq!((l.qp_num, o.qp_num), qpns, "QP numbers of {:#x}", l.wr_id);
        if l.status == 0 {
            assert_eq!(l.opcode, o.opcode.to_raw(), "opcode of {:#x}", l.wr_id);
            // Mask: libmlx5 sets byte_len for receives, READ and atomics only.
            if l.opcode >= 2 {
                assert_eq!(l.byte_len, o.byte_len, "byte_len of {:#x}", l.wr_id);
            }
            // IBV_WC_GRH and IBV_WC_WITH_IMM, the flags both decoders report (libmlx5 sets
            // others only for raw packet QPs and extensions neither side uses here).
            assert_eq!(
                l.wc_flags & u32::from(WcFlags::GRH.union(WcFlags::WITH_IMM).bits()),
                u32::from(o.flags.bits()),
                "wc_flags of {:#x}",
                l.wr_id
            );
            if o.flags.contains(WcFlags::WITH_IMM) {
                assert_eq!(u32::from_be(l.imm_data), o.imm);
            }
        } else {
            // Error CQEs: the device's vendor syndrome, decoded by both.
            assert_eq!(l.vendor_err, o.vendor_err, "vendor_err of {:#x}", l.wr_id);
        }
    }
    lib.len().min(ours.len()) as u64
}
