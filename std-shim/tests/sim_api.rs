//! The convenient layer on the software device: posts that ring, batches that ring once, waits
//! that end, queues refused before their QP can use them, and errors that compose with `?`.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::connect::Endpoint;
use zverbs::safe::{SafePostError, SafeQueues, WaitError};
use zverbs::{
    AccessFlags, Changes, ConnectAttr, ContextOptions, Cq, Error, MrBuf, Pd, PostError, PostSend,
    Qp, QpState, Registered, RemoteBuf, SendFlags, SendWr, WcOpcode, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

/// What a send queue has posted on the direct backend (its producer counter).
trait Producer {
    fn mlx5_producer(&self) -> u32;
}

impl Producer for zverbs::SendQueue {
    fn mlx5_producer(&self) -> u32 {
        match self.typed() {
            zverbs::backend::TypedSq::Rc(q) => q.raw().producer(),
            _ => panic!("the software device drives RC queues directly"),
        }
    }
}

/// Long enough for anything the software device does (no test waits for it to pass).
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// A deadline that passes at once: what arrives by then is what was there already.
fn now() -> Instant {
    Instant::now()
}

struct Side {
    qp: Qp,
    cq: Cq,
    buf: MrBuf,
}

struct Pair {
    pd: Pd,
    a: Side,
    b: Side,
    qa: SafeQueues,
    qb: SafeQueues,
}

/// Two connected QPs of the software device, each with its CQ, buffer and queues; `attr`
/// adjusts A's attributes. Every error converts into `zverbs::Error` on the way.
fn pair(attr: impl Fn(ConnectAttr) -> ConnectAttr) -> zverbs::Result<Pair> {
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default())?;
    let port = ctx.active_port()?;
    let local = ctx.address(port, None)?;
    let pd = ctx.alloc_pd()?;
    let side = || -> zverbs::Result<Side> {
        let cq = ctx.cq_builder().cqe(64).build()?;
        let qp = pd.qp_builder(&cq, &cq).build()?;
        let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
        Ok(Side { qp, cq, buf })
    };
    let (a, b) = (side()?, side()?);
    let at = |qp: &Qp| Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: 0,
        gid: local.gid,
    };
    a.qp.connect_with(&attr(ConnectAttr::new(
        port,
        0,
        &at(&b.qp),
        local.gid_index,
    )))?;
    b.qp.connect_with(&ConnectAttr::new(port, 0, &at(&a.qp), local.gid_index))?;
    let (qa, qb) = (a.qp.queues(&a.cq)?, b.qp.queues(&b.cq)?);
    Ok(Pair { pd, a, b, qa, qb })
}

#[test]
fn each_post_rings_and_a_batch_rings_once_when_finished_or_dropped() {
    let Pair {
        a, b, mut qa, qb, ..
    } = pair(|c| c).unwrap();
    // One post: the device has it when the call returns.
    a.buf.write(0, b"rung").unwrap();
    qa.sq
        .write(1, a.buf.slice(0..4).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    let c = qa.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));

    // A batch: nothing reaches the device until it is finished.
    let mut batch = qa.sq.batch();
    batch
        .write(
            2,
            a.buf.slice(0..4).unwrap(),
            b.buf.remote(8).unwrap(),
            SendFlags::NONE,
        )
        .unwrap();
    batch
        .write(
            3,
            a.buf.slice(0..4).unwrap(),
            b.buf.remote(16).unwrap(),
            SIG,
        )
        .unwrap();
    assert_eq!(
        qa.cq.wait(1, now()),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
    batch.finish();
    let c = qa.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (3, WcStatus::Success));

    // A batch left by `?` at a refused request rings what it staged before.
    let mut stage_then_fail = || -> zverbs::Result<()> {
        let mut batch = qa.sq.batch();
        batch.write(4, a.buf.slice(0..4)?, b.buf.remote(24)?, SIG)?;
        batch.write_inline(5, &[0; 4096], b.buf.remote(32)?, SIG)?;
        batch.finish();
        Ok(())
    };
    let e = stage_then_fail().unwrap_err();
    assert!(
        matches!(e, Error::Post(PostError::InlineTooLarge { .. })),
        "{e}"
    );
    let c = qa.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (4, WcStatus::Success));
    let mut got = [0u8; 4];
    for off in [0, 8, 16, 24] {
        b.buf.read(off, &mut got).unwrap();
        assert_eq!(&got, b"rung", "at {off}");
    }
    drop(qb);
}

#[test]
fn a_write_with_immediate_and_no_receive_fails_by_default_not_hangs() {
    let Pair {
        a, b, mut qa, qb, ..
    } = pair(|c| c).unwrap();
    qa.sq
        .write_imm(
            1,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(0).unwrap(),
            7,
            SIG,
        )
        .unwrap();
    // The default rnr_retry (6) is spent: the request fails with "RNR retry exceeded" (on the
    // software device after 7 attempts, one per engine step).
    let c = qa.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RnrRetryExcErr), "{c:?}");
    let e = c.ok().unwrap_err();
    assert!(e.to_string().contains("RNR retry counter exceeded"), "{e}");
    drop(qb);
}

#[test]
fn with_rnr_retry_7_the_write_waits_for_a_receive() {
    let Pair {
        a,
        b,
        mut qa,
        mut qb,
        ..
    } = pair(|c| c.rnr(7, 12)).unwrap();
    qa.sq
        .write_imm(
            1,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(0).unwrap(),
            7,
            SIG,
        )
        .unwrap();
    // Retried for ever: the wait ends at its deadline, with nothing.
    let deadline = Instant::now() + Duration::from_millis(50);
    assert_eq!(
        qa.cq.wait(1, deadline),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
    // A receive lets it through.
    qb.rq.post(9, b.buf.slice(1024..2048).unwrap()).unwrap();
    assert_eq!(qa.cq.wait(1, soon()).unwrap()[0].status, WcStatus::Success);
    let r = qb.cq.wait(1, soon()).unwrap()[0];
    assert_eq!(
        (r.wr_id, r.opcode, r.imm()),
        (9, WcOpcode::RecvRdmaWithImm, Some(7))
    );
}

#[test]
fn wait_keeps_what_arrived_for_the_next_call() {
    let Pair {
        a, b, mut qa, qb, ..
    } = pair(|c| c).unwrap();
    qa.sq
        .write(1, a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    // Two asked for, one posted: the deadline ends the wait, and the one that came is kept.
    let deadline = Instant::now() + Duration::from_millis(50);
    assert_eq!(
        qa.cq.wait(2, deadline),
        Err(WaitError::Timeout { wanted: 2, got: 1 })
    );
    qa.sq
        .write(2, a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    let ids: Vec<u64> = qa
        .cq
        .wait(2, soon())
        .unwrap()
        .iter()
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(ids, [1, 2]);
    assert!(qa.cq.ready().is_empty());
    let capacity = qa.cq.capacity();
    assert_eq!(
        qa.cq.wait(capacity + 1, soon()),
        Err(WaitError::TooMany {
            count: capacity + 1,
            capacity
        })
    );
    drop(qb);
}

#[test]
fn queues_are_refused_before_their_qp_can_use_them() {
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let e = qp.queues(&cq).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotReady {
                queue: "send queue",
                state: QpState::Reset,
                needs: QpState::Rts,
                ..
            }
        ),
        "{e}"
    );
    let me = Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: 0,
        gid: local.gid,
    };
    let attr = ConnectAttr::new(port, 0, &me, local.gid_index);
    qp.to_init(&attr.init).unwrap();
    // Receives may be posted from INIT on, before the peer connects.
    let mut rq = qp.recv_queue().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    rq.post(1, buf.slice(..).unwrap()).unwrap();
    assert!(matches!(qp.send_queue(), Err(Error::NotReady { .. })));
    qp.to_rtr(&attr.rtr).unwrap();
    qp.to_rts(&attr.rts).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    let mut sq = qp.send_queue().unwrap();
    // Connected to itself: a SEND lands in the receive posted at INIT.
    buf.write(2048, b"to myself").unwrap();
    sq.send(2, buf.slice(2048..2057).unwrap(), SIG).unwrap();
    let mut cq = cq.poller().unwrap();
    let mut got: Vec<(u64, WcStatus)> = cq
        .wait(2, soon())
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let mut msg = [0u8; 9];
    buf.read(0, &mut msg).unwrap();
    assert_eq!(&msg, b"to myself");
}

#[test]
fn every_error_of_the_data_path_converts_with_question_mark() {
    let Pair {
        pd,
        a,
        b,
        mut qa,
        qb,
    } = pair(|c| c).unwrap();
    let ro = pd.alloc_buf(4096, AccessFlags::REMOTE_READ).unwrap();

    // A buffer access.
    let e = (|| -> zverbs::Result<()> {
        a.buf.slice(0..4097)?;
        Ok(())
    })()
    .unwrap_err();
    assert!(matches!(e, Error::Buf(_)), "{e}");

    // The safe layer's own refusal, and the queue's refusal through the safe layer.
    let mut read_into_read_only = || -> zverbs::Result<()> {
        qa.sq.read(1, ro.slice(0..8)?, b.buf.remote(0)?, SIG)?;
        Ok(())
    };
    let e = read_into_read_only().unwrap_err();
    assert!(
        matches!(e, Error::SafePost(SafePostError::NotWritable)),
        "{e}"
    );
    let mut too_long_inline = || -> zverbs::Result<()> {
        qa.sq
            .write_inline(2, &[0; 4096], b.buf.remote(0)?, SendFlags::NONE)?;
        Ok(())
    };
    let e = too_long_inline().unwrap_err();
    assert!(
        matches!(e, Error::Post(PostError::InlineTooLarge { .. })),
        "{e}"
    );

    // The core traits' post and batch errors.
    let sgl = [a.buf.sge(0..8).unwrap()];
    let nine = [a.buf.sge(0..8).unwrap(); 9];
    let mut core_post = || -> zverbs::Result<()> {
        // SAFETY: refused before anything is written (more entries than the queue allows).
        unsafe { qa.sq.post(&SendWr::send(3, &nine)) }?;
        Ok(())
    };
    let e = core_post().unwrap_err();
    assert!(
        matches!(e, Error::Post(PostError::TooManySges { .. })),
        "{e}"
    );
    let mut core_batch = || -> zverbs::Result<()> {
        let wrs = [SendWr::send(4, &sgl), SendWr::send(5, &nine)];
        // SAFETY: refused before anything is written (the second request has too many
        // entries).
        unsafe { qa.sq.post_all(&wrs) }?;
        Ok(())
    };
    let e = core_batch().unwrap_err();
    assert!(matches!(e, Error::Batch(b) if b.index == 1), "{e}");

    // A wait that ends at its deadline.
    let e = (|| -> zverbs::Result<()> {
        qa.cq.wait(1, now())?;
        Ok(())
    })()
    .unwrap_err();
    assert!(matches!(e, Error::Wait(WaitError::Timeout { .. })), "{e}");

    // A failed completion.
    let bad = RemoteBuf::new(b.buf.addr(), b.buf.rkey() ^ 0x0101_0000);
    let mut write_to_bad_key = || -> zverbs::Result<()> {
        qa.sq.write(6, a.buf.slice(0..8)?, bad, SIG)?;
        for c in qa.cq.wait(1, soon())? {
            c.ok()?;
        }
        Ok(())
    };
    let e = write_to_bad_key().unwrap_err();
    let Error::Completion(wc) = e else {
        panic!("{e}")
    };
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::RemAccessErr));
    assert!(
        Error::Completion(wc)
            .to_string()
            .contains("remote access error"),
        "{wc}"
    );
    drop(qb);
}

/// A prepared WRITE, WRITE with immediate and SEND post only what changes, through the direct
/// backend's prepared path; a span outside the prepared one, or a request prepared on another
/// queue, is refused with nothing written; a DC target on an RC queue is refused.
#[test]
fn prepared_requests_post_what_changes_and_refuse_what_reaches_outside() {
    let Pair {
        a,
        b,
        mut qa,
        mut qb,
        pd,
    } = pair(|c| c).unwrap();
    a.buf.write(0, b"0123456789abcdef").unwrap();
    let write = qa
        .sq
        .prepare_write(
            a.buf.slice(0..16).unwrap(),
            b.buf.remote(1024).unwrap(),
            SIG,
        )
        .unwrap();
    assert_eq!(write.span(), 16);
    // The whole span, then 4 bytes from offset 4 to 64 bytes past the prepared address.
    qa.sq.post_prepared(&write, Changes::new(1)).unwrap();
    qa.sq
        .post_prepared(&write, Changes::new(2).local(4, 4).remote_offset(64))
        .unwrap();
    let done: Vec<_> = qa
        .cq
        .wait(2, soon())
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(done, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let mut got = [0u8; 16];
    b.buf.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"0123456789abcdef");
    let mut four = [0u8; 4];
    b.buf.read(1024 + 64, &mut four).unwrap();
    assert_eq!(&four, b"4567");

    // Outside the prepared span: refused, nothing posted.
    let sent = qa.sq.mlx5_producer();
    for c in [
        Changes::new(3).local(12, 8),
        Changes::new(3).local(17, 0),
        Changes::new(3).local(u32::MAX, 2),
        Changes::new(3).remote_offset(u64::MAX),
    ] {
        assert!(
            matches!(
                qa.sq.post_prepared(&write, c),
                Err(SafePostError::OutsidePrepared { .. })
            ),
            "{c:?}"
        );
    }
    // Prepared on B's queue, posted on A's: refused.
    let other = qb
        .sq
        .prepare_write(b.buf.slice(0..16).unwrap(), a.buf.remote(0).unwrap(), SIG)
        .unwrap();
    assert_eq!(
        qa.sq.post_prepared(&other, Changes::new(4)),
        Err(SafePostError::ForeignPrepared)
    );
    assert_eq!(qa.sq.mlx5_producer(), sent, "nothing written");
    assert_eq!(
        qa.cq.wait(1, now()),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );

    // A SEND with immediate into B's receive; a READ needs a writable span.
    qb.rq
        .post(7, b.buf.slice(2048..2048 + 64).unwrap())
        .unwrap();
    let send = qa
        .sq
        .prepare_send_imm(a.buf.slice(0..16).unwrap(), SendFlags::NONE)
        .unwrap();
    qa.sq
        .post_prepared(&send, Changes::new(5).local(10, 6).imm(0xfeed))
        .unwrap();
    let r = qb.cq.wait(1, soon()).unwrap()[0];
    assert_eq!((r.wr_id, r.byte_len, r.imm()), (7, 6, Some(0xfeed)));
    let ro = pd.alloc_buf(64, AccessFlags::REMOTE_READ).unwrap();
    assert!(matches!(
        qa.sq
            .prepare_read(ro.slice(..).unwrap(), b.buf.remote(0).unwrap(), SIG),
        Err(SafePostError::NotWritable)
    ));
    // A DC target on an RC queue: refused, nothing written.
    let ctx = pd.context();
    let local = ctx.address(ctx.active_port().unwrap(), None).unwrap();
    let addr = zverbs::dc::DcAddr {
        lid: local.lid,
        gid: local.gid,
        dctn: 1,
        access_key: 1,
    };
    let peer = pd.dc_peer(&addr).unwrap();
    assert_eq!(
        qa.sq
            .to(&peer)
            .write(6, a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG),
        Err(SafePostError::Post(PostError::WrongTransport))
    );
    // Nor is a request prepared to a DC target or a UD destination on an RC queue.
    let to_dc =
        qa.sq
            .to(&peer)
            .prepare_write(a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG);
    assert_eq!(
        to_dc.map(drop),
        Err(SafePostError::Post(PostError::WrongTransport))
    );
    let ah = pd
        .create_ah(&zverbs::AhAttr {
            dlid: local.lid,
            port: 1,
            ..Default::default()
        })
        .unwrap();
    let ud = ah.target(b.qp.qpn(), 1);
    let to_ud = qa.sq.prepare_send_to(&ud, a.buf.slice(0..8).unwrap(), SIG);
    assert_eq!(
        to_ud.map(drop),
        Err(SafePostError::Post(PostError::WrongTransport))
    );
    assert_eq!(qa.sq.mlx5_producer(), sent + 1, "only the SEND");
    // An inline request is not prepared (its bytes are the request).
    assert!(matches!(
        qa.sq.prepare_write(
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(0).unwrap(),
            SIG | SendFlags::INLINE
        ),
        Err(SafePostError::Post(PostError::Unsupported))
    ));
}
