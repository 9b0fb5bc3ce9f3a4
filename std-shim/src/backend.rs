//! Which data path drives a queue pair: the mlx5 direct backend or the libibverbs fallback,
//! how it is chosen, and how the choice is reported.
//!
//! Order of precedence: an explicit choice on the builder ([`CqBuilder::backend`],
//! [`QpBuilder::backend`]) or the context ([`ContextOptions::backend`]), then the environment
//! variable `ZVERBS_BACKEND=auto|direct|verbs`, then `auto`. `auto` picks the direct backend
//! when the device's provider is mlx5 and `mlx5dv_init_obj` describes the queues, and the
//! fallback otherwise. A forced `direct` that cannot be honoured is an error, never a silent
//! fallback.
//!
//! [`CqBuilder::backend`]: crate::CqBuilder::backend
//! [`QpBuilder::backend`]: crate::QpBuilder::backend
//! [`ContextOptions::backend`]: crate::ContextOptions::backend

use std::fmt;

use crate::error::{Error, Result};

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

impl BackendRequest {
    /// Parses `auto`, `direct` or `verbs` (case-insensitive).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for anything else.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Self::Auto),
            "direct" | "mlx5" | "dv" => Ok(Self::Direct),
            "verbs" | "ibverbs" | "fallback" => Ok(Self::Verbs),
            other => Err(Error::InvalidArgument(format!(
                "backend `{other}`: expected auto, direct or verbs"
            ))),
        }
    }
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

impl BackendChoice {
    /// The caller's explicit request if any, else `ZVERBS_BACKEND`, else `auto`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the variable holds an unknown value or one that is
    /// not UTF-8 (never ignored).
    pub fn resolve(explicit: Option<BackendRequest>) -> Result<Self> {
        if explicit.is_some() {
            return Self::resolve_with(explicit, None);
        }
        Self::resolve_with(None, crate::env::var(BACKEND_ENV)?.as_deref())
    }

    pub(crate) fn resolve_with(
        explicit: Option<BackendRequest>,
        env: Option<&str>,
    ) -> Result<Self> {
        if let Some(request) = explicit {
            return Ok(Self {
                request,
                source: RequestSource::Caller,
            });
        }
        if let Some(v) = env {
            let request = BackendRequest::parse(v).map_err(|_| {
                Error::InvalidArgument(format!("{BACKEND_ENV}={v}: expected auto, direct or verbs"))
            })?;
            return Ok(Self {
                request,
                source: RequestSource::Environment,
            });
        }
        Ok(Self {
            request: BackendRequest::Auto,
            source: RequestSource::Default,
        })
    }
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

/// Whether `MLX5_SHUT_UP_BF` asks for no BlueFlame (set and not `0`), as libmlx5 reads it:
/// the direct backend then rings the 8-byte doorbell too, whatever `bf.size` the device
/// reports.
pub(crate) fn shut_up_bf() -> bool {
    std::env::var_os("MLX5_SHUT_UP_BF").is_some_and(|v| v != "0")
}

/// Decides whether to try the direct backend for a new object.
///
/// Returns `Ok(true)` to try it, `Ok(false)` for the fallback, or an error when `direct` was
/// forced on a device that cannot run it.
pub(crate) fn want_direct(choice: BackendChoice, support: &DirectSupport) -> Result<bool> {
    match (choice.request, support) {
        (BackendRequest::Verbs, _) => Ok(false),
        (_, DirectSupport::Yes(_)) => Ok(true),
        (BackendRequest::Auto, DirectSupport::No(_)) => Ok(false),
        (BackendRequest::Direct, DirectSupport::No(reason)) => Err(Error::Backend {
            requested: BackendKind::Direct,
            reason: reason.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_caller_env_default() {
        let c = BackendChoice::resolve_with(Some(BackendRequest::Verbs), Some("direct")).unwrap();
        assert_eq!(
            (c.request, c.source),
            (BackendRequest::Verbs, RequestSource::Caller)
        );
        let c = BackendChoice::resolve_with(None, Some("Direct")).unwrap();
        assert_eq!(
            (c.request, c.source),
            (BackendRequest::Direct, RequestSource::Environment)
        );
        let c = BackendChoice::resolve_with(None, None).unwrap();
        assert_eq!(
            (c.request, c.source),
            (BackendRequest::Auto, RequestSource::Default)
        );
        let e = BackendChoice::resolve_with(None, Some("fast")).unwrap_err();
        assert!(e.to_string().contains("ZVERBS_BACKEND=fast"), "{e}");
    }

    #[test]
    fn blueflame_reports_read_as_documented() {
        assert_eq!(
            BlueFlame::Shared { others: 3 }.to_string(),
            "BlueFlame register: shared with 3 other QPs, serialised"
        );
        assert_eq!(
            BlueFlame::Shared { others: 1 }.to_string(),
            "BlueFlame register: shared with 1 other QP, serialised"
        );
        assert!(
            BlueFlame::Shared { others: 0 }
                .to_string()
                .contains("not dedicated")
        );
        assert_eq!(
            BlueFlame::Dedicated.to_string(),
            "BlueFlame register: dedicated"
        );
        assert!(
            BlueFlame::DoorbellOnly
                .to_string()
                .contains("doorbell only")
        );
    }

    #[test]
    fn forced_direct_on_other_provider_is_an_error() {
        let no = DirectSupport::No("provider is rxe, not mlx5".into());
        let yes = DirectSupport::Yes("mlx5".into());
        let choice = |request| BackendChoice {
            request,
            source: RequestSource::Caller,
        };
        assert!(!want_direct(choice(BackendRequest::Auto), &no).unwrap());
        assert!(want_direct(choice(BackendRequest::Auto), &yes).unwrap());
        assert!(!want_direct(choice(BackendRequest::Verbs), &yes).unwrap());
        let e = want_direct(choice(BackendRequest::Direct), &no).unwrap_err();
        assert!(e.to_string().contains("rxe"), "{e}");
    }
}
