//! Two device instances that share nothing but messages (as two processes do behind the
//! emulated ConnectX): each executes its own responder work on its own memory and CQs, and
//! the requests and answers travel through a [`Wire`] (here an in-memory queue pumped by the
//! test; between processes, a socket).

mod common;

use std::sync::Arc;

use common::{Arena, Queue};
use zverbs_core::{
    Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge, WcOpcode, WcStatus,
};
use zverbs_mlx5dv::{CompletionQueue, CqBinding, RecvQueue, RqState, SendQueue, SqState};
use zverbs_sim::{Access, CqConfig, Device, QpConfig};

const LID_A: u16 = 1;
const LID_B: u16 = 2;

/// Steps both devices and carries their messages until nothing moves.
fn pump(a: &Device, b: &Device, q: &Queue) -> usize {
    let mut delivered = 0;
    loop {
        let mut work = a.run_until_idle() + b.run_until_idle();
        for (lid, m) in q.take() {
            match lid {
                LID_A => a.deliver(&m),
                LID_B => b.deliver(&m),
                _ => panic!("message to unknown LID {lid}"),
            }
            delivered += 1;
            work += 1;
        }
        if work == 0 {
            return delivered;
        }
    }
}

fn poll(cq: &mut impl PollCq) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut wc = [Completion::EMPTY; 16];
    loop {
        let n = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..n]);
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn every_operation_between_two_device_instances() {
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    da.set_wire(q.clone(), LID_A);
    db.set_wire(q.clone(), LID_B);
    let (mem_a, mem_b) = (Arena::new(8192), Arena::new(8192));
    let cfg = |cq: u32| QpConfig {
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
        rnr_retry: zverbs_sim::RNR_RETRY_INFINITE,
        ..QpConfig::default()
    };
    let cqa = da.create_cq(CqConfig { cqe: 63 }).unwrap();
    let cqb = db.create_cq(CqConfig { cqe: 63 }).unwrap();
    let qa = da.create_qp(cfg(cqa.cqn)).unwrap();
    let qb = db.create_qp(cfg(cqb.cqn)).unwrap();
    // Both instances number their QPs alike: only the LID tells them apart.
    assert_eq!(qa.qpn, qb.qpn);
    common::connect_across(&da, LID_A, qa.qpn, &db, LID_B, qb.qpn);
    db.set_user_index(qb.qpn, 0x77).unwrap();
    // SAFETY: the arenas outlive the devices' use of them.
    let mra = unsafe { da.reg_mr(mem_a.ptr(0), mem_a.len(), Access::ALL) }.unwrap();
    // SAFETY: as above.
    let mrb = unsafe { db.reg_mr(mem_b.ptr(0), mem_b.len(), Access::ALL) }.unwrap();
    let (sa, ra) = (qa.sq_slots(), qa.rq_slots());
    let (sb, rb) = (qb.sq_slots(), qb.rq_slots());
    let (ssa, rsa) = (
        SqState::new(&sa[..]).unwrap(),
        RqState::new(&ra[..]).unwrap(),
    );
    let (ssb, rsb) = (
        SqState::new(&sb[..]).unwrap(),
        RqState::new(&rb[..]).unwrap(),
    );
    let bind_a = [CqBinding::new(qa.qpn, Some(&ssa), Some(&rsa))];
    let bind_b = [CqBinding::new(qb.qpn, Some(&ssb), Some(&rsb))];
    // SAFETY: the devices own the rings and outlive the queues; one driver per ring.
    let (mut sqa, mut cq_a) = unsafe {
        (
            SendQueue::new(&qa.layout, qa.caps(), &ssa, None).unwrap(),
            CompletionQueue::new(&cqa.layout, &bind_a[..]).unwrap(),
        )
    };
    // SAFETY: as above.
    let (mut rqb, mut cq_b) = unsafe {
        (
            RecvQueue::new(&qb.layout, &rsb).unwrap(),
            CompletionQueue::new(&cqb.layout, &bind_b[..]).unwrap(),
        )
    };
    let sge_a = |off: usize, len: u32| Sge::new(mem_a.addr(off), len, mra.lkey);
    let rem_b = |off: usize| RemoteBuf::new(mem_b.addr(off), mrb.rkey);

    // WRITE.
    mem_a.write(0, b"across processes");
    let sgl = [sge_a(0, 16)];
    // SAFETY: entries in registered arenas, untouched until completion.
    unsafe { sqa.post(&SendWr::write(1, &sgl, rem_b(100)).signaled()) }.unwrap();
    assert_eq!(pump(&da, &db, &q), 2, "one request, one answer");
    assert_eq!(mem_b.read(100, 16), b"across processes");
    let c = poll(&mut cq_a);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].opcode), (1, WcOpcode::RdmaWrite));
    assert!(c[0].is_success());

    // SEND with immediate, first without a receive (RNR, retried for ever), then with one.
    let sgl = [sge_a(0, 6)];
    // SAFETY: as above.
    unsafe { sqa.post(&SendWr::send_imm(2, &sgl, 0x1234_5678).signaled()) }.unwrap();
    pump(&da, &db, &q);
    assert!(poll(&mut cq_a).is_empty(), "waits for a receive");
    let rsgl = [Sge::new(mem_b.addr(2048), 64, mrb.lkey)];
    // SAFETY: the receive entry lies in B's registered arena.
    unsafe { rqb.post(&RecvWr::new(0xb1, &rsgl)) }.unwrap();
    // The requester waits a little after an RNR NAK before it sends again.
    let t = std::time::Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && t.elapsed().as_secs() < 5 {
        pump(&da, &db, &q);
        got = poll(&mut cq_a);
    }
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].opcode), (2, WcOpcode::Send));
    let c = poll(&mut cq_b);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].byte_len, c[0].imm()),
        (0xb1, WcOpcode::Recv, 6, Some(0x1234_5678))
    );
    assert_eq!(mem_b.read(2048, 6), b"across");
    // SAFETY: polled, the devices are stepped.
    let raw = unsafe { zverbs_sim::read_cqe(&cqb.layout, 0) };
    assert_eq!(
        &raw[32..36],
        &[0, 0, 0, 0x77],
        "the user index set for B's QP"
    );

    // READ.
    mem_b.write(300, b"remote bytes");
    let sgl = [sge_a(1000, 12)];
    // SAFETY: as above.
    unsafe { sqa.post(&SendWr::read(3, &sgl, rem_b(300)).signaled()) }.unwrap();
    pump(&da, &db, &q);
    assert_eq!(mem_a.read(1000, 12), b"remote bytes");
    let c = poll(&mut cq_a);
    assert_eq!((c[0].opcode, c[0].byte_len), (WcOpcode::RdmaRead, 12));

    // Fetch-and-add, then compare-and-swap (host order, the device's default).
    mem_b.write_u64_in(512, 40, false);
    let sgl = [sge_a(2000, 8)];
    // SAFETY: as above.
    unsafe { sqa.post(&SendWr::fetch_add(4, sgl[0], rem_b(512), 2).signaled()) }.unwrap();
    pump(&da, &db, &q);
    assert_eq!(mem_b.read_u64_in(512, false), 42);
    assert_eq!(mem_a.read_u64_in(2000, false), 40);
    // SAFETY: as above.
    unsafe { sqa.post(&SendWr::compare_swap(5, sgl[0], rem_b(512), 42, 7).signaled()) }.unwrap();
    pump(&da, &db, &q);
    assert_eq!(mem_b.read_u64_in(512, false), 7);
    assert_eq!(mem_a.read_u64_in(2000, false), 42);
    let c = poll(&mut cq_a);
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(Completion::is_success));

    // A bad rkey: remote access error at the requester, the responder enters the error state.
    let sgl = [sge_a(0, 4)];
    let bad = RemoteBuf::new(mem_b.addr(0), mrb.rkey ^ 0x100);
    // SAFETY: as above.
    unsafe { sqa.post(&SendWr::write(6, &sgl, bad).signaled()) }.unwrap();
    pump(&da, &db, &q);
    let c = poll(&mut cq_a);
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    assert_eq!(db.qp_status(qb.qpn).unwrap(), zverbs_sim::QpStatus::Error);

    // Garbage from the wire is counted, never a panic.
    da.deliver(&[2, 1, 2, 3]);
    da.deliver(&[]);
    assert_eq!(da.stats().bad_messages, 2);
    assert_eq!(da.cq_overruns() + db.cq_overruns(), 0);
    assert!(mem_a.guards_intact() && mem_b.guards_intact());
}

#[test]
fn destroyed_objects_are_never_touched() {
    let dev = Device::new();
    let cq = dev.create_cq(CqConfig { cqe: 7 }).unwrap();
    let qp = dev
        .create_qp(QpConfig {
            send_cq: cq.cqn,
            recv_cq: cq.cqn,
            ..QpConfig::default()
        })
        .unwrap();
    assert!(dev.destroy_cq(cq.cqn).is_err(), "in use by the QP");
    dev.destroy_qp(qp.qpn).unwrap();
    assert!(dev.qp_status(qp.qpn).is_err());
    dev.destroy_cq(cq.cqn).unwrap();
    assert!(dev.delay_completions(cq.cqn, 1).is_err());
    assert_eq!(dev.run_until_idle(), 0);
}

#[test]
fn destroyed_entries_are_reused_and_a_destroyed_peer_stays_gone() {
    // A pair; B's QP is destroyed and a new QP takes its table entry (and its number). A's
    // next SEND must fail with "transport retry exceeded", never reach the newcomer.
    let dev = Device::new();
    let (ma, mb) = (Arena::new(4096), Arena::new(4096));
    common::with_pair_on(&dev, &ma, &mb, common::PairCfg::default(), |p| {
        let b_qpn = p.b.qpn();
        dev.destroy_qp(b_qpn).unwrap();
        let cq = dev.create_cq(CqConfig { cqe: 7 }).unwrap();
        let newcomer = dev
            .create_qp(QpConfig {
                send_cq: cq.cqn,
                recv_cq: cq.cqn,
                ..QpConfig::default()
            })
            .unwrap();
        assert_eq!(newcomer.qpn, b_qpn, "the destroyed QP's entry is reused");
        // The newcomer is live and connected (to itself): a stale link from A would reach it.
        dev.connect(newcomer.qpn, newcomer.qpn).unwrap();
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: entries in registered arenas, untouched until completion.
        unsafe { p.a.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 1);
        assert_eq!(
            ca[0].status,
            zverbs_core::WcStatus::RetryExcErr,
            "{:?}",
            ca[0]
        );
        assert_eq!(dev.stats().wqes_ok, 0, "nothing reached the newcomer");
    });
    // Over the table's size, one after another: destroyed entries are found again.
    for _ in 0..200 {
        let cq = dev.create_cq(CqConfig { cqe: 3 }).unwrap();
        let qp = dev
            .create_qp(QpConfig {
                send_cq: cq.cqn,
                recv_cq: cq.cqn,
                ..QpConfig::default()
            })
            .unwrap();
        dev.destroy_qp(qp.qpn).unwrap();
        dev.destroy_cq(cq.cqn).unwrap();
    }
}
