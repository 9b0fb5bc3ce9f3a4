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

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::{Endpoint, RemoteRegion};
use crate::device::Gid;
use crate::error::{Error, Result};

/// Bytes of `ibv_rc_pingpong`'s message, NUL included.
pub const MSG_LEN: usize = 52;
/// Bytes of the zverbs extension record.
pub const EXT_LEN: usize = 96;
/// `ibv_rc_pingpong`'s closing message, NUL included.
pub const DONE: &[u8; 5] = b"done\0";
/// `ibv_rc_pingpong`'s default TCP port.
pub const DEFAULT_PORT: u16 = 18515;
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
    TcpListener::bind(("0.0.0.0", port)).map_err(|source| Error::Exchange {
        during: "binding the exchange port",
        source,
    })
}

/// Accepts one peer, reading with `timeout` afterwards.
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

fn read_exact(s: &mut TcpStream, buf: &mut [u8], during: &'static str) -> Result<()> {
    s.read_exact(buf).map_err(|source| match source.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::Protocol {
            detail: format!("the peer closed the connection while {during}"),
        },
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Protocol {
            detail: format!("the peer went silent while {during}"),
        },
        _ => Error::Exchange { during, source },
    })
}

fn write_all(s: &mut TcpStream, buf: &[u8], during: &'static str) -> Result<()> {
    s.write_all(buf)
        .map_err(|source| Error::Exchange { during, source })
}

fn send_hello(s: &mut TcpStream, h: &Hello, wire: Wire) -> Result<()> {
    let mut out = encode(&h.endpoint).to_vec();
    if wire == Wire::Zverbs {
        out.extend_from_slice(&encode_ext(h.region, &h.app)?);
    }
    write_all(s, &out, "sending this side's address")
}

fn recv_hello(s: &mut TcpStream, wire: Wire) -> Result<Hello> {
    let mut msg = [0u8; MSG_LEN];
    read_exact(s, &mut msg, "reading the peer's address")?;
    let endpoint = decode(&msg)?;
    let (region, app) = match wire {
        Wire::RcPingpong => (None, String::new()),
        Wire::Zverbs => {
            let mut ext = [0u8; EXT_LEN];
            read_exact(
                s,
                &mut ext,
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

/// The client's side: send this side's address, read the peer's, send `done`.
///
/// # Errors
///
/// [`Error::Protocol`] for a garbled or missing answer; [`Error::Exchange`] for socket errors.
pub fn client(s: &mut TcpStream, local: &Hello, wire: Wire) -> Result<Hello> {
    send_hello(s, local, wire)?;
    let remote = recv_hello(s, wire)?;
    write_all(s, DONE, "sending done")?;
    Ok(remote)
}

/// The server's side: read the client's address, run `on_remote` (connect the QP, as
/// `ibv_rc_pingpong` does before answering), send this side's address, read `done`.
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
    let remote = recv_hello(s, wire)?;
    on_remote(&remote)?;
    send_hello(s, local, wire)?;
    let mut done = [0u8; 5];
    read_exact(s, &mut done, "reading done")?;
    if &done != DONE {
        return Err(garbled("\"done\"", &done));
    }
    Ok(remote)
}

/// A barrier over the exchange connection: each side sends one byte and waits for the
/// other's (used to end a test together).
///
/// # Errors
///
/// [`Error::Protocol`] or [`Error::Exchange`] when the peer is gone.
pub fn barrier(s: &mut TcpStream, token: u8) -> Result<u8> {
    write_all(s, &[token], "synchronising")?;
    let mut b = [0u8; 1];
    read_exact(s, &mut b, "synchronising")?;
    Ok(b[0])
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
