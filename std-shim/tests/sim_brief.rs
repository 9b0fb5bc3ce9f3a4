//! Brief polls and scatter-to-CQE through the public API on the software device: small SENDs
//! arrive in the receive CQE (the control path creates the QPs allowing it), the direct
//! poller copies them into the receive buffers, and `poll_brief` reports them as `poll` would.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::{
    AccessFlags, BriefCompletion, ContextOptions, PollCq, PostRecv, PostSend, RecvWr, Registered,
    SendWr, WcOpcode,
};

fn brief(cq: &mut impl PollCq, n: usize) -> Vec<BriefCompletion> {
    let mut out = Vec::new();
    let mut wc = [BriefCompletion::EMPTY; 4];
    let t0 = Instant::now();
    while out.len() < n {
        let k = cq.poll_brief(&mut wc);
        out.extend_from_slice(&wc[..k]);
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {out:?}");
    }
    out
}

#[test]
fn small_sends_scattered_into_the_cqe_reach_the_buffers_and_poll_briefly() {
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (
        ctx.cq_builder().build().unwrap(),
        ctx.cq_builder().build().unwrap(),
    );
    let a = pd.qp_builder(&cq_a, &cq_a).build().unwrap();
    let b = pd.qp_builder(&cq_b, &cq_b).build().unwrap();
    zverbs::connect_pair(&a, &b).unwrap();
    let buf_a = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let buf_b = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    buf_b.fill(0..4096, 0xee).unwrap();
    let (mut sq, mut rq) = (a.send_queue().unwrap(), b.recv_queue().unwrap());
    let (mut pa, mut pb) = (cq_a.poller().unwrap(), cq_b.poller().unwrap());
    // 1, 32 (scattered into 64-byte CQEs) and 33 bytes (not).
    let lens = [1usize, 32, 33];
    for (i, len) in lens.iter().enumerate() {
        let msg: Vec<u8> = (0..*len).map(|j| (j + 1 + i * 50) as u8).collect();
        buf_a.write(i * 100, &msg).unwrap();
        let rx = [buf_b.sge(i * 100..i * 100 + 64).unwrap()];
        // SAFETY: registered buffers, which Rust does not touch while the requests run.
        unsafe { PostRecv::post(&mut rq, &RecvWr::new(10 + i as u64, &rx)) }.unwrap();
        let tx = [buf_a.sge(i * 100..i * 100 + len).unwrap()];
        // SAFETY: as above.
        unsafe { sq.post(&SendWr::send(20 + i as u64, &tx).signaled()) }.unwrap();
    }
    let sent = brief(&mut pa, 3);
    assert_eq!(
        sent.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
        [
            (20, WcOpcode::Send),
            (21, WcOpcode::Send),
            (22, WcOpcode::Send)
        ]
    );
    let got = brief(&mut pb, 3);
    for (i, len) in lens.iter().enumerate() {
        assert!(got[i].is_success(), "{:?}", got[i]);
        assert_eq!(
            (got[i].wr_id, got[i].opcode, got[i].byte_len),
            (10 + i as u64, WcOpcode::Recv, *len as u32)
        );
        let mut data = vec![0u8; 64];
        buf_b.read(i * 100, &mut data).unwrap();
        let msg: Vec<u8> = (0..*len).map(|j| (j + 1 + i * 50) as u8).collect();
        assert_eq!(&data[..*len], &msg[..], "message {i}");
        assert!(data[*len..].iter().all(|&x| x == 0xee), "message {i}");
    }
}
