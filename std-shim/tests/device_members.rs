//! QPs joining and leaving a CQ's poller after it was taken: QPs created while the poller
//! polls on another thread deliver their completions to it, and destroyed QPs leave it.
//!
//! Runs on the software device (with the `sim` feature) and on the device the environment
//! names (`ZVERBS_TEST_DEVICE`; docs/testing.md).

mod device;

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Instant;

use device::{COMPLETION_LIMIT, env, open, serial};
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, Completion, ConnectAttr, Context, PollCq, Qp, Registered, SendFlags, WcStatus,
};

const QPS: u64 = 6;

fn endpoint(ctx: &Context, gid: Option<u32>, qp: &Qp) -> (Endpoint, u8, Option<u32>) {
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, gid).unwrap();
    let e = Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: qp.psn(),
        gid: local.gid,
    };
    (e, port, local.gid_index)
}

fn connect(ctx: &Context, gid: Option<u32>, a: &Qp, b: &Qp) {
    let (ea, port, gi) = endpoint(ctx, gid, a);
    let (eb, _, _) = endpoint(ctx, gid, b);
    a.connect_with(&ConnectAttr::new(port, a.psn(), &eb, gi))
        .unwrap();
    b.connect_with(&ConnectAttr::new(port, b.psn(), &ea, gi))
        .unwrap();
}

/// The poller of CQ `cq` is taken and polls on its own thread; QPs on `cq` are created one by
/// one after it, each connected to a peer and WRITing (signaled) to it; every completion
/// reaches the poller. Then the QPs are dropped and leave the poller.
fn join_while_polling(ctx: &Context, gid: Option<u32>) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let peer_cq = ctx.cq_builder().cqe(64).build().unwrap();
    let mut poller = cq.poller().unwrap();
    let (got_tx, got_rx) = mpsc::channel::<Vec<(u64, WcStatus)>>();
    let (gone_tx, gone_rx) = mpsc::channel::<Vec<u32>>();
    let polling = std::thread::spawn(move || {
        let deadline = Instant::now() + COMPLETION_LIMIT;
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 8];
        while got.len() < QPS as usize {
            let n = poller.poll(&mut wc);
            got.extend(wc[..n].iter().map(|c| (c.wr_id, c.status)));
            assert!(Instant::now() < deadline, "completions so far: {got:?}");
        }
        got_tx.send(got).unwrap();
        // The QPs are dropped: the poller lets them go (at a poll that finds nothing).
        let gone = gone_rx.recv().unwrap();
        while gone.iter().any(|&q| poller.serves(q)) {
            assert_eq!(poller.poll(&mut wc), 0);
            assert!(Instant::now() < deadline, "destroyed QPs still served");
        }
    });
    // Created while the poller polls.
    let mut qps = Vec::new();
    for i in 0..QPS {
        // Each QP's share of its CQ: one receive and a few signaled sends (the CQ holds 64).
        let small = || pd.qp_builder(&cq, &cq).max_send_wr(8).max_recv_wr(1);
        let qp = small().build().unwrap();
        let peer = pd
            .qp_builder(&peer_cq, &peer_cq)
            .max_send_wr(8)
            .max_recv_wr(1)
            .build()
            .unwrap();
        connect(ctx, gid, &qp, &peer);
        let src = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
        let dst = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
        src.write(0, &(i + 1000).to_le_bytes()).unwrap();
        let mut sq = qp.send_queue().unwrap();
        sq.write(
            i,
            src.slice(0..8).unwrap(),
            dst.remote(0).unwrap(),
            SendFlags::SIGNALED,
        )
        .unwrap();
        qps.push((qp, peer, src, dst, sq));
    }
    let got = got_rx.recv().unwrap();
    let ids: HashSet<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(ids, (0..QPS).collect::<HashSet<_>>(), "{got:?}");
    assert!(got.iter().all(|g| g.1 == WcStatus::Success), "{got:?}");
    for (i, q) in qps.iter().enumerate() {
        let mut b = [0u8; 8];
        q.3.read(0, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), i as u64 + 1000, "QP {i}'s WRITE");
    }
    let qpns: Vec<u32> = qps.iter().map(|q| q.0.qpn()).collect();
    drop(qps);
    gone_tx.send(qpns).unwrap();
    polling.join().expect("the polling thread");
}

#[cfg(feature = "sim")]
#[test]
fn qps_join_and_leave_a_polling_poller_on_the_software_device() {
    join_while_polling(&open(zverbs::SOFTWARE_DEVICE), None);
}

#[test]
fn qps_join_and_leave_a_polling_poller_on_the_device() {
    let Some(env) = env() else { return };
    let _s = serial();
    join_while_polling(&open(&env.device), Some(env.gid_index));
}
