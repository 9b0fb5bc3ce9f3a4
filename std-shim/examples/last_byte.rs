//! A receiver that learns a message has arrived by polling its last byte, not a completion:
//! the idiom of `ib_write_lat` and of many low-latency feeds. The sender RDMA WRITEs each
//! message into one of the receiver's slots with a stamp in its last byte; the receiver spins
//! on that byte, then reads the message, checks it whole, and acknowledges it with a one-byte
//! WRITE back, which frees the slot.
//!
//! Why it works, and the fence it needs:
//!
//! - **The device writes the last byte last.** The sender's NIC places a WRITE's payload in
//!   address order, so when the last byte is there the bytes before it are too. ConnectX
//!   devices do this and `ib_write_lat` relies on it; the InfiniBand specification promises
//!   only that a message is all there when its completion is seen, so this is a property of
//!   the hardware, checked for each NIC family. The software device writes the last byte with
//!   a `Release` store after the rest.
//! - **The receiver's load of that byte is an `Acquire` load** (`MrBuf::wait_u8`, or
//!   `load_u8_acquire` in a loop of one's own): the reads of the message that follow it cannot
//!   be performed before it, so they return the message's bytes and not older ones. With a
//!   `Relaxed` load an aarch64 core may read the body first and the flag second, and return a
//!   body older than the flag (there the acquire load is an `ldar`); on x86_64 loads are not
//!   reordered with loads and the acquire load is an ordinary `mov`, but the compiler would
//!   still be free to move the body's reads above a relaxed one. It costs nothing there.
//! - **The stamp differs from what the byte held before**: each slot's stamp goes up by one
//!   every time the slot is reused (1 to 255, then 1 again), never 0, the buffer's first value.
//! - **The sender learns when a slot is free** from the receiver's acknowledgement (a count
//!   of messages consumed, modulo 256, read with an acquire load too; it yields its core
//!   while it waits, for the receiver and the device), and reuses its own source slot only
//!   after that WRITE's completion.
//!
//! Runs on the software mlx5 device, in this process, no NIC needed:
//!
//! ```text
//! cargo run -p zverbs --example last_byte -- [messages] [bytes per message]
//! ```
//!
//! On a NIC, name it (sender and receiver are two QPs of that device, connected to each
//! other): `ZVERBS_DEVICE=mlx5_0 cargo run --release -p zverbs --example last_byte`.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use zverbs::safe::SafeQueues;
use zverbs::{AccessFlags, ContextOptions, MrBuf, Registered, SendFlags};

/// Message slots in the receiver's buffer (at most 255: the acknowledgement is a byte).
const SLOTS: usize = 8;
/// The largest message (the buffers hold [`SLOTS`] of them).
pub const MAX_SIZE: usize = 1 << 20;
/// Send queue depth of each side.
const DEPTH: u32 = 64;
/// Where the acknowledgement lands in the sender's buffer (after its source slots).
fn ack_at(size: usize) -> usize {
    SLOTS * size
}

const USAGE: &str = "usage: last_byte [messages] [bytes per message]";

fn main() -> std::process::ExitCode {
    let parsed = (|| -> Result<(u64, usize), String> {
        at_most(2)?;
        let messages = arg(1, "the number of messages", 5_000)?;
        let size = arg(2, "the message size", 256)?;
        Ok((messages, usize::try_from(size).unwrap_or(usize::MAX)))
    })();
    let (messages, size) = match parsed {
        Ok(a) => a,
        Err(e) => {
            eprintln!("last_byte: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let device =
        std::env::var(zverbs::DEVICE_ENV).unwrap_or_else(|_| zverbs::SOFTWARE_DEVICE.into());
    match run(&device, messages, size) {
        Ok(r) => {
            print!("{r}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("last_byte: {e}");
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
    /// Messages received, each seen by its last byte and checked whole.
    pub messages: u64,
    /// Bytes per message.
    pub size: usize,
    /// Times the sender found every slot taken and waited for an acknowledgement.
    pub sender_waits: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {}", self.device)?;
        writeln!(
            f,
            "last_byte: {} messages of {} bytes through {SLOTS} slots: each seen by its last \
             byte (acquire load), then checked whole",
            self.messages, self.size
        )?;
        writeln!(
            f,
            "  the receiver read no completion for them; the sender waited for a free slot {} times",
            self.sender_waits
        )
    }
}

/// A deadline for one wait.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// The stamp of message `i`: its slot's use count, 1 to 255 and round again.
fn stamp(i: u64) -> u8 {
    ((i / SLOTS as u64) % 255 + 1) as u8
}

/// The byte the body of message `i` is made of.
fn body(i: u64) -> u8 {
    (i % 251) as u8
}

/// Sends `messages` messages of `size` bytes (at least 2) from one QP of `device` to another.
///
/// # Errors
///
/// [`zverbs::Error::InvalidArgument`] for a size below 2; whatever set-up, a post, a wait or
/// a completion returns; [`zverbs::Error::Buf`] when a wait for a byte times out;
/// [`zverbs::Error::Protocol`] when a message is not whole.
pub fn run(device: &str, messages: u64, size: usize) -> zverbs::Result<Report> {
    if size < 2 {
        return Err(zverbs::Error::InvalidArgument(
            "a message needs a body and a last byte: at least 2 bytes".into(),
        ));
    }
    if size > MAX_SIZE {
        return Err(zverbs::Error::InvalidArgument(format!(
            "{size} bytes per message: at most {MAX_SIZE}"
        )));
    }
    let ctx = zverbs::open_device(Some(device), &ContextOptions::default())?;
    let pd = ctx.alloc_pd()?;
    let (cq_s, cq_r) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
    let sender = pd.qp_builder(&cq_s, &cq_s).max_send_wr(DEPTH).build()?;
    let receiver = pd.qp_builder(&cq_r, &cq_r).max_send_wr(DEPTH).build()?;
    zverbs::connect_pair(&sender, &receiver)?;
    // The sender's source slots and its acknowledgement byte; the receiver's message slots.
    let s_buf = pd.alloc_buf(SLOTS * size + 8, AccessFlags::ALL)?;
    let r_buf = pd.alloc_buf(SLOTS * size, AccessFlags::ALL)?;
    let (qs, qr) = (sender.queues(&cq_s)?, receiver.queues(&cq_r)?);

    let sender_waits = thread::scope(|t| {
        let rx = t.spawn(|| receive(qr, &r_buf, &s_buf, messages, size));
        let waits = send(qs, &s_buf, &r_buf, messages, size);
        let received = rx.join().expect("the receiver panicked");
        // The receiver's error says more than the sender's (which then only times out).
        received.and(waits)
    })?;
    Ok(Report {
        device: ctx.name().to_string(),
        messages,
        size,
        sender_waits,
    })
}

/// The sender: a WRITE per message, each signaled (its completion frees the source slot).
fn send(mut q: SafeQueues, buf: &MrBuf, peer: &MrBuf, n: u64, size: usize) -> zverbs::Result<u64> {
    let (mut completed, mut waits) = (0u64, 0);
    for i in 0..n {
        // A free slot at the receiver: fewer than SLOTS messages not yet acknowledged. The
        // count travels as a byte; the difference is at most SLOTS, so it cannot wrap.
        let deadline = soon();
        let mut waited = false;
        while (i as u8).wrapping_sub(buf.load_u8_acquire(ack_at(size))?) as usize >= SLOTS {
            waited = true;
            if Instant::now() >= deadline {
                return Err(zverbs::Error::Protocol {
                    detail: format!("message {i}: no acknowledgement from the receiver"),
                });
            }
            // The receiver (and on the software device, the device) may need this core.
            thread::yield_now();
        }
        waits += u64::from(waited);
        // The source slot is free once the WRITE that last used it has completed.
        while completed + SLOTS as u64 <= i {
            for c in q.cq.wait(1, soon())? {
                c.ok()?;
                completed += 1;
            }
        }
        let at = (i as usize % SLOTS) * size;
        buf.fill(at..at + size - 1, body(i))?;
        buf.store_u8(at + size - 1, stamp(i))?;
        q.sq.write(
            i,
            buf.slice(at..at + size)?,
            peer.remote(at)?,
            SendFlags::SIGNALED,
        )?;
    }
    while completed < n {
        for c in q.cq.wait(1, soon())? {
            c.ok()?;
            completed += 1;
        }
    }
    Ok(waits)
}

/// The receiver: waits for each message's last byte, checks the message, acknowledges it.
fn receive(
    mut q: SafeQueues,
    buf: &MrBuf,
    peer: &MrBuf,
    n: u64,
    size: usize,
) -> zverbs::Result<()> {
    let mut msg = vec![0u8; size];
    let (mut acked, mut completed) = (0u64, 0u64);
    for i in 0..n {
        let at = (i as usize % SLOTS) * size;
        // Spins with acquire loads until the stamp is there, or the deadline passes.
        buf.wait_u8(at + size - 1, stamp(i), soon())?;
        buf.read(at, &mut msg)?; // all of it: the acquire load ordered these reads after it
        if msg[..size - 1].iter().any(|&b| b != body(i)) {
            return Err(zverbs::Error::Protocol {
                detail: format!("message {i}: its last byte came before its body"),
            });
        }
        // Acknowledge: the count consumed, one byte, written into the sender's buffer.
        // Signaled so that the send queue's room can be counted; reaped without waiting.
        while acked - completed >= u64::from(DEPTH) {
            for c in q.cq.wait(1, soon())? {
                c.ok()?;
                completed += 1;
            }
        }
        q.sq.write_inline(
            i,
            &[(i + 1) as u8],
            peer.remote(ack_at(size))?,
            SendFlags::SIGNALED,
        )?;
        acked += 1;
        for c in q.cq.ready() {
            c.ok()?;
            completed += 1;
        }
    }
    while completed < acked {
        for c in q.cq.wait(1, soon())? {
            c.ok()?;
            completed += 1;
        }
    }
    Ok(())
}
