//! Prepared requests on a directly driven RC send queue: built once by
//! [`prepare_rdma`](direct::SendQueue::prepare_rdma) or
//! [`prepare_send`](direct::SendQueue::prepare_send), posted with what changes
//! ([`Changes`]). See `zverbs_mlx5dv`'s `SendQueue::post_prepared` for what is built once and
//! what each post still checks.

use zverbs_core::{PostError, SendWr};
use zverbs_mlx5dv::{Changes, Prepared, PreparedRdma, PreparedSend};

use super::direct;
impl direct::SendQueue {
    /// Prepares a 1-SGE WRITE, WRITE with immediate or READ (`zverbs_mlx5dv`'s
    /// `SendQueue::prepare_rdma`).
    ///
    /// # Errors
    ///
    /// As `zverbs_mlx5dv`'s `SendQueue::prepare_rdma`.
    pub fn prepare_rdma(&self, template: &SendWr<'_>) -> Result<PreparedRdma, PostError> {
        self.q.prepare_rdma(template)
    }

    /// Prepares a 1-SGE SEND or SEND with immediate.
    ///
    /// # Errors
    ///
    /// As `zverbs_mlx5dv`'s `SendQueue::prepare_send`.
    pub fn prepare_send(&self, template: &SendWr<'_>) -> Result<PreparedSend, PostError> {
        self.q.prepare_send(template)
    }

    /// Posts a prepared request with what changes, and rings.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`](zverbs_core::PostSend) for the request.
    ///
    /// # Errors
    ///
    /// As `zverbs_mlx5dv`'s `SendQueue::post_prepared`; then nothing was written.
    #[inline(always)]
    pub unsafe fn post_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded.
        unsafe { self.q.post_prepared(p, c) }
    }

    /// Writes a prepared request without ringing ([`PostSend::ring`](zverbs_core::PostSend::ring)
    /// rings it).
    ///
    /// # Safety
    ///
    /// As [`direct::SendQueue::post_prepared`].
    ///
    /// # Errors
    ///
    /// As [`direct::SendQueue::post_prepared`].
    #[inline(always)]
    pub unsafe fn stage_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded.
        unsafe { self.q.stage_prepared(p, c) }
    }
}
