//! Differential check against rdma-core's own mlx5 provider, on the emulated ConnectX.
//!
//! Two RC QPs of the same kind are created through libmlx5 (same capabilities, each looped
//! back to itself, each with its own CQ). For every randomized work request — WRITE,
//! WRITE_IMM, SEND, SEND_IMM, READ, CS, FA; inline or 1..=max_send_sge entries; signaled or
//! not; fenced or solicited now and then; alone or in a chain of up to three — the same
//! request is posted on one QP with libmlx5's `ibv_post_send` and on the other with the direct
//! path (`zverbs_mlx5dv::SendQueue` built from what `mlx5dv_init_obj` reports), and the WQE
//! bytes in the two rings are compared. Both QPs advance in step, so every WQE sits at the same
//! ring position on both sides, and the run covers WQEs that wrap around the ring end. The
//! software device executes both; the completions libmlx5's `ibv_poll_cq` decodes from its CQ
//! are compared with what our `CompletionQueue` returns from the other, including an error
//! (bad rkey) and the flushes after it.
//!
//! What is masked (each comparison below says why):
//! - the QPN in `qpn_ds` (the QPs differ; each side must carry its own QPN, and `ds` must be
//!   equal);
//! - bytes after the end of the inline data, up to the end of its 16-byte segment: padding the
//!   device ignores; libmlx5 leaves what the ring held before, the direct path zeroes it;
//! - bytes past `ds × 16` in the WQE's last basic block: not part of the WQE;
//! - the `compare` field of a fetch-and-add's atomic segment: the device ignores it for FA,
//!   libmlx5 leaves what the ring held, the direct path writes 0;
//! - `ibv_wc.byte_len` of successful SEND and WRITE requester completions, which libmlx5 does
//!   not set (verbs defines it for receives, READ and atomics only), and `vendor_err` of
//!   successful ones.
//!
//! UD sends: two UD QPs of the same kind, eight address handles (to this port, half with a
//! GRH of random GID, flow label, hop limit and traffic class) whose address vectors
//! `mlx5dv_init_obj` reveals. Each randomized SEND or SEND_IMM (inline or 1..=max_send_sge
//! entries, signaled or not, solicited now and then, any AH, remote QPN and Q_Key, alone or in a
//! chain of up to three) goes through `ibv_post_send` (`wr.ud`) on one QP and through the
//! direct UD send queue (`SendQueue::new_ud`, a `UdDest` of the same AH) on the other; the WQE
//! bytes (control, datagram and data segments) are compared with the same masks as RC, across
//! the ring end, and the signaled completions decoded by both.
//!
//! SRQ receives: pairs of SRQs of the same shape (2 to 256 WQEs, 1 to 31 entries) through
//! libmlx5; random receive lists posted with `ibv_post_srq_recv` to one and through
//! `SharedRecvQueue` to the other, until the ring is full and one more is refused by both; the
//! whole ring and the doorbell record are compared after every post. Entries are never empty
//! (libmlx5 writes an empty entry, the direct path skips it).
//!
//! Prepared posts: the same pair of RC QPs (one entry each), every request a WRITE,
//! WRITE_IMM, READ, SEND or SEND_IMM of 0 to 512 bytes posted alone, with `ibv_post_send` on
//! one and as a prepared request (`prepare_rdma` / `prepare_send` from a template whose
//! changing fields differ, then `post_prepared`) on the other; the WQEs are compared as above,
//! and so is what each side wrote into its BlueFlame register: the WQE's `ds` segments of the
//! buffer (past them libmlx5 copies the ring's stale bytes, a prepared post writes zeros), or
//! the 8-byte doorbell without BlueFlame or for a one-segment WQE, which libmlx5 rings with
//! the doorbell.
//!
//! Seed and size: `ZVERBS_EMU_DIFF_SEED`, `ZVERBS_EMU_DIFF_CASES`. The tests need the shim
//! (`libzverbs_emu.so`) built beside them, so they are not part of the plain `cargo test`
//! (`test = false` in Cargo.toml): `cargo xtask test --only connectx` builds the shim and runs
//! them (`cargo build --release -p zverbs-emu && cargo test --release -p zverbs-emu --test
//! differential` by hand).

mod common;
mod differ;

use std::fmt;
use std::time::Duration;

use common::{Rng, in_emulator};
use differ::{
    Compared, Draw, READ_DST, READ_SRC, RECV, Req, SRC, Start, StaticCq, WRITE_DST, assert_mode,
    assert_same_completions, direct_state, flags, in_mode, mask_inline_pad, mask_qpn,
    mask_unwritten, poll_both, random_ahs, random_source, sq_caps, sq_pi, start, wqe_bytes,
};
use zverbs_core::{
    Completion, PostRecv, PostSend, RecvWr, RemoteBuf, SendFlags, SendWr, Sge, UdDest,
};
use zverbs_emu::verbs::{Ah, Context, Cq, Qp};
use zverbs_ffi::types::{
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, ibv_qp_cap, ibv_recv_wr,
    ibv_send_wr, ibv_send_wr_atomic, ibv_send_wr_rdma, ibv_send_wr_ud, ibv_sge, ibv_wc,
};
use zverbs_mlx5dv::{
    CompletionQueue, Connected, CqBinding, CqLayout, Datagram, QpLayout, RecvQueue, RqRef,
    SelfAddressed, SendQueue, SharedRecvQueue, SqRef, SrqSlot, SrqState,
};

const RECV_SLOT: u64 = 8192;
const MAX_SGE_LEN: u64 = 512;

/// What the driver of a run ([`Pair`]) needs to know of a transport's requests: how each
/// side posts one and what of its WQE is masked.
trait Kind {
    /// The direct path's send queue transport.
    type T: SelfAddressed;
    /// A randomized request.
    type Req: fmt::Debug;
    /// What the WQE comparison calls the WQEs.
    const WQE: &'static str;

    /// The request's `wr_id` and gather list (or inline sources).
    fn parts(r: &Self::Req) -> (u64, &[(u64, u32)]);

    /// The request's flags (`IBV_SEND_*`, the same bits as `SendFlags`).
    fn flags(r: &Self::Req) -> SendFlags;

    /// Request `i` of the batch for `ibv_post_send`, without its flags, gather list and chain.
    fn lib_wr(&self, r: &Self::Req, i: usize) -> ibv_send_wr;

    /// Calls `post` with request `i` of the batch for the direct path, over entries `sgl`,
    /// without its flags.
    fn with_wr(&self, r: &Self::Req, i: usize, sgl: &[Sge], post: &mut dyn FnMut(SendWr<'_>));

    /// Masks what the device ignores and libmlx5 does not write in the WQE `w` of `r` (its
    /// QPN already masked).
    fn mask(w: &mut [u8], r: &Self::Req);

    /// A QP of this transport with `ask`'s capabilities, completing on `cq`.
    fn create(ctx: &Context, cq: Cq, ask: ibv_qp_cap) -> Qp;

    /// Brings `qp` to RTS (an RC QP looped back to itself).
    fn ready(ctx: &Context, qp: Qp);
}

/// The two QPs of a run, of the same kind (`K`), each with its own CQ of 255 CQEs, ready to
/// send, and their layouts from `mlx5dv_init_obj`.
#[derive(Clone, Copy)]
struct Qps {
    cq_lib: Cq,
    q_lib: Qp,
    q_ours: Qp,
    l_lib: QpLayout,
    l_ours: QpLayout,
    c_ours: CqLayout,
}

impl Qps {
    fn new<K: Kind>(ctx: &Context, ask: ibv_qp_cap) -> Self {
        let cq_lib = ctx.create_cq(255).unwrap();
        let cq_ours = ctx.create_cq(255).unwrap();
        let q_lib = K::create(ctx, cq_lib, ask);
        let q_ours = K::create(ctx, cq_ours, ask);
        assert_eq!(q_lib.cap, q_ours.cap, "the same kind of QP");
        K::ready(ctx, q_lib);
        K::ready(ctx, q_ours);
        let (l_lib, _) = ctx.dv(q_lib, cq_lib).unwrap();
        let (l_ours, c_ours) = ctx.dv(q_ours, cq_ours).unwrap();
        assert_eq!(l_lib.sq.wqe_cnt, l_ours.sq.wqe_cnt);
        assert_eq!(l_lib.bf.size, l_ours.bf.size);
        Self {
            cq_lib,
            q_lib,
            q_ours,
            l_lib,
            l_ours,
            c_ours,
        }
    }
}

/// Both QPs of a run: the one libmlx5 posts to and the one the direct path posts to, with
/// their CQs; and what the WQE comparison has seen.
struct Pair<'a, T: SelfAddressed> {
    ctx: &'a Context,
    lkey: u32,
    q_lib: Qp,
    q_ours: Qp,
    cq_lib: Cq,
    l_lib: QpLayout,
    l_ours: QpLayout,
    sq: SendQueue<SqRef<'static>, T>,
    cq: CompletionQueue<&'static [CqBinding<SqRef<'static>, RqRef<'static>>]>,
    /// The WQEs compared.
    cmp: Compared,
}

impl<'a, T: SelfAddressed> Pair<'a, T> {
    /// The pair of `qps`, posted to through `ctx` and (ours) `sq`, polled through `ctx` and
    /// (ours) `cq`; gather lists of `lkey`.
    fn new(
        ctx: &'a Context,
        lkey: u32,
        qps: &Qps,
        sq: SendQueue<SqRef<'static>, T>,
        cq: CompletionQueue<&'static [CqBinding<SqRef<'static>, RqRef<'static>>]>,
    ) -> Self {
        Self {
            ctx,
            lkey,
            q_lib: qps.q_lib,
            q_ours: qps.q_ours,
            cq_lib: qps.cq_lib,
            l_lib: qps.l_lib,
            l_ours: qps.l_ours,
            sq,
            cq,
            cmp: Compared::default(),
        }
    }

    /// Posts `batch` on both sides (one chain and one `ibv_post_send` on libmlx5's QP; each
    /// request staged, then one ring, on ours) and compares the WQEs one by one from the
    /// batch's first block.
    fn post<K: Kind<T = T>>(&mut self, k: &K, batch: &[K::Req]) {
        let pi_lib = sq_pi(&self.l_lib);
        let lkey = self.lkey;
        let mut sges: Vec<Vec<ibv_sge>> = batch
            .iter()
            .map(|r| {
                K::parts(r)
                    .1
                    .iter()
                    .map(|&(addr, length)| ibv_sge { addr, length, lkey })
                    .collect()
            })
            .collect();
        let mut wrs: Vec<ibv_send_wr> = batch
            .iter()
            .enumerate()
            .map(|(i, r)| ibv_send_wr {
                num_sge: K::parts(r).1.len() as i32,
                send_flags: K::flags(r).bits(),
                ..k.lib_wr(r, i)
            })
            .collect();
        for i in 0..wrs.len() {
            wrs[i].sg_list = sges[i].as_mut_ptr();
        }
        for i in 1..wrs.len() {
            let next: *mut ibv_send_wr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        // SAFETY: the chain, its gather lists and what it names (the AHs) live across the
        // call; the memory is registered.
        let r = unsafe { self.ctx.post_send(self.q_lib, &mut wrs[0]) };
        assert_eq!(r, 0, "ibv_post_send");

        // The direct path: the same requests, rung once.
        let pi_ours = self.sq.producer() & 0xffff;
        assert_eq!(pi_ours, pi_lib, "both rings in step");
        for (i, r) in batch.iter().enumerate() {
            let sgl: Vec<Sge> = K::parts(r)
                .1
                .iter()
                .map(|&(a, l)| Sge::new(a, l, lkey))
                .collect();
            let sq = &mut self.sq;
            k.with_wr(r, i, &sgl, &mut |w| {
                // SAFETY: the entries lie in the registered arena, which outlives the request.
                unsafe { sq.stage(&w.with_flags(K::flags(r))) }
                    .unwrap_or_else(|e| panic!("post {r:?}: {e:?}"));
            });
        }
        self.sq.ring();
        assert_eq!(
            sq_pi(&self.l_ours),
            sq_pi(&self.l_lib),
            "same blocks published"
        );

        let mut at = pi_lib;
        for r in batch {
            let blocks = self.cmp.wqe(
                (&self.l_lib, self.q_lib.qpn),
                (&self.l_ours, self.q_ours.qpn),
                at,
                K::WQE,
                r,
                |w| K::mask(w, r),
            );
            at = at.wrapping_add(blocks);
        }
    }

    /// Polls both CQs until each has given `expect` completions, and returns them; `what`
    /// names the batch when they fall short.
    fn poll(&mut self, expect: usize, what: &dyn fmt::Debug) -> (Vec<ibv_wc>, Vec<Completion>) {
        poll_both(self.ctx, self.cq_lib, &mut self.cq, expect, what)
    }
}

/// The direct path's queues on the RC QP of `qps`: its send queue (as many signaled requests
/// in flight as its CQ holds beside the receives), its receive queue and its poller.
fn direct_rc(
    qps: &Qps,
) -> (
    SendQueue<SqRef<'static>, Connected>,
    RecvQueue<RqRef<'static>>,
    StaticCq,
) {
    let (l, c) = (&qps.l_ours, &qps.c_ours);
    let (sq_state, rq_state, cq) = direct_state(l, c, qps.q_ours.qpn, true);
    let caps = sq_caps(
        &qps.q_ours.cap,
        c.cqe_cnt - l.rq.wqe_cnt,
        zverbs_core::Transport::Rc,
    );
    // SAFETY: libmlx5 allocated the rings for this QP, which live as long as the process;
    // nothing else posts to it.
    unsafe {
        (
            SendQueue::new(l, caps, sq_state, None).unwrap(),
            RecvQueue::new(l, rq_state.unwrap()).unwrap(),
            cq,
        )
    }
}

/// Receives posted alike to both RC QPs, into 64 slots of the arena: through `ibv_post_recv`
/// to libmlx5's and through the direct path's receive queue to ours.
struct Recvs<'a> {
    ctx: &'a Context,
    q_lib: Qp,
    rq: RecvQueue<RqRef<'static>>,
    base: u64,
    lkey: u32,
    /// The next receive's `wr_id`.
    next: u64,
}

impl<'a> Recvs<'a> {
    fn new(
        ctx: &'a Context,
        q_lib: Qp,
        rq: RecvQueue<RqRef<'static>>,
        base: u64,
        lkey: u32,
    ) -> Self {
        Self {
            ctx,
            q_lib,
            rq,
            base,
            lkey,
            next: 1 << 40,
        }
    }

    /// Posts `n` receives on each side.
    fn post(&mut self, n: usize) {
        for _ in 0..n {
            let addr = self.base + RECV + (self.next % 64) * RECV_SLOT;
            let mut s = ibv_sge {
                addr,
                length: RECV_SLOT as u32,
                lkey: self.lkey,
            };
            let mut w = ibv_recv_wr {
                wr_id: self.next,
                next: core::ptr::null_mut(),
                sg_list: &mut s,
                num_sge: 1,
            };
            // SAFETY: a receive into the registered arena.
            assert_eq!(unsafe { self.ctx.post_recv(self.q_lib, &mut w) }, 0);
            let sgl = [Sge::new(addr, RECV_SLOT as u32, self.lkey)];
            // SAFETY: as above.
            unsafe { self.rq.post(&RecvWr::new(self.next, &sgl)) }.unwrap();
            self.next += 1;
        }
    }
}

#[test]
fn wqes_and_completions_match_libmlx5_blueflame() {
    in_mode(
        "wqes_and_completions_match_libmlx5_blueflame",
        "BlueFlame",
        run,
    );
}

#[test]
fn wqes_and_completions_match_libmlx5_doorbell_only() {
    in_mode(
        "wqes_and_completions_match_libmlx5_doorbell_only",
        "doorbell-only",
        run,
    );
}

#[allow(clippy::too_many_lines)]
fn run(mode: &str) {
    let Start {
        mut rng,
        cases,
        ctx,
        base,
        mr,
    } = start(0, 3000, true);
    // WQEs of 1 to 5 basic blocks (16 entries: 18 segments) in a small ring, so that every
    // size meets the ring end at every position it can.
    let ask = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_send_sge: 16,
        max_recv_sge: 1,
        max_inline_data: 200,
    };
    let qps = Qps::new::<Rc>(&ctx, ask);
    let Qps {
        q_lib,
        q_ours,
        l_lib,
        l_ours,
        ..
    } = qps;
    let caps = q_lib.cap;
    println!(
        "{mode}: QPs {:#x} (libmlx5) and {:#x} (direct path), SQ {} blocks, bf.size {}, \
         max_send_sge {}, max_inline_data {}",
        q_lib.qpn,
        q_ours.qpn,
        l_lib.sq.wqe_cnt,
        l_lib.bf.size,
        caps.max_send_sge,
        caps.max_inline_data
    );
    assert_mode(mode, &l_lib);

    let (sq, rq, cq) = direct_rc(&qps);
    let mut recvs = Recvs::new(&ctx, q_lib, rq, base, mr.lkey);
    let rq_depth = l_ours.rq.wqe_cnt as usize;
    recvs.post(rq_depth);

    let mut p = Pair::new(&ctx, mr.lkey, &qps, sq, cq);
    let mut rc = Rc {
        rkey: mr.rkey,
        last: false,
    };
    let mut compared_wc = 0u64;
    let mut ops = [0u64; 7];
    let mut inline_n = 0u64;
    let mut next_id = 1u64;
    let mut phase_error = false;
    while p.cmp.done < cases || !phase_error {
        // The last batch: a WRITE with a bad rkey, then two more requests that are flushed.
        let last = p.cmp.done >= cases;
        let n = if last { 3 } else { 1 + rng.below(3) as usize };
        let draw = Draw {
            max_sge_len: MAX_SGE_LEN,
            max_inline: caps.max_inline_data,
            dc: None,
        };
        let mut batch: Vec<Req> = (0..n)
            .map(|_| {
                let r = Req::random(&mut rng, base, next_id, &caps, draw);
                next_id += 1;
                r
            })
            .collect();
        if last {
            batch[0].op = IBV_WR_RDMA_WRITE;
            batch[0].raddr = base + WRITE_DST;
            batch[0].imm = 0;
            phase_error = true;
        }
        if let Some(r) = batch.last_mut() {
            // A signaled request ends every batch, so both queues retire it.
            r.signaled = true;
        }
        rc.last = last;
        p.post(&rc, &batch);
        for r in &batch {
            ops[r.op as usize] += 1;
            inline_n += u64::from(r.inline);
        }

        // Completions: every signaled request, and a receive for each SEND and WRITE_IMM;
        // after the error, every outstanding request and receive, flushed.
        let expect = if last {
            // The failing WRITE, the two requests after it, and every posted receive.
            batch.len() + rq_depth
        } else {
            batch.iter().filter(|r| r.signaled).count()
                + batch.iter().filter(|r| r.consumes_recv()).count()
        };
        let (got_lib, got_ours) = p.poll(expect, &batch);
        let consumed = got_lib.iter().filter(|w| w.opcode >= 128).count();
        compared_wc += assert_same_completions(&got_lib, &got_ours, (q_lib.qpn, q_ours.qpn));
        if last {
            assert_eq!(
                got_lib[0].status, 10,
                "remote access error (IBV_WC_REM_ACCESS_ERR)"
            );
            assert!(got_lib[1..].iter().all(|w| w.status == 5), "then flushes");
        } else {
            recvs.post(consumed);
        }
    }
    p.cmp.assert_every_wrap_position(l_lib.sq.wqe_cnt);
    println!(
        "{mode}: differential: {} randomized cases (WRITE {}, WRITE_IMM {}, SEND {}, \
         SEND_IMM {}, READ {}, CS {}, FA {}; {inline_n} inline; WQEs of {:?} blocks; \
         {} wrapping the ring end, at all {} wrap positions): WQE bytes equal; {compared_wc} completions decoded alike by ibv_poll_cq and our \
         poller",
        p.cmp.done,
        ops[0],
        ops[1],
        ops[2],
        ops[3],
        ops[4],
        ops[5],
        ops[6],
        p.cmp.sizes,
        p.cmp.wrapped,
        p.cmp.wrap_positions.len()
    );
}

/// RC requests, every operation; in the last batch the first request's rkey is wrong.
struct Rc {
    rkey: u32,
    /// Whether this is the last batch.
    last: bool,
}

impl Rc {
    /// The rkey of request `i` of the batch.
    fn rkey(&self, i: usize) -> u32 {
        if self.last && i == 0 {
            self.rkey ^ 0x0010_0000
        } else {
            self.rkey
        }
    }
}

impl Kind for Rc {
    type T = Connected;
    type Req = Req;
    const WQE: &'static str = "WQE";

    fn parts(r: &Req) -> (u64, &[(u64, u32)]) {
        (r.wr_id, &r.sgl)
    }

    fn flags(r: &Req) -> SendFlags {
        r.flags()
    }

    fn lib_wr(&self, r: &Req, i: usize) -> ibv_send_wr {
        let mut w = ibv_send_wr {
            wr_id: r.wr_id,
            opcode: r.op,
            // verbs' imm_data is big-endian.
            imm_data: r.imm.to_be(),
            ..ibv_send_wr::ZERO
        };
        match r.op {
            IBV_WR_ATOMIC_CMP_AND_SWP => {
                w.wr.atomic = ibv_send_wr_atomic {
                    remote_addr: r.raddr,
                    compare_add: r.compare,
                    swap: r.swap_add,
                    rkey: self.rkey(i),
                };
            }
            IBV_WR_ATOMIC_FETCH_AND_ADD => {
                w.wr.atomic = ibv_send_wr_atomic {
                    remote_addr: r.raddr,
                    compare_add: r.swap_add,
                    swap: 0,
                    rkey: self.rkey(i),
                };
            }
            _ => {
                w.wr.rdma = ibv_send_wr_rdma {
                    remote_addr: r.raddr,
                    rkey: self.rkey(i),
                };
            }
        }
        w
    }

    fn with_wr(&self, r: &Req, i: usize, sgl: &[Sge], post: &mut dyn FnMut(SendWr<'_>)) {
        post(r.direct_wr(sgl, RemoteBuf::new(r.raddr, self.rkey(i))));
    }

    /// The segments follow the 16-byte control segment.
    fn mask(w: &mut [u8], r: &Req) {
        mask_unwritten(w, r.op, 16);
    }

    fn create(ctx: &Context, cq: Cq, ask: ibv_qp_cap) -> Qp {
        ctx.create_qp(cq, ask).unwrap()
    }

    fn ready(ctx: &Context, qp: Qp) {
        ctx.connect(qp, ctx.lid, qp.qpn).unwrap();
    }
}

/// The bytes of a UD SEND's message at most: the port's MTU is 4096 on the emulated device,
/// and 16 entries of this size stay below it.
const UD_MAX_SGE_LEN: u64 = 200;

/// One randomized UD request, as both sides post it.
#[derive(Clone, Debug)]
struct UdReq {
    wr_id: u64,
    imm: Option<u32>,
    sgl: Vec<(u64, u32)>,
    inline: bool,
    signaled: bool,
    solicited: bool,
    /// Index into the address handles.
    ah: usize,
    remote_qpn: u32,
    qkey: u32,
}

impl UdReq {
    fn random(rng: &mut Rng, base: u64, id: u64, caps: &ibv_qp_cap, ahs: usize) -> Self {
        let mut r = UdReq {
            wr_id: id,
            imm: rng.chance(50).then(|| rng.next_u64() as u32),
            sgl: Vec::new(),
            inline: false,
            signaled: rng.chance(50),
            solicited: rng.chance(20),
            ah: rng.below(ahs as u64) as usize,
            // A unicast QPN no QP of this process has (the multicast QPN is 0xffffff).
            remote_qpn: 0x10_0000 + rng.below(0xe_ffff) as u32,
            qkey: rng.next_u64() as u32,
        };
        let d = Draw {
            max_sge_len: UD_MAX_SGE_LEN,
            max_inline: caps.max_inline_data,
            dc: None,
        };
        (r.inline, r.sgl) = random_source(rng, base, caps, d);
        r
    }
}

#[test]
fn ud_wqes_match_libmlx5_blueflame() {
    in_mode("ud_wqes_match_libmlx5_blueflame", "BlueFlame", run_ud);
}

#[test]
fn ud_wqes_match_libmlx5_doorbell_only() {
    in_mode(
        "ud_wqes_match_libmlx5_doorbell_only",
        "doorbell-only",
        run_ud,
    );
}

#[allow(clippy::too_many_lines)]
fn run_ud(mode: &str) {
    let Start {
        mut rng,
        cases,
        ctx,
        base,
        mr,
    } = start(0x0dd0_d00d, 3000, false);
    let ask = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 16,
        max_recv_sge: 1,
        max_inline_data: 200,
    };
    let qps = Qps::new::<Ud<'_>>(&ctx, ask);
    let Qps {
        q_lib,
        q_ours,
        l_lib,
        l_ours,
        c_ours,
        ..
    } = qps;
    let caps = q_lib.cap;
    assert_mode(mode, &l_lib);

    // Address handles: to this port, with and without a GRH.
    let (ahs, grh_n) = random_ahs(&ctx, &mut rng, 8);
    println!(
        "{mode}: UD QPs {:#x} (libmlx5) and {:#x} (direct path), SQ {} blocks, bf.size {}, \
         max_send_sge {}, max_inline_data {}, {} address handles ({grh_n} with a GRH)",
        q_lib.qpn,
        q_ours.qpn,
        l_lib.sq.wqe_cnt,
        l_lib.bf.size,
        caps.max_send_sge,
        caps.max_inline_data,
        ahs.len()
    );

    let (sq_state, _, cq) = direct_state(&l_ours, &c_ours, q_ours.qpn, false);
    let caps_ud = sq_caps(
        &caps,
        c_ours.cqe_cnt,
        zverbs_core::Transport::Ud { mtu: 4096 },
    );
    // SAFETY: libmlx5 allocated the ring for this UD QP, which lives as long as the process;
    // nothing else posts to it.
    let sq = unsafe { SendQueue::new_ud(&l_ours, caps_ud, sq_state, None) }.unwrap();

    let mut p = Pair::new(&ctx, mr.lkey, &qps, sq, cq);
    let ud = Ud { ahs: &ahs };
    let (mut imm_n, mut inline_n, mut grh_cases, mut compared_wc) = (0u64, 0u64, 0u64, 0u64);
    let mut next_id = 1u64;
    while p.cmp.done < cases {
        let n = 1 + rng.below(3) as usize;
        let mut batch: Vec<UdReq> = (0..n)
            .map(|_| {
                let r = UdReq::random(&mut rng, base, next_id, &caps, ahs.len());
                next_id += 1;
                r
            })
            .collect();
        if let Some(r) = batch.last_mut() {
            r.signaled = true;
        }
        p.post(&ud, &batch);
        for r in &batch {
            imm_n += u64::from(r.imm.is_some());
            inline_n += u64::from(r.inline);
            grh_cases += u64::from(r.ah % 2 == 1);
        }

        // The signaled requests complete on both (datagrams to nobody are sent and dropped).
        let expect = batch.iter().filter(|r| r.signaled).count();
        let (got_lib, got_ours) = p.poll(expect, &batch);
        assert!(got_lib.iter().all(|l| l.status == 0), "{got_lib:?}");
        compared_wc += assert_same_completions(&got_lib, &got_ours, (q_lib.qpn, q_ours.qpn));
    }
    p.cmp.assert_every_wrap_position(l_lib.sq.wqe_cnt);
    println!(
        "{mode}: differential UD: {} randomized cases (SEND {}, SEND_IMM {imm_n}; \
         {inline_n} inline; {grh_cases} through an AH with a GRH; WQEs of {:?} blocks; \
         {} wrapping the ring end, at all {} wrap positions): WQE bytes equal; \
         {compared_wc} completions decoded alike",
        p.cmp.done,
        p.cmp.done - imm_n,
        p.cmp.sizes,
        p.cmp.wrapped,
        p.cmp.wrap_positions.len()
    );
}

/// UD SEND and SEND with immediate through the run's address handles: `wr.ud` naming the
/// verbs AH for libmlx5, a `UdDest` of the same AH's address vector for ours.
struct Ud<'a> {
    ahs: &'a [Ah],
}

impl Kind for Ud<'_> {
    type T = Datagram;
    type Req = UdReq;
    const WQE: &'static str = "UD WQE";

    fn parts(r: &UdReq) -> (u64, &[(u64, u32)]) {
        (r.wr_id, &r.sgl)
    }

    fn flags(r: &UdReq) -> SendFlags {
        flags(r.signaled, r.inline, false, r.solicited)
    }

    fn lib_wr(&self, r: &UdReq, _: usize) -> ibv_send_wr {
        let mut w = ibv_send_wr {
            wr_id: r.wr_id,
            opcode: if r.imm.is_some() {
                IBV_WR_SEND_WITH_IMM
            } else {
                IBV_WR_SEND
            },
            imm_data: r.imm.unwrap_or(0).to_be(),
            ..ibv_send_wr::ZERO
        };
        w.wr.ud = ibv_send_wr_ud {
            ah: self.ahs[r.ah].raw.as_ptr().cast(),
            remote_qpn: r.remote_qpn,
            remote_qkey: r.qkey,
        };
        w
    }

    fn with_wr(&self, r: &UdReq, _: usize, sgl: &[Sge], post: &mut dyn FnMut(SendWr<'_>)) {
        let ah = &self.ahs[r.ah];
        let dest = UdDest::new(ah.av, ah.raw.as_ptr() as usize, r.remote_qpn, r.qkey);
        post(match r.imm {
            Some(imm) => SendWr::send_to_imm(r.wr_id, sgl, &dest, imm),
            None => SendWr::send_to(r.wr_id, sgl, &dest),
        });
    }

    /// The control segment, then the 48-byte datagram segment, then the data.
    fn mask(w: &mut [u8], _: &UdReq) {
        mask_inline_pad(w, 64);
    }

    fn create(ctx: &Context, cq: Cq, ask: ibv_qp_cap) -> Qp {
        ctx.create_ud_qp(cq, ask, None).unwrap()
    }

    fn ready(ctx: &Context, qp: Qp) {
        ctx.ready_ud(qp, 0x1111_1111).unwrap();
    }
}

#[test]
fn srq_receives_match_libmlx5() {
    if in_emulator("srq_receives_match_libmlx5", &[], Duration::from_secs(240)) {
        run_srq();
    }
}

fn run_srq() {
    // The number of receives is each shape's ring: no case count.
    let Start {
        mut rng,
        ctx,
        base,
        mr,
        ..
    } = start(0x5a5a_0000_5a5a, 0, false);
    let mut posts = 0u64;
    let mut shapes = Vec::new();
    for &(max_wr, max_sge) in &[
        (1, 1),
        (7, 1),
        (15, 2),
        (31, 3),
        (63, 4),
        (100, 7),
        (255, 16),
    ] {
        let s_lib = ctx.create_srq(max_wr, max_sge).unwrap();
        let s_ours = ctx.create_srq(max_wr, max_sge).unwrap();
        assert_eq!(s_lib.attr, s_ours.attr, "the same kind of SRQ");
        let l_lib = ctx.srq_layout(s_lib).unwrap();
        let l_ours = ctx.srq_layout(s_ours).unwrap();
        assert_eq!(
            (l_lib.stride, l_lib.wqe_cnt, l_lib.head, l_lib.tail),
            (l_ours.stride, l_ours.wqe_cnt, l_ours.head, l_ours.tail)
        );
        let ring_len = (l_lib.stride * l_lib.wqe_cnt) as usize;
        let ring = |l: &zverbs_mlx5dv::SrqLayout| {
            // SAFETY: libmlx5's ring of `wqe_cnt × stride` bytes, live for the process.
            unsafe { core::slice::from_raw_parts(l.buf.as_ptr(), ring_len) }.to_vec()
        };
        // SAFETY: the SRQ's doorbell record, written by the posters.
        let dbrec = |l: &zverbs_mlx5dv::SrqLayout| unsafe { l.dbrec.as_ptr().read_volatile() };
        assert_eq!(ring(&l_lib), ring(&l_ours), "fresh rings equal");
        let slots: Vec<_> = (0..l_ours.wqe_cnt).map(|_| SrqSlot::new()).collect();
        // SAFETY: a new SRQ described by what mlx5dv_init_obj reported; nothing else posts to
        // it; no QP uses it, so no CQ frees its WQEs.
        let state = unsafe { SrqState::new(&l_ours, &slots[..]) }.unwrap();
        // SAFETY: as above.
        let mut srq = unsafe { SharedRecvQueue::new(&l_ours, &state) }.unwrap();
        let max_sge = s_lib.attr.max_sge;
        shapes.push((s_lib.attr.max_wr, max_sge, l_lib.stride, l_lib.wqe_cnt));
        // libmlx5 keeps one WQE back (head == tail is full): wqe_cnt - 1 receives fit.
        for k in 0..l_lib.wqe_cnt {
            let n = 1 + rng.below(u64::from(max_sge)) as usize;
            let sgl: Vec<(u64, u32)> = (0..n)
                .map(|_| {
                    (
                        base + RECV + rng.below(256 << 10),
                        // Not empty: libmlx5 writes an empty entry (2 GiB to the device),
                        // the direct path skips it (a difference `crosscheck` documents).
                        1 + rng.below(8192) as u32,
                    )
                })
                .collect();
            let wr_id = rng.next_u64();
            let mut sges: Vec<ibv_sge> = sgl
                .iter()
                .map(|&(addr, length)| ibv_sge {
                    addr,
                    length,
                    lkey: mr.lkey,
                })
                .collect();
            let mut w = ibv_recv_wr {
                wr_id,
                next: core::ptr::null_mut(),
                sg_list: sges.as_mut_ptr(),
                num_sge: n as i32,
            };
            // SAFETY: a receive into the registered arena.
            let r_lib = unsafe { ctx.post_srq_recv(s_lib, &mut w) };
            let ours: Vec<Sge> = sgl.iter().map(|&(a, l)| Sge::new(a, l, mr.lkey)).collect();
            // SAFETY: as above.
            let r_ours = unsafe { srq.post(&RecvWr::new(wr_id, &ours)) };
            if k + 1 < l_lib.wqe_cnt {
                assert_eq!(r_lib, 0, "ibv_post_srq_recv {k}");
                r_ours.unwrap_or_else(|e| panic!("our post {k}: {e:?}"));
            } else {
                // The ring is full on both sides.
                assert_ne!(r_lib, 0, "libmlx5 takes no more than wqe_cnt - 1");
                assert!(r_ours.is_err(), "nor do we");
            }
            assert_eq!(
                ring(&l_lib),
                ring(&l_ours),
                "SRQ ring bytes differ after post {k} ({sgl:?}) of shape {:?}",
                shapes.last()
            );
            assert_eq!(
                dbrec(&l_lib),
                dbrec(&l_ours),
                "doorbell record after post {k}"
            );
            posts += 1;
        }
    }
    println!(
        "differential SRQ: {posts} receives posted by ibv_post_srq_recv and by our \
         SharedRecvQueue to SRQs of (max_wr, max_sge, stride, WQEs) {shapes:?}, each to a full \
         ring and one more refused by both: ring bytes and doorbell records equal after each"
    );
}

#[test]
fn prepared_wqes_and_blueflame_match_libmlx5_blueflame() {
    in_mode(
        "prepared_wqes_and_blueflame_match_libmlx5_blueflame",
        "BlueFlame",
        run_prepared,
    );
}

#[test]
fn prepared_wqes_and_blueflame_match_libmlx5_doorbell_only() {
    in_mode(
        "prepared_wqes_and_blueflame_match_libmlx5_doorbell_only",
        "doorbell-only",
        run_prepared,
    );
}

/// The words a doorbell write put into a QP's BlueFlame register: the whole buffer `buf`
/// (of `size` bytes) with BlueFlame, the 8-byte doorbell without.
fn bf_buffer(l: &QpLayout, buf: u32) -> Vec<u8> {
    let (size, words) = if l.bf.size == 0 {
        (0, 1)
    } else {
        (l.bf.size, l.bf.size as usize / 8)
    };
    let base = l.bf.reg.as_ptr().cast::<u64>();
    (0..words)
        .flat_map(|w| {
            // SAFETY: the register is mapped for the QP's life (ordinary shared memory in the
            // emulator, unless it watches BlueFlame writes, which this run does not ask for);
            // a volatile read of a word the driver or the queue wrote.
            let v = unsafe { base.add((buf * size / 8) as usize + w).read_volatile() };
            v.to_ne_bytes()
        })
        .collect()
}

/// Prepared posts (`SendQueue::prepare_rdma` / `prepare_send`, then `post_prepared` with each
/// request's changing fields) against `ibv_post_send` of the same request, one request per
/// post: WRITE, WRITE_IMM, READ, SEND, SEND_IMM of one entry (0 to `MAX_SGE_LEN` bytes),
/// signaled or not, fenced or solicited now and then, each prepared from a template whose
/// changing fields differ from the post's. The WQE bytes in the rings are compared as in
/// [`run`], and so is what each side wrote into its BlueFlame register: the WQE's `ds`
/// segments of the buffer (the device reads no more; past them libmlx5 copies the ring's
/// bytes, a prepared post writes zeros), or the 8-byte doorbell without BlueFlame. Every
/// completion is compared too.
#[allow(clippy::too_many_lines)]
fn run_prepared(mode: &str) {
    let Start {
        mut rng,
        cases,
        ctx,
        base,
        mr,
    } = start(0x9e37, 3000, true);
    let cases = cases / 3;
    let ask = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qps = Qps::new::<Rc>(&ctx, ask);
    let Qps {
        q_lib,
        q_ours,
        l_lib,
        l_ours,
        ..
    } = qps;
    assert_eq!(l_lib.bf.size, l_ours.bf.size);
    if mode == "doorbell-only" {
        // The QPs may share the doorbell register: each side's doorbell is read right after
        // its post.
        assert_eq!(l_lib.bf.size, 0);
    } else {
        assert!(l_lib.bf.size >= 64);
        assert_ne!(l_lib.bf.reg, l_ours.bf.reg, "a BlueFlame register each");
    }
    let (sq, rq, cq) = direct_rc(&qps);
    let mut recvs = Recvs::new(&ctx, q_lib, rq, base, mr.lkey);
    recvs.post(l_ours.rq.wqe_cnt as usize);
    let mut p = Pair::new(&ctx, mr.lkey, &qps, sq, cq);
    let rc = Rc {
        rkey: mr.rkey,
        last: false,
    };
    let ops = [
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
    ];
    let mut count = [0u64; 5];
    let (mut rings, mut zero_len, mut bf_compared) = (0u32, 0u64, 0u64);
    for id in 1..=cases {
        let which = rng.below(5) as usize;
        let op = ops[which];
        let len = if rng.chance(6) {
            0
        } else {
            1 + rng.below(MAX_SGE_LEN) as u32
        };
        let (src, raddr) = if op == IBV_WR_RDMA_READ {
            (READ_DST, READ_SRC)
        } else {
            (SRC, WRITE_DST)
        };
        let off = rng.below(4096);
        let r = Req {
            wr_id: id,
            op,
            sgl: vec![(base + src + off, len)],
            inline: false,
            // Every fourth at least: the unsignaled ones before it retire with it, so the
            // 16-block ring never fills.
            signaled: id % 4 == 0 || rng.chance(50),
            fence: rng.chance(10),
            solicited: rng.chance(10),
            imm: rng.next_u64() as u32,
            raddr: base + raddr + rng.below(4096),
            compare: 0,
            swap_add: 0,
            target: 0,
            ah: 0,
        };
        count[which] += 1;
        zero_len += u64::from(len == 0);

        // libmlx5.
        let pi = sq_pi(&l_lib);
        let mut sge = ibv_sge {
            addr: r.sgl[0].0,
            length: len,
            lkey: mr.lkey,
        };
        let mut wr = ibv_send_wr {
            num_sge: 1,
            send_flags: r.flags().bits(),
            sg_list: &mut sge,
            ..rc.lib_wr(&r, 0)
        };
        // SAFETY: the request, its entry and the memory it names live across the call.
        assert_eq!(unsafe { ctx.post_send(q_lib, &mut wr) }, 0, "ibv_post_send");
        // The BlueFlame buffer it wrote (each side toggles once per post), or the doorbell.
        let buf = rings % 2;
        rings += 1;
        let mut fa = bf_buffer(&l_lib, buf);

        // Prepared, from a template whose changing fields are not the post's.
        assert_eq!(p.sq.producer() & 0xffff, pi, "both rings in step");
        let tsgl = [Sge::new(!r.sgl[0].0, len ^ 7, mr.lkey)];
        let template = Req {
            wr_id: !r.wr_id,
            raddr: !r.raddr,
            imm: !r.imm,
            ..r.clone()
        };
        let c = zverbs_mlx5dv::Changes {
            wr_id: r.wr_id,
            addr: r.sgl[0].0,
            len,
            remote_addr: r.raddr,
            imm: r.imm,
        };
        rc.with_wr(&template, 0, &tsgl, &mut |w| {
            let w = w.with_flags(r.flags());
            let sq = &mut p.sq;
            let posted = if matches!(op, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) {
                let prep = sq.prepare_send(&w).unwrap();
                // SAFETY: the entry lies in the registered arena, which outlives the request.
                unsafe { sq.post_prepared(&prep, c) }
            } else {
                let prep = sq.prepare_rdma(&w).unwrap();
                // SAFETY: as above.
                unsafe { sq.post_prepared(&prep, c) }
            };
            posted.unwrap_or_else(|e| panic!("prepared post {r:?}: {e:?}"));
        });
        assert_eq!(sq_pi(&l_ours), sq_pi(&l_lib), "same blocks published");

        // The WQEs, as `Pair::post` compares them (no inline data, no atomics: nothing is
        // masked but the QPN).
        p.cmp.wqe(
            (&l_lib, q_lib.qpn),
            (&l_ours, q_ours.qpn),
            pi,
            "prepared WQE",
            &r,
            |_| {},
        );
        let ds = wqe_bytes(&l_lib, pi).len();

        // The BlueFlame buffers, as compared with the WQEs.
        let mut fb = bf_buffer(&l_ours, buf);
        // Mask: libmlx5 rings the 8-byte doorbell for a WQE of one segment (a zero-length
        // SEND: `size > 1` in its BlueFlame condition), which the direct path copies whole;
        // either way the device gets the first 8 bytes and reads the segment from the ring.
        let n = if l_lib.bf.size == 0 || ds == 16 {
            8
        } else {
            ds
        };
        fa.truncate(n);
        fb.truncate(n);
        mask_qpn(&mut fa, q_lib.qpn, ds as u32 / 16);
        mask_qpn(&mut fb, q_ours.qpn, ds as u32 / 16);
        assert_eq!(
            fa, fb,
            "BlueFlame bytes differ for {r:?}\nlibmlx5 {fa:02x?}\nours    {fb:02x?}"
        );
        bf_compared += 1;

        // Completions: the signaled request, and the receive a SEND or WRITE_IMM consumes.
        let expect = usize::from(r.signaled) + usize::from(r.consumes_recv());
        let (got_lib, got_ours) = p.poll(expect, &r);
        assert!(got_lib.iter().all(|l| l.status == 0), "{r:?}: {got_lib:?}");
        assert_same_completions(&got_lib, &got_ours, (q_lib.qpn, q_ours.qpn));
        recvs.post(usize::from(r.consumes_recv()));
    }
    println!(
        "{mode}: prepared differential: {cases} cases (WRITE {}, WRITE_IMM {}, READ {}, SEND {}, \
         SEND_IMM {}; {zero_len} of length 0): WQE bytes equal; {bf_compared} {} equal",
        count[0],
        count[1],
        count[2],
        count[3],
        count[4],
        if l_lib.bf.size == 0 {
            "doorbells"
        } else {
            "BlueFlame copies"
        }
    );
}
