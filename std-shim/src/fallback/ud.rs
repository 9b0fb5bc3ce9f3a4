//! The fallback's datagram pieces: the verbs request of a UD SEND, and a shared receive queue
//! posted through `ibv_post_srq_recv`.

use zverbs_core::{BatchError, PostError, PostRecv, RecvWr, Sge};

use super::raw::{RawArray, sg_list};
use zverbs_ffi::types::*;

/// The `ibv_send_wr` of a UD SEND of `sgl` to QP `remote_qpn` through address handle `ah`
/// with Q_Key `qkey` (`wr.ud`), with the immediate `imm` (already big-endian, as verbs
/// carries it) when given, and `send_flags` (`IBV_SEND_*`). `next` is null.
///
/// The request points into `sgl`: it is valid to post while `sgl` and `ah` live.
pub fn ud_send_wr(
    wr_id: u64,
    sgl: &mut [Sge],
    ah: *mut ibv_ah,
    remote_qpn: u32,
    qkey: u32,
    imm: Option<u32>,
    send_flags: u32,
) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        sg_list: sg_list(sgl.as_mut_ptr()),
        num_sge: i32::try_from(sgl.len()).unwrap_or(i32::MAX),
        opcode: if imm.is_some() {
            IBV_WR_SEND_WITH_IMM
        } else {
            IBV_WR_SEND
        },
        send_flags,
        imm_data: imm.unwrap_or(0),
        wr: ibv_send_wr_wr {
            ud: ibv_send_wr_ud {
                ah: ah.cast(),
                remote_qpn: remote_qpn & 0xff_ffff,
                remote_qkey: qkey,
            },
        },
        ..ibv_send_wr::ZERO
    }
}

/// A shared receive queue driven through `ibv_post_srq_recv` (the provider's `post_srq_recv`
/// entry): each post goes to the provider at once. Completions of its receives arrive on the
/// CQs of the QPs that consumed them.
#[derive(Debug)]
pub struct SrqQueue {
    srq: *mut ibv_srq,
    post: PostSrqRecvFn,
    wrs: RawArray<ibv_recv_wr>,
    sges: RawArray<Sge>,
    max_sge: u32,
}

// SAFETY: the queue owns its staging memory; the SRQ is posted to only through `&mut self`.
unsafe impl Send for SrqQueue {}

impl SrqQueue {
    /// Drives `srq`, posting chains of at most `max_batch` requests of `max_sge` entries.
    ///
    /// # Safety
    ///
    /// `srq` is a live SRQ (and its context live) while this value lives, and nothing else
    /// posts to it; `max_sge` is at most its real scatter limit.
    ///
    /// Returns `None` if the provider has no `post_srq_recv` entry.
    pub unsafe fn new(srq: *mut ibv_srq, max_batch: u32, max_sge: u32) -> Option<Self> {
        // SAFETY: (caller) `srq` and its context are live.
        let post = unsafe { (*(*srq).context).ops.post_srq_recv }?;
        let n = max_batch.max(1) as usize;
        Some(Self {
            srq,
            post,
            wrs: RawArray::new(n, ibv_recv_wr::ZERO),
            sges: RawArray::new(n * max_sge.max(1) as usize, Sge::default()),
            max_sge,
        })
    }

    /// Checks `wr` against the limits: batch position `n` (1-based) must fit the staging.
    fn check(&self, wr: &RecvWr<'_>, n: usize) -> Result<(), PostError> {
        if n > self.wrs.len() {
            return Err(PostError::QueueFull {
                needed: n as u32,
                free: self.wrs.len() as u32,
            });
        }
        if wr.sgl.len() > self.max_sge as usize {
            return Err(PostError::TooManySges {
                got: wr.sgl.len() as u32,
                max: self.max_sge,
            });
        }
        Ok(())
    }

    /// Stages `wr` as element `i`, its entries in the `i`th run of the scatter staging.
    ///
    /// # Safety
    ///
    /// `i` is below the staging length and `wr` passed [`Self::check`].
    unsafe fn build(&self, i: usize, wr: &RecvWr<'_>) -> *mut ibv_recv_wr {
        let per = self.max_sge.max(1) as usize;
        let sges = self.sges.at(i * per);
        for (k, s) in wr.sgl.iter().enumerate() {
            // SAFETY: `k < max_sge <= per` (checked), inside the staging run of `i`.
            unsafe { sges.add(k).write(*s) };
        }
        let this = self.wrs.at(i);
        // SAFETY: `i` is inside the staging array (caller).
        unsafe {
            this.write(ibv_recv_wr {
                wr_id: wr.wr_id,
                next: core::ptr::null_mut(),
                sg_list: sg_list(sges),
                num_sge: wr.sgl.len() as i32,
            })
        };
        this
    }
}

impl PostRecv for SrqQueue {
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.check(wr, 1)?;
        // SAFETY: element 0 exists; checked.
        let first = unsafe { self.build(0, wr) };
        let mut bad = core::ptr::null_mut();
        // SAFETY: (constructor) a live SRQ only this queue posts to; the request is staged.
        // (Caller) the buffers obey the posting contract.
        let ret = unsafe { (self.post)(self.srq, first, &mut bad) };
        if ret != 0 {
            return Err(PostError::Verbs { errno: ret.abs() });
        }
        Ok(())
    }

    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        if wrs.is_empty() {
            return Ok(());
        }
        for (index, wr) in wrs.iter().enumerate() {
            self.check(wr, index + 1)
                .map_err(|error| BatchError { index, error })?;
        }
        let mut prev: *mut ibv_recv_wr = core::ptr::null_mut();
        for (i, wr) in wrs.iter().enumerate() {
            // SAFETY: `i` below the staging length (checked for the whole batch).
            let this = unsafe { self.build(i, wr) };
            if !prev.is_null() {
                // SAFETY: `prev` is element `i - 1`, ours.
                unsafe { (*prev).next = this };
            }
            prev = this;
        }
        let first = self.wrs.at(0);
        let mut bad: *mut ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: as in `post`, for the whole chain.
        let ret = unsafe { (self.post)(self.srq, first, &mut bad) };
        if ret != 0 {
            // The provider posted the requests before `bad` and none from it on.
            let index = super::sq::chain_index(bad, first, wrs.len()).unwrap_or(0);
            return Err(BatchError {
                index,
                error: PostError::Verbs { errno: ret.abs() },
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fallback::fake::{self, FakeDevice, with};

    #[test]
    fn a_ud_send_carries_its_address_handle_qpn_and_qkey() {
        fake::reset(8);
        let dev = FakeDevice::new();
        dev.set_ud();
        let mut buf = [7u8; 16];
        let mut sgl = [Sge::new(buf.as_mut_ptr() as u64, 16, 0x55)];
        let ah = 0xa000 as *mut ibv_ah;
        let imm = 0x1234_5678u32.to_be();
        let mut wr = ud_send_wr(
            9,
            &mut sgl,
            ah,
            0x01ab_cdef,
            0x1111_2222,
            Some(imm),
            IBV_SEND_SIGNALED,
        );
        let mut bad = core::ptr::null_mut();
        // SAFETY: the fake QP; the request and its list live across the call.
        let ret = unsafe { zverbs_ffi::ibv_post_send(dev.qp(), &mut wr, &mut bad) };
        assert_eq!(ret, 0);
        let seen = with(|f| f.sends.clone());
        assert_eq!(seen.len(), 1);
        let s = seen[0];
        assert_eq!(
            (s.wr_id, s.opcode, s.send_flags),
            (9, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED)
        );
        assert_eq!(s.imm_data, imm);
        assert_eq!(s.ud, Some((0xa000, 0xab_cdef, 0x1111_2222)));
        assert_eq!((s.num_sge, s.sges[0]), (1, sgl[0]));
        assert_eq!(s.payload[..16], [7u8; 16]);
        // Without an immediate: a plain SEND.
        let mut wr = ud_send_wr(10, &mut sgl, ah, 3, 4, None, 0);
        // SAFETY: as above.
        let ret = unsafe { zverbs_ffi::ibv_post_send(dev.qp(), &mut wr, &mut bad) };
        assert_eq!(ret, 0);
        let s = with(|f| f.sends[1]);
        assert_eq!(
            (s.opcode, s.imm_data, s.ud),
            (IBV_WR_SEND, 0, Some((0xa000, 3, 4)))
        );
    }

    #[test]
    fn the_srq_queue_posts_through_post_srq_recv() {
        fake::reset(8);
        let dev = FakeDevice::new();
        // SAFETY: the fake SRQ lives as long as `dev`; only this queue posts to it.
        let mut q = unsafe { SrqQueue::new(dev.srq(), 2, 2) }.unwrap();
        let a = [Sge::new(0x1000, 64, 1), Sge::new(0x2000, 32, 1)];
        let b = [Sge::new(0x3000, 8, 2)];
        // SAFETY: the fake never touches the buffers.
        unsafe {
            q.post(&RecvWr::new(1, &a)).unwrap();
            q.post_all(&[RecvWr::new(2, &b), RecvWr::new(3, &a)])
                .unwrap();
        }
        let (recvs, calls) = with(|f| (f.recvs.clone(), f.recv_calls.clone()));
        assert_eq!(calls, [1, 2]);
        let ids: Vec<(u64, i32)> = recvs.iter().map(|r| (r.wr_id, r.num_sge)).collect();
        assert_eq!(ids, [(1, 2), (2, 1), (3, 2)]);
        assert_eq!(recvs[0].sges[..2], a);
        assert_eq!(recvs[1].sges[0], b[0]);
        // Too many entries, or a batch larger than the staging: refused, nothing posted.
        let c = [Sge::new(0, 1, 1); 3];
        // SAFETY: as above.
        unsafe {
            assert!(matches!(
                q.post(&RecvWr::new(4, &c)),
                Err(PostError::TooManySges { got: 3, max: 2 })
            ));
            let e = q
                .post_all(&[RecvWr::new(5, &b), RecvWr::new(6, &b), RecvWr::new(7, &b)])
                .unwrap_err();
            assert_eq!(e.index, 2);
        }
        assert_eq!(with(|f| f.recvs.len()), 3);
    }
}
