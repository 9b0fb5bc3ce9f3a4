//! The DC checks shared by the software device (`sim_dc.rs`) and the emulated ConnectX
//! (`emu_dc.rs`): each takes an open context of an mlx5 device driven directly.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use zverbs::dc::{DcAddr, DcPeer};
use zverbs::{
    AccessFlags, Completion, Context, Cq, Error, MrBuf, Pd, Poller, PostError, PostRecv, PostSend,
    Qp, QpState, QpType, RecvWr, Registered, SendQueue, SendWr, Srq, WcOpcode, WcStatus,
};

const KEY: u64 = 0x0dc0_ffee_0000_0001;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// Waits for `n` completions of `cq`.
fn wait(p: &mut Poller, n: usize) -> Vec<Completion> {
    p.wait(n, deadline()).expect("completions").to_vec()
}

/// DC targets on one SRQ and one CQ, initiators with a CQ each, one buffer.
pub struct Dc {
    pub pd: Pd,
    pub buf: MrBuf,
    pub srq: Srq,
    pub dct_cq: Cq,
    pub dcts: Vec<Qp>,
    /// Each target's address, through its bytes (as a peer receives it).
    pub addrs: Vec<DcAddr>,
    pub dcis: Vec<(Qp, Cq)>,
}

impl Dc {
    pub fn new(ctx: &Context, targets: usize, initiators: usize) -> Self {
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buf(1 << 16, AccessFlags::ALL).unwrap();
        let dct_cq = ctx.cq_builder().cqe(64).build().unwrap();
        let srq = pd.create_srq(32, 1).unwrap();
        let mut dcts = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..targets {
            let qp = pd
                .qp_builder(&dct_cq, &dct_cq)
                .srq(&srq)
                .dc_target(KEY + i as u64)
                .build()
                .unwrap();
            assert_eq!(qp.qp_type(), QpType::Dct);
            qp.ready_dc().unwrap();
            assert_eq!(qp.state(), QpState::Rtr, "a target stays in RTR");
            let bytes = qp.dc_addr().unwrap().to_bytes();
            let addr = DcAddr::from_bytes(&bytes).unwrap();
            assert_eq!((addr.dctn, addr.access_key), (qp.qpn(), KEY + i as u64));
            addrs.push(addr);
            dcts.push(qp);
        }
        let dcis = (0..initiators)
            .map(|_| {
                let cq = ctx.cq_builder().cqe(64).build().unwrap();
                let qp = pd.qp_builder(&cq, &cq).dc_initiator().build().unwrap();
                qp.ready_dc().unwrap();
                assert_eq!(qp.state(), QpState::Rts);
                (qp, cq)
            })
            .collect();
        Self {
            pd,
            buf,
            srq,
            dct_cq,
            dcts,
            addrs,
            dcis,
        }
    }

    pub fn peer(&self, t: usize) -> DcPeer {
        self.pd.dc_peer(&self.addrs[t]).unwrap()
    }
}

fn post(sq: &mut SendQueue, peer: &DcPeer, wr: &SendWr<'_>) {
    // SAFETY: every entry lies in the test's registered buffer, which outlives the requests.
    unsafe { sq.post_to(peer, wr) }.unwrap();
}

/// One initiator runs every operation against every target; the data, the initiator's
/// completions and the targets' receive completions are checked.
pub fn every_operation_to_every_target(ctx: &Context) {
    let dc = Dc::new(ctx, 3, 1);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let mut rx = dc.dct_cq.poller().unwrap();
    let mut srq = dc.srq.queue().unwrap();
    let b = &dc.buf;
    let peers: Vec<DcPeer> = (0..3).map(|t| dc.peer(t)).collect();
    for (t, peer) in peers.iter().enumerate() {
        let (win, src) = (4096 * (t + 1), 32768 + 1024 * t);
        let data: Vec<u8> = (0..64).map(|i| (i * 3 + t) as u8).collect();
        b.write(src, &data).unwrap();
        b.write(win + 512, &[0x5a ^ t as u8; 32]).unwrap();
        b.store_u64(win + 768, 100).unwrap();
        for k in 0..3 {
            let sgl = [b
                .sge(16384 + 256 * (3 * t + k)..16384 + 256 * (3 * t + k) + 128)
                .unwrap()];
            // SAFETY: in the registered buffer.
            unsafe {
                PostRecv::post(
                    &mut srq,
                    &RecvWr::new(0x100 * (t as u64 + 1) + k as u64, &sgl),
                )
            }
            .unwrap();
        }
        let tag = 0x10 * (t as u64 + 1);
        let (s64, s16, s40, s8) = (
            [b.sge(src..src + 64).unwrap()],
            [b.sge(src..src + 16).unwrap()],
            [b.sge(src..src + 40).unwrap()],
            [b.sge(src..src + 8).unwrap()],
        );
        let into = [b.sge(src + 256..src + 288).unwrap()];
        let imm = 0xabc0 + t as u32;
        let wrs = [
            SendWr::write(tag, &s64, b.remote(win).unwrap()).signaled(),
            SendWr::write_imm(tag + 1, &s16, b.remote(win + 128).unwrap(), imm).signaled(),
            SendWr::send(tag + 2, &s40).signaled(),
            SendWr::send_imm(tag + 3, &s8, imm + 0x100).signaled(),
            SendWr::read(tag + 4, &into, b.remote(win + 512).unwrap()).signaled(),
            SendWr::fetch_add(
                tag + 5,
                b.sge(src + 512..src + 520).unwrap(),
                b.remote(win + 768).unwrap(),
                5,
            )
            .signaled(),
            SendWr::compare_swap(
                tag + 6,
                b.sge(src + 520..src + 528).unwrap(),
                b.remote(win + 768).unwrap(),
                105,
                7,
            )
            .signaled(),
        ];
        for wr in &wrs {
            post(&mut sq, peer, wr);
        }
    }
    let done = wait(&mut tx, 21);
    let ops = [
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaWrite,
        WcOpcode::Send,
        WcOpcode::Send,
        WcOpcode::RdmaRead,
        WcOpcode::FetchAdd,
        WcOpcode::CompSwap,
    ];
    for (i, c) in done.iter().enumerate() {
        let (t, k) = (i / 7, i % 7);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.qp_num),
            (
                0x10 * (t as u64 + 1) + k as u64,
                WcStatus::Success,
                ops[k],
                dci.qpn()
            ),
            "{c:?}"
        );
    }
    let atomic_be = ctx.atomics_big_endian();
    let read_u64 = |off: usize| {
        let v = b.load_u64(off).unwrap();
        if atomic_be { u64::from_be(v) } else { v }
    };
    for t in 0..3 {
        let (win, src) = (4096 * (t + 1), 32768 + 1024 * t);
        let data: Vec<u8> = (0..64).map(|i| (i * 3 + t) as u8).collect();
        let read = |off: usize, len: usize| {
            let mut v = vec![0u8; len];
            b.read(off, &mut v).unwrap();
            v
        };
        assert_eq!(read(win, 64), data, "WRITE to target {t}");
        assert_eq!(read(win + 128, 16), data[..16], "WRITE_IMM");
        assert_eq!(read(src + 256, 32), vec![0x5a ^ t as u8; 32], "READ");
        assert_eq!(read_u64(src + 512), 100, "FAA's original");
        assert_eq!(read_u64(src + 520), 105, "CAS's original");
        let recv0 = 16384 + 256 * (3 * t);
        assert_eq!(
            read(recv0 + 256, 40),
            data[..40],
            "SEND into target {t}'s receive"
        );
        assert_eq!(read(recv0 + 512, 8), data[..8], "SEND_IMM");
    }
    let got: Vec<_> = wait(&mut rx, 9)
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode, c.qp_num, c.byte_len, c.imm))
        .collect();
    let mut want = Vec::new();
    for t in 0..3u32 {
        let (dctn, base) = (dc.dcts[t as usize].qpn(), 0x100 * (u64::from(t) + 1));
        let imm = 0xabc0 + t;
        want.push((
            base,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            dctn,
            16,
            imm,
        ));
        want.push((base + 1, WcStatus::Success, WcOpcode::Recv, dctn, 40, 0));
        want.push((
            base + 2,
            WcStatus::Success,
            WcOpcode::Recv,
            dctn,
            8,
            imm + 0x100,
        ));
    }
    assert_eq!(got, want);
    assert_eq!(dci.state(), QpState::Rts);
}

/// A wrong access key fails the initiator (transport retry exceeded); the requests behind it
/// are flushed, each once; reset and readied again, the same queue posts again.
pub fn wrong_key_fails_then_the_initiator_recovers(ctx: &Context) {
    let dc = Dc::new(ctx, 2, 1);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let b = &dc.buf;
    let mut wrong = dc.addrs[0];
    wrong.access_key = dc.addrs[1].access_key;
    let (bad, good) = (dc.pd.dc_peer(&wrong).unwrap(), dc.peer(0));
    b.fill(4096..4104, 0xee).unwrap();
    let sgl = [b.sge(32768..32776).unwrap()];
    post(
        &mut sq,
        &bad,
        &SendWr::write(1, &sgl, b.remote(4096).unwrap()).signaled(),
    );
    post(
        &mut sq,
        &good,
        &SendWr::write(2, &sgl, b.remote(4096).unwrap()),
    );
    post(
        &mut sq,
        &good,
        &SendWr::read(3, &sgl, b.remote(4096).unwrap()).signaled(),
    );
    let got: Vec<_> = wait(&mut tx, 3)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    let mut v = [0u8; 8];
    b.read(4096, &mut v).unwrap();
    assert_eq!(v, [0xee; 8], "nothing written at the target");
    assert_eq!(dci.state(), QpState::Error);
    // Refused while in error, and nothing written.
    // SAFETY: in the registered buffer.
    let e = unsafe { sq.post_to(&good, &SendWr::write(4, &sgl, b.remote(4096).unwrap())) };
    assert_eq!(e, Err(PostError::NotReady));
    // Recovery as for RC: reset (drained), ready again; the same queue posts again.
    dci.reset().unwrap();
    dci.ready_dc().unwrap();
    b.write(32768, b"again!!!").unwrap();
    post(
        &mut sq,
        &good,
        &SendWr::write(5, &sgl, b.remote(4096).unwrap()).signaled(),
    );
    let got: Vec<_> = wait(&mut tx, 1)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(got, [(5, WcStatus::Success)]);
    b.read(4096, &mut v).unwrap();
    assert_eq!(&v, b"again!!!");
}

/// A DCT number no target has fails the initiator the same way.
pub fn unknown_target_fails(ctx: &Context) {
    let dc = Dc::new(ctx, 1, 1);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let mut nowhere = dc.addrs[0];
    nowhere.dctn = dci.qpn(); // a QP, and no target
    let peer = dc.pd.dc_peer(&nowhere).unwrap();
    let sgl = [dc.buf.sge(0..8).unwrap()];
    post(&mut sq, &peer, &SendWr::send(1, &sgl).signaled());
    let c = wait(&mut tx, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::RetryExcErr));
}

/// A remote access error fails the initiator; the target serves another initiator on.
pub fn access_violation_fails_the_initiator_only(ctx: &Context) {
    let dc = Dc::new(ctx, 1, 2);
    let b = &dc.buf;
    let peer = dc.peer(0);
    let sgl = [b.sge(32768..32776).unwrap()];
    let mut bad = b.remote(4096).unwrap();
    bad.rkey ^= 0x100;
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    post(&mut sq, &peer, &SendWr::write(1, &sgl, bad).signaled());
    let c = wait(&mut tx, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::RemAccessErr));
    // Out of bounds of the registration.
    let (dci2, cq2) = &dc.dcis[1];
    let mut sq2 = dci2.send_queue().unwrap();
    let mut tx2 = cq2.poller().unwrap();
    b.write(32768, b"fine too").unwrap();
    post(
        &mut sq2,
        &peer,
        &SendWr::write(2, &sgl, b.remote(4200).unwrap()).signaled(),
    );
    let c = wait(&mut tx2, 1);
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::Success));
    let mut v = [0u8; 8];
    b.read(4200, &mut v).unwrap();
    assert_eq!(&v, b"fine too");
    assert_eq!(dc.dcts[0].state(), QpState::Rtr);
}

/// Moved to the error state with requests outstanding, an initiator flushes each once.
pub fn flush_of_every_outstanding_request(ctx: &Context) {
    let dc = Dc::new(ctx, 2, 1);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let sgl = [dc.buf.sge(32768..32776).unwrap()];
    let peers = [dc.peer(0), dc.peer(1)];
    // Staged, not rung: the device sees them only after the QP is in error.
    for i in 0..6u64 {
        let wr = SendWr::write(i, &sgl, dc.buf.remote(4096).unwrap()).signaled();
        // SAFETY: in the registered buffer.
        unsafe { sq.stage_to(&peers[(i % 2) as usize], &wr) }.unwrap();
    }
    dci.to_error().unwrap();
    sq.ring(); // discarded: the queue's gate closed with the error state
    assert_eq!(dci.outstanding().0, 0, "nothing reached the device");
    // In the error state the queue refuses posts; reset and readied, it takes them again, and
    // moved to error with requests outstanding, every one completes once, flushed or done.
    for i in 0..6u64 {
        let wr = SendWr::write(10 + i, &sgl, dc.buf.remote(4096).unwrap()).signaled();
        // SAFETY: refused before anything is read.
        let r = unsafe { sq.post_to(&peers[0], &wr) };
        assert_eq!(r, Err(PostError::NotReady));
    }
    dci.reset().unwrap();
    dci.ready_dc().unwrap();
    for i in 0..6u64 {
        let wr = SendWr::write(20 + i, &sgl, dc.buf.remote(4096).unwrap()).signaled();
        // SAFETY: as above.
        unsafe { sq.stage_to(&peers[(i % 2) as usize], &wr) }.unwrap();
    }
    sq.ring();
    dci.to_error().unwrap();
    let got = wait(&mut tx, 6);
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (20..26).collect::<Vec<_>>(), "each once, in order");
    assert!(
        got.iter()
            .all(|c| matches!(c.status, WcStatus::Success | WcStatus::WrFlushErr))
    );
    assert!(tx.ready().is_empty(), "no completion twice");
}

/// What the API refuses for DC, with a typed error and nothing changed.
pub fn refusals(ctx: &Context) {
    let dc = Dc::new(ctx, 1, 1);
    let (dci, cq) = &dc.dcis[0];
    let dct = &dc.dcts[0];
    let inv = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    // A DC QP has no receive queue (an initiator's send queue is taken below), and a target
    // no send queue either.
    assert!(inv(dci.recv_queue().map(drop)));
    assert!(inv(dci.queues(cq).map(drop)));
    assert!(inv(dct.send_queue().map(drop)));
    assert!(inv(dct.recv_queue().map(drop)));
    assert!(inv(dci.dc_addr().map(drop)));
    // A target without an SRQ; an initiator with one.
    let pd = &dc.pd;
    // Room for the RC QP and the initiator below, of the default sizes.
    let tcq = ctx.cq_builder().cqe(512).build().unwrap();
    assert!(inv(pd
        .qp_builder(&tcq, &tcq)
        .dc_target(1)
        .build()
        .map(drop)));
    assert!(inv(pd
        .qp_builder(&tcq, &tcq)
        .srq(&dc.srq)
        .dc_initiator()
        .build()
        .map(drop)));
    // An RC QP has no DC readiness (its queue refuses a DC target: `sim_api.rs`).
    let rc = pd.qp_builder(&tcq, &tcq).build().unwrap();
    assert!(inv(rc.ready_dc()));
    // Before RTS, a DCI's queue is refused.
    let early = pd.qp_builder(&tcq, &tcq).dc_initiator().build().unwrap();
    assert!(matches!(early.send_queue(), Err(Error::NotReady { .. })));
    // A datagram SEND on a DC queue: refused, nothing written.
    let mut sq = dci.send_queue().unwrap();
    assert!(matches!(
        dci.send_queue(),
        Err(Error::AlreadyTaken("send queue"))
    ));
    let ah = pd
        .create_ah(&zverbs::AhAttr {
            dlid: dc.addrs[0].lid,
            port: 1,
            ..Default::default()
        })
        .unwrap();
    let ud = zverbs::core::UdDest::new(*ah.av().unwrap(), 0, 1, 1);
    let sgl = [dc.buf.sge(0..8).unwrap()];
    let peer = dc.peer(0);
    let before = dci.outstanding();
    // SAFETY: refused before anything is read.
    let e = unsafe { sq.post_to(&peer, &SendWr::send_to(1, &sgl, &ud)) };
    assert_eq!(e, Err(PostError::WrongTransport));
    assert_eq!(dci.outstanding(), before);
    // A request without its target, through the queue's `PostSend` (post, stage, batch):
    // refused, nothing written.
    let wr = SendWr::write(2, &sgl, dc.buf.remote(0).unwrap());
    // SAFETY: refused before anything is read.
    unsafe {
        assert_eq!(sq.post(&wr), Err(PostError::WrongTransport));
        assert_eq!(sq.stage(&wr), Err(PostError::WrongTransport));
        let e = sq.post_all(std::slice::from_ref(&wr)).unwrap_err();
        assert_eq!((e.index, e.error), (0, PostError::WrongTransport));
    }
    let e = sq.send(3, dc.buf.slice(0..8).unwrap(), zverbs::SendFlags::SIGNALED);
    assert_eq!(
        e,
        Err(zverbs::safe::SafePostError::Post(PostError::WrongTransport))
    );
    // Nor is a DC request prepared: it would carry no target.
    let e = sq.prepare_write(
        dc.buf.slice(0..8).unwrap(),
        dc.buf.remote(0).unwrap(),
        zverbs::SendFlags::NONE,
    );
    assert!(matches!(
        e,
        Err(zverbs::safe::SafePostError::Post(PostError::WrongTransport))
    ));
    assert_eq!(dci.outstanding(), before);
    let _ = cq;
}

/// The send queue's safe operations to DC targets (`SendQueue::to`), one by one and in a
/// batch behind one doorbell: no `unsafe`, the data and the completions as for raw posts.
pub fn safe_operations_to_targets(ctx: &Context) {
    use zverbs::SendFlags;
    let dc = Dc::new(ctx, 2, 1);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let b = &dc.buf;
    let peers: Vec<DcPeer> = (0..2).map(|t| dc.peer(t)).collect();
    b.write(0, b"to target zero").unwrap();
    b.write(64, b"to target one!").unwrap();
    b.store_u64(8192, 40).unwrap();
    let sig = SendFlags::SIGNALED;
    sq.to(&peers[0])
        .write(1, b.slice(0..14).unwrap(), b.remote(4096).unwrap(), sig)
        .unwrap();
    sq.to(&peers[1])
        .fetch_add(
            2,
            b.slice(256..264).unwrap(),
            b.remote(8192).unwrap(),
            2,
            sig,
        )
        .unwrap();
    let mut batch = sq.batch();
    batch
        .to(&peers[1])
        .write(
            3,
            b.slice(64..78).unwrap(),
            b.remote(4096 + 64).unwrap(),
            SendFlags::NONE,
        )
        .unwrap();
    batch
        .to(&peers[0])
        .read(4, b.slice(512..526).unwrap(), b.remote(4096).unwrap(), sig)
        .unwrap();
    batch.finish();
    let ids: Vec<_> = wait(&mut tx, 3)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    let read = |off: usize, len: usize| {
        let mut v = vec![0u8; len];
        b.read(off, &mut v).unwrap();
        v
    };
    assert_eq!(read(4096, 14), b"to target zero");
    assert_eq!(read(4096 + 64, 14), b"to target one!");
    assert_eq!(read(512, 14), b"to target zero", "READ back");
    let faa = b.load_u64(256).unwrap();
    let faa = if ctx.atomics_big_endian() {
        u64::from_be(faa)
    } else {
        faa
    };
    assert_eq!(faa, 40, "FAA's original");
}

/// Prepared requests to two targets, each carrying its own (`sq.to(&peer).prepare_*`), posted
/// through the one `post_prepared` with what changes: WRITE, READ, SEND and WRITE with
/// immediate; the target's receive completions name it. Refused with nothing written: a
/// prepared request without a target, a UD one, a peer made in another PD, a span outside the
/// prepared one, and a request prepared on another initiator.
pub fn prepared_requests_to_targets(ctx: &Context) {
    use zverbs::safe::{SafePostError, WaitError};
    use zverbs::{Changes, SendFlags};
    let dc = Dc::new(ctx, 2, 2);
    let (dci, cq) = &dc.dcis[0];
    let mut sq = dci.send_queue().unwrap();
    let mut tx = cq.poller().unwrap();
    let mut rx = dc.dct_cq.poller().unwrap();
    let mut srq = dc.srq.queue().unwrap();
    let b = &dc.buf;
    let peers: Vec<DcPeer> = (0..2).map(|t| dc.peer(t)).collect();
    let sig = SendFlags::SIGNALED;
    b.write(0, b"prepared to zero").unwrap();
    b.write(64, b"prepared to one!").unwrap();
    let w0 = sq
        .to(&peers[0])
        .prepare_write(b.slice(0..16).unwrap(), b.remote(4096).unwrap(), sig)
        .unwrap();
    let w1 = sq
        .to(&peers[1])
        .prepare_write(b.slice(64..80).unwrap(), b.remote(8192).unwrap(), sig)
        .unwrap();
    let read = sq
        .to(&peers[0])
        .prepare_read(b.slice(512..528).unwrap(), b.remote(4096).unwrap(), sig)
        .unwrap();
    let send = sq
        .to(&peers[1])
        .prepare_send_imm(b.slice(0..16).unwrap(), sig)
        .unwrap();
    let wimm = sq
        .to(&peers[0])
        .prepare_write_imm(b.slice(64..80).unwrap(), b.remote(12288).unwrap(), sig)
        .unwrap();
    sq.post_prepared(&w0, Changes::new(1)).unwrap();
    // "to one!": 7 bytes from offset 9, 9 bytes past the prepared remote address.
    sq.post_prepared(&w1, Changes::new(2).local(9, 7).remote_offset(9))
        .unwrap();
    let done: Vec<_> = wait(&mut tx, 2)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(done, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let bytes = |off: usize, len: usize| {
        let mut v = vec![0u8; len];
        b.read(off, &mut v).unwrap();
        v
    };
    assert_eq!(bytes(4096, 16), b"prepared to zero");
    assert_eq!(bytes(8192 + 9, 7), b"to one!");
    assert_eq!(bytes(8192, 9), [0; 9], "only the span posted");
    sq.post_prepared(&read, Changes::new(3)).unwrap();
    for k in 0..2 {
        let sgl = [b.sge(16384 + 256 * k..16384 + 256 * k + 64).unwrap()];
        // SAFETY: in the registered buffer.
        unsafe { PostRecv::post(&mut srq, &RecvWr::new(0x100 + k as u64, &sgl)) }.unwrap();
    }
    sq.post_prepared(&send, Changes::new(4).local(0, 8).imm(0xd1))
        .unwrap();
    sq.post_prepared(&wimm, Changes::new(5).imm(0xd0)).unwrap();
    let done: Vec<_> = wait(&mut tx, 3)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        done,
        [
            (3, WcStatus::Success),
            (4, WcStatus::Success),
            (5, WcStatus::Success)
        ]
    );
    assert_eq!(bytes(512, 16), b"prepared to zero", "READ back");
    assert_eq!(bytes(12288, 16), b"prepared to one!");
    let got: Vec<_> = wait(&mut rx, 2)
        .iter()
        .map(|c| (c.wr_id, c.qp_num, c.byte_len, c.imm()))
        .collect();
    assert_eq!(
        got,
        [
            (0x100, dc.dcts[1].qpn(), 8, Some(0xd1)),
            (0x101, dc.dcts[0].qpn(), 16, Some(0xd0)),
        ],
        "each request reached its own target"
    );
    assert_eq!(bytes(16384, 8), b"prepared");

    // Refused, nothing written.
    let before = dci.outstanding();
    let no_target = sq.prepare_write(b.slice(0..8).unwrap(), b.remote(0).unwrap(), sig);
    assert_eq!(
        no_target.map(drop),
        Err(SafePostError::Post(PostError::WrongTransport))
    );
    let ah = dc
        .pd
        .create_ah(&zverbs::AhAttr {
            dlid: dc.addrs[0].lid,
            port: 1,
            ..Default::default()
        })
        .unwrap();
    let ud = ah.target(dc.dcts[0].qpn(), 1);
    let datagram = sq.prepare_send_to(&ud, b.slice(0..8).unwrap(), sig);
    assert_eq!(
        datagram.map(drop),
        Err(SafePostError::Post(PostError::WrongTransport))
    );
    let other_pd = ctx.alloc_pd().unwrap();
    let far = other_pd.dc_peer(&dc.addrs[0]).unwrap();
    let foreign = sq
        .to(&far)
        .prepare_write(b.slice(0..8).unwrap(), b.remote(0).unwrap(), sig);
    assert_eq!(foreign.map(drop), Err(SafePostError::ForeignTarget));
    for c in [
        Changes::new(6).local(8, 9),
        Changes::new(6).remote_offset(u64::MAX),
    ] {
        assert!(
            matches!(
                sq.post_prepared(&w0, c),
                Err(SafePostError::OutsidePrepared { .. })
            ),
            "{c:?}"
        );
    }
    assert_eq!(dci.outstanding(), before);
    let (dci2, _) = &dc.dcis[1];
    let mut sq2 = dci2.send_queue().unwrap();
    let before2 = dci2.outstanding();
    assert_eq!(
        sq2.post_prepared(&w0, Changes::new(7)),
        Err(SafePostError::ForeignPrepared)
    );
    assert_eq!(dci2.outstanding(), before2);
    let none = tx.wait(1, Instant::now()).map(drop);
    assert_eq!(none, Err(WaitError::Timeout { wanted: 1, got: 0 }));
}
