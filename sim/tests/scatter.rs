//! Scatter-to-CQE on the software device: a QP allowed to scatter receives a small SEND in
//! the CQE (32 bytes in a 64-byte CQE, 64 in the first half of a 128-byte entry), as a
//! ConnectX does; the direct poller copies it into the receive buffer. Every size boundary,
//! both CQE sizes, SEND and SEND with immediate; the raw CQE shows the format the device
//! chose; a UD QP and a QP not allowed to scatter never do.

mod common;

use common::{PairCfg, with_pair};
use zverbs_core::{PostRecv, PostSend, RecvWr, SendWr, WcOpcode, WcStatus};
use zverbs_mlx5dv::prm::cqe::{INLINE_SCATTER_32, INLINE_SCATTER_64};

const STALE: u8 = 0xee;

/// Sends `len` bytes from A to B (with an immediate if `imm`) and checks B's buffer, the
/// completion and the CQE format; returns the `op_own` scatter bits of B's CQE.
fn one(cqe_size: u32, allow: bool, len: usize, imm: bool) -> u8 {
    let cfg = PairCfg {
        cqe_size,
        ..PairCfg::default()
    };
    with_pair(cfg, |p| {
        p.dev.set_scatter_to_cqe(p.b.qpn(), allow).unwrap();
        let msg: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        p.a.mem.write(0, &msg);
        p.b.mem.fill(0, 256, STALE);
        // Two receive entries: the message is split over them.
        let rx = [p.b.sge(0, 10), p.b.sge(100, 90)];
        // SAFETY: the arena outlives the device's use of it.
        unsafe { p.b.rq.post(&RecvWr::new(0xb1, &rx)) }.unwrap();
        let tx = [p.a.sge(0, len as u32)];
        let wr = if imm {
            SendWr::send_imm(0xa1, &tx, 0x1122_3344)
        } else {
            SendWr::send(0xa1, &tx)
        };
        // SAFETY: as above.
        unsafe { p.a.sq.post(&wr.signaled()) }.unwrap();
        let (a, b) = p.run();
        let case = format!("{cqe_size}-byte CQEs, allowed {allow}, {len} bytes, imm {imm}");
        assert_eq!((a.len(), a[0].status), (1, WcStatus::Success), "{case}");
        assert_eq!(b.len(), 1, "{case}");
        let w = b[0];
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.byte_len),
            (0xb1, WcStatus::Success, WcOpcode::Recv, len as u32),
            "{case}"
        );
        assert_eq!(w.imm(), imm.then_some(0x1122_3344), "{case}");
        let first = len.min(10);
        assert_eq!(p.b.mem.read(0, first), &msg[..first], "{case}");
        assert_eq!(p.b.mem.read(100, len - first), &msg[first..], "{case}");
        assert!(p.b.mem.read(first, 100 - first).iter().all(|&x| x == STALE));
        assert!(
            p.b.mem
                .read(100 + len - first, 50)
                .iter()
                .all(|&x| x == STALE)
        );
        let cqe = p.b.last_cqe(1);
        let bits = cqe[63] & (INLINE_SCATTER_32 | INLINE_SCATTER_64);
        match bits {
            INLINE_SCATTER_32 => assert_eq!(&cqe[..len], &msg[..], "{case}"),
            INLINE_SCATTER_64 => {
                // SAFETY: the CQE was polled; the device is idle.
                let head =
                    unsafe { zverbs_sim::read_cqe_head(&p.b.cq.layout, p.b.cqp.consumer() - 1) };
                assert_eq!(&head[..len], &msg[..], "{case}");
            }
            _ => {}
        }
        bits
    })
}

#[test]
fn small_sends_scatter_into_the_cqe_at_every_size_boundary() {
    for imm in [false, true] {
        for (cqe_size, limit, format) in [(64, 32, INLINE_SCATTER_32), (128, 64, INLINE_SCATTER_64)]
        {
            for len in [0usize, 1, 31, 32, 33, 63, 64, 65] {
                let want = if len > 0 && len <= limit { format } else { 0 };
                assert_eq!(
                    one(cqe_size, true, len, imm),
                    want,
                    "{cqe_size}, {len}, {imm}"
                );
            }
        }
    }
}

#[test]
fn a_qp_not_allowed_to_scatter_never_does() {
    for cqe_size in [64, 128] {
        for len in [1, 32] {
            assert_eq!(one(cqe_size, false, len, false), 0);
        }
    }
}
