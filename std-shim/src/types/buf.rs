//! Spans of registered memory: how an offset or a range is checked against a buffer's length,
//! and why an access was refused.

use std::fmt;
use std::ops::{Bound, RangeBounds};

use zverbs_core::RemoteBuf;

/// The remote target at `offset` of `len` bytes at `base` (the end itself is allowed: the
/// target of a zero-length request).
pub(crate) fn remote_in(
    base: u64,
    len: usize,
    rkey: u32,
    offset: usize,
) -> Result<RemoteBuf, BufError> {
    if offset > len {
        return Err(BufError::OutOfBounds {
            offset,
            len: 0,
            buf_len: len,
        });
    }
    Ok(RemoteBuf::new(base + offset as u64, rkey))
}

/// `range` resolved against a buffer of `len` bytes: `(start, end)`, checked without overflow.
pub(crate) fn resolve(
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize), BufError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1).ok_or(BufError::OutOfBounds {
            offset: s,
            len: 0,
            buf_len: len,
        })?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1).ok_or(BufError::OutOfBounds {
            offset: start,
            len: usize::MAX,
            buf_len: len,
        })?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end {
        return Err(BufError::ReversedRange { start, end });
    }
    if end > len {
        return Err(BufError::OutOfBounds {
            offset: start,
            len: end - start,
            buf_len: len,
        });
    }
    if end - start > u32::MAX as usize {
        return Err(BufError::TooLong {
            len: end - start,
            max: u32::MAX,
        });
    }
    Ok((start, end))
}

/// Why an access to an [`MrBuf`](crate::MrBuf) (or a buffer's allocation) was refused.
/// Nothing was read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BufError {
    /// `len` bytes at `offset` do not lie inside the buffer (or `offset + len` overflows).
    OutOfBounds {
        /// The offset asked for.
        offset: usize,
        /// The length asked for.
        len: usize,
        /// The buffer's length.
        buf_len: usize,
    },
    /// A range whose start is after its end.
    ReversedRange {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
    },
    /// A `u64` access at an offset that is not a multiple of 8.
    Misaligned {
        /// The offset asked for.
        offset: usize,
    },
    /// [`MrBuf::wait_u8`](crate::MrBuf::wait_u8)'s deadline passed before the byte took the
    /// value.
    TimedOut {
        /// The byte's offset.
        offset: usize,
        /// The value waited for.
        expected: u8,
        /// The value last read.
        last: u8,
    },
    /// A buffer of more bytes than the address space can hold, once rounded up to whole pages.
    TooLarge {
        /// The length asked for.
        requested: usize,
    },
    /// A span longer than one scatter entry of a work request can carry (its length is a
    /// 32-bit field on the wire).
    TooLong {
        /// The span's length.
        len: usize,
        /// The longest a span can be.
        max: u32,
    },
}

impl fmt::Display for BufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BufError::OutOfBounds {
                offset,
                len,
                buf_len,
            } => write!(
                f,
                "{len} bytes at offset {offset} are outside a buffer of {buf_len} bytes"
            ),
            BufError::ReversedRange { start, end } => {
                write!(f, "range {start}..{end} starts after its end")
            }
            BufError::Misaligned { offset } => {
                write!(f, "u64 access at offset {offset}, not a multiple of 8")
            }
            BufError::TimedOut {
                offset,
                expected,
                last,
            } => write!(
                f,
                "the byte at offset {offset} did not become {expected:#04x} before the \
                 deadline (last read {last:#04x})"
            ),
            BufError::TooLarge { requested } => write!(
                f,
                "a buffer of {requested} bytes is larger than the address space allows"
            ),
            BufError::TooLong { len, max } => write!(
                f,
                "a span of {len} bytes is longer than a scatter entry carries ({max} bytes)"
            ),
        }
    }
}

impl std::error::Error for BufError {}
