//! Ping-pong latency between two RC queue pairs on the software mlx5 device, through the
//! direct data path, printed like perftest's `ib_send_lat` / `ib_write_lat`.
//!
//! ```text
//! cargo run --release -p zverbs --example pingpong -- [--op send|write] [--size N]
//!     [--iters N] [--bf|--no-bf]
//! ```
//!
//! The device runs on its progress thread, watching the doorbell records as a NIC would; this
//! thread drives both ends in turn (on a 2-core machine a third spinning thread would only
//! measure the scheduler). SEND: each side posts a SEND and the other polls its receive CQ.
//! WRITE: each side RDMA-writes the other's buffer and the other polls the buffer's last byte,
//! as `ib_write_lat` does. Latency is half the round trip.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io::Write as _;
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use zverbs::mlx5::sim::{Access, CqConfig, Device, Mr, QpConfig, RNR_RETRY_INFINITE};
use zverbs::mlx5::{
    CompletionQueue, CqBinding, RecvQueue, RqSlot, RqState, SendQueue, SqSlot, SqState,
};
use zverbs::{Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge, WcStatus};

const USAGE: &str = "\
usage: pingpong [--op send|write] [--size BYTES] [--iters N] [--bf|--no-bf]

  --op send|write   SEND/RECV ping-pong (default) or RDMA WRITE polling the last byte
  --size BYTES      message size (default 8; WRITE needs at least 1)
  --iters N         measured round trips (default 100000)
  --bf, --no-bf     ring with BlueFlame (default) or the 8-byte doorbell only";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Write,
}

#[derive(Clone, Copy, Debug)]
struct Args {
    op: Op,
    size: usize,
    iters: u64,
    bf: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        op: Op::Send,
        size: 8,
        iters: 100_000,
        bf: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline_value) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline_value
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--op" => {
                a.op = match value("--op")?.as_str() {
                    "send" => Op::Send,
                    "write" => Op::Write,
                    other => return Err(format!("unknown --op {other:?}: send or write")),
                }
            }
            "--size" | "-s" => {
                a.size = value("--size")?
                    .parse()
                    .map_err(|e| format!("--size: {e}"))?
            }
            "--iters" | "-n" => {
                a.iters = value("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?
            }
            "--bf" => a.bf = true,
            "--no-bf" => a.bf = false,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    if a.size > 1 << 30 {
        return Err("--size above 1 GiB".into());
    }
    if a.op == Op::Write && a.size == 0 {
        return Err("--op write needs --size of at least 1 (the last byte is polled)".into());
    }
    Ok(a)
}

/// A buffer the device reads and writes: touched by this program only through raw pointers.
struct Buf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buf {
    fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(64), 64).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("out of memory");
        Self { ptr, layout }
    }
    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    /// The byte at `off`, for polling with `Acquire` (the device stores a message's last byte
    /// with `Release`).
    fn byte(&self, off: usize) -> &AtomicU8 {
        assert!(off < self.layout.size());
        // SAFETY: in bounds; every access to this byte goes through the atomic.
        unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(off)) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// One end: its queues and buffers.
struct End<'a> {
    sq: SendQueue<'a>,
    rq: RecvQueue<'a>,
    send_cq: CompletionQueue<'a>,
    recv_cq: CompletionQueue<'a>,
    tx: &'a Buf,
    rx: &'a Buf,
    mr_tx: Mr,
    mr_rx: Mr,
    inline: bool,
    posted_unsignaled: u32,
}

const SIGNAL_EVERY: u32 = 32;
const RECV_DEPTH: u32 = 64;

impl End<'_> {
    fn post_recv(&mut self, size: usize) {
        let sgl = [Sge::new(self.rx.addr(), size as u32, self.mr_rx.lkey)];
        // SAFETY: the receive buffer is registered with local write, and this program reads it
        // only through atomics.
        unsafe { self.rq.post_recv(&RecvWr::new(0, &sgl)) }.expect("post receive");
    }

    /// Posts one message (`op`) of `size` bytes to `remote`, signaled every `SIGNAL_EVERY`.
    fn post(&mut self, op: Op, size: usize, remote: RemoteBuf) {
        let sgl = [Sge::new(self.tx.addr(), size as u32, self.mr_tx.lkey)];
        let wr = match op {
            Op::Send => SendWr::send(0, &sgl),
            Op::Write => SendWr::write(0, &sgl, remote),
        };
        let wr = if self.inline { wr.inline() } else { wr };
        self.posted_unsignaled += 1;
        let wr = if self.posted_unsignaled == SIGNAL_EVERY {
            self.posted_unsignaled = 0;
            wr.signaled()
        } else {
            wr
        };
        loop {
            // SAFETY: the source is registered (or copied now, inline) and not modified until
            // the peer has seen the message.
            match unsafe { self.sq.send(&wr) } {
                Ok(()) => return,
                // Credits come back with the signaled completions: reap them and retry.
                Err(_) => self.reap_sends(),
            }
        }
    }

    fn reap_sends(&mut self) {
        let mut wc = [Completion::EMPTY; 8];
        let n = self.send_cq.poll(&mut wc);
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::Success, "send completion {c:?}");
        }
    }

    /// Spins until a receive completes; reposts it.
    fn wait_recv(&mut self, size: usize) {
        let mut wc = [Completion::EMPTY; 1];
        let mut spins = 0u32;
        while self.recv_cq.poll(&mut wc) == 0 {
            backoff(&mut spins);
        }
        assert_eq!(
            wc[0].status,
            WcStatus::Success,
            "receive completion {:?}",
            wc[0]
        );
        self.post_recv(size);
    }

    /// Spins until the last byte of the receive buffer holds `tag`.
    fn wait_byte(&self, size: usize, tag: u8) {
        let b = self.rx.byte(size - 1);
        let mut spins = 0u32;
        while b.load(Ordering::Acquire) != tag {
            backoff(&mut spins);
        }
    }

    /// Sets the last byte of the send buffer (read by the device after the doorbell).
    fn set_tag(&self, size: usize, tag: u8) {
        self.tx.byte(size - 1).store(tag, Ordering::Relaxed);
    }
}

/// Spins; after a long wait, gives the core away now and then (the progress thread may need
/// it when the machine has fewer free cores than spinning threads).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if spins.is_multiple_of(4096) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let idx = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn run(args: Args) {
    let buf_len = args.size.max(1);
    let bufs = [
        Buf::new(buf_len),
        Buf::new(buf_len),
        Buf::new(buf_len),
        Buf::new(buf_len),
    ];
    let mut dev = Device::new();
    let cq = |n| dev.create_cq(CqConfig { cqe: n }).expect("create CQ");
    let (scq_a, rcq_a, scq_b, rcq_b) = (cq(256), cq(256), cq(256), cq(256));
    let qp_cfg = |send_cq, recv_cq| QpConfig {
        send_cq,
        recv_cq,
        max_send_wr: 128,
        max_send_sge: 1,
        max_inline_data: 220,
        max_recv_wr: RECV_DEPTH,
        max_recv_sge: 1,
        bf_size: if args.bf { 256 } else { 0 },
        rnr_retry: RNR_RETRY_INFINITE,
        ..QpConfig::default()
    };
    let qa = dev
        .create_qp(qp_cfg(scq_a.cqn, rcq_a.cqn))
        .expect("create QP");
    let qb = dev
        .create_qp(qp_cfg(scq_b.cqn, rcq_b.cqn))
        .expect("create QP");
    dev.connect(qa.qpn, qb.qpn).expect("connect");
    let reg = |b: &Buf| {
        // SAFETY: the buffers outlive the device (declared before it).
        unsafe { dev.reg_mr(b.ptr.as_ptr(), buf_len, Access::ALL) }.expect("register")
    };
    let mrs = [reg(&bufs[0]), reg(&bufs[1]), reg(&bufs[2]), reg(&bufs[3])];

    let slots_sa: Vec<SqSlot> = qa.sq_slots();
    let slots_ra: Vec<RqSlot> = qa.rq_slots();
    let slots_sb: Vec<SqSlot> = qb.sq_slots();
    let slots_rb: Vec<RqSlot> = qb.rq_slots();
    let (ssa, rsa) = (
        SqState::new(&slots_sa).unwrap(),
        RqState::new(&slots_ra).unwrap(),
    );
    let (ssb, rsb) = (
        SqState::new(&slots_sb).unwrap(),
        RqState::new(&slots_rb).unwrap(),
    );
    let bind_sa = [CqBinding::new(qa.qpn, Some(&ssa), None)];
    let bind_ra = [CqBinding::new(qa.qpn, None, Some(&rsa))];
    let bind_sb = [CqBinding::new(qb.qpn, Some(&ssb), None)];
    let bind_rb = [CqBinding::new(qb.qpn, None, Some(&rsb))];
    let inline = args.size <= qa.max_inline_data as usize;
    // SAFETY: the layouts are the device's, which outlives the queues; each queue is the only
    // driver of its ring, and each state is bound to the CQ that serves it.
    let (mut a, mut b) = unsafe {
        (
            End {
                sq: SendQueue::new(&qa.layout, qa.caps(), &ssa).unwrap(),
                rq: RecvQueue::new(&qa.layout, &rsa).unwrap(),
                send_cq: CompletionQueue::new(&scq_a.layout, &bind_sa).unwrap(),
                recv_cq: CompletionQueue::new(&rcq_a.layout, &bind_ra).unwrap(),
                tx: &bufs[0],
                rx: &bufs[1],
                mr_tx: mrs[0],
                mr_rx: mrs[1],
                inline,
                posted_unsignaled: 0,
            },
            End {
                sq: SendQueue::new(&qb.layout, qb.caps(), &ssb).unwrap(),
                rq: RecvQueue::new(&qb.layout, &rsb).unwrap(),
                send_cq: CompletionQueue::new(&scq_b.layout, &bind_sb).unwrap(),
                recv_cq: CompletionQueue::new(&rcq_b.layout, &bind_rb).unwrap(),
                tx: &bufs[2],
                rx: &bufs[3],
                mr_tx: mrs[2],
                mr_rx: mrs[3],
                inline,
                posted_unsignaled: 0,
            },
        )
    };
    let remote_of_a = RemoteBuf::new(bufs[1].addr(), mrs[1].rkey);
    let remote_of_b = RemoteBuf::new(bufs[3].addr(), mrs[3].rkey);
    if args.op == Op::Send {
        for _ in 0..RECV_DEPTH {
            a.post_recv(args.size);
            b.post_recv(args.size);
        }
    }
    dev.start();

    let warmup = (args.iters / 10).clamp(1, 10_000);
    let mut samples: Vec<u64> = Vec::with_capacity(args.iters as usize);
    let round_trip = |i: u64, a: &mut End<'_>, b: &mut End<'_>| {
        let tag = (i % 255) as u8 + 1;
        match args.op {
            Op::Send => {
                a.post(Op::Send, args.size, remote_of_b);
                b.wait_recv(args.size);
                b.post(Op::Send, args.size, remote_of_a);
                a.wait_recv(args.size);
            }
            Op::Write => {
                a.set_tag(args.size, tag);
                a.post(Op::Write, args.size, remote_of_b);
                b.wait_byte(args.size, tag);
                b.set_tag(args.size, tag);
                b.post(Op::Write, args.size, remote_of_a);
                a.wait_byte(args.size, tag);
            }
        }
    };
    for i in 0..warmup {
        round_trip(i, &mut a, &mut b);
        a.reap_sends();
        b.reap_sends();
    }
    let long = args.iters >= 200_000;
    let started = Instant::now();
    let mut last_report = started;
    for i in 0..args.iters {
        let t0 = Instant::now();
        round_trip(warmup + i, &mut a, &mut b);
        let t1 = Instant::now();
        samples.push((t1 - t0).as_nanos() as u64);
        a.reap_sends();
        b.reap_sends();
        if long && i % 4096 == 0 && t1 - last_report >= Duration::from_secs(1) {
            last_report = t1;
            eprint!(
                "\r  {i}/{} round trips ({}%)",
                args.iters,
                i * 100 / args.iters
            );
            let _ = std::io::stderr().flush();
        }
    }
    let elapsed = started.elapsed();
    if long {
        eprintln!("\r  {0}/{0} round trips (100%)   ", args.iters);
    }
    dev.stop();
    let stats = dev.stats();
    assert_eq!(dev.cq_overruns(), 0);

    // Half round trips, in microseconds.
    samples.sort_unstable();
    let us = |ns: u64| ns as f64 / 2000.0;
    let avg = samples.iter().sum::<u64>() as f64 / samples.len() as f64 / 2000.0;
    let line = "-".repeat(96);
    let title = match args.op {
        Op::Send => "Send Latency Test",
        Op::Write => "RDMA_Write Latency Test",
    };
    println!("{line}");
    println!("{:^96}", title);
    println!(" Device          : zverbs software mlx5 device (progress thread)");
    println!(" Transport       : RC, direct data path (zverbs-mlx5dv)");
    println!(
        " Doorbell        : {}",
        if args.bf {
            "BlueFlame (256 B buffers)"
        } else {
            "8-byte doorbell only"
        }
    );
    println!(
        " Inline          : {}",
        if inline {
            format!("yes (up to {} B)", qa.max_inline_data)
        } else {
            "no".to_string()
        }
    );
    println!(" Signaling       : one send in {SIGNAL_EVERY} asks for a completion");
    println!(" Latency         : half round trip, {warmup} warm-up round trips not counted");
    println!("{line}");
    println!(
        " {:>7} {:>11} {:>11} {:>11} {:>11} {:>12} {:>11} {:>11} {:>12}",
        "#bytes",
        "#iterations",
        "t_min[us]",
        "t_p50[us]",
        "t_p99[us]",
        "t_p99.9[us]",
        "t_max[us]",
        "t_avg[us]",
        "msg_rate[M/s]"
    );
    println!(
        " {:>7} {:>11} {:>11.3} {:>11.3} {:>11.3} {:>12.3} {:>11.3} {:>11.3} {:>12.3}",
        args.size,
        args.iters,
        us(samples[0]),
        us(percentile(&samples, 0.50)),
        us(percentile(&samples, 0.99)),
        us(percentile(&samples, 0.999)),
        us(*samples.last().unwrap()),
        avg,
        2.0 * args.iters as f64 / elapsed.as_secs_f64() / 1e6,
    );
    println!("{line}");
    println!(
        " {} messages ({} bytes each) in {:.3} s; the device executed {} WQEs and wrote {} CQEs",
        2 * args.iters,
        args.size,
        elapsed.as_secs_f64(),
        stats.wqes_ok,
        stats.cqes
    );
}

fn main() -> ExitCode {
    match parse_args() {
        Ok(args) => {
            run(args);
            ExitCode::SUCCESS
        }
        Err(e) => {
            if !e.is_empty() {
                eprintln!("pingpong: {e}");
            }
            eprintln!("{USAGE}");
            if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
    }
}
