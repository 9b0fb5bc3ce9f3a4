//! Scatter-to-CQE on the emulated ConnectX: libmlx5 creates RC QPs allowing it (its
//! default, `MLX5_QP_FLAG_SCATTER_CQE`), the device then delivers small SENDs in the receive
//! CQE (32 bytes in a 64-byte CQE; 64 in the first half of a 128-byte entry, with
//! `MLX5_CQE_SIZE=128`) and leaves the receive buffers alone. The data reaching the buffers
//! byte-exact proves the CQE layout: on the fallback, unmodified libmlx5 decodes the device's
//! scattered CQEs (`ibv_poll_cq`); on the direct path, zverbs' poller does.
//!
//! Run by the `connectx` stage (`cargo test --release -p zverbs-emu --test scatter`).

mod common;

use std::time::{Duration, Instant};

use common::in_emulator;
use zverbs::{
    AccessFlags, BackendRequest, Completion, ContextOptions, PollCq, Poller, PostRecv, PostSend,
    RecvQueue, RecvWr, Registered, SendQueue, SendWr, WcOpcode, WcStatus,
};

const STALE: u8 = 0xee;

fn wait(cq: &mut Poller) -> Completion {
    let mut wc = [Completion::EMPTY; 1];
    let deadline = Instant::now() + Duration::from_secs(30);
    while cq.poll(&mut wc) == 0 {
        assert!(Instant::now() < deadline, "no completion");
    }
    wc[0]
}

/// Sends messages of every size around the CQE's room from A to B on `backend`, each into a
/// receive of two entries, and checks B's buffers and completions; `room` is what the device
/// scatters (32 or 64 bytes).
fn run(backend: BackendRequest, room: usize) {
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = || ctx.cq_builder().backend(backend).build().unwrap();
    let (cq_a, cq_b) = (cq(), cq());
    let qp = |cq: &zverbs::Cq| {
        pd.qp_builder(cq, cq)
            .backend(backend)
            .max_recv_sge(2)
            .build()
            .unwrap()
    };
    let (a, b) = (qp(&cq_a), qp(&cq_b));
    zverbs::connect_pair(&a, &b).unwrap();
    let buf_a = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let buf_b = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut sq: SendQueue = a.send_queue().unwrap();
    let mut rq: RecvQueue = b.recv_queue().unwrap();
    let (mut pa, mut pb) = (cq_a.poller().unwrap(), cq_b.poller().unwrap());
    let before = zverbs_emu::stats::device_stats().expect("the emulator serves this process");
    let mut scattered = 0;
    for (k, len) in [1usize, 8, 31, 32, 33, 63, 64, 65, 200]
        .into_iter()
        .enumerate()
    {
        for imm in [false, true] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 3 + k + 1) as u8).collect();
            buf_a.write(0, &msg).unwrap();
            buf_b.fill(0..1024, STALE).unwrap();
            let rx = [buf_b.sge(0..10).unwrap(), buf_b.sge(512..1024).unwrap()];
            let id = (k * 2 + usize::from(imm)) as u64;
            // SAFETY: registered buffers, which Rust does not touch while the requests run.
            unsafe { PostRecv::post(&mut rq, &RecvWr::new(id, &rx)) }.unwrap();
            let tx = [buf_a.sge(0..len).unwrap()];
            let wr = if imm {
                SendWr::send_imm(id, &tx, 0xaabb_ccdd)
            } else {
                SendWr::send(id, &tx)
            };
            // SAFETY: as above.
            unsafe { sq.post(&wr.signaled()) }.unwrap();
            let s = wait(&mut pa);
            assert!(s.is_success(), "{s:?}");
            let w = wait(&mut pb);
            let case = format!("{backend:?}, {len} bytes, imm {imm}");
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len),
                (id, WcStatus::Success, WcOpcode::Recv, len as u32),
                "{case}"
            );
            assert_eq!(w.imm(), imm.then_some(0xaabb_ccdd), "{case}");
            let mut got = vec![0u8; 1024];
            buf_b.read(0, &mut got).unwrap();
            let first = len.min(10);
            assert_eq!(&got[..first], &msg[..first], "{case}");
            assert_eq!(&got[512..512 + len - first], &msg[first..], "{case}");
            assert!(got[first..512].iter().all(|&x| x == STALE), "{case}");
            assert!(
                got[512 + len - first..].iter().all(|&x| x == STALE),
                "{case}"
            );
            scattered += usize::from(len <= room);
        }
    }
    let after = zverbs_emu::stats::device_stats().unwrap();
    assert_eq!(
        after.scattered - before.scattered,
        scattered as u64,
        "the device delivered each message of at most {room} bytes in the CQE"
    );
}

#[test]
fn fallback_libmlx5_decodes_scattered_cqes() {
    if in_emulator(
        "fallback_libmlx5_decodes_scattered_cqes",
        &[],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Verbs, 32);
    }
}

#[test]
fn fallback_libmlx5_decodes_64_byte_scatters_in_128_byte_cqes() {
    if in_emulator(
        "fallback_libmlx5_decodes_64_byte_scatters_in_128_byte_cqes",
        &[("MLX5_CQE_SIZE", "128")],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Verbs, 64);
    }
}

#[test]
fn direct_poller_decodes_scattered_cqes() {
    if in_emulator(
        "direct_poller_decodes_scattered_cqes",
        &[],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Direct, 32);
    }
}

#[test]
fn direct_poller_decodes_64_byte_scatters_in_128_byte_cqes() {
    if in_emulator(
        "direct_poller_decodes_64_byte_scatters_in_128_byte_cqes",
        &[("MLX5_CQE_SIZE", "128")],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Direct, 64);
    }
}
