//! Send WQE segments: zverbs' setters and prm's encoders (`prm::wqe::words`) write the bytes
//! rdma-core's helpers and structs write, and zverbs' getters read the C bytes back to the
//! values given.
//!
//! Property tests (`proptest`, see `zverbs_crosscheck::prop`): each draws its inputs from a
//! fixed seed, with edge values (0, 1, the maximum, the top bit) one time in four per field,
//! and shrinks a failing case before it reports it. The Rust buffers start full of random
//! bytes, so a setter that skipped a byte would leave garbage behind and fail.

use proptest::prelude::*;
use zverbs_crosscheck::ffi::{ZvAvFields, ZvDgramArgs};
use zverbs_crosscheck::probe::{self, CtrlArgs};
use zverbs_crosscheck::prop::{check, edgy_u8, edgy_u16, edgy_u32, edgy_u64, garbage};
use zverbs_mlx5dv::prm::EXTENDED_UD_AV;
use zverbs_mlx5dv::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, words};

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
            let value = words::ctrl(a.pi, a.opcode, a.opmod, a.qpn, a.fm_ce_se, a.ds, a.imm);
            assert_eq!(words::to_bytes(value), c, "encoder differs for {a:?}");

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
            let value = words::to_bytes(words::data(len, lkey, addr));
            assert_eq!(value, c, "encoder: ({len:#x}, {lkey:#x}, {addr:#x})");
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
            let value = words::to_bytes(words::raddr(raddr, rkey));
            assert_eq!(value, c, "encoder: ({raddr:#x}, {rkey:#x})");
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
            let value = words::to_bytes(words::atomic(swap_add, compare));
            assert_eq!(value, c, "encoder: ({swap_add:#x}, {compare:#x})");
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

/// 48 bytes of garbage (three `u128`s).
fn garbage48() -> impl Strategy<Value = [u8; 48]> + Clone {
    any::<[u128; 3]>().prop_map(|w| {
        let mut b = [0u8; 48];
        for (chunk, w) in b.chunks_exact_mut(16).zip(w) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        b
    })
}

fn dgram_args() -> impl Strategy<Value = ZvDgramArgs> {
    (
        (edgy_u64(), edgy_u32(), edgy_u32(), edgy_u16()),
        (edgy_u8(), edgy_u8(), edgy_u8(), edgy_u8(), edgy_u8()),
        (any::<[u8; 6]>(), any::<[u8; 16]>()),
    )
        .prop_map(
            |(
                (key, dqp_dct, grh_gid_fl, rlid),
                (ext, stat_rate_sl, fl_mlid, tclass, hop_limit),
                (rmac, rgid),
            )| ZvDgramArgs {
                key,
                dqp_dct,
                grh_gid_fl,
                rlid,
                ext,
                stat_rate_sl,
                fl_mlid,
                tclass,
                hop_limit,
                rmac,
                rgid,
                pad: [0; 11],
            },
        )
}

/// What `DatagramSeg`'s getters say, in the probe's struct.
fn av_fields(b: &[u8; 48]) -> ZvAvFields {
    let v = DatagramSeg::new_unchecked(b);
    let mut reserved = [0u8; 4];
    reserved.copy_from_slice(&b[zverbs_mlx5dv::prm::wqe::av::QKEY_RESERVED]);
    ZvAvFields {
        dc_key: v.dc_key(),
        qkey: v.qkey(),
        qkey_reserved: u32::from_be_bytes(reserved),
        dqp_dct: v.dqp_dct(),
        grh_gid_fl: v.grh_gid_fl(),
        rlid: v.rlid(),
        stat_rate_sl: v.stat_rate_sl(),
        fl_mlid: v.fl_mlid(),
        tclass: v.tclass(),
        hop_limit: v.hop_limit(),
        rmac: v.rmac(),
        rgid: v.rgid(),
        pad: [0; 4],
    }
}

/// The per-post path of a UD send: an address vector (random bytes, as any AH's may be) with
/// the remote QPN and Q_Key written over it, against libmlx5's `set_datagram_seg`; then every
/// getter on the C bytes against `struct mlx5_wqe_av`'s fields.
#[test]
fn datagram_seg_from_av_matches_libmlx5_set_datagram_seg() {
    let inputs = (
        (edgy_u32(), edgy_u32()),
        garbage48(),
        garbage48(),
        garbage48(),
    );
    let cases = check(
        file!(),
        CASES,
        0x5eed_0dda,
        &inputs,
        |((remote_qpn, qkey), av, mut c, mut ours)| {
            probe::set_datagram_from_av(&mut c, &av, remote_qpn, qkey);
            DatagramSeg::new_unchecked(&mut ours).set_from_av(&av, remote_qpn, qkey);
            assert_eq!(ours, c, "qpn {remote_qpn:#x} qkey {qkey:#x} av {av:02x?}");
            assert_eq!(av_fields(&c), probe::read_av(&c), "getters on C bytes");
            let v = DatagramSeg::new_unchecked(&c);
            assert_eq!(v.dqp(), remote_qpn & 0x00ff_ffff);
            assert!(v.extended());
        },
    );
    eprintln!("datagram segment: {cases} randomized cases vs libmlx5's set_datagram_seg");
}

/// The datagram segment of a DC initiator's send, built from a random address vector (whose
/// `dqp_dct` may carry bits already) with the DCT number and access key, against libmlx5's
/// `mlx5dv_wr_set_dc_addr`; then the getters on the C bytes.
#[test]
fn dc_datagram_seg_from_av_matches_libmlx5_set_dc_addr() {
    let inputs = (
        (edgy_u32(), edgy_u32(), edgy_u32()),
        garbage48(),
        garbage48(),
        garbage48(),
    );
    let cases = check(
        file!(),
        CASES,
        0x5eed_0dc0,
        &inputs,
        |((dctn, key_hi, key_lo), av, mut c, mut ours)| {
            let key = (u64::from(key_hi) << 32) | u64::from(key_lo);
            probe::set_dc_datagram_from_av(&mut c, &av, dctn, key);
            DatagramSeg::new_unchecked(&mut ours).set_dc_from_av(&av, dctn, key);
            assert_eq!(ours, c, "dctn {dctn:#x} key {key:#x} av {av:02x?}");
            assert_eq!(av_fields(&c), probe::read_av(&c), "getters on C bytes");
            let v = DatagramSeg::new_unchecked(&c);
            assert_eq!(v.dc_key(), key);
            assert!(v.extended());
            assert_eq!(v.dqp() & (dctn & 0x00ff_ffff), dctn & 0x00ff_ffff);
        },
    );
    eprintln!("DC datagram segment: {cases} randomized cases vs libmlx5's set_dc_addr");
}

/// Every field setter against `mlx5dv_set_dgram_seg`, both buffers starting as the same
/// garbage (the helper leaves `reserved0` alone, and so do the setters); the getters read the
/// arguments back.
#[test]
fn datagram_seg_setters_match_mlx5dv_set_dgram_seg() {
    let inputs = (dgram_args(), garbage48());
    let cases = check(file!(), CASES, 0x5eed_da9a, &inputs, |(a, start)| {
        let mut c = start;
        probe::set_dgram_seg(&mut c, &a);
        let mut ours = start;
        let mut v = DatagramSeg::new_unchecked(&mut ours);
        v.set_dc_key(a.key);
        v.set_dqp_dct((u32::from(a.ext) << 31) | a.dqp_dct);
        v.set_stat_rate_sl(a.stat_rate_sl);
        v.set_fl_mlid(a.fl_mlid);
        v.set_rlid(a.rlid);
        v.set_rmac(&a.rmac);
        v.set_tclass(a.tclass);
        v.set_hop_limit(a.hop_limit);
        v.set_grh_gid_fl(a.grh_gid_fl);
        v.set_rgid(&a.rgid);
        assert_eq!(ours, c, "{a:?}");
        let v = DatagramSeg::new_unchecked(&c);
        let want_dqp_dct = (u32::from(a.ext) << 31) | a.dqp_dct;
        assert_eq!(v.dqp_dct(), want_dqp_dct);
        assert_eq!(v.extended(), want_dqp_dct & EXTENDED_UD_AV != 0);
        assert_eq!(
            (v.dc_key(), v.qkey(), v.rlid(), v.grh_gid_fl()),
            (a.key, (a.key >> 32) as u32, a.rlid, a.grh_gid_fl)
        );
        assert_eq!(
            (v.stat_rate_sl(), v.fl_mlid(), v.tclass(), v.hop_limit()),
            (a.stat_rate_sl, a.fl_mlid, a.tclass, a.hop_limit)
        );
        assert_eq!((v.rmac(), v.rgid()), (a.rmac, a.rgid));

        // set_qkey writes key.qkey.qkey alone, as libmlx5 does per post.
        let mut ours = c;
        DatagramSeg::new_unchecked(&mut ours).set_qkey(a.dqp_dct);
        let mut want = probe::read_av(&c);
        want.qkey = a.dqp_dct;
        want.dc_key = (u64::from(a.dqp_dct) << 32) | (a.key & 0xffff_ffff);
        assert_eq!(probe::read_av(&ours), want);
    });
    eprintln!("datagram segment setters: {cases} randomized cases vs mlx5dv_set_dgram_seg");
}
