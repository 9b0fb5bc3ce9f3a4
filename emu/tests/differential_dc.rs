//! Differential check of the DC segment against rdma-core's own mlx5 provider, on the emulated
//! ConnectX.
//!
//! Two DC initiators of the same kind are created through libmlx5 (`mlx5dv_create_qp`, same
//! capabilities, each with its own CQ), and three DC targets on one SRQ, each with its own
//! access key, and four address handles to this port (two with a GRH of random GID, flow
//! label, hop limit and traffic class). For every randomized request — WRITE, WRITE_IMM, SEND,
//! SEND_IMM, READ, CS, FA; inline or 1..=max_send_sge entries; signaled or not; fenced or
//! solicited now and then; to any target through any handle; alone or in a batch of up to
//! three — the same request goes to one initiator through libmlx5's work-request builders
//! (`ibv_wr_start`, the opcode call, `mlx5dv_wr_set_dc_addr`, `ibv_wr_set_sge_list` or
//! `ibv_wr_set_inline_data_list`, `ibv_wr_complete`) and to the other through the direct path
//! (`zverbs_mlx5dv::DcSendQueue`, a `DcDest` of the same handle's address vector, number and
//! key), and the WQE bytes (control, datagram, remote address, atomic, data or inline
//! segments) are compared, at every position where a WQE meets the ring end. The software
//! device executes both; the signaled completions libmlx5's `ibv_poll_cq` decodes are compared
//! with our poller's, and the targets' receives are counted.
//!
//! Masks (as in `differential.rs`): the QPN in `qpn_ds`; the padding after inline data; the
//! `compare` field of a fetch-and-add; `byte_len` of SEND and WRITE completions; and, for the
//! builder API only, the control segment's immediate of an operation that carries none
//! (libmlx5's builder leaves the ring's old bytes there).
//!
//! Seed and size: `ZVERBS_EMU_DIFF_SEED`, `ZVERBS_EMU_DIFF_CASES` (default 2000). Run by `cargo
//! xtask test --only connectx`.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Rng, env_u64, in_emulator};
use zverbs_core::{Completion, DcDest, PollCq, RemoteBuf, SendFlags, SendWr, Sge};
use zverbs_emu::verbs::{Ah, Context, Cq, Mr, Qp};
use zverbs_ffi::types::{ibv_ah_attr, ibv_data_buf, ibv_qp_cap, ibv_recv_wr, ibv_sge, ibv_wc};
use zverbs_mlx5dv::{CompletionQueue, CqBinding, DcSendQueue, QpLayout, RqState, SqState};

const ARENA: usize = 1 << 20;
const SRC: u64 = 0;
const WRITE_DST: u64 = 64 << 10;
const READ_DST: u64 = 128 << 10;
const READ_SRC: u64 = 192 << 10;
const ATOMIC: u64 = 256 << 10;
const RECV: u64 = 512 << 10;
const RECV_SLOT: u64 = 4096;
const MAX_SGE_LEN: u64 = 256;
const TARGETS: usize = 3;
const KEY: u64 = 0x0dc0_0000_0000_0000;

/// The operations, as `ibv_wr_opcode` numbers them.
const OPS: [&str; 7] = ["WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", "CS", "FA"];

/// One randomized request, as both sides post it.
#[derive(Clone, Debug)]
struct Req {
    wr_id: u64,
    op: usize,
    sgl: Vec<(u64, u32)>,
    inline: bool,
    flags: SendFlags,
    imm: u32,
    raddr: u64,
    compare: u64,
    swap_add: u64,
    target: usize,
    ah: usize,
}

impl Req {
    fn random(rng: &mut Rng, base: u64, id: u64, caps: &ibv_qp_cap, ahs: usize) -> Self {
        let op = rng.below(7) as usize;
        let mut flags = SendFlags::NONE;
        if rng.chance(50) {
            flags |= SendFlags::SIGNALED;
        }
        if rng.chance(10) {
            flags |= SendFlags::FENCE;
        }
        let mut r = Req {
            wr_id: id,
            op,
            sgl: Vec::new(),
            inline: false,
            flags,
            imm: rng.next_u64() as u32,
            raddr: 0,
            compare: rng.next_u64(),
            swap_add: rng.next_u64(),
            target: rng.below(TARGETS as u64) as usize,
            ah: rng.below(ahs as u64) as usize,
        };
        match op {
            5 | 6 => {
                r.sgl.push((base + ATOMIC + 512 + 8 * rng.below(64), 8));
                r.raddr = base + ATOMIC + 8 * rng.below(64);
            }
            4 => {
                let n = 1 + rng.below(u64::from(caps.max_send_sge));
                let mut off = READ_DST;
                for _ in 0..n {
                    let len = 1 + rng.below(MAX_SGE_LEN) as u32;
                    r.sgl.push((base + off, len));
                    off += u64::from(len) + rng.below(64);
                }
                r.raddr = base + READ_SRC + rng.below(4096);
            }
            _ => {
                if matches!(op, 2 | 3) && rng.chance(20) {
                    r.flags |= SendFlags::SOLICITED;
                }
                if rng.chance(30) {
                    r.inline = true;
                    let len = 1 + rng.below(u64::from(caps.max_inline_data.min(128))) as u32;
                    r.sgl.push((base + SRC + rng.below(4096), len));
                } else {
                    let n = 1 + rng.below(u64::from(caps.max_send_sge));
                    for _ in 0..n {
                        let len = 1 + rng.below(MAX_SGE_LEN) as u32;
                        r.sgl.push((base + SRC + rng.below(32 << 10), len));
                    }
                }
                r.raddr = base + WRITE_DST + rng.below(32 << 10);
            }
        }
        r
    }

    /// Whether the request consumes a receive at its target.
    fn consumes_recv(&self) -> bool {
        matches!(self.op, 1..=3)
    }
}

/// The raw WQE bytes at block `pi` of a ring, with wrap, cut at `ds × 16`.
fn wqe_bytes(l: &QpLayout, pi: u32) -> Vec<u8> {
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

/// The producer counter libmlx5 published in the doorbell record.
fn sq_pi(l: &QpLayout) -> u32 {
    // SAFETY: the doorbell record of a live QP; word 1 is the send counter.
    u32::from_be(unsafe { l.dbrec.add(1).read_volatile() })
}

/// Masks the padding after inline data whose header is at byte `at` (libmlx5 leaves stale
/// ring bytes there; the direct path zeroes them; the device ignores them).
fn mask_inline_pad(w: &mut [u8], at: usize) {
    if w.len() < at + 4 || w[at] & 0x80 == 0 {
        return;
    }
    let len = u32::from_be_bytes(w[at..at + 4].try_into().unwrap()) & 0x7fff_ffff;
    let end = at + 4 + len as usize;
    for b in w.iter_mut().skip(end) {
        *b = 0;
    }
}

/// What the device ignores and libmlx5 does not write, in a DC WQE (control 16, datagram 48).
fn mask(w: &mut [u8], r: &Req) {
    // The control segment's immediate of an operation without one: libmlx5's builder writes
    // it only in the calls that carry one (WRITE_IMM, SEND_IMM) and leaves the ring's old
    // bytes otherwise; the direct path writes 0; the device reads it for those two only.
    if !matches!(r.op, 1 | 3) {
        w[12..16].fill(0);
    }
    match r.op {
        // FA's `compare`: the atomic segment follows control, datagram and remote address.
        6 if w.len() >= 96 => w[88..96].fill(0),
        0 | 1 => mask_inline_pad(w, 80),
        2 | 3 => mask_inline_pad(w, 64),
        _ => {}
    }
}

fn arena(ctx: &Context) -> (u64, Mr) {
    let arena: &'static mut [u8] = Box::leak(vec![0u8; ARENA + 4096].into_boxed_slice());
    let base = ((arena.as_mut_ptr() as usize + 4095) & !4095) as *mut u8;
    for i in 0..ARENA {
        // SAFETY: inside the leaked arena.
        unsafe { base.add(i).write((i as u8).wrapping_mul(13)) };
    }
    // SAFETY: the arena is leaked: valid for the process's life.
    let mr = unsafe { ctx.reg_mr(base, ARENA) }.unwrap();
    (base as u64, mr)
}

fn in_mode(name: &str, mode: &str) {
    let env: &[(&str, &str)] = if mode == "doorbell-only" {
        &[("ZVERBS_EMU_BF", "0"), ("MLX5_SHUT_UP_BF", "1")]
    } else {
        &[]
    };
    if in_emulator(name, env, Duration::from_secs(240)) {
        run(mode);
    }
}

#[test]
fn dc_wqes_match_libmlx5_blueflame() {
    in_mode("dc_wqes_match_libmlx5_blueflame", "BlueFlame");
}

#[test]
fn dc_wqes_match_libmlx5_doorbell_only() {
    in_mode("dc_wqes_match_libmlx5_doorbell_only", "doorbell-only");
}

/// Polls `cq_lib` (libmlx5) and `ours` until each gave `expect` completions (20 s at most).
fn poll_both(
    ctx: &Context,
    cq_lib: Cq,
    ours: &mut impl PollCq,
    expect: usize,
) -> (Vec<ibv_wc>, Vec<Completion>) {
    let (mut lib, mut our) = (Vec::new(), Vec::new());
    let mut wl = vec![ibv_wc::default(); 16];
    let mut wo = vec![Completion::EMPTY; 16];
    let t = Instant::now();
    while (lib.len() < expect || our.len() < expect) && t.elapsed() < Duration::from_secs(20) {
        let n = ctx.poll_cq(cq_lib, &mut wl);
        assert!(n >= 0, "ibv_poll_cq: {n}");
        lib.extend_from_slice(&wl[..n as usize]);
        let m = ours.poll(&mut wo);
        our.extend_from_slice(&wo[..m]);
        if n == 0 && m == 0 {
            std::thread::yield_now();
        }
    }
    (lib, our)
}

#[allow(clippy::too_many_lines)]
fn run(mode: &str) {
    let seed = env_u64("ZVERBS_EMU_DIFF_SEED", 0x5eed_d1ff);
    let cases = env_u64("ZVERBS_EMU_DIFF_CASES", 2000);
    let mut rng = Rng((seed ^ 0x00dc_00dc) | 1);
    let ctx = Context::open().unwrap();
    let (base, mr) = arena(&ctx);
    // A small ring (WQEs of 2 to 4 basic blocks), so that every size meets the ring end at
    // every position it can.
    let ask = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 0,
        max_send_sge: 8,
        max_recv_sge: 0,
        max_inline_data: 128,
    };
    let (cq_lib, cq_ours) = (ctx.create_cq(255).unwrap(), ctx.create_cq(255).unwrap());
    let q_lib = ctx.create_dc(cq_lib, ask, None, None).unwrap();
    let q_ours = ctx.create_dc(cq_ours, ask, None, None).unwrap();
    assert_eq!(q_lib.cap, q_ours.cap, "the same kind of QP");
    let q_lib = ctx.ready_dc(q_lib, false).unwrap();
    let q_ours = ctx.ready_dc(q_ours, false).unwrap();
    let (l_lib, _) = ctx.dv(q_lib, cq_lib).unwrap();
    let (l_ours, c_ours) = ctx.dv(q_ours, cq_ours).unwrap();
    assert_eq!(l_lib.sq.wqe_cnt, l_ours.sq.wqe_cnt);
    assert_eq!(mode == "doorbell-only", l_lib.bf.size == 0);
    let caps = q_lib.cap;

    // The targets, on one SRQ and one CQ; receives posted ahead for every SEND and WRITE
    // with immediate of both initiators.
    let srq = ctx.create_srq(1024, 1).unwrap();
    let dct_cq = ctx.create_cq(2047).unwrap();
    let targets: Vec<(Qp, u64)> = (0..TARGETS)
        .map(|i| {
            let key = KEY + i as u64 * 0x1111;
            let t = ctx.create_dc(dct_cq, ibv_qp_cap::default(), Some(key), Some(srq));
            (ctx.ready_dc(t.unwrap(), true).unwrap(), key)
        })
        .collect();
    let mut recv_id = 0u64;
    let mut post_recvs = |n: usize| {
        for _ in 0..n {
            let mut s = ibv_sge {
                addr: base + RECV + (recv_id % 64) * RECV_SLOT,
                length: RECV_SLOT as u32,
                lkey: mr.lkey,
            };
            let mut w = ibv_recv_wr {
                wr_id: recv_id,
                next: core::ptr::null_mut(),
                sg_list: &mut s,
                num_sge: 1,
            };
            // SAFETY: a receive into the registered arena.
            assert_eq!(unsafe { ctx.post_srq_recv(srq, &mut w) }, 0);
            recv_id += 1;
        }
    };
    post_recvs(512);
    let mut posted_recvs = 512usize;

    // Address handles to this port, every other one with a GRH.
    let ahs: Vec<Ah> = (0..4)
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
            }
            ctx.create_ah(a).unwrap()
        })
        .collect();
    println!(
        "{mode}: DCIs {:#x} (libmlx5) and {:#x} (direct path), SQ {} blocks, bf.size {}, \
         max_send_sge {}, max_inline_data {}; DCTs {:x?}",
        q_lib.qpn,
        q_ours.qpn,
        l_lib.sq.wqe_cnt,
        l_lib.bf.size,
        caps.max_send_sge,
        caps.max_inline_data,
        targets.iter().map(|t| t.0.qpn).collect::<Vec<_>>()
    );

    // The direct path's queue and poller.
    let slots: Vec<_> = (0..l_ours.sq.wqe_cnt)
        .map(|_| zverbs_mlx5dv::SqSlot::new())
        .collect();
    let sq_state = SqState::new(&slots[..]).unwrap();
    let bindings = [CqBinding::new(
        q_ours.qpn,
        Some(&sq_state),
        None::<&RqState<&[zverbs_mlx5dv::RqSlot]>>,
    )];
    let sq_caps = zverbs_mlx5dv::SqCaps {
        max_send_sge: caps.max_send_sge,
        max_inline_data: caps.max_inline_data,
        sig_all: false,
        max_signaled: c_ours.cqe_cnt,
        transport: zverbs_core::Transport::Rc,
    };
    // SAFETY: libmlx5 allocated the ring for this DCI and its CQ, which live as long as the
    // process; nothing else posts to this QP or polls this CQ.
    let (mut sq, mut cq) = unsafe {
        (
            DcSendQueue::new(&l_ours, sq_caps, &sq_state).unwrap(),
            CompletionQueue::new(&c_ours, &bindings[..]).unwrap(),
        )
    };
    let wr = ctx.dci_wr(q_lib).unwrap();
    let (qpx, dv) = (wr.qpx.as_ptr(), wr.dv.as_ptr());

    let cnt = l_lib.sq.wqe_cnt;
    let (mut done, mut wrapped, mut compared_wc, mut received) = (0u64, 0u64, 0u64, 0usize);
    let (mut ops, mut inline_n, mut grh_n) = ([0u64; 7], 0u64, 0u64);
    let mut sizes = BTreeSet::new();
    let mut wrap_positions = BTreeSet::new();
    let mut wc_dct = vec![ibv_wc::default(); 64];
    let mut next_id = 1u64;
    while done < cases {
        let n = 1 + rng.below(3) as usize;
        let mut batch: Vec<Req> = (0..n)
            .map(|_| {
                next_id += 1;
                Req::random(&mut rng, base, next_id, &caps, ahs.len())
            })
            .collect();
        // A signaled request ends every batch, so both queues retire it.
        if let Some(r) = batch.last_mut() {
            r.flags |= SendFlags::SIGNALED;
        }
        let consumers = batch.iter().filter(|r| r.consumes_recv()).count();
        if posted_recvs < 2 * consumers + 64 {
            post_recvs(512);
            posted_recvs += 512;
        }
        posted_recvs -= 2 * consumers;

        // libmlx5: one builder session for the batch.
        let pi = sq_pi(&l_lib);
        // SAFETY: a live DCI created with the builder API; every pointer named lives across
        // the session (the AHs, the arena, the data-buffer lists below).
        unsafe {
            ((*qpx).wr_start.unwrap())(qpx);
            for r in &batch {
                (*qpx).wr_id = r.wr_id;
                (*qpx).wr_flags = (r.flags - SendFlags::INLINE).bits();
                let (t, key) = targets[r.target];
                match r.op {
                    0 => ((*qpx).wr_rdma_write.unwrap())(qpx, mr.rkey, r.raddr),
                    1 => ((*qpx).wr_rdma_write_imm.unwrap())(qpx, mr.rkey, r.raddr, r.imm.to_be()),
                    2 => ((*qpx).wr_send.unwrap())(qpx),
                    3 => ((*qpx).wr_send_imm.unwrap())(qpx, r.imm.to_be()),
                    4 => ((*qpx).wr_rdma_read.unwrap())(qpx, mr.rkey, r.raddr),
                    5 => ((*qpx).wr_atomic_cmp_swp.unwrap())(
                        qpx, mr.rkey, r.raddr, r.compare, r.swap_add,
                    ),
                    _ => ((*qpx).wr_atomic_fetch_add.unwrap())(qpx, mr.rkey, r.raddr, r.swap_add),
                }
                ((*dv).wr_set_dc_addr.unwrap())(dv, ahs[r.ah].raw.as_ptr(), t.qpn, key);
                if r.inline {
                    let bufs: Vec<ibv_data_buf> = r
                        .sgl
                        .iter()
                        .map(|&(a, l)| ibv_data_buf {
                            addr: a as *mut _,
                            length: l as usize,
                        })
                        .collect();
                    ((*qpx).wr_set_inline_data_list.unwrap())(qpx, bufs.len(), bufs.as_ptr());
                } else {
                    let sges: Vec<ibv_sge> = r
                        .sgl
                        .iter()
                        .map(|&(addr, length)| ibv_sge {
                            addr,
                            length,
                            lkey: mr.lkey,
                        })
                        .collect();
                    ((*qpx).wr_set_sge_list.unwrap())(qpx, sges.len(), sges.as_ptr());
                }
            }
            assert_eq!(((*qpx).wr_complete.unwrap())(qpx), 0, "ibv_wr_complete");
        }

        // The direct path: the same requests, rung once.
        assert_eq!(sq.producer() & 0xffff, pi & 0xffff, "both rings in step");
        for r in &batch {
            let (t, key) = targets[r.target];
            let dest = DcDest::new(ahs[r.ah].av, t.qpn, key);
            let sgl: Vec<Sge> = r
                .sgl
                .iter()
                .map(|&(a, l)| Sge::new(a, l, mr.lkey))
                .collect();
            let remote = RemoteBuf::new(r.raddr, mr.rkey);
            let w = match r.op {
                0 => SendWr::write(r.wr_id, &sgl, remote),
                1 => SendWr::write_imm(r.wr_id, &sgl, remote, r.imm),
                2 => SendWr::send(r.wr_id, &sgl),
                3 => SendWr::send_imm(r.wr_id, &sgl, r.imm),
                4 => SendWr::read(r.wr_id, &sgl, remote),
                5 => SendWr::compare_swap(r.wr_id, sgl[0], remote, r.compare, r.swap_add),
                _ => SendWr::fetch_add(r.wr_id, sgl[0], remote, r.swap_add),
            };
            let w = w.with_flags(
                r.flags
                    | if r.inline {
                        SendFlags::INLINE
                    } else {
                        SendFlags::NONE
                    },
            );
            // SAFETY: the entries lie in the registered arena, which outlives the request.
            unsafe { sq.stage_to(&dest, &w) }.unwrap_or_else(|e| panic!("post {r:?}: {e:?}"));
        }
        sq.ring();
        assert_eq!(sq_pi(&l_ours), sq_pi(&l_lib), "same blocks published");

        let mut at = pi;
        for r in &batch {
            let mut a = wqe_bytes(&l_lib, at);
            let mut b = wqe_bytes(&l_ours, at);
            assert_eq!(
                a.len(),
                b.len(),
                "ds differs for {r:?}\nlibmlx5 {a:02x?}\nours {b:02x?}"
            );
            let ds = (a.len() / 16) as u32;
            assert_eq!(a[4..8], ((q_lib.qpn << 8) | ds).to_be_bytes());
            assert_eq!(b[4..8], ((q_ours.qpn << 8) | ds).to_be_bytes());
            a[4..8].fill(0);
            b[4..8].fill(0);
            mask(&mut a, r);
            mask(&mut b, r);
            assert_eq!(
                a, b,
                "DC WQE bytes differ at block {at} for {r:?}\nlibmlx5 {a:02x?}\nours    {b:02x?}"
            );
            let blocks = (ds as usize).div_ceil(4) as u32;
            let slot = at & (cnt - 1);
            sizes.insert(blocks);
            if slot + blocks > cnt {
                wrapped += 1;
                wrap_positions.insert((blocks, slot));
            }
            at = at.wrapping_add(blocks);
            done += 1;
            ops[r.op] += 1;
            inline_n += u64::from(r.inline);
            grh_n += u64::from(r.ah % 2 == 1);
        }

        let expect = batch
            .iter()
            .filter(|r| r.flags.contains(SendFlags::SIGNALED))
            .count();
        let (got_lib, got_ours) = poll_both(&ctx, cq_lib, &mut cq, expect);
        assert_eq!(got_lib.len(), expect, "libmlx5's completions for {batch:?}");
        assert_eq!(got_ours.len(), expect, "our completions for {batch:?}");
        for (l, o) in got_lib.iter().zip(&got_ours) {
            assert_eq!(l.wr_id, o.wr_id);
            assert_eq!(l.status, 0, "status of {:#x}: {l:?}", l.wr_id);
            assert_eq!(l.status, o.status.to_raw(), "status of {:#x}", l.wr_id);
            assert_eq!(l.opcode, o.opcode.to_raw(), "opcode of {:#x}", l.wr_id);
            if l.opcode >= 2 {
                assert_eq!(l.byte_len, o.byte_len, "byte_len of {:#x}", l.wr_id);
            }
            assert_eq!((l.qp_num, o.qp_num), (q_lib.qpn, q_ours.qpn));
            compared_wc += 1;
        }
        // The targets' receives: one per consumer on each side.
        let t = Instant::now();
        let mut got = 0;
        while got < 2 * consumers && t.elapsed() < Duration::from_secs(20) {
            let n = ctx.poll_cq(dct_cq, &mut wc_dct);
            assert!(n >= 0);
            for w in &wc_dct[..n as usize] {
                assert_eq!(w.status, 0, "a target's receive: {w:?}");
            }
            got += n as usize;
        }
        assert_eq!(got, 2 * consumers, "the targets' receives for {batch:?}");
        received += got;
    }
    let want: usize = sizes.iter().map(|&b| (b - 1) as usize).sum();
    assert_eq!(
        wrap_positions.len(),
        want,
        "every WQE size {sizes:?} at every position that meets the ring end ({cnt} blocks)"
    );
    println!(
        "{mode}: differential DC: {done} randomized cases ({}; {inline_n} inline; {grh_n} \
         through an AH with a GRH; to {TARGETS} targets; WQEs of {sizes:?} blocks; {wrapped} \
         wrapping the ring end, at all {} wrap positions): WQE bytes equal; {compared_wc} \
         completions decoded alike; {received} receives at the targets",
        OPS.iter()
            .zip(ops)
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        wrap_positions.len()
    );
}
