//! Which data path drives a queue: the backends, what was asked for and why one was chosen.
//! The choice itself (the caller's request, then `ZVERBS_BACKEND`) is made in
//! [`backend`](crate::backend).

use std::fmt;

/// The environment variable that overrides the automatic choice.
pub const BACKEND_ENV: &str = "ZVERBS_BACKEND";

/// A data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// `zverbs-mlx5dv`: WQEs written straight into the queue memory, doorbells and CQ polling
    /// without rdma-core.
    Direct,
    /// libibverbs' `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq` through the provider.
    Verbs,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Direct => "direct (mlx5)",
            BackendKind::Verbs => "verbs (libibverbs)",
        })
    }
}

/// What the caller asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackendRequest {
    /// The direct backend where the device allows it, the fallback elsewhere.
    #[default]
    Auto,
    /// The direct backend, or an error.
    Direct,
    /// The libibverbs fallback, even on mlx5.
    Verbs,
}

impl fmt::Display for BackendRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendRequest::Auto => "auto",
            BackendRequest::Direct => "direct",
            BackendRequest::Verbs => "verbs",
        })
    }
}

/// Where a request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestSource {
    /// Set by the caller in code.
    Caller,
    /// Read from `ZVERBS_BACKEND`.
    Environment,
    /// Nothing was set.
    Default,
}

/// A request with where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendChoice {
    /// What was asked.
    pub request: BackendRequest,
    /// Who asked.
    pub source: RequestSource,
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            RequestSource::Caller => write!(f, "{} (set by the caller)", self.request),
            RequestSource::Environment => write!(f, "{} (from {BACKEND_ENV})", self.request),
            RequestSource::Default => write!(f, "{} (default)", self.request),
        }
    }
}

/// The backend that drives a queue and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendReport {
    /// The backend in use.
    pub kind: BackendKind,
    /// What was asked for.
    pub choice: BackendChoice,
    /// Why this backend: the provider, what `mlx5dv_init_obj` said, doorbell-only or BlueFlame,
    /// and for a directly driven QP how it holds its BlueFlame register.
    pub reason: String,
    /// For a directly driven QP: how it holds its BlueFlame register, when it was created
    /// ([`Qp::blueflame`](crate::Qp::blueflame) tells how many QPs share it now). `None` for
    /// CQs and for QPs on the fallback.
    pub blueflame: Option<BlueFlame>,
}

/// How a directly driven QP holds its BlueFlame register.
///
/// libmlx5 gives a QP a register of its own while it has some; afterwards it makes QPs share
/// registers, and posts on QPs sharing one must take turns or their BlueFlame copies tear.
/// The control path gives every direct QP a register of its own where the device allows it (a
/// thread domain per QP), and otherwise makes exactly the QPs on one register share a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlueFlame {
    /// No BlueFlame (the device offers none, or `MLX5_SHUT_UP_BF`): posts ring the 8-byte
    /// doorbell, one store that cannot tear. Nothing is locked.
    DoorbellOnly,
    /// A register of the QP's own (a thread domain's UAR, or the software device's per-QP
    /// register). Posts take no lock.
    Dedicated,
    /// A register libmlx5 assigned and may give to other QPs: posts take the register's lock,
    /// which exactly the QPs on it share, and use its one buffer toggle. `others`: how many
    /// other QPs of this process are on it.
    Shared {
        /// Other QPs of this process on the register.
        others: usize,
    },
}

impl fmt::Display for BlueFlame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BlueFlame::DoorbellOnly => f.write_str("BlueFlame register: none (doorbell only)"),
            BlueFlame::Dedicated => f.write_str("BlueFlame register: dedicated"),
            BlueFlame::Shared { others: 0 } => f.write_str(
                "BlueFlame register: not dedicated (libmlx5 may share it), serialised; no other \
                 QP on it yet",
            ),
            BlueFlame::Shared { others: 1 } => {
                f.write_str("BlueFlame register: shared with 1 other QP, serialised")
            }
            BlueFlame::Shared { others } => write!(
                f,
                "BlueFlame register: shared with {others} other QPs, serialised"
            ),
        }
    }
}

impl fmt::Display for BackendReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}; requested {}",
            self.kind, self.reason, self.choice
        )
    }
}

/// Whether a device can run the direct backend, as its provider tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DirectSupport {
    /// Yes, with this explanation (e.g. "mlx5 provider").
    Yes(String),
    /// No, with the reason.
    No(String),
}
