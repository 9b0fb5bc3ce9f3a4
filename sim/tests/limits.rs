//! Sizes and counts from the caller: every one above the device's limit is a typed error that
//! names the limit and changes nothing, and no value at all makes the device panic (the tests
//! run in debug builds, where an arithmetic overflow would).

mod common;

use std::ptr::NonNull;
use std::sync::Arc;

use common::{Arena, PairCfg, Queue};
use zverbs_core::{PostSend, SendWr};
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};
use zverbs_sim::wire::{Message, Request, Status};
use zverbs_sim::{Access, CqConfig, Device, DeviceConfig, QpConfig, QpStatus, SimError, vendor};

/// The message of an `InvalidConfig`, or a failure naming what came instead.
fn why<T: std::fmt::Debug>(r: Result<T, SimError>) -> &'static str {
    match r {
        Err(SimError::InvalidConfig(why)) => why,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

fn qp_cfg(dev: &Device) -> QpConfig {
    let cq = dev.create_cq(CqConfig { cqe: 7 }).unwrap();
    QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        ..QpConfig::default()
    }
}

#[test]
fn every_qp_and_cq_size_above_its_limit_is_refused_by_name() {
    let dev = Device::new();
    let ok = qp_cfg(&dev);
    let cases: [(QpConfig, &str); 10] = [
        (
            QpConfig {
                max_recv_wr: (1 << 31) + 1,
                ..ok
            },
            "max_recv_wr above 32768",
        ),
        (
            QpConfig {
                max_recv_wr: u32::MAX,
                ..ok
            },
            "max_recv_wr above 32768",
        ),
        (
            QpConfig {
                max_recv_wr: 32769,
                ..ok
            },
            "max_recv_wr above 32768",
        ),
        (
            QpConfig {
                max_send_wr: u32::MAX,
                ..ok
            },
            "max_send_wr above 32768",
        ),
        (
            QpConfig {
                max_send_wr: 32768,
                max_send_sge: 8,
                ..ok
            },
            "send ring above 32768 basic blocks",
        ),
        (
            QpConfig {
                max_send_sge: 62,
                ..ok
            },
            "max_send_sge above 61",
        ),
        (
            QpConfig {
                max_inline_data: 973,
                ..ok
            },
            "max_inline_data above 972",
        ),
        (
            QpConfig {
                max_recv_sge: 65,
                ..ok
            },
            "max_recv_sge above 64",
        ),
        (
            QpConfig {
                bf_size: u32::MAX - 63,
                ..ok
            },
            "bf_size must be a multiple of 64, ≤ 4096",
        ),
        (QpConfig { rnr_retry: 8, ..ok }, "rnr_retry above 7"),
    ];
    let before = dev.stats();
    for (cfg, limit) in cases {
        let msg = why(dev.create_qp(cfg));
        assert!(msg.starts_with(limit), "{cfg:?}: {msg:?}, not {limit:?}");
    }
    // Each limit itself is accepted.
    for cfg in [
        QpConfig {
            max_recv_wr: 32768,
            ..ok
        },
        QpConfig {
            max_send_wr: 32768,
            max_send_sge: 2,
            max_inline_data: 0,
            ..ok
        },
        QpConfig {
            max_send_sge: 61,
            max_inline_data: 972,
            max_recv_sge: 64,
            ..ok
        },
    ] {
        let qp = dev.create_qp(cfg).unwrap();
        dev.destroy_qp(qp.qpn).unwrap();
    }
    for cqe in [0, 1 << 22, u32::MAX] {
        assert_eq!(
            why(dev.create_cq(CqConfig { cqe })),
            "cqe must be in 1..2^22"
        );
    }
    dev.create_cq(CqConfig { cqe: (1 << 22) - 1 }).unwrap();
    assert_eq!(dev.stats(), before, "refusals change nothing");
    assert!(dev.guards_intact());
}

#[test]
fn external_rings_above_the_limits_are_refused_by_name() {
    let dev = Device::new();
    let cq = dev.create_cq(CqConfig { cqe: 7 }).unwrap();
    // Refused before the device records anything, so it never reads these addresses.
    let nowhere = NonNull::<u8>::dangling();
    let layout = |sq_cnt: u32, rq_cnt: u32, stride: u32| QpLayout {
        qpn: 0x4242,
        dbrec: nowhere.cast(),
        sq: WqLayout {
            buf: nowhere,
            wqe_cnt: sq_cnt,
            stride: 64,
        },
        rq: WqLayout {
            buf: nowhere,
            wqe_cnt: rq_cnt,
            stride,
        },
        bf: BfLayout {
            reg: nowhere,
            size: 0,
        },
    };
    let cases = [
        (
            layout(1 << 16, 0, 16),
            "SQ: power-of-two count, at most 32768",
        ),
        (layout(0, 0, 16), "SQ: power-of-two count, at most 32768"),
        (
            layout(64, 1 << 16, 16),
            "RQ: power-of-two count, at most 32768",
        ),
        (layout(64, 1 << 15, 1 << 31), "RQ: power-of-two stride"),
        (layout(64, 2, 2048), "RQ: power-of-two stride"),
        (layout(64, 2, 8), "RQ: power-of-two stride"),
    ];
    for (l, limit) in cases {
        // SAFETY: the layout is refused (asserted), so the device never uses its memory.
        let r = unsafe { dev.create_qp_external(&l, cq.cqn, cq.cqn, 0) };
        let msg = why(r);
        assert!(msg.starts_with(limit), "{msg:?}, not {limit:?}");
    }
    assert!(dev.qp_status(0x4242).is_err(), "nothing was recorded");
    for cqe_cnt in [1 << 23, 1 << 31] {
        let l = CqLayout {
            buf: nowhere,
            dbrec: nowhere.cast(),
            cqe_cnt,
            cqe_size: 64,
            cqn: 0x777,
        };
        // SAFETY: as above.
        let msg = why(unsafe { dev.create_cq_external(&l) });
        assert_eq!(msg, "CQ above 2^22 CQEs");
    }
    assert!(
        dev.delay_completions(0x777, 1).is_err(),
        "nothing was recorded"
    );
}

#[test]
fn a_region_whose_end_overflows_and_oversized_tables_are_refused() {
    let dev = Device::new();
    let top = (usize::MAX - 15) as *const u8;
    // SAFETY: the registration is refused (asserted): the device never uses the span.
    let r = unsafe { dev.reg_mr(top, 100, Access::NONE) };
    assert_eq!(why(r), "region end overflows");
    for (cfg, limit) in [
        (
            DeviceConfig {
                max_qps: 1 << 24,
                ..DeviceConfig::default()
            },
            "max_qps above 2^24 - 256",
        ),
        (
            DeviceConfig {
                max_cqs: u32::MAX,
                ..DeviceConfig::default()
            },
            "max_cqs above 2^24 - 64",
        ),
        (
            DeviceConfig {
                max_mrs: 1 << 24,
                ..DeviceConfig::default()
            },
            "max_mrs above 2^24 - 1",
        ),
    ] {
        let msg = why(Device::with_config(cfg));
        assert!(msg.starts_with(limit), "{msg:?}, not {limit:?}");
    }
}

#[test]
fn no_size_makes_the_device_panic() {
    // Every field of a QP and a CQ at and around every boundary: each creation succeeds or is
    // an error; none panics (an overflow in the device's arithmetic would, in this debug
    // build), and the device keeps working.
    let edges = [
        0u32,
        1,
        2,
        7,
        8,
        16,
        61,
        62,
        63,
        64,
        65,
        972,
        973,
        1024,
        4096,
        4097,
        (1 << 15) - 1,
        1 << 15,
        (1 << 15) + 1,
        1 << 16,
        (1 << 22) - 1,
        1 << 22,
        1 << 31,
        (1 << 31) + 1,
        u32::MAX - 1,
        u32::MAX,
    ];
    let dev = Device::new();
    let base = qp_cfg(&dev);
    type Set = fn(&mut QpConfig, u32);
    let fields: [(&str, Set); 6] = [
        ("max_send_wr", |c, v| c.max_send_wr = v),
        ("max_send_sge", |c, v| c.max_send_sge = v),
        ("max_inline_data", |c, v| c.max_inline_data = v),
        ("max_recv_wr", |c, v| c.max_recv_wr = v),
        ("max_recv_sge", |c, v| c.max_recv_sge = v),
        ("bf_size", |c, v| c.bf_size = v),
    ];
    for (name, set) in fields {
        for v in edges {
            let mut cfg = base;
            set(&mut cfg, v);
            match dev.create_qp(cfg) {
                Ok(qp) => dev.destroy_qp(qp.qpn).unwrap(),
                Err(SimError::InvalidConfig(_)) => {}
                Err(e) => panic!("{name} = {v}: {e}"),
            }
        }
    }
    for cqe in edges {
        if let Ok(cq) = dev.create_cq(CqConfig { cqe }) {
            dev.destroy_cq(cq.cqn).unwrap();
        }
    }
    // Still a working device.
    let (ma, mb) = (Arena::new(4096), Arena::new(4096));
    common::with_pair_on(&dev, &ma, &mb, PairCfg::default(), |p| {
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: entries in registered arenas, untouched until completion.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
        }
        .unwrap();
        let (ca, _) = p.run();
        assert!(ca[0].is_success(), "{ca:?}");
    });
}

#[test]
fn a_read_longer_than_a_message_from_the_wire_is_refused() {
    // A peer in another process asks for more than 2 GiB: the responder refuses it (remote
    // invalid request, and it enters the error state) before it checks, reads or copies a
    // byte, whatever its region would allow.
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    da.set_wire(q.clone(), 1);
    db.set_wire(q.clone(), 2);
    let mems = [Arena::new(4096), Arena::new(4096)];
    let a = common::end_on(&da, &mems[0], PairCfg::default());
    let b = common::end_on(&db, &mems[1], PairCfg::default());
    common::connect_across(&da, 1, a.qpn(), &db, 2, b.qpn());
    let read = Request {
        src_lid: 1,
        src_qpn: a.qpn(),
        dst_qpn: b.qpn(),
        seq: 0,
        psn: 0,
        opcode: zverbs_mlx5dv::prm::opcode::RDMA_READ,
        solicited: false,
        raddr: b.mem.addr(0),
        rkey: b.mr.rkey,
        imm: [0; 4],
        len: (1 << 31) + 1,
        swap_add: 0,
        compare: 0,
        dc_key: None,
        payload: Vec::new(),
    };
    db.deliver(&Message::Request(read).encode());
    let msgs = q.take();
    let [(1, answer)] = &msgs[..] else {
        panic!("one answer to A: {msgs:?}")
    };
    let Some(Message::Response(r)) = Message::decode(answer) else {
        panic!("a response")
    };
    assert_eq!(r.status, Status::Nak(0x12, vendor::MSG_TOO_LONG));
    assert!(r.data.is_empty());
    assert_eq!(db.qp_status(b.qpn()).unwrap(), QpStatus::Error);
    assert_eq!(db.stats().bytes, 0);
}
