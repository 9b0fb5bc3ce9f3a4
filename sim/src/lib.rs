//! # zverbs-sim
//!
//! A software mlx5 device: the direct data path, running without a NIC.
//!
//! The device owns memory laid out exactly as libmlx5 lays out a real QP and CQ — a send ring
//! of 64-byte basic blocks, a receive ring of `16 × max_recv_sge` strides, a two-word doorbell
//! record, a BlueFlame register of two buffers (or a bare 8-byte doorbell), a CQE ring of
//! 64-byte CQEs initialised invalid and a CQ doorbell record — and hands out the same
//! [`QpLayout`] and [`CqLayout`] that `mlx5dv_init_obj`
//! reports on hardware. So the [`SendQueue`](zverbs_mlx5dv::SendQueue),
//! [`RecvQueue`](zverbs_mlx5dv::RecvQueue) and [`CompletionQueue`](zverbs_mlx5dv::CompletionQueue) driven here
//! are exactly the ones used on a ConnectX.
//!
//! Like the NIC, the device watches the doorbell records (it never reads a send WQE beyond the
//! producer counter the record publishes, and loads the record with `Acquire`), executes the
//! WQEs with RC semantics between connected QPs (a QP serves only the peer its own connection
//! names, see [`Device::connect_to`]), and writes CQEs with correct owner bits. It
//! checks every key, bound and access right against its registered memory regions and answers
//! violations with the error CQEs mlx5 writes; an error moves the QP to the error state, where
//! every outstanding and later work request completes with "WR flushed". Ring contents are
//! untrusted input: no bytes in a ring make it touch memory outside registered regions and its
//! own rings, or panic.
//!
//! ## Quick start
//!
//! A QP connected to itself on a stepped device, driven by `zverbs-mlx5dv`'s own queues: an
//! RDMA WRITE from one half of a registered buffer to the other, then its completion.
//!
//! ```
//! use zverbs_core::{Completion, PollCq, PostSend, RemoteBuf, SendWr, Sge, WcStatus};
//! use zverbs_mlx5dv::{CompletionQueue, CqBinding, SendQueue, SqState};
//! use zverbs_sim::{Access, CqConfig, Device, QpConfig};
//!
//! let dev = Device::new(); // stepped: nothing happens until `step` or `run_until_idle`
//! let cq = dev.create_cq(CqConfig { cqe: 16 })?;
//! let qp = dev.create_qp(QpConfig { send_cq: cq.cqn, recv_cq: cq.cqn, ..QpConfig::default() })?;
//! dev.connect(qp.qpn, qp.qpn)?; // the QP is its own peer
//!
//! // Memory the device reads and writes, reached only through the pointer.
//! let mem = Box::into_raw(Box::new([0u8; 128])).cast::<u8>();
//! // SAFETY: `mem` stays valid until it is freed below, after the device is gone.
//! let mr = unsafe { dev.reg_mr(mem, 128, Access::ALL)? };
//! // SAFETY: the first 64 bytes of `mem`, which no request uses yet.
//! unsafe { mem.write_bytes(0x5a, 64) };
//!
//! // The queues a ConnectX gets, over the layouts the device reports as `mlx5dv_init_obj` does.
//! let slots = qp.sq_slots();
//! let state = SqState::new(&slots[..])?;
//! let bindings = [CqBinding::send_only(qp.qpn, &state)];
//! // SAFETY: the layouts are the device's, which outlives the queues; nothing else drives them.
//! let (mut sq, mut poller) = unsafe {
//!     let sq = SendQueue::new(&qp.layout, qp.caps(), &state, None)?;
//!     (sq, CompletionQueue::new(&cq.layout, &bindings[..])?)
//! };
//!
//! // An RDMA WRITE of the first 64 bytes onto the last 64.
//! let sgl = [Sge::new(mem as u64, 64, mr.lkey)];
//! let remote = RemoteBuf::new(mem as u64 + 64, mr.rkey);
//! // SAFETY: the source is registered and unchanged until its completion.
//! unsafe { sq.post(&SendWr::write(1, &sgl, remote).signaled())? };
//! dev.run_until_idle();
//!
//! let mut wc = [Completion::EMPTY; 4];
//! assert_eq!(poller.poll(&mut wc), 1);
//! assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
//! // SAFETY: the device is idle; the byte it wrote is read through the pointer.
//! assert_eq!(unsafe { mem.add(127).read() }, 0x5a);
//!
//! drop((sq, poller, dev));
//! // SAFETY: from `Box::into_raw` above; the device that used it is gone.
//! drop(unsafe { Box::from_raw(mem.cast::<[u8; 128]>()) });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Modes
//!
//! - **Stepped** (the default): nothing happens until the caller calls [`Device::step`] or
//!   [`Device::run_until_idle`]. Deterministic, for tests.
//! - **Progress thread**: [`Device::start`] runs a thread that steps the device whenever a
//!   doorbell record moves, as the NIC would serve the queues, doing what [`Device::set_idle`]
//!   chose when there is nothing to do ([`Idle`]); [`Device::stop`] (or dropping the device)
//!   ends it and waits for it to exit.
//!
//! ## Packet sequence numbers
//!
//! A QP sends from the PSN [`Device::set_sq_psn`] gave it and, as a responder, carries out only
//! the request with the PSN it expects ([`Device::set_rq_psn`]); both 24 bits, wrapping. A
//! request takes one PSN per packet at a 4096-byte path MTU (a READ the packets of its
//! response, an atomic one). A request ahead of the expected PSN is NAKed (sequence error) and
//! not carried out; one behind it is a duplicate, acknowledged again and not carried out again
//! (an atomic answers with its kept result). Without a valid acknowledgement the requester
//! retries up to its retry count ([`Device::set_retry_cnt`]) and then fails with "transport
//! retry exceeded" (vendor syndrome [`vendor::RETRY`]).
//!
//! ## Semantics, in brief
//!
//! | request | effect | requester CQE (when signaled) | responder CQE |
//! |---|---|---|---|
//! | RDMA WRITE | data to peer memory (remote write) | `REQ`, byte_cnt 0 | — |
//! | WRITE with imm | as WRITE, consumes a receive | `REQ` | `RESP_WR_IMM`, imm, byte_cnt = length |
//! | SEND / SEND imm | scattered over the peer's next receive | `REQ` | `RESP_SEND` / `RESP_SEND_IMM` |
//! | RDMA READ | peer memory (remote read) to local (local write) | `REQ`, byte_cnt = length | — |
//! | CS / FA | 8 aligned bytes (remote atomic), in host order (big-endian in that mode); original to local | `REQ`, byte_cnt 8 | — |
//! | NOP | nothing | `REQ` | — |
//!
//! Errors (syndrome, then who enters the error state; the `vendor_err_synd` values are in
//! [`vendor`]):
//!
//! | cause | requester | responder |
//! |---|---|---|
//! | bad lkey, local span outside its region, READ/atomic into memory without local write | local protection (0x04) | — |
//! | message above 2 GiB | local length (0x01) | — |
//! | malformed WQE: `ds` 0, past the producer, unknown opcode, wrong segments, inline length past `ds`, wrong index or QPN | local QP operation (0x02) | — |
//! | bad rkey, remote span outside, missing remote right | remote access (0x13) | enters error, `QpAccessError` event |
//! | atomic target not 8-byte aligned | remote invalid request (0x12) | enters error, `QpRequestError` event |
//! | SEND longer than the receive | remote invalid request (0x12) | local length (0x01) on the receive |
//! | receive entry with a bad key, bounds or no local write | remote operation (0x14) | local protection (0x04) on the receive |
//! | SEND or WRITE imm and no receive posted, after `rnr_retry` retries | RNR retry exceeded (0x16) | — |
//! | peer QP in the error state, gone or not connected yet | transport retry exceeded (0x15) | — |
//! | peer QP connected to another QP (not the requester) | transport retry exceeded (0x15) | — (never reached) |
//! | no valid acknowledgement within `retry_cnt` retries (PSN mismatch, lost acknowledgements; towards another process, no answer within the transport timer) | transport retry exceeded (0x15, vendor 0x81) | — (nothing carried out) |
//!
//! Error and flush CQEs are written whether the WQE was signaled or not. A zero-length WRITE
//! or READ needs no valid remote key (IBA C9-88).
//!
//! ## Unreliable datagrams, multicast, shared receive queues
//!
//! [`Device::create_qp_ext`] creates UD QPs ([`QpType::Ud`]: [`Device::init_ud`] with the
//! Q_Key, [`Device::ready_ud`]) and QPs that take their receives from a shared receive queue
//! ([`Device::create_srq`]). A UD SEND carries the 48-byte address vector of
//! [`Device::create_ah`] in its datagram segment, completes once sent, and is delivered by
//! DLID and QPN — or to every QP [`Device::attach_mcast`] put in a multicast group — into a
//! receive whose first 40 bytes hold the GRH when the datagram has one; a Q_Key mismatch, a
//! missing receive or an unknown destination drops it (counted in [`Stats`]), a message above
//! the 4096-byte path MTU fails at the sender with a local length error. An SRQ is consumed in
//! the order of its free list by every QP on it; an empty one is an RNR NAK; its limit and
//! error events are read with [`Device::srq_event`]. See `docs/sim.md`.
//!
//! ## Raw Ethernet
//!
//! Raw packet QPs ([`QpType::RawPacket`], [`Device::ready_raw`]) send whole Ethernet frames
//! (the Ethernet segment with inlined header bytes, checksum offload) out of the device's
//! Ethernet port: to the [`EthPort`] [`Device::attach_port`] connected, and back into the
//! device's own receive side while loopback is on ([`Device::set_loopback`]; on while no port
//! is attached). Frames from outside come in by [`Device::receive_frame`]. Flow rules
//! ([`Device::create_flow`]) steer them to a raw QP's receive queue or an RSS QP
//! ([`Device::create_rss_qp`]) spreading them by Toeplitz hash over receive work queues
//! ([`Device::create_wq`]), ordinary or striding; a frame no rule takes, or no WQE can hold,
//! is dropped and counted in [`Stats`]. See `docs/sim.md`, "Raw Ethernet".
//!
//! ## Faults on demand
//!
//! [`Device::fail_next_wqe`] fails the next send WQE of a QP with a chosen syndrome;
//! [`Device::lose_next_ack`] loses the acknowledgement of a QP's next request (it is sent
//! again and taken for a duplicate);
//! [`Device::drop_next_recv`] makes the next message that needs a receive at a QP find none
//! (an RNR NAK, then retry or "RNR retry exceeded"); [`Device::delay_completions`] holds every
//! CQE of a CQ for a number of steps, [`Device::hold_completions`] until
//! [`Device::release_completions`]; [`Device::set_error`] moves a QP to the error state.
//!
//! Asynchronous events ([`faults`]): [`Device::set_port_state`] takes the port down (every
//! RC request then fails with "transport retry exceeded") and up, [`Device::inject_qp_fatal`]
//! fails a QP outside any request, [`Device::inject_device_fatal`] the device; they, CQ
//! overruns and SRQ limits raise [`DeviceEvent`]s, which [`Device::subscribe_events`] reads.
//!
//! ## Not modelled
//!
//! Timing and bandwidth (a peer in the same device answers at once, so a retry follows its
//! cause by one step; only requests to another process wait for the transport and RNR timers,
//! see [`Device::set_timeout`]), congestion,
//! packet loss unless injected, packets on a wire (a message is placed whole; PSNs count its
//! packets), PCIe and write-combining behaviour (BlueFlame writes land in ordinary memory and the device
//! reads WQEs from the ring), DMA ordering beyond "a message is placed in address order with
//! its last byte stored last". See `docs/sim.md`.
//!
//! Nothing is allocated per operation: rings, tables and the queue of held CQEs are sized when
//! the device, a QP or a CQ is created. Every size a caller passes is checked against the
//! device's limit before it is computed with: a value above it is [`SimError::InvalidConfig`]
//! naming the limit, never an overflow or a panic under the device's lock.
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.95: the manifest's `rust-version`, checked in CI by building the published crates
//! with the 1.95.0 toolchain (`cargo xtask test`, stage `crates`).

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod arm;
pub mod clock;
pub mod compress;
mod config;
mod cq;
mod cqe;
mod engine;
pub mod eth;
pub mod faults;
mod mem;
mod mr;
pub mod steering;
pub mod vendor;
pub mod wire;
mod wqe;

use core::ptr::NonNull;
use core::time::Duration;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

pub use config::{
    Access, AhAttr, CqConfig, DctConfig, DeviceConfig, Grh, Mr, QpConfig, QpStatus, QpType,
    RNR_RETRY_INFINITE, SimAh, SimCq, SimDct, SimError, SimQp, SimSrq, SrqConfig, SrqEvent, Stats,
};

use engine::Engine;
pub use engine::Peer;
pub use eth::EthPort;
pub use faults::{DeviceEvent, EventSubscription, PortState};
pub use steering::{
    DEFAULT_RSS_KEY, FlowAttr, FlowDest, FlowSpec, L4Proto, RssConfig, RxHashFields, SimWq,
    Striding, WqConfig,
};

/// The name the software device goes by in `zverbs`'s device list (`zverbs::SOFTWARE_DEVICE`,
/// and the value of `ZVERBS_DEVICE` that asks for it).
pub const DEVICE_NAME: &str = "zverbs_sim0";

/// What the progress thread does between passes when the device has nothing to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Idle {
    /// Spin a little, then yield the CPU, and after a long idle (20 ms) sleep 50 µs now and
    /// then: low latency while busy, little CPU when a program goes quiet.
    #[default]
    Adaptive,
    /// Spin for ever (a hint to the CPU, no system call): the lowest latency, a whole core.
    Spin,
    /// Spin a little, then yield the CPU for ever, never sleep.
    Yield,
    /// Spin, then yield, and after a few hundred idle passes sleep this long between passes:
    /// the CPU goes to the programs it serves, at the cost of up to this much extra latency
    /// on the first doorbell after a pause.
    Sleep(Duration),
}

/// [`Idle`] in one word, for the progress thread to read without a lock: 0 adaptive,
/// `u64::MAX` spin, `u64::MAX - 1` yield, else nanoseconds of sleep.
const IDLE_SPIN: u64 = u64::MAX;
const IDLE_YIELD: u64 = u64::MAX - 1;

impl Idle {
    fn to_word(self) -> u64 {
        match self {
            Idle::Adaptive => 0,
            Idle::Spin => IDLE_SPIN,
            Idle::Yield => IDLE_YIELD,
            Idle::Sleep(d) => u64::try_from(d.as_nanos())
                .unwrap_or(IDLE_YIELD - 1)
                .clamp(1, IDLE_YIELD - 1),
        }
    }

    fn of_word(w: u64) -> Self {
        match w {
            0 => Idle::Adaptive,
            IDLE_SPIN => Idle::Spin,
            IDLE_YIELD => Idle::Yield,
            ns => Idle::Sleep(Duration::from_nanos(ns)),
        }
    }
}
use wire::Wire;
use zverbs_mlx5dv::{CqLayout, QpLayout};

#[derive(Debug)]
struct Shared {
    engine: Mutex<Engine>,
    stop: AtomicBool,
    /// The progress thread's [`Idle`] behaviour, as [`Idle::to_word`] writes it.
    idle: AtomicU64,
}

/// A software mlx5 device.
///
/// Every method takes `&self`: the device can be shared between the threads that drive its
/// queues (put it in an `Arc` or borrow it into scoped threads). The memory of its QPs, CQs
/// and SRQs lives until they are destroyed (or the device dropped).
#[derive(Debug)]
pub struct Device {
    shared: Arc<Shared>,
    /// The progress thread, while it runs. Starting and stopping it are control operations,
    /// serialised by this lock; the data path never takes it.
    thread: Mutex<Option<JoinHandle<()>>>,
}

// What the paragraph above promises, kept by the compiler.
static_assertions::assert_impl_all!(Device: Send, Sync);

impl Default for Device {
    fn default() -> Self {
        Self::new()
    }
}

impl Device {
    /// A device with the default table sizes, in stepped mode.
    ///
    /// # Panics
    ///
    /// If the default tables (a few kilobytes) cannot be allocated.
    pub fn new() -> Self {
        match Self::with_config(DeviceConfig::default()) {
            Ok(d) => d,
            Err(e) => panic!("the software device's default tables: {e}"),
        }
    }

    /// A device with the given table sizes, in stepped mode.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for a table larger than its numbers or keys can name
    /// ([`DeviceConfig`] gives the limits), [`SimError::OutOfMemory`] when the tables cannot
    /// be allocated.
    pub fn with_config(cfg: DeviceConfig) -> Result<Self, SimError> {
        Ok(Self {
            shared: Arc::new(Shared {
                engine: Mutex::new(Engine::new(cfg)?),
                stop: AtomicBool::new(false),
                idle: AtomicU64::new(0),
            }),
            thread: Mutex::new(None),
        })
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.shared
            .engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates a CQ of at least `cfg.cqe` entries.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for 0 or more than 2^22 entries, [`SimError::TooMany`] when
    /// the table is full.
    pub fn create_cq(&self, cfg: CqConfig) -> Result<SimCq, SimError> {
        self.engine().create_cq(cfg)
    }

    /// Drives a CQ whose memory someone else allocated (libmlx5 behind an emulated ConnectX):
    /// `layout.cqn` becomes its number.
    ///
    /// # Safety
    ///
    /// `layout.buf` holds `cqe_cnt` initialised CQEs of `layout.cqe_size` bytes and
    /// `layout.dbrec` two words, both valid for reads and writes for the device's whole life,
    /// and used by the driver as an mlx5 CQ is. A 128-byte CQE is laid out as libmlx5 lays it
    /// out: the 64-byte CQE in the entry's second half, the first half for data scattered to
    /// the CQE.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for a count that is not a power of two, a CQE size other
    /// than 64 or 128 or a CQ number in use; [`SimError::TooMany`].
    pub unsafe fn create_cq_external(&self, layout: &CqLayout) -> Result<SimCq, SimError> {
        // SAFETY: (caller) the memory is valid for the device's life.
        unsafe { self.engine().add_cq(layout) }?;
        Ok(SimCq {
            cqn: layout.cqn,
            layout: *layout,
        })
    }

    /// Creates an RC QP, sized as libmlx5 sizes one for `cfg`.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`] for an unknown CQ, [`SimError::InvalidConfig`] for sizes the
    /// device does not support, [`SimError::TooMany`].
    pub fn create_qp(&self, cfg: QpConfig) -> Result<SimQp, SimError> {
        self.engine().create_qp(cfg, QpType::Rc, None)
    }

    /// Creates a QP of `qp_type`, sized as libmlx5 sizes one for `cfg` (a UD WQE's fixed
    /// part is the control and datagram segments, one basic block), taking its receives from
    /// the shared receive queue `srq` when one is given: such a QP has no receive queue of
    /// its own (`cfg.max_recv_wr` must be 0; its layout's receive ring is empty).
    ///
    /// A UD QP starts in INIT: [`Device::init_ud`] gives it its Q_Key, [`Device::ready_ud`]
    /// moves it to RTS. An RC QP is connected as one from [`Device::create_qp`].
    ///
    /// # Errors
    ///
    /// As [`Device::create_qp`] (UD: at most 59 gather entries and 940 inline bytes), and
    /// [`SimError::NoSuchSrq`], [`SimError::InvalidConfig`] for receive WRs on an SRQ.
    pub fn create_qp_ext(
        &self,
        cfg: QpConfig,
        qp_type: QpType,
        srq: Option<u32>,
    ) -> Result<SimQp, SimError> {
        self.engine().create_qp(cfg, qp_type, srq)
    }

    /// Gives UD QP `qpn` its Q_Key and P_Key index, as `ibv_modify_qp` to INIT does. A
    /// datagram reaches the QP only with this Q_Key; a send whose Q_Key has bit 31 set
    /// carries it instead. The port's P_Key table holds one entry, `0xffff`.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for an RC QP or a P_Key index
    /// other than 0, [`SimError::AlreadyConnected`] past INIT.
    pub fn init_ud(&self, qpn: u32, qkey: u32, pkey_index: u16) -> Result<(), SimError> {
        self.engine().init_ud(qpn, qkey, pkey_index)
    }

    /// Moves UD QP `qpn` to RTS, as `ibv_modify_qp` to RTR and then RTS does: it receives
    /// datagrams and executes its sends from now on. A UD QP has no peer.
    ///
    /// # Errors
    ///
    /// As [`Device::init_ud`].
    pub fn ready_ud(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().ready_ud(qpn)
    }

    /// Creates a DC target (DCT) on the shared receive queue `cfg.srq`, its receive
    /// completions on `cfg.cq`, serving requests that carry `cfg.access_key`. It starts in
    /// INIT: [`Device::ready_dct`] moves it to RTR. Its number is in the QP number space.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::NoSuchSrq`], [`SimError::TooMany`].
    pub fn create_dct(&self, cfg: DctConfig) -> Result<SimDct, SimError> {
        self.engine().create_dct(cfg)
    }

    /// Gives the DC target `dctn`, driven over memory someone else allocated
    /// ([`Device::create_qp_external_ext`] with [`QpType::Dct`]), its access key.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for a QP that is no DC target.
    pub fn set_dct_key(&self, dctn: u32, access_key: u64) -> Result<(), SimError> {
        self.engine().set_dct_key(dctn, access_key)
    }

    /// Moves DC target `dctn` to RTR, as `ibv_modify_qp` to INIT and then RTR does (a DCT
    /// goes no further): it serves requests from now on.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for a QP that is no DC target,
    /// [`SimError::AlreadyConnected`] past INIT.
    pub fn ready_dct(&self, dctn: u32) -> Result<(), SimError> {
        self.engine().ready_dct(dctn)
    }

    /// Moves DC initiator `qpn` (made by [`Device::create_qp_ext`] with [`QpType::Dci`]) to
    /// RTS, as `ibv_modify_qp` to INIT, RTR and RTS does: a DCI names no remote QP; each of
    /// its requests names its target.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for a QP that is no DCI,
    /// [`SimError::AlreadyConnected`] past INIT.
    pub fn ready_dci(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().ready_dci(qpn)
    }

    /// An address handle for `attr`: the 48-byte address vector libmlx5's `mlx5_create_ah`
    /// builds (see [`SimAh`]). The device keeps nothing: a send carries the vector.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for an SL above 15, an SGID index other than 0, or a
    /// multicast flag with an address that is not a multicast one.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<SimAh, SimError> {
        self.engine().create_ah(attr)
    }

    /// The port's LID: the one [`Device::set_wire`] gave, else 1.
    pub fn lid(&self) -> u16 {
        self.engine().lid()
    }

    /// The port's GID 0 (its only one): `fe80::` and a GUID ending in the LID.
    pub fn gid(&self) -> [u8; 16] {
        self.engine().gid()
    }

    /// Attaches UD QP `qpn` to the multicast group `mgid` / `mlid` (`ibv_attach_mcast`): a
    /// datagram sent to the MLID (and, with a GRH, the MGID) with destination QPN `0xffffff`
    /// reaches every attached QP, each with its own receive; the sender too when it is
    /// attached (as a ConnectX loops multicast back unless the QP was created to block it).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for an RC QP, an address that is
    /// not a multicast one, or an MGID known with another MLID.
    pub fn attach_mcast(&self, qpn: u32, mgid: [u8; 16], mlid: u16) -> Result<(), SimError> {
        self.engine().attach_mcast(qpn, mgid, mlid)
    }

    /// Detaches UD QP `qpn` from the group (`ibv_detach_mcast`): it receives none of the
    /// group's datagrams from now on.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] when it is not attached.
    pub fn detach_mcast(&self, qpn: u32, mgid: [u8; 16], mlid: u16) -> Result<(), SimError> {
        self.engine().detach_mcast(qpn, mgid, mlid)
    }

    /// Creates a shared receive queue laid out as libmlx5 lays one out (see [`SimSrq`]).
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for `max_wr` 0 or above 32767 or `max_sge` above 63,
    /// [`SimError::TooMany`] (as many SRQs as QPs).
    pub fn create_srq(&self, cfg: SrqConfig) -> Result<SimSrq, SimError> {
        self.engine().create_srq(cfg)
    }

    /// Destroys SRQ `srqn`; refused while a QP takes its receives from it. The ring and record
    /// the device allocated for it ([`Device::create_srq`]) are freed: nothing may use its
    /// layout any more.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchSrq`], [`SimError::InvalidConfig`] while in use.
    pub fn destroy_srq(&self, srqn: u32) -> Result<(), SimError> {
        self.engine().destroy_srq(srqn)
    }

    /// Arms SRQ `srqn`'s limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a message leaves
    /// fewer than `limit` receives posted, [`Device::srq_event`] reports
    /// [`SrqEvent::LimitReached`] once and the limit is disarmed. 0 disarms it.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchSrq`], [`SimError::InvalidConfig`] for a limit at or above the
    /// ring's WQE count.
    pub fn arm_srq(&self, srqn: u32, limit: u32) -> Result<(), SimError> {
        self.engine().arm_srq(srqn, limit)
    }

    /// The oldest unread event of SRQ `srqn`, which reading clears (the asynchronous event
    /// `ibv_get_async_event` would return): an error first, then the limit.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchSrq`].
    pub fn srq_event(&self, srqn: u32) -> Result<Option<SrqEvent>, SimError> {
        self.engine().take_srq_event(srqn)
    }

    /// Drives a QP whose memory someone else allocated: `layout.qpn` becomes its number.
    ///
    /// # Safety
    ///
    /// The rings and the doorbell record of `layout` are valid for reads for the device's whole
    /// life and written only as an mlx5 driver writes them.
    ///
    /// # Errors
    ///
    /// As [`Device::create_qp`], and for a QP number in use.
    pub unsafe fn create_qp_external(
        &self,
        layout: &QpLayout,
        send_cq: u32,
        recv_cq: u32,
        rnr_retry: u8,
    ) -> Result<(), SimError> {
        // SAFETY: (caller) the memory is valid for the device's life.
        unsafe { self.engine().add_qp(layout, send_cq, recv_cq, rnr_retry) }
    }

    /// Drives a QP of `qp_type` whose memory someone else allocated, taking its receives from
    /// the shared receive queue `srq` when one is given (its layout then has no receive ring):
    /// [`Device::create_qp_external`] for any QP [`Device::create_qp_ext`] creates. A UD QP
    /// starts in INIT ([`Device::init_ud`], [`Device::ready_ud`]).
    ///
    /// # Safety
    ///
    /// As [`Device::create_qp_external`].
    ///
    /// # Errors
    ///
    /// As [`Device::create_qp_external`], and [`SimError::NoSuchSrq`],
    /// [`SimError::InvalidConfig`] for a receive ring on an SRQ.
    pub unsafe fn create_qp_external_ext(
        &self,
        layout: &QpLayout,
        send_cq: u32,
        recv_cq: u32,
        rnr_retry: u8,
        qp_type: QpType,
        srq: Option<u32>,
    ) -> Result<(), SimError> {
        // SAFETY: (caller) the memory is valid for the device's life.
        unsafe {
            self.engine()
                .add_qp_ext(layout, send_cq, recv_cq, rnr_retry, qp_type, srq)
        }
    }

    /// Drives a shared receive queue whose ring and doorbell record someone else allocated
    /// (libmlx5 behind an emulated ConnectX): `wqe_cnt` WQEs of `stride` bytes at `buf`, laid
    /// out and linked into a free list as [`SimSrq`] describes (from WQE 0, which the device
    /// consumes first), and a one-word doorbell record. Returns its number.
    ///
    /// # Safety
    ///
    /// The ring and the record are valid for reads and writes for the device's whole life
    /// and are written only as an mlx5 driver writes them.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for a count that is not a power of two or above 32768, or
    /// a stride that is not a power of two in 32..=1024; [`SimError::TooMany`].
    pub unsafe fn create_srq_external(
        &self,
        buf: NonNull<u8>,
        dbrec: NonNull<u32>,
        wqe_cnt: u32,
        stride: u32,
    ) -> Result<u32, SimError> {
        // SAFETY: (caller) the memory is valid for the device's life.
        unsafe { self.engine().add_srq_external(buf, dbrec, wqe_cnt, stride) }
    }

    /// Connects two QPs (or a QP to itself) as an RC pair and moves both to RTS: each names
    /// the other, as [`Device::connect_to`] on both sides.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::AlreadyConnected`] when either QP is past INIT
    /// (nothing is changed then).
    pub fn connect(&self, a: u32, b: u32) -> Result<(), SimError> {
        self.engine().connect(a, b)
    }

    /// Points QP `qpn`'s requests at `peer` and moves it to RTS, as `ibv_modify_qp` to RTR and
    /// RTS does on one side of a connection. A connection is one-sided, as on hardware: the
    /// peer names `qpn` on its own side, and a QP accepts requests only from the QP (and, in
    /// another process, the LID) its own connection names. A request from any other QP never
    /// reaches it: the requester's WQE fails with "transport retry exceeded" (vendor syndrome
    /// [`vendor::NOT_PEER`]), counted in [`Stats::not_peer`]. A peer in another process is
    /// reached through the device's [`Wire`].
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`] (for either QP of a local pair), [`SimError::AlreadyConnected`]
    /// when `qpn` is past INIT, [`SimError::PeerTaken`] when a local peer already names
    /// another QP. Nothing is changed on an error.
    pub fn connect_to(&self, qpn: u32, peer: Peer) -> Result<(), SimError> {
        self.engine().connect_to(qpn, peer)
    }

    /// Sets the user index QP `qpn`'s CQEs carry in `srqn_uidx` (by default its QPN). With CQE
    /// version 1, libmlx5 finds a CQE's QP by this index, which it chose and passed in the
    /// create-QP command.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn set_user_index(&self, qpn: u32, uidx: u32) -> Result<(), SimError> {
        self.engine().set_user_index(qpn, uidx)
    }

    /// Sets how many times QP `qpn` retries a request that finds no receive at its peer before
    /// it fails with "RNR retry exceeded" (`rnr_retry` of `ibv_modify_qp` at RTS;
    /// [`RNR_RETRY_INFINITE`] waits for ever).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] above 7.
    pub fn set_rnr_retry(&self, qpn: u32, rnr_retry: u8) -> Result<(), SimError> {
        if rnr_retry > RNR_RETRY_INFINITE {
            return Err(SimError::InvalidConfig("rnr_retry above 7"));
        }
        self.engine().qp_mut(qpn)?.set_rnr_retry(rnr_retry);
        Ok(())
    }

    /// Sets how many times QP `qpn` sends a request again when no valid acknowledgement comes
    /// (a lost acknowledgement, a PSN sequence error NAK) before its WQE fails with "transport
    /// retry exceeded" (`retry_cnt` of `ibv_modify_qp` at RTS; 7 by default, the most).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] above 7.
    pub fn set_retry_cnt(&self, qpn: u32, retry_cnt: u8) -> Result<(), SimError> {
        if retry_cnt > 7 {
            return Err(SimError::InvalidConfig("retry_cnt above 7"));
        }
        self.engine().qp_mut(qpn)?.set_retry_cnt(retry_cnt);
        Ok(())
    }

    /// Sets QP `qpn`'s transport timer (`timeout` of `ibv_modify_qp` at RTS, a 5-bit code):
    /// a request to a peer in another process that no answer reaches within `4.096 µs ×
    /// 2^timeout` is sent again, and after `retry_cnt` such retries fails with "transport
    /// retry exceeded" (vendor syndrome [`vendor::RETRY`]); the QP then enters the error state
    /// and every request after it is flushed. 0 disables the timer, as the InfiniBand
    /// specification says (a request then waits for its answer for ever). 14 (about 67 ms)
    /// by default, what `ibv_rc_pingpong` and perftest ask for. A peer in this device answers
    /// at once and needs no timer. [`Device::set_timer_scale`] shortens it for tests.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] above 31.
    pub fn set_timeout(&self, qpn: u32, timeout: u8) -> Result<(), SimError> {
        if timeout > 31 {
            return Err(SimError::InvalidConfig("timeout above 31"));
        }
        self.engine().qp_mut(qpn)?.set_timeout(timeout);
        Ok(())
    }

    /// Sets the RNR timer QP `qpn` asks its requesters to wait after it found no receive
    /// posted (`min_rnr_timer` of `ibv_modify_qp` at RTR, a 5-bit code of the InfiniBand
    /// specification's table: 12 is 0.64 ms, the default; 1 is 10 µs; 0 is 655.36 ms). Its
    /// RNR NAKs to a requester in another process carry it, and that requester sends the
    /// request again once it has run (a requester in this device asks again at its next
    /// step).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] above 31.
    pub fn set_min_rnr_timer(&self, qpn: u32, code: u8) -> Result<(), SimError> {
        if code > 31 {
            return Err(SimError::InvalidConfig("min_rnr_timer above 31"));
        }
        self.engine().qp_mut(qpn)?.set_min_rnr_timer(code);
        Ok(())
    }

    /// Runs the transport and RNR timers `scale` times faster than the InfiniBand
    /// specification's values, for tests that wait for a dead peer's requests to fail: with
    /// 1000, the default transport timer (14) runs out after about 67 µs instead of 67 ms. 1
    /// (the default) is the specification's values. A divisor: no scale makes a timer longer
    /// or infinite.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for 0 or above 1 000 000.
    pub fn set_timer_scale(&self, scale: u32) -> Result<(), SimError> {
        self.engine().set_timer_scale(scale)
    }

    /// Sets the PSN of the next request QP `qpn` sends (`sq_psn` of `ibv_modify_qp` at RTS).
    /// Each request takes one PSN per packet of its message at the path MTU (4096 bytes; a
    /// READ the packets of its response, an atomic one), and the next request's PSN follows
    /// once it is acknowledged. 0 until set.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] above 24 bits.
    pub fn set_sq_psn(&self, qpn: u32, psn: u32) -> Result<(), SimError> {
        if psn > 0xff_ffff {
            return Err(SimError::InvalidConfig("PSN above 24 bits"));
        }
        self.engine().qp_mut(qpn)?.set_sq_psn(psn);
        Ok(())
    }

    /// Sets the PSN QP `qpn` expects of the next request it serves (`rq_psn` of
    /// `ibv_modify_qp` at RTR): it carries out only a request with that PSN, answers one
    /// ahead of it with a PSN sequence error NAK (the requester's retries then run out: its
    /// WQE fails with "transport retry exceeded", vendor syndrome [`vendor::RETRY`]) and one
    /// behind it as a duplicate, which is not carried out again. 0 until set.
    ///
    /// # Errors
    ///
    /// As [`Device::set_sq_psn`].
    pub fn set_rq_psn(&self, qpn: u32, psn: u32) -> Result<(), SimError> {
        if psn > 0xff_ffff {
            return Err(SimError::InvalidConfig("PSN above 24 bits"));
        }
        self.engine().qp_mut(qpn)?.set_rq_psn(psn);
        Ok(())
    }

    /// QP `qpn`'s (`sq_psn`, `rq_psn`): the PSN of the next request it sends, and the PSN it
    /// expects of the next request it serves.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn psns(&self, qpn: u32) -> Result<(u32, u32), SimError> {
        Ok(self.engine().qp_mut(qpn)?.psns())
    }

    /// Destroys QP `qpn`: from the return on, the device never touches its memory (a QP
    /// created with [`Device::create_qp_external`] can then be freed). Its number is not
    /// found any more. The rings, doorbell record and BlueFlame register the device allocated
    /// for a QP of [`Device::create_qp`] are freed, as a driver frees a destroyed QP's memory:
    /// every queue built on its layout must be gone first. A raw packet QP a flow rule
    /// steers to is refused until the rule is removed (the kernel answers `EBUSY`).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] while a flow rule names it.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().destroy_qp(qpn)
    }

    /// Destroys CQ `cqn`, as [`Device::destroy_qp`]: the ring, record and UAR the device
    /// allocated for it are freed (its poller must be gone first).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::InvalidConfig`] while a QP uses it.
    pub fn destroy_cq(&self, cqn: u32) -> Result<(), SimError> {
        self.engine().destroy_cq(cqn)
    }

    /// Sends CQ `cqn`'s completion events to `handler` (`None`: events are only counted).
    /// See [`arm`] for when an armed CQ raises one.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`].
    pub fn set_cq_event_handler(
        &self,
        cqn: u32,
        handler: Option<arm::EventHandler>,
    ) -> Result<(), SimError> {
        self.engine().cq_mut(cqn)?.arm.handler = handler;
        Ok(())
    }

    /// The events CQ `cqn` raised so far.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`].
    pub fn cq_events(&self, cqn: u32) -> Result<u64, SimError> {
        Ok(self.engine().cq_mut(cqn)?.arm.events)
    }

    /// The memory standing in for CQ `cqn`'s UAR page (`mlx5dv_cq.cq_uar`): 64 bytes, of which
    /// the CQ doorbell (`MLX5_CQ_DOORBELL`, 8 bytes at 0x20) is written by an arm and read by
    /// nobody (the device takes the arm from the doorbell record: [`arm`]). Valid while the
    /// device lives.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`]; [`SimError::InvalidConfig`] for a CQ whose memory the driver
    /// allocated ([`Device::create_cq_external`]: its UAR is the driver's).
    pub fn cq_uar(&self, cqn: u32) -> Result<NonNull<u8>, SimError> {
        self.engine()
            .cq_mut(cqn)?
            .uar
            .ok_or(SimError::InvalidConfig("the CQ's UAR is its driver's"))
    }

    /// Chooses how 8-byte atomics read and write memory: as a host-endian integer (the
    /// default, and what a ConnectX does when the Linux mlx5 driver has set it to host
    /// endianness, which it does whenever the firmware offers it and then advertises
    /// `IBV_ATOMIC_HCA`), or, with `false`, as a big-endian one, returning the original
    /// big-endian too (the mode of a device that offers only that; the driver then advertises
    /// `IBV_ATOMIC_NONE`).
    pub fn set_atomic_host_endian(&self, on: bool) {
        self.engine().atomic_host_endian = on;
    }

    /// Connects this device instance to others (in other processes): `wire` carries its
    /// messages, `lid` is the address other instances send to. See [`wire`].
    pub fn set_wire(&self, wire: std::sync::Arc<dyn Wire>, lid: u16) {
        self.engine().set_wire(wire, lid);
    }

    /// Hands a message from another device instance to this one: a request is served (the
    /// responder's work, its answer sent through the wire), a response completes the
    /// requester's WQE. Bytes that are no message are counted in [`Stats::bad_messages`].
    pub fn deliver(&self, msg: &[u8]) {
        self.engine().deliver(msg);
    }

    /// Registers `len` bytes at `addr` with `access`.
    ///
    /// # Safety
    ///
    /// Until the region is deregistered or the device dropped, `addr..addr+len` stays valid
    /// for reads, and for writes if `access` grants any write right; the device reads and
    /// writes it (on the progress thread too) whenever a request names it, as a NIC would.
    ///
    /// The device accesses the region only atomically, through a
    /// `zverbs_core::shared::SharedMem` of exactly `addr..addr+len`: it reads and writes the
    /// region's whole 8-byte words (merging the bytes of a word a request covers in part, so
    /// the word's other bytes are rewritten unchanged) and the bytes of words that cross the
    /// region's ends one at a time. A program that touches the region while a request may be
    /// using it must do so the same way (a `SharedMem` of the same bounds) to stay free of data
    /// races; `zverbs::MrBuf` does.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidAccess`] for remote write or atomic without local write,
    /// [`SimError::TooMany`] when the table is full.
    pub unsafe fn reg_mr(
        &self,
        addr: *const u8,
        len: usize,
        access: Access,
    ) -> Result<Mr, SimError> {
        self.engine().reg_mr(addr as u64, len as u64, access)
    }

    /// Deregisters the region with local key `lkey`; its keys are refused from now on.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchMr`].
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), SimError> {
        self.engine().dereg_mr(lkey)
    }

    /// One pass over the device: writes due CQEs, flushes, and takes at most one send WQE per
    /// QP. Returns the work done; 0 means nothing can happen until software acts.
    pub fn step(&self) -> usize {
        self.engine().step()
    }

    /// Steps until a step does nothing; returns the total work done. With a QP that retries
    /// for ever (RNR retry 7) and no receive posted, its waiting WQE does not count as work,
    /// so this returns.
    pub fn run_until_idle(&self) -> usize {
        let mut e = self.engine();
        let mut total = 0;
        loop {
            let n = e.step();
            if n == 0 {
                return total;
            }
            total += n;
        }
    }

    fn thread(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the progress thread, named `zverbs-sim` (does nothing if it runs).
    ///
    /// # Panics
    ///
    /// If the operating system cannot start a thread.
    pub fn start(&self) {
        let mut thread = self.thread();
        if thread.is_some() {
            return;
        }
        self.shared.stop.store(false, Ordering::Relaxed);
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("zverbs-sim".into())
            .spawn(move || progress(&shared))
            .expect("spawn the device's progress thread");
        *thread = Some(handle);
    }

    /// Stops the progress thread and waits for it to exit (does nothing if it does not run).
    /// The device keeps its state: [`Device::step`] drives it from then on, or
    /// [`Device::start`] again.
    pub fn stop(&self) {
        let mut thread = self.thread();
        if let Some(h) = thread.take() {
            self.shared.stop.store(true, Ordering::Relaxed);
            // A panic on the progress thread is a device bug; it surfaces in the tests' asserts.
            let _ = h.join();
        }
    }

    /// Chooses what the progress thread does when the device has nothing to do (see
    /// [`Idle`]; [`Idle::Adaptive`] by default). Takes effect at its next idle pass.
    pub fn set_idle(&self, idle: Idle) {
        self.shared.idle.store(idle.to_word(), Ordering::Relaxed);
    }

    /// The progress thread's idle behaviour.
    pub fn idle(&self) -> Idle {
        Idle::of_word(self.shared.idle.load(Ordering::Relaxed))
    }

    /// Lets the progress thread sleep for `d` at a time once it has been idle for a while:
    /// [`Idle::Sleep`]`(d)`, and [`Idle::Adaptive`] for `Duration::ZERO`.
    pub fn set_idle_sleep(&self, d: Duration) {
        self.set_idle(if d.is_zero() {
            Idle::Adaptive
        } else {
            Idle::Sleep(d)
        });
    }

    /// Whether the progress thread runs.
    pub fn is_running(&self) -> bool {
        self.thread().is_some()
    }

    /// The device's counters.
    pub fn stats(&self) -> Stats {
        self.engine().stats
    }

    /// CQEs dropped because their CQ was full, over all CQs.
    pub fn cq_overruns(&self) -> u64 {
        self.engine().cq_overruns()
    }

    /// The state of QP `qpn`.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn qp_status(&self, qpn: u32) -> Result<QpStatus, SimError> {
        let mut e = self.engine();
        Ok(e.qp_mut(qpn)?.status)
    }

    /// Moves QP `qpn` to the error state (as `ibv_modify_qp` to `IBV_QPS_ERR`): every
    /// outstanding and later work request completes with "WR flushed".
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn set_error(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().set_error(qpn)
    }

    /// Fails the next send WQE of `qpn` with `syndrome` (vendor syndrome
    /// [`vendor::INJECTED`]): an error CQE, and the QP enters the error state.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn fail_next_wqe(&self, qpn: u32, syndrome: u8) -> Result<(), SimError> {
        self.engine().fail_next(qpn, syndrome, vendor::INJECTED)
    }

    /// Makes the next message that needs a receive at `qpn` find none, as if the receive
    /// were not there: the requester gets an RNR NAK and retries (or fails, per its
    /// `rnr_retry`).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn drop_next_recv(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().drop_next_recv(qpn)
    }

    /// Loses the acknowledgement of the next request QP `qpn` sends: the responder carries it
    /// out, the requester never hears so and sends it again (one transport retry), and the
    /// responder takes the second copy for a duplicate: acknowledged again, not carried out
    /// again (an atomic answers with the result of its first execution).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn lose_next_ack(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().lose_next_ack(qpn)
    }

    /// Holds every CQE of `cqn` produced from now on for `steps` device steps (0: no delay).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::OutOfMemory`] when the queue of held CQEs (a ring's
    /// worth) cannot be allocated.
    pub fn delay_completions(&self, cqn: u32, steps: u64) -> Result<(), SimError> {
        self.engine().cq_mut(cqn)?.set_delay(steps)
    }

    /// Stamps every CQE of `cqn` written from now on with the device clock, as a ConnectX
    /// does for a CQ created with completion timestamps (`IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION`).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`].
    pub fn enable_cq_timestamps(&self, cqn: u32) -> Result<(), SimError> {
        let mut e = self.engine();
        let clock = e.clock;
        let cq = e.cq_mut(cqn)?;
        cq.stamp = Some(clock);
        cq.real_time = false;
        Ok(())
    }

    /// Compresses the CQEs of `cqn` written from now on, in the mini-CQE `format`, as a
    /// ConnectX does for a CQ created with `cqe_comp_en` (the rule: [`compress`]).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::OutOfMemory`] when the staging room (a ring's worth
    /// of CQEs) cannot be allocated.
    pub fn enable_cq_compression(
        &self,
        cqn: u32,
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
    ) -> Result<(), SimError> {
        self.engine().cq_mut(cqn)?.enable_compression(format)
    }

    /// Lets QP `qpn` receive small SENDs into the CQE (scatter-to-CQE, as a ConnectX does for
    /// a QP created with `MLX5_QP_FLAG_SCATTER_CQE`): from now on a SEND of 1 to 32 bytes (64
    /// with 128-byte receive CQEs) arriving at an RC QP leaves its receive buffers untouched
    /// and comes in its receive CQE (`INLINE_SCATTER_32`: the CQE's first 32 bytes;
    /// `INLINE_SCATTER_64`: the first half of the 128-byte entry). A UD QP never scatters
    /// (the kernel enables it on RC only). `false` turns it off.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn set_scatter_to_cqe(&self, qpn: u32, on: bool) -> Result<(), SimError> {
        self.engine().qp_mut(qpn)?.scatter_to_cqe = on;
        Ok(())
    }

    /// [`Device::create_cq`] with CQEs of `cqe_size` bytes: 64, or 128 (the 64-byte CQE in
    /// the second half of each entry, as `mlx5dv_create_cq` with `cqe_size` 128 lays them
    /// out).
    ///
    /// # Errors
    ///
    /// As [`Device::create_cq`]; [`SimError::InvalidConfig`] for another size.
    pub fn create_cq_sized(&self, cfg: CqConfig, cqe_size: u32) -> Result<SimCq, SimError> {
        self.engine().create_cq_sized(cfg, cqe_size)
    }

    /// The device clock (the counter CQE timestamps come from, and its clock-info page).
    pub fn clock(&self) -> clock::DeviceClock {
        self.engine().clock
    }

    /// Holds every CQE of `cqn` from now on until [`Device::release_completions`].
    ///
    /// # Errors
    ///
    /// As [`Device::delay_completions`].
    pub fn hold_completions(&self, cqn: u32) -> Result<(), SimError> {
        self.engine().cq_mut(cqn)?.hold()
    }

    /// Writes every held CQE of `cqn` now and stops holding; returns how many were written.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`].
    pub fn release_completions(&self, cqn: u32) -> Result<usize, SimError> {
        self.engine().release_cq(cqn)
    }

    /// Bytes of the queue memory the device holds now (the rings, doorbell records, BlueFlame
    /// registers and UARs it allocated for live QPs, CQs and SRQs, with their guard bytes).
    /// Destroying an object gives its memory back: over any number of create and destroy
    /// cycles this stays where it began.
    pub fn allocated_bytes(&self) -> usize {
        self.engine().owned_bytes()
    }

    /// Whether the guard bytes around every buffer the device allocated are intact: neither
    /// the driver nor the device wrote outside a ring, record or register.
    pub fn guards_intact(&self) -> bool {
        self.engine().guards_intact()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long the device must have had nothing to do before its progress thread sleeps between
/// passes instead of yielding, in [`Idle::Adaptive`].
const IDLE_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_millis(20);

/// The progress thread: steps while there is work; when idle, does what [`Device::set_idle`]
/// chose (by default it spins a little, then yields, and after a long idle sleeps now and then).
fn progress(shared: &Shared) {
    /// Idle passes that spin, then that yield, before sleeping starts.
    const SPIN: u32 = 64;
    const YIELD: u32 = 256;
    let mut idle = 0u32;
    let mut last_work = std::time::Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let n = shared
            .engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .step();
        if n == 0 {
            idle = idle.saturating_add(1);
            match Idle::of_word(shared.idle.load(Ordering::Relaxed)) {
                _ if idle <= SPIN => core::hint::spin_loop(),
                Idle::Spin => core::hint::spin_loop(),
                Idle::Sleep(d) if idle > SPIN + YIELD => std::thread::sleep(d),
                // Long idle (a process that opened the device and went quiet): do not keep a
                // core busy; the next doorbell then waits at most one short sleep.
                Idle::Adaptive
                    if idle.is_multiple_of(1024) && last_work.elapsed() > IDLE_BEFORE_SLEEP =>
                {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    idle -= 1;
                }
                Idle::Adaptive | Idle::Yield | Idle::Sleep(_) => std::thread::yield_now(),
            }
        } else {
            idle = 0;
            last_work = std::time::Instant::now();
        }
    }
}

/// Reads the raw 64-byte CQE at `index` of a CQ's ring, for tests that check fields the poller
/// does not report (the solicited bit, `srqn_uidx`, the vendor syndrome bytes).
///
/// # Safety
///
/// `layout` is a live CQ's and the CQE is not being written (the device is stepped, or the
/// CQE was already polled).
pub unsafe fn read_cqe(layout: &CqLayout, index: u32) -> [u8; 64] {
    let slot = (index & (layout.cqe_cnt - 1)) as usize;
    let size = layout.cqe_size as usize;
    let p: NonNull<u8> = layout.buf;
    // SAFETY: (caller) the ring is live; `slot` is masked into it; the 64-byte CQE is the last
    // 64 bytes of its entry.
    unsafe {
        p.as_ptr()
            .add(slot * size + size - 64)
            .cast::<[u8; 64]>()
            .read()
    }
}

/// The first half of the 128-byte CQ entry `index` of `layout` (where 64 bytes of a
/// scattered receive go), read as [`read_cqe`] reads the CQE.
///
/// # Safety
///
/// As [`read_cqe`]; the CQEs are 128 bytes.
pub unsafe fn read_cqe_head(layout: &CqLayout, index: u32) -> [u8; 64] {
    assert_eq!(layout.cqe_size, 128, "only a 128-byte entry has a head");
    let slot = (index & (layout.cqe_cnt - 1)) as usize;
    let p: NonNull<u8> = layout.buf;
    // SAFETY: (caller) the ring is live; `slot` is masked into it.
    unsafe { p.as_ptr().add(slot * 128).cast::<[u8; 64]>().read() }
}

/// Raw Ethernet: the port, raw packet QPs, receive work queues, RSS and flow rules
/// (`docs/sim.md`, "Raw Ethernet").
impl Device {
    /// Moves raw packet QP `qpn` ([`QpType::RawPacket`]) to RTS, as `ibv_modify_qp` to INIT
    /// (with the port), RTR and RTS do: its send queue runs from now on. (Its receive queue
    /// takes frames from creation, as a ConnectX's does from INIT.)
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`], [`SimError::InvalidConfig`] for another kind of QP,
    /// [`SimError::AlreadyConnected`] past INIT.
    pub fn ready_raw(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().ready_raw(qpn)
    }

    /// Connects the Ethernet port to `port`: every frame a raw packet QP sends is handed to
    /// it, and loopback is turned off (a ConnectX sends to the wire and does not loop its own
    /// frames back unless asked; [`Device::set_loopback`] asks). `None` disconnects it and
    /// turns loopback back on, the state a device starts in.
    pub fn attach_port(&self, port: Option<Arc<dyn EthPort>>) {
        self.engine().attach_port(port);
    }

    /// Whether frames the device sends are also offered to its own receive side (its flow
    /// rules), as a ConnectX's local loopback does. On by default with no port attached, so
    /// one device can send and receive; [`Device::attach_port`] turns it off.
    pub fn set_loopback(&self, on: bool) {
        self.engine().set_loopback(on);
    }

    /// Sets the port MTU (68 to 9000; 1500 by default): the largest IP packet a frame may
    /// carry. A raw packet SEND of a longer frame fails with a local length error.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] outside the range.
    pub fn set_port_mtu(&self, mtu: u32) -> Result<(), SimError> {
        self.engine().set_mtu(mtu)
    }

    /// Whether the device computes a frame's IPv4 and TCP/UDP checksums on send, as a ConnectX
    /// with `IBV_DEVICE_RAW_IP_CSUM` does (on by default). Off, it models a device without
    /// that capability: a driver reports none (the `zverbs` crate's software provider then
    /// reports no checksum offload and refuses `IP_CSUM`), and the device leaves a frame's
    /// checksum fields as they were sent, whatever its WQE's `cs_flags` say.
    pub fn set_checksum_offload(&self, on: bool) {
        self.engine().set_checksum_offload(on);
    }

    /// Whether the device computes checksums on send ([`Device::set_checksum_offload`]).
    pub fn checksum_offload(&self) -> bool {
        self.engine().checksum_offload()
    }

    /// A frame arriving at the port from outside (what an attached port feeds in), from the
    /// destination MAC to the end of the payload, without the FCS: steered by the flow rules
    /// into receive queues, or dropped and counted in [`Stats`]. Must not be called from
    /// within [`EthPort::transmit`] of this device (its lock is held there).
    pub fn receive_frame(&self, frame: &[u8]) {
        self.engine().receive_external(frame);
    }

    /// Creates a receive work queue (`ibv_create_wq`, and `mlx5dv_create_wq` for a striding
    /// one), in RESET: [`Device::ready_wq`] makes it take frames. Its completions go to
    /// `cfg.cq` with its WQN as the user index.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::InvalidConfig`] for sizes or striding parameters
    /// out of range or the two-byte shift, [`SimError::TooMany`], [`SimError::OutOfMemory`].
    pub fn create_wq(&self, cfg: WqConfig) -> Result<SimWq, SimError> {
        self.engine().create_wq(cfg)
    }

    /// Drives a receive work queue whose ring and doorbell record someone else allocated
    /// (libmlx5 behind an emulated ConnectX, `ibv_create_wq` / `mlx5dv_create_wq`): `cnt`
    /// WQEs at `buf` with the stride `cfg` implies (as [`SimWq`] describes the layout), a
    /// one-word doorbell record, and `uidx` as the user index of its CQEs (the driver's
    /// `user_index`, by which libmlx5 finds the queue). In RESET, as [`Device::create_wq`].
    /// Returns its number.
    ///
    /// # Safety
    ///
    /// The ring and the record are valid for reads and writes for the device's whole life
    /// (or until [`Device::destroy_wq`]) and are written only as an mlx5 driver writes them.
    ///
    /// # Errors
    ///
    /// As [`Device::create_wq`], and [`SimError::InvalidConfig`] for a count that is not a
    /// power of two or above 32768.
    pub unsafe fn create_wq_external(
        &self,
        cfg: WqConfig,
        buf: NonNull<u8>,
        cnt: u32,
        dbrec: NonNull<u32>,
        uidx: u32,
    ) -> Result<u32, SimError> {
        // SAFETY: (caller) valid for the device's life.
        unsafe { self.engine().create_wq_external(cfg, buf, cnt, dbrec, uidx) }
    }

    /// Moves work queue `wqn` to ready (`ibv_modify_wq` to `IBV_WQS_RDY`); from RESET it
    /// starts at its first WQE.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchWq`].
    pub fn ready_wq(&self, wqn: u32) -> Result<(), SimError> {
        self.engine().ready_wq(wqn)
    }

    /// Moves work queue `wqn` back to RESET (`ibv_modify_wq` to `IBV_WQS_RESET`): it places
    /// no frame until [`Device::ready_wq`], which starts it again at its first WQE.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchWq`].
    pub fn reset_wq(&self, wqn: u32) -> Result<(), SimError> {
        self.engine().reset_wq(wqn)
    }

    /// Destroys work queue `wqn`; refused while an indirection table names it.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchWq`], [`SimError::InvalidConfig`] while in use.
    pub fn destroy_wq(&self, wqn: u32) -> Result<(), SimError> {
        self.engine().destroy_wq(wqn)
    }

    /// Creates an indirection table over the work queues `wqns` (`ibv_create_rwq_ind_table`;
    /// a power of two of them, at most 2^13, repeats allowed); returns its handle.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for the length, [`SimError::NoSuchWq`],
    /// [`SimError::OutOfMemory`].
    pub fn create_rwq_ind_table(&self, wqns: &[u32]) -> Result<u32, SimError> {
        self.engine().create_ind_table(wqns)
    }

    /// Destroys indirection table `handle`; refused while an RSS QP uses it.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchIndTable`], [`SimError::InvalidConfig`] while in use.
    pub fn destroy_rwq_ind_table(&self, handle: u32) -> Result<(), SimError> {
        self.engine().destroy_ind_table(handle)
    }

    /// Creates an RSS QP (`ibv_create_qp_ex` of a raw packet QP with an indirection table
    /// and `rx_hash_conf`, Toeplitz); returns its handle, which flow rules name
    /// ([`FlowDest::Rss`]). (The kernel answers QPN 0 for every RSS QP.)
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for IPv6 fields or the ports of both transports,
    /// [`SimError::NoSuchIndTable`], [`SimError::OutOfMemory`].
    pub fn create_rss_qp(&self, cfg: RssConfig) -> Result<u32, SimError> {
        self.engine().create_rss_qp(cfg)
    }

    /// Destroys RSS QP `handle`; refused while a flow rule steers to it.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchRssQp`], [`SimError::InvalidConfig`] while in use.
    pub fn destroy_rss_qp(&self, handle: u32) -> Result<(), SimError> {
        self.engine().destroy_rss_qp(handle)
    }

    /// Creates a flow rule (`ibv_create_flow`, `IBV_FLOW_ATTR_NORMAL`); returns its handle.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for a priority above 15, a spec that cannot be a rule, a
    /// QP that is no raw packet QP, a tag of more than 24 bits or another tag than a rule of
    /// the same match and priority carries, [`SimError::NoSuchQp`],
    /// [`SimError::NoSuchRssQp`], [`SimError::OutOfMemory`].
    pub fn create_flow(&self, attr: FlowAttr) -> Result<u32, SimError> {
        self.engine().create_flow(attr)
    }

    /// Removes flow rule `handle` (`ibv_destroy_flow`).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchFlow`].
    pub fn destroy_flow(&self, handle: u32) -> Result<(), SimError> {
        self.engine().destroy_flow(handle)
    }

    /// Stamps every CQE of `cqn` written from now on with the real-time clock in a
    /// ConnectX's real-time format (`seconds << 32 | nanoseconds`, [`clock::real_time_of`]),
    /// as for a CQ created with `MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS`;
    /// [`Device::enable_cq_timestamps`] stamps the free-running counter instead.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`].
    pub fn enable_cq_real_time_timestamps(&self, cqn: u32) -> Result<(), SimError> {
        let mut e = self.engine();
        let clock = e.clock;
        let cq = e.cq_mut(cqn)?;
        cq.stamp = Some(clock);
        cq.real_time = true;
        Ok(())
    }
}

impl Device {
    /// Moves QP `qpn` to RESET (as `ibv_modify_qp` to `IBV_QPS_RESET`), from any state, the
    /// error state included: it is no longer connected, its consumer counters restart at 0,
    /// and whatever of its old incarnation the device had not carried out is discarded without
    /// a completion (as on a ConnectX: drain the QP first, see `docs/sim.md`). The driver
    /// clears the QP's doorbell record, as libmlx5 does. Connect it again with
    /// [`Device::connect_to`] (to any peer). Returns the CQEs of the old incarnation the
    /// device still held back (`hold_completions`), now dropped.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn reset_qp(&self, qpn: u32) -> Result<usize, SimError> {
        self.engine().reset_qp(qpn)
    }
}
