//! The examples in `std-shim/examples/`, run on the software device: each example's `run` is
//! its `main` without the argument parsing, so these tests run the code the binaries run and
//! check what they print.
#![cfg(feature = "sim")]

#[path = "../examples/batched_writer.rs"]
#[allow(dead_code)]
mod batched_writer;
#[path = "../examples/last_byte.rs"]
#[allow(dead_code)]
mod last_byte;
#[path = "../examples/latency.rs"]
#[allow(dead_code)]
mod latency;
#[path = "../examples/rpc.rs"]
#[allow(dead_code)]
mod rpc;

use zverbs::SOFTWARE_DEVICE;

#[test]
fn rpc_answers_every_request_of_every_client() {
    let r = rpc::run(SOFTWARE_DEVICE, 20).unwrap();
    assert_eq!(r.answers, [(10, 10); rpc::CLIENTS], "{r:?}");
    let text = r.to_string();
    assert!(text.starts_with("device: zverbs_sim0\n"), "{text}");
    assert!(
        text.contains("client 2: 20 answers checked (10 by SEND, 10 by WRITE with immediate)"),
        "{text}"
    );
    assert!(
        text.contains("rpc: 3 clients x 20 requests: 60 answered, all correct"),
        "{text}"
    );
}

#[test]
fn batched_writer_rings_once_per_batch_and_polls_once_per_signaled_write() {
    let c = batched_writer::Config {
        writes: 2000,
        batch: 16,
        signal_every: 32,
        size: 64,
    };
    let r = batched_writer::run(SOFTWARE_DEVICE, c).unwrap();
    // 2000 / 16 batches; WRITEs 32, 64, ..., 1984 signaled, and the last.
    assert_eq!((r.doorbells, r.completions), (125, 63), "{r:?}");
    assert_eq!(r.bytes, 2000 * 64);
    let text = r.to_string();
    assert!(text.contains("doorbells rung:     125"), "{text}");
    assert!(text.contains("completions polled: 63"), "{text}");
    assert!(
        text.contains("bytes written:      128000 (checked)"),
        "{text}"
    );
    // A configuration that could wait for a completion that never comes is refused.
    let e = batched_writer::run(
        SOFTWARE_DEVICE,
        batched_writer::Config {
            signal_every: batched_writer::DEPTH.into(),
            ..c
        },
    )
    .unwrap_err();
    assert!(matches!(e, zverbs::Error::InvalidArgument(_)), "{e}");
}

#[test]
fn last_byte_sees_every_message_whole() {
    // More messages than slots times stamps: every slot's stamp wraps.
    let r = last_byte::run(SOFTWARE_DEVICE, 8 * 255 + 40, 64).unwrap();
    assert_eq!((r.messages, r.size), (8 * 255 + 40, 64));
    let text = r.to_string();
    assert!(
        text.contains("last_byte: 2080 messages of 64 bytes through 8 slots"),
        "{text}"
    );
    let e = last_byte::run(SOFTWARE_DEVICE, 1, 1).unwrap_err();
    assert!(matches!(e, zverbs::Error::InvalidArgument(_)), "{e}");
}

#[test]
fn latency_reports_ordered_percentiles_for_both_operations() {
    for op in [latency::Op::Write, latency::Op::Send] {
        let r = latency::run(SOFTWARE_DEVICE, op, 200, 8).unwrap();
        assert_eq!(r.iters, 200);
        assert!(
            0 < r.min && r.min <= r.p50 && r.p50 <= r.p99 && r.p99 <= r.max,
            "{r:?}"
        );
        let text = r.to_string();
        assert!(
            text.contains("latency: 200 round trips of 8 bytes"),
            "{text}"
        );
        assert!(text.contains(&format!("p50 {} ns", r.p50)), "{text}");
    }
}
