//! The control path's errors.

use std::io;
use std::time::Duration;

use zverbs_core::{BatchError, PostError, WcError};

use zverbs_ffi::load::LoadError;

use crate::types::backend::BackendKind;
use crate::types::buf::BufError;
use crate::types::device::{PortState, SOFTWARE_DEVICE};
use crate::types::eth::FlowRuleError;
use crate::types::qp::QpState;

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong on the control path. Each variant says what to do about it where there is
/// something to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An rdma-core library is missing: install the package it names.
    #[error("{0}")]
    Library(#[from] LoadError),
    /// No RDMA device was found. [`open_device`](crate::open_device) returns it when no device
    /// was named and the machine has no NIC: the software device is never opened in a NIC's
    /// place, and the hint says how to ask for it.
    #[error("no RDMA device found{}", no_device_detail(library.as_ref(), hint.as_deref()))]
    NoDevice {
        /// rdma-core's library, when it could not be loaded (the package to install is named).
        #[source]
        library: Option<LoadError>,
        /// Why, when it can be told (for example: kernel devices exist but no provider
        /// library), and what to do.
        hint: Option<String>,
    },
    /// No device has the requested name.
    #[error(
        "no RDMA device named `{name}`; devices: {}",
        device_list(name, available)
    )]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices that exist.
        available: Vec<String>,
    },
    /// The device has no port in the ACTIVE state.
    #[error(
        "device `{device}` has no active port ({}); check the link and, for RoCE, the network \
         interface",
        port_list(ports)
    )]
    NoActivePort {
        /// The device.
        device: String,
        /// Each port and its state.
        ports: Vec<(u8, PortState)>,
    },
    /// A verb failed; `source` carries its errno.
    #[error("{verb} failed: {source}")]
    Verbs {
        /// The libibverbs / librdmacm function that failed (`ibv_reg_mr`, ...).
        verb: &'static str,
        /// The errno.
        source: io::Error,
    },
    /// Registering memory failed because the locked-memory limit (`RLIMIT_MEMLOCK`) is too low.
    #[error("ibv_reg_mr of {requested} bytes failed ({source}): {}", memlock_advice(*limit))]
    MemlockLimit {
        /// Bytes the registration asked for.
        requested: usize,
        /// The soft limit in bytes (`None`: unlimited, and the failure has another cause).
        limit: Option<u64>,
        /// The errno `ibv_reg_mr` returned.
        source: io::Error,
    },
    /// A hugepage-backed buffer could not be mapped (no hugepages reserved, or too few).
    #[error(
        "cannot map {requested} bytes of hugepages ({source}); reserve some with \
         `echo 64 > /proc/sys/vm/nr_hugepages`, or use a plain buffer"
    )]
    NoHugepages {
        /// Bytes asked for (rounded to the hugepage size).
        requested: usize,
        /// Why `mmap` refused.
        source: io::Error,
    },
    /// The backend asked for cannot drive this object.
    #[error("the {requested} backend cannot be used: {reason}")]
    Backend {
        /// The backend that was required.
        requested: BackendKind,
        /// Why it cannot be used.
        reason: String,
    },
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A buffer access or allocation was refused.
    #[error(transparent)]
    Buf(#[from] BufError),
    /// A queue's data-path handle was already taken.
    #[error("the {0} was already taken")]
    AlreadyTaken(&'static str),
    /// A queue's data-path handle was asked for before its QP can use it: the send queue from
    /// RTS on, the receive queue from INIT on (so receives can be posted before the peer
    /// connects).
    #[error("the {queue} can be taken once the QP is in {needs}, and it is in {state}: {advice}")]
    NotReady {
        /// Which handle.
        queue: &'static str,
        /// The QP's state now.
        state: QpState,
        /// The first state in which the handle can be taken.
        needs: QpState,
        /// What to call first.
        advice: &'static str,
    },
    /// A post was refused; nothing was written (the queue's [`PostError`], or the
    /// [`safe`](crate::safe) layer's [`PostError`] inside its error).
    #[error(transparent)]
    Post(#[from] PostError),
    /// An all-or-nothing batch was refused; nothing of it was written.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The [`safe`](crate::safe) layer refused a post for a reason of its own (a refusal by the
    /// queue itself converts to [`Error::Post`]).
    #[error(transparent)]
    SafePost(SafePostError),
    /// A completion reported a failed request ([`Completion::ok`](zverbs_core::Completion::ok)).
    #[error(transparent)]
    Completion(#[from] WcError),
    /// Waiting for completions ended without them
    /// ([`Poller::wait`](crate::Poller::wait)).
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The direct backend rejected the layout rdma-core reported.
    #[error("the direct backend rejected the queue layout: {0}")]
    Layout(#[from] zverbs_mlx5dv::LayoutError),
    /// The peer could not be reached for the connection exchange.
    #[error("cannot reach the peer at {peer} ({source}); is the server running and the port open?")]
    PeerUnreachable {
        /// The peer's address as given.
        peer: String,
        /// The socket error.
        source: io::Error,
    },
    /// The peer answered with something that is not this protocol.
    #[error(
        "the peer does not speak this protocol: {detail} (is it the same tool, in the same mode?)"
    )]
    Protocol {
        /// What was expected and what arrived.
        detail: String,
    },
    /// The out-of-band connection failed after it was established.
    #[error("connection exchange failed while {during}: {source}")]
    Exchange {
        /// What was being done.
        during: &'static str,
        /// The socket error.
        source: io::Error,
    },
    /// The connection manager reported an unexpected event.
    #[error("rdma_cm: expected {expected}, got {got} (status {status})")]
    Cm {
        /// The event that was expected.
        expected: &'static str,
        /// The event that arrived (`rdma_event_str`), with its status.
        got: String,
        /// The event's status (a negative errno, or a reject reason).
        status: i32,
    },
    /// The device cannot timestamp completions (a CQ with timestamps, or its clock, was asked
    /// for).
    #[error("device `{device}` cannot timestamp completions: {reason}")]
    NoTimestamps {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
    /// [`Qp::reset`](crate::Qp::reset) was asked for while requests the device was given
    /// have not completed yet: their completions (a flush completion each, once the QP is in
    /// the error state) must be polled first, or they would reach the QP's next incarnation.
    #[error(
        "the QP is not drained: {send} send slots and {recv} receives not completed yet; poll          their completions first (Qp::to_error flushes them)"
    )]
    NotDrained {
        /// Send-queue slots given to the device and not yet completed (basic blocks on the
        /// direct path, requests on the fallback).
        send: u32,
        /// Receives given to the device and not yet completed.
        recv: u32,
    },
    /// A CQ cannot hold every completion that may land in it: each QP and SRQ attached holds
    /// its share (its receives, its signaled sends), and what is left is not enough for a new
    /// one. Make the CQ larger, or ask for fewer receives or signaled sends
    /// ([`QpBuilder::max_signaled`](crate::QpBuilder::max_signaled)).
    #[error(
        "the CQ of {cqe} entries has {left} left, and {what} needs {needed}: create a larger CQ, \
         or ask for fewer receives or signaled sends (QpBuilder::max_signaled)"
    )]
    CqTooSmall {
        /// The CQ's entries.
        cqe: u32,
        /// Entries no QP or SRQ holds yet.
        left: u32,
        /// What asked: a QP's receive queue, its signaled sends, an SRQ.
        what: &'static str,
        /// The entries it needs.
        needed: u32,
    },
    /// Arming a CQ or waiting for its completion event failed.
    #[error(transparent)]
    Event(#[from] EventError),
    /// A CQ with compressed CQEs ([`CqBuilder::compressed`](crate::CqBuilder::compressed))
    /// cannot be had here: the device does not compress CQEs (or not in that format), or the
    /// CQ would not be polled by the direct backend, the one poller that expands them.
    #[error("device `{device}` cannot give a CQ with compressed CQEs: {reason}")]
    NoCqeCompression {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
    /// Raw packet QPs and flow rules need the `CAP_NET_RAW` capability, which the process
    /// does not have (checked before the kernel is asked; the kernel's EPERM means the same).
    #[error(
        "{verb}: raw packet QPs and flow rules need the CAP_NET_RAW capability; run as root, or \
         grant it (`setcap cap_net_raw+ep <program>`, or `--cap-add NET_RAW` in a container)"
    )]
    NeedsCapNetRaw {
        /// What was being created.
        verb: &'static str,
    },
    /// The device has no raw packet QPs (rxe and siw have none; a port whose link layer is
    /// not Ethernet has none either).
    #[error("device `{device}` has no raw packet QPs: {reason}")]
    NoRawPacket {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
    /// Joining an IPv4 multicast group through a kernel socket failed.
    #[error("cannot join multicast group {group} on `{interface}`: {source}")]
    McastJoin {
        /// The group.
        group: std::net::Ipv4Addr,
        /// The interface.
        interface: String,
        /// The socket error.
        source: io::Error,
    },
    /// A flow rule was refused, by the library's check or by the kernel.
    #[error(transparent)]
    FlowRule(#[from] FlowRuleError),
    /// An ordinary (one frame per WQE) Ethernet receive queue driven by the direct backend
    /// on an rdma-core device needs its receive CQ to itself: its completions carry the flow
    /// tag where the QP number would be and name the queue only by a user index libmlx5
    /// chose, so the direct poller takes every receive completion of the CQ as that queue's.
    /// Refused when the CQ serves other queues, and refused to any other queue on a CQ that
    /// serves one such queue. The message says the way out.
    #[error("{what} cannot complete on this CQ: {reason}")]
    SoleReceiverCq {
        /// The queue refused: a raw packet QP's or a work queue's receive queue, or another
        /// queue asking for entries of the CQ.
        what: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A striding receive work queue was asked of the libibverbs fallback, which cannot drive
    /// one: `ibv_post_wq_recv` writes no striding WQE and `ibv_poll_cq` retires one WQE per
    /// completion (use the direct backend, on an mlx5 device).
    #[error("a striding receive work queue needs the direct backend: {0}")]
    StridingNeedsDirect(String),
}

impl Error {
    /// A failed verb with the errno read from `errno` (for verbs that return NULL or -1).
    pub(crate) fn last_os(verb: &'static str) -> Self {
        Self::Verbs {
            verb,
            source: io::Error::last_os_error(),
        }
    }

    /// A failed verb that returned its errno (positive) or -1 with `errno` set.
    pub(crate) fn from_ret(verb: &'static str, ret: i32) -> Self {
        let source = if ret > 0 {
            io::Error::from_raw_os_error(ret)
        } else if ret < -1 {
            io::Error::from_raw_os_error(-ret)
        } else {
            io::Error::last_os_error()
        };
        Self::Verbs { verb, source }
    }

    /// The error of raw packet object `verb` that failed with `errno`: EPERM is the missing
    /// `CAP_NET_RAW` ([`Error::NeedsCapNetRaw`]), anything else a [`Error::Verbs`].
    pub(crate) fn raw_verb(verb: &'static str, errno: i32) -> Self {
        if errno == libc::EPERM {
            return Self::NeedsCapNetRaw { verb };
        }
        Self::Verbs {
            verb,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The error of `ibv_create_flow` that failed with `errno`: the kernel's refusals of a
    /// rule as what they mean ([`FlowRuleError`]), EPERM as [`Error::NeedsCapNetRaw`].
    pub(crate) fn flow_verb(errno: i32, priority: u16) -> Self {
        match errno {
            libc::ENOMEM | libc::ENOSPC if priority >= crate::types::eth::FLOW_PRIORITIES => {
                FlowRuleError::Priority(priority).into()
            }
            libc::EEXIST => FlowRuleError::ConflictingTag.into(),
            libc::EOPNOTSUPP => {
                FlowRuleError::Unsupported("the kernel answered EOPNOTSUPP".into()).into()
            }
            e => Self::raw_verb("ibv_create_flow", e),
        }
    }

    /// The errno behind the error, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verbs { source, .. }
            | Error::MemlockLimit { source, .. }
            | Error::NoHugepages { source, .. }
            | Error::PeerUnreachable { source, .. }
            | Error::Exchange { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl From<SafePostError> for Error {
    /// A refusal by the queue becomes [`Error::Post`], whichever layer reported it.
    fn from(e: SafePostError) -> Self {
        match e {
            SafePostError::Post(e) => Error::Post(e),
            e => Error::SafePost(e),
        }
    }
}

/// What can go wrong arming a CQ or waiting for its event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The CQ was created without a completion channel: it raises no events.
    #[error("the CQ has no completion channel (create it with CqBuilder::channel)")]
    NoChannel,
    /// The deadline passed before a completion arrived.
    #[error("no completion within {0:?}")]
    Timeout(Duration),
    /// The device cannot make completion channels.
    #[error("the device {0} has no completion channels")]
    Unsupported(String),
    /// Waiting on the channel's descriptor failed.
    #[error("waiting on the completion channel failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a safe post was refused. Nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SafePostError {
    /// The device would write into a buffer registered without `LOCAL_WRITE`.
    #[error("the device would write into a buffer registered without LOCAL_WRITE")]
    NotWritable,
    /// The queue refused the request.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A post of a prepared request reached outside what was prepared: its local span past the
    /// prepared slice, or its remote offset past the end of the address space.
    #[error(
        "a prepared request's post reaches outside it (offset {offset}, length {len}, prepared \
         span {span} bytes)"
    )]
    OutsidePrepared {
        /// The offset asked for, in the prepared slice.
        offset: u32,
        /// The length asked for.
        len: u32,
        /// The prepared slice's length.
        span: u32,
    },
    /// A prepared request posted on a queue it was not prepared for.
    #[error("the request was prepared for another send queue")]
    ForeignPrepared,
    /// A UD or DC request prepared to a target whose address handle was made in another
    /// protection domain than the queue's QP (a QP sends only through address handles of its
    /// own PD).
    #[error("the target's address handle belongs to another protection domain than the queue's QP")]
    ForeignTarget,
}

/// Why [`Poller::wait`](crate::Poller::wait) (spinning) or
/// [`Poller::wait_blocking`](crate::Poller::wait_blocking) (sleeping) returned without its
/// completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// The deadline passed first. The completions that did arrive stay in the poller: the next
    /// wait or [`Poller::ready`](crate::Poller::ready) returns them first.
    #[error(
        "{got} of {wanted} completions arrived before the deadline (a request not signaled, a \
         peer not answering, or a deadline too short?)"
    )]
    Timeout {
        /// Completions asked for.
        wanted: usize,
        /// Completions that arrived (kept for the next call).
        got: usize,
    },
    /// More completions asked for than the poller holds.
    #[error("asked for {count} completions; the poller holds at most {capacity}")]
    TooMany {
        /// Completions asked for.
        count: usize,
        /// The poller's capacity ([`Poller::capacity`](crate::Poller::capacity)).
        capacity: usize,
    },
    /// A sleeping wait on a CQ created without a completion channel
    /// ([`CqBuilder::channel`](crate::CqBuilder::channel)).
    #[error("the CQ has no completion channel (create it with CqBuilder::channel)")]
    NoChannel,
    /// Arming the CQ or sleeping on its channel failed with this errno (`ibv_req_notify_cq`,
    /// `ibv_get_cq_event`, `poll(2)`).
    #[error("arming the CQ or waiting on its channel failed (errno {errno})")]
    Channel {
        /// The errno (-1 when the failure had none).
        errno: i32,
    },
}

impl WaitError {
    /// What a failure of the channel's machinery is as a wait's error.
    pub(crate) fn of(e: Error) -> Self {
        match e {
            Error::Event(EventError::NoChannel) => Self::NoChannel,
            Error::Wait(w) => w,
            Error::Verbs { source, .. } | Error::Event(EventError::Io(source)) => Self::Channel {
                errno: source.raw_os_error().unwrap_or(-1),
            },
            _ => Self::Channel { errno: -1 },
        }
    }
}

/// The detail of [`Error::NoDevice`]'s message.
fn no_device_detail(library: Option<&LoadError>, hint: Option<&str>) -> String {
    match (library, hint) {
        (Some(l), Some(h)) => format!(": {l}; {h}"),
        (Some(l), None) => format!(": {l}"),
        (None, Some(h)) => format!(": {h}"),
        (None, None) => " (load a driver, or create a soft-RoCE device: \
                         `rdma link add rxe0 type rxe netdev <if>`)"
            .to_string(),
    }
}

/// The device list of [`Error::DeviceNotFound`]'s message.
fn device_list(name: &str, available: &[String]) -> String {
    let mut s = if available.is_empty() {
        "none".to_string()
    } else {
        available.join(", ")
    };
    if name == SOFTWARE_DEVICE && !cfg!(feature = "sim") {
        s.push_str(
            " (the software device is left out of this build: enable the `sim` feature of \
             zverbs)",
        );
    }
    s
}

/// The ports of [`Error::NoActivePort`]'s message.
fn port_list(ports: &[(u8, PortState)]) -> String {
    let list: Vec<String> = ports
        .iter()
        .map(|(p, s)| format!("port {p}: {s}"))
        .collect();
    list.join(", ")
}

/// The advice of [`Error::MemlockLimit`]'s message.
fn memlock_advice(limit: Option<u64>) -> String {
    match limit {
        Some(l) => format!(
            "the locked-memory limit is {l} bytes; raise it with `ulimit -l unlimited` (or \
             memlock in /etc/security/limits.conf, LimitMEMLOCK for systemd)"
        ),
        None => "the locked-memory limit is already unlimited".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verb_errors_carry_verb_and_errno() {
        let e = Error::from_ret("ibv_modify_qp", libc::EINVAL);
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(e.to_string().starts_with("ibv_modify_qp failed:"), "{e}");
        let e = Error::from_ret("ibv_poll_cq", -libc::EAGAIN);
        assert_eq!(e.errno(), Some(libc::EAGAIN));
    }

    /// The kernel's EPERM on a raw packet QP or a flow rule is the missing capability, named
    /// with what grants it; its refusals of a rule are the rule's errors.
    #[test]
    fn raw_errnos_become_typed_errors() {
        let e = Error::raw_verb("ibv_create_qp", libc::EPERM);
        assert!(matches!(
            e,
            Error::NeedsCapNetRaw {
                verb: "ibv_create_qp"
            }
        ));
        assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
        assert_eq!(
            Error::raw_verb("ibv_create_qp", libc::EINVAL).errno(),
            Some(libc::EINVAL)
        );
        assert!(matches!(
            Error::flow_verb(libc::ENOMEM, 16),
            Error::FlowRule(FlowRuleError::Priority(16))
        ));
        assert!(matches!(
            Error::flow_verb(libc::ENOSPC, 20),
            Error::FlowRule(FlowRuleError::Priority(20))
        ));
        // ENOMEM at a valid priority is the memory it says.
        assert_eq!(
            Error::flow_verb(libc::ENOMEM, 3).errno(),
            Some(libc::ENOMEM)
        );
        assert!(matches!(
            Error::flow_verb(libc::EEXIST, 0),
            Error::FlowRule(FlowRuleError::ConflictingTag)
        ));
        assert!(matches!(
            Error::flow_verb(libc::EPERM, 0),
            Error::NeedsCapNetRaw {
                verb: "ibv_create_flow"
            }
        ));
    }

    #[test]
    fn memlock_message_says_ulimit() {
        let e = Error::MemlockLimit {
            requested: 1 << 20,
            limit: Some(65536),
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        };
        let s = e.to_string();
        assert!(s.contains("ulimit -l"), "{s}");
        assert!(s.contains("65536"), "{s}");
    }

    #[test]
    fn library_error_names_package() {
        let e: Error = LoadError {
            library: "libibverbs.so.1",
            package: "libibverbs1",
            detail: "not found".into(),
        }
        .into();
        assert!(e.to_string().contains("`libibverbs1`"));
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn a_misaligned_register_is_a_layout_error_that_names_it() {
        let e: Error = zverbs_mlx5dv::LayoutError::BfMisaligned {
            addr: 0x7f00_0000_0808,
            align: 16,
        }
        .into();
        assert!(matches!(e, Error::Layout(_)));
        assert_eq!(
            e.to_string(),
            "the direct backend rejected the queue layout: the doorbell/BlueFlame register at \
             0x7f0000000808 is not 16-byte aligned"
        );
    }
}
