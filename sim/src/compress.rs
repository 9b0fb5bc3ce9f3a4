//! CQE compression, as a ConnectX does it for a CQ created with `cqe_comp_en`.
//!
//! The rule, deterministic: the CQEs of a compressing CQ are staged, in order, while a burst
//! lasts, and written at the end of the first device step that adds none to that CQ (as a
//! ConnectX holds completions for its compression timeout; a burst's CQEs are later by one
//! step). A run of at least two consecutive staged CQEs that a session can carry becomes one
//! compressed session (up to [`MAX_SESSION`] completions, and no more than the ring has
//! free); every other CQE is written as it is. CQEs held back by fault injection are written
//! one by one when released. A session can carry successful responder CQEs of one queue pair that
//! differ only in what a mini-CQE holds (`byte_cnt`) and whose WQE counters follow one
//! another: same opcode and solicited bit, immediate, source and receive queue. Requester and
//! error CQEs are never compressed here.
//!
//! A session is written as [`zverbs_mlx5dv::prm::mini`] lays it out: the arrays of mini-CQEs
//! first, then the title's body, then its `op_own` with `Release` (the one byte the poller
//! checks). The entries between the arrays are left as they are.

use zverbs_mlx5dv::prm::cqe::{Cqe64, field};
use zverbs_mlx5dv::prm::mini::{FORMAT_MASK, MiniCqe, MiniCqeFormat, PER_ARRAY, array_entry};

use crate::cqe::{RawCqe, op};

/// The most completions one session carries (the `max_num` the emulated device reports).
pub const MAX_SESSION: u32 = 64;

/// The formats the device writes (`supported_format`: every one).
pub const SUPPORTED_FORMATS: u8 = 0b111;

/// Whether `next` can follow `prev` in a session (`prev` a member already).
pub(crate) fn joins(prev: &RawCqe, next: &RawCqe) -> bool {
    let (p, n) = (Cqe64::new_unchecked(prev), Cqe64::new_unchecked(next));
    let opcode = p.op_own() >> 4;
    (op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&opcode)
        && p.op_own() == n.op_own()
        && p.sop_drop_qpn() == n.sop_drop_qpn()
        && p.srqn_uidx() == n.srqn_uidx()
        && p.imm_inval_pkey() == n.imm_inval_pkey()
        && p.flags_rqpn() == n.flags_rqpn()
        && p.slid() == n.slid()
        && p.ml_path() == n.ml_path()
        && p.wqe_counter().wrapping_add(1) == n.wqe_counter()
}

/// The length of the run of CQEs at the start of `staged` that one session can carry, at
/// most `max`.
pub(crate) fn run_len(staged: &[RawCqe], max: u32) -> usize {
    let mut n = 1;
    while n < staged.len() && n < max as usize && joins(&staged[n - 1], &staged[n]) {
        n += 1;
    }
    n
}

/// The title of a session of `run` (at least two CQEs), its owner bit still 0.
pub(crate) fn title(run: &[RawCqe]) -> RawCqe {
    let mut t = run[0];
    let mut v = Cqe64::new_unchecked(&mut t);
    v.set_byte_cnt(run.len() as u32);
    t[field::OP_OWN] |= FORMAT_MASK;
    t
}

/// Array `k` of the session of `run`, in `format`: eight mini-CQEs, those past the run's end
/// zero.
pub(crate) fn array(run: &[RawCqe], k: usize, format: MiniCqeFormat) -> [u8; 64] {
    let mut a = [0u8; 64];
    for (m, cqe) in run.iter().skip(k * PER_ARRAY).take(PER_ARRAY).enumerate() {
        let c = Cqe64::new_unchecked(cqe);
        let mut v = MiniCqe::new_unchecked(&mut a[m * 8..m * 8 + 8]);
        match format {
            // The device computes no receive hash: the result it would report is 0.
            MiniCqeFormat::Hash => v.set_rx_hash_result(0),
            // Nor checksums of RC payloads; a cyclic receive queue has no strides.
            _ => {
                v.set_checksum(0);
                v.set_stride_idx(0);
            }
        }
        v.set_byte_cnt(c.byte_cnt());
    }
    a
}

/// The entries, counted from the title, that hold the arrays of a session of `n`, with the
/// array's number.
pub(crate) fn arrays(n: u32) -> impl Iterator<Item = (usize, u32)> {
    (0..n.div_ceil(PER_ARRAY as u32)).map(|k| (k as usize, array_entry(k)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::resp;

    fn recv(wqe: u16, len: u32) -> RawCqe {
        resp(0x105, 0x105, op::RESP_SEND, wqe, len, [0; 4], false)
    }

    #[test]
    fn runs_stop_where_a_session_cannot_carry_the_next() {
        let mut s = vec![recv(4, 10), recv(5, 20), recv(6, 30)];
        assert_eq!(run_len(&s, 64), 3);
        assert_eq!(run_len(&s, 2), 2, "capped");
        s[2] = recv(8, 30);
        assert_eq!(run_len(&s, 64), 2, "WQE counters must follow one another");
        s[1] = resp(0x105, 0x105, op::RESP_SEND_IMM, 5, 20, [1, 2, 3, 4], false);
        assert_eq!(run_len(&s, 64), 1, "another opcode");
        s[1] = resp(0x106, 0x106, op::RESP_SEND, 5, 20, [0; 4], false);
        assert_eq!(run_len(&s, 64), 1, "another queue pair");
        s[1] = resp(0x105, 0x105, op::RESP_SEND, 5, 20, [0; 4], true);
        assert_eq!(run_len(&s, 64), 1, "another solicited bit");
        let sends = [
            crate::cq::req(1, 1, 0x0a, 0, 0),
            crate::cq::req(1, 1, 0x0a, 1, 0),
        ];
        assert_eq!(run_len(&sends, 64), 1, "requester CQEs are not compressed");
        let errs = [
            crate::cq::err(1, 1, op::RESP_ERR, 0, 0, 5, 0),
            crate::cq::err(1, 1, op::RESP_ERR, 0, 1, 5, 0),
        ];
        assert_eq!(run_len(&errs, 64), 1, "nor errors");
    }

    #[test]
    fn title_and_array_bytes() {
        let run: Vec<RawCqe> = (0..10).map(|i| recv(7 + i, 100 + u32::from(i))).collect();
        let t = title(&run);
        assert_eq!(&t[44..48], &[0, 0, 0, 10], "byte_cnt is the count");
        assert_eq!(t[63], 0x2c, "RESP_SEND, compressed format");
        assert_eq!(&t[60..62], &[0, 7], "the first WQE counter");
        let a0 = array(&run, 0, MiniCqeFormat::Hash);
        assert_eq!(&a0[..8], &[0, 0, 0, 0, 0, 0, 0, 100]);
        assert_eq!(&a0[56..64], &[0, 0, 0, 0, 0, 0, 0, 107]);
        let a1 = array(&run, 1, MiniCqeFormat::CsumStridx);
        assert_eq!(
            &a1[..16],
            &[0, 0, 0, 0, 0, 0, 0, 108, 0, 0, 0, 0, 0, 0, 0, 109]
        );
        assert_eq!(&a1[16..], &[0; 48], "a partly filled array");
        assert_eq!(arrays(10).collect::<Vec<_>>(), [(0, 1), (1, 8)]);
        assert_eq!(arrays(2).collect::<Vec<_>>(), [(0, 1)]);
        assert_eq!(arrays(17).count(), 3);
    }
}
