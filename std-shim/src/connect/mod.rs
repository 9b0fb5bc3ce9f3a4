//! Connection set-up: telling each side of an RC connection where the other is.
//!
//! - [`exchange`]: an out-of-band TCP exchange of QP number, PSN, LID and GID,
//!   wire-compatible with rdma-core's `ibv_rc_pingpong`, with an optional extension record
//!   for a remote buffer (address, rkey, length) and a short application tag.
//! - `cm` (crate feature `rdma_cm`, on by default): the RDMA connection manager (librdmacm):
//!   resolve address and route, connect/accept, with the QP created on the connection's own
//!   device context.
//! - `pmix` (crate feature `pmix`): the processes of a job started by a PMIx launcher
//!   (`mpirun`, `srun --mpi=pmix`) find each other through the launcher and connect every pair.

#[cfg(feature = "rdma_cm")]
pub mod cm;
pub mod exchange;
#[cfg(feature = "pmix")]
pub mod pmix;

pub use crate::types::endpoint::{Endpoint, RemoteRegion, random_psn};
