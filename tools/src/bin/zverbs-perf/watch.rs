//! Waiting for the peer, with an end.
//!
//! A test's wait loops poll the CQ (or a byte the peer writes) until what they wait for
//! arrives. Every such loop holds a [`Watch`] and calls [`Watch::idle`] after each empty
//! poll; the watch ends the wait with an error when:
//!
//! - the other side of a one-process run (software device) failed ([`ABORT`]);
//! - the peer closed the exchange connection, which stays open for the whole test: a peer
//!   that fails or is stopped closes it (what was awaited may still be on its way, so the wait
//!   goes on for [`GRACE`] first);
//! - nothing arrived for the limit (`--timeout`), when the wait has one. A server that only
//!   waits for the client's closing message while the client runs one-sided operations has no
//!   progress to watch, so over the exchange connection it has no limit (the connection ends
//!   it); over rdma_cm, which has no such connection here, it has the limit too.
//!
//! The clock is looked at once every [`CHECK_EVERY`] empty polls, never on the way of a
//! message that has arrived, and the socket at most once every [`PEEK_EVERY`] (asking it is a
//! system call). A side with nothing to answer (the passive side of a READ, atomic or WRITE
//! bandwidth test) sleeps after each empty poll instead ([`Watch::nap`]): in the exchange
//! connection for up to [`NAP`] (it wakes when the peer closes it), or for [`SHORT_NAP`]
//! without one; it looks after every nap.

use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a run returns.
pub(crate) type RunResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Signalled when a server's TCP listener is bound (for the in-process client of a
/// software-device run, which must not connect before it).
pub(crate) static LISTENING: (std::sync::Mutex<bool>, std::sync::Condvar) =
    (std::sync::Mutex::new(false), std::sync::Condvar::new());

/// Set for a software-device run with both sides in this process: more threads spin than
/// there may be cores (both sides and the device's progress thread), so an empty poll yields
/// the core rather than burn a scheduler time slice.
pub(crate) static YIELD_WHEN_IDLE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// Set on the in-process server of a software-device run, whose side stays silent.
    pub(crate) static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Set when one side of a one-process run fails: the other side's waits end at their next
/// look.
pub(crate) static ABORT: AtomicBool = AtomicBool::new(false);

/// How long a wait goes on once the peer has closed the exchange connection, and how long a
/// one-process run waits for its server after the client failed.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// How long a passive side sleeps in the exchange connection after an empty poll (it wakes
/// at once when the peer closes the connection).
pub(crate) const NAP: Duration = Duration::from_millis(50);

/// How long a passive side sleeps after an empty poll without an exchange connection, or when
/// the connection has something to read (then it would not sleep in it).
pub(crate) const SHORT_NAP: Duration = Duration::from_millis(1);

/// The least time between two looks that ask the socket (a system call) whether the peer
/// closed it: a busy wait for the peer's answer makes no system call more often than this,
/// where perftest's makes none.
pub(crate) const PEEK_EVERY: Duration = Duration::from_millis(10);

/// Empty polls between two looks at the clock, the socket and [`ABORT`].
pub(crate) const CHECK_EVERY: u32 = 1024;

/// One wait for the peer.
#[derive(Debug)]
pub(crate) struct Watch<'a> {
    /// Set when the wait must end because the other side of this run failed ([`ABORT`]).
    abort: &'a AtomicBool,
    /// The exchange connection (non-blocking), when there is one.
    peer: Option<&'a TcpStream>,
    /// How long the wait may go without progress, if it has a limit.
    limit: Option<Duration>,
    /// Empty polls since the last look.
    spins: u32,
    /// When the first look found nothing.
    since: Option<Instant>,
    /// When the peer was first seen gone.
    gone: Option<Instant>,
    /// No look before this asks the socket again (`None`: the next one does).
    next_peek: Option<Instant>,
}

impl<'a> Watch<'a> {
    /// A wait watching [`ABORT`] and `peer`'s connection, ending after `limit` without
    /// progress if given.
    pub(crate) fn new(peer: Option<&'a TcpStream>, limit: Option<Duration>) -> Self {
        Self::with_abort(&ABORT, peer, limit)
    }

    fn with_abort(
        abort: &'a AtomicBool,
        peer: Option<&'a TcpStream>,
        limit: Option<Duration>,
    ) -> Self {
        Self {
            abort,
            peer,
            limit,
            spins: 0,
            since: None,
            gone: None,
            next_peek: None,
        }
    }

    /// Something awaited arrived: the limit counts from now.
    pub(crate) fn progress(&mut self) {
        self.spins = 0;
        self.since = None;
    }

    /// One empty poll while `what` (`"waiting for the peer's WRITE"`).
    ///
    /// # Errors
    ///
    /// When the wait must end, saying why.
    pub(crate) fn idle(&mut self, what: &str) -> Result<(), String> {
        self.spins += 1;
        if self.spins < CHECK_EVERY {
            return Ok(());
        }
        self.spins = 0;
        self.look(what, Instant::now())
    }

    /// One empty poll while `what`, on a side that has nothing to answer: sleeps, leaving the
    /// cores to the peer and the device (in the exchange connection for up to [`NAP`], as
    /// perftest's passive side waits in its own, else for [`SHORT_NAP`]), then looks (a look
    /// costs little against the nap).
    ///
    /// # Errors
    ///
    /// When the wait must end, saying why.
    pub(crate) fn nap(&mut self, what: &str) -> Result<(), String> {
        let slept = self.peer.is_some_and(sleep_in);
        if !slept {
            std::thread::sleep(SHORT_NAP);
        }
        self.spins = 0;
        self.look(what, Instant::now())
    }

    #[cold]
    fn look(&mut self, what: &str, now: Instant) -> Result<(), String> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(format!(
                "stopped while {what}: the other side of this run failed"
            ));
        }
        if self.gone.is_none() && self.next_peek.is_none_or(|t| now >= t) {
            self.next_peek = Some(now + PEEK_EVERY);
            if self.peer.is_some_and(closed) {
                self.gone = Some(now);
            }
        }
        if let Some(t) = self.gone
            && now.duration_since(t) >= GRACE
        {
            return Err(format!(
                "the peer closed the connection while this side was {what}: it failed or was \
                 stopped (see its output)"
            ));
        }
        let since = *self.since.get_or_insert(now);
        if let Some(limit) = self.limit
            && now.duration_since(since) >= limit
        {
            return Err(format!(
                "nothing from the peer for {} s while {what}; is it still running? (--timeout \
                 sets the limit)",
                limit.as_secs()
            ));
        }
        Ok(())
    }
}

/// Sleeps in the non-blocking connection `s` until it has something to read or is closed, for
/// at most [`NAP`]; whether the whole time passed (else the caller sleeps another way, as the
/// connection would wake it at once). Leaves `s` non-blocking.
fn sleep_in(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    if s.set_nonblocking(false).is_err() || s.set_read_timeout(Some(NAP)).is_err() {
        let _ = s.set_nonblocking(true);
        return false;
    }
    let r = s.peek(&mut b);
    let _ = s.set_nonblocking(true);
    // The limit passed with nothing to read (a timed-out read is `WouldBlock` on Linux).
    r.is_err_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}

/// Bytes a look reads from the connection at most (a peer that keeps sending cannot hold
/// the look).
const DRAIN_MAX: usize = 4096;

/// Whether the peer has closed (or reset) the non-blocking connection `s`. Nothing is sent on
/// it during a test: whatever a peer sent anyway (a stray byte after its `done`) is read and
/// dropped, so that a close behind it is seen, where a peek would find the byte for ever.
fn closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 256];
    let mut drained = 0;
    while drained < DRAIN_MAX {
        match (&*s).read(&mut b) {
            Ok(0) => return true,
            Ok(n) => drained += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::NotConnected
                );
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Idles until the watch ends the wait (at most `looks` looks).
    fn idle_until_error(w: &mut Watch<'_>, looks: u32) -> Option<String> {
        for _ in 0..looks * CHECK_EVERY {
            if let Err(e) = w.idle("waiting for the test") {
                return Some(e);
            }
        }
        None
    }

    #[test]
    fn a_wait_without_progress_ends_at_its_limit_and_progress_restarts_it() {
        let start = Instant::now();
        let mut w = Watch::new(None, Some(Duration::from_secs(5)));
        assert_eq!(w.look("waiting", start), Ok(()));
        assert_eq!(w.look("waiting", start + Duration::from_secs(4)), Ok(()));
        w.progress();
        assert_eq!(w.look("waiting", start + Duration::from_secs(6)), Ok(()));
        let e = w
            .look(
                "waiting for the peer's WRITE",
                start + Duration::from_secs(11),
            )
            .unwrap_err();
        assert!(e.contains("nothing from the peer for 5 s"), "{e}");
        assert!(e.contains("waiting for the peer's WRITE"), "{e}");
        // Without a limit, time alone never ends a wait.
        let mut w = Watch::new(None, None);
        assert_eq!(w.look("waiting", start), Ok(()));
        assert_eq!(
            w.look("waiting", start + Duration::from_secs(1 << 20)),
            Ok(())
        );
    }

    #[test]
    fn a_closed_exchange_connection_ends_the_wait_after_the_grace() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut w = Watch::new(Some(&server), None);
        let start = Instant::now();
        assert_eq!(w.look("waiting", start), Ok(()));
        assert!(!closed(&server));
        drop(client);
        // The close reaches this end of a loopback connection at once, but allow for a
        // scheduler's delay before the end of the grace.
        let seen_at = Instant::now() + Duration::from_secs(30);
        let mut now = Instant::now();
        while !closed(&server) && now < seen_at {
            std::thread::sleep(Duration::from_millis(10));
            now = Instant::now();
        }
        assert!(closed(&server), "the close never arrived");
        let now = now.max(start + PEEK_EVERY);
        assert_eq!(w.look("waiting", now), Ok(()), "still within the grace");
        let e = w.look("waiting for the DONE", now + GRACE).unwrap_err();
        assert!(e.contains("the peer closed the connection"), "{e}");
    }

    #[test]
    fn a_close_behind_a_stray_byte_is_seen() {
        // The client of a one-sided test sent `done` and one byte more, then closed: the
        // passive server's wait (no limit) must still end.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        std::io::Write::write_all(&mut client, b"x").unwrap();
        drop(client);
        let mut w = Watch::new(Some(&server), None);
        let start = Instant::now();
        let mut now = start;
        let give_up = Instant::now() + Duration::from_secs(30);
        let e = loop {
            if let Err(e) = w.look("waiting for the client's closing SEND", now) {
                break e;
            }
            assert!(Instant::now() < give_up, "the close was never seen");
            std::thread::sleep(Duration::from_millis(10));
            now += PEEK_EVERY;
            if w.gone.is_some() {
                now += GRACE;
            }
        };
        assert!(e.contains("the peer closed the connection"), "{e}");
    }

    #[test]
    fn a_napping_wait_looks_after_every_nap() {
        let abort = AtomicBool::new(false);
        let mut w = Watch::with_abort(&abort, None, None);
        assert_eq!(w.nap("waiting"), Ok(()));
        abort.store(true, Ordering::Relaxed);
        let e = w.nap("waiting for the closing SEND").unwrap_err();
        assert!(e.contains("the other side of this run failed"), "{e}");
    }

    #[test]
    fn a_nap_in_the_connection_lasts_until_the_peer_closes_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        // Nothing to read: the whole nap is spent in the connection.
        assert!(sleep_in(&server));
        assert!(!closed(&server), "still open, and non-blocking again");
        drop(client);
        let seen_at = Instant::now() + Duration::from_secs(30);
        while !closed(&server) && Instant::now() < seen_at {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Closed: the connection ends the nap at once, and the watch sees the close.
        assert!(!sleep_in(&server));
        let mut w = Watch::new(Some(&server), None);
        assert_eq!(w.nap("waiting"), Ok(()));
        assert!(w.gone.is_some(), "the close was seen");
    }

    #[test]
    fn the_socket_is_asked_at_most_once_per_peek_interval() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut w = Watch::new(Some(&server), None);
        let start = Instant::now();
        assert_eq!(w.look("waiting", start), Ok(()));
        drop(client);
        let seen_at = Instant::now() + Duration::from_secs(30);
        while !closed(&server) && Instant::now() < seen_at {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(closed(&server), "the close never arrived");
        // Within the interval of the first look's question, no look asks again.
        let soon = start + PEEK_EVERY / 2;
        assert_eq!(w.look("waiting", soon), Ok(()));
        assert!(w.gone.is_none(), "the socket was asked again too soon");
        // Once it has passed, the next look asks and sees the close.
        assert_eq!(w.look("waiting", start + PEEK_EVERY), Ok(()));
        assert_eq!(w.gone, Some(start + PEEK_EVERY));
    }

    #[test]
    fn an_abort_ends_every_wait_at_its_next_look() {
        let abort = AtomicBool::new(false);
        let mut w = Watch::with_abort(&abort, None, None);
        assert_eq!(idle_until_error(&mut w, 2), None);
        abort.store(true, Ordering::Relaxed);
        let e = idle_until_error(&mut w, 1).expect("ended");
        assert!(e.contains("the other side of this run failed"), "{e}");
    }
}
