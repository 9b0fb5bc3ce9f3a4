//! Errors a post can return. A post that returns an error has written nothing.

/// Why a work request was refused. Nothing was written to the queue, and the request is still
/// the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// The send or receive queue has no room for the request until completions are polled.
    #[error("queue full: need {needed} slots, {free} free")]
    QueueFull {
        /// Queue slots the request needs (WQEBBs on mlx5, entries elsewhere).
        needed: u32,
        /// Slots free now.
        free: u32,
    },
    /// Posting the request could overflow the completion queue: more signaled requests (or, on
    /// a receive queue, receives) would be outstanding than the queue's share of the CQ holds.
    /// Poll completions first.
    #[error(
        "completion queue could overflow: the queue's {limit} completion entries are held by \
         outstanding requests"
    )]
    CqFull {
        /// Completion entries this queue may have outstanding.
        limit: u32,
    },
    /// More scatter/gather entries than the queue was created for.
    #[error("{got} scatter/gather entries, queue allows {max}")]
    TooManySges {
        /// Entries in the request.
        got: u32,
        /// The queue's limit.
        max: u32,
    },
    /// Inline payload larger than the queue's inline limit.
    #[error("{len} bytes inline, queue allows {max}")]
    InlineTooLarge {
        /// Bytes in the request.
        len: u32,
        /// The queue's limit.
        max: u32,
    },
    /// [`SendFlags::INLINE`](crate::SendFlags::INLINE) on an operation that cannot carry inline
    /// data (READ, atomics, NOP).
    #[error("inline data is only allowed on WRITE and SEND")]
    InlineNotAllowed,
    /// An atomic's local buffer is not exactly 8 bytes.
    #[error("atomic local buffer is {len} bytes, must be 8")]
    AtomicSize {
        /// The local entry's length.
        len: u32,
    },
    /// An atomic's local or remote address is not 8-byte aligned.
    #[error("atomic address is not 8-byte aligned")]
    AtomicAlignment,
    /// A message longer than the largest an RDMA message can be (2 GiB).
    #[error("message longer than 2 GiB")]
    MessageTooLong,
    /// An operation the queue pair's transport does not have: a datagram
    /// ([`SendOp::SendTo`](crate::SendOp::SendTo)) on a reliable-connected queue, a
    /// WRITE, READ, connected SEND or atomic on an unreliable-datagram queue, or anything but
    /// a SEND (without immediate) or NOP on a raw Ethernet queue.
    #[error("operation not available on this queue pair's transport")]
    WrongTransport,
    /// A datagram longer than the path MTU of its UD queue pair.
    #[error("datagram of {len} bytes exceeds the path MTU of {mtu}")]
    DatagramTooLong {
        /// The datagram's length (the sum of its entries).
        len: u32,
        /// The queue's path MTU.
        mtu: u32,
    },
    /// A frame on a raw Ethernet queue shorter than the least it may be: an Ethernet header
    /// (14 bytes), or the header bytes the device wants inlined (18 on some mlx5 devices).
    #[error("frame of {len} bytes is shorter than {min}")]
    FrameTooShort {
        /// The frame's length (the sum of its entries).
        len: u32,
        /// The shortest frame the queue takes.
        min: u32,
    },
    /// A frame on a raw Ethernet queue longer than its largest frame.
    #[error("frame of {len} bytes exceeds the queue's largest frame of {max}")]
    FrameTooLong {
        /// The frame's length (the sum of its entries).
        len: u32,
        /// The queue's largest frame.
        max: u32,
    },
    /// A length field named for a prepared frame that does not lie inside its headers (or
    /// lies before the start of the header it belongs to).
    #[error("length field at byte {at} is not inside the {headers} header bytes")]
    FrameLengthField {
        /// The field's offset as given.
        at: u32,
        /// The headers' length.
        headers: u32,
    },
    /// [`SendFlags::IP_CSUM`](crate::SendFlags::IP_CSUM) on a queue that is not a raw
    /// Ethernet queue (only a raw packet QP has the device compute a frame's checksums), or on
    /// a raw Ethernet queue whose device does not compute them (it reports no
    /// `IBV_DEVICE_RAW_IP_CSUM`): fill in the checksums before the post, or leave them 0 (a
    /// UDP checksum of 0 over IPv4 means none). Nothing was written.
    #[error(
        "checksum offload is not available: only a raw Ethernet queue whose device computes \
         IPv4/UDP/TCP checksums (IBV_DEVICE_RAW_IP_CSUM) takes IP_CSUM"
    )]
    ChecksumNotAvailable,
    /// The backend does not implement this operation (for example NOP through libibverbs).
    #[error("operation not supported by this backend")]
    Unsupported,
    /// The queue pair is not in a state that serves this queue: in RESET or the error state
    /// (moved there by the control path, or by the device after a failed request), or not yet
    /// ready. Nothing was written. Drain and reset the queue pair, connect it again, then post.
    #[error("the queue pair is not ready for this queue (in RESET or the error state)")]
    NotReady,
    /// The underlying verbs call refused the request with this errno (fallback backend only).
    #[error("verbs post failed with errno {errno}")]
    Verbs {
        /// The errno the provider returned.
        errno: i32,
    },
}

/// A batch was refused: `index` names the first request that could not be posted. Nothing of
/// the batch was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("request {index} of the batch: {error}")]
pub struct BatchError {
    /// Position of the offending request in the batch.
    pub index: usize,
    /// Why it was refused.
    pub error: PostError,
}
