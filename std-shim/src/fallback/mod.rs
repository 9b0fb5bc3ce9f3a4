//! The libibverbs fallback's queues and poller, public as [`crate::backend::verbs`].

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
