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
//! ## Modes
//!
//! - **Stepped** (the default): nothing happens until the caller calls [`Device::step`] or
//!   [`Device::run_until_idle`]. Deterministic, for tests.
//! - **Progress thread**: [`Device::start`] runs a thread that steps the device whenever a
//!   doorbell record moves, spinning briefly and then yielding when idle, as the NIC would
//!   serve the queues; [`Device::stop`] (or dropping the device) ends it.
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
//! | bad rkey, remote span outside, missing remote right | remote access (0x13) | enters error |
//! | atomic target not 8-byte aligned | remote invalid request (0x12) | enters error |
//! | SEND longer than the receive | remote invalid request (0x12) | local length (0x01) on the receive |
//! | receive entry with a bad key, bounds or no local write | remote operation (0x14) | local protection (0x04) on the receive |
//! | SEND or WRITE imm and no receive posted, after `rnr_retry` retries | RNR retry exceeded (0x16) | — |
//! | peer QP in the error state, gone or not connected yet | transport retry exceeded (0x15) | — |
//! | peer QP connected to another QP (not the requester) | transport retry exceeded (0x15) | — (never reached) |
//!
//! Error and flush CQEs are written whether the WQE was signaled or not. A zero-length WRITE
//! or READ needs no valid remote key (IBA C9-88).
//!
//! ## Faults on demand
//!
//! [`Device::fail_next_wqe`] fails the next send WQE of a QP with a chosen syndrome;
//! [`Device::drop_next_recv`] makes the next message that needs a receive at a QP find none
//! (an RNR NAK, then retry or "RNR retry exceeded"); [`Device::delay_completions`] holds every
//! CQE of a CQ for a number of steps, [`Device::hold_completions`] until
//! [`Device::release_completions`]; [`Device::set_error`] moves a QP to the error state.
//!
//! ## Not modelled
//!
//! Timing and bandwidth, congestion, packet loss and retransmission (other than the RNR path),
//! PCIe and write-combining behaviour (BlueFlame writes land in ordinary memory and the device
//! reads WQEs from the ring), DMA ordering beyond "a message is placed in address order with
//! its last byte stored last". See `docs/sim.md`.
//!
//! Nothing is allocated per operation: rings, tables and the queue of held CQEs are sized when
//! the device, a QP or a CQ is created. Every size a caller passes is checked against the
//! device's limit before it is computed with: a value above it is [`SimError::InvalidConfig`]
//! naming the limit, never an overflow or a panic under the device's lock.
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

mod config;
mod cq;
mod engine;
mod mem;
mod mr;
pub mod vendor;
pub mod wire;
mod wqe;

use core::ptr::NonNull;
use core::time::Duration;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

pub use config::{
    Access, CqConfig, DeviceConfig, Mr, QpConfig, QpStatus, RNR_RETRY_INFINITE, SimCq, SimError,
    SimQp, Stats,
};

use engine::Engine;
pub use engine::Peer;
use wire::Wire;
use zverbs_mlx5dv::{CqLayout, QpLayout};

#[derive(Debug)]
struct Shared {
    engine: Mutex<Engine>,
    stop: AtomicBool,
    /// Nanoseconds the progress thread sleeps when long idle (0: it only yields).
    idle_sleep_ns: AtomicU64,
}

/// A software mlx5 device.
///
/// Every method takes `&self`: the device can be shared between the threads that drive its
/// queues (put it in an `Arc` or borrow it into scoped threads). The memory of its QPs and CQs
/// lives as long as the device.
#[derive(Debug)]
pub struct Device {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
                idle_sleep_ns: AtomicU64::new(0),
            }),
            thread: None,
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
    /// `layout.buf` holds `cqe_cnt` initialised 64-byte CQEs and `layout.dbrec` two words,
    /// both valid for reads and writes for the device's whole life, and used by the driver as
    /// an mlx5 CQ is.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`] for a count that is not a power of two, a CQE size other
    /// than 64 or a CQ number in use; [`SimError::TooMany`].
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
        self.engine().create_qp(cfg)
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

    /// Destroys QP `qpn`: from the return on, the device never touches its memory (a QP
    /// created with [`Device::create_qp_external`] can then be freed). Its number is not
    /// found any more.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`].
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), SimError> {
        self.engine().destroy_qp(qpn)
    }

    /// Destroys CQ `cqn`, as [`Device::destroy_qp`].
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::InvalidConfig`] while a QP uses it.
    pub fn destroy_cq(&self, cqn: u32) -> Result<(), SimError> {
        self.engine().destroy_cq(cqn)
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

    /// Starts the progress thread (does nothing if it runs).
    ///
    /// # Panics
    ///
    /// If the operating system cannot start a thread.
    pub fn start(&mut self) {
        if self.thread.is_some() {
            return;
        }
        self.shared.stop.store(false, Ordering::Relaxed);
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("zverbs-sim".into())
            .spawn(move || progress(&shared))
            .expect("spawn the device's progress thread");
        self.thread = Some(handle);
    }

    /// Stops the progress thread and waits for it (does nothing if it does not run).
    pub fn stop(&mut self) {
        if let Some(h) = self.thread.take() {
            self.shared.stop.store(true, Ordering::Relaxed);
            // A panic on the progress thread is a device bug; it surfaces in the tests' asserts.
            let _ = h.join();
        }
    }

    /// Lets the progress thread sleep for `d` at a time once it has been idle for a while
    /// (after spinning, then yielding), instead of yielding for ever: it leaves the CPU to the
    /// programs it serves on a small machine, at the cost of up to `d` of extra latency on the
    /// first doorbell after a pause. `Duration::ZERO` (the default) only yields.
    pub fn set_idle_sleep(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.shared.idle_sleep_ns.store(ns, Ordering::Relaxed);
    }

    /// Whether the progress thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.is_some()
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

    /// Holds every CQE of `cqn` produced from now on for `steps` device steps (0: no delay).
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchCq`], [`SimError::OutOfMemory`] when the queue of held CQEs (a ring's
    /// worth) cannot be allocated.
    pub fn delay_completions(&self, cqn: u32, steps: u64) -> Result<(), SimError> {
        self.engine().cq_mut(cqn)?.set_delay(steps)
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
/// passes instead of spinning (unless [`Device::set_idle_sleep`] chose a sleep).
const IDLE_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_millis(20);

/// The progress thread: steps while there is work, spins a little when idle, then yields; after
/// a long idle it sleeps between passes. [`Device::set_idle_sleep`] makes it sleep sooner (after
/// a few hundred idle passes) and for the chosen time.
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
            let sleep = shared.idle_sleep_ns.load(Ordering::Relaxed);
            if sleep > 0 && idle > SPIN + YIELD {
                std::thread::sleep(Duration::from_nanos(sleep));
            } else if idle > SPIN {
                // Long idle (a process that opened the device and went quiet): do not keep a
                // core busy; the next doorbell then waits at most one short sleep.
                if idle.is_multiple_of(1024) && last_work.elapsed() > IDLE_BEFORE_SLEEP {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    idle -= 1;
                } else {
                    std::thread::yield_now();
                }
            } else {
                core::hint::spin_loop();
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
    let p: NonNull<u8> = layout.buf;
    // SAFETY: (caller) the ring is live; `slot` is masked into it.
    unsafe { p.as_ptr().add(slot * 64).cast::<[u8; 64]>().read() }
}
