//! The receiving end of the fabric: one thread serves the listener and every connection to it
//! (`epoll`), admits a connection by its hello ([`super::hello`]) and hands each whole message
//! to the device.
//!
//! What a peer sends is untrusted input, and nothing it sends costs more than it sent:
//!
//! - **Connections are bounded**: at most [`MAX_CONNECTIONS`], of which at most
//!   [`MAX_PENDING`] not yet admitted, each of those for at most [`HELLO_WAIT`]; one more is
//!   closed when accepted. No connection has a thread of its own.
//! - **A frame's size is checked before anything is allocated for it**: a length over
//!   [`MAX_FRAME`] (or 0) closes the connection, and a frame's buffer grows only as its bytes
//!   arrive (at most [`READ_MAX`] a read), so a header announcing 2 GiB costs nothing until
//!   2 GiB have come.
//! - **A message's sender is the connection's**: a message whose source LID is not the one the
//!   connection was admitted for closes it, undelivered.
//!
//! Framing: a little-endian `u32` length, then the message.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use zverbs_sim::wire::Message;

use super::hello::{self, HELLO_LEN, Hello, Key, MAX_LID, Role};

/// Connections served at once (admitted or awaiting their hello).
pub const MAX_CONNECTIONS: usize = 256;
/// Connections awaiting their hello at once.
pub const MAX_PENDING: usize = 32;
/// How long a connection may take to send its hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(5);
/// The largest frame taken: a 2 GiB message (the largest RDMA message) and its header.
pub const MAX_FRAME: usize = (1 << 31) + 4096;
/// Bytes asked of a socket at a time, at least (several small messages in one read).
pub const READ_MIN: usize = 64 << 10;
/// Bytes asked of a socket at a time, at most (a large message arrives in pieces of this).
pub const READ_MAX: usize = 1 << 20;
/// A buffer larger than this is given back once empty.
const KEEP: usize = 4 << 20;

/// The listener of one device instance, not yet served.
#[derive(Debug)]
pub struct Listener {
    pub(super) sock: UnixListener,
    pub(super) ns: String,
    pub(super) lid: u16,
    pub(super) key: Key,
}

impl Listener {
    /// The LID it answers to.
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// Serves the listener and its connections on one thread, handing every message a member
    /// of the fabric sends to `deliver`, in the order each sent them. Returns at once.
    ///
    /// # Errors
    ///
    /// When the thread or its `epoll` instance cannot be made.
    pub fn serve(self, deliver: impl FnMut(&[u8]) + Send + 'static) -> io::Result<()> {
        // SAFETY: plain epoll creation; the descriptor is owned at once below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ep` is a new descriptor that nothing else owns.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        self.sock.set_nonblocking(true)?;
        watch(&ep, self.sock.as_raw_fd())?;
        let mut server = Server {
            ep,
            listener: self,
            conns: HashMap::new(),
            pending: 0,
            deliver,
        };
        std::thread::Builder::new()
            .name("zverbs-emu-rx".into())
            .spawn(move || server.run())?;
        Ok(())
    }
}

/// Adds `fd` to the epoll set `ep`, readable (level-triggered), keyed by itself.
fn watch(ep: &OwnedFd, fd: RawFd) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: `ev` is a valid event for the duration of the call; `fd` is open.
    let r = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Where a connection is.
#[derive(Debug)]
enum State {
    /// Reading its hello: `got` bytes of it so far, until `until`; `pid` connected.
    Hello {
        bytes: [u8; HELLO_LEN],
        got: usize,
        until: Instant,
        pid: i32,
    },
    /// Admitted for `lid`: frames, `buf` holding the start of the one not yet whole.
    Open { lid: u16, buf: Vec<u8> },
}

#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    state: State,
}

struct Server<F> {
    ep: OwnedFd,
    listener: Listener,
    conns: HashMap<RawFd, Conn>,
    /// Connections in [`State::Hello`].
    pending: usize,
    deliver: F,
}

impl<F: FnMut(&[u8])> Server<F> {
    fn run(&mut self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let listener = self.listener.sock.as_raw_fd();
        loop {
            let timeout = self.next_expiry();
            // SAFETY: `events` has room for 64 events.
            let n =
                unsafe { libc::epoll_wait(self.ep.as_raw_fd(), events.as_mut_ptr(), 64, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                crate::log(format_args!("the fabric's receiver stops: epoll_wait: {e}"));
                return;
            }
            for ev in &events[..n as usize] {
                let fd = ev.u64 as RawFd;
                if fd == listener {
                    self.accept_all();
                } else {
                    self.readable(fd);
                }
            }
            self.expire(Instant::now());
        }
    }

    /// Milliseconds until the first hello wait ends (-1: none pending).
    fn next_expiry(&self) -> i32 {
        let now = Instant::now();
        self.conns
            .values()
            .filter_map(|c| match c.state {
                State::Hello { until, .. } => Some(until),
                State::Open { .. } => None,
            })
            .min()
            .map_or(-1, |t| {
                let ms = t.saturating_duration_since(now).as_millis() + 1;
                ms.min(i32::MAX as u128) as i32
            })
    }

    fn accept_all(&mut self) {
        loop {
            let s = match self.listener.sock.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, say: the connection stays queued; try at the next
                    // wake-up rather than spin.
                    crate::log(format_args!("accept: {e}"));
                    return;
                }
            };
            if self.conns.len() >= MAX_CONNECTIONS || self.pending >= MAX_PENDING {
                crate::log(format_args!(
                    "refused a connection: {} connections, {} awaiting their hello",
                    self.conns.len(),
                    self.pending
                ));
                continue;
            }
            let cred = match hello::peer_cred(s.as_fd()) {
                Ok(c) if c.uid == hello::my_uid() => c,
                Ok(c) => {
                    crate::log(format_args!(
                        "refused process {} of user {}: another user",
                        c.pid, c.uid
                    ));
                    continue;
                }
                Err(e) => {
                    crate::log(format_args!("refused a connection: no credentials ({e})"));
                    continue;
                }
            };
            let fd = s.as_raw_fd();
            if s.set_nonblocking(true).is_err() || watch(&self.ep, fd).is_err() {
                continue;
            }
            self.pending += 1;
            self.conns.insert(
                fd,
                Conn {
                    stream: s,
                    state: State::Hello {
                        bytes: [0; HELLO_LEN],
                        got: 0,
                        until: Instant::now() + HELLO_WAIT,
                        pid: cred.pid,
                    },
                },
            );
            // A member sends its hello as it connects: take it now, so that connections
            // arriving together do not count against MAX_PENDING while their hellos wait.
            self.readable(fd);
        }
    }

    fn readable(&mut self, fd: RawFd) {
        let Some(c) = self.conns.get_mut(&fd) else {
            return;
        };
        let r = match &mut c.state {
            State::Hello {
                bytes, got, pid, ..
            } => match (&c.stream).read(&mut bytes[*got..]) {
                Ok(0) => Err("closed before its hello".to_string()),
                Ok(n) => {
                    *got += n;
                    if *got == HELLO_LEN {
                        admit(&self.listener, bytes, *pid).map(|lid| {
                            c.state = State::Open {
                                lid,
                                buf: Vec::new(),
                            };
                            self.pending -= 1;
                        })
                    } else {
                        Ok(())
                    }
                }
                Err(e) if would_block(&e) => Ok(()),
                Err(e) => Err(format!("read: {e}")),
            },
            State::Open { lid, buf } => receive(&c.stream, *lid, buf, &mut self.deliver)
                .map_err(|why| format!("the connection of LID {lid}: {why}")),
        };
        if let Err(why) = r {
            crate::log(format_args!("closing {why}"));
            self.close(fd);
        }
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<RawFd> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, State::Hello { until, .. } if until <= now))
            .map(|(&fd, _)| fd)
            .collect();
        for fd in late {
            crate::log(format_args!(
                "closing a connection that sent no hello within {HELLO_WAIT:?}"
            ));
            self.close(fd);
        }
    }

    fn close(&mut self, fd: RawFd) {
        if let Some(c) = self.conns.remove(&fd)
            && matches!(c.state, State::Hello { .. })
        {
            self.pending -= 1;
        }
        // Dropping the stream closes it, which takes it out of the epoll set.
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Checks a whole hello from process `pid`: the LID it is admitted for, or why not.
fn admit(l: &Listener, bytes: &[u8; HELLO_LEN], pid: i32) -> Result<u16, String> {
    let h: Hello = Hello::decode(bytes).ok_or("a connection that is not of the fabric")?;
    if h.role != Role::Device {
        return Err("a connection that is not a device instance's".into());
    }
    if !h.key.matches(&l.key) {
        return Err(format!(
            "process {pid}: another fabric's key (not the sysfs tree's of this one)"
        ));
    }
    if h.lid == 0 || h.lid > MAX_LID || h.lid == l.lid {
        return Err(format!("process {pid}: it claims LID {}", h.lid));
    }
    match hello::holder(&l.ns, h.lid) {
        Ok(c) if c.pid == pid && c.uid == hello::my_uid() => Ok(h.lid),
        Ok(c) => Err(format!(
            "process {pid}: it claims LID {}, which process {} holds",
            h.lid, c.pid
        )),
        Err(e) => Err(format!(
            "process {pid}: it claims LID {}, which no process holds ({e})",
            h.lid
        )),
    }
}

/// Reads what `s` has for the connection of `lid` into `buf` and delivers every message made
/// whole; `Err` when the connection must close.
fn receive(
    s: &UnixStream,
    lid: u16,
    buf: &mut Vec<u8>,
    deliver: &mut impl FnMut(&[u8]),
) -> Result<(), String> {
    let want = missing(buf)?.clamp(READ_MIN, READ_MAX);
    buf.reserve(want);
    let spare = buf.spare_capacity_mut();
    let want = want.min(spare.len());
    // SAFETY: `recv` writes at most `want` bytes into the buffer's spare capacity, which is at
    // least that long.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            spare.as_mut_ptr().cast(),
            want,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if would_block(&e) {
            Ok(())
        } else {
            Err(format!("read: {e}"))
        };
    }
    if n == 0 {
        return Err("closed".into());
    }
    // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n as usize) };
    let used = frames(buf, lid, deliver)?;
    if used > 0 {
        // What follows the last whole frame came in this read: little to move.
        buf.drain(..used);
        if buf.is_empty() && buf.capacity() > KEEP {
            *buf = Vec::new();
        }
    }
    Ok(())
}

/// Bytes still to come before the frame at the start of `buf` is whole (its header first);
/// `Err` for a header announcing a frame no member sends.
fn missing(buf: &[u8]) -> Result<usize, String> {
    let Some(head) = buf.first_chunk::<4>() else {
        return Ok(4 - buf.len());
    };
    let n = frame_len(*head)?;
    Ok((4 + n).saturating_sub(buf.len()))
}

/// The length a frame header announces, checked.
fn frame_len(head: [u8; 4]) -> Result<usize, String> {
    let n = u32::from_le_bytes(head) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(format!("a frame of {n} bytes (at most {MAX_FRAME})"));
    }
    Ok(n)
}

/// Delivers the whole frames at the start of `buf`, each after checking that its message
/// comes from `lid`; the bytes they took.
fn frames(buf: &[u8], lid: u16, deliver: &mut impl FnMut(&[u8])) -> Result<usize, String> {
    let mut at = 0;
    while let Some(head) = buf[at..].first_chunk::<4>() {
        let n = frame_len(*head)?;
        let Some(msg) = buf.get(at + 4..at + 4 + n) else {
            break;
        };
        if !Message::sent_from(msg, lid) {
            return Err(format!(
                "a message naming LID {:?} as its sender",
                Message::source_lid(msg)
            ));
        }
        deliver(msg);
        at += 4 + n;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_checked_before_its_frame_is_waited_for() {
        assert_eq!(missing(&[]), Ok(4));
        assert_eq!(missing(&[1, 0]), Ok(2));
        assert_eq!(missing(&[3, 0, 0, 0, 9]), Ok(2));
        assert_eq!(missing(&[3, 0, 0, 0, 9, 9, 9, 1]), Ok(0));
        assert!(missing(&[0, 0, 0, 0]).unwrap_err().contains("0 bytes"));
        let over = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(missing(&over).is_err());
        assert_eq!(
            missing(&(MAX_FRAME as u32).to_le_bytes()),
            Ok(MAX_FRAME),
            "the largest frame is waited for"
        );
    }

    #[test]
    fn whole_frames_are_delivered_in_order_and_a_forged_sender_stops_them() {
        use zverbs_sim::wire::{Datagram, Message};
        let dgram = |src_lid: u16, tag: u8| {
            let m = Message::Datagram(Datagram {
                src_lid,
                src_qpn: 1,
                dlid: 9,
                dqpn: 2,
                qkey: 3,
                sl: 0,
                solicited: false,
                imm: None,
                grh: None,
                payload: vec![tag],
            })
            .encode();
            let mut f = (m.len() as u32).to_le_bytes().to_vec();
            f.extend(m);
            f
        };
        let mut buf = [dgram(5, 1), dgram(5, 2)].concat();
        let whole = buf.len();
        let part = dgram(5, 3);
        buf.extend_from_slice(&part[..part.len() - 1]);
        let mut got = Vec::new();
        let used = frames(&buf, 5, &mut |m: &[u8]| got.push(*m.last().unwrap())).unwrap();
        assert_eq!((used, got.as_slice()), (whole, &[1, 2][..]));
        let forged = [dgram(5, 1), dgram(6, 2), dgram(5, 3)].concat();
        let mut got = Vec::new();
        let e = frames(&forged, 5, &mut |m: &[u8]| got.push(*m.last().unwrap())).unwrap_err();
        assert!(e.contains("Some(6)"), "{e}");
        assert_eq!(got, [1], "nothing from the forged message on");
    }
}
