//! The frame of the send queue's unit tests (`tests` in `sq.rs`, RC; `ud_tests.rs`, UD;
//! `dc_tests.rs`, DC): the bytes a WQE must have, the ring read across its wrap, and the
//! producer moved to a block.

extern crate std;

use std::vec::Vec;

use super::*;
use crate::testutil::{Mem, QPN, Rig, RigBindings, req_cqe};
use zverbs_core::{Completion, PollCq};

/// The bytes of a WQE at block `pi`: the control segment (`op`, `imm`), the segments of
/// `header` (remote address for RC, datagram for UD), then `n` data segments (entry `i`:
/// length `0x10 + i`, lkey `i + 1`, address `0x1000 × (i + 1)`) or the inline `data`, padded to
/// 16 bytes.
pub(super) fn expect_wqe(
    pi: u32,
    op: u8,
    imm: u32,
    header: &[u8],
    n: usize,
    inline: Option<&[u8]>,
) -> Vec<u8> {
    let mut v = Vec::new();
    let ds = 1 + header.len() / 16 + inline.map_or(n, |d| inline_ds(d.len()));
    let mut ctrl = [0u8; 16];
    CtrlSeg::new_unchecked(&mut ctrl).set(pi as u16, op, 0, QPN, 0, ds as u8, imm);
    v.extend_from_slice(&ctrl);
    v.extend_from_slice(header);
    match inline {
        Some(d) if !d.is_empty() => {
            v.extend_from_slice(&inline_byte_count(d.len() as u32).to_be_bytes());
            v.extend_from_slice(d);
            while v.len() % 16 != 0 {
                v.push(0);
            }
        }
        Some(_) => {}
        None => {
            for i in 0..n {
                let mut d = [0u8; 16];
                DataSeg::new_unchecked(&mut d).set(
                    i as u32 + 1,
                    0x10 + i as u32,
                    0x1000 * (i as u64 + 1),
                );
                v.extend_from_slice(&d);
            }
        }
    }
    v
}

/// Reads `len` bytes of the ring from block `pi`, following the wrap.
pub(super) fn read_wrapped(ring: &[u8], pi: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ring[(pi as usize * 64 + i) % ring.len()])
        .collect()
}

/// Posts and completes `n` single-block NOPs so the producer starts at block `n`.
pub(super) fn advance<T: SelfAddressed>(rig: &mut Rig<T>, n: u32) {
    for i in 0..n {
        // SAFETY: never executed by a device.
        unsafe { rig.sq.stage(&SendWr::nop(1000 + u64::from(i)).signaled()) }.unwrap();
        rig.sq.ring();
        complete_nop(&mut rig.cq, &rig.mem, i);
    }
    assert_eq!(rig.sq.producer(), n);
}

/// Completes the NOP at WQE index `i` as the device does, a requester CQE at the CQ's
/// consumer index with its owner bit, and polls it.
pub(super) fn complete_nop(cq: &mut crate::CompletionQueue<RigBindings>, mem: &Mem, i: u32) {
    let ci = cq.consumer();
    let owner = ((ci / cq.cqe_cnt()) & 1) as u8;
    let slot = (ci % cq.cqe_cnt()) as usize;
    mem.put_cqe(slot, req_cqe(QPN, opcode::NOP, i as u16, 0, owner));
    let mut wc = [Completion::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1);
}
