//! The out-of-band TCP exchange, wire-compatible with `ibv_rc_pingpong`.
//!
//! `ibv_rc_pingpong` (rdma-core `libibverbs/examples/rc_pingpong.c`) sends one fixed-size
//! message each way: the text `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID as 4 hex digits, QP number and
//! PSN as 6, the GID as 32: its 16 bytes in order), NUL-terminated, 52 bytes in all. The client
//! connects and sends first; the server answers (after moving its QP to RTR/RTS); the client
//! then sends `done` with its NUL (5 bytes) and both close.
//!
//! [`Wire::Zverbs`] adds, right after each side's 52 bytes, an extension record of
//! [`EXT_LEN`] bytes: `zverbs1:` then the remote buffer as `addr:rkey:len` in hex and an
//! application tag (so that two tools can check they run the same test). A peer that sends
//! anything else is reported as [`Error::Protocol`]; an `ibv_rc_pingpong` peer meeting a
//! [`Wire::Zverbs`] side is told apart by its missing extension.
//!
//! Send a QP's [`Qp::endpoint`](crate::Qp::endpoint) (it announces the PSN the QP will send
//! from) and connect with [`Qp::connect`](crate::Qp::connect) to the endpoint received:
//!
//! ```no_run
//! use std::time::Duration;
//! use zverbs::connect::exchange::{self, Hello, Wire};
//!
//! # fn f(qp: &zverbs::Qp) -> zverbs::Result<()> {
//! let mut s = exchange::connect("server:18515", Duration::from_secs(10))?;
//! let hello = Hello { endpoint: qp.endpoint()?, ..Hello::default() };
//! let peer = exchange::client(&mut s, &hello, Wire::RcPingpong)?;
//! qp.connect(&peer.endpoint)?;
//! # Ok(()) }
//! ```
//!
//! The server connects in [`server`]'s callback, before it answers, as `ibv_rc_pingpong`
//! does: `exchange::server(&mut s, &hello, wire, |peer| qp.connect(&peer.endpoint))`.
//!
//! Every wait ends: [`client`] and [`server`] each finish within the stream's read timeout
//! (the `timeout` that [`connect`] and [`accept`] set; [`DEFAULT_TIMEOUT`] for a stream without
//! one), counted from the call, however the peer spaces its bytes; a peer that closes is seen
//! at once. A peer that answers with this side's own address (an echo: its QP would be
//! connected to itself) is refused.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Endpoint, RemoteRegion};
use crate::error::{Error, Result};
use crate::types::device::Gid;

/// Bytes of `ibv_rc_pingpong`'s message, NUL included.
pub const MSG_LEN: usize = 52;
/// Bytes of the zverbs extension record.
pub const EXT_LEN: usize = 96;
/// `ibv_rc_pingpong`'s closing message, NUL included.
pub const DONE: &[u8; 5] = b"done\0";
/// `ibv_rc_pingpong`'s default TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// How long [`client`] and [`server`] may take on a stream that has no read timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const EXT_MAGIC: &str = "zverbs1:";

/// Which messages to exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Exactly `ibv_rc_pingpong`'s.
    RcPingpong,
    /// `ibv_rc_pingpong`'s plus the zverbs extension record.
    Zverbs,
}

/// What one side tells the other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The QP's address.
    pub endpoint: Endpoint,
    /// A buffer the peer may target ([`Wire::Zverbs`] only).
    pub region: Option<RemoteRegion>,
    /// An application tag, up to 40 printable ASCII characters without `:` at the start
    /// ([`Wire::Zverbs`] only).
    pub app: String,
}

/// Encodes `ibv_rc_pingpong`'s message.
pub fn encode(ep: &Endpoint) -> [u8; MSG_LEN] {
    let mut gid = String::with_capacity(32);
    for b in ep.gid.0 {
        gid.push_str(&format!("{b:02x}"));
    }
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        ep.lid,
        ep.qpn & 0xff_ffff,
        ep.psn & 0xff_ffff,
        gid
    );
    let mut out = [0u8; MSG_LEN];
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

fn garbled(what: &str, bytes: &[u8]) -> Error {
    let shown: String = bytes
        .iter()
        .take(64)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    Error::Protocol {
        detail: format!("expected {what}, got {:?}", shown.trim_end_matches('.')),
    }
}

fn hex_field(s: &str, digits: usize) -> Option<u32> {
    if s.len() != digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// Decodes `ibv_rc_pingpong`'s message.
///
/// # Errors
///
/// [`Error::Protocol`] when the bytes are not such a message.
pub fn decode(msg: &[u8; MSG_LEN]) -> Result<Endpoint> {
    let bad = || {
        garbled(
            "an ibv_rc_pingpong address \"LLLL:QQQQQQ:PPPPPP:<32 hex>\"",
            msg,
        )
    };
    let end = msg.iter().position(|&b| b == 0).ok_or_else(bad)?;
    if msg[end..].iter().any(|&b| b != 0) {
        return Err(bad());
    }
    let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad())?;
    let f: Vec<&str> = text.split(':').collect();
    let [lid, qpn, psn, gid] = f[..] else {
        return Err(bad());
    };
    let lid = hex_field(lid, 4).ok_or_else(bad)? as u16;
    let qpn = hex_field(qpn, 6).ok_or_else(bad)?;
    let psn = hex_field(psn, 6).ok_or_else(bad)?;
    if gid.len() != 32 {
        return Err(bad());
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(gid.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(Endpoint {
        lid,
        qpn,
        psn,
        gid: Gid(g),
    })
}

/// Encodes the extension record.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an application tag that does not fit or is not printable.
pub fn encode_ext(region: Option<RemoteRegion>, app: &str) -> Result<[u8; EXT_LEN]> {
    if app.len() > 40 || !app.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::InvalidArgument(format!(
            "application tag {app:?}: at most 40 printable ASCII characters"
        )));
    }
    let r = region.unwrap_or_default();
    let text = format!(
        "{EXT_MAGIC}{:016x}:{:08x}:{:016x}:{app}",
        r.addr, r.rkey, r.len
    );
    let mut out = [0u8; EXT_LEN];
    out[..text.len()].copy_from_slice(text.as_bytes());
    Ok(out)
}

/// Decodes the extension record into `(region, app)`; a region of length 0 is `None`.
///
/// # Errors
///
/// [`Error::Protocol`] when the bytes are not such a record.
pub fn decode_ext(msg: &[u8; EXT_LEN]) -> Result<(Option<RemoteRegion>, String)> {
    let bad = || garbled("a zverbs extension record \"zverbs1:…\"", msg);
    let end = msg.iter().position(|&b| b == 0).ok_or_else(bad)?;
    let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad())?;
    let rest = text.strip_prefix(EXT_MAGIC).ok_or_else(bad)?;
    let mut f = rest.splitn(4, ':');
    let (Some(addr), Some(rkey), Some(len), Some(app)) = (f.next(), f.next(), f.next(), f.next())
    else {
        return Err(bad());
    };
    let h64 = |s: &str| {
        (s.len() == 16)
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    let addr = h64(addr).ok_or_else(bad)?;
    let len = h64(len).ok_or_else(bad)?;
    let rkey = hex_field(rkey, 8).ok_or_else(bad)?;
    let region = (len != 0).then_some(RemoteRegion { addr, rkey, len });
    Ok((region, app.to_string()))
}

/// Connects to the exchange server at `addr` (`host:port`), trying each address it resolves to.
///
/// # Errors
///
/// [`Error::PeerUnreachable`] naming the address when no connection can be made within
/// `timeout`.
pub fn connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let unreachable = |source| Error::PeerUnreachable {
        peer: addr.to_string(),
        source,
    };
    let addrs = addr.to_socket_addrs().map_err(unreachable)?;
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_read_timeout(Some(timeout)).map_err(unreachable)?;
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(unreachable(last))
}

/// Listens for the exchange on `port` of every interface (port 0: any free port).
///
/// # Errors
///
/// [`Error::Exchange`] when the port cannot be bound.
pub fn listen(port: u16) -> Result<TcpListener> {
    listen_on(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
}

/// Listens for the exchange on `port` of the interface of address `ip` only: `127.0.0.1`
/// for a peer of this machine (port 0: any free port).
///
/// # Errors
///
/// [`Error::Exchange`] when the port cannot be bound.
pub fn listen_on(ip: IpAddr, port: u16) -> Result<TcpListener> {
    TcpListener::bind((ip, port)).map_err(|source| Error::Exchange {
        during: "binding the exchange port",
        source,
    })
}

/// Accepts one peer, whose exchange ([`server`]) must then end within `timeout`.
///
/// # Errors
///
/// [`Error::Exchange`].
pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<TcpStream> {
    let io = |source| Error::Exchange {
        during: "accepting the peer",
        source,
    };
    let (s, _) = listener.accept().map_err(io)?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_nodelay(true).ok();
    Ok(s)
}

/// When an exchange on `s` must be over: its read timeout from now ([`DEFAULT_TIMEOUT`] when
/// it has none).
fn deadline_of(s: &TcpStream) -> Instant {
    let budget = s.read_timeout().ok().flatten().unwrap_or(DEFAULT_TIMEOUT);
    Instant::now() + budget
}

/// Runs `f` with the deadline of one exchange on `s`, then gives `s` back the read and write
/// timeouts it had.
fn within<T>(s: &mut TcpStream, f: impl FnOnce(&mut TcpStream, Instant) -> Result<T>) -> Result<T> {
    let (read, write) = (
        s.read_timeout().ok().flatten(),
        s.write_timeout().ok().flatten(),
    );
    let deadline = deadline_of(s);
    let r = f(s, deadline);
    let _ = s.set_read_timeout(read);
    let _ = s.set_write_timeout(write);
    r
}

/// The time left before `deadline`, or the error of an exchange that took too long (`done`
/// of `want` bytes of what it was doing when it ran out).
fn time_left(
    deadline: Instant,
    during: &'static str,
    done: usize,
    want: usize,
) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Error::Exchange {
            during,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the peer did not finish the exchange in time ({done} of {want} bytes \
                     done): it is slow, stuck, or not this program"
                ),
            ),
        });
    }
    Ok(left)
}

/// Reads exactly `buf.len()` bytes from `s` by `deadline`, however the peer spaces them.
///
/// # Errors
///
/// [`Error::Protocol`] when the peer closes the connection first, [`Error::Exchange`] when
/// the deadline passes or the socket fails (`during` says what was being read).
pub fn read_by(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    during: &'static str,
) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = time_left(deadline, during, got, buf.len())?;
        s.set_read_timeout(Some(left))
            .map_err(|source| Error::Exchange { during, source })?;
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(Error::Protocol {
                    detail: format!(
                        "the peer closed the connection while {during} ({got} of {} bytes had \
                         come)",
                        buf.len()
                    ),
                });
            }
            Ok(n) => got += n,
            Err(e) => match e.kind() {
                // The time is checked again above.
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => {}
                _ => return Err(Error::Exchange { during, source: e }),
            },
        }
    }
    Ok(())
}

/// Writes all of `buf` to `s` by `deadline`.
///
/// # Errors
///
/// [`Error::Exchange`] when the deadline passes or the socket fails.
pub fn write_by(
    s: &mut TcpStream,
    buf: &[u8],
    deadline: Instant,
    during: &'static str,
) -> Result<()> {
    let mut put = 0;
    while put < buf.len() {
        let left = time_left(deadline, during, put, buf.len())?;
        s.set_write_timeout(Some(left))
            .map_err(|source| Error::Exchange { during, source })?;
        match s.write(&buf[put..]) {
            Ok(0) => {
                return Err(Error::Exchange {
                    during,
                    source: std::io::ErrorKind::WriteZero.into(),
                });
            }
            Ok(n) => put += n,
            Err(e) => match e.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => {}
                _ => return Err(Error::Exchange { during, source: e }),
            },
        }
    }
    Ok(())
}

fn send_hello(s: &mut TcpStream, h: &Hello, wire: Wire, deadline: Instant) -> Result<()> {
    let mut out = encode(&h.endpoint).to_vec();
    if wire == Wire::Zverbs {
        out.extend_from_slice(&encode_ext(h.region, &h.app)?);
    }
    write_by(s, &out, deadline, "sending this side's address")
}

fn recv_hello(s: &mut TcpStream, wire: Wire, deadline: Instant) -> Result<Hello> {
    let mut msg = [0u8; MSG_LEN];
    read_by(s, &mut msg, deadline, "reading the peer's address")?;
    let endpoint = decode(&msg)?;
    let (region, app) = match wire {
        Wire::RcPingpong => (None, String::new()),
        Wire::Zverbs => {
            let mut ext = [0u8; EXT_LEN];
            read_by(
                s,
                &mut ext,
                deadline,
                "reading the zverbs extension (is the peer ibv_rc_pingpong?)",
            )?;
            decode_ext(&ext)?
        }
    };
    Ok(Hello {
        endpoint,
        region,
        app,
    })
}

/// Whether `a` and `b` name the same QP: the same QP number at the same port (LID and GID).
/// Two sides of a connection never do; a peer that sends this side's own address back does.
pub fn same_qp(a: &Endpoint, b: &Endpoint) -> bool {
    a.lid == b.lid && a.qpn & 0xff_ffff == b.qpn & 0xff_ffff && a.gid == b.gid
}

/// Refuses a peer whose address is this side's own.
///
/// # Errors
///
/// [`Error::Protocol`] naming the address.
pub fn refuse_own(local: &Endpoint, remote: &Endpoint) -> Result<()> {
    if same_qp(local, remote) {
        return Err(Error::Protocol {
            detail: format!(
                "the peer's address is this side's own (LID {:#06x}, QPN {:#08x}): it sent \
                 this side's message back instead of its own",
                remote.lid, remote.qpn
            ),
        });
    }
    Ok(())
}

/// The client's side: send this side's address, read the peer's, send `done`, all within the
/// stream's read timeout (the one [`connect`] set).
///
/// # Errors
///
/// [`Error::Protocol`] for a garbled or missing answer, or one that is this side's own
/// address; [`Error::Exchange`] for socket errors and a peer that does not finish in time.
pub fn client(s: &mut TcpStream, local: &Hello, wire: Wire) -> Result<Hello> {
    within(s, |s, deadline| {
        send_hello(s, local, wire, deadline)?;
        let remote = recv_hello(s, wire, deadline)?;
        refuse_own(&local.endpoint, &remote.endpoint)?;
        write_by(s, DONE, deadline, "sending done")?;
        Ok(remote)
    })
}

/// The server's side: read the client's address, run `on_remote` (connect the QP, as
/// `ibv_rc_pingpong` does before answering), send this side's address, read `done`; all
/// within the stream's read timeout (the one [`accept`] set), `on_remote`'s time included.
///
/// # Errors
///
/// As [`client`], and whatever `on_remote` returns.
pub fn server(
    s: &mut TcpStream,
    local: &Hello,
    wire: Wire,
    on_remote: impl FnOnce(&Hello) -> Result<()>,
) -> Result<Hello> {
    within(s, |s, deadline| {
        let remote = recv_hello(s, wire, deadline)?;
        refuse_own(&local.endpoint, &remote.endpoint)?;
        on_remote(&remote)?;
        send_hello(s, local, wire, deadline)?;
        let mut done = [0u8; 5];
        read_by(s, &mut done, deadline, "reading done")?;
        if &done != DONE {
            return Err(garbled("\"done\"", &done));
        }
        Ok(remote)
    })
}

/// A barrier over the exchange connection: each side sends one byte and waits for the
/// other's (used to end a test together), within the stream's read timeout.
///
/// # Errors
///
/// [`Error::Protocol`] or [`Error::Exchange`] when the peer is gone or does not answer in
/// time.
pub fn barrier(s: &mut TcpStream, token: u8) -> Result<u8> {
    within(s, |s, deadline| {
        write_by(s, &[token], deadline, "synchronising")?;
        let mut b = [0u8; 1];
        read_by(s, &mut b, deadline, "synchronising")?;
        Ok(b[0])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoint {
        let mut gid = [0u8; 16];
        gid[..8].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
        gid[8..].copy_from_slice(&[0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]);
        Endpoint {
            lid: 0x1b,
            qpn: 0x00_0a_1b,
            psn: 0x12_34_56,
            gid: Gid(gid),
        }
    }

    #[test]
    fn message_is_rc_pingpongs_text() {
        // printf("%04x:%06x:%06x:%s", lid, qpn, psn, gid) with gid_to_wire_gid's 32 digits.
        let m = encode(&ep());
        let literal = b"001b:000a1b:123456:fe800000000000000211" as &[u8];
        assert_eq!(&m[..literal.len()], literal);
        assert_eq!(
            &m[..51],
            b"001b:000a1b:123456:fe80000000000000021122fffe334455"
        );
        assert_eq!(m[51], 0);
        assert_eq!(
            m.len(),
            b"0000:000000:000000:00000000000000000000000000000000\0".len()
        );
        assert_eq!(decode(&m).unwrap(), ep());
    }

    #[test]
    fn zero_gid_for_infiniband() {
        let e = Endpoint {
            lid: 0xffff,
            qpn: 0xff_ffff,
            psn: 0,
            gid: Gid::default(),
        };
        let m = encode(&e);
        assert_eq!(
            &m[..51],
            b"ffff:ffffff:000000:00000000000000000000000000000000"
        );
        assert_eq!(decode(&m).unwrap(), e);
    }

    #[test]
    fn garbled_messages_are_protocol_errors() {
        let mut m = encode(&ep());
        m[4] = b'-';
        let e = decode(&m).unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(e.to_string().contains("001b-000a1b"), "{e}");
        let mut http = [0u8; MSG_LEN];
        http[..16].copy_from_slice(b"GET / HTTP/1.1\r\n");
        assert!(matches!(decode(&http), Err(Error::Protocol { .. })));
        let mut no_nul = [b'0'; MSG_LEN];
        no_nul[4] = b':';
        assert!(decode(&no_nul).is_err());
        let mut short_gid = encode(&ep());
        short_gid[50] = 0;
        assert!(decode(&short_gid).is_err());
    }

    #[test]
    fn extension_round_trip() {
        let r = RemoteRegion {
            addr: 0x7f00_dead_b000,
            rkey: 0x1234_5678,
            len: 4096,
        };
        let x = encode_ext(Some(r), "write_lat:64").unwrap();
        assert!(
            x.starts_with(b"zverbs1:00007f00deadb000:12345678:0000000000001000:write_lat:64\0")
        );
        assert_eq!(
            decode_ext(&x).unwrap(),
            (Some(r), "write_lat:64".to_string())
        );
        assert_eq!(
            decode_ext(&encode_ext(None, "").unwrap()).unwrap(),
            (None, String::new())
        );
        let mut bad = x;
        bad[0] = b'Z';
        assert!(matches!(decode_ext(&bad), Err(Error::Protocol { .. })));
        assert!(encode_ext(None, "has space").is_err());
    }

    fn local_pair() -> (TcpStream, TcpStream) {
        let l = listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = connect(&format!("127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
        let s = accept(&l, Duration::from_secs(5)).unwrap();
        (c, s)
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn exchange_with_a_local_peer() {
        for wire in [Wire::RcPingpong, Wire::Zverbs] {
            let (mut c, mut s) = local_pair();
            let server_hello = Hello {
                endpoint: Endpoint {
                    lid: 2,
                    qpn: 0x99,
                    psn: 0x77,
                    gid: Gid::default(),
                },
                region: (wire == Wire::Zverbs).then_some(RemoteRegion {
                    addr: 0x1000,
                    rkey: 5,
                    len: 64,
                }),
                app: if wire == Wire::Zverbs {
                    "t".into()
                } else {
                    String::new()
                },
            };
            let sh = server_hello.clone();
            let t = std::thread::spawn(move || {
                let mut seen = None;
                let got = server(&mut s, &sh, wire, |h| {
                    seen = Some(h.endpoint);
                    Ok(())
                })
                .unwrap();
                assert_eq!(seen, Some(got.endpoint));
                got
            });
            let client_hello = Hello {
                endpoint: ep(),
                region: None,
                app: String::new(),
            };
            let got = client(&mut c, &client_hello, wire).unwrap();
            assert_eq!(got, server_hello);
            assert_eq!(t.join().unwrap().endpoint, ep());
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn exchange_bytes_on_the_wire_are_rc_pingpongs() {
        // A peer written from rc_pingpong's wire format alone: read 52, answer 52, read "done".
        let (mut c, mut s) = local_pair();
        let t = std::thread::spawn(move || {
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            s.write_all(b"0001:000002:000003:00000000000000000000000000000000\0")
                .unwrap();
            let mut d = [0u8; 5];
            s.read_exact(&mut d).unwrap();
            (m, d)
        });
        let hello = Hello {
            endpoint: ep(),
            ..Hello::default()
        };
        let got = client(&mut c, &hello, Wire::RcPingpong).unwrap();
        assert_eq!(
            (got.endpoint.lid, got.endpoint.qpn, got.endpoint.psn),
            (1, 2, 3)
        );
        let (m, d) = t.join().unwrap();
        assert_eq!(&m[..], &encode(&ep())[..]);
        assert_eq!(&d, b"done\0");
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn peer_speaking_another_protocol() {
        let (mut c, mut s) = local_pair();
        let t = std::thread::spawn(move || {
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            let mut reply = [0u8; MSG_LEN];
            reply[..27].copy_from_slice(b"SSH-2.0-OpenSSH_9.2p1 Debi\n");
            s.write_all(&reply).unwrap();
        });
        let e = client(&mut c, &Hello::default(), Wire::RcPingpong).unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(e.to_string().contains("SSH-2.0"), "{e}");
        t.join().unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn rc_pingpong_peer_meeting_the_extension_is_detected() {
        let (mut c, mut s) = local_pair();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // The client is plain rc_pingpong: 52 bytes, then it waits for the answer.
        c.write_all(&encode(&ep())).unwrap();
        let e = server(&mut s, &Hello::default(), Wire::Zverbs, |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("ibv_rc_pingpong"), "{e}");
    }

    /// Writes `bytes` to `s` one at a time, `gap` apart, until done or the reader is gone.
    fn dribble(s: &mut TcpStream, bytes: &[u8], gap: Duration) {
        for b in bytes {
            std::thread::sleep(gap);
            if s.write_all(&[*b]).is_err() {
                return;
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn a_peer_that_dribbles_its_bytes_cannot_stretch_the_exchange() {
        // Each byte comes well within the timeout, the whole answer well after it: the
        // exchange ends at its deadline.
        let timeout = Duration::from_secs(1);
        let gap = Duration::from_millis(60);
        let answer = encode(&Endpoint { qpn: 7, ..ep() });
        assert!(gap * answer.len() as u32 > 2 * timeout);
        // A slow server.
        let l = listen_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            dribble(&mut s, &answer, gap);
        });
        let mut c = connect(&format!("127.0.0.1:{port}"), timeout).unwrap();
        let hello = Hello {
            endpoint: ep(),
            ..Hello::default()
        };
        let e = client(&mut c, &hello, Wire::RcPingpong).unwrap_err();
        assert!(
            e.to_string()
                .contains("did not finish the exchange in time"),
            "{e}"
        );
        assert_eq!(
            c.read_timeout().unwrap(),
            Some(timeout),
            "the stream's own timeout"
        );
        drop(c);
        t.join().unwrap();
        // A slow client.
        let l = listen_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            dribble(&mut s, &encode(&ep()), gap);
        });
        let mut s = accept(&l, timeout).unwrap();
        let mut called = false;
        let e = server(&mut s, &Hello::default(), Wire::RcPingpong, |_| {
            called = true;
            Ok(())
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("did not finish the exchange in time"),
            "{e}"
        );
        assert!(!called);
        drop(s);
        t.join().unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn a_peer_that_sends_this_sides_address_back_is_refused() {
        // An echo: the client would connect its QP to itself and measure itself.
        let (mut c, mut s) = local_pair();
        let t = std::thread::spawn(move || {
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            s.write_all(&m).unwrap();
        });
        let hello = Hello {
            endpoint: ep(),
            ..Hello::default()
        };
        let e = client(&mut c, &hello, Wire::RcPingpong).unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(e.to_string().contains("this side's own"), "{e}");
        t.join().unwrap();
        // The server refuses before it connects anything.
        let (mut c, mut s) = local_pair();
        c.write_all(&encode(&ep())).unwrap();
        let e = server(&mut s, &hello, Wire::RcPingpong, |_| {
            panic!("connected to its own address")
        })
        .unwrap_err();
        assert!(e.to_string().contains("this side's own"), "{e}");
        // Another QP of the same port, or the same QP number elsewhere, is a peer.
        let mut other = ep();
        other.qpn += 1;
        assert!(!same_qp(&ep(), &other));
        let mut elsewhere = ep();
        elsewhere.lid += 1;
        assert!(!same_qp(&ep(), &elsewhere));
        let mut psn = ep();
        psn.psn ^= 1;
        assert!(
            same_qp(&ep(), &psn),
            "an echo with another PSN is still an echo"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri makes no system calls")]
    fn unreachable_peer_names_the_address() {
        // Bind then drop to find a port nobody listens on.
        let port = listen(0).unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let e = connect(&addr, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(e, Error::PeerUnreachable { .. }), "{e}");
        assert!(e.to_string().contains(&addr), "{e}");
        assert!(e.to_string().contains("is the server running"), "{e}");
    }
}
