//! The software mlx5 device through the public control path: listed, opened, queues created
//! and connected with the same calls as a NIC, driven by the direct backend, torn down in any
//! order; and `zverbs-perf` running both sides on it in one process.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::connect::{Endpoint, random_psn};
use zverbs::safe::SafeSendQueue;
use zverbs::{
    AccessFlags, BackendKind, Completion, ConnectAttr, ContextOptions, PollCq, Queues, SendFlags,
    WcOpcode, WcStatus,
};

fn wait<C: PollCq>(cq: &mut C, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut wc = [Completion::EMPTY; 8];
    let t0 = Instant::now();
    while out.len() < n {
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {out:?}");
    }
    out
}

#[test]
fn software_device_runs_the_direct_path_through_the_control_path() {
    let list = zverbs::devices().unwrap();
    let dev = list
        .iter()
        .find(|d| d.is_software())
        .expect("always listed");
    let ctx = dev.open_with(&ContextOptions::default()).unwrap();
    assert_eq!(ctx.name(), "zverbs_sim0");
    assert!(!ctx.atomics_big_endian());
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let b_buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let a_cq = ctx.cq_builder().cqe(32).build().unwrap();
    let b_cq = ctx.cq_builder().cqe(32).build().unwrap();
    let a = pd.qp_builder(&a_cq, &a_cq).build().unwrap();
    let b = pd.qp_builder(&b_cq, &b_cq).build().unwrap();
    assert_eq!(a.backend().kind, BackendKind::Direct, "{}", a.backend());
    let ea = Endpoint {
        lid: local.lid,
        qpn: a.qpn(),
        psn: random_psn(),
        gid: local.gid,
    };
    let eb = Endpoint {
        qpn: b.qpn(),
        psn: random_psn(),
        ..ea
    };
    a.connect(&ConnectAttr::new(port, ea.psn, &eb, local.gid_index))
        .unwrap();
    b.connect(&ConnectAttr::new(port, eb.psn, &ea, local.gid_index))
        .unwrap();

    let Queues::Direct(qa) = Queues::take(&a, &a_cq).unwrap() else {
        panic!("the software device has only the direct backend");
    };
    let mut sq = SafeSendQueue::new(qa.sq);
    let mut cq = qa.cq;
    let sig = SendFlags::SIGNALED;

    a_buf.write(0, b"direct path on the software device");
    sq.write(1, a_buf.slice(0..34).unwrap(), b_buf.remote(64), sig)
        .unwrap();
    sq.ring();
    let w = wait(&mut cq, 1);
    assert!(
        w[0].is_success() && w[0].opcode == WcOpcode::RdmaWrite,
        "{w:?}"
    );
    let mut got = [0u8; 34];
    b_buf.read(64, &mut got);
    assert_eq!(&got, b"direct path on the software device");

    b_buf.write(1000, b"read me");
    sq.read(2, a_buf.slice(200..207).unwrap(), b_buf.remote(1000), sig)
        .unwrap();
    sq.ring();
    let w = wait(&mut cq, 1);
    assert_eq!((w[0].opcode, w[0].byte_len), (WcOpcode::RdmaRead, 7));
    let mut got = [0u8; 7];
    a_buf.read(200, &mut got);
    assert_eq!(&got, b"read me");

    b_buf.store_u64(2048, 40);
    sq.fetch_add(
        3,
        a_buf.slice(2048..2056).unwrap(),
        b_buf.remote(2048),
        2,
        sig,
    )
    .unwrap();
    sq.ring();
    let w = wait(&mut cq, 1);
    assert_eq!(w[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(a_buf.load_u64(2048), 40);
    assert_eq!(b_buf.load_u64(2048), 42);

    let bad = zverbs::RemoteBuf::new(b_buf.addr(), b_buf.rkey() ^ 0x0101_0000);
    sq.write(4, a_buf.slice(0..8).unwrap(), bad, sig).unwrap();
    sq.ring();
    let w = wait(&mut cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::RemAccessErr));

    // Teardown in an order where parents go first: children keep them alive.
    drop(pd);
    drop(ctx);
    drop((sq, cq));
    drop((a, b, a_cq, b_cq, a_buf, b_buf));
}

#[test]
fn forcing_the_fallback_on_the_software_device_is_a_clear_error() {
    let ctx = zverbs::open_device(
        Some("zverbs_sim0"),
        &ContextOptions::default().backend(zverbs::BackendRequest::Verbs),
    )
    .unwrap();
    let e = ctx.cq_builder().cqe(8).build().unwrap_err();
    assert!(e.to_string().contains("only the direct backend"), "{e}");
}

#[test]
fn zverbs_perf_runs_both_sides_on_the_software_device() {
    for (test, port) in [("write_lat", "18601"), ("send_bw", "18602")] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zverbs-perf"))
            .args([
                test,
                "-n",
                "200",
                "--warmup",
                "10",
                "-p",
                port,
                "-d",
                "zverbs_sim0",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                panic!("{test} did not finish in 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{test}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("zverbs_sim0"), "{text}");
        assert!(
            text.contains(" 200 "),
            "{test} reports its iterations: {text}"
        );
    }
}

#[test]
fn dropped_queues_free_the_software_devices_tables() {
    // The device's tables hold 1024 QPs and 1024 CQs: creating and dropping more than that
    // one after another works only if drops destroy.
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    for _ in 0..1100 {
        let cq = ctx.cq_builder().cqe(4).build().unwrap();
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(4)
            .max_recv_wr(4)
            .build()
            .unwrap();
        drop((qp, cq));
    }
}
