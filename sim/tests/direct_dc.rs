//! The dynamically connected transport end to end through the direct backend on the software
//! device: a DC initiator's WQEs built by `zverbs_mlx5dv::SendQueue<_, Dci>`, each naming its DC
//! target; targets receiving from a shared receive queue; every operation to several targets
//! from one initiator; a wrong access key and an unknown target failing as a ConnectX reports
//! them (transport retry counter exceeded); a remote access error that fails the initiator and
//! leaves the target serving; the flush of every outstanding request; reset and reuse.

mod common;

use common::Arena;
use common::direct::{Cq, DirectSrq, device_with_arena, drain, qp_with_cq, send_only};
use zverbs_core::{
    Completion, DcDest, PostRecv, RecvWr, RemoteBuf, SendWr, Sge, WcOpcode, WcStatus,
};
use zverbs_mlx5dv::{CompletionQueue, CqBinding, SendQueue, SharedRecvQueue, SqRef, SrqRef};
use zverbs_sim::{
    AhAttr, CqConfig, DctConfig, Device, Mr, QpConfig, QpStatus, QpType, SimDct, SimQp, SrqConfig,
};

const KEY: u64 = 0x0dc0_ffee_1234_5678;

/// A DC initiator driven by the library, with its own CQ.
struct Dci {
    qp: SimQp,
    sq: SendQueue<SqRef<'static>, zverbs_mlx5dv::Dci>,
    cq: Cq,
}

/// `targets` DC targets sharing one SRQ and one receive CQ, `dcis` initiators, one arena.
struct World {
    dev: &'static Device,
    mem: &'static Arena,
    mr: Mr,
    srq: SharedRecvQueue<SrqRef<'static>>,
    dcts: Vec<SimDct>,
    rcq: Cq,
    rcqn: u32,
    srqn: u32,
    dcis: Vec<Dci>,
}

fn world(targets: usize, dcis: usize) -> World {
    let (dev, mem, mr) = device_with_arena(1 << 16);
    let s = DirectSrq::new(
        dev,
        SrqConfig {
            max_wr: 16,
            max_sge: 1,
        },
    );
    let rcq_sim = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let mut dcts = Vec::new();
    let mut bind = Vec::new();
    for i in 0..targets {
        let t = dev
            .create_dct(DctConfig {
                cq: rcq_sim.cqn,
                srq: s.sim.srqn,
                access_key: KEY + i as u64,
            })
            .unwrap();
        dev.ready_dct(t.dctn).unwrap();
        bind.push(CqBinding::with_srq(t.dctn, None, s.state));
        dcts.push(t);
    }
    let bind: &'static [_] = bind.leak();
    // SAFETY: the device outlives the poller, which alone polls the receive CQ.
    let rcq = unsafe { CompletionQueue::new(&rcq_sim.layout, bind) }.unwrap();
    let dcis = (0..dcis).map(|_| dci(dev)).collect();
    World {
        dev,
        mem,
        mr,
        srq: s.queue,
        dcts,
        rcq,
        rcqn: rcq_sim.cqn,
        srqn: s.sim.srqn,
        dcis,
    }
}

fn dci(dev: &'static Device) -> Dci {
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 0,
        ..QpConfig::default()
    };
    let (qp, cq) = qp_with_cq(dev, QpType::Dci, cfg);
    dev.ready_dci(qp.qpn).unwrap();
    let (sqs, cq) = send_only(&qp, &cq.layout);
    // SAFETY: the device outlives the queue, which alone drives its ring.
    let sq = unsafe { SendQueue::new_dc(&qp.layout, qp.caps(), sqs, None) }.unwrap();
    Dci { qp, sq, cq }
}

impl World {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge::new(self.mem.addr(off), len, self.mr.lkey)
    }

    fn remote(&self, off: usize) -> RemoteBuf {
        RemoteBuf::new(self.mem.addr(off), self.mr.rkey)
    }

    /// The address of target `t` with key `key`.
    fn dest_with(&self, t: usize, dctn: u32, key: u64) -> DcDest {
        let _ = t;
        let av = self
            .dev
            .create_ah(&AhAttr {
                dlid: self.dev.lid(),
                ..AhAttr::default()
            })
            .unwrap()
            .av;
        DcDest::new(av, dctn, key)
    }

    fn dest(&self, t: usize) -> DcDest {
        self.dest_with(t, self.dcts[t].dctn, self.dcts[t].access_key)
    }

    fn post_recv(&mut self, wr_id: u64, off: usize, len: u32) {
        let sgl = [self.sge(off, len)];
        // SAFETY: the entry lies in the registered arena.
        unsafe { self.srq.post(&RecvWr::new(wr_id, &sgl)) }.unwrap();
    }

    fn post(&mut self, i: usize, dest: &DcDest, wr: &SendWr<'_>) {
        // SAFETY: the entries lie in the registered arena (or are inline and readable).
        unsafe { self.dcis[i].sq.post_to(dest, wr) }.unwrap();
    }
}

#[test]
fn one_initiator_runs_every_operation_against_three_targets() {
    let mut w = world(3, 1);
    for t in 0..3 {
        // Per target: its window at 4096 × (t + 1); the initiator's buffers at 32768 + 1024 t.
        let (win, buf) = (4096 * (t + 1), 32768 + 1024 * t);
        let dest = w.dest(t);
        let data: Vec<u8> = (0..64).map(|i| (i * 3 + t) as u8).collect();
        w.mem.write(buf, &data);
        w.mem.write(win + 512, &[0x5a ^ t as u8; 32]);
        w.mem.write(win + 768, &100u64.to_ne_bytes());
        for k in 0..3 {
            w.post_recv(
                0x100 * (t as u64 + 1) + k,
                16384 + 256 * (3 * t + k as usize),
                128,
            );
        }
        let tag = 0x10 * (t as u64 + 1);
        let (s64, s16, s40, s8) = (
            [w.sge(buf, 64)],
            [w.sge(buf, 16)],
            [w.sge(buf, 40)],
            [w.sge(buf, 8)],
        );
        let into = [w.sge(buf + 256, 32)];
        let wrs = [
            SendWr::write(tag, &s64, w.remote(win)).signaled(),
            SendWr::write_imm(tag + 1, &s16, w.remote(win + 128), 0xabc0 + t as u32).signaled(),
            SendWr::send(tag + 2, &s40).signaled(),
            SendWr::send_imm(tag + 3, &s8, 0xdef0 + t as u32).signaled(),
            SendWr::read(tag + 4, &into, w.remote(win + 512)).signaled(),
            SendWr::fetch_add(tag + 5, w.sge(buf + 512, 8), w.remote(win + 768), 5).signaled(),
            SendWr::compare_swap(tag + 6, w.sge(buf + 520, 8), w.remote(win + 768), 105, 7)
                .signaled(),
        ];
        for wr in &wrs {
            w.post(0, &dest, wr);
        }
    }
    w.dev.run_until_idle();
    let tx = drain(&mut w.dcis[0].cq);
    let qpn = w.dcis[0].qp.qpn;
    assert_eq!(tx.len(), 21, "{tx:?}");
    let ops = [
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaWrite,
        WcOpcode::Send,
        WcOpcode::Send,
        WcOpcode::RdmaRead,
        WcOpcode::FetchAdd,
        WcOpcode::CompSwap,
    ];
    for (i, c) in tx.iter().enumerate() {
        let (t, k) = (i / 7, i % 7);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.qp_num),
            (
                0x10 * (t as u64 + 1) + k as u64,
                WcStatus::Success,
                ops[k],
                qpn
            ),
            "{c:?}"
        );
    }
    for t in 0..3 {
        let (win, buf) = (4096 * (t + 1), 32768 + 1024 * t);
        let data: Vec<u8> = (0..64).map(|i| (i * 3 + t) as u8).collect();
        assert_eq!(w.mem.read(win, 64), data, "WRITE to target {t}");
        assert_eq!(
            w.mem.read(win + 128, 16),
            data[..16],
            "WRITE_IMM to target {t}"
        );
        assert_eq!(w.mem.read(buf + 256, 32), vec![0x5a ^ t as u8; 32], "READ");
        assert_eq!(w.mem.read_u64_in(buf + 512, false), 100, "FAA's original");
        assert_eq!(w.mem.read_u64_in(buf + 520, false), 105, "CAS's original");
        assert_eq!(w.mem.read_u64_in(win + 768, false), 7, "CAS swapped");
        let recv0 = 16384 + 256 * (3 * t);
        assert_eq!(
            w.mem.read(recv0 + 256, 40),
            data[..40],
            "SEND into target {t}'s receive"
        );
        assert_eq!(w.mem.read(recv0 + 512, 8), data[..8], "SEND_IMM");
    }
    // The receive side: each target's three receives, completed on the shared CQ naming the
    // target, in order.
    let rx = drain(&mut w.rcq);
    let got: Vec<_> = rx
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode, c.qp_num, c.byte_len, c.imm))
        .collect();
    let mut want = Vec::new();
    for t in 0..3u32 {
        let (dctn, base) = (w.dcts[t as usize].dctn, 0x100 * (u64::from(t) + 1));
        want.push((
            base,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            dctn,
            16,
            0xabc0 + t,
        ));
        want.push((base + 1, WcStatus::Success, WcOpcode::Recv, dctn, 40, 0));
        want.push((
            base + 2,
            WcStatus::Success,
            WcOpcode::Recv,
            dctn,
            8,
            0xdef0 + t,
        ));
    }
    assert_eq!(got, want);
    assert_eq!(w.dev.qp_status(w.dcis[0].qp.qpn).unwrap(), QpStatus::Rts);
}

/// Posts a signaled WRITE to `dest` and two more behind it; runs the device; returns the
/// initiator's completions.
fn fail_then_flush(w: &mut World, dest: &DcDest) -> Vec<Completion> {
    let good = w.dest(0);
    let sgl = [w.sge(32768, 8)];
    let r = w.remote(4096);
    w.post(0, dest, &SendWr::write(1, &sgl, r).signaled());
    w.post(0, &good, &SendWr::write(2, &sgl, r));
    w.post(0, &good, &SendWr::read(3, &sgl, r).signaled());
    w.dev.run_until_idle();
    drain(&mut w.dcis[0].cq)
}

fn statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
}

#[test]
fn a_wrong_access_key_exhausts_the_initiators_retries() {
    let mut w = world(2, 1);
    let bad = w.dest_with(0, w.dcts[0].dctn, w.dcts[1].access_key);
    w.mem.write(4096, &[0xee; 8]);
    let c = fail_then_flush(&mut w, &bad);
    // The failed request, then every request behind it flushed, each once (unsignaled too).
    assert_eq!(
        statuses(&c),
        [
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(
        c[0].vendor_err, 0x81,
        "the vendor syndrome a ConnectX reports"
    );
    assert_eq!(
        w.mem.read(4096, 8),
        vec![0xee; 8],
        "nothing written at the target"
    );
    let st = w.dev.stats();
    assert_eq!((st.dc_key_violations, st.dc_no_target), (1, 0));
    assert_eq!(w.dev.qp_status(w.dcis[0].qp.qpn).unwrap(), QpStatus::Error);
    // The target serves others as before.
    assert_eq!(w.dev.qp_status(w.dcts[0].dctn).unwrap(), QpStatus::Rts);
}

#[test]
fn an_unknown_target_exhausts_the_initiators_retries() {
    // An unknown number, a QP that is no target (another initiator), a target not ready.
    for case in 0..3 {
        let mut w = world(1, 2);
        let dctn = match case {
            0 => 0x00ab_cdef,
            1 => w.dcis[1].qp.qpn,
            _ => {
                w.dev
                    .create_dct(DctConfig {
                        cq: w.rcqn,
                        srq: w.srqn,
                        access_key: KEY,
                    })
                    .unwrap()
                    .dctn
            }
        };
        let bad = w.dest_with(0, dctn, KEY);
        let c = fail_then_flush(&mut w, &bad);
        assert_eq!(
            statuses(&c),
            [
                (1, WcStatus::RetryExcErr),
                (2, WcStatus::WrFlushErr),
                (3, WcStatus::WrFlushErr)
            ],
            "case {case}"
        );
        let st = w.dev.stats();
        assert_eq!(
            (st.dc_no_target, st.dc_key_violations),
            (1, 0),
            "case {case}"
        );
    }
}

#[test]
fn a_remote_access_error_fails_the_initiator_and_the_target_serves_on() {
    let mut w = world(1, 2);
    let dest = w.dest(0);
    let sgl = [w.sge(32768, 8)];
    let bad = RemoteBuf::new(w.mem.addr(4096), w.mr.rkey ^ 0x100);
    let c = fail_then_flush(&mut w, &dest);
    assert_eq!(statuses(&c)[0], (1, WcStatus::Success));
    w.post(0, &dest, &SendWr::write(4, &sgl, bad).signaled());
    w.post(0, &dest, &SendWr::write(5, &sgl, w.remote(4096)).signaled());
    w.dev.run_until_idle();
    assert_eq!(
        statuses(&drain(&mut w.dcis[0].cq)),
        [(4, WcStatus::RemAccessErr), (5, WcStatus::WrFlushErr)]
    );
    assert_eq!(w.dev.qp_status(w.dcts[0].dctn).unwrap(), QpStatus::Rts);
    // The second initiator reaches the same target.
    w.mem.write(32768, &[0x42; 8]);
    w.post(1, &dest, &SendWr::write(6, &sgl, w.remote(4200)).signaled());
    w.dev.run_until_idle();
    assert_eq!(
        statuses(&drain(&mut w.dcis[1].cq)),
        [(6, WcStatus::Success)]
    );
    assert_eq!(w.mem.read(4200, 8), vec![0x42; 8]);
}

#[test]
fn an_initiator_moved_to_error_flushes_every_outstanding_request_once() {
    let mut w = world(2, 1);
    let sgl = [w.sge(32768, 8)];
    let (d0, d1) = (w.dest(0), w.dest(1));
    w.dev.set_error(w.dcis[0].qp.qpn).unwrap();
    for i in 0..6u64 {
        let dest = if i % 2 == 0 { &d0 } else { &d1 };
        let wr = SendWr::write(i, &sgl, w.remote(4096));
        let wr = if i % 3 == 0 { wr } else { wr.signaled() };
        w.post(0, dest, &wr);
    }
    w.dev.run_until_idle();
    let c = drain(&mut w.dcis[0].cq);
    assert_eq!(
        statuses(&c),
        (0..6u64)
            .map(|i| (i, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    assert_eq!(w.dev.stats().flushed, 6);
}

#[test]
fn dc_control_refusals() {
    let w = world(1, 1);
    let (dci, dct) = (w.dcis[0].qp.qpn, w.dcts[0].dctn);
    // Each kind readies only itself, once; an RC QP has no DC readiness.
    assert!(w.dev.ready_dci(dci).is_err(), "already in RTS");
    assert!(w.dev.ready_dct(dct).is_err(), "already in RTR");
    assert!(w.dev.ready_dci(dct).is_err());
    assert!(w.dev.ready_dct(dci).is_err());
    assert!(w.dev.set_dct_key(dci, 1).is_err());
    // A DCI has no peer.
    assert!(w.dev.connect(dci, dct).is_err());
}

/// Steps both devices and carries their messages until nothing moves.
fn pump(a: &Device, la: u16, b: &Device, q: &common::Queue) {
    loop {
        let mut work = a.run_until_idle() + b.run_until_idle();
        for (lid, m) in q.take() {
            if lid == la {
                a.deliver(&m)
            } else {
                b.deliver(&m)
            }
            work += 1;
        }
        if work == 0 {
            return;
        }
    }
}

#[test]
fn an_initiator_reaches_a_target_in_another_process_through_the_wire() {
    const LID_A: u16 = 1;
    const LID_B: u16 = 2;
    let q = std::sync::Arc::new(common::Queue::default());
    let mut a = world(0, 1);
    let b = world(1, 0);
    a.dev.set_wire(q.clone(), LID_A);
    b.dev.set_wire(q.clone(), LID_B);
    let av = a
        .dev
        .create_ah(&AhAttr {
            dlid: LID_B,
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    let (dctn, key) = (b.dcts[0].dctn, b.dcts[0].access_key);
    let data: Vec<u8> = (0..48u8).map(|i| i ^ 0xa5).collect();
    a.mem.write(0, &data);
    let sgl = [a.sge(0, 48)];
    let to_b = RemoteBuf::new(b.mem.addr(8192), b.mr.rkey);
    a.post(
        0,
        &DcDest::new(av, dctn, key),
        &SendWr::write(1, &sgl, to_b).signaled(),
    );
    a.post(
        0,
        &DcDest::new(av, dctn, key),
        &SendWr::write(2, &sgl, RemoteBuf::new(b.mem.addr(8448), b.mr.rkey)).signaled(),
    );
    pump(a.dev, LID_A, b.dev, &q);
    let tx = drain(&mut a.dcis[0].cq);
    assert_eq!(
        tx.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)],
        "{tx:?}"
    );
    assert_eq!(b.mem.read(8192, 48), data);
    assert_eq!(b.mem.read(8448, 48), data);

    // Another key is dropped at the target: the initiator's retries run out.
    a.post(
        0,
        &DcDest::new(av, dctn, key ^ 1),
        &SendWr::write(3, &sgl, to_b).signaled(),
    );
    pump(a.dev, LID_A, b.dev, &q);
    let tx = drain(&mut a.dcis[0].cq);
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!((tx[0].wr_id, tx[0].status), (3, WcStatus::RetryExcErr));
    assert_eq!(b.dev.stats().dc_key_violations, 1);
}
