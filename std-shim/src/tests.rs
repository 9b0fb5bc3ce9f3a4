//! The control path end to end over the fake provider: object lifetimes, backend choice and
//! reports, queue handles, the safe layer, and error paths.

use std::sync::{Arc, Mutex};

use crate::backend::Queues;
use crate::backend::TypedSq;
use crate::backend::{BackendChoice, BackendRequest, RequestSource};
use crate::error::SafePostError;
use crate::fallback::fake::{self, with};
use crate::provider::fake::{FakeContext, Log};
use crate::*;

/// A context over a new fake device, set up by `f`, with the backend chosen by default; the
/// fake verbs are reset first.
fn ctx_with(log: &Log, f: impl FnOnce(&mut FakeContext)) -> Context {
    fake::reset(256);
    let mut c = FakeContext::new(log);
    f(&mut c);
    Context::from_provider(
        Box::new(c),
        BackendChoice {
            request: BackendRequest::Auto,
            source: RequestSource::Default,
        },
    )
}

/// A context over a new fake device as it comes (unit tests of other modules open it too).
pub(crate) fn ctx(log: &Log) -> Context {
    ctx_with(log, |_| {})
}

/// Takes `qp` to RTS (the fake provider accepts every transition), so that its queues can be
/// taken.
fn rts(qp: &Qp) {
    let peer = crate::types::endpoint::Endpoint::default();
    qp.connect_with(&ConnectAttr::new(1, 0, &peer, None))
        .unwrap();
}

/// A context on the fake device, driven directly, whose QPs all ring one BlueFlame register
/// (two 256-byte buffers) in memory the test reads: the context and the register.
fn ctx_on_shared_register(log: &Log) -> (Context, Arc<crate::provider::fake::SharedMem>) {
    use crate::provider::fake::{FakeBf, SharedMem};
    let reg = Arc::new(SharedMem::new(512));
    let ctx = ctx_with(log, |c| {
        c.direct = true;
        c.blueflame = FakeBf::Shared(256, reg.clone());
    });
    (ctx, reg)
}

/// An RC QP of `pd` on `cq` (both queues), 8 sends and 4 receives deep.
fn rc_qp(pd: &Pd, cq: &Cq) -> Qp {
    pd.qp_builder(cq, cq)
        .max_send_wr(8)
        .max_recv_wr(4)
        .build()
        .unwrap()
}

fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn events(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

fn pos(ev: &[String], what: &str) -> usize {
    ev.iter()
        .position(|e| e == what)
        .unwrap_or_else(|| panic!("{what} not in {ev:?}"))
}

/// Builds every object and hands them to `drop_in_order`, which drops them in its own order.
fn teardown_case(order: &[usize]) {
    let log = new_log();
    {
        let ctx = ctx(&log);
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buf(100, AccessFlags::ALL).unwrap();
        let cq = ctx.cq_builder().cqe(64).build().unwrap();
        let qp = pd.qp_builder(&cq, &cq).build().unwrap();
        rts(&qp);
        let queues = Queues::take(&qp, &cq).unwrap();
        let mut slots: Vec<Option<Box<dyn std::any::Any>>> = vec![
            Some(Box::new(ctx)),
            Some(Box::new(pd)),
            Some(Box::new(buf)),
            Some(Box::new(cq)),
            Some(Box::new(qp)),
            Some(Box::new(queues)),
        ];
        for &i in order {
            slots[i] = None;
            // Nothing is destroyed while a handle that needs it lives.
            let ev = events(&log);
            assert!(!ev.contains(&"close".to_string()) || slots.iter().all(Option::is_none));
        }
    }
    let ev = events(&log);
    // Children before parents, whatever order the handles went in.
    assert!(pos(&ev, "destroy_qp") < pos(&ev, "destroy_cq"), "{ev:?}");
    assert!(pos(&ev, "destroy_qp") < pos(&ev, "dealloc_pd"), "{ev:?}");
    assert!(pos(&ev, "dereg_mr") < pos(&ev, "dealloc_pd"), "{ev:?}");
    assert!(pos(&ev, "dealloc_pd") < pos(&ev, "close"), "{ev:?}");
    assert!(pos(&ev, "destroy_cq") < pos(&ev, "close"), "{ev:?}");
    assert_eq!(ev.last().map(String::as_str), Some("close"));
    for once in [
        "destroy_qp",
        "destroy_cq",
        "dealloc_pd",
        "dereg_mr",
        "close",
    ] {
        assert_eq!(
            ev.iter().filter(|e| *e == once).count(),
            1,
            "{once}: {ev:?}"
        );
    }
}

#[test]
fn teardown_is_correct_in_any_drop_order() {
    teardown_case(&[0, 1, 2, 3, 4, 5]); // parents first
    teardown_case(&[5, 4, 3, 2, 1, 0]); // children first
    teardown_case(&[3, 0, 5, 1, 4, 2]);
    teardown_case(&[4, 3, 1, 0, 2, 5]); // queues last
}

#[test]
fn backend_is_reported_with_its_reason() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    assert_eq!(cq.backend().kind, BackendKind::Verbs);
    assert!(cq.backend().reason.contains("not mlx5"), "{}", cq.backend());
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let r = qp.backend();
    assert_eq!(r.kind, BackendKind::Verbs);
    assert_eq!(r.choice.source, RequestSource::Default);
    let text = r.to_string();
    assert!(text.starts_with("verbs (libibverbs): "), "{text}");
    assert!(text.contains("requested auto (default)"), "{text}");
    // Direct forced on a device that cannot run it: an error naming why.
    let e = ctx
        .cq_builder()
        .backend(BackendRequest::Direct)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e}");
    assert!(e.to_string().contains("not mlx5"), "{e}");
    let e = pd
        .qp_builder(&cq, &cq)
        .backend(BackendRequest::Direct)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e}");
    // Verbs asked for explicitly is honoured and reported as the caller's.
    let cq2 = ctx
        .cq_builder()
        .backend(BackendRequest::Verbs)
        .build()
        .unwrap();
    assert_eq!(cq2.backend().choice.source, RequestSource::Caller);
}

#[test]
fn handles_are_taken_once_and_qps_may_come_after_the_poller() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    // Room for two QPs of the default sizes (each holds 128 receives and 128 signaled sends).
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    // No queue before the QP can use it: the receive queue from INIT, the send queue from RTS.
    assert_eq!(qp.state(), QpState::Reset);
    let e = qp.recv_queue().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotReady {
                queue: "receive queue",
                state: QpState::Reset,
                needs: QpState::Init,
                ..
            }
        ),
        "{e}"
    );
    let attr = ConnectAttr::new(1, 0, &crate::types::endpoint::Endpoint::default(), None);
    qp.to_init(&attr.init).unwrap();
    qp.to_rtr(&attr.rtr).unwrap();
    assert_eq!(qp.state(), QpState::Rtr);
    let e = qp.send_queue().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotReady {
                state: QpState::Rtr,
                needs: QpState::Rts,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "the send queue can be taken once the QP is in RTS, and it is in RTR: connect the QP \
         first (Qp::connect, or to_init, to_rtr and to_rts)"
    );
    assert!(matches!(qp.queues(&cq), Err(Error::NotReady { .. })));
    // Refused, not taken: the receive queue can be taken now, the send queue after RTS.
    let _rq = qp.recv_queue().unwrap();
    assert!(matches!(qp.recv_queue(), Err(Error::AlreadyTaken(_))));
    qp.to_rts(&attr.rts).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    let sq = qp.send_queue().unwrap();
    assert_eq!(sq.kind(), BackendKind::Verbs);
    assert!(matches!(
        qp.send_queue(),
        Err(Error::AlreadyTaken("send queue"))
    ));
    let mut p = cq.poller().unwrap();
    assert!(matches!(cq.poller(), Err(Error::AlreadyTaken("CQ poller"))));
    // A QP created after the poller is accepted: it joins the poller (tests/device_members.rs
    // on devices whose QPs have numbers of their own).
    assert!(p.serves(qp.qpn()));
    let _later = pd.qp_builder(&cq, &cq).build().unwrap();
    let mut wc = [zverbs_core::Completion::EMPTY; 4];
    assert_eq!(zverbs_core::PollCq::poll(&mut p, &mut wc), 0);
    // Queues::take wants the CQ that serves both queues.
    let other = ctx.cq_builder().build().unwrap();
    let qp2 = pd.qp_builder(&other, &other).build().unwrap();
    let third = ctx.cq_builder().build().unwrap();
    assert!(matches!(
        Queues::take(&qp2, &third),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn qp_caps_and_cq_share() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(100).build().unwrap();
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(64)
        .max_recv_wr(30)
        .max_send_sge(2)
        .build()
        .unwrap();
    assert_eq!(qp.caps().max_send_wr, 64);
    // Send and receive share the CQ: the send side may have 100 - 30 signaled outstanding,
    // clamped to the send queue's depth.
    assert_eq!(qp.send_caps().max_signaled, 64);
    // The CQ holds those entries for it: a second QP asking for more than is left is
    // refused.
    assert_eq!(cq.entries_left(), 100 - qp.caps().max_recv_wr - 64);
    let e = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(128)
        .max_recv_wr(90)
        .max_signaled(10)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::CqTooSmall { needed: 10, .. }), "{e}");
    drop(qp);
    // Alone on the CQ, but needing more than it holds (90 receives and 128 signaled sends):
    // half of it for the receives, half of the rest for the sends.
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(128)
        .max_recv_wr(90)
        .build()
        .unwrap();
    assert_eq!(
        (qp.caps().max_recv_wr, qp.send_caps().max_signaled),
        (50, 25)
    );
    let e = pd.qp_builder(&cq, &cq).max_recv_wr(0).build().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
}

#[test]
fn connect_runs_init_rtr_rts_with_the_attributes() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let addr = ctx.address(1, None).unwrap();
    // RoCE: the RoCE v2 GID with an IPv4 address is picked.
    assert_eq!(addr.gid_index, Some(1));
    assert_eq!(
        addr.gid.to_ipv4(),
        Some(std::net::Ipv4Addr::new(192, 168, 7, 1))
    );
    let remote = connect::Endpoint {
        lid: 0,
        qpn: 0x42,
        psn: 0x777,
        gid: addr.gid,
    };
    qp.connect_with(&ConnectAttr::new(1, 0x123, &remote, addr.gid_index))
        .unwrap();
    let ev = events(&log);
    let modifies: Vec<&String> = ev.iter().filter(|e| e.starts_with("modify")).collect();
    assert_eq!(
        modifies,
        [
            // STATE | PKEY_INDEX | PORT | ACCESS_FLAGS
            "modify state=1 mask=0x39",
            // STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
            "modify state=2 mask=0x129181",
            // STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
            "modify state=3 mask=0x12e01",
        ]
    );
}

#[test]
fn no_active_port_lists_the_ports() {
    let log = new_log();
    let ctx = ctx_with(&log, |c| c.ports = vec![PortState::Down, PortState::Init]);
    let e = ctx.active_port().unwrap_err();
    assert!(matches!(e, Error::NoActivePort { .. }), "{e}");
    let s = e.to_string();
    assert!(
        s.contains("fake0") && s.contains("port 1: DOWN") && s.contains("port 2: INIT"),
        "{s}"
    );
    let log2 = new_log();
    let ctx = ctx_with(&log2, |c| {
        c.ports = vec![PortState::Down, PortState::Active]
    });
    assert_eq!(ctx.active_port().unwrap(), 2);
}

#[test]
fn memlock_failure_says_ulimit() {
    let log = new_log();
    let ctx = ctx_with(&log, |c| c.reg_fail = Some(libc::ENOMEM));
    let pd = ctx.alloc_pd().unwrap();
    let e = pd.alloc_buf(1 << 20, AccessFlags::ALL).unwrap_err();
    assert!(matches!(e, Error::MemlockLimit { .. }), "{e}");
    assert!(e.to_string().contains("ulimit -l"), "{e}");
}

#[test]
fn safe_layer_posts_buffer_spans_with_their_keys() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let ro = pd.alloc_buf(4096, AccessFlags::REMOTE_READ).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    rts(&qp);
    let mut sq = qp.send_queue().unwrap();
    let mut rq = qp.recv_queue().unwrap();
    buf.write(8, b"payload!").unwrap();
    assert!(buf.slice(4000..4097).is_err());
    sq.send(1, buf.slice(8..16).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    sq.write_inline(2, b"tiny", buf.remote(0).unwrap(), SendFlags::NONE)
        .unwrap();
    assert_eq!(
        sq.read(
            3,
            ro.slice(0..8).unwrap(),
            buf.remote(0).unwrap(),
            SendFlags::NONE
        ),
        Err(SafePostError::NotWritable)
    );
    assert_eq!(
        sq.fetch_add(
            4,
            buf.slice(8..12).unwrap(),
            buf.remote(0).unwrap(),
            1,
            SendFlags::NONE
        ),
        Err(SafePostError::Post(PostError::AtomicSize { len: 4 }))
    );
    let s = with(|f| f.sends.clone());
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].sges[0], Sge::new(buf.addr() + 8, 8, 0x1111));
    assert_eq!(&s[0].payload[..8], b"payload!");
    assert_eq!(&s[1].payload[..4], b"tiny");
    assert_eq!((s[1].remote_addr, s[1].rkey), (buf.addr(), 0x2222));
    rq.post(9, buf.slice(0..64).unwrap()).unwrap();
    assert_eq!(
        rq.post(10, ro.slice(0..64).unwrap()),
        Err(SafePostError::NotWritable)
    );
    assert_eq!(with(|f| f.recvs.len()), 1);
}

/// On the fallback the prepared requests are served by ordinary posts: the same calls, the same
/// checks, and `ibv_post_send` gets the span and remote address each post names.
#[test]
fn prepared_requests_on_the_fallback_are_ordinary_posts() {
    use crate::sq::Changes;
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    rts(&qp);
    let mut sq = qp.send_queue().unwrap();
    assert_eq!(sq.kind(), crate::BackendKind::Verbs);
    let write = sq
        .prepare_write(
            buf.slice(64..128).unwrap(),
            buf.remote(1024).unwrap(),
            SendFlags::SIGNALED,
        )
        .unwrap();
    let send = sq
        .prepare_send_imm(buf.slice(0..32).unwrap(), SendFlags::NONE)
        .unwrap();
    sq.post_prepared(&write, Changes::new(1).local(8, 16).remote_offset(32))
        .unwrap();
    sq.post_prepared(&send, Changes::new(2).imm(0xbeef))
        .unwrap();
    assert!(matches!(
        sq.post_prepared(&write, Changes::new(3).local(60, 8)),
        Err(SafePostError::OutsidePrepared { .. })
    ));
    let s = with(|f| f.sends.clone());
    assert_eq!(s.len(), 2, "the refused post reached nothing");
    assert_eq!(s[0].sges[0], Sge::new(buf.addr() + 72, 16, 0x1111));
    assert_eq!((s[0].remote_addr, s[0].rkey), (buf.addr() + 1056, 0x2222));
    assert_eq!(s[1].sges[0], Sge::new(buf.addr(), 32, 0x1111));
}

/// On the fallback a UD SEND prepared to its destination is an ordinary SEND to it: the
/// `ibv_send_wr` carries the span each post names and the target's `wr.ud`, and no post
/// allocates; an RC operation or a SEND without destination on the UD queue, an address
/// handle of another PD and a span outside the prepared one are refused, nothing posted.
#[test]
fn prepared_datagrams_on_the_fallback_are_ordinary_sends_to_their_target() {
    use crate::sq::Changes;
    use zverbs_ffi::types::{IBV_WR_SEND, IBV_WR_SEND_WITH_IMM};
    let log = new_log();
    let ctx = ctx_with(&log, |c| c.set_ud());
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).ud().build().unwrap();
    qp.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
    let mut sq = qp.send_queue().unwrap();
    assert_eq!(sq.kind(), BackendKind::Verbs);
    let ah = pd.create_ah(&AhAttr::default()).unwrap();
    let dest = ah.target(0x42, 0x2222);
    let sig = SendFlags::SIGNALED;
    let send = sq
        .prepare_send_to(&dest, buf.slice(64..128).unwrap(), sig)
        .unwrap();
    let imm = sq
        .prepare_send_to_imm(&dest, buf.slice(0..32).unwrap(), SendFlags::NONE)
        .unwrap();
    let mut results = Vec::with_capacity(2);
    let allocs = crate::test_alloc::count_allocs(|| {
        results.push(sq.post_prepared(&send, Changes::new(1).local(8, 16)));
        results.push(sq.post_prepared(&imm, Changes::new(2).imm(0xbeef)));
    });
    assert_eq!(allocs, 0, "allocations posting prepared datagrams");
    assert_eq!(results, [Ok(()), Ok(())]);
    let s = with(|f| f.sends.clone());
    assert_eq!(s.len(), 2);
    let ud = Some((ah.as_raw() as usize, 0x42, 0x2222));
    assert_eq!(
        (s[0].opcode, s[0].sges[0], s[0].ud),
        (IBV_WR_SEND, Sge::new(buf.addr() + 72, 16, 0x1111), ud)
    );
    assert_eq!(
        (s[1].opcode, s[1].imm_data, s[1].sges[0], s[1].ud),
        (
            IBV_WR_SEND_WITH_IMM,
            0xbeef_u32.to_be(),
            Sge::new(buf.addr(), 32, 0x1111),
            ud
        )
    );
    let wrong = Err(SafePostError::Post(PostError::WrongTransport));
    let remote = buf.remote(0).unwrap();
    let write = sq.prepare_write(buf.slice(0..8).unwrap(), remote, sig);
    assert_eq!(write.map(drop), wrong);
    assert_eq!(
        sq.prepare_send(buf.slice(0..8).unwrap(), sig).map(drop),
        wrong
    );
    let other = ctx.alloc_pd().unwrap();
    let far = other
        .create_ah(&AhAttr::default())
        .unwrap()
        .target(0x42, 0x2222);
    let foreign = sq.prepare_send_to(&far, buf.slice(0..8).unwrap(), sig);
    assert_eq!(foreign.map(drop), Err(SafePostError::ForeignTarget));
    assert!(matches!(
        sq.post_prepared(&send, Changes::new(3).local(60, 8)),
        Err(SafePostError::OutsidePrepared { .. })
    ));
    assert_eq!(
        with(|f| f.sends.len()),
        2,
        "the refused ones reached nothing"
    );
    // The fallback sends a datagram through the handle's `ibv_ah`: one without is refused
    // when prepared, as its post would be.
    let ctx = ctx_with(&log, |c| {
        c.set_ud();
        c.ah_without_handle = true;
    });
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).ud().build().unwrap();
    qp.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
    let sq = qp.send_queue().unwrap();
    let dest = pd.create_ah(&AhAttr::default()).unwrap().target(0x42, 1);
    assert!(dest.dest().ah == 0);
    let none = sq.prepare_send_to(&dest, buf.slice(0..8).unwrap(), sig);
    assert_eq!(
        none.map(drop),
        Err(SafePostError::Post(PostError::Unsupported))
    );
}

/// On the software device, driven directly, a UD SEND and a DC WRITE prepared to their
/// targets post through the ordinary post with the target, allocating nothing; the bytes
/// arrive.
#[cfg(feature = "sim")]
#[test]
#[cfg_attr(
    miri,
    ignore = "opens the device list through libibverbs: Miri calls no C library"
)]
fn prepared_datagrams_and_dc_requests_post_without_allocating() {
    use crate::sq::Changes;
    use std::time::{Duration, Instant};
    let options = ContextOptions::default();
    let ctx = crate::open_device(Some(crate::SOFTWARE_DEVICE), &options).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(1 << 14, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().cqe(256).build().unwrap();
    let qp = || pd.qp_builder(&cq, &cq).max_send_wr(8).max_recv_wr(8);
    let (a, b) = (qp().ud().build().unwrap(), qp().ud().build().unwrap());
    a.ready_ud(&UdAttr::new(0x1111)).unwrap();
    b.ready_ud(&UdAttr::new(0x1111)).unwrap();
    let port = ctx.active_port().unwrap();
    let lid = ctx.port(port).unwrap().lid;
    let ah = pd
        .create_ah(&AhAttr {
            dlid: lid,
            port,
            ..AhAttr::default()
        })
        .unwrap();
    let dest = ah.target(b.qpn(), 0x1111);
    let srq = pd.create_srq(4, 1).unwrap();
    let dct = pd
        .qp_builder(&cq, &cq)
        .srq(&srq)
        .dc_target(7)
        .build()
        .unwrap();
    dct.ready_dc().unwrap();
    let dci = qp().dc_initiator().build().unwrap();
    dci.ready_dc().unwrap();
    let peer = pd.dc_peer(&dct.dc_addr().unwrap()).unwrap();
    let (mut usq, mut brq) = (a.send_queue().unwrap(), b.recv_queue().unwrap());
    let mut dsq = dci.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    brq.post(10, buf.slice(8192..8192 + 128).unwrap()).unwrap();
    brq.post(11, buf.slice(8448..8448 + 128).unwrap()).unwrap();
    buf.write(0, b"datagram").unwrap();
    buf.write(64, b"over DC!").unwrap();
    let sig = SendFlags::SIGNALED;
    let ud = usq
        .prepare_send_to(&dest, buf.slice(0..8).unwrap(), sig)
        .unwrap();
    let dc = dsq
        .to(&peer)
        .prepare_write(buf.slice(64..72).unwrap(), buf.remote(4096).unwrap(), sig)
        .unwrap();
    let mut results = Vec::with_capacity(4);
    let allocs = crate::test_alloc::count_allocs(|| {
        results.push(usq.post_prepared(&ud, Changes::new(1)));
        results.push(dsq.post_prepared(&dc, Changes::new(2)));
        results.push(usq.post_prepared(&ud, Changes::new(3).local(4, 4)));
        let c = Changes::new(4).local(5, 3).remote_offset(64);
        results.push(dsq.post_prepared(&dc, c));
    });
    assert_eq!(allocs, 0, "allocations posting prepared UD and DC requests");
    assert_eq!(results, [Ok(()), Ok(()), Ok(()), Ok(())]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ids: Vec<u64> = poller
        .wait(6, deadline)
        .unwrap()
        .iter()
        .map(|c| c.ok().unwrap().wr_id)
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4, 10, 11]);
    let bytes = |at: usize, len: usize| {
        let mut v = vec![0u8; len];
        buf.read(at, &mut v).unwrap();
        v
    };
    assert_eq!(bytes(4096, 8), b"over DC!");
    assert_eq!(bytes(4096 + 64, 3), b"DC!");
    // Each UD receive: 40 bytes for the GRH, then the datagram.
    assert_eq!(bytes(8192 + 40, 8), b"datagram");
    assert_eq!(bytes(8448 + 40, 4), b"gram");
}

#[test]
fn mr_buf_copies_in_and_out() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(10, AccessFlags::ALL).unwrap();
    assert_eq!(buf.len(), 4096);
    assert!(buf.addr().is_multiple_of(4096));
    assert_eq!((buf.lkey(), buf.rkey()), (0x1111, 0x2222));
    buf.write(100, b"abc").unwrap();
    let mut out = [0u8; 5];
    buf.read(99, &mut out).unwrap();
    assert_eq!(&out, b"\0abc\0");
    buf.store_u64(8, 0x0102_0304_0506_0708).unwrap();
    assert_eq!(buf.load_u64(8).unwrap(), 0x0102_0304_0506_0708);
    buf.fill(0..4096, 0xee).unwrap();
    assert_eq!(buf.load_u8(4095).unwrap(), 0xee);
    assert_eq!(
        buf.remote(16).unwrap(),
        RemoteBuf::new(buf.addr() + 16, 0x2222)
    );
    assert!(buf.write(4094, b"xyz").is_err());
    assert_eq!(
        buf.load_u8(4095).unwrap(),
        0xee,
        "a refused write writes nothing"
    );
}

#[test]
fn generic_code_runs_on_the_chosen_backend() {
    fn ping<S: PostSend, C: PollCq>(sq: &mut S, cq: &mut C, sge: Sge) -> usize {
        let sgl = [sge];
        // SAFETY: the fake provider only reads the request.
        unsafe { sq.post(&SendWr::send(5, &sgl).signaled()) }.unwrap();
        let mut wc = [Completion::EMPTY; 4];
        let n = cq.poll(&mut wc);
        assert_eq!(wc[0].wr_id, 5);
        n
    }
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    rts(&qp);
    with(|f| f.auto_complete = true);
    let sge = buf.sge(0..8).unwrap();
    let n = match Queues::take(&qp, &cq).unwrap() {
        Queues::Direct(mut q) => ping(&mut q.sq, &mut q.cq, sge),
        Queues::DirectUd(mut q) => ping(&mut q.sq, &mut q.cq, sge),
        Queues::Verbs(mut q) => ping(&mut q.sq, &mut q.cq, sge),
    };
    assert_eq!(n, 1);
}

#[test]
#[cfg_attr(miri, ignore = "loads libibverbs: Miri calls no C library")]
fn device_errors_without_hardware_are_clear() {
    // With the `sim` feature the software device is always listed, last (and without it,
    // never); a bogus name is not found (or, without rdma-core, the missing package is named).
    let list = devices().unwrap();
    let soft = cfg!(feature = "sim");
    assert_eq!(
        list.last()
            .is_some_and(|d| d.name() == "zverbs_sim0" && d.is_software()),
        soft
    );
    assert_eq!(
        list.iter().filter(|d| d.is_software()).count(),
        usize::from(soft)
    );
    match open_device(Some("no-such-dev"), &ContextOptions::default()).unwrap_err() {
        Error::DeviceNotFound { available, .. } => {
            assert_eq!(available.iter().any(|n| n == "zverbs_sim0"), soft)
        }
        Error::Library(e) => assert!(e.to_string().contains("libibverbs1")),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn direct_engine_plugs_in_through_the_provider_seam() {
    use crate::provider::fake::Block;
    let log = new_log();
    let mem = Arc::new(Mutex::new(Vec::new()));
    let ctx = ctx_with(&log, |c| {
        c.direct = true;
        c.mem = mem.clone();
    });
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    assert_eq!(cq.backend().kind, BackendKind::Direct);
    let qp = rc_qp(&pd, &cq);
    assert_eq!(qp.backend().kind, BackendKind::Direct);
    assert!(
        qp.backend().reason.contains("fake direct QP"),
        "{}",
        qp.backend()
    );
    // A verbs QP cannot share a direct CQ.
    let e = pd
        .qp_builder(&cq, &cq)
        .backend(BackendRequest::Verbs)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e}");
    rts(&qp);
    let Queues::Direct(mut q) = Queues::take(&qp, &cq).unwrap() else {
        panic!("expected the direct backend");
    };
    let sgl = [buf.sge(0..8).unwrap()];
    let remote = RemoteBuf::new(0x1000, 0x77);
    // SAFETY: nothing executes the request (the test plays the device).
    unsafe { q.sq.post(&SendWr::write(42, &sgl, remote).signaled()) }.unwrap();
    let (wqe, sq_dbrec) = {
        let m = mem.lock().unwrap();
        let qpm = &m[1];
        // SAFETY: the queue wrote the ring and doorbell record; nothing writes them now.
        unsafe { ((*qpm.ring.at(0)).0, u32::from_be(*qpm.dbrec.at(1))) }
    };
    // Control segment: opmod_idx_opcode = index 0, RDMA_WRITE; qpn_ds = QPN << 8 | 3 segments.
    assert_eq!(&wqe[0..4], &0x0000_0008u32.to_be_bytes());
    assert_eq!(&wqe[4..8], &((fake::QPN << 8) | 3).to_be_bytes());
    assert_eq!(wqe[11], 0x08, "CQ_UPDATE for a signaled request");
    assert_eq!(sq_dbrec, 1, "the doorbell record counts one basic block");
    // Play the device: a requester CQE for the WQE at counter 0, owner 0 (first pass).
    {
        let m = mem.lock().unwrap();
        let mut c = Block([0; 64]);
        c.0[56..60].copy_from_slice(&((0x08u32 << 24) | fake::QPN).to_be_bytes());
        // SAFETY: the CQE slot is the device's until it flips the owner byte (last).
        unsafe { *m[0].ring.at(0) = c };
    }
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(q.cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].qp_num),
        (42, WcOpcode::RdmaWrite, fake::QPN)
    );
    assert!(wc[0].is_success());
    // Everything still tears down in order with the direct handles out.
    drop((ctx, pd, cq));
    drop(qp);
    drop(q);
    drop(buf);
    let ev = events(&log);
    assert!(pos(&ev, "destroy_qp") < pos(&ev, "destroy_cq"), "{ev:?}");
    assert_eq!(ev.last().map(String::as_str), Some("close"));
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// The whole registered buffer as the software device sees it: a view of the registration
/// (what `zverbs_sim`'s engine builds for every span it moves).
fn device_view(buf: &MrBuf) -> zverbs_core::shared::SharedMem<'_> {
    let p = std::ptr::NonNull::new(std::ptr::with_exposed_provenance_mut(buf.addr() as usize));
    // SAFETY: the buffer's memory, registered, lives as long as `buf`; the device accesses a
    // registration only through views of it.
    unsafe { zverbs_core::shared::SharedMem::new(p.unwrap(), buf.len()) }
}

#[test]
fn mr_buf_is_shared_by_threads_and_the_device_without_data_races() {
    // Two program threads use every accessor on overlapping ranges of one buffer, some
    // starting or ending inside a word, while a third does what the software device's
    // progress thread does when an RDMA WRITE lands: copies a message in (partial words at
    // both ends) and stores its last byte with Release. Under Miri, any pair of accesses that
    // is a data race (or a mixed-size atomic race) fails the test.
    let rounds = if cfg!(miri) { 3 } else { 1000 };
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let incoming = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    incoming.write(0, &pattern(200, 3)).unwrap();
    std::thread::scope(|s| {
        let b = buf.clone();
        s.spawn(move || {
            for r in 0..rounds {
                let v = r as u8;
                b.write(3, &pattern(45, v)).unwrap();
                b.fill(60..77, v).unwrap();
                b.store_u8(101, v).unwrap();
                b.store_u8_release(102, v).unwrap();
                b.store_u64(104, u64::from(v)).unwrap();
            }
        });
        let b = buf.clone();
        s.spawn(move || {
            let mut got = [0; 120];
            for _ in 0..rounds {
                b.read(0, &mut got).unwrap();
                b.read(5, &mut got[..70]).unwrap();
                let _ = (
                    b.load_u8(101).unwrap(),
                    b.load_u8_acquire(102).unwrap(),
                    b.load_u8(50).unwrap(),
                );
                let _ = (b.load_u64(104).unwrap(), b.load_u64_acquire(8).unwrap());
                let _ = b.wait_u8(99, 0xff, std::time::Instant::now());
            }
        });
        let (to, from) = (device_view(&buf), device_view(&incoming));
        s.spawn(move || {
            for _ in 0..rounds {
                to.copy_from(7, &from, 0, 92).unwrap();
                to.store_u8_release(99, from.load_u8(92).unwrap()).unwrap();
            }
        });
    });
    // Each writer's last values are there.
    let r = (rounds - 1) as u8;
    assert_eq!(buf.load_u8(101).unwrap(), r);
    assert_eq!(buf.load_u64(104).unwrap(), u64::from(r));
    let mut got = [0; 2];
    buf.read(99, &mut got).unwrap();
    assert_eq!(got, [pattern(200, 3)[92], 0]);
}

#[test]
fn wait_u8_sees_the_value_and_the_whole_message_before_it() {
    let rounds = if cfg!(miri) { 2 } else { 200 };
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let far = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for r in 1..=rounds {
        let msg = pattern(99, r as u8);
        std::thread::scope(|s| {
            s.spawn(|| {
                buf.write(1, &msg).unwrap();
                buf.store_u8_release(100, r as u8).unwrap();
            });
            buf.wait_u8(100, r as u8, far).unwrap();
            let mut got = [0; 99];
            buf.read(1, &mut got).unwrap();
            assert_eq!(got[..], msg[..]);
        });
    }
    // A value that is already there is seen at once, even past the deadline.
    let past = std::time::Instant::now();
    assert_eq!(buf.wait_u8(100, rounds as u8, past), Ok(()));
}

#[test]
fn wait_u8_honours_its_deadline() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    buf.store_u8(10, 7).unwrap();
    let soon = std::time::Instant::now() + std::time::Duration::from_millis(20);
    assert_eq!(
        buf.wait_u8(10, 8, soon),
        Err(BufError::TimedOut {
            offset: 10,
            expected: 8,
            last: 7
        })
    );
    assert!(
        std::time::Instant::now() >= soon,
        "returned before the deadline"
    );
    // A bad offset is an error, not a panic or a wait.
    assert_eq!(
        buf.wait_u8(4096, 0, soon),
        Err(BufError::OutOfBounds {
            offset: 4096,
            len: 1,
            buf_len: 4096
        })
    );
}

#[test]
fn buffer_sizes_that_would_wrap_are_refused() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    for len in [usize::MAX, usize::MAX - 4095, isize::MAX as usize, 1 << 63] {
        let e = pd.alloc_buf(len, AccessFlags::ALL).unwrap_err();
        assert!(
            matches!(e, Error::Buf(BufError::TooLarge { requested }) if requested == len),
            "{len}: {e}"
        );
        assert!(
            e.to_string().contains("larger than the address space"),
            "{e}"
        );
        let e = pd.alloc_buf_hugepages(len, AccessFlags::ALL).unwrap_err();
        assert!(
            matches!(e, Error::Buf(BufError::TooLarge { .. })),
            "{len}: {e}"
        );
    }
    // Nothing was registered for them.
    assert!(
        !events(&log).iter().any(|e| e == "reg_mr"),
        "{:?}",
        events(&log)
    );
}

#[test]
fn mr_buf_refuses_bad_offsets_and_lengths() {
    let log = new_log();
    let ctx = ctx(&log);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let oob = |offset, len| BufError::OutOfBounds {
        offset,
        len,
        buf_len: 4096,
    };
    let max = usize::MAX;
    // Copies: past the end, and ranges whose end overflows.
    assert_eq!(buf.write(4094, b"xyz"), Err(oob(4094, 3)));
    assert_eq!(buf.write(max - 1, b"xyz"), Err(oob(max - 1, 3)));
    assert_eq!(buf.read(max, &mut [0; 2]), Err(oob(max, 2)));
    assert_eq!(buf.read(4097, &mut []), Err(oob(4097, 0)));
    assert_eq!(buf.fill(4000..4097, 1), Err(oob(4000, 97)));
    assert_eq!(buf.fill(1..max, 1), Err(oob(1, max - 1)));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 9..8;
    assert_eq!(
        buf.fill(reversed.clone(), 1),
        Err(BufError::ReversedRange { start: 9, end: 8 })
    );
    // Single bytes and words.
    assert_eq!(buf.load_u8(4096), Err(oob(4096, 1)));
    assert_eq!(buf.load_u8_acquire(max), Err(oob(max, 1)));
    assert_eq!(buf.store_u8(max, 1), Err(oob(max, 1)));
    assert_eq!(buf.store_u8_release(4096, 1), Err(oob(4096, 1)));
    assert_eq!(buf.load_u64(12), Err(BufError::Misaligned { offset: 12 }));
    assert_eq!(buf.load_u64(4096), Err(oob(4096, 8)));
    assert_eq!(buf.load_u64_acquire(max - 7), Err(oob(max - 7, 8)));
    assert_eq!(buf.store_u64(4, 1), Err(BufError::Misaligned { offset: 4 }));
    assert_eq!(buf.store_u64(max, 1), Err(oob(max, 8)));
    // Remote targets: up to the end (a zero-length request), not past it.
    assert_eq!(
        buf.remote(4096),
        Ok(RemoteBuf::new(buf.addr() + 4096, 0x2222))
    );
    assert_eq!(buf.remote(4097), Err(oob(4097, 0)));
    assert_eq!(buf.remote(usize::MAX), Err(oob(max, 0)));
    // Scatter entries and slices: out of bounds, reversed or overflowing are errors.
    assert_eq!(buf.sge(0..4097), Err(oob(0, 4097)));
    assert_eq!(
        buf.sge(reversed.clone()),
        Err(BufError::ReversedRange { start: 9, end: 8 })
    );
    assert!(buf.slice(max..max).is_err() && buf.slice(reversed.clone()).is_err());
    assert!(matches!(
        buf.slice(4096..=usize::MAX),
        Err(BufError::OutOfBounds { .. })
    ));
    // The errors' messages name the range and the buffer's length (or the misalignment).
    let mut dst = [7u8; 4];
    let refused = [
        buf.write(max - 1, b"xyz").unwrap_err(),
        buf.read(4094, &mut dst).unwrap_err(),
        buf.fill(4095..4097, 2).unwrap_err(),
        buf.store_u64(4088 + 8, 3).unwrap_err(),
        buf.load_u64(3).unwrap_err(),
        buf.remote(usize::MAX).unwrap_err(),
        buf.slice(4000..4097).unwrap_err(),
        buf.sge(4090..=4096).unwrap_err(),
    ];
    for e in refused {
        let msg = e.to_string();
        assert!(
            msg.contains(" at offset ") && msg.contains("outside a buffer of 4096")
                || msg.contains("not a multiple of 8"),
            "{msg}"
        );
    }
    // Nothing was written by the refused calls: not the buffer, not a refused read's
    // destination.
    assert_eq!(dst, [7; 4]);
    let mut all = vec![0xaa; 4096];
    buf.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&b| b == 0));
    // A caller-owned registration refuses remote offsets past its end too.
    let mut mine = vec![0u8; 100];
    // SAFETY: the fake device never touches the memory, which outlives the registration.
    let mr = unsafe { pd.register(mine.as_mut_ptr(), mine.len(), AccessFlags::ALL) }.unwrap();
    assert_eq!(
        mr.remote(100),
        Ok(RemoteBuf::new(mr.addr() + 100, mr.rkey()))
    );
    assert_eq!(
        mr.remote(usize::MAX),
        Err(BufError::OutOfBounds {
            offset: max,
            len: 0,
            buf_len: 100
        })
    );
    drop(mr);
}

/// Direct QPs on one BlueFlame register that libmlx5 assigned (the fake puts all its QPs on
/// one): the reports say so, the send queues take the register's lock and share its toggle
/// (consecutive rings on different QPs use alternate buffers). QPs with registers of their own
/// are reported dedicated and ring without a lock.
#[test]
fn qps_on_a_shared_register_are_serialised_and_reported() {
    use crate::provider::fake::FakeBf;
    let log = new_log();
    let (ctx, reg) = ctx_on_shared_register(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let qps: Vec<Qp> = (0..3).map(|_| rc_qp(&pd, &cq)).collect();
    qps.iter().for_each(rts);
    let at_creation: Vec<_> = qps.iter().map(|q| q.backend().blueflame).collect();
    assert_eq!(
        at_creation,
        [0, 1, 2].map(|others| Some(BlueFlame::Shared { others }))
    );
    assert!(
        qps[2]
            .backend()
            .reason
            .contains("BlueFlame register: shared with 2 other QPs, serialised"),
        "{}",
        qps[2].backend()
    );
    // Now each shares it with the two others.
    for q in &qps {
        assert_eq!(q.blueflame(), Some(BlueFlame::Shared { others: 2 }));
    }
    let mut sqs: Vec<_> = qps
        .iter()
        .map(|q| match q.send_queue().unwrap().into_typed() {
            TypedSq::Rc(sq) => sq,
            TypedSq::Ud(_) | TypedSq::Dc(_) | TypedSq::Eth(_) | TypedSq::Verbs(_) => {
                panic!("expected the direct backend's RC queue")
            }
        })
        .collect();
    assert!(sqs.iter().all(|s| s.raw().shares_register()));
    // Rings on QP 0, 1, 1, 2: the buffers alternate across the QPs (one toggle).
    let mut written = Vec::new();
    for i in [0usize, 1, 1, 2] {
        // SAFETY: no queue writes the register between calls.
        unsafe { (*reg.word(0), *reg.word(32)) = (0, 0) };
        // SAFETY: nothing executes the NOP.
        unsafe { sqs[i].post(&SendWr::nop(i as u64)) }.unwrap();
        // SAFETY: as above.
        written.push(usize::from(unsafe { *reg.word(32) } != 0));
    }
    assert_eq!(written, [0, 1, 0, 1], "each ring wrote the other buffer");
    drop(sqs);
    drop(qps);
    // A QP with its own register: dedicated, no lock.
    let ctx = ctx_with(&log, |c| {
        c.direct = true;
        c.blueflame = FakeBf::Own(256);
    });
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    let qp = rc_qp(&pd, &cq);
    rts(&qp);
    assert_eq!(qp.backend().blueflame, Some(BlueFlame::Dedicated));
    assert!(
        qp.backend()
            .reason
            .contains("BlueFlame register: dedicated (the fake's per-QP register)"),
        "{}",
        qp.backend()
    );
    let TypedSq::Rc(sq) = qp.send_queue().unwrap().into_typed() else {
        panic!("expected the direct backend");
    };
    assert!(!sq.raw().shares_register() && sq.raw().has_blueflame());
    // Without BlueFlame: doorbell only.
    let ctx = ctx_with(&log, |c| c.direct = true);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    let qp = rc_qp(&pd, &cq);
    assert_eq!(qp.blueflame(), Some(BlueFlame::DoorbellOnly));
}

/// A UD QP on a BlueFlame register shared with RC QPs drives it like they do: its send queue
/// is made (not refused), takes the register's lock and rings with the one toggle all of them
/// share, so consecutive rings on the UD and RC QPs alternate buffers.
#[test]
fn a_ud_qp_on_a_shared_register_shares_its_lock_and_toggle() {
    let log = new_log();
    let (ctx, reg) = ctx_on_shared_register(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let rc = rc_qp(&pd, &cq);
    rts(&rc);
    let ud = pd
        .qp_builder(&cq, &cq)
        .ud()
        .max_send_wr(8)
        .max_recv_wr(4)
        .build()
        .unwrap();
    ud.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
    assert_eq!(ud.blueflame(), Some(BlueFlame::Shared { others: 1 }));
    let TypedSq::Ud(mut usq) = ud.send_queue().unwrap().into_typed() else {
        panic!("expected the direct backend's UD queue");
    };
    let TypedSq::Rc(mut rsq) = rc.send_queue().unwrap().into_typed() else {
        panic!("expected the direct backend's RC queue");
    };
    assert!(usq.raw().shares_register() && usq.raw().has_blueflame());
    // Rings on UD, RC, RC, UD: the buffers alternate across the two (one toggle).
    let mut written = Vec::new();
    for (on_ud, wr_id) in [(true, 1u64), (false, 2), (false, 3), (true, 4)] {
        // SAFETY: no queue writes the register between calls.
        unsafe { (*reg.word(0), *reg.word(32)) = (0, 0) };
        let wr = SendWr::nop(wr_id);
        // SAFETY: nothing executes the NOPs.
        unsafe { if on_ud { usq.post(&wr) } else { rsq.post(&wr) } }.unwrap();
        // SAFETY: as above.
        written.push(usize::from(unsafe { *reg.word(32) } != 0));
    }
    assert_eq!(written, [0, 1, 0, 1], "each ring wrote the other buffer");
}

#[test]
fn timestamps_on_a_device_without_a_clock_are_a_typed_error() {
    // The fake device, as rxe, timestamps nothing: the CQ is refused before anything is
    // created, and so is the clock.
    let log = new_log();
    let c = ctx(&log);
    let e = c.cq_builder().timestamps(true).build().unwrap_err();
    assert!(matches!(e, Error::NoTimestamps { .. }), "{e}");
    assert!(
        e.to_string().contains("cannot timestamp completions"),
        "{e}"
    );
    assert!(matches!(c.clock().unwrap_err(), Error::NoTimestamps { .. }));
    assert!(!log.lock().unwrap().iter().any(|l| l.contains("create_cq")));
    // A CQ without them is created as ever, and says so.
    assert!(!c.cq_builder().build().unwrap().has_timestamps());
}

/// A directly driven RC send queue prepares a WRITE and a SEND once and posts them with what
/// changes, through the BlueFlame register, allocating nothing; a length over 2 GiB is refused.
#[test]
fn prepared_requests_post_through_the_direct_send_queue_without_allocating() {
    use zverbs_mlx5dv::Changes;
    let log = new_log();
    let (ctx, reg) = ctx_on_shared_register(&log);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    let qp = rc_qp(&pd, &cq);
    rts(&qp);
    let TypedSq::Rc(mut sq) = qp.send_queue().unwrap().into_typed() else {
        panic!("expected the direct backend's RC queue");
    };
    let sgl = [Sge::new(0x1000, 8, 0x11)];
    let remote = RemoteBuf::new(0x2000, 0x22);
    let write = sq
        .raw()
        .prepare_rdma(&SendWr::write(0, &sgl, remote).signaled())
        .unwrap();
    let send = sq.raw().prepare_send(&SendWr::send(0, &sgl)).unwrap();
    assert_eq!(
        sq.raw().prepare_rdma(&SendWr::send(0, &sgl)),
        Err(PostError::Unsupported)
    );
    let c = Changes {
        wr_id: 7,
        addr: 0x1008,
        len: 8,
        remote_addr: 0x2008,
        imm: 0,
    };
    let mut results = Vec::with_capacity(4);
    let mut rung = false;
    let before = sq.raw().producer();
    let allocs = crate::test_alloc::count_allocs(|| {
        // SAFETY: nothing executes the requests, and no queue writes the register while the
        // test reads it.
        unsafe {
            results.push(sq.raw_mut().post_prepared(&write, c));
            // The post rang at once: its BlueFlame copy is in the register.
            rung = (*reg.word(0), *reg.word(32)) != (0, 0);
            // Again: the common case (the first took the checks out of line).
            results.push(sq.raw_mut().post_prepared(&write, c));
            results.push(sq.raw_mut().stage_prepared(&send, c));
            sq.ring();
            let long = Changes {
                len: (1 << 31) + 1,
                ..c
            };
            results.push(sq.raw_mut().post_prepared(&write, long));
        }
    });
    assert_eq!(allocs, 0);
    assert_eq!(
        results,
        [Ok(()), Ok(()), Ok(()), Err(PostError::MessageTooLong)]
    );
    assert_eq!(sq.raw().producer().wrapping_sub(before), 3);
    assert!(rung, "the prepared post rang");
}

#[test]
fn compressed_cqes_on_a_device_without_them_are_a_typed_error() {
    // The fake device, as rxe, has no compression: refused before anything is created.
    let log = new_log();
    let c = ctx(&log);
    for f in crate::MiniCqeFormat::ALL {
        let e = c.cq_builder().compressed(f).build().unwrap_err();
        assert!(matches!(e, Error::NoCqeCompression { .. }), "{e}");
        assert!(e.to_string().contains("compressed CQEs"), "{e}");
    }
    assert!(!log.lock().unwrap().iter().any(|l| l.contains("create_cq")));
    c.cq_builder().build().unwrap();
}
