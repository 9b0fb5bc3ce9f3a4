//! Multicast on the device: a datagram to a group's MLID (and MGID) with QPN 0xffffff reaches
//! every attached UD QP with its own receive, not a detached one, and the sender only when it
//! is attached itself (loopback, as a ConnectX).

mod common;
mod raw;

use common::Arena;
use raw::{Body, Dest, RawCq, RawQp};
use zverbs_mlx5dv::prm::cqe::{Cqe64, op};
use zverbs_mlx5dv::prm::{fm_ce_se, opcode};
use zverbs_sim::{Access, AhAttr, CqConfig, Device, Grh, QpConfig, QpType, SimError};

const QKEY: u32 = 0x0bad_cafe;
const MLID: u16 = 0xc001;
const MCAST_QPN: u32 = 0x00ff_ffff;

fn mgid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x12;
    g[15] = last;
    g
}

fn ud_qp(dev: &Device) -> (RawQp, RawCq) {
    let cq = dev.create_cq(CqConfig { cqe: 16 }).unwrap();
    let qp = dev
        .create_qp_ext(
            QpConfig {
                send_cq: cq.cqn,
                recv_cq: cq.cqn,
                ..QpConfig::default()
            },
            QpType::Ud,
            None,
        )
        .unwrap();
    dev.init_ud(qp.qpn, QKEY, 0).unwrap();
    dev.ready_ud(qp.qpn).unwrap();
    (RawQp::new(qp), RawCq::new(cq))
}

/// The group's address: its MLID, with a GRH naming its MGID when `grh`.
fn group(dev: &Device, grh: bool) -> Dest {
    let av = dev
        .create_ah(&AhAttr {
            dlid: MLID,
            sl: 1,
            grh: grh.then_some(Grh {
                dgid: mgid(1),
                hop_limit: 1,
                ..Grh::default()
            }),
            multicast: true,
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    Dest {
        av,
        dqpn: MCAST_QPN,
        qkey: QKEY,
    }
}

fn opcode_of(c: &[u8; 64]) -> u8 {
    Cqe64::new_unchecked(c).op_own() >> 4
}

#[test]
fn a_datagram_reaches_every_attached_qp_and_no_other() {
    let mem = Arena::new(8192);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 8192, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let mut members: Vec<(RawQp, RawCq)> = (0..3).map(|_| ud_qp(&dev)).collect();
    for (i, (qp, _)) in members.iter_mut().enumerate() {
        qp.post_recv(&[(mem.addr(i * 1024), 512, mr.lkey)]);
        qp.post_recv(&[(mem.addr(i * 1024 + 512), 512, mr.lkey)]);
    }
    // The first two join; the third does not.
    for (qp, _) in &members[..2] {
        dev.attach_mcast(qp.qpn(), mgid(1), MLID).unwrap();
    }
    let dest = group(&dev, true);
    mem.write(4000, b"to the group");
    let sg = [(mem.addr(4000), 12, mr.lkey)];
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Sges(&sg),
        0,
        fm_ce_se::CQ_UPDATE,
    );
    dev.run_until_idle();
    for (i, (_, cq)) in members[..2].iter_mut().enumerate() {
        let c = cq.poll().expect("each member gets its own receive");
        let v = Cqe64::new_unchecked(&c);
        assert_eq!(opcode_of(&c), op::RESP_SEND);
        assert_eq!((v.byte_cnt(), v.src_qp(), v.sl()), (52, a.qpn(), 1));
        assert!(v.grh());
        assert_eq!(v.wqe_counter(), 0);
        assert_eq!(mem.read(i * 1024 + 40, 12), b"to the group");
        // The GRH names the group as its destination.
        assert_eq!(mem.read(i * 1024 + 24, 16), mgid(1));
    }
    assert!(members[2].1.is_empty(), "not attached: nothing");
    assert_eq!(mem.read(2048 + 40, 12), vec![0; 12]);
    assert_eq!(opcode_of(&acq.poll().unwrap()), op::REQ);
    assert!(acq.poll().is_none(), "the sender is not attached: no copy");
    assert_eq!(dev.stats().datagrams, 1);
    assert_eq!(dev.stats().datagrams_delivered, 2);

    // Detached, the second member gets no more; a datagram without a GRH finds the group by
    // its MLID alone.
    dev.detach_mcast(members[1].0.qpn(), mgid(1), MLID).unwrap();
    let dest = group(&dev, false);
    mem.write(4000, b"second round");
    a.post_send(opcode::SEND, Some(&dest), Body::Sges(&sg), 0, 0);
    dev.run_until_idle();
    let c = members[0].1.poll().unwrap();
    assert!(!Cqe64::new_unchecked(&c).grh());
    assert_eq!(Cqe64::new_unchecked(&c).wqe_counter(), 1);
    assert_eq!(mem.read(512 + 40, 12), b"second round");
    assert!(members[1].1.is_empty());
    assert_eq!(mem.read(1024 + 512 + 40, 12), vec![0; 12]);
    assert!(members[2].1.is_empty());
}

#[test]
fn the_sender_receives_its_own_datagram_only_when_attached() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    a.post_recv(&[(mem.addr(0), 256, mr.lkey)]);
    dev.attach_mcast(a.qpn(), mgid(1), MLID).unwrap();
    // Attaching twice changes nothing: one copy.
    dev.attach_mcast(a.qpn(), mgid(1), MLID).unwrap();
    a.post_send(
        opcode::SEND_IMM,
        Some(&group(&dev, true)),
        Body::Inline(b"loop"),
        7,
        fm_ce_se::CQ_UPDATE,
    );
    dev.run_until_idle();
    // The responder's CQE first (written when the datagram lands), then the send's.
    let r = acq.poll().unwrap();
    let v = Cqe64::new_unchecked(&r);
    assert_eq!(opcode_of(&r), op::RESP_SEND_IMM);
    assert_eq!(
        (v.src_qp(), v.qpn(), v.imm_inval_pkey()),
        (a.qpn(), a.qpn(), 7)
    );
    assert_eq!(opcode_of(&acq.poll().unwrap()), op::REQ);
    assert!(acq.poll().is_none());
    assert_eq!(mem.read(40, 4), b"loop");
}

#[test]
fn bad_groups_and_addresses_are_refused_or_dropped() {
    let dev = Device::new();
    let (mut a, acq) = ud_qp(&dev);
    let (b, _bcq) = ud_qp(&dev);
    let cq = dev.create_cq(CqConfig { cqe: 4 }).unwrap();
    let rc = dev
        .create_qp(QpConfig {
            send_cq: cq.cqn,
            recv_cq: cq.cqn,
            ..QpConfig::default()
        })
        .unwrap();
    let bad = |r: Result<(), SimError>| assert!(matches!(r, Err(SimError::InvalidConfig(_))));
    bad(dev.attach_mcast(rc.qpn, mgid(1), MLID));
    bad(dev.attach_mcast(b.qpn(), mgid(1), 0x0001));
    bad(dev.attach_mcast(b.qpn(), [0xfe; 16], MLID));
    bad(dev.detach_mcast(b.qpn(), mgid(1), MLID));
    dev.attach_mcast(b.qpn(), mgid(1), MLID).unwrap();
    bad(dev.attach_mcast(a.qpn(), mgid(1), MLID + 1));
    assert_eq!(
        dev.attach_mcast(0x00ab_cdef, mgid(1), MLID),
        Err(SimError::NoSuchQp(0x00ab_cdef))
    );

    // To the group's MLID with a QPN other than 0xffffff, or to a group nobody joined: dropped.
    let mut wrong_qpn = group(&dev, true);
    wrong_qpn.dqpn = b.qpn();
    let mut nobody = group(&dev, true);
    nobody.av[47] = 9; // MGID ff12::9
    for d in [wrong_qpn, nobody] {
        a.post_send(opcode::SEND, Some(&d), Body::Inline(b"x"), 0, 0);
    }
    // Destroyed, a member leaves its group.
    dev.destroy_qp(b.qpn()).unwrap();
    a.post_send(
        opcode::SEND,
        Some(&group(&dev, true)),
        Body::Inline(b"x"),
        0,
        0,
    );
    dev.run_until_idle();
    assert!(acq.is_empty(), "unsignaled sends that succeeded");
    let st = dev.stats();
    assert_eq!(
        (st.datagrams, st.datagrams_delivered, st.ud_no_dest),
        (3, 0, 3)
    );
}
