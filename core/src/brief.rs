//! Brief completions: the fields most completion loops read, and nothing else.
//!
//! A [`Completion`] carries everything a CQE can say (where a receive came from, its
//! immediate, its flags, ...). A loop that only matches completions to its requests by
//! `wr_id` and checks that they succeeded pays for decoding and storing all of it.
//! [`PollCq::poll_brief`] writes [`BriefCompletion`]s instead:
//! the request, how it ended, what kind it was and how many bytes it moved. On the mlx5
//! direct backend the fields a brief completion leaves out are never read from the CQE; any
//! other backend polls full completions and keeps the brief part of each.
//!
//! ```
//! use zverbs_core::{BriefCompletion, PollCq, WcStatus};
//!
//! /// Counts the requests that finished, stopping at the first that failed.
//! fn reap(cq: &mut impl PollCq) -> Result<usize, (u64, WcStatus)> {
//!     let mut done = [BriefCompletion::EMPTY; 16];
//!     let n = cq.poll_brief(&mut done);
//!     for c in &done[..n] {
//!         if !c.is_success() {
//!             return Err((c.wr_id, c.status));
//!         }
//!     }
//!     Ok(n)
//! }
//! # struct Two;
//! # impl PollCq for Two {
//! #     fn poll(&mut self, out: &mut [zverbs_core::Completion]) -> usize {
//! #         out[0].wr_id = 7;
//! #         out[1].wr_id = 8;
//! #         2
//! #     }
//! # }
//! assert_eq!(reap(&mut Two), Ok(2));
//! ```

use crate::{Completion, PollCq, WcOpcode, WcStatus};

/// The part of a [`Completion`] most loops read: which request, how it ended, what kind it
/// was and the bytes it moved (and the device's syndrome when it failed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BriefCompletion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// How the request ended.
    pub status: WcStatus,
    /// What kind of request it was.
    pub opcode: WcOpcode,
    /// Bytes transferred, as [`Completion::byte_len`].
    pub byte_len: u32,
    /// The device's raw vendor syndrome of a failed request (0 for a successful one), as
    /// [`Completion::vendor_err`].
    pub vendor_err: u32,
}

impl BriefCompletion {
    /// An all-zero entry, for initialising the caller's poll buffer.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        vendor_err: 0,
    };

    /// Whether the request succeeded.
    #[inline]
    pub const fn is_success(&self) -> bool {
        self.status.is_success()
    }
}

impl From<&Completion> for BriefCompletion {
    #[inline(always)]
    fn from(c: &Completion) -> Self {
        Self {
            wr_id: c.wr_id,
            status: c.status,
            opcode: c.opcode,
            byte_len: c.byte_len,
            vendor_err: c.vendor_err,
        }
    }
}

/// How many completions [`poll_brief_via_poll`] polls at a time (on the stack).
const CHUNK: usize = 16;

/// [`PollCq::poll_brief`] for a poller that only has [`PollCq::poll`]: polls full completions
/// into a buffer on the stack, `CHUNK` (16) at a time, and keeps the brief part of each.
#[inline]
pub(crate) fn poll_brief_via_poll<P: PollCq + ?Sized>(
    cq: &mut P,
    out: &mut [BriefCompletion],
) -> usize {
    let mut buf = [Completion::EMPTY; CHUNK];
    let mut n = 0;
    while n < out.len() {
        let want = (out.len() - n).min(CHUNK);
        let got = cq.poll(&mut buf[..want]).min(want);
        for (o, c) in out[n..n + got].iter_mut().zip(&buf[..got]) {
            *o = BriefCompletion::from(c);
        }
        n += got;
        if got < want {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::*;

    /// A poller holding `left` completions, numbered from 0, handing out at most `per_poll`
    /// a poll (as a CQ with fewer ready than asked for does).
    struct Queue {
        next: u64,
        left: u64,
        per_poll: usize,
        polls: usize,
    }

    impl PollCq for Queue {
        fn poll(&mut self, out: &mut [Completion]) -> usize {
            self.polls += 1;
            let n = out.len().min(self.per_poll).min(self.left as usize);
            for o in &mut out[..n] {
                *o = Completion {
                    wr_id: self.next,
                    byte_len: self.next as u32 * 2,
                    opcode: WcOpcode::RdmaRead,
                    status: if self.next == 5 {
                        WcStatus::RemAccessErr
                    } else {
                        WcStatus::Success
                    },
                    vendor_err: if self.next == 5 { 0x88 } else { 0 },
                    qp_num: 9,
                    imm: 1,
                    ..Completion::EMPTY
                };
                self.next += 1;
            }
            self.left -= n as u64;
            n
        }
    }

    #[test]
    fn the_fallback_keeps_the_brief_part_of_each_completion_in_order() {
        let mut q = Queue {
            next: 0,
            left: 40,
            per_poll: usize::MAX,
            polls: 0,
        };
        let mut out = [BriefCompletion::EMPTY; 37];
        assert_eq!(q.poll_brief(&mut out), 37);
        assert_eq!(q.polls, 3, "16 + 16 + 5");
        let ids: Vec<u64> = out.iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, (0..37).collect::<Vec<_>>());
        assert_eq!(
            out[5],
            BriefCompletion {
                wr_id: 5,
                status: WcStatus::RemAccessErr,
                opcode: WcOpcode::RdmaRead,
                byte_len: 10,
                vendor_err: 0x88,
            }
        );
        assert!(out[4].is_success() && !out[5].is_success());
        // Three left: a short poll ends the call.
        assert_eq!(q.poll_brief(&mut out), 3);
        assert_eq!(out[2].wr_id, 39);
        assert_eq!(q.poll_brief(&mut out), 0);
        assert_eq!(q.poll_brief(&mut []), 0);
    }

    #[test]
    fn a_poll_with_fewer_ready_than_asked_ends_the_call() {
        let mut q = Queue {
            next: 0,
            left: 100,
            per_poll: 3,
            polls: 0,
        };
        let mut out = [BriefCompletion::EMPTY; 20];
        assert_eq!(q.poll_brief(&mut out), 3);
        assert_eq!(q.polls, 1);
        assert_eq!(
            out[3],
            BriefCompletion::EMPTY,
            "nothing past what was polled"
        );
    }
}
