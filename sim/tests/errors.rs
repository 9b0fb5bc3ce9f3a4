//! Every error path: the syndrome and vendor syndrome reported, the error state, flushes, and
//! exactly one completion for every work request. Also the injected faults and CQ overrun
//! detection.

mod common;

use common::{Pair, PairCfg, assert_exactly_once, with_pair};
use zverbs_core::{Completion, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge, WcStatus};
use zverbs_sim::{Access, QpConfig, QpStatus, vendor};

fn status(c: &[Completion], id: u64) -> (WcStatus, u32) {
    let c = c.iter().find(|c| c.wr_id == id).expect("completion");
    (c.status, c.vendor_err)
}

/// Posts `wrs` as one batch on A, plus signaled NOPs after the ring; then returns A's and B's
/// completions after the device settles. Checks that every WR got exactly one completion.
fn run_failing(
    p: &mut Pair<'_>,
    wrs: &[SendWr<'_>],
    later: u64,
) -> (Vec<Completion>, Vec<Completion>) {
    // SAFETY: the tests' entries lie in the registered arenas (or are meant to be refused by
    // the device, which checks them).
    unsafe { p.a.sq.post_all(wrs) }.unwrap();
    p.dev.run_until_idle();
    // Requests posted after the error are flushed too.
    for i in 0..later {
        // SAFETY: a NOP touches no memory.
        unsafe { p.a.sq.post(&SendWr::nop(0x1000 + i)) }.unwrap();
    }
    let (ca, cb) = p.run();
    let mut posted: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
    posted.extend((0..later).map(|i| 0x1000 + i));
    assert_exactly_once(&posted, &ca);
    assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
    (ca, cb)
}

fn all_flushed_after(c: &[Completion], first_error: u64) {
    let i = c.iter().position(|c| c.wr_id == first_error).unwrap();
    for c in &c[i + 1..] {
        assert_eq!(c.status, WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(c.vendor_err, u32::from(vendor::FLUSH));
    }
}

#[test]
fn local_protection_errors() {
    // (bad entry, vendor syndrome)
    type Case = fn(&Pair<'_>) -> (Sge, bool, u8);
    let cases: [Case; 5] = [
        |p| (Sge::new(p.a.mem.addr(0), 8, 0x4242), false, vendor::LKEY),
        |p| {
            (
                Sge::new(p.a.mem.addr(0), 8, p.a.mr.rkey),
                false,
                vendor::LKEY,
            )
        },
        |p| (p.a.sge(p.a.mem.len() - 4, 8), false, vendor::LOCAL_BOUNDS),
        |p| {
            (
                Sge::new(p.a.mem.addr(0) - 1, 8, p.a.mr.lkey),
                false,
                vendor::LOCAL_BOUNDS,
            )
        },
        |p| (p.a.sge(0, 8), true, vendor::LOCAL_ACCESS),
    ];
    for case in cases {
        with_pair(PairCfg::default(), |p| {
            let (bad, read_only, v) = case(p);
            let bad = if read_only {
                // A region without local write as a READ destination.
                // SAFETY: the arena outlives the device.
                let ro = unsafe { p.dev.reg_mr(p.a.mem.ptr(0), 64, Access::NONE) }.unwrap();
                Sge::new(bad.addr, bad.length, ro.lkey)
            } else {
                bad
            };
            let good = [p.a.sge(0, 8)];
            let bad_l = [bad];
            let wrs = [
                SendWr::write(1, &good, p.b.remote(0)), // unsignaled, succeeds: no completion
                SendWr::write(2, &good, p.b.remote(0)).signaled(),
                if read_only {
                    SendWr::read(3, &bad_l, p.b.remote(0))
                } else {
                    SendWr::write(3, &bad_l, p.b.remote(0))
                },
                SendWr::write(4, &good, p.b.remote(0)),
                SendWr::write(5, &good, p.b.remote(0)).signaled(),
            ];
            let (ca, cb) = {
                // SAFETY: see `run_failing`.
                unsafe { p.a.sq.post_all(&wrs) }.unwrap();
                p.run()
            };
            assert_exactly_once(&[2, 3, 4, 5], &ca);
            assert_eq!(status(&ca, 2).0, WcStatus::Success);
            assert_eq!(status(&ca, 3), (WcStatus::LocProtErr, u32::from(v)));
            all_flushed_after(&ca, 3);
            assert!(cb.is_empty());
            assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
            assert_eq!(
                p.dev.qp_status(p.b.qpn()).unwrap(),
                QpStatus::Rts,
                "peer unaffected"
            );
        });
    }
}

#[test]
fn atomic_result_into_read_only_memory_is_a_local_protection_error() {
    with_pair(PairCfg::default(), |p| {
        // SAFETY: the arena outlives the device.
        let ro = unsafe { p.dev.reg_mr(p.a.mem.ptr(0), 64, Access::NONE) }.unwrap();
        let local = Sge::new(p.a.mem.addr(0), 8, ro.lkey);
        let (ca, _) = run_failing(p, &[SendWr::fetch_add(1, local, p.b.remote(0), 1)], 2);
        assert_eq!(
            status(&ca, 1),
            (WcStatus::LocProtErr, u32::from(vendor::LOCAL_ACCESS))
        );
        assert_eq!(p.b.mem.read_u64_be(0), 0, "the target is untouched");
    });
}

#[test]
fn remote_access_errors_put_both_sides_in_error() {
    type Case = fn(&Pair<'_>, Sge) -> (SendWr<'static>, u8);
    let cases: [(&str, Case); 7] = [
        ("bad rkey", |p, l| {
            (
                SendWr::write(1, leak(l), RemoteBuf::new(p.b.mem.addr(0), 0x999)),
                vendor::RKEY,
            )
        }),
        ("lkey as rkey", |p, l| {
            (
                SendWr::write(1, leak(l), RemoteBuf::new(p.b.mem.addr(0), p.b.mr.lkey)),
                vendor::RKEY,
            )
        }),
        ("past the end", |p, l| {
            (
                SendWr::write(1, leak(l), p.b.remote(p.b.mem.len() - 4)),
                vendor::REMOTE_BOUNDS,
            )
        }),
        ("wrap-around", |p, l| {
            (
                SendWr::write(1, leak(l), RemoteBuf::new(u64::MAX - 3, p.b.mr.rkey)),
                vendor::REMOTE_BOUNDS,
            )
        }),
        ("no remote write", |p, l| {
            (
                SendWr::write(1, leak(l), ro_remote(p)),
                vendor::REMOTE_ACCESS,
            )
        }),
        ("no remote read", |p, l| {
            (
                SendWr::read(1, leak(l), wo_remote(p)),
                vendor::REMOTE_ACCESS,
            )
        }),
        ("no remote atomic", |p, l| {
            (
                SendWr::fetch_add(1, l, wo_remote(p), 1),
                vendor::REMOTE_ACCESS,
            )
        }),
    ];
    for (name, case) in cases {
        with_pair(PairCfg::default(), |p| {
            // The responder has receives posted: they are flushed when it enters the error
            // state.
            // SAFETY: receive entries in the registered arena.
            unsafe {
                p.b.rq.post(&RecvWr::new(0xb1, &[p.b.sge(0, 8)])).unwrap();
                p.b.rq.post(&RecvWr::new(0xb2, &[p.b.sge(8, 8)])).unwrap();
            }
            let events = p.dev.subscribe_events(Box::new(|| {}));
            let (wr, v) = case(p, p.a.sge(0, 8));
            let (ca, cb) = run_failing(p, &[wr], 1);
            assert_eq!(
                status(&ca, 1),
                (WcStatus::RemAccessErr, u32::from(v)),
                "{name}"
            );
            all_flushed_after(&ca, 1);
            assert_eq!(
                p.dev.qp_status(p.b.qpn()).unwrap(),
                QpStatus::Error,
                "{name}"
            );
            // And says so to the responder's side, once: an access error event.
            let raised: Vec<_> = std::iter::from_fn(|| events.try_next()).collect();
            assert_eq!(
                raised,
                [zverbs_sim::DeviceEvent::QpAccessError { qpn: p.b.qpn() }],
                "{name}"
            );
            assert_exactly_once(&[0xb1, 0xb2], &cb);
            assert!(cb.iter().all(|c| c.status == WcStatus::WrFlushErr));
            assert_eq!(p.b.mem.read(0, 64), [0; 64], "{name}: nothing written");
        });
    }
}

fn leak(s: Sge) -> &'static [Sge] {
    Box::leak(Box::new([s]))
}

/// B's first 64 bytes registered for remote read only.
fn ro_remote(p: &Pair<'_>) -> RemoteBuf {
    // SAFETY: the arena outlives the device.
    let mr = unsafe { p.dev.reg_mr(p.b.mem.ptr(0), 64, Access::REMOTE_READ) }.unwrap();
    RemoteBuf::new(p.b.mem.addr(0), mr.rkey)
}

/// B's first 64 bytes registered for remote write only.
fn wo_remote(p: &Pair<'_>) -> RemoteBuf {
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // SAFETY: the arena outlives the device.
    let mr = unsafe { p.dev.reg_mr(p.b.mem.ptr(0), 64, access) }.unwrap();
    RemoteBuf::new(p.b.mem.addr(0), mr.rkey)
}

#[test]
fn send_longer_than_the_receive() {
    with_pair(PairCfg::default(), |p| {
        // SAFETY: receive entries in the registered arena.
        unsafe {
            p.b.rq
                .post(&RecvWr::new(0xb1, &[p.b.sge(0, 4), p.b.sge(100, 4)]))
                .unwrap();
            p.b.rq.post(&RecvWr::new(0xb2, &[p.b.sge(8, 64)])).unwrap();
        }
        p.a.mem.write(0, &[9; 9]);
        let sgl = [p.a.sge(0, 9)];
        let (ca, cb) = run_failing(p, &[SendWr::send(1, &sgl)], 2);
        assert_eq!(
            status(&ca, 1),
            (WcStatus::RemInvReqErr, u32::from(vendor::RECV_TOO_SHORT))
        );
        assert_exactly_once(&[0xb1, 0xb2], &cb);
        assert_eq!(
            status(&cb, 0xb1),
            (WcStatus::LocLenErr, u32::from(vendor::RECV_TOO_SHORT))
        );
        assert_eq!(status(&cb, 0xb2).0, WcStatus::WrFlushErr);
        assert_eq!(p.b.mem.read(0, 8), [0; 8], "nothing placed");
        assert_eq!(p.dev.qp_status(p.b.qpn()).unwrap(), QpStatus::Error);
    });
}

#[test]
fn bad_receive_entry() {
    with_pair(PairCfg::default(), |p| {
        // SAFETY: the receive names a bad key on purpose: the device refuses it.
        unsafe {
            p.b.rq
                .post(&RecvWr::new(0xb1, &[Sge::new(p.b.mem.addr(0), 64, 0x5151)]))
                .unwrap()
        };
        let sgl = [p.a.sge(0, 9)];
        let (ca, cb) = run_failing(p, &[SendWr::send_imm(1, &sgl, 3).signaled()], 0);
        assert_eq!(
            status(&ca, 1),
            (WcStatus::RemOpErr, u32::from(vendor::REMOTE_RECV))
        );
        assert_exactly_once(&[0xb1], &cb);
        assert_eq!(
            status(&cb, 0xb1),
            (WcStatus::LocProtErr, u32::from(vendor::RECV_LKEY))
        );
    });
}

#[test]
fn receive_into_memory_without_local_write() {
    with_pair(PairCfg::default(), |p| {
        // SAFETY: the arena outlives the device.
        let ro = unsafe { p.dev.reg_mr(p.b.mem.ptr(0), 64, Access::REMOTE_READ) }.unwrap();
        // SAFETY: refused by the device.
        unsafe {
            p.b.rq
                .post(&RecvWr::new(
                    0xb1,
                    &[Sge::new(p.b.mem.addr(0), 64, ro.lkey)],
                ))
                .unwrap()
        };
        let sgl = [p.a.sge(0, 9)];
        let (ca, cb) = run_failing(p, &[SendWr::send(1, &sgl)], 0);
        assert_eq!(status(&ca, 1).0, WcStatus::RemOpErr);
        assert_eq!(
            status(&cb, 0xb1),
            (WcStatus::LocProtErr, u32::from(vendor::RECV_ACCESS))
        );
    });
}

#[test]
fn rnr_retry_exceeded_when_no_receive_is_posted() {
    for imm in [false, true] {
        with_pair(PairCfg::default(), |p| {
            let sgl = [p.a.sge(0, 8)];
            let wr = if imm {
                SendWr::write_imm(1, &sgl, p.b.remote(0), 5)
            } else {
                SendWr::send(1, &sgl)
            };
            let (ca, cb) = run_failing(p, &[wr], 1);
            assert_eq!(
                status(&ca, 1),
                (WcStatus::RnrRetryExcErr, u32::from(vendor::RNR))
            );
            assert!(cb.is_empty());
            assert_eq!(p.b.mem.read(0, 8), [0; 8], "nothing written");
            assert_eq!(
                p.dev.qp_status(p.b.qpn()).unwrap(),
                QpStatus::Rts,
                "responder fine"
            );
        });
    }
}

#[test]
fn rnr_retries_then_succeeds_or_fails() {
    let cfg = PairCfg {
        qp: QpConfig {
            rnr_retry: 3,
            ..PairCfg::default().qp
        },
        ..PairCfg::default()
    };
    with_pair(cfg, |p| {
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: entries in the registered arenas.
        unsafe { p.a.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
        for _ in 0..3 {
            assert_eq!(p.dev.step(), 1, "an RNR retry");
        }
        // SAFETY: as above.
        unsafe { p.b.rq.post(&RecvWr::new(0xb1, &[p.b.sge(0, 8)])) }.unwrap();
        let (ca, cb) = p.run();
        assert!(ca[0].is_success());
        assert_eq!(cb[0].wr_id, 0xb1);
        assert_eq!(p.dev.stats().rnr_naks, 3);
        // Now with no receive: 3 retries, then the error on the fourth try.
        // SAFETY: as above.
        unsafe { p.a.sq.post(&SendWr::send(2, &sgl).signaled()) }.unwrap();
        let (ca, _) = p.run();
        assert_eq!(status(&ca, 2).0, WcStatus::RnrRetryExcErr);
        assert_eq!(p.dev.stats().rnr_naks, 3 + 4);
    });
}

#[test]
fn infinite_rnr_retry_waits_for_a_receive() {
    let cfg = PairCfg {
        qp: QpConfig {
            rnr_retry: 7,
            ..PairCfg::default().qp
        },
        ..PairCfg::default()
    };
    with_pair(cfg, |p| {
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: entries in the registered arenas.
        unsafe { p.a.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
        for _ in 0..100 {
            p.dev.step();
        }
        assert!(p.a.poll_all().is_empty());
        // SAFETY: as above.
        unsafe { p.b.rq.post(&RecvWr::new(0xb1, &[p.b.sge(0, 8)])) }.unwrap();
        let (ca, cb) = p.run();
        assert!(ca[0].is_success() && cb[0].is_success());
    });
}

#[test]
fn peer_in_error_gives_transport_retry_exceeded() {
    with_pair(PairCfg::default(), |p| {
        p.dev.set_error(p.b.qpn()).unwrap();
        let sgl = [p.a.sge(0, 8)];
        let (ca, _) = run_failing(p, &[SendWr::write(1, &sgl, p.b.remote(0))], 1);
        assert_eq!(
            status(&ca, 1),
            (WcStatus::RetryExcErr, u32::from(vendor::PEER_DOWN))
        );
    });
}

#[test]
fn set_error_flushes_posted_and_later_receives_and_sends() {
    with_pair(PairCfg::default(), |p| {
        let rx = [p.b.sge(0, 8)];
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.b.rq
                .post_all(&[RecvWr::new(1, &rx), RecvWr::new(2, &rx)])
                .unwrap()
        };
        p.dev.set_error(p.b.qpn()).unwrap();
        p.dev.run_until_idle();
        // SAFETY: as above.
        unsafe {
            p.b.rq.post(&RecvWr::new(3, &rx)).unwrap();
            p.b.sq.post(&SendWr::nop(4)).unwrap();
            p.b.sq.post(&SendWr::write(5, &rx, p.a.remote(0))).unwrap();
        }
        let (ca, cb) = p.run();
        assert!(ca.is_empty());
        assert_exactly_once(&[1, 2, 3, 4, 5], &cb);
        assert!(cb.iter().all(|c| c.status == WcStatus::WrFlushErr));
        assert_eq!(p.a.mem.read(0, 8), [0; 8]);
    });
}

// ----- malformed WQEs: the ring is patched between post and ring -----

/// Posts `wr` on A without ringing, lets `patch` change its first basic blocks in the ring,
/// then rings and runs. Returns A's completions.
fn post_patched(
    p: &mut Pair<'_>,
    wr: &SendWr<'_>,
    patch: impl FnOnce(&mut [u8]),
) -> Vec<Completion> {
    let block = p.a.sq.producer() % p.a.sq.blocks();
    // SAFETY: entries in the registered arenas.
    unsafe { p.a.sq.stage(wr) }.unwrap();
    let ring = p.a.qp.layout.sq;
    let len = (ring.wqe_cnt - block) as usize * 64;
    // SAFETY: the WQE is written but not published: only this thread touches it.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(ring.buf.as_ptr().add(block as usize * 64), len) };
    patch(bytes);
    p.a.sq.ring();
    let (ca, _) = p.run();
    ca
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    type Patch = fn(&mut [u8]);
    let cases: [(&str, Patch, u8); 8] = [
        ("ds 0", |b| b[7] = 0, vendor::DS_ZERO),
        ("ds past the producer", |b| b[7] = 5, vendor::PAST_PRODUCER),
        ("unknown opcode", |b| b[3] = 0x0f, vendor::OPCODE),
        ("wrong WQE index", |b| b[2] ^= 1, vendor::WQE_INDEX),
        ("wrong QPN", |b| b[6] ^= 1, vendor::QPN),
        (
            "inline length past ds",
            |b| b[32..36].copy_from_slice(&(0x8000_0000u32 | 13).to_be_bytes()),
            vendor::INLINE_LEN,
        ),
        ("WRITE without remote segment", |b| b[7] = 1, vendor::LAYOUT),
        (
            "atomic with a 4-byte data segment",
            |b| {
                b[3] = 0x12;
                b[7] = 4;
                b[48..52].copy_from_slice(&4u32.to_be_bytes());
            },
            vendor::LAYOUT,
        ),
    ];
    for (name, patch, v) in cases {
        with_pair(PairCfg::default(), |p| {
            let sgl = [p.a.sge(0, 8)];
            let wr = SendWr::write(1, &sgl, p.b.remote(0));
            let ca = post_patched(p, &wr, patch);
            assert_eq!(ca.len(), 1, "{name}: {ca:?}");
            assert_eq!(
                status(&ca, 1),
                (WcStatus::LocQpOpErr, u32::from(v)),
                "{name}"
            );
            assert_eq!(p.b.mem.read(0, 8), [0; 8], "{name}");
            assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        });
    }
}

#[test]
fn misaligned_atomic_target_is_a_remote_invalid_request() {
    with_pair(PairCfg::default(), |p| {
        let events = p.dev.subscribe_events(Box::new(|| {}));
        let wr = SendWr::fetch_add(1, p.a.sge(0, 8), p.b.remote(64), 1).signaled();
        // raddr (bytes 16..24) + 4: misaligned (the backend would refuse it at post).
        let ca = post_patched(p, &wr, |b| b[23] += 4);
        assert_eq!(
            status(&ca, 1),
            (WcStatus::RemInvReqErr, u32::from(vendor::ATOMIC_ALIGN))
        );
        assert_eq!(p.dev.qp_status(p.b.qpn()).unwrap(), QpStatus::Error);
        // The responder's side learns it as a ConnectX tells it: an invalid request event.
        let raised: Vec<_> = std::iter::from_fn(|| events.try_next()).collect();
        assert_eq!(
            raised,
            [zverbs_sim::DeviceEvent::QpRequestError { qpn: p.b.qpn() }]
        );
    });
}

#[test]
fn message_above_2_gib_is_a_local_length_error() {
    with_pair(PairCfg::default(), |p| {
        let sgl = [p.a.sge(0, 8), p.a.sge(8, 8)];
        let wr = SendWr::write(1, &sgl, p.b.remote(0));
        // Byte count 0 means 2 GiB: 2 GiB + 8 bytes.
        let ca = post_patched(p, &wr, |b| b[32..36].copy_from_slice(&[0; 4]));
        assert_eq!(
            status(&ca, 1),
            (WcStatus::LocLenErr, u32::from(vendor::MSG_TOO_LONG))
        );
    });
}

#[test]
fn read_with_inline_data_is_refused() {
    with_pair(PairCfg::default(), |p| {
        let sgl = [p.a.sge(0, 8)];
        let wr = SendWr::read(1, &sgl, p.b.remote(0)).signaled();
        let ca = post_patched(p, &wr, |b| {
            b[32..36].copy_from_slice(&(0x8000_0000u32 | 8).to_be_bytes())
        });
        assert_eq!(
            status(&ca, 1),
            (WcStatus::LocQpOpErr, u32::from(vendor::LAYOUT))
        );
    });
}

#[test]
fn doorbell_claiming_more_than_the_ring() {
    with_pair(PairCfg::default(), |p| {
        let ring = p.a.qp.layout.sq.wqe_cnt;
        // SAFETY: word 1 of the device's doorbell record; stepped mode, nothing posted.
        unsafe {
            p.a.qp
                .layout
                .dbrec
                .as_ptr()
                .add(1)
                .write_volatile((ring + 1).to_be())
        };
        p.dev.run_until_idle();
        assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        assert_eq!(p.dev.stats().bad_doorbells, 1);
        assert_eq!(p.dev.stats().wqes_failed, 1);
        // The error CQE names block 0, where no WQE was posted: poll it raw.
        // SAFETY: the device's CQ; stepped mode.
        let raw = unsafe { zverbs_sim::read_cqe(&p.a.cq.layout, 0) };
        assert_eq!(
            (raw[63] >> 4, raw[55], raw[54]),
            (13, 0x02, vendor::DOORBELL)
        );
    });
}

#[test]
fn the_device_never_reads_past_the_published_producer() {
    with_pair(PairCfg::default(), |p| {
        p.a.mem.write(0, b"unpublished");
        let sgl = [p.a.sge(0, 11)];
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.a.sq
                .stage(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
        }
        .unwrap();
        for _ in 0..10 {
            assert_eq!(p.dev.step(), 0);
        }
        assert_eq!(p.b.mem.read(0, 11), [0; 11]);
        p.a.sq.ring();
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 1);
        assert_eq!(p.b.mem.read(0, 11), b"unpublished");
    });
}

// ----- injected faults -----

#[test]
fn injected_failure_with_a_chosen_syndrome() {
    with_pair(PairCfg::default(), |p| {
        p.dev.fail_next_wqe(p.a.qpn(), 0x14).unwrap();
        let sgl = [p.a.sge(0, 8)];
        let (ca, _) = run_failing(
            p,
            &[
                SendWr::write(1, &sgl, p.b.remote(0)),
                SendWr::write(2, &sgl, p.b.remote(0)),
            ],
            1,
        );
        assert_eq!(
            status(&ca, 1),
            (WcStatus::RemOpErr, u32::from(vendor::INJECTED))
        );
        all_flushed_after(&ca, 1);
    });
}

#[test]
fn dropped_receive_is_retried_or_fails() {
    for retry in [0u8, 1] {
        let cfg = PairCfg {
            qp: QpConfig {
                rnr_retry: retry,
                ..PairCfg::default().qp
            },
            ..PairCfg::default()
        };
        with_pair(cfg, |p| {
            // SAFETY: entries in the registered arenas.
            unsafe { p.b.rq.post(&RecvWr::new(0xb1, &[p.b.sge(0, 8)])) }.unwrap();
            p.dev.drop_next_recv(p.b.qpn()).unwrap();
            let sgl = [p.a.sge(0, 8)];
            // SAFETY: as above.
            unsafe { p.a.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
            let (ca, cb) = p.run();
            if retry == 0 {
                assert_eq!(status(&ca, 1).0, WcStatus::RnrRetryExcErr);
                assert!(cb.is_empty(), "the receive is still posted");
            } else {
                assert!(ca[0].is_success());
                assert_eq!(cb[0].wr_id, 0xb1);
            }
        });
    }
}

#[test]
fn delayed_and_held_completions() {
    with_pair(PairCfg::default(), |p| {
        let sgl = [p.a.sge(0, 8)];
        p.dev.delay_completions(p.a.cq.cqn, 5).unwrap();
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
        }
        .unwrap();
        p.dev.step(); // executes; the CQE waits 5 steps
        for _ in 0..4 {
            p.dev.step();
            assert!(p.a.poll_all().is_empty());
        }
        p.dev.step();
        assert_eq!(p.a.poll_all().len(), 1);

        p.dev.delay_completions(p.a.cq.cqn, 0).unwrap();
        p.dev.hold_completions(p.a.cq.cqn).unwrap();
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::write(2, &sgl, p.b.remote(0)).signaled())
                .unwrap();
            p.a.sq
                .post(&SendWr::write(3, &sgl, p.b.remote(0)).signaled())
                .unwrap();
        }
        for _ in 0..50 {
            p.dev.step();
        }
        assert!(p.a.poll_all().is_empty());
        assert_eq!(p.dev.release_completions(p.a.cq.cqn).unwrap(), 2);
        let ids: Vec<u64> = p.a.poll_all().iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, [2, 3]);
    });
}

#[test]
fn cq_overrun_is_detected_not_overwritten() {
    let mem_a = common::Arena::new(4096);
    let mem_b = common::Arena::new(4096);
    let dev = zverbs_sim::Device::new();
    let cfg = PairCfg {
        cqe: 3, // 4 CQEs
        max_signaled: Some(64),
        ..PairCfg::default()
    };
    common::with_pair_on(&dev, &mem_a, &mem_b, cfg, |p| {
        for i in 0..6 {
            // SAFETY: a NOP touches no memory.
            unsafe { p.a.sq.post(&SendWr::nop(i).signaled()) }.unwrap();
        }
        p.dev.run_until_idle();
        assert_eq!(p.dev.cq_overruns(), 2);
        assert_eq!(p.dev.stats().cq_overruns, 2);
        // The four CQEs written are intact and in order.
        let ids: Vec<u64> = p.a.poll_all().iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
    });
}
