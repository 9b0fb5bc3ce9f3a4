//! Scatter-to-CQE: a small received message delivered inside the CQE.
//!
//! A ConnectX may write the data of a received SEND into the completion instead of the
//! receive buffer, when the QP was created allowing it (`MLX5_QP_FLAG_SCATTER_CQE`, on RC
//! QPs; never on UD) and the message fits: up to 32 bytes with 64-byte CQEs, up to 64 bytes
//! with 128-byte CQEs. `op_own` says where the data is:
//!
//! | `op_own` bit | data | where |
//! |---|---|---|
//! | [`INLINE_SCATTER_32`] (0x04) | up to 32 bytes | bytes 0..32 of the 64-byte CQE |
//! | [`INLINE_SCATTER_64`] (0x08) | up to 64 bytes | the 64 bytes before it: the first half of a 128-byte entry |
//!
//! `byte_cnt` is the message length, as for any receive. The other fields are read as libmlx5
//! reads them: with 32 bytes scattered, the CQE's bytes 0..32 (where `flags_rqpn`, `slid` and
//! `ml_path` are) hold data, so a receive's source QP, SL, LID, path bits and GRH flag mean
//! nothing then (nor on the RC queue pairs whose receives scatter). The poller copies the data into the
//! scatter list of the receive the message took (read from the receive WQE in the ring, which
//! is the poller's until it retires the receive), in order, as the device would have, and
//! reports the completion as usual: the application sees its buffer filled either way.
//! When the receive's first data segment holds the whole message (a receive of one buffer,
//! long enough: the common case), the poll copies it inline with a few moves of a fixed size
//! ([`copy_to_first_segment`]); any other list takes the exact copy ([`copy_to_receive`]).
//! Nothing is allocated. A message longer than the scatter list is a local length error
//! ([`WcStatus::LocLenErr`]), as libmlx5 reports it (`mlx5_copy_to_recv_wqe`); a CQE whose
//! data cannot be where `op_own` says (64 bytes in a 64-byte CQE, a length over the room) is
//! reported as [`WcStatus::GeneralErr`] with [`VENDOR_ERR_UNSUPPORTED_FORMAT`] and `op_own` in
//! `vendor_err`, and nothing is copied.
//!
//! [`VENDOR_ERR_UNSUPPORTED_FORMAT`]: super::VENDOR_ERR_UNSUPPORTED_FORMAT

use zverbs_core::WcStatus;

#[cfg(not(zverbs_loom))]
use crate::devmem::OwnedCqe;
#[cfg(not(zverbs_loom))]
use crate::prm::INVALID_LKEY;
use crate::prm::cqe::{INLINE_SCATTER_32, INLINE_SCATTER_64};
#[cfg(not(zverbs_loom))]
use crate::prm::wqe::DataSeg;
#[cfg(not(zverbs_loom))]
use crate::state::{RecvWqes, WqeRing};

/// Why a scattered CQE's data did not reach the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ScatterError {
    /// The message is longer than the receive's scatter list (`LocLenErr`, as libmlx5).
    TooLong,
    /// The data cannot be where `op_own` says, or the queue's ring is unknown: a format the
    /// poller does not decode.
    Format,
}

impl ScatterError {
    /// The completion status it is reported with.
    pub(super) fn status(self) -> WcStatus {
        match self {
            ScatterError::TooLong => WcStatus::LocLenErr,
            ScatterError::Format => WcStatus::GeneralErr,
        }
    }
}

/// How many bytes of data a CQE with `op_own` can hold in a ring of `cqe_size`-byte entries:
/// 32 for [`INLINE_SCATTER_32`], 64 for [`INLINE_SCATTER_64`] in a 128-byte entry; `None` for
/// anything else (no scatter bit, both bits, or 64 bytes in a 64-byte entry, which has no
/// room before its CQE).
pub(super) fn room(op_own: u8, cqe_size: usize) -> Option<usize> {
    match op_own & (INLINE_SCATTER_32 | INLINE_SCATTER_64) {
        INLINE_SCATTER_32 => Some(32),
        INLINE_SCATTER_64 if cqe_size == 128 => Some(64),
        _ => None,
    }
}

/// Copies the `byte_cnt` bytes of data scattered into `cqe` (as `op_own` says)
/// into the scatter list of receive WQE `index` (a free-running counter) of `wqes`.
///
/// # Safety
///
/// - `cqe` is a receive completion of the queue whose ring `wqes` describes;
/// - WQE `index` is the receive the message took, posted and not yet retired (its segments
///   are as the poster wrote them, and its buffers valid and writable, as the posting
///   contract of [`PostRecv`](zverbs_core::PostRecv) requires until it completes);
/// - the only poller of the queue calls this.
#[cfg(not(zverbs_loom))]
pub(super) unsafe fn copy_to_receive(
    wqes: &RecvWqes,
    index: u32,
    cqe: OwnedCqe,
    op_own: u8,
    byte_cnt: u32,
) -> Result<(), ScatterError> {
    let room = room(op_own, cqe.stride()).ok_or(ScatterError::Format)?;
    let len = byte_cnt as usize;
    if len > room {
        return Err(ScatterError::Format);
    }
    let WqeRing { base, shift, mask } = wqes.get().ok_or(ScatterError::Format)?;
    let mut data = [0u8; 64];
    if room == 32 {
        cqe.with(|c| data[..32].copy_from_slice(&c[..32]));
    } else if cqe.with_entry_head(|h| data.copy_from_slice(h)).is_none() {
        // `room` let a 64-byte scatter through only in a 128-byte entry.
        return Err(ScatterError::Format);
    }
    // SAFETY: `index & mask` is a WQE of the ring, `1 << shift` bytes long; (caller) the WQE
    // is the poller's to read and its buffers writable.
    unsafe {
        let wqe = base.as_ptr().add(((index & mask) as usize) << shift);
        scatter(wqe, 1 << (shift - 4), &data[..len])
    }
}

/// The common case of [`copy_to_receive`], inline in the poll loop: the receive's first data
/// segment holds the whole message. Reads that segment of WQE `index` (not the rest of the
/// list) and copies the `byte_cnt` bytes scattered into `cqe` with a few
/// fixed-size moves ([`copy_small`]), writing exactly the bytes [`copy_to_receive`] would.
/// Returns `false`, having written nothing, for anything else (a message longer than the
/// first segment, a receive with no segment, a format [`room`] refuses):
/// [`copy_to_receive`] decodes those, with their errors.
///
/// # Safety
///
/// As [`copy_to_receive`], `wqes` the ring of that queue.
#[cfg(not(zverbs_loom))]
#[inline(always)]
pub(super) unsafe fn copy_to_first_segment(
    wqes: WqeRing,
    index: u32,
    cqe: OwnedCqe,
    op_own: u8,
    byte_cnt: u32,
) -> bool {
    let WqeRing { base, shift, mask } = wqes;
    // SAFETY: `index & mask` is a WQE of the ring, `1 << shift` ≥ 16 bytes long: its first
    // data segment is readable; (caller) the poller's to read. Unaligned-safe read.
    let raw = unsafe {
        base.as_ptr()
            .add(((index & mask) as usize) << shift)
            .cast::<[u8; 16]>()
            .read_unaligned()
    };
    let seg = DataSeg::new_unchecked(&raw);
    // The end marker (no segment at all) has a byte count of 0, but a message of 0 bytes
    // would fit it: the lkey tells.
    if seg.byte_count() < byte_cnt || seg.lkey() == INVALID_LKEY {
        return false;
    }
    let dst = seg.addr() as *mut u8;
    let len = byte_cnt as usize;
    // SAFETY: (caller) the segment's memory is writable for its byte count, which is at least
    // `len`, and it does not overlap the CQE; each copy is of `len` ≤ 32 or ≤ 64 bytes, as its
    // arm checks.
    unsafe {
        match op_own & (INLINE_SCATTER_32 | INLINE_SCATTER_64) {
            INLINE_SCATTER_32 if len <= 32 => cqe.with(|c| copy_small(c, dst, len)),
            // The data is the first half of a 128-byte entry (none in a 64-byte one: then
            // nothing is written and the general path reports the format).
            INLINE_SCATTER_64 if len <= 64 => {
                let copied = cqe.with_entry_head(|h| copy_small(h, dst, len));
                if copied.is_none() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Copies `src[..len]` to `dst` (`len` ≤ 64) with at most two moves of a fixed size (32, 16,
/// 8, 4 or 2 bytes, the second ending where the data ends and overlapping the first) or one
/// byte: no call, no loop, and nothing written past `dst + len`.
///
/// # Safety
///
/// `len` ≤ 64; `dst` is writable for `len` bytes that do not overlap `src`.
#[cfg(not(zverbs_loom))]
#[inline(always)]
unsafe fn copy_small(src: &[u8; 64], dst: *mut u8, len: usize) {
    // Moves `$n` bytes from `src + at` to `dst + at` (unaligned-safe reads and writes), in
    // the unsafe block below, whose argument covers each use: `at + $n` ≤ 64 and ≤ the bytes
    // `dst` is writable for.
    macro_rules! mv {
        ($n:literal, $at:expr) => {{
            let at: usize = $at;
            let v = src.as_ptr().add(at).cast::<[u8; $n]>().read_unaligned();
            dst.add(at).cast::<[u8; $n]>().write_unaligned(v);
        }};
    }
    // SAFETY: each move ends at or before `len` (≤ 64), so inside `src` and the writable
    // bytes of `dst`; `at` = `len - N` is not negative, as `len` ≥ `N` on each branch.
    unsafe {
        if len >= 16 {
            if len > 32 {
                mv!(32, 0);
                mv!(32, len - 32);
            } else {
                mv!(16, 0);
                mv!(16, len - 16);
            }
        } else if len >= 4 {
            if len >= 8 {
                mv!(8, 0);
                mv!(8, len - 8);
            } else {
                mv!(4, 0);
                mv!(4, len - 4);
            }
        } else if len >= 2 {
            mv!(2, 0);
            mv!(2, len - 2);
        } else if len == 1 {
            mv!(1, 0);
        }
    }
}

/// Copies `data` over the data segments at `wqe` (at most `segs` of them, ending early at one
/// whose lkey is [`INVALID_LKEY`]), as the device scatters a message.
///
/// # Safety
///
/// `wqe` points to `segs` readable 16-byte data segments, each naming memory writable for its
/// byte count, none of which overlaps `data`.
#[cfg(not(zverbs_loom))]
unsafe fn scatter(wqe: *const u8, segs: usize, mut data: &[u8]) -> Result<(), ScatterError> {
    for i in 0..segs {
        if data.is_empty() {
            return Ok(());
        }
        let mut raw = [0u8; 16];
        // SAFETY: (caller) segment `i` is readable (an unaligned-safe byte copy), and its
        // memory is writable for its byte count, of which `n` is at most; it does not overlap
        // the CQE copy `data`.
        let n = unsafe {
            core::ptr::copy_nonoverlapping(wqe.add(i * 16), raw.as_mut_ptr(), 16);
            let seg = DataSeg::new_unchecked(&raw);
            if seg.lkey() == INVALID_LKEY {
                break;
            }
            let n = data.len().min(seg.byte_count() as usize);
            core::ptr::copy_nonoverlapping(data.as_ptr(), seg.addr() as *mut u8, n);
            n
        };
        data = &data[n..];
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(ScatterError::TooLong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_by_format_and_cqe_size() {
        for (op_own, size, want) in [
            (0x20, 64, None),
            (0x24, 64, Some(32)),
            (0x24, 128, Some(32)),
            (0x28, 64, None),
            (0x28, 128, Some(64)),
            (0x2c, 128, None),
            (0x2d, 64, None),
            (0x25, 64, Some(32)),
        ] {
            assert_eq!(room(op_own, size), want, "{op_own:#x} in {size}");
        }
    }

    #[test]
    fn scatter_fills_the_list_in_order_and_stops_at_the_end_marker() {
        extern crate std;
        use std::vec;
        let mut a = vec![0xeeu8; 8];
        let mut b = vec![0xeeu8; 8];
        let mut wqe = [0u8; 64];
        DataSeg::new_unchecked(&mut wqe[0..16]).set(5, 1, a.as_mut_ptr() as u64);
        DataSeg::new_unchecked(&mut wqe[16..32]).set(8, 1, b.as_mut_ptr() as u64);
        DataSeg::new_unchecked(&mut wqe[32..48]).set(0, INVALID_LKEY, 0);
        let data: std::vec::Vec<u8> = (1..=13).collect();
        // SAFETY: four segments of `wqe`; the buffers are live and as long as their counts.
        assert_eq!(unsafe { scatter(wqe.as_ptr(), 4, &data) }, Ok(()));
        assert_eq!(a, [1, 2, 3, 4, 5, 0xee, 0xee, 0xee]);
        assert_eq!(b, [6, 7, 8, 9, 10, 11, 12, 13]);
        // One byte more than the list holds: everything that fits is written, and it is an
        // error.
        let data: std::vec::Vec<u8> = (21..=34).collect();
        let r = {
            // SAFETY: as above.
            unsafe { scatter(wqe.as_ptr(), 4, &data) }
        };
        assert_eq!(r, Err(ScatterError::TooLong));
        assert_eq!((a[4], b[7]), (25, 33));
        // Nothing to copy: nothing read or written.
        // SAFETY: as above.
        assert_eq!(unsafe { scatter(wqe.as_ptr(), 4, &[]) }, Ok(()));
        // The list limited by the WQE's size, with no end marker.
        let r = {
            // SAFETY: one segment.
            unsafe { scatter(wqe.as_ptr(), 1, &[9; 6]) }
        };
        assert_eq!(r, Err(ScatterError::TooLong));
        assert_eq!(a, [9, 9, 9, 9, 9, 0xee, 0xee, 0xee]);
    }
}
