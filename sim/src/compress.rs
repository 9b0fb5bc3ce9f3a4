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

/// Whether `next` can follow `prev` in a session (`prev` a member already) written in
/// `format` on a CQ where a striding queue completes (`strided`).
///
/// Everything the title carries for all must be equal: the whole CQE but for what a mini-CQE
/// of the format holds (`byte_cnt` always; the RSS hash result in the hash format; the raw
/// checksum in the two checksum formats) and the timestamp, stamped on the title. The WQE
/// counters follow one another, except in the stride-index format on a striding queue's CQ,
/// where each mini-CQE carries its completion's stride index (`wqe_counter`) and the title's
/// `wqe_id` names the one WQE they all lie in.
pub(crate) fn joins(prev: &RawCqe, next: &RawCqe, format: MiniCqeFormat, strided: bool) -> bool {
    let (p, n) = (Cqe64::new_unchecked(prev), Cqe64::new_unchecked(next));
    let opcode = p.op_own() >> 4;
    let same = |r: core::ops::Range<usize>| prev[r.clone()] == next[r];
    let hash_in_mini = format == MiniCqeFormat::Hash;
    let csum_in_mini = format != MiniCqeFormat::Hash;
    let stride_in_mini = strided && format == MiniCqeFormat::CsumStridx;
    (op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&opcode)
        && p.op_own() == n.op_own()
        && p.sop_drop_qpn() == n.sop_drop_qpn()
        && p.srqn_uidx() == n.srqn_uidx()
        && p.imm_inval_pkey() == n.imm_inval_pkey()
        && p.flags_rqpn() == n.flags_rqpn()
        && p.slid() == n.slid()
        && p.ml_path() == n.ml_path()
        && same(RSS_HASH_RESULT.end..CHECK_SUM.start)
        && same(0..RSS_HASH_RESULT.start)
        && (same(HDR_INFO) || filler(strided, prev) || filler(strided, next))
        && (hash_in_mini || same(RSS_HASH_RESULT))
        && (csum_in_mini || same(CHECK_SUM))
        && (stride_in_mini || p.wqe_counter().wrapping_add(1) == n.wqe_counter())
}

/// Bytes of a receive CQE of an Ethernet queue the mini-CQE formats select from or the title
/// must share: `rss_hash_result` (be32), `check_sum` (be16), and `hds_ip_ext`,
/// `l4_l3_hdr_type`, `vlan_info` together (bytes 0..12 hold `wqe_id` and LRO fields, bytes
/// 16..20 the hash type and path).
const RSS_HASH_RESULT: core::ops::Range<usize> = 12..16;
const CHECK_SUM: core::ops::Range<usize> = 20..22;
const HDR_INFO: core::ops::Range<usize> = 28..32;

/// Whether `c` is a striding queue's filler CQE (`byte_cnt` bit 31): it reports no frame, so
/// it shares no header flags with the frames around it.
fn filler(strided: bool, c: &RawCqe) -> bool {
    strided && Cqe64::new_unchecked(c).byte_cnt() & (1 << 31) != 0
}

/// The length of the run of CQEs at the start of `staged` that one session in `format` can
/// carry, at most `max` (`strided`: see [`joins`]).
pub(crate) fn run_len(staged: &[RawCqe], max: u32, format: MiniCqeFormat, strided: bool) -> usize {
    let mut n = 1;
    while n < staged.len() && n < max as usize && joins(&staged[n - 1], &staged[n], format, strided)
    {
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
/// zero. Each carries its completion's `byte_cnt` and what the format adds: the RSS hash
/// result, or the raw checksum and (on a striding queue's CQ, `strided`) the stride index.
pub(crate) fn array(run: &[RawCqe], k: usize, format: MiniCqeFormat, strided: bool) -> [u8; 64] {
    let mut a = [0u8; 64];
    for (m, cqe) in run.iter().skip(k * PER_ARRAY).take(PER_ARRAY).enumerate() {
        let c = Cqe64::new_unchecked(cqe);
        let mut v = MiniCqe::new_unchecked(&mut a[m * 8..m * 8 + 8]);
        match format {
            // The RSS hash of an Ethernet queue's completion; 0 for RC and UD receives.
            MiniCqeFormat::Hash => v.set_rx_hash_result(u32::from_be_bytes([
                cqe[RSS_HASH_RESULT.start],
                cqe[RSS_HASH_RESULT.start + 1],
                cqe[RSS_HASH_RESULT.start + 2],
                cqe[RSS_HASH_RESULT.start + 3],
            ])),
            // The raw checksum of an Ethernet frame (0 for RC and UD receives); a cyclic
            // receive queue has no strides.
            _ => {
                v.set_checksum(u16::from_be_bytes([
                    cqe[CHECK_SUM.start],
                    cqe[CHECK_SUM.start + 1],
                ]));
                let stride = if strided && format == MiniCqeFormat::CsumStridx {
                    c.wqe_counter()
                } else {
                    0
                };
                v.set_stride_idx(stride);
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
        assert_eq!(run_len(&s, 64, MiniCqeFormat::Hash, false), 3);
        assert_eq!(run_len(&s, 2, MiniCqeFormat::Hash, false), 2, "capped");
        s[2] = recv(8, 30);
        assert_eq!(
            run_len(&s, 64, MiniCqeFormat::Hash, false),
            2,
            "WQE counters must follow one another"
        );
        s[1] = resp(0x105, 0x105, op::RESP_SEND_IMM, 5, 20, [1, 2, 3, 4], false);
        assert_eq!(
            run_len(&s, 64, MiniCqeFormat::Hash, false),
            1,
            "another opcode"
        );
        s[1] = resp(0x106, 0x106, op::RESP_SEND, 5, 20, [0; 4], false);
        assert_eq!(
            run_len(&s, 64, MiniCqeFormat::Hash, false),
            1,
            "another queue pair"
        );
        s[1] = resp(0x105, 0x105, op::RESP_SEND, 5, 20, [0; 4], true);
        assert_eq!(
            run_len(&s, 64, MiniCqeFormat::Hash, false),
            1,
            "another solicited bit"
        );
        let sends = [
            crate::cq::req(1, 1, 0x0a, 0, 0),
            crate::cq::req(1, 1, 0x0a, 1, 0),
        ];
        assert_eq!(
            run_len(&sends, 64, MiniCqeFormat::Hash, false),
            1,
            "requester CQEs are not compressed"
        );
        let errs = [
            crate::cq::err(1, 1, op::RESP_ERR, 0, 0, 5, 0),
            crate::cq::err(1, 1, op::RESP_ERR, 0, 1, 5, 0),
        ];
        assert_eq!(
            run_len(&errs, 64, MiniCqeFormat::Hash, false),
            1,
            "nor errors"
        );
    }

    #[test]
    fn title_and_array_bytes() {
        let run: Vec<RawCqe> = (0..10).map(|i| recv(7 + i, 100 + u32::from(i))).collect();
        let t = title(&run);
        assert_eq!(&t[44..48], &[0, 0, 0, 10], "byte_cnt is the count");
        assert_eq!(t[63], 0x2c, "RESP_SEND, compressed format");
        assert_eq!(&t[60..62], &[0, 7], "the first WQE counter");
        let a0 = array(&run, 0, MiniCqeFormat::Hash, false);
        assert_eq!(&a0[..8], &[0, 0, 0, 0, 0, 0, 0, 100]);
        assert_eq!(&a0[56..64], &[0, 0, 0, 0, 0, 0, 0, 107]);
        let a1 = array(&run, 1, MiniCqeFormat::CsumStridx, false);
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
