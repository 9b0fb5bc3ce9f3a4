//! CQs with compressed CQEs on the emulated ConnectX, through zverbs over the unmodified
//! libibverbs and libmlx5: libmlx5 reads the device's `cqe_comp_caps` (`QUERY_DEVICE`), creates
//! the CQ with `cqe_comp_en` and the format (`mlx5dv_create_cq`), the software device writes
//! compressed sessions into it, and the direct poller expands them into the completions of
//! the messages sent. On the fallback the CQ is refused: libmlx5's `ibv_poll_cq` does not
//! expand compressed CQEs.
//!
//! Run by the `connectx` stage (`cargo test --release -p zverbs-emu --test compressed`).

mod common;

use std::time::{Duration, Instant};

use common::in_emulator;
use zverbs::backend::Queues;
use zverbs::{
    AccessFlags, BackendKind, BackendRequest, Completion, ContextOptions, MiniCqeFormat, PollCq,
    PostRecv, PostSend, RecvWr, Registered, SendWr,
};

fn run() {
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    for format in MiniCqeFormat::ALL {
        let cq_a = ctx.cq_builder().build().unwrap();
        let cq_b = ctx.cq_builder().cqe(64).compressed(format).build().unwrap();
        assert_eq!(cq_b.backend().kind, BackendKind::Direct);
        assert!(
            cq_b.backend().reason.contains("compressed CQEs"),
            "{}",
            cq_b.backend().reason
        );
        let qp = |cq: &zverbs::Cq| pd.qp_builder(cq, cq).build().unwrap();
        let (a, b) = (qp(&cq_a), qp(&cq_b));
        zverbs::connect_pair(&a, &b).unwrap();
        let buf_a = pd.alloc_buf(1 << 16, AccessFlags::ALL).unwrap();
        let buf_b = pd.alloc_buf(1 << 16, AccessFlags::ALL).unwrap();
        let (Queues::Direct(mut qa), Queues::Direct(mut qb)) = (
            Queues::take(&a, &cq_a).unwrap(),
            Queues::take(&b, &cq_b).unwrap(),
        ) else {
            panic!("an mlx5 device is driven directly");
        };
        let n = 40u32;
        for i in 0..n {
            let sgl = [buf_b
                .sge(i as usize * 1024..(i as usize + 1) * 1024)
                .unwrap()];
            // SAFETY: registered memory, which Rust does not touch while the receive is posted.
            unsafe { qb.rq.post(&RecvWr::new(1000 + u64::from(i), &sgl)) }.unwrap();
        }
        // A burst of SENDs, one doorbell each, the last one signaled.
        for i in 0..n {
            let sgl = [buf_a.sge(0..(i as usize * 7 + 1)).unwrap()];
            let wr = SendWr::send(u64::from(i), &sgl);
            let wr = if i + 1 == n { wr.signaled() } else { wr };
            // SAFETY: as above.
            unsafe { qa.sq.post(&wr) }.unwrap();
        }
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 3];
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < n as usize {
            let k = qb.cq.poll(&mut wc);
            got.extend_from_slice(&wc[..k]);
            assert!(Instant::now() < deadline, "{} of {n} receives", got.len());
        }
        for (i, c) in got.iter().enumerate() {
            assert!(c.is_success(), "{c:?}");
            assert_eq!(
                (c.wr_id, c.byte_len, c.qp_num),
                (1000 + i as u64, i as u32 * 7 + 1, b.qpn()),
                "{format:?}"
            );
        }
        let mut one = [Completion::EMPTY; 1];
        while qa.cq.poll(&mut one) == 0 {
            assert!(Instant::now() < deadline, "the SENDs' completion");
        }
        assert_eq!(one[0].wr_id, u64::from(n - 1));
    }
    // The fallback cannot expand them: refused, with the reason.
    let e = ctx
        .cq_builder()
        .backend(BackendRequest::Verbs)
        .compressed(MiniCqeFormat::Hash)
        .build()
        .unwrap_err();
    assert!(matches!(e, zverbs::Error::NoCqeCompression { .. }), "{e}");
}

#[test]
fn compressed_cqes_through_unmodified_libmlx5() {
    if in_emulator(
        "compressed_cqes_through_unmodified_libmlx5",
        &[],
        Duration::from_secs(120),
    ) {
        run();
    }
}
