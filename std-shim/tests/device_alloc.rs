//! The zero-allocation proof of the libibverbs fallback, on a real device: 100 000 round trips
//! between two RC queue pairs (a SEND with immediate one way, inline; an RDMA WRITE with
//! immediate back; every receive reposted; every completion polled) through the fallback's
//! send queues, receive queues and pollers, with a counting global allocator that must see no
//! allocation, reallocation or free while the loop runs.
//!
//! The allocator counts on the thread that runs the loop (the fallback starts no thread of its
//! own; the test harness's threads allocate at will while a test runs). It sees what Rust code
//! allocates (this crate and its dependencies); rdma-core's own C code (libibverbs and its
//! provider) allocates with `malloc`, outside its view.
//!
//! A device test in its own test binary (the allocator is global): it returns at once unless
//! `ZVERBS_TEST_DEVICE` names a device (docs/testing.md). `ZVERBS_ALLOC_ROUND_TRIPS` changes
//! the number of round trips.

mod device;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;

use device::{Caps, Side, env, serial};
use zverbs::backend::Queues;
use zverbs::{
    BackendRequest, Completion, ContextOptions, PollCq, PostRecv, PostSend, RecvWr, Registered,
    SendWr, WcOpcode,
};

/// Counts the allocations, reallocations and frees of the armed thread.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNTS: Cell<[u64; 3]> = const { Cell::new([0; 3]) };
}

fn count(kind: usize) {
    // `try_with`: the thread-locals may be gone while a thread exits.
    if ARMED.try_with(Cell::get).unwrap_or(false) {
        let _ = COUNTS.try_with(|c| {
            let mut n = c.get();
            n[kind] += 1;
            c.set(n);
        });
    }
}

// SAFETY: forwards every call to the system allocator unchanged; the bookkeeping uses
// const-initialised thread-locals without destructors, which do not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(0);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(0);
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(1);
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(2);
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// (allocations, reallocations, frees) of this thread while `f` runs.
fn counted<T>(f: impl FnOnce() -> T) -> (T, [u64; 3]) {
    COUNTS.with(|c| c.set([0; 3]));
    ARMED.with(|a| a.set(true));
    let out = f();
    ARMED.with(|a| a.set(false));
    (out, COUNTS.with(Cell::get))
}

#[test]
fn the_counter_sees_allocations() {
    let ((), n) = counted(|| drop(std::hint::black_box(vec![1u8; 100])));
    assert_eq!(n, [1, 0, 1]);
}

const RECV_ID: u64 = 1 << 40;

#[test]
fn fallback_round_trips_allocate_nothing() {
    let _serial = serial();
    let Some(env) = env() else { return };
    if device::is_software(
        &env.device,
        "the libibverbs fallback does not drive it (zverbs-sim's own tests count its allocations)",
    ) {
        return;
    }
    let rounds: u64 = std::env::var("ZVERBS_ALLOC_ROUND_TRIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // The fallback, on whatever device (on mlx5 too, where it is not the default).
    let options = ContextOptions::default().backend(BackendRequest::Verbs);
    let ctx = zverbs::open_device(Some(&env.device), &options).expect("open the device");
    let caps = Caps {
        send: 16,
        recv: 16,
        sge: 1,
        inline: 64,
    };
    let (a, b) = (
        Side::new(&ctx, env.gid_index, caps),
        Side::new(&ctx, env.gid_index, caps),
    );
    a.qp.connect_with(&a.attr(&b.endpoint())).unwrap();
    b.qp.connect_with(&b.attr(&a.endpoint())).unwrap();
    let (Queues::Verbs(qa), Queues::Verbs(qb)) = (
        Queues::take(&a.qp, &a.cq).unwrap(),
        Queues::take(&b.qp, &b.cq).unwrap(),
    ) else {
        panic!("asked for the fallback, got {}", a.qp.backend());
    };
    println!(
        "{} round trips on {}: {}",
        rounds,
        ctx.name(),
        a.qp.backend()
    );

    // Everything the loop uses is made before it.
    let (mut asq, mut arq, mut acq) = (qa.sq, qa.rq, qa.cq);
    let (mut bsq, mut brq, mut bcq) = (qb.sq, qb.rq, qb.cq);
    let a_src = [a.buf.sge(0..8).unwrap()];
    let a_recv = [a.buf.sge(4096..4160).unwrap()];
    let b_src = [b.buf.sge(0..64).unwrap()];
    let b_recv = [b.buf.sge(4096..4160).unwrap()];
    let to_a = a.buf.remote(8192).unwrap();
    for _ in 0..8 {
        // SAFETY: the entries lie in the registered buffers, which this test reads only
        // between completions.
        unsafe {
            arq.post(&RecvWr::new(RECV_ID, &a_recv)).unwrap();
            brq.post(&RecvWr::new(RECV_ID, &b_recv)).unwrap();
        }
    }
    let mut wc = [Completion::EMPTY; 8];
    let run = || -> Result<(), String> {
        let mut b_sends_out = 0u32;
        for i in 0..rounds {
            // A: an inline SEND with immediate, carrying the round number.
            a.buf.store_u64(0, i).unwrap();
            let wr = SendWr::send_imm(i, &a_src, i as u32).signaled().inline();
            // SAFETY: as above; inline data is copied at the post.
            unsafe { asq.post(&wr) }.map_err(|_| "A's post")?;
            // B: the message arrives (its earlier WRITE's completion may come with it).
            let mut got = false;
            while !got {
                let n = bcq.poll(&mut wc);
                for c in &wc[..n] {
                    if !c.is_success() {
                        return Err("B's completion failed".into());
                    }
                    if c.opcode == WcOpcode::Recv {
                        if c.imm() != Some(i as u32) || b.buf.load_u64(4096).unwrap() != i {
                            return Err("B received the wrong message".into());
                        }
                        got = true;
                    } else {
                        b_sends_out -= 1;
                    }
                }
            }
            // SAFETY: as above.
            unsafe { brq.post(&RecvWr::new(RECV_ID, &b_recv)) }.map_err(|_| "B's receive")?;
            // B: an RDMA WRITE with immediate back.
            b.buf.store_u64(0, !i).unwrap();
            let wr = SendWr::write_imm(i, &b_src, to_a, !(i as u32)).signaled();
            // SAFETY: as above.
            unsafe { bsq.post(&wr) }.map_err(|_| "B's post")?;
            b_sends_out += 1;
            // A: its SEND's completion and the WRITE's arrival.
            let (mut sent, mut written) = (false, false);
            while !(sent && written) {
                let n = acq.poll(&mut wc);
                for c in &wc[..n] {
                    match (c.status.is_success(), c.opcode) {
                        (true, WcOpcode::Send) => sent = c.wr_id == i,
                        (true, WcOpcode::RecvRdmaWithImm) => {
                            written =
                                c.imm() == Some(!(i as u32)) && a.buf.load_u64(8192).unwrap() == !i
                        }
                        _ => return Err("A's completion".into()),
                    }
                }
            }
            // SAFETY: as above.
            unsafe { arq.post(&RecvWr::new(RECV_ID, &a_recv)) }.map_err(|_| "A's receive")?;
        }
        while b_sends_out > 0 {
            b_sends_out -= bcq.poll(&mut wc) as u32;
        }
        Ok(())
    };
    let t = Instant::now();
    let (result, [allocs, reallocs, frees]) = counted(run);
    let took = t.elapsed();
    result.unwrap();
    println!(
        "{rounds} round trips in {took:.2?} ({:.1} µs each): {allocs} allocations, {reallocs} \
         reallocations, {frees} frees",
        took.as_secs_f64() * 1e6 / rounds as f64
    );
    assert!(rounds >= 100_000 || std::env::var_os("ZVERBS_ALLOC_ROUND_TRIPS").is_some());
    assert_eq!(
        (allocs, reallocs, frees),
        (0, 0, 0),
        "the fallback's post and poll must not allocate"
    );
}
