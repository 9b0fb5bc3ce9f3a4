//! A batched writer: RDMA WRITEs staged in batches behind one doorbell each, one in every N
//! signaled, and the send queue's room counted in credits.
//!
//! - **Batching**: `sq.batch()` stages WRITEs and rings the doorbell once when the batch is
//!   finished (or dropped): one MMIO write for `--batch` requests instead of one each.
//! - **Selective signaling**: only every `--signal-every`th WRITE (and the last) asks for a
//!   completion. A signaled WRITE's completion tells that it and every unsignaled WRITE
//!   posted before it on the queue are done (a send queue completes in order), so one
//!   completion retires many WQEs, and the poller reads far fewer CQEs.
//! - **Credits**: the writer counts the WQEs posted and not yet known complete, and before
//!   staging a batch that would not fit in the send queue it waits for a signaled completion
//!   (each carries its `wr_id`, the WRITE's sequence number, so the retired count is
//!   `wr_id + 1`). A post therefore never meets a full queue. So that a completion is always
//!   coming, `signal_every + batch` must not exceed the queue's depth.
//!
//! The counts printed (doorbells, completions, credit waits) are the point; the rate is the
//! software device's, not a NIC's, and nothing depends on it.
//!
//! Runs on the software mlx5 device, in this process, no NIC needed:
//!
//! ```text
//! cargo run -p zverbs --example batched_writer -- [writes] [batch] [signal every] [bytes]
//! ```
//!
//! On a NIC, name it (the writer and the target are two QPs of that device, connected to each
//! other): `ZVERBS_DEVICE=mlx5_0 cargo run --release -p zverbs --example batched_writer`.

use std::fmt;
use std::time::{Duration, Instant};

use zverbs::{AccessFlags, ContextOptions, Registered, SendFlags};

/// WQEs in the writer's send queue.
pub const DEPTH: u32 = 128;
/// Distinct source and target slots the WRITEs cycle through.
const SLOTS: usize = 64;
/// The largest WRITE (each buffer holds [`SLOTS`] of them).
pub const MAX_SIZE: usize = 1 << 20;

/// What to write.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// WRITEs in all.
    pub writes: u64,
    /// WRITEs per doorbell.
    pub batch: u64,
    /// One WRITE in this many asks for a completion.
    pub signal_every: u64,
    /// Bytes per WRITE.
    pub size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            writes: 20_000,
            batch: 16,
            signal_every: 32,
            size: 64,
        }
    }
}

const USAGE: &str = "usage: batched_writer [writes] [batch] [signal every] [bytes]";

fn main() -> std::process::ExitCode {
    let d = Config::default();
    let parsed = (|| -> Result<Config, String> {
        at_most(4)?;
        Ok(Config {
            writes: arg(1, "the number of writes", d.writes)?,
            batch: arg(2, "the batch", d.batch)?,
            signal_every: arg(3, "signal every", d.signal_every)?,
            size: usize::try_from(arg(4, "the size in bytes", d.size as u64)?)
                .unwrap_or(usize::MAX),
        })
    })();
    let config = match parsed {
        Ok(c) => c,
        Err(e) => {
            eprintln!("batched_writer: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let device =
        std::env::var(zverbs::DEVICE_ENV).unwrap_or_else(|_| zverbs::SOFTWARE_DEVICE.into());
    match run(&device, config) {
        Ok(r) => {
            print!("{r}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("batched_writer: {e}");
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

/// What the run did.
#[derive(Debug)]
pub struct Report {
    /// The device it ran on.
    pub device: String,
    /// What was asked.
    pub config: Config,
    /// Doorbells rung: one per batch.
    pub doorbells: u64,
    /// Completions polled: one per signaled WRITE.
    pub completions: u64,
    /// Times the writer found no room for a batch and waited for a completion.
    pub credit_waits: u64,
    /// Bytes written, every one checked at the target.
    pub bytes: u64,
    /// How long it took.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.config;
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        writeln!(f, "device: {}", self.device)?;
        writeln!(
            f,
            "batched_writer: {} WRITEs of {} bytes, {} per doorbell, 1 in {} signaled, send queue of {DEPTH}",
            c.writes, c.size, c.batch, c.signal_every
        )?;
        writeln!(f, "  doorbells rung:     {}", self.doorbells)?;
        writeln!(f, "  completions polled: {}", self.completions)?;
        writeln!(f, "  credit waits:       {}", self.credit_waits)?;
        writeln!(f, "  bytes written:      {} (checked)", self.bytes)?;
        writeln!(
            f,
            "  rate:               {:.0} WRITEs/s, {:.1} MB/s (this device, this machine)",
            c.writes as f64 / secs,
            self.bytes as f64 / secs / 1e6
        )
    }
}

/// A deadline for one wait: far beyond what a completion takes.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// Writes as `c` says on `device`.
///
/// # Errors
///
/// [`zverbs::Error::InvalidArgument`] for a configuration that could wait for ever (no
/// signaled WRITE, or a batch and a signaling interval that do not fit the queue together);
/// whatever set-up, a post, a wait or a completion returns; [`zverbs::Error::Protocol`] when
/// the target's bytes are not the source's.
pub fn run(device: &str, c: Config) -> zverbs::Result<Report> {
    if c.batch == 0
        || c.signal_every == 0
        || c.batch.saturating_add(c.signal_every) > u64::from(DEPTH)
    {
        return Err(zverbs::Error::InvalidArgument(format!(
            "batch {} and signal every {}: both at least 1, together at most the queue's {DEPTH}",
            c.batch, c.signal_every
        )));
    }
    if c.size == 0 || c.size > MAX_SIZE {
        return Err(zverbs::Error::InvalidArgument(format!(
            "{} bytes per WRITE: use 1 to {MAX_SIZE}",
            c.size
        )));
    }
    let ctx = zverbs::open_device(Some(device), &ContextOptions::default())?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (
        ctx.cq_builder().cqe(256).build()?,
        ctx.cq_builder().build()?,
    );
    let a = pd.qp_builder(&cq_a, &cq_a).max_send_wr(DEPTH).build()?;
    let b = pd.qp_builder(&cq_b, &cq_b).build()?;
    zverbs::connect_pair(&a, &b)?;
    let src = pd.alloc_buf(SLOTS * c.size, AccessFlags::ALL)?;
    let dst = pd.alloc_buf(SLOTS * c.size, AccessFlags::ALL)?;
    // The source never changes while WRITEs read it: a pattern per slot, written once.
    for s in 0..SLOTS {
        src.fill(s * c.size..(s + 1) * c.size, s as u8 + 1)?;
    }
    let mut q = a.queues(&cq_a)?;

    let (mut posted, mut retired) = (0u64, 0u64);
    let (mut doorbells, mut completions, mut credit_waits) = (0, 0, 0);
    let started = Instant::now();
    while posted < c.writes {
        let n = c.batch.min(c.writes - posted);
        // Credits: wait until the batch fits beside the WQEs still in the queue.
        if posted - retired + n > u64::from(DEPTH) {
            credit_waits += 1;
        }
        while posted - retired + n > u64::from(DEPTH) {
            let done = q.cq.wait(1, soon())?[0];
            done.ok()?;
            retired = done.wr_id + 1; // it and every WRITE before it
            completions += 1;
        }
        let mut batch = q.sq.batch();
        for _ in 0..n {
            let seq = posted;
            let at = (seq as usize % SLOTS) * c.size;
            let last = seq + 1 == c.writes;
            let flags = if (seq + 1) % c.signal_every == 0 || last {
                SendFlags::SIGNALED
            } else {
                SendFlags::NONE
            };
            batch.write(seq, src.slice(at..at + c.size)?, dst.remote(at)?, flags)?;
            posted += 1;
        }
        batch.finish(); // one doorbell for the n WRITEs
        doorbells += 1;
    }
    // The last WRITE is signaled: its completion retires everything.
    while retired < c.writes {
        let done = q.cq.wait(1, soon())?[0];
        done.ok()?;
        retired = done.wr_id + 1;
        completions += 1;
    }
    let elapsed = started.elapsed();

    let slots = SLOTS.min(c.writes as usize);
    let (mut want, mut got) = (vec![0; slots * c.size], vec![0; slots * c.size]);
    src.read(0, &mut want)?;
    dst.read(0, &mut got)?;
    if want != got {
        return Err(zverbs::Error::Protocol {
            detail: "the target's bytes differ from the source's".into(),
        });
    }
    Ok(Report {
        device: ctx.name().to_string(),
        config: c,
        doorbells,
        completions,
        credit_waits,
        bytes: c.writes * c.size as u64,
        elapsed,
    })
}
