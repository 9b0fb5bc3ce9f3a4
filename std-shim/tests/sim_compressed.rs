//! CQs with compressed CQEs through the zverbs API on the software device: a burst of
//! receives arrives as compressed sessions and is polled, one completion at a time, as the
//! messages sent; the fallback refuses such a CQ.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::backend::Queues;
use zverbs::{
    AccessFlags, BackendRequest, Completion, ContextOptions, MiniCqeFormat, PollCq, PostRecv,
    PostSend, RecvWr, Registered, SendWr,
};

#[test]
#[cfg_attr(miri, ignore = "the software device's progress thread")]
fn a_burst_of_receives_comes_compressed_and_whole() {
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let sim = ctx.sim().expect("the software device");
    // Stepped: the whole burst is on the wire before the device runs.
    sim.set_stepped(true);
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.cq_builder().build().unwrap();
    let cq_b = ctx
        .cq_builder()
        .cqe(64)
        .compressed(MiniCqeFormat::Csum)
        .build()
        .unwrap();
    assert!(cq_b.backend().reason.contains("compressed CQEs"));
    let (a, b) = (
        pd.qp_builder(&cq_a, &cq_a).build().unwrap(),
        pd.qp_builder(&cq_b, &cq_b).build().unwrap(),
    );
    zverbs::connect_pair(&a, &b).unwrap();
    let buf_a = pd.alloc_buf(1 << 16, AccessFlags::ALL).unwrap();
    let buf_b = pd.alloc_buf(1 << 16, AccessFlags::ALL).unwrap();
    let (Queues::Direct(mut qa), Queues::Direct(mut qb)) = (
        Queues::take(&a, &cq_a).unwrap(),
        Queues::take(&b, &cq_b).unwrap(),
    ) else {
        panic!("the software device is driven directly");
    };
    let n = 30u32;
    for i in 0..n {
        let sgl = [buf_b
            .sge(i as usize * 1024..(i as usize + 1) * 1024)
            .unwrap()];
        // SAFETY: registered memory, untouched by Rust while the receive is posted.
        unsafe { qb.rq.post(&RecvWr::new(500 + u64::from(i), &sgl)) }.unwrap();
    }
    for i in 0..n {
        let sgl = [buf_a.sge(0..(i as usize * 3 + 2)).unwrap()];
        let wr = SendWr::send(u64::from(i), &sgl);
        // SAFETY: as above.
        unsafe { qa.sq.post(&if i + 1 == n { wr.signaled() } else { wr }) }.unwrap();
    }
    let before = sim.stats().compressed_sessions;
    let mut got = Vec::new();
    let mut wc = [Completion::EMPTY; 1];
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n as usize {
        sim.step();
        while qb.cq.poll(&mut wc) == 1 {
            got.push(wc[0]);
        }
        assert!(Instant::now() < deadline, "{} of {n} receives", got.len());
    }
    let sessions = sim.stats().compressed_sessions - before;
    assert!(sessions >= 1, "the burst was compressed");
    for (i, c) in got.iter().enumerate() {
        assert!(c.is_success(), "{c:?}");
        assert_eq!(
            (c.wr_id, c.byte_len),
            (500 + i as u64, i as u32 * 3 + 2),
            "{sessions} sessions"
        );
    }
    sim.set_stepped(false);
}

#[test]
#[cfg_attr(miri, ignore = "the software device")]
fn the_fallback_refuses_a_compressed_cq() {
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let e = ctx
        .cq_builder()
        .backend(BackendRequest::Verbs)
        .compressed(MiniCqeFormat::Hash)
        .build()
        .unwrap_err();
    assert!(matches!(e, zverbs::Error::NoCqeCompression { .. }), "{e}");
    assert!(e.to_string().contains("only the direct backend"), "{e}");
}
