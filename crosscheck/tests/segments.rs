//! Send WQE segments: zverbs' setters write the bytes rdma-core's helpers and structs write,
//! and zverbs' getters read the C bytes back to the values given.
//!
//! Property tests (`proptest`, see `zverbs_crosscheck::prop`): each draws its inputs from a
//! fixed seed, with edge values (0, 1, the maximum, the top bit) one time in four per field,
//! and shrinks a failing case before it reports it. The Rust buffers start full of random
//! bytes, so a setter that skipped a byte would leave garbage behind and fail.

use proptest::prelude::*;
use zverbs_crosscheck::probe::{self, CtrlArgs};
use zverbs_crosscheck::prop::{check, edgy_u8, edgy_u16, edgy_u32, edgy_u64, garbage};
use zverbs_mlx5dv::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg};

/// Randomized cases per segment kind.
const CASES: u32 = 100_000;

fn ctrl_args() -> impl Strategy<Value = CtrlArgs> {
    (
        (edgy_u16(), edgy_u8(), edgy_u8(), edgy_u32()),
        (edgy_u8(), edgy_u8(), edgy_u8(), edgy_u32()),
    )
        .prop_map(
            |((pi, opcode, opmod, qpn), (fm_ce_se, ds, signature, imm))| CtrlArgs {
                pi,
                opcode,
                opmod,
                qpn,
                fm_ce_se,
                ds,
                signature,
                imm,
            },
        )
}

#[test]
fn ctrl_seg_matches_mlx5dv_set_ctrl_seg() {
    let x86_cases = std::cell::Cell::new(0usize);
    let cases = check(
        file!(),
        CASES,
        0x5eed_c791,
        &(ctrl_args(), garbage(), garbage()),
        |(a, mut ours, mut x86)| {
            // `set` writes a zero signature: compare its 16 bytes with the helper's for that.
            // The helper leaves dci_stream_channel_id alone, so its buffer starts zeroed.
            let c_args = CtrlArgs { signature: 0, ..a };
            let mut c = [0u8; 16];
            probe::set_ctrl_seg(&mut c, &c_args);
            CtrlSeg::new_unchecked(&mut ours)
                .set(a.pi, a.opcode, a.opmod, a.qpn, a.fm_ce_se, a.ds, a.imm);
            assert_eq!(ours, c, "bytes differ for {a:?}");

            // The header's SSSE3 variant writes all 16 bytes, dci_stream_channel_id zero as ours
            // does, but takes only 24 bits of the QP number (as `qpn << 8` keeps).
            if probe::set_ctrl_seg_x86(&mut x86, &c_args) {
                assert_eq!(ours, x86, "SSSE3 helper differs for {a:?}");
                x86_cases.set(x86_cases.get() + 1);
            }

            // Getters on the helper's bytes, signature included.
            let mut c = [0u8; 16];
            probe::set_ctrl_seg(&mut c, &a);
            let v = CtrlSeg::new_unchecked(&c);
            let want_opmod_idx_opcode =
                (u32::from(a.opmod) << 24) | (u32::from(a.pi) << 8) | u32::from(a.opcode);
            let want_qpn_ds = (a.qpn << 8) | u32::from(a.ds);
            let got = (
                v.opmod_idx_opcode(),
                v.opcode(),
                v.wqe_index(),
                v.opmod(),
                v.qpn_ds(),
                v.qpn(),
                v.ds(),
                v.signature(),
                v.fm_ce_se(),
                v.imm(),
            );
            let want = (
                want_opmod_idx_opcode,
                a.opcode,
                a.pi,
                a.opmod,
                want_qpn_ds,
                a.qpn & 0x00ff_ffff,
                a.ds & 0x3f,
                a.signature,
                a.fm_ce_se,
                a.imm,
            );
            assert_eq!(got, want, "getters on C bytes for {a:?}");
        },
    );
    eprintln!(
        "ctrl segment: {cases} randomized cases vs mlx5dv_set_ctrl_seg, {} vs mlx5dv_x86_set_ctrl_seg",
        x86_cases.get()
    );
}

#[test]
fn data_seg_matches_mlx5dv_set_data_seg() {
    let inputs = ((edgy_u32(), edgy_u32(), edgy_u64()), garbage(), garbage());
    let cases = check(
        file!(),
        CASES,
        0x5eed_da7a,
        &inputs,
        |((len, lkey, addr), mut c, mut ours)| {
            probe::set_data_seg(&mut c, len, lkey, addr);
            DataSeg::new_unchecked(&mut ours).set(len, lkey, addr);
            assert_eq!(ours, c, "({len:#x}, {lkey:#x}, {addr:#x})");
            let v = DataSeg::new_unchecked(&c);
            assert_eq!(
                (v.byte_count(), v.lkey(), v.addr()),
                (len, lkey, addr),
                "getters on C bytes"
            );
        },
    );
    eprintln!("data segment: {cases} randomized cases vs mlx5dv_set_data_seg");
}

#[test]
fn raddr_seg_matches_struct_mlx5_wqe_raddr_seg() {
    let inputs = ((edgy_u64(), edgy_u32()), garbage(), garbage());
    let cases = check(
        file!(),
        CASES,
        0x5eed_4add,
        &inputs,
        |((raddr, rkey), mut c, mut ours)| {
            probe::set_raddr_seg(&mut c, raddr, rkey);
            RaddrSeg::new_unchecked(&mut ours).set(raddr, rkey);
            assert_eq!(ours, c, "({raddr:#x}, {rkey:#x})");
            let v = RaddrSeg::new_unchecked(&c);
            assert_eq!((v.raddr(), v.rkey()), (raddr, rkey), "getters on C bytes");
        },
    );
    eprintln!("raddr segment: {cases} randomized cases vs struct mlx5_wqe_raddr_seg");
}

#[test]
fn atomic_seg_matches_struct_mlx5_wqe_atomic_seg() {
    let inputs = ((edgy_u64(), edgy_u64()), garbage(), garbage());
    let cases = check(
        file!(),
        CASES,
        0x5eed_a70c,
        &inputs,
        |((swap_add, compare), mut c, mut ours)| {
            probe::set_atomic_seg(&mut c, swap_add, compare);
            AtomicSeg::new_unchecked(&mut ours).set(swap_add, compare);
            assert_eq!(ours, c, "({swap_add:#x}, {compare:#x})");
            let v = AtomicSeg::new_unchecked(&c);
            assert_eq!(
                (v.swap_add(), v.compare()),
                (swap_add, compare),
                "getters on C bytes"
            );
        },
    );
    eprintln!("atomic segment: {cases} randomized cases vs struct mlx5_wqe_atomic_seg");
}
