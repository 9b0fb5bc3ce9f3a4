//! Modify to RESET on the software device: the old incarnation's work the device had not
//! carried out is discarded without a completion, the CQEs it held back for the QP are
//! dropped, the QP is no longer connected, and it can be connected again.

mod common;

use common::{PairCfg, with_pair};
use zverbs_core::{PostSend, SendWr};
use zverbs_sim::{Peer, QpStatus};

#[test]
fn reset_discards_unexecuted_work_and_held_completions() {
    with_pair(PairCfg::default(), |p| {
        let (a, b) = (p.a.qpn(), p.b.qpn());
        p.b.mem.fill(0, 64, 0);
        p.a.mem.write(0, b"old incarnation");
        // Published to the device, not yet carried out.
        let sgl = [p.a.sge(0, 15)];
        // SAFETY: the entries lie in the registered arenas.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
        }
        .unwrap();
        assert_eq!(p.dev.reset_qp(a).unwrap(), 0);
        assert_eq!(p.dev.qp_status(a).unwrap(), QpStatus::Init);
        // SAFETY: the QP is in RESET; nothing posts to it meanwhile.
        unsafe { zverbs_mlx5dv::clear_doorbell_record(&p.a.qp.layout) };
        let (ca, cb) = p.run();
        assert!(ca.is_empty() && cb.is_empty(), "{ca:?} {cb:?}");
        assert_eq!(
            p.b.mem.read(0, 15),
            [0; 15],
            "the WRITE was not carried out"
        );
        // Connected again (B still names A as its peer).
        p.dev.connect_to(a, Peer::Local(b)).unwrap();
        assert_eq!(p.dev.qp_status(a).unwrap(), QpStatus::Rts);
        assert_eq!(p.dev.psns(a).unwrap(), (0, 0));
    });
}

#[test]
fn reset_drops_the_completions_held_back_for_the_qp() {
    with_pair(PairCfg::default(), |p| {
        let a = p.a.qpn();
        p.dev.hold_completions(p.a.cq.cqn).unwrap();
        let sgl = [p.a.sge(0, 8)];
        for i in 0..3 {
            // SAFETY: the entries lie in the registered arenas.
            unsafe {
                p.a.sq
                    .post(&SendWr::write(i, &sgl, p.b.remote(0)).signaled())
            }
            .unwrap();
        }
        p.dev.run_until_idle();
        p.dev.set_error(a).unwrap();
        assert_eq!(p.dev.reset_qp(a).unwrap(), 3);
        assert_eq!(p.dev.release_completions(p.a.cq.cqn).unwrap(), 0);
        assert!(p.a.poll_all().is_empty());
        // From the error state too, and again.
        p.dev.set_error(a).unwrap();
        assert_eq!(p.dev.reset_qp(a).unwrap(), 0);
        assert_eq!(p.dev.qp_status(a).unwrap(), QpStatus::Init);
    });
}
