//! The device frees what is destroyed: the rings, doorbell records, BlueFlame registers and UARs
//! it allocated for a QP, CQ or SRQ go with it, so a program that creates and destroys queues
//! for ever holds no more device memory than its live queues need.

use zverbs_sim::{CqConfig, Device, QpConfig, SrqConfig};

/// Create and destroy cycles (each a CQ, two QPs and an SRQ with a QP on it).
const CYCLES: usize = 2000;

#[test]
fn destroyed_queues_give_their_memory_back() {
    let dev = Device::new();
    let before = dev.allocated_bytes();
    let keep = dev.create_cq(CqConfig { cqe: 15 }).unwrap();
    let held = dev.allocated_bytes();
    assert!(held > before, "a live CQ's ring is counted");
    for _ in 0..CYCLES {
        let cq = dev.create_cq(CqConfig { cqe: 255 }).unwrap();
        let cfg = QpConfig {
            send_cq: cq.cqn,
            recv_cq: cq.cqn,
            max_send_wr: 128,
            max_recv_wr: 128,
            ..QpConfig::default()
        };
        let (a, b) = (dev.create_qp(cfg).unwrap(), dev.create_qp(cfg).unwrap());
        dev.connect(a.qpn, b.qpn).unwrap();
        let srq = dev
            .create_srq(SrqConfig {
                max_wr: 64,
                max_sge: 2,
            })
            .unwrap();
        let on_srq = dev
            .create_qp_ext(
                QpConfig {
                    max_recv_wr: 0,
                    ..cfg
                },
                zverbs_sim::QpType::Rc,
                Some(srq.srqn),
            )
            .unwrap();
        assert!(dev.allocated_bytes() > held);
        for qpn in [a.qpn, b.qpn, on_srq.qpn] {
            dev.destroy_qp(qpn).unwrap();
        }
        dev.destroy_srq(srq.srqn).unwrap();
        dev.destroy_cq(cq.cqn).unwrap();
        assert_eq!(dev.allocated_bytes(), held, "all of it back");
    }
    dev.destroy_cq(keep.cqn).unwrap();
    assert_eq!(dev.allocated_bytes(), before);
    assert!(dev.guards_intact());
}
