//! The software mlx5 device through the public control path: listed, opened, queues created
//! and connected with the same calls as a NIC, driven by the direct backend, torn down in any
//! order.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::backend::Queues;
use zverbs::connect::{Endpoint, random_psn};
use zverbs::{
    AccessFlags, BackendKind, Completion, ConnectAttr, ContextOptions, PollCq, Registered,
    SendFlags, WcOpcode, WcStatus,
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
fn software_device_runs_the_direct_path_through_the_control_path() {
    let list = zverbs::devices().unwrap();
    let dev = list
        .iter()
        .find(|d| d.is_software())
        .expect("always listed");
    let ctx = dev.open_with(&ContextOptions::default()).unwrap();
    assert_eq!(ctx.name(), "zverbs_sim0");
    assert!(!ctx.atomics_big_endian());
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let b_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let a_cq = ctx.cq_builder().cqe(32).build().unwrap();
    let b_cq = ctx.cq_builder().cqe(32).build().unwrap();
    let a = pd.qp_builder(&a_cq, &a_cq).build().unwrap();
    let b = pd.qp_builder(&b_cq, &b_cq).build().unwrap();
    assert_eq!(a.backend().kind, BackendKind::Direct, "{}", a.backend());
    let ea = Endpoint {
        lid: local.lid,
        qpn: a.qpn(),
        psn: random_psn(),
        gid: local.gid,
    };
    let eb = Endpoint {
        qpn: b.qpn(),
        psn: random_psn(),
        ..ea
    };
    a.connect_with(&ConnectAttr::new(port, ea.psn, &eb, local.gid_index))
        .unwrap();
    b.connect_with(&ConnectAttr::new(port, eb.psn, &ea, local.gid_index))
        .unwrap();

    let Queues::Direct(qa) = Queues::take(&a, &a_cq).unwrap() else {
        panic!("the software device has only the direct backend");
    };
    let mut sq = zverbs::SendQueue::from(qa.sq);
    let mut cq = qa.cq;
    let sig = SendFlags::SIGNALED;

    a_buf
        .write(0, b"direct path on the software device")
        .unwrap();
    sq.write(
        1,
        a_buf.slice(0..34).unwrap(),
        b_buf.remote(64).unwrap(),
        sig,
    )
    .unwrap();
    let w = wait(&mut cq, 1);
    assert!(
        w[0].is_success() && w[0].opcode == WcOpcode::RdmaWrite,
        "{w:?}"
    );
    let mut got = [0u8; 34];
    b_buf.read(64, &mut got).unwrap();
    assert_eq!(&got, b"direct path on the software device");

    b_buf.write(1000, b"read me").unwrap();
    sq.read(
        2,
        a_buf.slice(200..207).unwrap(),
        b_buf.remote(1000).unwrap(),
        sig,
    )
    .unwrap();
    let w = wait(&mut cq, 1);
    assert_eq!((w[0].opcode, w[0].byte_len), (WcOpcode::RdmaRead, 7));
    let mut got = [0u8; 7];
    a_buf.read(200, &mut got).unwrap();
    assert_eq!(&got, b"read me");

    b_buf.store_u64(2048, 40).unwrap();
    sq.fetch_add(
        3,
        a_buf.slice(2048..2056).unwrap(),
        b_buf.remote(2048).unwrap(),
        2,
        sig,
    )
    .unwrap();
    let w = wait(&mut cq, 1);
    assert_eq!(w[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(a_buf.load_u64(2048).unwrap(), 40);
    assert_eq!(b_buf.load_u64(2048).unwrap(), 42);

    let bad = zverbs::RemoteBuf::new(b_buf.addr(), b_buf.rkey() ^ 0x0101_0000);
    sq.write(4, a_buf.slice(0..8).unwrap(), bad, sig).unwrap();
    let w = wait(&mut cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::RemAccessErr));

    // Teardown in an order where parents go first: children keep them alive.
    drop(pd);
    drop(ctx);
    drop((sq, cq));
    drop((a, b, a_cq, b_cq, a_buf, b_buf));
}

#[test]
fn a_qp_on_the_software_device_takes_requests_only_from_its_peer() {
    // QPs A, B, C, D. C names A before A has a peer; then A and B name each other. A accepts
    // only B: D cannot connect to it any more, and C's SEND never reaches it.
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cqs: Vec<_> = (0..4)
        .map(|_| ctx.cq_builder().cqe(16).build().unwrap())
        .collect();
    let qps: Vec<_> = cqs
        .iter()
        .map(|cq| pd.qp_builder(cq, cq).build().unwrap())
        .collect();
    let bufs: Vec<_> = (0..4)
        .map(|_| pd.alloc_buf(4096, AccessFlags::ALL).unwrap())
        .collect();
    // One PSN per QP, the same each time its endpoint is named (the device checks them).
    let psns: Vec<u32> = (0..4).map(|_| random_psn()).collect();
    let ep = |i: usize| Endpoint {
        lid: local.lid,
        qpn: qps[i].qpn(),
        psn: psns[i],
        gid: local.gid,
    };
    let connect = |i: usize, peer: &Endpoint| {
        qps[i].connect_with(&ConnectAttr::new(port, ep(i).psn, peer, local.gid_index))
    };
    let (a, b, c, d) = (0, 1, 2, 3);
    connect(b, &ep(a)).unwrap();
    connect(c, &ep(a)).unwrap();
    connect(a, &ep(b)).unwrap();
    let e = connect(d, &ep(a)).unwrap_err();
    assert!(
        e.to_string().contains("connected to another QP"),
        "naming a QP that names another is refused: {e}"
    );
    // A peer on another LID is not on this device.
    let far = Endpoint { lid: 7, ..ep(a) };
    let e = connect(d, &far).unwrap_err();
    assert!(e.to_string().contains("LID"), "{e}");

    let take = |i: usize| match Queues::take(&qps[i], &cqs[i]).unwrap() {
        Queues::Direct(q) => q,
        Queues::DirectUd(_) | Queues::Verbs(_) => panic!("RC QPs on the direct backend"),
    };
    let (qa, qb, qc) = (take(a), take(b), take(c));
    let mut rqa = zverbs::RecvQueue::from(qa.rq);
    let mut cqa = qa.cq;
    rqa.post(0xa1, bufs[a].slice(0..64).unwrap()).unwrap();

    let sig = SendFlags::SIGNALED;
    bufs[c].write(0, b"from c").unwrap();
    let mut sqc = zverbs::SendQueue::from(qc.sq);
    let mut cqc = qc.cq;
    sqc.send(1, bufs[c].slice(0..6).unwrap(), sig).unwrap();
    let w = wait(&mut cqc, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (1, WcStatus::RetryExcErr),
        "{w:?}"
    );
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(
        cqa.poll(&mut wc),
        0,
        "C's SEND never reached A: {:?}",
        wc[0]
    );

    bufs[b].write(0, b"from b").unwrap();
    let mut sqb = zverbs::SendQueue::from(qb.sq);
    let mut cqb = qb.cq;
    sqb.send(2, bufs[b].slice(0..6).unwrap(), sig).unwrap();
    assert!(wait(&mut cqb, 1)[0].is_success());
    let w = wait(&mut cqa, 1);
    assert_eq!((w[0].wr_id, w[0].opcode), (0xa1, WcOpcode::Recv), "{w:?}");
    let mut got = [0u8; 6];
    bufs[a].read(0, &mut got).unwrap();
    assert_eq!(&got, b"from b");
}

#[test]
fn sizes_the_software_device_cannot_hold_are_errors_not_panics() {
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(8).build().unwrap();
    let qp = || pd.qp_builder(&cq, &cq);
    for (built, limit) in [
        (
            qp().max_recv_wr((1 << 31) + 1).build(),
            "max_recv_wr above 32768",
        ),
        (
            qp().max_recv_wr(u32::MAX).build(),
            "max_recv_wr above 32768",
        ),
        (
            qp().max_send_wr(u32::MAX).build(),
            "max_send_wr above 32768",
        ),
        (qp().max_send_sge(u32::MAX).build(), "max_send_sge above 61"),
        (qp().max_recv_sge(u32::MAX).build(), "max_recv_sge above 64"),
        (
            qp().max_inline_data(u32::MAX).build(),
            "max_inline_data above 972",
        ),
    ] {
        let e = built.unwrap_err();
        assert!(e.to_string().contains(limit), "{e}: not {limit:?}");
    }
    let e = ctx.cq_builder().cqe(u32::MAX).build().unwrap_err();
    assert!(e.to_string().contains("2^22"), "{e}");
    // The device still serves: a QP of ordinary size builds.
    qp().max_recv_wr(32).build().unwrap();
}

#[test]
fn forcing_the_fallback_on_the_software_device_is_a_clear_error() {
    let ctx = zverbs::open_device(
        Some("zverbs_sim0"),
        &ContextOptions::default().backend(zverbs::BackendRequest::Verbs),
    )
    .unwrap();
    let e = ctx.cq_builder().cqe(8).build().unwrap_err();
    assert!(e.to_string().contains("only the direct backend"), "{e}");
}

#[test]
fn dropped_queues_free_the_software_devices_tables() {
    // The device's tables hold 1024 QPs and 1024 CQs: creating and dropping more than that
    // one after another works only if drops destroy.
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    for _ in 0..1100 {
        let cq = ctx.cq_builder().cqe(4).build().unwrap();
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(4)
            .max_recv_wr(4)
            .build()
            .unwrap();
        drop((qp, cq));
    }
}
