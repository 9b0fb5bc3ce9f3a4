//! A request/response server with several clients: one server thread, one server QP per
//! client, three clients on threads of their own. A client SENDs a request (two numbers and a
//! sequence number) into a receive the server keeps posted; the server answers with the sum,
//! by SEND into the client's posted receive for even requests and by RDMA WRITE with immediate
//! (the sum written into the client's buffer, the sequence number in the immediate) for odd
//! ones. The client checks every answer.
//!
//! The server's three QPs share one receive CQ (every request arrives on it; `wr_id` says
//! which client and which receive) and one send CQ (its answers' completions): one thread
//! serves them all without looking at three queues. Every wait has a deadline.
//!
//! Five threads poll here (three clients, the server, and on the software device its engine).
//! The server spins (`wait`); a client polls and gives its core away (`yield_now`) while its
//! answer is not in, so that on a machine with fewer cores than threads the server and the
//! device get to run: with five spinning threads on two cores each request would wait for the
//! scheduler's time slices, milliseconds each.
//!
//! Runs on the software mlx5 device, in this process, no NIC needed:
//!
//! ```text
//! cargo run -p zverbs --example rpc -- [requests per client]
//! ```
//!
//! On a NIC, name it (both ends are QPs of that one device, connected to each other):
//! `ZVERBS_DEVICE=mlx5_0 cargo run --release -p zverbs --example rpc`.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use zverbs::Poller;
use zverbs::RecvQueue;
use zverbs::safe::{SafeQueues, WaitError};
use zverbs::{AccessFlags, ContextOptions, MrBuf, Registered, SendFlags, SendQueue, WcOpcode};

/// Clients, each on a thread and a QP of its own.
pub const CLIENTS: usize = 3;
/// Receives each server QP keeps posted for requests.
const SLOTS: usize = 4;
/// Bytes of a request or answer slot.
const MSG: usize = 64;
/// Bytes of the server's buffer per client: the request slots, then two answer slots.
const REGION: usize = (SLOTS + 2) * MSG;
/// In a client's buffer: its request, the receive an answer SENT lands in, and the place an
/// answer WRITTEN lands.
const REQ: usize = 0;
const RECV: usize = MSG;
const WRITTEN: usize = 2 * MSG;
const SIG: SendFlags = SendFlags::SIGNALED;

const USAGE: &str = "usage: rpc [requests per client]";

fn main() -> std::process::ExitCode {
    let parsed = at_most(1).and_then(|()| arg(1, "the number of requests per client", 200));
    let requests = match parsed {
        Ok(n) => n,
        Err(e) => {
            eprintln!("rpc: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let device =
        std::env::var(zverbs::DEVICE_ENV).unwrap_or_else(|_| zverbs::SOFTWARE_DEVICE.into());
    match run(&device, requests) {
        Ok(r) => {
            print!("{r}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rpc: {e}");
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

/// A deadline for one wait: far beyond anything the exchange needs, so that a peer that stops
/// answering ends the program with an error instead of hanging it.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// What the run did.
#[derive(Debug)]
pub struct Report {
    /// The device it ran on.
    pub device: String,
    /// Requests each client made.
    pub requests: u64,
    /// Per client: answers that came by SEND and by WRITE with immediate, all checked.
    pub answers: [(u64, u64); CLIENTS],
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {}", self.device)?;
        let total: u64 = self.answers.iter().map(|(s, w)| s + w).sum();
        for (i, (s, w)) in self.answers.iter().enumerate() {
            writeln!(
                f,
                "client {i}: {} answers checked ({s} by SEND, {w} by WRITE with immediate)",
                s + w
            )?;
        }
        writeln!(
            f,
            "rpc: {CLIENTS} clients x {} requests: {total} answered, all correct",
            self.requests
        )
    }
}

/// Runs the server and the clients on `device`.
///
/// # Errors
///
/// Whatever set-up, a post, a wait or a completion returns; a wrong answer is an
/// [`zverbs::Error::Protocol`].
pub fn run(device: &str, requests: u64) -> zverbs::Result<Report> {
    let ctx = zverbs::open_device(Some(device), &ContextOptions::default())?;
    let pd = ctx.alloc_pd()?;

    // The server: one receive CQ and one send CQ for all its QPs, one buffer for all clients.
    let recv_cq = ctx.cq_builder().cqe(64).build()?;
    let send_cq = ctx.cq_builder().cqe(256).build()?;
    let server_buf = pd.alloc_buf(CLIENTS * REGION, AccessFlags::ALL)?;
    let mut server_qps = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        // Three QPs share the send CQ: each may have a third of it signaled.
        let qp = pd
            .qp_builder(&send_cq, &recv_cq)
            .max_send_wr(32)
            .max_recv_wr(SLOTS as u32)
            .max_signaled(64)
            .build()?;
        let cq = ctx.cq_builder().cqe(16).build()?;
        let client = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(8)
            .max_recv_wr(8)
            .build()?;
        zverbs::connect_pair(&qp, &client)?; // INIT, RTR, RTS, each to the other
        let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
        server_qps.push(qp);
        clients.push((client, cq, buf));
    }
    let mut sq: Vec<SendQueue> = Vec::new();
    let mut rq = Vec::new();
    for (c, qp) in server_qps.iter().enumerate() {
        sq.push(qp.send_queue()?);
        let mut q = qp.recv_queue()?;
        // Receives posted before any client sends: wr_id names the client and the slot.
        for s in 0..SLOTS {
            let at = c * REGION + s * MSG;
            q.post((c * SLOTS + s) as u64, server_buf.slice(at..at + MSG)?)?;
        }
        rq.push(q);
    }
    // Every QP on the two CQs exists: their pollers can be taken.
    let requests_in = recv_cq.poller()?;
    let answers_out = send_cq.poller()?;
    let written_at = clients
        .iter()
        .map(|(_, _, b)| b.remote(WRITTEN))
        .collect::<Result<Vec<_>, _>>()?;

    let mut answers = [(0, 0); CLIENTS];
    thread::scope(|s| -> zverbs::Result<()> {
        let threads: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, (qp, cq, buf))| {
                s.spawn(move || -> zverbs::Result<(u64, u64)> {
                    client(i as u64, qp.queues(cq)?, buf, requests)
                })
            })
            .collect();
        let server = Server {
            buf: &server_buf,
            sq: &mut sq,
            rq: &mut rq,
            requests_in,
            answers_out,
            written_at: &written_at,
        };
        server.serve(CLIENTS as u64 * requests)?;
        for (i, t) in threads.into_iter().enumerate() {
            answers[i] = t.join().expect("a client thread panicked")?;
        }
        Ok(())
    })?;
    Ok(Report {
        device: ctx.name().to_string(),
        requests,
        answers,
    })
}

/// One client: `requests` requests, each answered before the next; returns how many answers
/// came by SEND and by WRITE with immediate.
fn client(i: u64, mut q: SafeQueues, buf: &MrBuf, requests: u64) -> zverbs::Result<(u64, u64)> {
    let (mut by_send, mut by_write) = (0, 0);
    for seq in 0..requests {
        // The answer needs a receive either way: a SEND lands in it, a WRITE with immediate
        // consumes it to deliver the immediate.
        q.rq.post(seq, buf.slice(RECV..RECV + MSG)?)?;
        let (a, b) = (seq * 7 + i, 1000 * i + seq);
        buf.store_u64(REQ, a)?;
        buf.store_u64(REQ + 8, b)?;
        buf.store_u64(REQ + 16, seq)?;
        q.sq.send(seq, buf.slice(REQ..REQ + 24)?, SIG)?;
        // The request's completion and the answer's, in either order. The client polls, and
        // gives its core away while nothing is in: the server (and on the software device, the
        // device itself) may need it to answer.
        let mut answer = None;
        let (mut seen, deadline) = (0, soon());
        while seen < 2 {
            let ready = q.cq.ready();
            if ready.is_empty() {
                if Instant::now() >= deadline {
                    return Err(WaitError::Timeout {
                        wanted: 2,
                        got: seen,
                    }
                    .into());
                }
                thread::yield_now();
            }
            for c in ready {
                c.ok()?;
                seen += 1;
                match c.opcode {
                    WcOpcode::Recv => {
                        answer = Some((buf.load_u64(RECV)?, buf.load_u64(RECV + 8)?));
                        by_send += 1;
                    }
                    WcOpcode::RecvRdmaWithImm => {
                        let imm = u64::from(c.imm().unwrap_or(u32::MAX));
                        answer = Some((buf.load_u64(WRITTEN)?, imm));
                        by_write += 1;
                    }
                    _ => {} // the request's own completion
                }
            }
        }
        if answer != Some((a + b, seq)) {
            return Err(zverbs::Error::Protocol {
                detail: format!(
                    "client {i}, request {seq}: expected {:?}, got {answer:?}",
                    (a + b, seq)
                ),
            });
        }
    }
    Ok((by_send, by_write))
}

/// The server's side: its queues, one per client, and the two shared pollers.
struct Server<'a> {
    buf: &'a MrBuf,
    sq: &'a mut [SendQueue],
    rq: &'a mut [RecvQueue],
    requests_in: Poller,
    answers_out: Poller,
    written_at: &'a [zverbs::RemoteBuf],
}

/// `wr_id` of an answer by SEND (inline: no buffer to keep) and by WRITE with immediate (the
/// client and which of its two answer slots).
const BY_SEND: u64 = 1 << 32;

impl Server<'_> {
    fn serve(mut self, total: u64) -> zverbs::Result<()> {
        // An answer slot is written again only after the WRITE that sent it has completed.
        let mut busy = [[false; 2]; CLIENTS];
        let mut next = [0usize; CLIENTS];
        let mut outstanding = 0u64;
        for _ in 0..total {
            let req = self.requests_in.wait(1, soon())?[0];
            req.ok()?;
            let (c, slot) = (req.wr_id as usize / SLOTS, req.wr_id as usize % SLOTS);
            let at = c * REGION + slot * MSG;
            let (a, b, seq) = (
                self.buf.load_u64(at)?,
                self.buf.load_u64(at + 8)?,
                self.buf.load_u64(at + 16)?,
            );
            // Read: the receive can take the next request.
            self.rq[c].post(req.wr_id, self.buf.slice(at..at + MSG)?)?;
            let sum = a.wrapping_add(b);
            if seq % 2 == 0 {
                let mut answer = [0u8; 16];
                answer[..8].copy_from_slice(&sum.to_ne_bytes());
                answer[8..].copy_from_slice(&seq.to_ne_bytes());
                self.sq[c].send_inline(BY_SEND | c as u64, &answer, SIG)?;
            } else {
                let s = next[c];
                next[c] ^= 1;
                while busy[c][s] {
                    let done = self.answers_out.wait(1, soon())?[0];
                    retire(done, &mut busy, &mut outstanding)?;
                }
                let from = c * REGION + (SLOTS + s) * MSG;
                self.buf.store_u64(from, sum)?;
                busy[c][s] = true;
                self.sq[c].write_imm(
                    (c * 2 + s) as u64,
                    self.buf.slice(from..from + 8)?,
                    self.written_at[c],
                    seq as u32,
                    SIG,
                )?;
            }
            outstanding += 1;
            // Take the answers' completions that are in, without waiting.
            for &done in self.answers_out.ready() {
                retire(done, &mut busy, &mut outstanding)?;
            }
        }
        while outstanding > 0 {
            let done = self.answers_out.wait(1, soon())?[0];
            retire(done, &mut busy, &mut outstanding)?;
        }
        Ok(())
    }
}

/// Counts an answer's completion, and frees its slot if it was a WRITE.
fn retire(
    c: zverbs::Completion,
    busy: &mut [[bool; 2]; CLIENTS],
    outstanding: &mut u64,
) -> zverbs::Result<()> {
    c.ok()?;
    if c.wr_id & BY_SEND == 0 {
        busy[c.wr_id as usize / 2][c.wr_id as usize % 2] = false;
    }
    *outstanding -= 1;
    Ok(())
}
