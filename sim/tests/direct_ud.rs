//! Unreliable datagrams end to end through the direct backend on the software device: UD
//! SEND and SEND with immediate built by `zverbs_mlx5dv::SendQueue`, received through
//! `RecvQueue`, completions decoded by `CompletionQueue` (the sender's QPN, SL, LID, P_Key
//! index, path bits, the GRH flag, the length with the 40 GRH bytes), multicast fan-out, the
//! ring's wrap, and refused requests that write nothing.

mod common;

use common::Arena;
use zverbs_core::{
    Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge, Transport,
    UdDest, WcFlags, WcOpcode,
};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, Datagram, RecvQueue, RqSlot, RqState, SendQueue, SqCaps, SqSlot,
    SqState,
};
use zverbs_sim::{Access, AhAttr, CqConfig, Device, Grh, Mr, QpConfig, QpType, SimQp};

const QKEY: u32 = 0x1357_9bdf;
const MLID: u16 = 0xc002;
const MCAST_QPN: u32 = 0x00ff_ffff;

type Sq = SendQueue<&'static SqState<&'static [SqSlot]>, Datagram>;
type Rq = RecvQueue<&'static RqState<&'static [RqSlot]>>;
type Sr = &'static SqState<&'static [SqSlot]>;
type Rr = &'static RqState<&'static [RqSlot]>;
type Cq = CompletionQueue<&'static [CqBinding<Sr, Rr>]>;

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// A UD QP driven by the library's queues, with its own CQ.
struct Ud {
    qp: SimQp,
    sq: Sq,
    rq: Rq,
    cq: Cq,
}

impl Ud {
    fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    fn poll_all(&mut self) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut wc = [Completion::EMPTY; 8];
        loop {
            let n = self.cq.poll(&mut wc);
            out.extend_from_slice(&wc[..n]);
            if n == 0 {
                return out;
            }
        }
    }
}

/// The capabilities of a UD QP of the device: its own, with the 4096-byte path MTU.
fn ud_caps(qp: &SimQp) -> SqCaps {
    SqCaps {
        transport: Transport::Ud { mtu: 4096 },
        ..qp.caps()
    }
}

/// A ready UD QP with `max_send_wr` send WQEs. The device must outlive it (tests leak it).
fn ud(dev: &'static Device, max_send_wr: u32) -> Ud {
    let cfg = QpConfig {
        max_send_wr,
        ..QpConfig::default()
    };
    let (qp, cq) = common::direct::qp_with_cq(dev, QpType::Ud, cfg);
    dev.init_ud(qp.qpn, QKEY, 0).unwrap();
    dev.ready_ud(qp.qpn).unwrap();
    let sqs = leak(SqState::new(&qp.sq_slots().leak()[..]).unwrap());
    let rqs = leak(RqState::new(&qp.rq_slots().leak()[..]).unwrap());
    let bind: &'static [CqBinding<Sr, Rr>] =
        Box::leak(Box::new([CqBinding::new(qp.qpn, Some(sqs), Some(rqs))]));
    // SAFETY: the device (leaked) outlives the queues; each is its ring's only driver; the
    // states are bound to the CQ that serves them.
    unsafe {
        Ud {
            qp,
            sq: SendQueue::new_ud(&qp.layout, ud_caps(&qp), sqs, None).unwrap(),
            rq: RecvQueue::new(&qp.layout, rqs).unwrap(),
            cq: CompletionQueue::new(&cq.layout, bind).unwrap(),
        }
    }
}

struct World {
    dev: &'static Device,
    mem: &'static Arena,
    mr: Mr,
}

impl World {
    fn new() -> Self {
        let mem = leak(Arena::new(1 << 16));
        let dev = leak(Device::new());
        // SAFETY: both are leaked: the arena outlives the device's use of it.
        let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
        Self { dev, mem, mr }
    }

    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge::new(self.mem.addr(off), len, self.mr.lkey)
    }

    /// A destination: QP `qpn` through an address handle for `attr`.
    fn dest(&self, attr: AhAttr, qpn: u32) -> &'static UdDest {
        let av = self.dev.create_ah(&attr).unwrap().av;
        leak(UdDest::new(av, 0, qpn, QKEY))
    }

    fn unicast(&self, qpn: u32, sl: u8) -> &'static UdDest {
        self.dest(
            AhAttr {
                dlid: self.dev.lid(),
                sl,
                ..AhAttr::default()
            },
            qpn,
        )
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

#[test]
fn send_and_send_with_immediate_between_two_ud_qps() {
    let w = World::new();
    let mut a = ud(w.dev, 64);
    let mut b = ud(w.dev, 64);
    let data = pattern(200, 3);
    w.mem.write(8192, &data);
    w.mem.fill(0, 1024, 0xee);
    // SAFETY: the entries lie in the registered arena.
    unsafe {
        b.rq.post(&RecvWr::new(0xb1, &[w.sge(0, 40 + 200)]))
            .unwrap();
        b.rq.post(&RecvWr::new(0xb2, &[w.sge(512, 40 + 64)]))
            .unwrap();
    }
    let dest = w.unicast(b.qpn(), 5);
    let sgl = [w.sge(8192, 200)];
    let inline = b"datagram carried inline in its WQE";
    let inl = [Sge::from_slice(inline, 0)];
    // SAFETY: as above; the inline source is readable.
    unsafe {
        a.sq.post(&SendWr::send_to(0xa1, &sgl, dest).signaled())
            .unwrap();
        a.sq.post(
            &SendWr::send_to_imm(0xa2, &inl, dest, 0xfeed_f00d)
                .inline()
                .signaled()
                .solicited(),
        )
        .unwrap();
    }
    w.dev.run_until_idle();

    // The memory: the GRH area untouched (no GRH), then the payload, nothing past it.
    assert_eq!(w.mem.read(0, 40), vec![0xee; 40]);
    assert_eq!(w.mem.read(40, 200), data);
    assert_eq!(w.mem.read(240, 8), vec![0xee; 8]);
    assert_eq!(w.mem.read(512, 40), vec![0xee; 40]);
    assert_eq!(w.mem.read(552, inline.len()), inline);

    let rx = b.poll_all();
    let want = Completion {
        wr_id: 0xb1,
        byte_len: 240,
        qp_num: b.qpn(),
        opcode: WcOpcode::Recv,
        src_qp: a.qpn(),
        slid: w.dev.lid(),
        sl: 5,
        ..Completion::EMPTY
    };
    assert_eq!(
        rx,
        vec![
            want,
            Completion {
                wr_id: 0xb2,
                byte_len: 40 + inline.len() as u32,
                imm: 0xfeed_f00d,
                flags: WcFlags::WITH_IMM,
                ..want
            }
        ]
    );
    let tx = a.poll_all();
    let sent = Completion {
        wr_id: 0xa1,
        qp_num: a.qpn(),
        opcode: WcOpcode::Send,
        ..Completion::EMPTY
    };
    assert_eq!(
        tx,
        vec![
            sent,
            Completion {
                wr_id: 0xa2,
                flags: WcFlags::WITH_IMM,
                ..sent
            }
        ]
    );
    let st = w.dev.stats();
    assert_eq!((st.datagrams, st.datagrams_delivered), (2, 2));
}

#[test]
fn a_grh_lands_in_the_first_40_bytes_and_is_flagged() {
    let w = World::new();
    let mut a = ud(w.dev, 64);
    let mut b = ud(w.dev, 64);
    w.mem.write(8192, b"with a global route");
    // SAFETY: the entries lie in the registered arena.
    unsafe { b.rq.post(&RecvWr::new(7, &[w.sge(0, 40 + 19)])) }.unwrap();
    let dest = w.dest(
        AhAttr {
            dlid: w.dev.lid(),
            sl: 2,
            grh: Some(Grh {
                dgid: w.dev.gid(),
                hop_limit: 64,
                ..Grh::default()
            }),
            ..AhAttr::default()
        },
        b.qpn(),
    );
    let sgl = [w.sge(8192, 19)];
    // SAFETY: as above.
    unsafe { a.sq.post(&SendWr::send_to(1, &sgl, dest)) }.unwrap();
    w.dev.run_until_idle();
    assert_eq!(w.mem.read(24, 16), w.dev.gid(), "the GRH's DGID");
    assert_eq!(w.mem.read(40, 19), b"with a global route");
    let rx = b.poll_all();
    assert_eq!(rx.len(), 1);
    let c = rx[0];
    assert_eq!((c.byte_len, c.sl, c.src_qp), (59, 2, a.qpn()));
    assert_eq!(c.flags, WcFlags::GRH);
    assert!(a.poll_all().is_empty(), "unsignaled");
}

#[test]
fn multicast_reaches_each_of_three_attached_qps() {
    let w = World::new();
    let mut a = ud(w.dev, 64);
    let mut members: Vec<Ud> = (0..3).map(|_| ud(w.dev, 64)).collect();
    let mut mgid = [0u8; 16];
    mgid[0] = 0xff;
    mgid[1] = 0x12;
    mgid[15] = 9;
    for (i, m) in members.iter_mut().enumerate() {
        w.dev.attach_mcast(m.qpn(), mgid, MLID).unwrap();
        // SAFETY: the entries lie in the registered arena.
        unsafe { m.rq.post(&RecvWr::new(i as u64, &[w.sge(i * 1024, 512)])) }.unwrap();
    }
    let dest = w.dest(
        AhAttr {
            dlid: MLID,
            sl: 1,
            grh: Some(Grh {
                dgid: mgid,
                hop_limit: 1,
                ..Grh::default()
            }),
            multicast: true,
            ..AhAttr::default()
        },
        MCAST_QPN,
    );
    w.mem.write(8192, b"to the group");
    let sgl = [w.sge(8192, 12)];
    // SAFETY: as above.
    unsafe { a.sq.post(&SendWr::send_to(0xa, &sgl, dest).signaled()) }.unwrap();
    w.dev.run_until_idle();
    for (i, m) in members.iter_mut().enumerate() {
        let rx = m.poll_all();
        assert_eq!(rx.len(), 1, "member {i}");
        let c = rx[0];
        assert_eq!(
            (c.wr_id, c.qp_num, c.src_qp, c.byte_len, c.sl),
            (i as u64, m.qpn(), a.qpn(), 52, 1)
        );
        assert_eq!(c.flags, WcFlags::GRH);
        assert_eq!(w.mem.read(i * 1024 + 40, 12), b"to the group");
        assert_eq!(
            w.mem.read(i * 1024 + 24, 16),
            mgid,
            "the GRH names the group"
        );
    }
    assert_eq!(a.poll_all().len(), 1);
    assert_eq!(w.dev.stats().datagrams_delivered, 3);
}

#[test]
fn datagrams_cross_the_end_of_the_ring() {
    let w = World::new();
    // A small ring (the device sizes it for four of its largest WQEs): a UD SEND of one
    // entry takes two blocks, an inline one of up to 40 bytes two.
    let mut a = ud(w.dev, 4);
    let mut b = ud(w.dev, 64);
    assert_eq!(a.sq.blocks(), 16);
    let dest = w.unicast(b.qpn(), 0);
    for round in 0..40u64 {
        let off = 4096 + (round as usize % 8) * 64;
        let payload = pattern(24 + round as usize % 17, round as u8);
        w.mem.write(off, &payload);
        let at = (round as usize % 4) * 256;
        // SAFETY: the entries lie in the registered arena.
        unsafe { b.rq.post(&RecvWr::new(round, &[w.sge(at, 40 + 64)])) }.unwrap();
        let sgl = [w.sge(off, payload.len() as u32)];
        let wr = SendWr::send_to_imm(round, &sgl, dest, round as u32).signaled();
        // Every third one inline: its payload is copied across the wrap too.
        let wr = if round % 3 == 0 { wr.inline() } else { wr };
        // SAFETY: as above.
        unsafe { a.sq.post(&wr) }.unwrap();
        w.dev.run_until_idle();
        assert_eq!(w.mem.read(at + 40, payload.len()), payload, "round {round}");
        let rx = b.poll_all();
        assert_eq!(rx.len(), 1);
        assert_eq!(
            (rx[0].wr_id, rx[0].imm, rx[0].byte_len, rx[0].src_qp),
            (round, round as u32, 40 + payload.len() as u32, a.qpn())
        );
        let tx = a.poll_all();
        assert_eq!(tx.len(), 1);
        assert!(tx[0].is_success());
    }
    assert!(a.sq.producer() > 4 * a.sq.blocks(), "the ring wrapped");
}

#[test]
fn refused_requests_write_nothing() {
    let w = World::new();
    let mut a = ud(w.dev, 8);
    let b = ud(w.dev, 8);
    let dest = w.unicast(b.qpn(), 0);
    let ring = a.qp.layout.sq.buf.as_ptr();
    let ring_len = (a.sq.blocks() * 64) as usize;
    let dbrec = a.qp.layout.dbrec.as_ptr();
    // SAFETY: the device's ring and doorbell record, live while it is; nothing else writes
    // them while the test reads.
    let snapshot = || unsafe {
        (
            std::slice::from_raw_parts(ring, ring_len).to_vec(),
            dbrec.add(1).read_volatile(),
        )
    };
    let before = snapshot();
    let sgl = [w.sge(0, 8)];
    let big = [w.sge(0, 4096), w.sge(0, 1)];
    let remote = RemoteBuf::new(w.mem.addr(0), w.mr.rkey);
    let local = w.sge(0, 8);
    let five = [w.sge(0, 1); 5];
    let cases: [(SendWr<'_>, PostError); 6] = [
        (SendWr::write(1, &sgl, remote), PostError::WrongTransport),
        (SendWr::send(2, &sgl), PostError::WrongTransport),
        (SendWr::read(3, &sgl, remote), PostError::WrongTransport),
        (
            SendWr::fetch_add(4, local, remote, 1),
            PostError::WrongTransport,
        ),
        (
            SendWr::send_to(5, &big, dest),
            PostError::DatagramTooLong {
                len: 4097,
                mtu: 4096,
            },
        ),
        (
            SendWr::send_to(6, &five, dest),
            PostError::TooManySges { got: 5, max: 4 },
        ),
    ];
    for (wr, err) in cases {
        // SAFETY: refused before anything is read or written.
        assert_eq!(unsafe { a.sq.post(&wr) }, Err(err), "{wr:?}");
        assert_eq!(a.sq.producer(), 0);
        assert_eq!(a.sq.pending(), 0);
        assert_eq!(snapshot(), before, "{wr:?}");
    }
    // A full ring: the last request that does not fit is refused whole.
    let blocks = a.sq.blocks();
    for i in 0..u64::from(blocks / 2) {
        // SAFETY: as above.
        unsafe { a.sq.stage(&SendWr::send_to(i, &sgl, dest)) }.unwrap();
    }
    let staged = snapshot();
    assert_eq!(
        // SAFETY: as above.
        unsafe { a.sq.stage(&SendWr::send_to(9, &sgl, dest)) },
        Err(PostError::QueueFull { needed: 2, free: 0 })
    );
    assert_eq!(snapshot(), staged);
    assert_eq!(a.sq.producer(), blocks);
    // A datagram on a reliable-connected queue.
    let rc_cq = w.dev.create_cq(CqConfig { cqe: 16 }).unwrap();
    let rc = w
        .dev
        .create_qp(QpConfig {
            send_cq: rc_cq.cqn,
            recv_cq: rc_cq.cqn,
            ..QpConfig::default()
        })
        .unwrap();
    let rcs = leak(SqState::new(&rc.sq_slots().leak()[..]).unwrap());
    // SAFETY: as in `ud`.
    let mut rcq = unsafe { SendQueue::new(&rc.layout, rc.caps(), rcs, None) }.unwrap();
    assert_eq!(
        // SAFETY: refused before anything is read.
        unsafe { rcq.post(&SendWr::send_to(1, &sgl, dest)) },
        Err(PostError::WrongTransport)
    );
    assert_eq!(rcq.producer(), 0);
}
