//! Errors a post can return. A post that returns an error has written nothing.

/// Why a work request was refused. Nothing was written to the queue, and the request is still
/// the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PostError {
    /// The send or receive queue has no room for the request until completions are polled.
    QueueFull {
        /// Queue slots the request needs (WQEBBs on mlx5, entries elsewhere).
        needed: u32,
        /// Slots free now.
        free: u32,
    },
    /// Posting the request could overflow the completion queue: more signaled requests would be
    /// outstanding than the queue's share of the CQ holds. Poll completions first.
    CqFull {
        /// Completion entries this queue may have outstanding.
        limit: u32,
    },
    /// More scatter/gather entries than the queue was created for.
    TooManySges {
        /// Entries in the request.
        got: u32,
        /// The queue's limit.
        max: u32,
    },
    /// Inline payload larger than the queue's inline limit.
    InlineTooLarge {
        /// Bytes in the request.
        len: u32,
        /// The queue's limit.
        max: u32,
    },
    /// [`SendFlags::INLINE`](crate::SendFlags::INLINE) on an operation that cannot carry inline
    /// data (READ, atomics, NOP).
    InlineNotAllowed,
    /// An atomic's local buffer is not exactly 8 bytes.
    AtomicSize {
        /// The local entry's length.
        len: u32,
    },
    /// An atomic's local or remote address is not 8-byte aligned.
    AtomicAlignment,
    /// A message longer than the largest an RDMA message can be (2 GiB).
    MessageTooLong,
    /// The backend does not implement this operation (for example NOP through libibverbs).
    Unsupported,
    /// The underlying verbs call refused the request with this errno (fallback backend only).
    Verbs {
        /// The errno the provider returned.
        errno: i32,
    },
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            PostError::QueueFull { needed, free } => {
                write!(f, "queue full: need {needed} slots, {free} free")
            }
            PostError::CqFull { limit } => write!(
                f,
                "completion queue could overflow: {limit} signaled requests already outstanding"
            ),
            PostError::TooManySges { got, max } => {
                write!(f, "{got} scatter/gather entries, queue allows {max}")
            }
            PostError::InlineTooLarge { len, max } => {
                write!(f, "{len} bytes inline, queue allows {max}")
            }
            PostError::InlineNotAllowed => {
                f.write_str("inline data is only allowed on WRITE and SEND")
            }
            PostError::AtomicSize { len } => {
                write!(f, "atomic local buffer is {len} bytes, must be 8")
            }
            PostError::AtomicAlignment => f.write_str("atomic address is not 8-byte aligned"),
            PostError::MessageTooLong => f.write_str("message longer than 2 GiB"),
            PostError::Unsupported => f.write_str("operation not supported by this backend"),
            PostError::Verbs { errno } => write!(f, "verbs post failed with errno {errno}"),
        }
    }
}

impl core::error::Error for PostError {}

/// A batch was refused: `index` names the first request that could not be posted. Nothing of
/// the batch was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchError {
    /// Position of the offending request in the batch.
    pub index: usize,
    /// Why it was refused.
    pub error: PostError,
}

impl core::fmt::Display for BatchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "request {} of the batch: {}", self.index, self.error)
    }
}

impl core::error::Error for BatchError {}
