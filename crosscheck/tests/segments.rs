//! Send WQE segments: zverbs' setters write the bytes rdma-core's helpers and structs write,
//! and zverbs' getters read the C bytes back to the values given.
//!
//! Each test draws its inputs from a fixed seed, with edge values (0, 1, the maximum, the top
//! bit) one time in four per field. The Rust buffers start full of random bytes, so a setter
//! that skipped a byte would leave garbage behind and fail.

use zverbs_crosscheck::SplitMix64;
use zverbs_crosscheck::probe::{self, CtrlArgs};
use zverbs_mlx5dv::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg};

/// Randomized cases per segment kind.
const CASES: usize = 100_000;

fn garbage(rng: &mut SplitMix64) -> [u8; 16] {
    let mut b = [0u8; 16];
    rng.fill(&mut b);
    b
}

fn ctrl_args(rng: &mut SplitMix64) -> CtrlArgs {
    CtrlArgs {
        pi: rng.edgy_u16(),
        opcode: rng.edgy_u8(),
        opmod: rng.edgy_u8(),
        qpn: rng.edgy_u32(),
        fm_ce_se: rng.edgy_u8(),
        ds: rng.edgy_u8(),
        signature: rng.edgy_u8(),
        imm: rng.edgy_u32(),
    }
}

#[test]
fn ctrl_seg_matches_mlx5dv_set_ctrl_seg() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_c791, 1);
    let mut x86_cases = 0usize;
    for case in 0..CASES {
        let a = ctrl_args(&mut rng);

        // `set` writes a zero signature: compare its 16 bytes with the helper's for that.
        // The helper leaves dci_stream_channel_id alone, so its buffer starts zeroed.
        let c_args = CtrlArgs { signature: 0, ..a };
        let mut c = [0u8; 16];
        probe::set_ctrl_seg(&mut c, &c_args);
        let mut ours = garbage(&mut rng);
        CtrlSeg::new_unchecked(&mut ours)
            .set(a.pi, a.opcode, a.opmod, a.qpn, a.fm_ce_se, a.ds, a.imm);
        assert_eq!(
            ours, c,
            "seed {seed:#x} case {case}: bytes differ for {a:?}"
        );

        // The header's SSSE3 variant writes all 16 bytes, dci_stream_channel_id zero as ours
        // does, but takes only 24 bits of the QP number (as `qpn << 8` keeps).
        let mut x86 = garbage(&mut rng);
        if probe::set_ctrl_seg_x86(&mut x86, &c_args) {
            assert_eq!(
                ours, x86,
                "seed {seed:#x} case {case}: SSSE3 helper differs for {a:?}"
            );
            x86_cases += 1;
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
        assert_eq!(
            got, want,
            "seed {seed:#x} case {case}: getters on C bytes for {a:?}"
        );
    }
    eprintln!(
        "ctrl segment: {CASES} randomized cases vs mlx5dv_set_ctrl_seg, {x86_cases} vs mlx5dv_x86_set_ctrl_seg"
    );
}

#[test]
fn data_seg_matches_mlx5dv_set_data_seg() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_da7a, 2);
    for case in 0..CASES {
        let (len, lkey, addr) = (rng.edgy_u32(), rng.edgy_u32(), rng.edgy_u64());
        let mut c = garbage(&mut rng);
        probe::set_data_seg(&mut c, len, lkey, addr);
        let mut ours = garbage(&mut rng);
        DataSeg::new_unchecked(&mut ours).set(len, lkey, addr);
        assert_eq!(
            ours, c,
            "seed {seed:#x} case {case}: ({len:#x}, {lkey:#x}, {addr:#x})"
        );
        let v = DataSeg::new_unchecked(&c);
        assert_eq!(
            (v.byte_count(), v.lkey(), v.addr()),
            (len, lkey, addr),
            "seed {seed:#x} case {case}: getters on C bytes"
        );
    }
    eprintln!("data segment: {CASES} randomized cases vs mlx5dv_set_data_seg");
}

#[test]
fn raddr_seg_matches_struct_mlx5_wqe_raddr_seg() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_4add, 3);
    for case in 0..CASES {
        let (raddr, rkey) = (rng.edgy_u64(), rng.edgy_u32());
        let mut c = garbage(&mut rng);
        probe::set_raddr_seg(&mut c, raddr, rkey);
        let mut ours = garbage(&mut rng);
        RaddrSeg::new_unchecked(&mut ours).set(raddr, rkey);
        assert_eq!(
            ours, c,
            "seed {seed:#x} case {case}: ({raddr:#x}, {rkey:#x})"
        );
        let v = RaddrSeg::new_unchecked(&c);
        assert_eq!(
            (v.raddr(), v.rkey()),
            (raddr, rkey),
            "seed {seed:#x} case {case}: getters on C bytes"
        );
    }
    eprintln!("raddr segment: {CASES} randomized cases vs struct mlx5_wqe_raddr_seg");
}

#[test]
fn atomic_seg_matches_struct_mlx5_wqe_atomic_seg() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_a70c, 4);
    for case in 0..CASES {
        let (swap_add, compare) = (rng.edgy_u64(), rng.edgy_u64());
        let mut c = garbage(&mut rng);
        probe::set_atomic_seg(&mut c, swap_add, compare);
        let mut ours = garbage(&mut rng);
        AtomicSeg::new_unchecked(&mut ours).set(swap_add, compare);
        assert_eq!(
            ours, c,
            "seed {seed:#x} case {case}: ({swap_add:#x}, {compare:#x})"
        );
        let v = AtomicSeg::new_unchecked(&c);
        assert_eq!(
            (v.swap_add(), v.compare()),
            (swap_add, compare),
            "seed {seed:#x} case {case}: getters on C bytes"
        );
    }
    eprintln!("atomic segment: {CASES} randomized cases vs struct mlx5_wqe_atomic_seg");
}
