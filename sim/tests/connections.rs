//! Who may talk to whom: a connection is one-sided, as on hardware (each QP names its peer),
//! and a QP accepts requests only from the QP it names, and for a peer in another process only
//! from that QP at the LID it names. A third QP can neither take a connected QP over nor reach
//! its memory or receive queue, in one process or through the wire.

mod common;

use std::sync::Arc;

use common::{Arena, End, PairCfg, Queue};
use zverbs_core::{PostRecv, PostSend, RecvWr, SendWr, WcOpcode, WcStatus};
use zverbs_sim::wire::{Message, Response, Status};
use zverbs_sim::{Device, Peer, QpStatus, SimError, vendor};

/// Posts one receive of 64 bytes at `off` of the end's arena.
fn post_recv(e: &mut End<'_>, wr_id: u64, off: usize) {
    let sgl = [e.sge(off, 64)];
    // SAFETY: the entry lies in the end's registered arena.
    unsafe { e.rq.post(&RecvWr::new(wr_id, &sgl)) }.unwrap();
}

/// Sends `len` bytes from the start of the end's arena, signaled.
fn send(e: &mut End<'_>, wr_id: u64, len: u32) {
    let sgl = [e.sge(0, len)];
    // SAFETY: the entry lies in the end's registered arena, untouched until completion.
    unsafe { e.sq.post(&SendWr::send(wr_id, &sgl).signaled()) }.unwrap();
}

/// A QP with receives posted for ever (RNR retry 7), as a QP of a long-lived program is.
fn cfg() -> PairCfg {
    let mut c = PairCfg::default();
    c.qp.rnr_retry = zverbs_sim::RNR_RETRY_INFINITE;
    c
}

#[test]
fn a_connected_qp_cannot_be_taken_over_in_one_device() {
    let dev = Device::new();
    let mems: Vec<Arena> = (0..4).map(|_| Arena::new(4096)).collect();
    let [mut a, mut b, mut c, d] = [0, 1, 2, 3].map(|i| common::end_on(&dev, &mems[i], cfg()));
    // C names A while A names nobody yet: accepted (one-sided, as RTR on hardware).
    dev.connect_to(c.qpn(), Peer::Local(a.qpn())).unwrap();
    // Then A and B name each other.
    dev.connect_to(a.qpn(), Peer::Local(b.qpn())).unwrap();
    dev.connect_to(b.qpn(), Peer::Local(a.qpn())).unwrap();
    // Naming A now that it names B is refused, and changes nothing.
    assert_eq!(
        dev.connect_to(d.qpn(), Peer::Local(a.qpn())),
        Err(SimError::PeerTaken {
            qpn: d.qpn(),
            peer: a.qpn()
        })
    );
    assert_eq!(dev.qp_status(d.qpn()).unwrap(), QpStatus::Init);
    // Connecting a connected QP again, from either side, is refused too.
    assert_eq!(
        dev.connect(d.qpn(), a.qpn()),
        Err(SimError::AlreadyConnected(a.qpn()))
    );
    assert_eq!(
        dev.connect_to(a.qpn(), Peer::Local(d.qpn())),
        Err(SimError::AlreadyConnected(a.qpn()))
    );
    assert_eq!(dev.qp_status(d.qpn()).unwrap(), QpStatus::Init);

    post_recv(&mut a, 0xa1, 1024);
    post_recv(&mut a, 0xa2, 2048);
    // C's SEND and WRITE never reach A: C gets "transport retry exceeded", as a requester
    // whose packets the responder drops does.
    c.mem.write(0, b"from c, not a peer");
    send(&mut c, 1, 18);
    dev.run_until_idle();
    let got = c.poll_all();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].status, WcStatus::RetryExcErr, "{got:?}");
    assert_eq!(got[0].vendor_err, u32::from(vendor::NOT_PEER));
    assert!(a.poll_all().is_empty(), "nothing reached A");
    assert_eq!(dev.stats().not_peer, 1);
    assert_eq!(dev.stats().recvs, 0, "A's receives are untouched");
    assert_eq!(dev.qp_status(a.qpn()).unwrap(), QpStatus::Rts);

    // B, A's peer, is served: its two SENDs take A's two receives, in order.
    b.mem.write(0, b"from b");
    send(&mut b, 2, 6);
    send(&mut b, 3, 6);
    dev.run_until_idle();
    let got = a.poll_all();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        [(0xa1, WcOpcode::Recv), (0xa2, WcOpcode::Recv)]
    );
    assert_eq!(a.mem.read(1024, 6), b"from b");
    assert_eq!(a.mem.read(2048, 6), b"from b");
    assert!(b.poll_all().iter().all(|w| w.is_success()));

    assert_eq!(dev.cq_overruns(), 0);
    assert!(dev.guards_intact() && mems.iter().all(Arena::guards_intact));
}

#[test]
fn a_write_from_a_qp_that_is_not_the_peer_places_nothing() {
    let dev = Device::new();
    let mems: Vec<Arena> = (0..3).map(|_| Arena::new(4096)).collect();
    let [a, b, mut c] = [0, 1, 2].map(|i| common::end_on(&dev, &mems[i], cfg()));
    // C names A before A names B: accepted on C's side, but A names B.
    dev.connect_to(c.qpn(), Peer::Local(a.qpn())).unwrap();
    dev.connect(a.qpn(), b.qpn()).unwrap();
    c.mem.write(0, b"overwrite");
    let sgl = [c.sge(0, 9)];
    // SAFETY: the entry lies in C's registered arena; the target is A's (registered) arena.
    unsafe { c.sq.post(&SendWr::write(1, &sgl, a.remote(100)).signaled()) }.unwrap();
    dev.run_until_idle();
    let got = c.poll_all();
    assert_eq!(
        (got[0].status, got[0].vendor_err),
        (WcStatus::RetryExcErr, u32::from(vendor::NOT_PEER))
    );
    assert_eq!(a.mem.read(100, 9), [0; 9], "A's memory is untouched");
    assert_eq!(dev.stats().bytes, 0);
}

// ----- across processes -----

/// Steps every device and carries their messages until nothing moves. `devs[i]` is at LID
/// `i + 1`.
fn pump(devs: &[&Device], q: &Queue) {
    loop {
        let mut work: usize = devs.iter().map(|d| d.run_until_idle()).sum();
        for (lid, m) in q.take() {
            devs[usize::from(lid) - 1].deliver(&m);
            work += 1;
        }
        if work == 0 {
            return;
        }
    }
}

#[test]
fn requests_through_the_wire_are_served_only_from_the_peer() {
    let q = Arc::new(Queue::default());
    let devs = [Device::new(), Device::new(), Device::new()];
    for (i, d) in devs.iter().enumerate() {
        d.set_wire(q.clone(), i as u16 + 1);
    }
    let [da, db, dc] = &devs;
    let refs = [da, db, dc];
    let mems: Vec<Arena> = (0..4).map(|_| Arena::new(4096)).collect();
    let mut a = common::end_on(da, &mems[0], cfg());
    let mut b = common::end_on(db, &mems[1], cfg());
    // Another QP of B's process, and a QP of a third process that has guessed A's QPN.
    let mut b2 = common::end_on(db, &mems[2], cfg());
    let mut c = common::end_on(dc, &mems[3], cfg());
    let remote = |lid: u16, e: &End<'_>| Peer::Remote { lid, qpn: e.qpn() };
    da.connect_to(a.qpn(), remote(2, &b)).unwrap();
    db.connect_to(b.qpn(), remote(1, &a)).unwrap();
    db.connect_to(b2.qpn(), remote(1, &a)).unwrap();
    dc.connect_to(c.qpn(), remote(1, &a)).unwrap();
    // The third process's QP has the very number of A's peer: only the LID tells them apart.
    assert_eq!(c.qpn(), b.qpn());

    post_recv(&mut a, 0xa1, 1024);
    for (e, what) in [(&mut b2, &b"from b2"[..]), (&mut c, b"from c!")] {
        e.mem.write(0, what);
        send(e, 1, 7);
        pump(&refs, &q);
        let got = e.poll_all();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].status, got[0].vendor_err),
            (WcStatus::RetryExcErr, u32::from(vendor::NOT_PEER))
        );
    }
    assert!(a.poll_all().is_empty(), "nothing reached A");
    assert_eq!(da.stats().not_peer, 2);
    assert_eq!(da.stats().recvs, 0, "A's receive is untouched");
    assert_eq!(da.qp_status(a.qpn()).unwrap(), QpStatus::Rts);

    // B, A's peer, is served.
    b.mem.write(0, b"from b");
    send(&mut b, 2, 6);
    pump(&refs, &q);
    let got = a.poll_all();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].opcode), (0xa1, WcOpcode::Recv));
    assert_eq!(a.mem.read(1024, 6), b"from b");
    assert!(b.poll_all()[0].is_success());

    // A response to A's request that does not come from B is ignored; B's own is taken.
    a.mem.write(0, b"to b");
    let sgl = [a.sge(0, 4)];
    // SAFETY: the entry lies in A's registered arena; the target is B's.
    unsafe { a.sq.post(&SendWr::write(3, &sgl, b.remote(500)).signaled()) }.unwrap();
    da.run_until_idle();
    let msgs = q.take();
    let [(2, request)] = &msgs[..] else {
        panic!("one request to B: {msgs:?}")
    };
    let Some(Message::Request(r)) = Message::decode(request) else {
        panic!("a request")
    };
    for (src_lid, src_qpn) in [(3, b.qpn()), (2, b2.qpn())] {
        let forged = Response {
            src_lid,
            src_qpn,
            dst_qpn: a.qpn(),
            seq: r.seq,
            psn: r.psn,
            status: Status::Nak(0x13, 0x31),
            data: Vec::new(),
        };
        da.deliver(&Message::Response(forged).encode());
    }
    da.run_until_idle();
    assert!(a.poll_all().is_empty(), "the forged answers are ignored");
    assert_eq!(da.stats().not_peer, 4);
    db.deliver(request);
    pump(&refs, &q);
    let got = a.poll_all();
    assert_eq!((got[0].wr_id, got[0].status), (3, WcStatus::Success));
    assert_eq!(b.mem.read(500, 4), b"to b");

    for d in refs {
        assert_eq!(d.cq_overruns(), 0);
        assert!(d.guards_intact());
    }
    assert!(mems.iter().all(Arena::guards_intact));
}
