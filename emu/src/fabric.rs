//! The channel between the device instances of different processes: Unix stream sockets in
//! Linux's abstract namespace, one listener per process, named by the namespace and the LID.
//!
//! Each process's device instance picks a LID that no other live instance in the namespace
//! holds: binding `zverbs-emu.<ns>.lid.<lid>` is the reservation (an abstract name vanishes
//! with the process that bound it, so nothing is left behind). A message for LID `n` goes on
//! the stream this process opened to `n`'s listener; every stream opens with a hello that the
//! listening side checks ([`hello`]: same user, same fabric's key, the LID the peer's own), and
//! one thread of the listening process reads every admitted stream ([`rx`]: bounded
//! connections, frames checked before anything is allocated for them, each message's sender
//! the stream's) and hands each message to the device ([`zverbs_sim::Device::deliver`]).
//!
//! The device sends with its lock held, so a send never blocks: it writes the message at once
//! when the socket takes all of it without waiting (`MSG_DONTWAIT`) and nothing is queued
//! before it; otherwise the rest goes, in order, to a writer thread per peer. So two processes
//! sending large messages to each other cannot deadlock, and a small message costs no thread
//! hand-off on the sending side.
//!
//! Framing: a little-endian `u32` length, then the message.

pub mod hello;
pub mod rx;

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zverbs_sim::wire::Wire;

use hello::{Hello, Key, MAX_LID, Role, lid_name};
pub use rx::Listener;

/// The namespace of the abstract sockets: `ZVERBS_EMU_NS`, or a default shared by every
/// process of the machine.
pub fn namespace() -> String {
    std::env::var("ZVERBS_EMU_NS").unwrap_or_else(|_| "default".to_string())
}

/// The way to one peer instance.
#[derive(Debug)]
struct Link {
    /// The connected stream, once connected (written directly when `backlog` is 0).
    stream: Option<Arc<UnixStream>>,
    /// The writer thread's queue.
    tx: Sender<Vec<u8>>,
    /// Messages (or rests of messages) queued to the writer thread and not yet written.
    backlog: Arc<AtomicUsize>,
}

/// This process's end of the channel: its sending side (the [`Wire`] its device sends
/// through).
#[derive(Debug)]
pub struct Fabric {
    ns: String,
    lid: u16,
    key: Key,
    peers: Mutex<HashMap<u16, Link>>,
}

impl Fabric {
    /// Binds a listener for a free LID (starting at `first`, or at `ZVERBS_EMU_LID` when
    /// set) in namespace `ns`, for the fabric whose members hold `key`; returns the sending
    /// side and the listener to [`Listener::serve`].
    ///
    /// # Errors
    ///
    /// When no LID can be bound.
    pub fn bind(ns: &str, first: u16, key: Key) -> io::Result<(Self, Listener)> {
        let forced = std::env::var("ZVERBS_EMU_LID")
            .ok()
            .and_then(|v| v.parse::<u16>().ok());
        let start = forced.unwrap_or(first).clamp(1, MAX_LID);
        let mut lid = start;
        loop {
            let addr = SocketAddr::from_abstract_name(lid_name(ns, lid).as_bytes())?;
            match UnixListener::bind_addr(&addr) {
                Ok(sock) => {
                    let fabric = Self {
                        ns: ns.to_string(),
                        lid,
                        key,
                        peers: Mutex::new(HashMap::new()),
                    };
                    let listener = Listener {
                        sock,
                        ns: ns.to_string(),
                        lid,
                        key,
                    };
                    return Ok((fabric, listener));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && forced.is_none() => {
                    lid = if lid == MAX_LID { 1 } else { lid + 1 };
                    if lid == start {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The LID this instance answers to.
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The hello this instance's streams open with.
    fn hello(&self) -> Hello {
        Hello {
            role: Role::Device,
            lid: self.lid,
            key: self.key,
        }
    }
}

/// Connects to the instance at `lid` now, opening the stream with `hello`.
fn connect(ns: &str, lid: u16, hello: &Hello) -> io::Result<UnixStream> {
    hello::open(&lid_name(ns, lid), hello).map(|(s, _)| s)
}

/// Writes what `rx` receives on `stream`, or, when there is none yet, connects to the instance
/// at `lid` first (waiting up to a few seconds for it to appear).
fn write_loop(
    ns: &str,
    lid: u16,
    hello: &Hello,
    stream: Option<Arc<UnixStream>>,
    rx: &Receiver<Vec<u8>>,
    backlog: &AtomicUsize,
) {
    let stream = match stream {
        Some(s) => s,
        None => {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match connect(ns, lid, hello) {
                    Ok(s) => break Arc::new(s),
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => {
                        crate::log(format_args!(
                            "no device instance at LID {lid} ({e}); its requests are dropped"
                        ));
                        return;
                    }
                }
            }
        }
    };
    while let Ok(msg) = rx.recv() {
        if (&*stream).write_all(&msg).is_err() {
            crate::log(format_args!("the device instance at LID {lid} went away"));
            return;
        }
        backlog.fetch_sub(1, Ordering::Release);
    }
}

/// Writes as much of `frame` as the socket takes without waiting; returns how much.
fn write_now(s: &UnixStream, frame: &[u8]) -> usize {
    let mut done = 0;
    while done < frame.len() {
        // SAFETY: sends initialised bytes from a live buffer on an open socket.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                frame[done..].as_ptr().cast(),
                frame.len() - done,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n <= 0 {
            break;
        }
        done += n as usize;
    }
    done
}

impl Wire for Fabric {
    fn send(&self, lid: u16, msg: Vec<u8>) {
        let mut frame = Vec::with_capacity(4 + msg.len());
        frame.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        frame.extend_from_slice(&msg);
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let link = peers.entry(lid).or_insert_with(|| {
            let hello = self.hello();
            let stream = connect(&self.ns, lid, &hello).ok().map(Arc::new);
            let (tx, rx) = channel();
            let backlog = Arc::new(AtomicUsize::new(0));
            let (ns, s, b) = (self.ns.clone(), stream.clone(), backlog.clone());
            let _ = std::thread::Builder::new()
                .name("zverbs-emu-tx".into())
                .spawn(move || write_loop(&ns, lid, &hello, s, &rx, &b));
            Link {
                stream,
                tx,
                backlog,
            }
        });
        // Directly, when nothing waits before this message (all sends hold the lock, so no
        // message can be queued between the check and the write).
        if let Some(s) = &link.stream
            && link.backlog.load(Ordering::Acquire) == 0
        {
            let done = write_now(s, &frame);
            if done == frame.len() {
                return;
            }
            frame.drain(..done);
        }
        link.backlog.fetch_add(1, Ordering::AcqRel);
        if link.tx.send(frame).is_err() {
            // The writer gave up (the peer went away): forget the link, so the next message
            // tries a new one.
            peers.remove(&lid);
        }
    }
}
