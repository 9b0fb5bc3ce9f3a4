//! What the device tests share: the devices the environment names, two connected RC queue
//! pairs on them, and waiting for completions with a time limit.
//!
//! The devices come from the `ZVERBS_TEST_*` variables (docs/testing.md): the rxe VM of
//! `cargo xtask test` sets them, and so does a user on a machine with real rxe or a ConnectX.
//! Without `ZVERBS_TEST_DEVICE` every device test returns at once, so that `cargo test`
//! passes on machines without RDMA; a test that needs the pair returns at once without
//! `ZVERBS_TEST_PAIR`.
//!
//! Each test binary uses part of this module only.
#![allow(dead_code)]

pub mod netlink;
pub mod ud;

use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zverbs::backend::QueueSet;
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, BackendKind, Completion, ConnectAttr, Context, ContextOptions, Cq, LocalAddress,
    MrBuf, Pd, PollCq, Poller, Qp, RecvQueue, SendQueue,
};

/// How long a test waits for any one completion before it fails. rxe under emulation takes
/// tens of microseconds a round trip; seconds mean a lost completion.
pub const COMPLETION_LIMIT: Duration = Duration::from_secs(20);

/// The devices the environment names.
#[derive(Clone, Debug)]
pub struct Env {
    /// One device, for tests with both ends on it.
    pub device: String,
    /// Its interface's IPv4 address (rdma_cm), if given.
    pub addr: Option<Ipv4Addr>,
    /// Two linked devices, if given.
    pub pair: Option<(String, String)>,
    /// Their IPv4 addresses, if given.
    pub pair_addrs: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The GID index to address ports with.
    pub gid_index: u32,
}

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn two(k: &str) -> Option<(String, String)> {
    let v = var(k)?;
    let (a, b) = v
        .split_once(',')
        .unwrap_or_else(|| panic!("{k}={v:?}: expected two names separated by a comma"));
    Some((a.to_string(), b.to_string()))
}

fn ip(k: &str, s: &str) -> Ipv4Addr {
    s.parse()
        .unwrap_or_else(|_| panic!("{k}: {s:?} is not an IPv4 address"))
}

/// The devices to test on, or `None` (after saying so) when `ZVERBS_TEST_DEVICE` is unset.
pub fn env() -> Option<Env> {
    let Some(device) = var("ZVERBS_TEST_DEVICE") else {
        println!("skipped: ZVERBS_TEST_DEVICE is not set (docs/testing.md)");
        return None;
    };
    let gid_index = var("ZVERBS_TEST_GID_INDEX").map_or(1, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("ZVERBS_TEST_GID_INDEX={v:?}: not a number"))
    });
    Some(Env {
        device,
        addr: var("ZVERBS_TEST_ADDR").map(|a| ip("ZVERBS_TEST_ADDR", &a)),
        pair: two("ZVERBS_TEST_PAIR"),
        pair_addrs: two("ZVERBS_TEST_PAIR_ADDRS").map(|(a, b)| {
            (
                ip("ZVERBS_TEST_PAIR_ADDRS", &a),
                ip("ZVERBS_TEST_PAIR_ADDRS", &b),
            )
        }),
        gid_index,
    })
}

/// Whether `device` is the software mlx5 device (`zverbs_sim0`): a device of this process,
/// not of the kernel, driven by the direct path only. The operation tests run on it too
/// (`ZVERBS_TEST_DEVICE=zverbs_sim0 ZVERBS_TEST_GID_INDEX=0`); tests of what only a kernel
/// device has (its own error checks, RNR retry counts, the kernel's objects, the fallback)
/// say why they skip it.
pub fn is_software(device: &str, skipping: &str) -> bool {
    let soft = zverbs::devices()
        .map(|l| l.iter().any(|d| d.name() == device && d.is_software()))
        .unwrap_or(false);
    if soft {
        println!("skipped on the software device: {skipping}");
    }
    soft
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the devices for one test at a time within a test binary (the rxe stage runs each
/// test as its own process anyway; this keeps a plain `cargo test` on a host's devices from
/// running them side by side).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the two queue pairs of a test live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Both on `ZVERBS_TEST_DEVICE`.
    OneDevice,
    /// One on each device of `ZVERBS_TEST_PAIR` (across the link between them).
    Pair,
}

impl Env {
    /// The devices of the two ends, or `None` (after saying so) when the environment names no
    /// pair.
    pub fn devices(&self, link: Link) -> Option<(String, String)> {
        match link {
            Link::OneDevice => Some((self.device.clone(), self.device.clone())),
            Link::Pair => {
                if self.pair.is_none() {
                    println!("skipped: ZVERBS_TEST_PAIR is not set");
                }
                self.pair.clone()
            }
        }
    }

    /// The IPv4 addresses of the two ends, when known.
    pub fn addrs(&self, link: Link) -> Option<(Ipv4Addr, Ipv4Addr)> {
        match link {
            Link::OneDevice => self.addr.map(|a| (a, a)),
            Link::Pair => self.pair_addrs,
        }
    }
}

/// Opens a device by name, with the backend chosen automatically.
pub fn open(name: &str) -> Context {
    zverbs::open_device(Some(name), &ContextOptions::default())
        .unwrap_or_else(|e| panic!("open {name}: {e}"))
}

/// The port and address a device's queue pairs use.
pub fn address(ctx: &Context, gid_index: u32) -> LocalAddress {
    let port = ctx.active_port().expect("an active port");
    ctx.address(port, Some(gid_index))
        .unwrap_or_else(|e| panic!("{}: GID index {gid_index}: {e}", ctx.name()))
}

/// What one end of a test needs.
pub struct Side {
    /// The device.
    pub ctx: Context,
    /// Its port and GID.
    pub local: LocalAddress,
    /// A protection domain.
    pub pd: Pd,
    /// A 64 KiB buffer with every access right.
    pub buf: MrBuf,
    /// The CQ of both queues.
    pub cq: Cq,
    /// The queue pair.
    pub qp: Qp,
}

/// Bytes of each side's buffer.
pub const BUF_LEN: usize = 64 << 10;

/// Capabilities of the test QPs.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Send queue depth.
    pub send: u32,
    /// Receive queue depth.
    pub recv: u32,
    /// Scatter entries per request, both queues.
    pub sge: u32,
    /// Inline bytes.
    pub inline: u32,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            send: 32,
            recv: 32,
            sge: 2,
            inline: 64,
        }
    }
}

impl Side {
    /// A side on `ctx`: PD, buffer, CQ and an RC QP in RESET.
    pub fn new(ctx: &Context, gid_index: u32, caps: Caps) -> Self {
        let local = address(ctx, gid_index);
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).expect("a buffer");
        let cq = ctx
            .cq_builder()
            .cqe(caps.send + caps.recv + 8)
            .build()
            .expect("ibv_create_cq");
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(caps.send)
            .max_recv_wr(caps.recv)
            .max_send_sge(caps.sge)
            .max_recv_sge(caps.sge)
            .max_inline_data(caps.inline)
            .build()
            .expect("ibv_create_qp");
        check_backend(ctx, &qp);
        Self {
            ctx: ctx.clone(),
            local,
            pd,
            buf,
            cq,
            qp,
        }
    }

    /// What the peer needs to reach this side.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            lid: self.local.lid,
            qpn: self.qp.qpn(),
            psn: self.qp.psn(),
            gid: self.local.gid,
        }
    }

    /// The attributes to connect this side to `peer`, at the port's MTU.
    pub fn attr(&self, peer: &Endpoint) -> ConnectAttr {
        ConnectAttr::new(self.local.port, self.qp.psn(), peer, self.local.gid_index)
            .mtu(self.local.active_mtu.min(zverbs::Mtu::M1024))
            .rd_atomic(4)
    }

    /// The QP's queues and its CQ's poller (both backends, through the `Any*` handles).
    pub fn queues(&self) -> QueueSet<SendQueue, RecvQueue, Poller> {
        QueueSet {
            sq: self.qp.send_queue().expect("the send queue"),
            rq: self.qp.recv_queue().expect("the receive queue"),
            cq: self.cq.poller().expect("the poller"),
        }
    }
}

/// On a device the direct backend cannot drive (rxe and every other non-mlx5 device) the
/// queue pairs must be the fallback's: that is what these tests prove there.
pub fn check_backend(ctx: &Context, qp: &Qp) {
    let kind = qp.backend().kind;
    if ctx.direct_support().is_err() {
        assert_eq!(kind, BackendKind::Verbs, "{}", qp.backend());
    }
}

/// Two sides on `link`'s devices, connected to each other (`tweak` adjusts each side's
/// attributes before connecting: `tweak(a_attr, b_attr)`), or `None` when the environment
/// lacks what the link needs.
pub fn connected(
    link: Link,
    caps: Caps,
    tweak: impl FnOnce(&mut ConnectAttr, &mut ConnectAttr),
) -> Option<(Side, Side)> {
    let env = env()?;
    let (da, db) = env.devices(link)?;
    let ca = open(&da);
    let cb = if db == da { ca.clone() } else { open(&db) };
    let a = Side::new(&ca, env.gid_index, caps);
    let b = Side::new(&cb, env.gid_index, caps);
    let (mut aa, mut ab) = (a.attr(&b.endpoint()), b.attr(&a.endpoint()));
    tweak(&mut aa, &mut ab);
    a.qp.connect_with(&aa).expect("connect A (INIT, RTR, RTS)");
    b.qp.connect_with(&ab).expect("connect B (INIT, RTR, RTS)");
    println!(
        "A: {} QPN {:#x} GID {}; B: {} QPN {:#x} GID {}; backend {}",
        a.ctx.name(),
        a.qp.qpn(),
        a.local.gid,
        b.ctx.name(),
        b.qp.qpn(),
        b.local.gid,
        a.qp.backend()
    );
    Some((a, b))
}

/// Polls until `n` completions arrived, failing the test after [`COMPLETION_LIMIT`] without
/// one; then checks for a short while that no more arrive.
pub fn wait<C: PollCq>(cq: &mut C, n: usize) -> Vec<Completion> {
    let out = wait_some(cq, n);
    let t = Instant::now();
    let mut wc = [Completion::EMPTY; 4];
    while t.elapsed() < Duration::from_millis(20) {
        let k = cq.poll(&mut wc);
        assert_eq!(k, 0, "more completions than expected: {:?}", &wc[..k]);
    }
    out
}

/// Polls until `n` completions arrived, failing the test after [`COMPLETION_LIMIT`] without
/// one.
pub fn wait_some<C: PollCq>(cq: &mut C, n: usize) -> Vec<Completion> {
    let mut out = Vec::with_capacity(n);
    let mut wc = [Completion::EMPTY; 16];
    let mut last = Instant::now();
    while out.len() < n {
        let room = (n - out.len()).min(wc.len());
        let k = cq.poll(&mut wc[..room]);
        if k > 0 {
            out.extend_from_slice(&wc[..k]);
            last = Instant::now();
        } else {
            assert!(
                last.elapsed() < COMPLETION_LIMIT,
                "{} of {n} completions after {COMPLETION_LIMIT:?} without a new one: {out:?}",
                out.len()
            );
        }
    }
    out
}

/// A byte pattern that differs for every offset and seed (so a misplaced or stale byte shows).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(seed) * 7) as u8
                ^ 0x5a
        })
        .collect()
}

/// The bytes of `buf` at `offset..offset + len`.
pub fn bytes(buf: &MrBuf, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    buf.read(offset, &mut v).unwrap();
    v
}

/// Generates, for each listed body `fn NAME(link: Link)`, a module `NAME` with two tests:
/// `one_device` (both QPs on `ZVERBS_TEST_DEVICE`) and `across_the_pair` (one on each device
/// of `ZVERBS_TEST_PAIR`).
#[macro_export]
macro_rules! on_both_links {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn one_device() {
                let _serial = $crate::device::serial();
                super::$name($crate::device::Link::OneDevice);
            }
            #[test]
            fn across_the_pair() {
                let _serial = $crate::device::serial();
                super::$name($crate::device::Link::Pair);
            }
        }
    )*};
}
