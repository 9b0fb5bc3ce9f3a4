//! # zverbs-emu: an emulated ConnectX in userspace
//!
//! Debian's unmodified libibverbs and libmlx5 (rdma-core 44) drive the software mlx5 device
//! ([`zverbs_sim`]) as if it were a ConnectX-6:
//!
//! - [`sysfs`] writes the fake sysfs tree that makes libibverbs find `mlx5_0` (through
//!   `SYSFS_PATH`);
//! - the library, loaded with `LD_PRELOAD` (this crate's `cdylib`), answers the uverbs
//!   commands libibverbs and libmlx5 send to `/dev/infiniband/uverbs0`: device, port and GID
//!   queries, PDs, memory regions, CQs and RC QPs, with the software device behind them, which
//!   executes the WQEs libmlx5 writes and writes the CQEs libmlx5 polls;
//! - device instances in different processes reach each other through a local channel
//!   ([`fabric`]: abstract Unix sockets, found by LID, admitting only processes of the same
//!   user and the same emulated fabric), so two unmodified programs (perftest's server and
//!   client, `ibv_rc_pingpong`) talk RC to each other.
//!
//! `cargo xtask emu -- <program> [args]` runs any program on it; `docs/emulator.md` says what
//! is emulated and what is not.
//!
//! ## Environment
//!
//! - `ZVERBS_EMU_LOG=1`: log every command and connection to stderr.
//! - `ZVERBS_EMU_ABI=write`: refuse the ioctl ABI, so libibverbs sends every command with
//!   `write()`.
//! - `ZVERBS_EMU_NS=name`: the namespace of the channel (processes see each other only
//!   within one); `ZVERBS_EMU_LID=n`: ask for LID `n`.
//! - `SYSFS_PATH`: besides the tree libibverbs reads, the fabric's key
//!   ([`fabric::hello::KEY_FILE`], written with the tree): processes admit one another only
//!   when they hold the same key.
//! - `ZVERBS_EMU_DYN_BFREGS=n`: the dynamic BlueFlame registers a context gets (default
//!   1024, as the kernel gives; 0 leaves none for thread domains, [`uar`]).
//! - Faults (port down/up, QP fatal, device fatal) are injected with
//!   [`async_events::inject`] from the program, or from outside with `zverbs-emu inject PID
//!   FAULT` ([`async_events`]); the program reads them with `ibv_get_async_event`.
//! - `ZVERBS_EMU_ETH_IF=ifname`: the Linux interface the Ethernet function's port is
//!   ([`port`]: an `AF_PACKET` socket on it); unset, the port loops its frames back.
//!   `ZVERBS_EMU_ETH_MIN_INLINE=l2` makes it report an L2 minimum inline (default none).
//! - `ZVERBS_EMU_BF_WATCH=1`: the device watches every store to the UAR pages and counts torn
//!   BlueFlame copies ([`watch`]; x86-64).
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

pub mod abi;
pub mod async_events;
pub mod channel;
pub mod device;
pub mod fabric;
mod fds;
pub mod port;
mod preload;
pub mod stats;
pub mod sysfs;
pub mod uar;
pub mod verbs;
pub mod watch;

use std::sync::atomic::{AtomicU8, Ordering};

/// Whether `ZVERBS_EMU_LOG` is set (checked once).
fn logging() -> bool {
    static ON: AtomicU8 = AtomicU8::new(0);
    match ON.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("ZVERBS_EMU_LOG").is_some_and(|v| !v.is_empty() && v != "0");
            ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Logs a line to stderr when `ZVERBS_EMU_LOG` is set.
pub(crate) fn log(args: std::fmt::Arguments<'_>) {
    if logging() {
        eprintln!("[zverbs-emu {}] {args}", std::process::id());
    }
}
