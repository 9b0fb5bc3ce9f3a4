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

use crate::error::{Error, Result};
pub use crate::queues::{AnyPoller, AnyRecvQueue, AnySrqQueue};
pub use crate::sq::TypedSq;
pub use crate::typed::{QueueSet, Queues};

/// The mlx5 direct backend's typed handles, for loops monomorphised for it
/// ([`Queues::Direct`]); the [`SendQueue`](crate::SendQueue) and the other front-door handles
/// hold them.
pub mod mlx5 {
    pub use crate::queues::direct::{
        Connected, Datagram, Dci, Ethernet, Poller, RecvQueue, RqStateHandle, SelfAddressed,
        SendQueue, SqStateHandle, SqTransport, SrqQueue,
    };
}

pub mod verbs {
    //! The libibverbs fallback's typed handles, for loops monomorphised for it
    //! ([`Queues::Verbs`](super::Queues::Verbs)): the data path for every device that is not
    //! driven directly.
    //!
    //! Requests go through the provider's `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`
    //! (reached through `ibv_context.ops`, as `verbs.h` does), with the `ibv_send_wr`, `ibv_sge`,
    //! `ibv_recv_wr` and `ibv_wc` arrays allocated once when the queue is created: nothing is
    //! allocated per operation.
    //!
    //! The semantics are those of the [`zverbs_core`] traits, the same as the direct backend's:
    //!
    //! - [`PostSend::stage`](zverbs_core::PostSend::stage) validates the request (scatter
    //!   entries, inline size, atomic size and alignment, message size, room in the send queue and
    //!   in the CQ) and stages it into the preallocated array; inline payloads are copied at once
    //!   into staging memory, so the caller may reuse them when the call returns. Nothing reaches
    //!   the provider until [`ring`](zverbs_core::PostSend::ring), which posts the staged chain with
    //!   one `ibv_post_send`.
    //! - If the provider refuses the chain at `ring` (its `bad_wr` names the first request not
    //!   posted), the refused requests are dropped: they never complete and their queue room is
    //!   returned. The next `post_send` reports the refusal as
    //!   [`PostError::Verbs`](zverbs_core::PostError::Verbs) with the provider's errno (and
    //!   [`SendQueue::take_ring_error`] tells which requests were dropped).
    //! - NOP is [`PostError::Unsupported`](zverbs_core::PostError::Unsupported): libibverbs has no
    //!   NOP work request.
    //! - Immediates are given and reported in host order, converted to and from the big-endian
    //!   `imm_data` of `ibv_send_wr` / `ibv_wc`.
    //! - Completions are reported as the direct backend reports them: `byte_len` is the received
    //!   length, the READ length, 8 for atomics and 0 for WRITE and SEND; error completions carry
    //!   the request's opcode.
    //!
    //! The [`SendQueue`] is both the one a [`Queues::Verbs`](super::Queues::Verbs) holds and
    //! one over a QP of the caller's (its `unsafe` constructor); [`raw`] has the receive queues
    //! and the poller over libibverbs objects of the caller's.

    pub use crate::fallback::{Binding, RingError, RqShared, SendQueue, SqShared, ud_send_wr};
    pub use crate::queues::verbs::{Poller, RecvQueue, SrqQueue};

    /// The fallback's receive queues and poller over libibverbs objects the caller created
    /// and keeps alive (`ibv_qp`, `ibv_srq`, `ibv_cq`, given by pointer to their `unsafe`
    /// constructors): what [`verbs::Poller`](crate::backend::verbs::Poller),
    /// [`verbs::RecvQueue`](crate::backend::verbs::RecvQueue) and
    /// [`verbs::SrqQueue`](crate::backend::verbs::SrqQueue) hold with the zverbs objects they
    /// keep alive.
    pub mod raw {
        pub use crate::fallback::{Poller, RecvQueue, SrqQueue};
    }
}
pub(crate) use crate::types::backend::DirectSupport;
pub use crate::types::backend::{
    BACKEND_ENV, BackendChoice, BackendKind, BackendReport, BackendRequest, BlueFlame,
    RequestSource,
};

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
