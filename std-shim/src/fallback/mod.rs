//! The libibverbs fallback: the data path for every device that is not driven directly.
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

mod poller;
pub(crate) mod raw;
mod rq;
mod sq;
mod state;
mod ud;

pub use poller::{Binding, Poller};
pub use rq::RecvQueue;
pub(crate) use sq::post_drain_marker;
pub use sq::{RingError, SendQueue};
pub use state::{RqShared, SqShared};
pub use ud::{SrqQueue, ud_send_wr};

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;
