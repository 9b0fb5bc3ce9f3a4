//! UD sends, multicast and shared receive queues through `Qp::queues` / `Srq::queue` on the
//! software device (the direct backend).
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use ud::{Expect, GRH, QKEY, check_datagram};
use zverbs::{
    AccessFlags, AhAttr, Completion, ContextOptions, MULTICAST_QPN, PollCq, PostRecv, RecvWr,
    Registered, SendFlags, SendQueue, UdAttr, WcOpcode,
};

/// Shared with the device tests (`device_ud.rs`).
#[path = "device/ud.rs"]
mod ud;

fn ctx() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[test]
fn ud_send_and_send_imm_reach_the_peer_with_the_senders_address() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (
        ctx.cq_builder().cqe(256).build().unwrap(),
        ctx.cq_builder().cqe(256).build().unwrap(),
    );
    let a = pd.qp_builder(&cq_a, &cq_a).ud().build().unwrap();
    let b = pd.qp_builder(&cq_b, &cq_b).ud().build().unwrap();
    a.ready_ud(&UdAttr::new(QKEY)).unwrap();
    b.ready_ud(&UdAttr::new(QKEY)).unwrap();
    assert!(a.send_caps().is_ud());
    let lid = ctx.port(1).unwrap().lid;
    let ah = pd
        .create_ah(&AhAttr {
            dlid: lid,
            port: 1,
            ..AhAttr::default()
        })
        .unwrap();
    let dest = ah.target(b.qpn(), QKEY);
    assert_eq!(
        (dest.dest().remote_qpn, dest.dest().qkey, &dest.dest().av),
        (b.qpn(), QKEY, ah.av().unwrap())
    );
    let sbuf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let rbuf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let (mut qa, mut qb) = (a.queues(&cq_a).unwrap(), b.queues(&cq_b).unwrap());
    // A UD receive starts with the 40-byte GRH area.
    qb.rq.post(1, rbuf.slice(0..GRH + 64).unwrap()).unwrap();
    qb.rq
        .post(2, rbuf.slice(1024..1024 + GRH + 64).unwrap())
        .unwrap();
    sbuf.write(0, b"datagram").unwrap();
    qa.sq
        .send_to(10, sbuf.slice(0..8).unwrap(), &dest, SendFlags::SIGNALED)
        .unwrap();
    qa.sq
        .send_to_imm(
            11,
            sbuf.slice(0..5).unwrap(),
            &dest,
            0xfeed,
            SendFlags::SIGNALED,
        )
        .unwrap();
    let sent: Vec<Completion> = qa.cq.wait(2, deadline()).unwrap().to_vec();
    assert_eq!((sent[0].wr_id, sent[1].wr_id), (10, 11));
    assert!(sent.iter().all(|c| c.status.is_success()));
    let got: Vec<Completion> = qb.cq.wait(2, deadline()).unwrap().to_vec();
    for c in &got {
        assert_eq!(c.slid, lid, "{c:?}");
    }
    // No GRH: an address handle without one, to a LID.
    let e = |wr_id, data, imm| Expect {
        wr_id,
        qp_num: b.qpn(),
        src_qp: a.qpn(),
        data,
        imm,
        grh: false,
    };
    check_datagram(&got[0], &e(1, b"datagram", None), &rbuf, 0, 0, 0);
    check_datagram(&got[1], &e(2, b"datag", Some(0xfeed)), &rbuf, 1024, 0, 0);
    // An RC operation is refused on a UD queue, a datagram above the MTU too.
    let big = (a.send_caps().max_inline_data as usize).max(4096);
    let big = pd.alloc_buf(big + 1, AccessFlags::ALL).unwrap();
    assert!(
        qa.sq
            .send(12, sbuf.slice(0..8).unwrap(), SendFlags::SIGNALED)
            .is_err()
    );
    assert!(
        qa.sq
            .send_to(13, big.slice(..).unwrap(), &dest, SendFlags::SIGNALED)
            .is_err()
    );
}

/// A UD SEND prepared to its destination (`prepare_send_to`, `_imm`) and posted with what
/// changes reaches the peer as an ordinary one does. Refused with nothing written: an RC
/// operation or a SEND without destination prepared on a UD queue, a span above the path MTU,
/// an address handle of another PD, a span outside the prepared one, and a request prepared
/// on another queue.
#[test]
fn prepared_datagrams_carry_their_destination() {
    use zverbs::safe::SafePostError;
    use zverbs::{Changes, PostError};
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cqs: Vec<_> = (0..3)
        .map(|_| ctx.cq_builder().cqe(256).build().unwrap())
        .collect();
    let qps: Vec<_> = cqs
        .iter()
        .map(|cq| pd.qp_builder(cq, cq).ud().build().unwrap())
        .collect();
    for qp in &qps {
        qp.ready_ud(&UdAttr::new(QKEY)).unwrap();
    }
    let (a, b, c) = (&qps[0], &qps[1], &qps[2]);
    let lid = ctx.port(1).unwrap().lid;
    let attr = AhAttr {
        dlid: lid,
        port: 1,
        ..AhAttr::default()
    };
    let dest = pd.create_ah(&attr).unwrap().target(b.qpn(), QKEY);
    let mtu = ctx.port(1).unwrap().active_mtu.bytes() as usize;
    let sbuf = pd.alloc_buf(2 * mtu + 4096, AccessFlags::ALL).unwrap();
    let rbuf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut qa = a.queues(&cqs[0]).unwrap();
    let mut qb = b.queues(&cqs[1]).unwrap();
    let mut qc = c.queues(&cqs[2]).unwrap();
    qb.rq.post(1, rbuf.slice(0..GRH + 64).unwrap()).unwrap();
    qb.rq
        .post(2, rbuf.slice(1024..1024 + GRH + 64).unwrap())
        .unwrap();
    sbuf.write(0, b"prepared datagram").unwrap();
    let sig = SendFlags::SIGNALED;
    let send = qa
        .sq
        .prepare_send_to(&dest, sbuf.slice(0..17).unwrap(), sig)
        .unwrap();
    let send_imm = qa
        .sq
        .prepare_send_to_imm(&dest, sbuf.slice(0..17).unwrap(), sig)
        .unwrap();
    qa.sq.post_prepared(&send, Changes::new(10)).unwrap();
    qa.sq
        .post_prepared(&send_imm, Changes::new(11).local(9, 8).imm(0xfeed))
        .unwrap();
    let sent: Vec<_> = qa
        .cq
        .wait(2, deadline())
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status.is_success()))
        .collect();
    assert_eq!(sent, [(10, true), (11, true)]);
    let got: Vec<Completion> = qb.cq.wait(2, deadline()).unwrap().to_vec();
    let e = |wr_id, data, imm| Expect {
        wr_id,
        qp_num: b.qpn(),
        src_qp: a.qpn(),
        data,
        imm,
        grh: false,
    };
    check_datagram(&got[0], &e(1, b"prepared datagram", None), &rbuf, 0, 0, 0);
    check_datagram(&got[1], &e(2, b"datagram", Some(0xfeed)), &rbuf, 1024, 0, 0);

    // Refused, nothing written.
    let before = a.outstanding();
    let wrong = |r: Result<zverbs::Prepared<'_>, SafePostError>| {
        r.map(drop) == Err(SafePostError::Post(PostError::WrongTransport))
    };
    let remote = rbuf.remote(0).unwrap();
    assert!(wrong(qa.sq.prepare_write(
        sbuf.slice(0..8).unwrap(),
        remote,
        sig
    )));
    assert!(wrong(qa.sq.prepare_send(sbuf.slice(0..8).unwrap(), sig)));
    let long = qa
        .sq
        .prepare_send_to(&dest, sbuf.slice(0..mtu + 1).unwrap(), sig);
    assert!(
        matches!(
            long,
            Err(SafePostError::Post(PostError::DatagramTooLong { .. }))
        ),
        "{long:?}"
    );
    let other_pd = ctx.alloc_pd().unwrap();
    let far = other_pd.create_ah(&attr).unwrap().target(b.qpn(), QKEY);
    let foreign = qa.sq.prepare_send_to(&far, sbuf.slice(0..8).unwrap(), sig);
    assert_eq!(foreign.map(drop), Err(SafePostError::ForeignTarget));
    for ch in [Changes::new(12).local(10, 8), Changes::new(12).local(18, 0)] {
        assert!(
            matches!(
                qa.sq.post_prepared(&send, ch),
                Err(SafePostError::OutsidePrepared { .. })
            ),
            "{ch:?}"
        );
    }
    assert_eq!(a.outstanding(), before);
    let before_c = c.outstanding();
    assert_eq!(
        qc.sq.post_prepared(&send, Changes::new(13)),
        Err(SafePostError::ForeignPrepared)
    );
    assert_eq!(c.outstanding(), before_c);
}

#[test]
fn a_datagram_to_a_group_reaches_every_attached_qp() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let mgid = ud::mgid(7);
    let mlid = 0xc007;
    let cqs: Vec<_> = (0..3)
        .map(|_| ctx.cq_builder().cqe(256).build().unwrap())
        .collect();
    let qps: Vec<_> = cqs
        .iter()
        .map(|cq| pd.qp_builder(cq, cq).ud().build().unwrap())
        .collect();
    for qp in &qps {
        qp.ready_ud(&UdAttr::new(QKEY)).unwrap();
    }
    qps[1].attach_mcast(&mgid, mlid).unwrap();
    qps[2].attach_mcast(&mgid, mlid).unwrap();
    let ah = pd
        .create_ah(&AhAttr {
            dlid: mlid,
            port: 1,
            grh: Some(zverbs::GlobalRoute {
                dgid: mgid,
                sgid_index: 0,
                hop_limit: 1,
                traffic_class: 0,
                flow_label: 0,
            }),
            ..AhAttr::default()
        })
        .unwrap();
    let dest = ah.target(MULTICAST_QPN, QKEY);
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut q: Vec<_> = qps
        .iter()
        .zip(&cqs)
        .map(|(qp, cq)| qp.queues(cq).unwrap())
        .collect();
    for (i, r) in [(1usize, 1024usize), (2, 2048)] {
        q[i].rq
            .post(i as u64, buf.slice(r..r + GRH + 16).unwrap())
            .unwrap();
    }
    buf.write(0, b"to the group").unwrap();
    q[0].sq
        .send_to(7, buf.slice(0..12).unwrap(), &dest, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(q[0].cq.wait(1, deadline()).unwrap()[0].wr_id, 7);
    for (i, r) in [(1usize, 1024usize), (2, 2048)] {
        let c = q[i].cq.wait(1, deadline()).unwrap()[0];
        // A multicast datagram carries a GRH.
        let e = Expect {
            wr_id: i as u64,
            qp_num: qps[i].qpn(),
            src_qp: qps[0].qpn(),
            data: b"to the group",
            imm: None,
            grh: true,
        };
        check_datagram(&c, &e, &buf, r, 0, 0);
    }
}

#[test]
fn rc_qps_on_one_srq_complete_receives_naming_their_qp() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let cq = ctx.cq_builder().cqe(256).build().unwrap();
    let peer_cq = ctx.cq_builder().cqe(256).build().unwrap();
    let ours: Vec<_> = (0..2)
        .map(|_| pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap())
        .collect();
    let peers: Vec<_> = (0..2)
        .map(|_| pd.qp_builder(&peer_cq, &peer_cq).build().unwrap())
        .collect();
    for (a, b) in ours.iter().zip(&peers) {
        zverbs::connect_pair(a, b).unwrap();
    }
    // Every QP on a direct SRQ completes its receives on one CQ.
    let other = ctx.cq_builder().cqe(8).build().unwrap();
    assert!(pd.qp_builder(&other, &other).srq(&srq).build().is_err());
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut rq = srq.queue().unwrap();
    assert!(srq.queue().is_err());
    for i in 0..4u64 {
        let sgl = [buf.sge(i as usize * 64..(i as usize + 1) * 64).unwrap()];
        // SAFETY: the buffer is registered, outlives the receives, and is read only after
        // their completions.
        unsafe { PostRecv::post(&mut rq, &RecvWr::new(100 + i, &sgl)) }.unwrap();
    }
    let mut poller = cq.poller().unwrap();
    let mut senders: Vec<SendQueue> = peers.iter().map(|p| p.send_queue().unwrap()).collect();
    let mut peer_poller = peer_cq.poller().unwrap();
    let src = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
    src.write(0, b"0123456789").unwrap();
    for (k, i) in [1usize, 0, 1].into_iter().enumerate() {
        let sgl = [src.sge(0..1 + k).unwrap()];
        let wr = zverbs::SendWr::send(k as u64, &sgl).signaled();
        // SAFETY: registered memory that lives until the completion is polled below.
        unsafe { zverbs::PostSend::post(&mut senders[i], &wr) }.unwrap();
    }
    let mut got = Vec::new();
    let mut out = [Completion::default(); 8];
    let end = deadline();
    while got.len() < 3 && Instant::now() < end {
        let n = poller.poll(&mut out);
        got.extend_from_slice(&out[..n]);
    }
    let mut done = 0;
    while done < 3 && Instant::now() < end {
        done += peer_poller.poll(&mut out);
    }
    assert_eq!(done, 3);
    let mut seen: Vec<(u32, u32, u64)> = got
        .iter()
        .map(|c| {
            assert!(c.status.is_success(), "{c:?}");
            assert_eq!(c.opcode, WcOpcode::Recv);
            // The message landed in the receive the completion names.
            let mut data = vec![0u8; c.byte_len as usize];
            buf.read((c.wr_id - 100) as usize * 64, &mut data).unwrap();
            assert_eq!(data, b"0123456789"[..c.byte_len as usize]);
            (c.byte_len, c.qp_num, c.wr_id)
        })
        .collect();
    seen.sort();
    // Each message completes on the QP it arrived on, from the SRQ's receives (the order
    // across QPs is the device's).
    let qpns: Vec<(u32, u32)> = seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(
        qpns,
        [(1, ours[1].qpn()), (2, ours[0].qpn()), (3, ours[1].qpn())]
    );
    let mut ids: Vec<u64> = seen.iter().map(|s| s.2).collect();
    ids.sort();
    assert_eq!(ids, [100, 101, 102]);
}
