//! Connecting in one call on the software device, which checks PSNs as a NIC does: a QP
//! announces its first PSN in `Qp::endpoint` and sends from it after `Qp::connect`, so two QPs
//! connected that way exchange every operation, and a peer told another PSN gets nothing
//! through.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::connect::Endpoint;
use zverbs::safe::SafeQueues;
use zverbs::{
    AccessFlags, ConnectAttr, ContextOptions, Cq, MrBuf, Pd, Qp, QpState, Registered, SendFlags,
    WcOpcode, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

/// Long enough for anything the software device does (no test waits for it to pass).
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

struct Side {
    qp: Qp,
    cq: Cq,
    buf: MrBuf,
}

/// A PD and two QPs of the software device in RESET, each with its CQ and a buffer.
fn sides() -> (Pd, Side, Side) {
    let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default())
        .expect("the software device");
    let pd = ctx.alloc_pd().unwrap();
    let side = || {
        let cq = ctx.cq_builder().cqe(64).build().unwrap();
        let qp = pd.qp_builder(&cq, &cq).build().unwrap();
        let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
        Side { qp, cq, buf }
    };
    let (a, b) = (side(), side());
    (pd, a, b)
}

#[test]
fn endpoint_is_stable_and_names_the_qp() {
    let (_pd, a, b) = sides();
    let e = a.qp.endpoint().unwrap();
    assert_eq!(
        a.qp.endpoint().unwrap(),
        e,
        "a second call announces the same"
    );
    assert_eq!(e.qpn, a.qp.qpn());
    assert_eq!(e.psn, a.qp.psn());
    assert!(e.psn <= 0xff_ffff, "24 bits: {:#x}", e.psn);
    // Connecting sends from the PSN announced: the endpoint does not change.
    zverbs::connect_pair(&a.qp, &b.qp).unwrap();
    assert_eq!(a.qp.endpoint().unwrap(), e);
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
}

#[test]
fn qps_draw_their_psns_apart() {
    // Random per QP: four QPs drawing one PSN would take a 2^-72 chance.
    let (pd, a, b) = sides();
    let more: Vec<Qp> = (0..2)
        .map(|_| {
            let cq = pd.context().cq_builder().build().unwrap();
            pd.qp_builder(&cq, &cq).build().unwrap()
        })
        .collect();
    let psns: Vec<u32> = [&a.qp, &b.qp, &more[0], &more[1]]
        .iter()
        .map(|q| q.psn())
        .collect();
    assert!(psns.windows(2).any(|w| w[0] != w[1]), "{psns:x?}");
}

#[test]
fn connect_sends_from_the_announced_psn() {
    let (_pd, a, b) = sides();
    // Each side connects to the endpoint the other announced, as over a TCP exchange.
    let (ea, eb) = (a.qp.endpoint().unwrap(), b.qp.endpoint().unwrap());
    a.qp.connect(&eb).unwrap();
    b.qp.connect(&ea).unwrap();
    let (mut qa, mut qb) = (a.qp.queues(&a.cq).unwrap(), b.qp.queues(&b.cq).unwrap());
    // Both ways: a request gets through only when the sender's PSN is the one the receiver
    // was told.
    a.buf.write(0, b"from A").unwrap();
    qa.sq
        .write(1, a.buf.slice(0..6).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    qa.cq.wait(1, soon()).unwrap()[0].ok().unwrap();
    b.buf.write(8, b"from B").unwrap();
    qb.sq
        .write(
            2,
            b.buf.slice(8..14).unwrap(),
            a.buf.remote(8).unwrap(),
            SIG,
        )
        .unwrap();
    qb.cq.wait(1, soon()).unwrap()[0].ok().unwrap();
    let mut got = [0u8; 6];
    b.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from A");
    a.buf.read(8, &mut got).unwrap();
    assert_eq!(&got, b"from B");
}

#[test]
fn a_peer_told_another_psn_gets_nothing_through() {
    let (_pd, a, b) = sides();
    a.qp.connect(&b.qp.endpoint().unwrap()).unwrap();
    // B is told A starts one PSN earlier than A announced (and sends from): every request of
    // A's is ahead of what B expects.
    let ea = a.qp.endpoint().unwrap();
    let wrong = Endpoint {
        psn: ea.psn.wrapping_sub(1) & 0xff_ffff,
        ..ea
    };
    b.qp.connect(&wrong).unwrap();
    let mut qa = a.qp.queues(&a.cq).unwrap();
    a.buf.write(0, b"must not arrive").unwrap();
    qa.sq
        .write(
            1,
            a.buf.slice(0..15).unwrap(),
            b.buf.remote(0).unwrap(),
            SIG,
        )
        .unwrap();
    let w = qa.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RetryExcErr), "{w:?}");
    let mut got = [0xffu8; 15];
    b.buf.read(0, &mut got).unwrap();
    assert_eq!(got, [0; 15], "nothing written in B's memory");
}

#[test]
fn connect_with_records_the_psn_it_sends_from() {
    let (_pd, a, b) = sides();
    let eb = b.qp.endpoint().unwrap();
    let attr = a.qp.connect_attr(&eb).unwrap();
    assert_eq!(
        (attr.rts.sq_psn, attr.rtr.rq_psn, attr.rtr.dest_qpn),
        (a.qp.psn(), eb.psn, eb.qpn)
    );
    // Another PSN than the one drawn: the QP reports, and announces, the one it sends from.
    let mine = a.qp.psn() ^ 0x80_0000;
    let mut attr = attr;
    attr.rts.sq_psn = mine;
    a.qp.connect_with(&attr).unwrap();
    assert_eq!(a.qp.psn(), mine);
    assert_eq!(a.qp.endpoint().unwrap().psn, mine);
    // So a peer connected to that endpoint afterwards gets the request through.
    b.qp.connect(&a.qp.endpoint().unwrap()).unwrap();
    let mut qa = a.qp.queues(&a.cq).unwrap();
    qa.sq
        .write_inline(1, b"ok", b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    qa.cq.wait(1, soon()).unwrap()[0].ok().unwrap();
    // And `ConnectAttr::new` with the QP's PSN is what `connect_attr` builds.
    let by_hand = ConnectAttr::new(
        attr.init.port,
        attr.rts.sq_psn,
        &eb,
        attr.rtr.grh.map(|g| u32::from(g.sgid_index)),
    )
    .mtu(attr.rtr.path_mtu);
    assert_eq!(by_hand, attr);
}

/// Every operation from `q` (whose buffer is `from`) into the peer `p` (buffer `to`).
fn every_operation(q: &mut SafeQueues, p: &mut SafeQueues, from: &MrBuf, to: &MrBuf) {
    let done = |q: &mut SafeQueues, opcode| {
        let c = q.cq.wait(1, soon()).unwrap()[0];
        c.ok().unwrap();
        assert_eq!(c.opcode, opcode, "{c:?}");
        c
    };
    let read = |b: &MrBuf, at: usize, n: usize| {
        let mut v = vec![0; n];
        b.read(at, &mut v).unwrap();
        v
    };
    from.write(0, b"write").unwrap();
    q.sq.write(1, from.slice(0..5).unwrap(), to.remote(0).unwrap(), SIG)
        .unwrap();
    done(q, WcOpcode::RdmaWrite);
    assert_eq!(read(to, 0, 5), b"write");

    q.sq.write_inline(2, b"inline", to.remote(16).unwrap(), SIG)
        .unwrap();
    done(q, WcOpcode::RdmaWrite);
    assert_eq!(read(to, 16, 6), b"inline");

    p.rq.post(10, to.slice(1024..2048).unwrap()).unwrap();
    from.write(32, b"imm").unwrap();
    q.sq.write_imm(
        3,
        from.slice(32..35).unwrap(),
        to.remote(32).unwrap(),
        77,
        SIG,
    )
    .unwrap();
    done(q, WcOpcode::RdmaWrite);
    assert_eq!(done(p, WcOpcode::RecvRdmaWithImm).imm(), Some(77));
    assert_eq!(read(to, 32, 3), b"imm");

    p.rq.post(11, to.slice(1024..2048).unwrap()).unwrap();
    from.write(64, b"send").unwrap();
    q.sq.send(4, from.slice(64..68).unwrap(), SIG).unwrap();
    done(q, WcOpcode::Send);
    assert_eq!(done(p, WcOpcode::Recv).byte_len, 4);
    assert_eq!(read(to, 1024, 4), b"send");

    p.rq.post(12, to.slice(1024..2048).unwrap()).unwrap();
    q.sq.send_imm(5, from.slice(64..68).unwrap(), 99, SIG)
        .unwrap();
    done(q, WcOpcode::Send);
    assert_eq!(done(p, WcOpcode::Recv).imm(), Some(99));

    p.rq.post(13, to.slice(1024..2048).unwrap()).unwrap();
    q.sq.send_inline(6, b"inline send", SIG).unwrap();
    done(q, WcOpcode::Send);
    assert_eq!(done(p, WcOpcode::Recv).byte_len, 11);
    assert_eq!(read(to, 1024, 11), b"inline send");

    to.write(2048, b"read me").unwrap();
    q.sq.read(
        7,
        from.slice(2048..2055).unwrap(),
        to.remote(2048).unwrap(),
        SIG,
    )
    .unwrap();
    done(q, WcOpcode::RdmaRead);
    assert_eq!(read(from, 2048, 7), b"read me");

    to.store_u64(3000, 40).unwrap();
    q.sq.fetch_add(
        8,
        from.slice(3000..3008).unwrap(),
        to.remote(3000).unwrap(),
        2,
        SIG,
    )
    .unwrap();
    done(q, WcOpcode::FetchAdd);
    assert_eq!(
        (from.load_u64(3000).unwrap(), to.load_u64(3000).unwrap()),
        (40, 42)
    );

    q.sq.compare_swap(
        9,
        from.slice(3000..3008).unwrap(),
        to.remote(3000).unwrap(),
        42,
        7,
        SIG,
    )
    .unwrap();
    done(q, WcOpcode::CompSwap);
    assert_eq!(
        (from.load_u64(3000).unwrap(), to.load_u64(3000).unwrap()),
        (42, 7)
    );

    // Several behind one doorbell, the last signaled.
    let mut batch = q.sq.batch();
    batch
        .write_inline(20, b"one", to.remote(100).unwrap(), SendFlags::NONE)
        .unwrap();
    batch
        .write_inline(21, b"two", to.remote(104).unwrap(), SIG)
        .unwrap();
    batch.finish();
    assert_eq!(done(q, WcOpcode::RdmaWrite).wr_id, 21);
    assert_eq!(read(to, 100, 7), b"one\0two");
}

#[test]
fn connect_pair_carries_every_operation_both_ways() {
    let (_pd, a, b) = sides();
    zverbs::connect_pair(&a.qp, &b.qp).unwrap();
    let (mut qa, mut qb) = (a.qp.queues(&a.cq).unwrap(), b.qp.queues(&b.cq).unwrap());
    every_operation(&mut qa, &mut qb, &a.buf, &b.buf);
    every_operation(&mut qb, &mut qa, &b.buf, &a.buf);
}

#[test]
fn a_qp_connected_to_itself() {
    let (_pd, a, _b) = sides();
    a.qp.connect(&a.qp.endpoint().unwrap()).unwrap();
    let mut qa = a.qp.queues(&a.cq).unwrap();
    qa.sq
        .write_inline(1, b"loop", a.buf.remote(512).unwrap(), SIG)
        .unwrap();
    qa.cq.wait(1, soon()).unwrap()[0].ok().unwrap();
    let mut got = [0u8; 4];
    a.buf.read(512, &mut got).unwrap();
    assert_eq!(&got, b"loop");
}
