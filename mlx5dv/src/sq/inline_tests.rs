//! Inline requests posted and rung one at a time ([`PostSend::post`], which writes an inline
//! request of one entry with its own path): the same ring, BlueFlame and doorbell-record bytes
//! as the field-wise writer's ([`PostSend::stage`] then [`PostSend::ring`]), and the bytes a
//! WQE must have, at every length, at every block of the ring (across its end) and over stale
//! bytes.

extern crate std;

use std::vec::Vec;

use super::frame::{advance, expect_wqe, read_wrapped};
use super::*;
use crate::testutil::{Rig, caps};
use zverbs_core::RemoteBuf;

/// The largest inline payload of the queues below (a WRITE of it is four basic blocks).
const MAX_INLINE: u32 = 200;

/// An inline request of kind `kind` (WRITE, WRITE with immediate, SEND, SEND with immediate)
/// of `sgl`, signaled or not, and its opcode, immediate and segments after the control one.
fn request<'a>(kind: usize, sgl: &'a [Sge], signaled: bool) -> (SendWr<'a>, u8, u32, Vec<u8>) {
    let remote = RemoteBuf::new(0xabc0, 0x77);
    let mut raddr = [0u8; 16];
    RaddrSeg::new_unchecked(&mut raddr).set(remote.addr, remote.rkey);
    let (wr, op, imm, header) = match kind {
        0 => (
            SendWr::write(9, sgl, remote),
            opcode::RDMA_WRITE,
            0,
            raddr.to_vec(),
        ),
        1 => (
            SendWr::write_imm(9, sgl, remote, 0x1234_5678),
            opcode::RDMA_WRITE_IMM,
            0x1234_5678,
            raddr.to_vec(),
        ),
        2 => (SendWr::send(9, sgl), opcode::SEND, 0, Vec::new()),
        _ => (
            SendWr::send_imm(9, sgl, 0x0bad_cafe),
            opcode::SEND_IMM,
            0x0bad_cafe,
            Vec::new(),
        ),
    };
    let wr = wr.inline();
    (if signaled { wr.signaled() } else { wr }, op, imm, header)
}

/// A queue of 8 basic blocks (BlueFlame buffers of `bf` bytes, 0 for none) over stale bytes,
/// its producer at block `start`.
fn rig(bf: u32, start: u32) -> Rig {
    let mut rig = Rig::new(8, bf, caps(2, MAX_INLINE));
    rig.mem.fill_sq(0xaa);
    advance(&mut rig, start);
    rig
}

#[test]
fn an_inline_post_writes_what_the_field_wise_writer_writes() {
    // Under Miri (100 times slower), each header's block boundaries (the payload starts 36
    // bytes into a WRITE, 20 into a SEND) from the block where the shorter WQE ends at the
    // ring's end, the longer's inline segment wrapping by a byte, and a length of each move
    // size, the empty one and the limit from blocks 0 to 4, kinds and BlueFlame alternating:
    // every path of the post (either head, fitting or wrapping, each move, one block or more,
    // with BlueFlame and without) and of the field-wise writer.
    #[rustfmt::skip]
    let miri: [(usize, u32, u32, u32); 20] = [
        // (kind, length, start, BlueFlame)
        (0, 28, 7, 0), (1, 29, 7, 256), (1, 92, 6, 256), (0, 93, 6, 0),
        (0, 156, 5, 0), (1, 157, 5, 256),
        (2, 44, 7, 256), (3, 45, 7, 0), (3, 108, 6, 0), (2, 109, 6, 256),
        (2, 172, 5, 256), (3, 173, 5, 0),
        (0, 0, 0, 0), (3, 0, 1, 256), (1, 1, 2, 0), (2, 3, 3, 256), (3, 4, 4, 0),
        (0, 8, 0, 256), (1, 64, 1, 0), (2, 200, 2, 256),
    ];
    let cases: Vec<(usize, u32, u32, u32)> = if cfg!(miri) {
        miri.to_vec()
    } else {
        (0..4)
            .flat_map(|kind| (0..=MAX_INLINE).map(move |len| (kind, len)))
            .flat_map(|(kind, len)| (0..8).map(move |start| (kind, len, start)))
            .flat_map(|(kind, len, start)| [0, 256].map(|bf| (kind, len, start, bf)))
            .collect()
    };
    for (kind, len, start, bf) in cases {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let sgl = [Sge::from_slice(&data, 0)];
        let (wr, op, imm, header) = request(kind, &sgl, len % 2 == 1);
        let at = std::format!("kind={kind} len={len} start={start} bf={bf}");
        let mut staged = rig(bf, start);
        let mut posted = rig(bf, start);
        // SAFETY: never executed by a device; the inline source is live.
        unsafe { staged.sq.stage(&wr) }.unwrap();
        staged.sq.ring();
        // SAFETY: as above.
        unsafe { posted.sq.post(&wr) }.unwrap();
        let ring = posted.mem.sq_bytes();
        assert_eq!(ring, staged.mem.sq_bytes(), "ring, {at}");
        assert_eq!(
            posted.mem.bf_bytes(),
            staged.mem.bf_bytes(),
            "BlueFlame, {at}"
        );
        assert_eq!(posted.mem.dbrec(1), staged.mem.dbrec(1), "record, {at}");
        assert_eq!(posted.sq.producer(), staged.sq.producer(), "{at}");
        assert_eq!(
            posted.sq.outstanding_signaled(),
            staged.sq.outstanding_signaled(),
            "signaled, {at}"
        );
        // The bytes themselves, padding zeroed over the stale ones.
        let mut want = expect_wqe(start, op, imm, &header, 0, Some(&data));
        if len % 2 == 1 {
            // The control segment's `fm_ce_se`: a CQE asked for.
            want[11] = fm_ce_se::CQ_UPDATE;
        }
        assert_eq!(read_wrapped(&ring, start, want.len()), want, "{at}");
    }
}

/// An inline request of several entries (empty ones among them), or of one empty entry,
/// posted alone: the one-entry path declines it, and it is written and rung as the
/// field-wise writer writes it.
#[test]
fn an_inline_post_of_several_entries_writes_what_the_field_wise_writer_writes() {
    let data: Vec<u8> = (0..MAX_INLINE).map(|i| (i * 5 + 1) as u8).collect();
    let lists: [&[u32]; 5] = [&[0], &[3, 20], &[0, 13], &[13, 0], &[0, 0]];
    // Under Miri (100 times slower), each list as a WRITE and as a SEND (with an immediate
    // for every other list), from each block in turn, without BlueFlame and with: each WQE is
    // one block, written by the field-wise writer whatever the kind.
    #[rustfmt::skip]
    let miri: [(usize, usize, u32, u32); 10] = [
        // (list, kind, start, BlueFlame)
        (0, 0, 0, 0), (0, 2, 1, 0), (1, 1, 2, 0), (1, 3, 3, 0), (2, 0, 4, 256),
        (2, 2, 5, 256), (3, 1, 6, 256), (3, 3, 7, 256), (4, 0, 0, 0), (4, 2, 1, 256),
    ];
    for (l, lens) in lists.into_iter().enumerate() {
        let mut at = 0;
        let sgl: Vec<Sge> = lens
            .iter()
            .map(|&n| {
                let s = Sge::from_slice(&data[at..at + n as usize], 0);
                at += n as usize;
                s
            })
            .collect();
        let gathered = &data[..at];
        for kind in 0..4 {
            let (wr, op, imm, header) = request(kind, &sgl, true);
            for start in 0..8 {
                for bf in [0, 256] {
                    if cfg!(miri) && !miri.contains(&(l, kind, start, bf)) {
                        continue;
                    }
                    let at = std::format!("lens={lens:?} kind={kind} start={start} bf={bf}");
                    let mut staged = rig(bf, start);
                    let mut posted = rig(bf, start);
                    // SAFETY: never executed by a device; the inline sources are live.
                    unsafe { staged.sq.stage(&wr) }.unwrap();
                    staged.sq.ring();
                    // SAFETY: as above.
                    unsafe { posted.sq.post(&wr) }.unwrap();
                    let ring = posted.mem.sq_bytes();
                    assert_eq!(ring, staged.mem.sq_bytes(), "ring, {at}");
                    assert_eq!(
                        posted.mem.bf_bytes(),
                        staged.mem.bf_bytes(),
                        "BlueFlame, {at}"
                    );
                    assert_eq!(posted.mem.dbrec(1), staged.mem.dbrec(1), "record, {at}");
                    let mut want = expect_wqe(start, op, imm, &header, 0, Some(gathered));
                    want[11] = fm_ce_se::CQ_UPDATE;
                    assert_eq!(read_wrapped(&ring, start, want.len()), want, "{at}");
                }
            }
        }
    }
}

#[test]
fn an_inline_post_over_the_limit_is_refused_with_nothing_written() {
    let data = [0x5au8; MAX_INLINE as usize + 1];
    let sgl = [Sge::from_slice(&data, 0)];
    for kind in 0..4 {
        let (wr, ..) = request(kind, &sgl, true);
        let mut rig = rig(256, 7);
        let (ring, bf) = (rig.mem.sq_bytes(), rig.mem.bf_bytes());
        // SAFETY: never executed by a device; the inline source is live.
        let got = unsafe { rig.sq.post(&wr) };
        assert_eq!(
            got,
            Err(PostError::InlineTooLarge {
                len: MAX_INLINE + 1,
                max: MAX_INLINE
            })
        );
        assert_eq!(rig.mem.sq_bytes(), ring);
        assert_eq!(rig.mem.bf_bytes(), bf);
        assert_eq!(rig.mem.dbrec(1), 7);
        assert_eq!(rig.sq.producer(), 7);
    }
}
