//! The software device checks the PSNs a connection was given, as a NIC does: a QP whose
//! `sq_psn` (RTS) is not the `rq_psn` (RTR) its peer expects never gets a request through.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::backend::Queues;
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, Completion, ConnectAttr, ContextOptions, PollCq, Registered, SendFlags, WcStatus,
};

fn wait<C: PollCq>(cq: &mut C, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut wc = [Completion::EMPTY; 8];
    let t0 = Instant::now();
    while out.len() < n {
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {out:?}");
    }
    out
}

#[test]
fn mismatched_psns_end_in_retry_exceeded_and_write_nothing() {
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let b_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let a_cq = ctx.cq_builder().cqe(16).build().unwrap();
    let b_cq = ctx.cq_builder().cqe(16).build().unwrap();
    let a = pd.qp_builder(&a_cq, &a_cq).build().unwrap();
    let b = pd.qp_builder(&b_cq, &b_cq).build().unwrap();
    let ea = Endpoint {
        lid: local.lid,
        qpn: a.qpn(),
        psn: 0x11,
        gid: local.gid,
    };
    let eb = Endpoint {
        qpn: b.qpn(),
        psn: 0x20,
        ..ea
    };
    // A sends from 0x11; B was told A starts at 0x10. (A requester exactly one message
    // behind would be taken for a duplicate of the responder's last request and acknowledged,
    // as on IB: see docs/sim.md.)
    a.connect_with(&ConnectAttr::new(port, ea.psn, &eb, local.gid_index))
        .unwrap();
    let wrong = Endpoint { psn: 0x10, ..ea };
    b.connect_with(&ConnectAttr::new(port, eb.psn, &wrong, local.gid_index))
        .unwrap();

    let Queues::Direct(qa) = Queues::take(&a, &a_cq).unwrap() else {
        panic!("the software device has only the direct backend");
    };
    let mut sq = zverbs::SendQueue::from(qa.sq);
    let mut cq = qa.cq;
    a_buf.write(0, b"must not arrive").unwrap();
    sq.write(
        1,
        a_buf.slice(0..15).unwrap(),
        b_buf.remote(0).unwrap(),
        SendFlags::SIGNALED,
    )
    .unwrap();
    let w = wait(&mut cq, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (1, WcStatus::RetryExcErr),
        "{w:?}"
    );
    assert_eq!(w[0].vendor_err, u32::from(zverbs::sim::vendor::RETRY));
    let mut got = [0xffu8; 15];
    b_buf.read(0, &mut got).unwrap();
    assert_eq!(got, [0; 15], "nothing written in B's memory");
}
