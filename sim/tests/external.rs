//! The external-memory entry points for UD QPs, QPs on an SRQ and SRQs (what the emulated
//! ConnectX uses for the rings libmlx5 allocates): what they accept, and that what they
//! refuse changes nothing.

use core::ptr::NonNull;

use zverbs_mlx5dv::{BfLayout, QpLayout, WqLayout};
use zverbs_sim::{CqConfig, Device, QpType, RNR_RETRY_INFINITE, SimError};

/// `len` zeroed bytes that live as long as the test process (the device may touch them for
/// its whole life), 64-byte aligned.
fn memory(len: usize) -> NonNull<u8> {
    let words = vec![[0u64; 8]; len.div_ceil(64)].leak();
    NonNull::from(&mut words[0]).cast()
}

/// A QP layout over fresh memory: a send ring of 8 blocks, a receive ring of `rq_cnt` WQEs of
/// 16 bytes.
fn layout(qpn: u32, rq_cnt: u32) -> QpLayout {
    let dbrec = memory(8).cast();
    QpLayout {
        qpn,
        dbrec,
        sq: WqLayout {
            buf: memory(8 * 64),
            wqe_cnt: 8,
            stride: 64,
        },
        rq: WqLayout {
            buf: memory(16 * rq_cnt.max(1) as usize),
            wqe_cnt: rq_cnt,
            stride: 16,
        },
        bf: BfLayout {
            reg: memory(64),
            size: 0,
        },
    }
}

#[test]
fn an_srq_ring_must_be_a_power_of_two_of_strides_from_32_to_1024_bytes() {
    let dev = Device::new();
    let buf = memory(1 << 16);
    let dbrec = memory(8).cast();
    for (cnt, stride) in [
        (0, 32),
        (12, 32),
        (1 << 16, 32),
        (16, 16),
        (16, 48),
        (16, 2048),
    ] {
        // SAFETY: the memory lives as long as the process.
        let r = unsafe { dev.create_srq_external(buf, dbrec, cnt, stride) };
        assert!(
            matches!(r, Err(SimError::InvalidConfig(_))),
            "{cnt} WQEs of {stride} bytes: {r:?}"
        );
    }
    // SAFETY: as above.
    let srqn = unsafe { dev.create_srq_external(buf, dbrec, 1024, 32) }.unwrap();
    // The refusals took no table entry: the first SRQ gets the first number, as create_srq's.
    dev.destroy_srq(srqn).unwrap();
    let made = dev
        .create_srq(zverbs_sim::SrqConfig {
            max_wr: 4,
            max_sge: 1,
        })
        .unwrap();
    assert_eq!(made.srqn, srqn);
}

#[test]
fn a_qp_on_an_srq_has_no_receive_ring_and_names_a_live_srq() {
    let dev = Device::new();
    let cq = dev.create_cq(CqConfig { cqe: 16 }).unwrap();
    // SAFETY: the memory lives as long as the process.
    let srqn =
        unsafe { dev.create_srq_external(memory(64 * 32), memory(8).cast(), 64, 32) }.unwrap();
    let with_rq = layout(0x200, 4);
    let r = unsafe {
        // SAFETY: as above.
        dev.create_qp_external_ext(
            &with_rq,
            cq.cqn,
            cq.cqn,
            RNR_RETRY_INFINITE,
            QpType::Rc,
            Some(srqn),
        )
    };
    assert!(matches!(r, Err(SimError::InvalidConfig(_))), "{r:?}");
    let r = unsafe {
        // SAFETY: as above.
        dev.create_qp_external_ext(
            &layout(0x200, 0),
            cq.cqn,
            cq.cqn,
            RNR_RETRY_INFINITE,
            QpType::Rc,
            Some(srqn + 1),
        )
    };
    assert_eq!(r, Err(SimError::NoSuchSrq(srqn + 1)));
    // Nothing was created: the number is still free, and the SRQ has no user.
    assert_eq!(dev.qp_status(0x200), Err(SimError::NoSuchQp(0x200)));
    unsafe {
        // SAFETY: as above.
        dev.create_qp_external_ext(
            &layout(0x200, 0),
            cq.cqn,
            cq.cqn,
            RNR_RETRY_INFINITE,
            QpType::Rc,
            Some(srqn),
        )
    }
    .unwrap();
    assert!(
        matches!(dev.destroy_srq(srqn), Err(SimError::InvalidConfig(_))),
        "the SRQ is in use by the QP"
    );
    dev.destroy_qp(0x200).unwrap();
    dev.destroy_srq(srqn).unwrap();
}

#[test]
fn an_external_qp_is_of_the_type_it_was_created_with() {
    let dev = Device::new();
    let cq = dev.create_cq(CqConfig { cqe: 16 }).unwrap();
    // SAFETY: the memory lives as long as the process.
    unsafe {
        dev.create_qp_external_ext(
            &layout(0x300, 4),
            cq.cqn,
            cq.cqn,
            RNR_RETRY_INFINITE,
            QpType::Ud,
            None,
        )
    }
    .unwrap();
    // SAFETY: as above.
    unsafe { dev.create_qp_external(&layout(0x301, 4), cq.cqn, cq.cqn, RNR_RETRY_INFINITE) }
        .unwrap();
    dev.init_ud(0x300, 0x1111_1111, 0).unwrap();
    dev.ready_ud(0x300).unwrap();
    assert!(matches!(
        dev.init_ud(0x301, 0x1111_1111, 0),
        Err(SimError::InvalidConfig(_))
    ));
}
