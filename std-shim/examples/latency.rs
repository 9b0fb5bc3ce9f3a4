//! The latency loop: a ping-pong between two QPs, timed round trip by round trip, with the
//! percentiles computed from the samples themselves (an array allocated before the loop,
//! sorted after it; no histogram library).
//!
//! - `write`: A RDMA WRITEs a message into B's buffer; B sees it by polling its last byte (an
//!   acquire load: see the `last_byte` example for why that is enough) and WRITEs it back the
//!   same way. No completion is on the critical path; each side reaps its own WRITEs'
//!   completions after the round trip, outside the timed part.
//! - `send`: A SENDs into a receive B keeps posted; B sees the receive's completion and SENDs
//!   back. Each side posts its next receive as soon as one is consumed.
//!
//! Messages of up to 64 bytes go inline (copied into the request, as `ib_write_lat` does by
//! default). Both sides run on this one thread, one after the other, as the `pingpong`
//! example of `zverbs-tools` does: the time is the devices' and the polling's, with no
//! thread hand-off. The figure printed is half the round trip, as perftest reports it. On the
//! software device it is that device's latency (its engine is a thread of this process), not a
//! NIC's; `zverbs-perf` (crate `zverbs-tools`) measures with HdrHistogram and draws the
//! distribution.
//!
//! Runs on the software mlx5 device, in this process, no NIC needed:
//!
//! ```text
//! cargo run --release -p zverbs --example latency -- [write|send] [iterations] [bytes]
//! ```
//!
//! On a NIC, name it (the two ends are QPs of that device, connected to each other):
//! `ZVERBS_DEVICE=mlx5_0 cargo run --release -p zverbs --example latency -- write 100000`.

use std::fmt;
use std::time::{Duration, Instant};

use zverbs::safe::SafeQueues;
use zverbs::{AccessFlags, ContextOptions, MrBuf, Registered, SendFlags, WcOpcode};

/// Round trips run before the timed ones.
const WARMUP: u64 = 100;
/// Receives each side keeps posted (`send`).
const RECVS: u64 = 16;
/// Messages up to this size go inline.
const INLINE: usize = 64;
/// The largest message.
pub const MAX_SIZE: usize = 1 << 20;

/// Which operation carries the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE, seen by its last byte.
    Write,
    /// SEND into a posted receive, seen by the receive's completion.
    Send,
}

const USAGE: &str = "usage: latency [write|send] [iterations] [bytes]";

fn main() -> std::process::ExitCode {
    let parsed = (|| -> Result<(Op, u64, usize), String> {
        at_most(3)?;
        let op = match std::env::args_os().nth(1) {
            None => Op::Write,
            Some(v) if v == "write" => Op::Write,
            Some(v) if v == "send" => Op::Send,
            Some(other) => {
                return Err(format!(
                    "`{}`: the operation is write or send",
                    other.to_string_lossy()
                ));
            }
        };
        let iters = arg(2, "the number of iterations", 10_000)?;
        let size = arg(3, "the message size", 8)?;
        Ok((op, iters, usize::try_from(size).unwrap_or(usize::MAX)))
    })();
    let (op, iters, size) = match parsed {
        Ok(a) => a,
        Err(e) => {
            eprintln!("latency: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let device =
        std::env::var(zverbs::DEVICE_ENV).unwrap_or_else(|_| zverbs::SOFTWARE_DEVICE.into());
    match run(&device, op, iters, size) {
        Ok(r) => {
            print!("{r}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("latency: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The `i`th argument (from 1) as a number, `default` when it is absent.
fn arg(i: usize, what: &str, default: u64) -> Result<u64, String> {
    match std::env::args_os().nth(i) {
        None => Ok(default),
        Some(v) => v
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("`{}`: {what} must be a whole number", v.to_string_lossy())),
    }
}

/// Refuses arguments past the `n` this program takes.
fn at_most(n: usize) -> Result<(), String> {
    match std::env::args_os().nth(n + 1) {
        Some(extra) => Err(format!("unexpected argument `{}`", extra.to_string_lossy())),
        None => Ok(()),
    }
}

/// What was measured: half round trips, in nanoseconds.
#[derive(Debug)]
pub struct Report {
    /// The device it ran on.
    pub device: String,
    /// The operation.
    pub op: Op,
    /// Bytes per message.
    pub size: usize,
    /// Timed round trips.
    pub iters: u64,
    /// The fastest.
    pub min: u64,
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The slowest.
    pub max: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Write => "RDMA WRITE, last byte polled",
            Op::Send => "SEND/RECV, receive completion polled",
        };
        writeln!(f, "device: {}", self.device)?;
        writeln!(
            f,
            "latency: {} round trips of {} bytes, {op}; half a round trip:",
            self.iters, self.size
        )?;
        writeln!(
            f,
            "  min {} ns, p50 {} ns, p99 {} ns, max {} ns",
            self.min, self.p50, self.p99, self.max
        )
    }
}

/// A deadline for one wait.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// One end of the ping-pong. Its buffer holds the message it sends (`0..size`), then the one
/// it receives (`size..2 * size`).
struct End {
    q: SafeQueues,
    buf: MrBuf,
    /// Signaled WRITEs/SENDs posted and completed (the send queue's room).
    posted: u64,
    completed: u64,
}

impl End {
    /// Sends message `stamp` (its last byte) of `size` bytes to `peer`.
    fn post(&mut self, op: Op, size: usize, peer: &MrBuf, stamp: u8) -> zverbs::Result<()> {
        self.buf.store_u8(size - 1, stamp)?;
        let sig = SendFlags::SIGNALED;
        match (op, size <= INLINE) {
            (Op::Write, true) => {
                // An inline source is read during the call: a stack copy will do.
                let mut m = [0u8; INLINE];
                self.buf.read(0, &mut m[..size])?;
                self.q
                    .sq
                    .write_inline(0, &m[..size], peer.remote(size)?, sig)?;
            }
            (Op::Write, false) => {
                self.q
                    .sq
                    .write(0, self.buf.slice(..size)?, peer.remote(size)?, sig)?
            }
            (Op::Send, true) => {
                let mut m = [0u8; INLINE];
                self.buf.read(0, &mut m[..size])?;
                self.q.sq.send_inline(0, &m[..size], sig)?;
            }
            (Op::Send, false) => self.q.sq.send(0, self.buf.slice(..size)?, sig)?,
        }
        self.posted += 1;
        Ok(())
    }

    /// Waits for the peer's message `stamp`.
    fn wait(&mut self, op: Op, size: usize, stamp: u8) -> zverbs::Result<()> {
        match op {
            Op::Write => Ok(self.buf.wait_u8(2 * size - 1, stamp, soon())?),
            Op::Send => loop {
                // The receive's completion, or this side's own SEND's, whichever comes.
                let c = self.q.cq.wait(1, soon())?[0];
                c.ok()?;
                if c.opcode == WcOpcode::Recv {
                    self.q.rq.post(1, self.buf.slice(size..2 * size)?)?;
                    return Ok(());
                }
                self.completed += 1;
            },
        }
    }

    /// Takes the completions of this side's own requests that are in, without waiting (for
    /// `send`, the receives are taken by `wait`; none is ready here).
    fn reap(&mut self) -> zverbs::Result<()> {
        for c in self.q.cq.ready() {
            c.ok()?;
            self.completed += 1;
        }
        Ok(())
    }
}

/// Runs `iters` timed round trips of `size` bytes (at least 1) by `op` on `device`.
///
/// # Errors
///
/// [`zverbs::Error::InvalidArgument`] for a size of 0 or no iterations; whatever set-up, a
/// post, a wait or a completion returns.
pub fn run(device: &str, op: Op, iters: u64, size: usize) -> zverbs::Result<Report> {
    if size == 0 || iters == 0 || size > MAX_SIZE {
        return Err(zverbs::Error::InvalidArgument(format!(
            "{iters} iterations of {size} bytes: at least one iteration of 1 to {MAX_SIZE} bytes"
        )));
    }
    let ctx = zverbs::open_device(Some(device), &ContextOptions::default())?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
    let qp = |cq| {
        pd.qp_builder(cq, cq)
            .max_send_wr(64)
            .max_recv_wr(RECVS as u32)
            .max_inline_data(INLINE as u32)
            .build()
    };
    let (a, b) = (qp(&cq_a)?, qp(&cq_b)?);
    zverbs::connect_pair(&a, &b)?;
    let end = |q: SafeQueues| -> zverbs::Result<End> {
        Ok(End {
            q,
            buf: pd.alloc_buf(2 * size, AccessFlags::ALL)?,
            posted: 0,
            completed: 0,
        })
    };
    let mut ea = end(a.queues(&cq_a)?)?;
    let mut eb = end(b.queues(&cq_b)?)?;
    if op == Op::Send {
        for e in [&mut ea, &mut eb] {
            for _ in 0..RECVS {
                e.q.rq.post(1, e.buf.slice(size..2 * size)?)?;
            }
        }
    }
    // Every sample, in a buffer sized before the loop: nothing allocates while timing.
    let mut samples = vec![0u64; iters as usize];
    let (pa, pb) = (ea.buf.clone(), eb.buf.clone());
    for i in 0..WARMUP + iters {
        let stamp = (i % 255 + 1) as u8; // never the byte's previous value
        let t0 = Instant::now();
        ea.post(op, size, &pb, stamp)?;
        eb.wait(op, size, stamp)?;
        eb.post(op, size, &pa, stamp)?;
        ea.wait(op, size, stamp)?;
        let half = t0.elapsed().as_nanos() as u64 / 2;
        if i >= WARMUP {
            samples[(i - WARMUP) as usize] = half;
        }
        for e in [&mut ea, &mut eb] {
            e.reap()?;
            // Room for the next round trip's request: wait if the queue is nearly full.
            while e.posted - e.completed >= 32 {
                let c = e.q.cq.wait(1, soon())?[0];
                c.ok()?;
                e.completed += 1;
            }
        }
    }
    samples.sort_unstable();
    let at = |p: u64| samples[((iters - 1) * p / 100) as usize];
    Ok(Report {
        device: ctx.name().to_string(),
        op,
        size,
        iters,
        min: samples[0],
        p50: at(50),
        p99: at(99),
        max: samples[iters as usize - 1],
    })
}
