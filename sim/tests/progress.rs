//! The device on its progress thread, watching doorbell records as the NIC does, while this
//! thread posts and polls.

mod common;

use std::time::{Duration, Instant};

use common::{Arena, Pair, PairCfg, with_pair_on};
use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, SendWr, WcStatus};
use zverbs_sim::Device;

const DEADLINE: Duration = Duration::from_secs(20);

fn spin_poll(cq: &mut impl PollCq) -> Completion {
    let mut wc = [Completion::EMPTY; 1];
    let start = Instant::now();
    while cq.poll(&mut wc) == 0 {
        assert!(
            start.elapsed() < DEADLINE,
            "no completion from the progress thread"
        );
        std::hint::spin_loop();
    }
    wc[0]
}

/// The tests of this file take turns: each runs a spinning progress thread and spins itself,
/// and the machine may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn with_running<R>(f: impl FnOnce(&mut Pair<'_>) -> R) -> R {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mem_a = Arena::new(64 * 1024);
    let mem_b = Arena::new(64 * 1024);
    let dev = Device::new();
    dev.start();
    assert!(dev.is_running());
    let r = with_pair_on(&dev, &mem_a, &mem_b, PairCfg::default(), f);
    dev.stop();
    assert_eq!(dev.cq_overruns(), 0);
    assert!(dev.guards_intact() && mem_a.guards_intact() && mem_b.guards_intact());
    r
}

#[test]
fn send_recv_ping_pong() {
    with_running(|p| {
        // Under Miri (100 times slower, and threads switch only at its preemption points), 20.
        let iters = if cfg!(miri) { 20 } else { 5_000u64 };
        for i in 0..iters {
            let msg = (i as u32).to_le_bytes();
            // Ping A -> B.
            // SAFETY: entries in the registered arenas; the device reads the source only after
            // the doorbell, and this thread reads the destination only after the completion.
            unsafe {
                p.b.rq.post(&RecvWr::new(i, &[p.b.sge(0, 64)])).unwrap();
                p.a.mem.write(0, &msg);
                p.a.sq
                    .post(&SendWr::send(i, &[p.a.sge(0, 4)]).signaled())
                    .unwrap();
            }
            let c = spin_poll(&mut p.b.cqp);
            assert_eq!((c.wr_id, c.byte_len), (i, 4));
            assert_eq!(p.b.mem.read(0, 4), msg);
            assert_eq!(spin_poll(&mut p.a.cqp).wr_id, i);
            // Pong B -> A.
            // SAFETY: as above.
            unsafe {
                p.a.rq.post(&RecvWr::new(i, &[p.a.sge(64, 64)])).unwrap();
                p.b.sq
                    .post(&SendWr::send_imm(i, &[p.b.sge(0, 4)], i as u32).signaled())
                    .unwrap();
            }
            let c = spin_poll(&mut p.a.cqp);
            assert_eq!((c.wr_id, c.imm()), (i, Some(i as u32)));
            assert_eq!(p.a.mem.read(64, 4), msg);
            assert_eq!(spin_poll(&mut p.b.cqp).wr_id, i);
        }
        assert_eq!(p.dev.stats().recvs, 2 * iters);
    });
}

#[test]
fn write_ping_pong_polling_the_last_byte() {
    with_running(|p| {
        let len = 32usize;
        let mut last_a = 0u8;
        let rounds = if cfg!(miri) { 20 } else { 2_000u32 };
        for i in 1..=rounds {
            let tag = (i % 255) as u8 + 1; // never 0, and never the previous round's
            p.a.mem.fill(0, len, tag);
            // Unsignaled WRITEs with a signaled one every 16 keep the send queue's credits.
            let sig = i % 16 == 0;
            let sgl = [p.a.sge(0, len as u32)];
            let wr = SendWr::write(u64::from(i), &sgl, p.b.remote(1024));
            // SAFETY: entries in the registered arenas.
            unsafe { p.a.sq.post(&if sig { wr.signaled() } else { wr }) }.unwrap();
            // B polls the last byte of its buffer, as ib_write_lat does (the device stores it
            // last, with Release).
            let start = Instant::now();
            while p.b.mem.load_u8_acquire(1024 + len - 1) != tag {
                assert!(start.elapsed() < DEADLINE);
                std::hint::spin_loop();
            }
            assert_eq!(p.b.mem.read(1024, len), vec![tag; len]);
            p.b.mem.fill(0, len, tag);
            let sgl = [p.b.sge(0, len as u32)];
            let wr = SendWr::write(u64::from(i), &sgl, p.a.remote(1024));
            // SAFETY: as above.
            unsafe { p.b.sq.post(&if sig { wr.signaled() } else { wr }) }.unwrap();
            while p.a.mem.load_u8_acquire(1024 + len - 1) != tag {
                assert!(start.elapsed() < DEADLINE);
                std::hint::spin_loop();
            }
            last_a = tag;
            if sig {
                spin_poll(&mut p.a.cqp);
                spin_poll(&mut p.b.cqp);
            }
        }
        assert_eq!(p.a.mem.read(1024, len), vec![last_a; len]);
    });
}

#[test]
fn errors_complete_on_the_progress_thread() {
    with_running(|p| {
        // No receive posted, RNR retry 0: the SEND fails, and the later WRITE is flushed.
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.a.sq.post(&SendWr::send(1, &[p.a.sge(0, 8)])).unwrap();
            p.a.sq
                .post(&SendWr::write(2, &[p.a.sge(0, 8)], p.b.remote(0)))
                .unwrap();
        }
        let c = spin_poll(&mut p.a.cqp);
        assert_eq!((c.wr_id, c.status), (1, WcStatus::RnrRetryExcErr));
        let c = spin_poll(&mut p.a.cqp);
        assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushErr));
    });
}

#[test]
fn stop_and_restart() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mem_a = Arena::new(4096);
    let mem_b = Arena::new(4096);
    let dev = Device::new();
    dev.start();
    dev.stop();
    assert!(!dev.is_running());
    dev.start();
    with_pair_on(&dev, &mem_a, &mem_b, PairCfg::default(), |p| {
        // SAFETY: a NOP touches no memory.
        unsafe { p.a.sq.post(&SendWr::nop(7).signaled()) }.unwrap();
        assert_eq!(spin_poll(&mut p.a.cqp).wr_id, 7);
        let _ = p.a.cqp.poll(&mut [Completion::EMPTY; 1]);
    });
    // Dropping the device stops the thread.
}
