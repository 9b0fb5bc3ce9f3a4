//! Unreliable datagrams on the device: address vectors, delivery by LID and QPN, the GRH area,
//! the UD receive CQE, Q_Key checks, the path MTU, drops, and malformed UD WQEs. WQEs are
//! built byte by byte through `zverbs_mlx5dv::prm` views and CQEs read through `prm::cqe`.

mod common;
mod raw;

use common::Arena;
use raw::{Body, Dest, RawCq, RawQp};
use zverbs_mlx5dv::prm::cqe::{Cqe64, Syndrome, op};
use zverbs_mlx5dv::prm::{fm_ce_se, opcode};
use zverbs_sim::{
    Access, AhAttr, CqConfig, Device, Grh, QpConfig, QpStatus, QpType, SimError, vendor,
};

const QKEY: u32 = 0x1111_2222;
const SIGNALED: u8 = fm_ce_se::CQ_UPDATE;

/// A UD QP with its own CQ, ready (INIT with `QKEY`, then RTS).
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

fn to(dev: &Device, qpn: u32, sl: u8) -> Dest {
    let av = dev
        .create_ah(&AhAttr {
            dlid: dev.lid(),
            sl,
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    Dest {
        av,
        dqpn: qpn,
        qkey: QKEY,
    }
}

fn cqe(c: &[u8; 64]) -> Cqe64<&[u8; 64]> {
    Cqe64::new_unchecked(c)
}

#[test]
fn create_ah_lays_out_the_av_as_libmlx5() {
    let dev = Device::new();
    let mut dgid = [0u8; 16];
    dgid[0] = 0xfe;
    dgid[1] = 0x80;
    dgid[15] = 0x07;
    let ah = dev
        .create_ah(&AhAttr {
            dlid: 0x0102,
            sl: 3,
            src_path_bits: 0,
            grh: Some(Grh {
                dgid,
                sgid_index: 0,
                flow_label: 0xabcde,
                hop_limit: 0x40,
                traffic_class: 0x12,
            }),
            multicast: false,
        })
        .unwrap();
    let mut want = [0u8; 48];
    want[12] = 0x03; // stat_rate_sl: rate 0, SL 3
    want[14..16].copy_from_slice(&[0x01, 0x02]); // rlid
    want[26] = 0x12; // tclass
    want[27] = 0x40; // hop_limit
    want[28..32].copy_from_slice(&[0x40, 0x0a, 0xbc, 0xde]); // GRH bit 30, SGID 0, flow label
    want[32..48].copy_from_slice(&dgid);
    assert_eq!(ah.av, want);

    // Without a GRH: the GRH part stays zero.
    let ah = dev
        .create_ah(&AhAttr {
            dlid: 0x0005,
            sl: 15,
            src_path_bits: 0x7f,
            ..AhAttr::default()
        })
        .unwrap();
    let mut want = [0u8; 48];
    want[12] = 0x0f;
    want[13] = 0x7f;
    want[14..16].copy_from_slice(&[0x00, 0x05]);
    assert_eq!(ah.av, want);

    // Refused: SL above 15, an SGID index the port lacks, a multicast flag on a unicast LID.
    for bad in [
        AhAttr {
            sl: 16,
            ..AhAttr::default()
        },
        AhAttr {
            grh: Some(Grh {
                sgid_index: 1,
                ..Grh::default()
            }),
            ..AhAttr::default()
        },
        AhAttr {
            dlid: 1,
            multicast: true,
            ..AhAttr::default()
        },
    ] {
        assert!(matches!(
            dev.create_ah(&bad),
            Err(SimError::InvalidConfig(_))
        ));
    }
}

#[test]
fn a_send_reaches_the_addressed_qp_after_the_grh_area() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    let payload: Vec<u8> = (0..64u8).collect();
    mem.write(2048, &payload);
    mem.fill(0, 200, 0xee);
    b.post_recv(&[(mem.addr(0), 40 + 64, mr.lkey)]);
    let dest = to(&dev, b.qpn(), 5);
    let idx = a.post_send(
        opcode::SEND_IMM,
        Some(&dest),
        Body::Sges(&[(mem.addr(2048), 64, mr.lkey)]),
        0xcafe_f00d,
        SIGNALED | fm_ce_se::SOLICITED,
    );
    assert_eq!(idx, 0);
    dev.run_until_idle();

    // The receive: 40 bytes of GRH area left as they were (no GRH), then the payload.
    assert_eq!(mem.read(0, 40), vec![0xee; 40]);
    assert_eq!(mem.read(40, 64), payload);
    assert_eq!(mem.read(104, 8), vec![0xee; 8], "nothing past the datagram");
    let r = bcq.poll().expect("a receive CQE");
    let v = cqe(&r);
    assert_eq!(v.op_own() >> 4, op::RESP_SEND_IMM);
    assert_eq!(v.se(), 1, "the solicited bit travels");
    assert_eq!(v.byte_cnt(), 104, "the 40 GRH bytes count");
    assert_eq!(v.imm_inval_pkey(), 0xcafe_f00d);
    assert_eq!(v.src_qp(), a.qpn());
    assert_eq!(v.sl(), 5);
    assert_eq!(v.slid(), dev.lid());
    assert_eq!(v.dlid_path_bits(), 0);
    assert!(!v.grh());
    assert_eq!(v.qpn(), b.qpn());
    assert_eq!(v.wqe_counter(), 0);
    assert!(bcq.poll().is_none());

    // The sender's completion: local, as soon as it is sent.
    let s = acq.poll().expect("a send CQE");
    let v = cqe(&s);
    assert_eq!(v.op_own() >> 4, op::REQ);
    assert_eq!((v.send_opcode(), v.qpn()), (opcode::SEND_IMM, a.qpn()));
    assert_eq!(v.wqe_counter(), 0);

    // A SEND without immediate reports the P_Key index where the immediate would be.
    b.post_recv(&[(mem.addr(256), 40 + 12, mr.lkey)]);
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Inline(b"inline bytes"),
        0xffff_ffff,
        SIGNALED,
    );
    dev.run_until_idle();
    assert_eq!(mem.read(256 + 40, 12), b"inline bytes");
    let r = bcq.poll().unwrap();
    let v = cqe(&r);
    assert_eq!(v.op_own() >> 4, op::RESP_SEND);
    assert_eq!(
        (v.byte_cnt(), v.pkey_index(), v.imm_inval_pkey()),
        (52, 0, 0)
    );
    assert_eq!(v.wqe_counter(), 1);
    assert!(acq.poll().is_some());
    let st = dev.stats();
    assert_eq!((st.datagrams, st.datagrams_delivered), (2, 2));
    assert_eq!((st.qkey_drops, st.ud_no_recv, st.ud_no_dest), (0, 0, 0));
    drop(dev);
    assert!(mem.guards_intact());
}

#[test]
fn a_grh_is_written_into_the_first_40_bytes() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    let av = dev
        .create_ah(&AhAttr {
            dlid: dev.lid(),
            sl: 2,
            grh: Some(Grh {
                dgid: dev.gid(),
                sgid_index: 0,
                flow_label: 0x12345,
                hop_limit: 64,
                traffic_class: 0x20,
            }),
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    // Two scatter entries: the GRH area and the payload land across them.
    b.post_recv(&[(mem.addr(0), 30, mr.lkey), (mem.addr(100), 30, mr.lkey)]);
    mem.write(1000, b"0123456789");
    let dest = Dest {
        av,
        dqpn: b.qpn(),
        qkey: QKEY,
    };
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Sges(&[(mem.addr(1000), 10, mr.lkey)]),
        0,
        SIGNALED,
    );
    dev.run_until_idle();
    let mut grh = mem.read(0, 30);
    grh.extend(mem.read(100, 10));
    let mut want = vec![0x62, 0x01, 0x23, 0x45]; // version 6, class 0x20, flow label 0x12345
    // Payload length: BTH 12 + DETH 8 + 10 bytes + 2 of pad + ICRC 4; next header IBA; hops.
    want.extend([0x00, 36, 0x1b, 64]);
    want.extend(dev.gid()); // SGID: the port's GID 0
    want.extend(dev.gid()); // DGID
    assert_eq!(grh, want);
    assert_eq!(mem.read(110, 10), b"0123456789");
    let r = bcq.poll().unwrap();
    let v = cqe(&r);
    assert!(v.grh());
    assert_eq!(v.flags_rqpn() >> 28, 1, "an InfiniBand GRH");
    assert_eq!((v.byte_cnt(), v.sl(), v.src_qp()), (50, 2, a.qpn()));
    assert!(acq.poll().is_some());
}

#[test]
fn a_qkey_mismatch_drops_the_datagram_silently() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    b.post_recv(&[(mem.addr(0), 256, mr.lkey)]);
    mem.write(1000, b"wrong key");
    let mut dest = to(&dev, b.qpn(), 0);
    dest.qkey = QKEY ^ 1;
    let sg = [(mem.addr(1000), 9, mr.lkey)];
    a.post_send(opcode::SEND, Some(&dest), Body::Sges(&sg), 0, SIGNALED);
    dev.run_until_idle();
    assert!(bcq.is_empty(), "no CQE at the receiver");
    assert_eq!(mem.read(40, 9), vec![0; 9], "nothing placed");
    let s = acq.poll().unwrap();
    assert_eq!(cqe(&s).op_own() >> 4, op::REQ, "the sender never knows");
    assert_eq!(dev.stats().qkey_drops, 1);
    assert_eq!(dev.qp_status(b.qpn()).unwrap(), QpStatus::Rts);

    // A Q_Key with bit 31 set means "the sending QP's own" (both QPs hold QKEY): the same
    // receive takes it.
    dest.qkey = 0x8000_0000;
    mem.write(1000, b"own key!!");
    a.post_send(opcode::SEND, Some(&dest), Body::Sges(&sg), 0, SIGNALED);
    dev.run_until_idle();
    let r = bcq.poll().unwrap();
    assert_eq!(cqe(&r).wqe_counter(), 0, "the receive was still posted");
    assert_eq!(mem.read(40, 9), b"own key!!");
    assert_eq!(dev.stats().qkey_drops, 1);
}

#[test]
fn a_send_above_the_path_mtu_is_a_local_length_error() {
    let mem = Arena::new(16384);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 16384, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    let dest = to(&dev, b.qpn(), 0);
    // Exactly the MTU passes.
    b.post_recv(&[(mem.addr(0), 40 + 4096, mr.lkey)]);
    b.post_recv(&[(mem.addr(0), 40 + 4097, mr.lkey)]);
    mem.fill(8192, 4097, 0x3c);
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Sges(&[(mem.addr(8192), 4096, mr.lkey)]),
        0,
        SIGNALED,
    );
    dev.run_until_idle();
    assert_eq!(cqe(&bcq.poll().unwrap()).byte_cnt(), 40 + 4096);
    assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    // One byte more fails at the sender, unsignaled or not.
    let idx = a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Sges(&[(mem.addr(8192), 4097, mr.lkey)]),
        0,
        0,
    );
    dev.run_until_idle();
    let e = acq.poll().unwrap();
    let v = cqe(&e);
    assert_eq!(v.op_own() >> 4, op::REQ_ERR);
    assert_eq!(v.syndrome(), Syndrome::LocalLengthErr);
    assert_eq!(v.vendor_err_synd(), vendor::UD_MTU);
    assert_eq!(v.wqe_counter(), idx);
    assert!(bcq.is_empty(), "nothing sent");
    assert_eq!(dev.qp_status(a.qpn()).unwrap(), QpStatus::Error);
    assert_eq!(dev.stats().datagrams, 1);
}

#[test]
fn no_receive_posted_drops_the_datagram() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    let dest = to(&dev, b.qpn(), 0);
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Inline(b"first"),
        0,
        SIGNALED,
    );
    dev.run_until_idle();
    assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    assert_eq!(dev.stats().ud_no_recv, 1, "dropped: UD has no RNR");
    // The next datagram takes the receive posted after the drop; the first is gone.
    b.post_recv(&[(mem.addr(0), 64, mr.lkey)]);
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Inline(b"second"),
        0,
        SIGNALED,
    );
    dev.run_until_idle();
    assert_eq!(mem.read(40, 6), b"second");
    assert_eq!(cqe(&bcq.poll().unwrap()).byte_cnt(), 46);
    assert!(bcq.poll().is_none());
}

#[test]
fn a_datagram_to_no_ready_ud_qp_is_dropped() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let cq = dev.create_cq(CqConfig { cqe: 4 }).unwrap();
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        ..QpConfig::default()
    };
    // A UD QP still in INIT, an RC QP, a QPN nobody has, another LID.
    let init = dev.create_qp_ext(cfg, QpType::Ud, None).unwrap();
    dev.init_ud(init.qpn, QKEY, 0).unwrap();
    let mut init = RawQp::new(init);
    init.post_recv(&[(mem.addr(0), 64, mr.lkey)]);
    let rc = dev.create_qp(cfg).unwrap();
    // A ready QP with a receive posted, addressed at another LID.
    let (mut ready, ready_cq) = ud_qp(&dev);
    ready.post_recv(&[(mem.addr(512), 64, mr.lkey)]);
    let mut other_lid = to(&dev, ready.qpn(), 0);
    other_lid.av[15] ^= 0x40;
    for d in [
        to(&dev, init.qpn(), 0),
        to(&dev, rc.qpn, 0),
        to(&dev, 0x00ab_cdef, 0),
        other_lid,
    ] {
        a.post_send(opcode::SEND, Some(&d), Body::Inline(b"x"), 0, SIGNALED);
    }
    dev.run_until_idle();
    for _ in 0..4 {
        assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    }
    assert_eq!(dev.stats().ud_no_dest, 4);
    assert_eq!(dev.stats().datagrams_delivered, 0);
    assert_eq!(mem.read(40, 1), [0]);
    assert_eq!(mem.read(512 + 40, 1), [0]);
    assert!(ready_cq.is_empty());
}

#[test]
fn malformed_ud_wqes_are_local_qp_operation_errors() {
    let dev = Device::new();
    // A SEND without its datagram segment (control and one data segment).
    let (mut a, mut acq) = ud_qp(&dev);
    let idx = a.post_send(opcode::SEND, None, Body::Inline(b"no address"), 0, 0);
    dev.run_until_idle();
    let e = acq.poll().unwrap();
    let v = cqe(&e);
    assert_eq!(v.op_own() >> 4, op::REQ_ERR);
    assert_eq!(v.syndrome(), Syndrome::LocalQpOpErr);
    assert_eq!(v.vendor_err_synd(), vendor::NO_DATAGRAM);
    assert_eq!((v.wqe_counter(), v.s_wqe_opcode_qpn() >> 24), (idx, 0x0a));
    assert_eq!(dev.qp_status(a.qpn()).unwrap(), QpStatus::Error);

    // An RDMA WRITE on a UD QP.
    let (mut b, mut bcq) = ud_qp(&dev);
    let dest = to(&dev, a.qpn(), 0);
    b.post_send(opcode::RDMA_WRITE, Some(&dest), Body::Inline(b"w"), 0, 0);
    dev.run_until_idle();
    let e = bcq.poll().unwrap();
    assert_eq!(cqe(&e).vendor_err_synd(), vendor::OPCODE);

    // An address vector asking for a GRH from a source GID the port lacks.
    let (mut c, mut ccq) = ud_qp(&dev);
    let mut dest = to(&dev, a.qpn(), 0);
    dest.av[28] = 0x40 | 0x01; // GRH bit, SGID index 16
    c.post_send(opcode::SEND, Some(&dest), Body::Inline(b"g"), 0, 0);
    dev.run_until_idle();
    assert_eq!(
        cqe(&ccq.poll().unwrap()).vendor_err_synd(),
        vendor::SGID_INDEX
    );
    assert_eq!(dev.stats().datagrams, 0);
}

#[test]
fn a_receive_too_short_for_grh_and_payload_fails_at_the_receiver() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&dev);
    let (mut b, mut bcq) = ud_qp(&dev);
    b.post_recv(&[(mem.addr(0), 40 + 8, mr.lkey)]);
    let dest = to(&dev, b.qpn(), 0);
    a.post_send(
        opcode::SEND,
        Some(&dest),
        Body::Inline(&[7; 16]),
        0,
        SIGNALED,
    );
    dev.run_until_idle();
    let e = bcq.poll().unwrap();
    let v = cqe(&e);
    assert_eq!(v.op_own() >> 4, op::RESP_ERR);
    assert_eq!(v.syndrome(), Syndrome::LocalLengthErr);
    assert_eq!(v.vendor_err_synd(), vendor::UD_RECV_TOO_SHORT);
    assert_eq!(v.wqe_counter(), 0);
    assert_eq!(mem.read(40, 8), vec![0; 8], "nothing placed");
    assert_eq!(dev.qp_status(b.qpn()).unwrap(), QpStatus::Error);
    assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    assert_eq!(dev.qp_status(a.qpn()).unwrap(), QpStatus::Rts);
}

#[test]
fn ud_qps_follow_their_own_life_cycle() {
    let dev = Device::new();
    let cq = dev.create_cq(CqConfig { cqe: 4 }).unwrap();
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        ..QpConfig::default()
    };
    let ud = dev.create_qp_ext(cfg, QpType::Ud, None).unwrap();
    let rc = dev.create_qp(cfg).unwrap();
    // The UD WQE's fixed part is one basic block: 4 gather entries or 64 inline bytes (5
    // segments) after it make 9 segments, 3 blocks; the inline room of that WQE is counted
    // after the datagram segment. 59 gather entries at most.
    assert_eq!(ud.max_inline_data, (12 - 4) * 16 - 4);
    assert!(matches!(
        dev.create_qp_ext(
            QpConfig {
                max_send_sge: 60,
                ..cfg
            },
            QpType::Ud,
            None
        ),
        Err(SimError::InvalidConfig(_))
    ));
    assert!(matches!(
        dev.connect(ud.qpn, rc.qpn),
        Err(SimError::InvalidConfig(_))
    ));
    assert!(matches!(
        dev.init_ud(rc.qpn, QKEY, 0),
        Err(SimError::InvalidConfig(_))
    ));
    assert!(matches!(
        dev.init_ud(ud.qpn, QKEY, 1),
        Err(SimError::InvalidConfig(_))
    ));
    assert!(matches!(
        dev.ready_ud(rc.qpn),
        Err(SimError::InvalidConfig(_))
    ));
    dev.init_ud(ud.qpn, QKEY, 0).unwrap();
    assert_eq!(dev.qp_status(ud.qpn).unwrap(), QpStatus::Init);
    dev.ready_ud(ud.qpn).unwrap();
    assert_eq!(dev.qp_status(ud.qpn).unwrap(), QpStatus::Rts);
    assert_eq!(
        dev.ready_ud(ud.qpn),
        Err(SimError::AlreadyConnected(ud.qpn))
    );
    assert_eq!(
        dev.init_ud(ud.qpn, QKEY, 0),
        Err(SimError::AlreadyConnected(ud.qpn))
    );
}

#[test]
fn datagrams_cross_the_wire_to_another_instance() {
    use std::sync::Arc;
    let mem = Arena::new(4096);
    let (wa, wb) = (
        Arc::new(common::Queue::default()),
        Arc::new(common::Queue::default()),
    );
    let (da, db) = (Device::new(), Device::new());
    da.set_wire(wa.clone(), 1);
    db.set_wire(wb.clone(), 2);
    // SAFETY: `mem` outlives both devices.
    let mra = unsafe { da.reg_mr(mem.ptr(0), 2048, Access::ALL) }.unwrap();
    // SAFETY: as above.
    let mrb = unsafe { db.reg_mr(mem.ptr(2048), 2048, Access::ALL) }.unwrap();
    let (mut a, mut acq) = ud_qp(&da);
    let (mut b, mut bcq) = ud_qp(&db);
    let mgid = [0xff, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    db.attach_mcast(b.qpn(), mgid, 0xc001).unwrap();
    b.post_recv(&[(mem.addr(2048), 128, mrb.lkey)]);
    b.post_recv(&[(mem.addr(2048 + 128), 128, mrb.lkey)]);
    let av = da
        .create_ah(&AhAttr {
            dlid: 2,
            sl: 4,
            grh: Some(Grh {
                dgid: db.gid(),
                hop_limit: 1,
                ..Grh::default()
            }),
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    let unicast = Dest {
        av,
        dqpn: b.qpn(),
        qkey: QKEY,
    };
    let group = Dest {
        av: da
            .create_ah(&AhAttr {
                dlid: 0xc001,
                multicast: true,
                ..AhAttr::default()
            })
            .unwrap()
            .av,
        dqpn: 0x00ff_ffff,
        qkey: QKEY,
    };
    mem.write(0, b"over the wire");
    let sg = [(mem.addr(0), 13, mra.lkey)];
    a.post_send(
        opcode::SEND_IMM,
        Some(&unicast),
        Body::Sges(&sg),
        9,
        SIGNALED,
    );
    a.post_send(
        opcode::SEND,
        Some(&group),
        Body::Inline(b"all"),
        0,
        SIGNALED,
    );
    da.run_until_idle();
    // Both sends complete at the sender before anything arrives.
    assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    assert_eq!(cqe(&acq.poll().unwrap()).op_own() >> 4, op::REQ);
    let sent = wa.take();
    assert_eq!(
        sent.iter().map(|m| m.0).collect::<Vec<_>>(),
        [2, 0xc001],
        "to the LID, and to the MLID"
    );
    for (_, msg) in sent {
        db.deliver(&msg);
    }
    db.run_until_idle();
    let r = bcq.poll().unwrap();
    let v = cqe(&r);
    assert_eq!(v.op_own() >> 4, op::RESP_SEND_IMM);
    assert_eq!(
        (v.src_qp(), v.slid(), v.sl(), v.grh()),
        (a.qpn(), 1, 4, true)
    );
    assert_eq!((v.byte_cnt(), v.imm_inval_pkey()), (53, 9));
    assert_eq!(
        mem.read(2048 + 8, 16),
        da.gid(),
        "the SGID: the sender's port"
    );
    assert_eq!(mem.read(2048 + 24, 16), db.gid());
    assert_eq!(mem.read(2048 + 40, 13), b"over the wire");
    let r = bcq.poll().unwrap();
    assert_eq!((cqe(&r).wqe_counter(), cqe(&r).byte_cnt()), (1, 43));
    assert_eq!(mem.read(2048 + 128 + 40, 3), b"all");
    assert!(wb.take().is_empty(), "nothing answers a datagram");
    // Bytes that are no datagram are counted, never a panic.
    db.deliver(&[3, 1, 2]);
    assert_eq!(db.stats().bad_messages, 1);
}
