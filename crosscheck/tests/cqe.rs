//! CQE decoding: every accessor of zverbs' `Cqe64` reads what rdma-core reads through
//! `struct mlx5_cqe64`, `struct mlx5_err_cqe` and the `mlx5dv_get_cqe_*` helpers; the CQE
//! opcode and syndrome enums round-trip; error statuses map as libmlx5 maps them; the poller
//! flags a receive with `IBV_WC_GRH` exactly when libmlx5 would.
//!
//! The CQE comparisons are property tests (`proptest`, see `zverbs_crosscheck::prop`): a
//! failing CQE is shrunk before it is reported. The GRH test feeds one poller a sequence of
//! CQEs, whose decoding path depends on the CQE before (inline or out of line), so it keeps a
//! seeded sequence (`ZVERBS_CROSSCHECK_SEED`) rather than independent cases.

use proptest::prelude::*;
use zverbs_core::{Completion, PollCq, WcFlags, WcStatus};
use zverbs_crosscheck::ffi::ZvCqeFields;
use zverbs_crosscheck::probe;
use zverbs_crosscheck::prop::{check, edgy_u8, edgy_u16, edgy_u32};
use zverbs_crosscheck::{DeviceMem, SplitMix64};
use zverbs_mlx5dv::prm::cqe::{Cqe64, CqeOpcode, Syndrome, field};
use zverbs_mlx5dv::{CompletionQueue, CqBinding, CqLayout, RqSlot, RqState, status_of};

/// Randomized CQE buffers.
const CASES: u32 = 100_000;

/// 64 bytes: zeros, all ones, or random (as four `u128`s, cheaper to draw than 64 bytes).
fn cqe_bytes() -> impl Strategy<Value = [u8; 64]> {
    prop_oneof![
        14 => any::<[u128; 4]>().prop_map(|w| {
            let mut b = [0u8; 64];
            for (chunk, w) in b.chunks_exact_mut(16).zip(w) {
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            b
        }),
        1 => Just([0u8; 64]),
        1 => Just([0xffu8; 64]),
    ]
}

/// A random CQE: random bytes, with (half the time) a known opcode, and (half the time) a
/// known syndrome, so that every decoding path is hit often.
fn random_cqe(known_syndromes: Vec<u8>) -> impl Strategy<Value = [u8; 64]> {
    let opcode = proptest::option::of(proptest::sample::select(
        &[0u8, 1, 2, 3, 4, 5, 6, 12, 13, 14, 15][..],
    ));
    let syndrome = proptest::option::of(proptest::sample::select(known_syndromes));
    (cqe_bytes(), opcode, syndrome).prop_map(|(mut b, op, synd)| {
        if let Some(op) = op {
            b[63] = (op << 4) | (b[63] & 0x0f);
        }
        if let Some(synd) = synd {
            b[55] = synd;
        }
        b
    })
}

/// What our accessors say, in the probe's struct. The view has no timestamp accessor: that
/// one is read at our `field::TIMESTAMP` offset.
fn ours(b: &[u8; 64]) -> ZvCqeFields {
    let v = Cqe64::new_unchecked(b);
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&b[field::TIMESTAMP]);
    ZvCqeFields {
        timestamp: u64::from_be_bytes(ts),
        srqn_uidx: v.srqn_uidx(),
        imm_inval_pkey: v.imm_inval_pkey(),
        byte_cnt: v.byte_cnt(),
        sop_drop_qpn: v.sop_drop_qpn(),
        err_srqn: v.srqn_uidx(),
        err_s_wqe_opcode_qpn: v.sop_drop_qpn(),
        wc_status: status_of(v.syndrome()).to_raw(),
        flags_rqpn: v.flags_rqpn(),
        wc_grh: if v.grh() {
            u32::from(WcFlags::GRH.bits())
        } else {
            0
        },
        wqe_counter: v.wqe_counter(),
        err_wqe_counter: v.wqe_counter(),
        signature: v.signature(),
        op_own: v.op_own(),
        owner: v.owner(),
        se: v.se(),
        format: v.format(),
        opcode: v.opcode().to_raw(),
        syndrome: v.syndrome().to_raw(),
        vendor_err_synd: v.vendor_err_synd(),
        err_signature: v.signature(),
        err_op_own: v.op_own(),
        pad: [0; 6],
    }
}

fn known_syndromes() -> Vec<u8> {
    [
        "LOCAL_LENGTH_ERR",
        "LOCAL_QP_OP_ERR",
        "LOCAL_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOCAL_ACCESS_ERR",
        "REMOTE_INVAL_REQ_ERR",
        "REMOTE_ACCESS_ERR",
        "REMOTE_OP_ERR",
        "TRANSPORT_RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "REMOTE_ABORTED_ERR",
    ]
    .iter()
    .map(|n| probe::fact(&format!("MLX5_CQE_SYNDROME_{n}")) as u8)
    .collect()
}

#[test]
fn cqe_accessors_match_struct_mlx5_cqe64_and_helpers() {
    let cqe = random_cqe(known_syndromes());
    let cases = check(file!(), CASES, 0x5eed_c0e6, &cqe, |b| {
        let c = probe::read_cqe(&b);
        assert_eq!(ours(&b), c, "CQE {b:02x?}");
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(v.qpn(), c.sop_drop_qpn & 0x00ff_ffff);
        assert_eq!(v.send_opcode(), (c.sop_drop_qpn >> 24) as u8);
    });
    eprintln!(
        "cqe: {cases} randomized CQEs vs struct mlx5_cqe64 / mlx5_err_cqe / mlx5dv_get_cqe_*"
    );
}

#[test]
fn cqe_setters_write_what_struct_mlx5_cqe64_reads() {
    let inputs = (
        cqe_bytes(),
        (edgy_u32(), edgy_u32(), edgy_u32(), edgy_u32(), edgy_u32()),
        (edgy_u16(), edgy_u8(), edgy_u8(), edgy_u8()),
    );
    let cases = check(
        file!(),
        CASES,
        0x5eed_5e77,
        &inputs,
        |(mut b, fields, bytes)| {
            let (srqn_uidx, imm, byte_cnt, sop, flags_rqpn) = fields;
            let (wqe_counter, op_own, synd, vendor) = bytes;
            let mut v = Cqe64::new_unchecked(&mut b);
            v.set_flags_rqpn(flags_rqpn);
            v.set_srqn_uidx(srqn_uidx);
            v.set_imm_inval_pkey(imm);
            v.set_byte_cnt(byte_cnt);
            v.set_sop_drop_qpn(sop);
            v.set_wqe_counter(wqe_counter);
            v.set_op_own(op_own);
            v.set_syndrome(synd);
            v.set_vendor_err_synd(vendor);
            let c = probe::read_cqe(&b);
            let got = (
                c.flags_rqpn,
                c.srqn_uidx,
                c.imm_inval_pkey,
                c.byte_cnt,
                c.sop_drop_qpn,
                c.wqe_counter,
                c.op_own,
                c.syndrome,
                c.vendor_err_synd,
            );
            let want = (
                flags_rqpn,
                srqn_uidx,
                imm,
                byte_cnt,
                sop,
                wqe_counter,
                op_own,
                synd,
                vendor,
            );
            assert_eq!(got, want);
        },
    );
    eprintln!("cqe setters: {cases} randomized CQEs read back through struct mlx5_cqe64");
}

/// Receive CQEs with random `flags_rqpn` (and every other byte random but the opcode, the
/// owner bit and the QPN), polled one per call by a real `CompletionQueue`: the GRH flag of each
/// completion is the one libmlx5 computes from the same bytes. Two QPs share the CQ; a CQE of
/// the QP the previous one named is decoded inline, one of the other QP out of line, so both
/// decoders are compared about half the time each.
#[test]
fn receive_grh_flag_matches_libmlx5() {
    const CQES: u32 = 64;
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_06e4, 9);
    let ring = DeviceMem::new(CQES as usize * 64, 4096);
    for i in 0..CQES as usize {
        ring.write_at(i * 64 + 63, &[0xf0]); // MLX5_CQE_INVALID << 4, as libmlx5 starts
    }
    let dbrec = DeviceMem::new(8, 8);
    let layout = CqLayout {
        buf: ring.ptr(),
        dbrec: dbrec.ptr().cast::<u32>(),
        cqe_cnt: CQES,
        cqe_size: 64,
        cqn: 3,
    };
    let qpns = [rng.below(1 << 24) as u32, rng.below(1 << 24) as u32 ^ 1];
    let slots: [Vec<RqSlot>; 2] = [0, 1].map(|_| (0..CQES).map(|_| RqSlot::new()).collect());
    let states = [
        RqState::new(&slots[0][..]).expect("slots"),
        RqState::new(&slots[1][..]).expect("slots"),
    ];
    let bindings = [
        CqBinding::recv_only(qpns[0], &states[0]),
        CqBinding::recv_only(qpns[1], &states[1]),
    ];
    // SAFETY: the ring and the doorbell record outlive the poller, the only one; it is new,
    // and its bindings carry the states of the two receive queues this test stands in for.
    let mut cq = unsafe { CompletionQueue::new(&layout, &bindings[..]) }.expect("CQ");

    let (mut inline, mut general, mut with_grh) = (0u64, 0u64, 0u64);
    let mut last_qp = None;
    for case in 0..CASES {
        let qp = rng.below(2) as usize;
        let ci = case;
        let mut b = [0u8; 64];
        rng.fill(&mut b);
        let mut v = Cqe64::new_unchecked(&mut b);
        v.set_flags_rqpn(rng.edgy_u32());
        v.set_sop_drop_qpn((rng.next_u32() & 0xff00_0000) | qpns[qp]);
        let op = rng.pick(&[
            CqeOpcode::RespWrImm,
            CqeOpcode::RespSend,
            CqeOpcode::RespSendImm,
        ]);
        // Plain format (no scatter bits), the pass's owner bit, the solicited bit at random.
        let owner = ((ci / CQES) & 1) as u8;
        v.set_op_own((op.to_raw() << 4) | (rng.next_u32() as u8 & 2) | owner);
        ring.write_at(((ci % CQES) * 64) as usize, &b);

        let c = probe::read_cqe(&b);
        let mut wc = [Completion::EMPTY; 2];
        assert_eq!(cq.poll(&mut wc), 1, "seed {seed:#x} case {case}");
        let ours = if wc[0].flags.contains(WcFlags::GRH) {
            u32::from(WcFlags::GRH.bits())
        } else {
            0
        };
        assert_eq!(
            ours,
            c.wc_grh,
            "seed {seed:#x} case {case}: flags_rqpn {:#010x}, {:?} on the {} path",
            c.flags_rqpn,
            op,
            if last_qp == Some(qp) {
                "inline"
            } else {
                "general"
            }
        );
        assert_eq!(
            wc[0].status,
            WcStatus::Success,
            "seed {seed:#x} case {case}"
        );
        if last_qp == Some(qp) {
            inline += 1;
        } else {
            general += 1;
        }
        with_grh += u64::from(c.wc_grh != 0);
        last_qp = Some(qp);
    }
    eprintln!(
        "cqe grh: {CASES} receive CQEs with random flags_rqpn vs libmlx5's IBV_WC_GRH rule \
         ({inline} decoded inline, {general} out of line, {with_grh} with a GRH)"
    );
    assert!(inline > 0 && general > 0 && with_grh > 0 && with_grh < CASES as u64);
}

#[test]
fn cqe_opcodes_and_syndromes_round_trip() {
    let names = [
        ("MLX5_CQE_REQ", CqeOpcode::Req),
        ("MLX5_CQE_RESP_WR_IMM", CqeOpcode::RespWrImm),
        ("MLX5_CQE_RESP_SEND", CqeOpcode::RespSend),
        ("MLX5_CQE_RESP_SEND_IMM", CqeOpcode::RespSendImm),
        ("MLX5_CQE_RESP_SEND_INV", CqeOpcode::RespSendInv),
        ("MLX5_CQE_RESIZE_CQ", CqeOpcode::ResizeCq),
        ("MLX5_CQE_NO_PACKET", CqeOpcode::NoPacket),
        ("MLX5_CQE_SIG_ERR", CqeOpcode::SigErr),
        ("MLX5_CQE_REQ_ERR", CqeOpcode::ReqErr),
        ("MLX5_CQE_RESP_ERR", CqeOpcode::RespErr),
        ("MLX5_CQE_INVALID", CqeOpcode::Invalid),
    ];
    for (name, op) in names {
        let raw = probe::fact(name) as u8;
        assert_eq!(CqeOpcode::from_raw(raw), op, "{name} = {raw}");
    }
    for raw in 0..=15u8 {
        let op = CqeOpcode::from_raw(raw);
        assert_eq!(op.to_raw(), raw);
        let named = names.iter().any(|(_, o)| *o == op);
        assert_eq!(named, !matches!(op, CqeOpcode::Unknown(_)), "opcode {raw}");
    }

    let syndromes = [
        ("LOCAL_LENGTH_ERR", Syndrome::LocalLengthErr),
        ("LOCAL_QP_OP_ERR", Syndrome::LocalQpOpErr),
        ("LOCAL_PROT_ERR", Syndrome::LocalProtErr),
        ("WR_FLUSH_ERR", Syndrome::WrFlushErr),
        ("MW_BIND_ERR", Syndrome::MwBindErr),
        ("BAD_RESP_ERR", Syndrome::BadRespErr),
        ("LOCAL_ACCESS_ERR", Syndrome::LocalAccessErr),
        ("REMOTE_INVAL_REQ_ERR", Syndrome::RemoteInvalReqErr),
        ("REMOTE_ACCESS_ERR", Syndrome::RemoteAccessErr),
        ("REMOTE_OP_ERR", Syndrome::RemoteOpErr),
        ("TRANSPORT_RETRY_EXC_ERR", Syndrome::TransportRetryExcErr),
        ("RNR_RETRY_EXC_ERR", Syndrome::RnrRetryExcErr),
        ("REMOTE_ABORTED_ERR", Syndrome::RemoteAbortedErr),
    ];
    for (name, s) in syndromes {
        let raw = probe::fact(&format!("MLX5_CQE_SYNDROME_{name}")) as u8;
        assert_eq!(
            Syndrome::from_raw(raw),
            s,
            "MLX5_CQE_SYNDROME_{name} = {raw:#x}"
        );
    }
    for raw in 0..=255u8 {
        let s = Syndrome::from_raw(raw);
        assert_eq!(s.to_raw(), raw);
        let named = syndromes.iter().any(|(_, n)| *n == s);
        assert_eq!(
            named,
            !matches!(s, Syndrome::Unknown(_)),
            "syndrome {raw:#x}"
        );
    }
    eprintln!("cqe enums: 16 opcodes and 256 syndromes round-tripped");
}

#[test]
fn status_of_matches_libmlx5() {
    // libmlx5 (cq.c, mlx5_handle_error_cqe): syndrome -> ibv_wc_status, as facts; the numbers
    // are checked against the C enums below.
    let table: [(&str, &str); 13] = [
        ("LOCAL_LENGTH_ERR", "IBV_WC_LOC_LEN_ERR"),
        ("LOCAL_QP_OP_ERR", "IBV_WC_LOC_QP_OP_ERR"),
        ("LOCAL_PROT_ERR", "IBV_WC_LOC_PROT_ERR"),
        ("WR_FLUSH_ERR", "IBV_WC_WR_FLUSH_ERR"),
        ("MW_BIND_ERR", "IBV_WC_MW_BIND_ERR"),
        ("BAD_RESP_ERR", "IBV_WC_BAD_RESP_ERR"),
        ("LOCAL_ACCESS_ERR", "IBV_WC_LOC_ACCESS_ERR"),
        ("REMOTE_INVAL_REQ_ERR", "IBV_WC_REM_INV_REQ_ERR"),
        ("REMOTE_ACCESS_ERR", "IBV_WC_REM_ACCESS_ERR"),
        ("REMOTE_OP_ERR", "IBV_WC_REM_OP_ERR"),
        ("TRANSPORT_RETRY_EXC_ERR", "IBV_WC_RETRY_EXC_ERR"),
        ("RNR_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR"),
        ("REMOTE_ABORTED_ERR", "IBV_WC_REM_ABORT_ERR"),
    ];
    let general = probe::fact("IBV_WC_GENERAL_ERR") as u32;
    let mut expected = [general; 256];
    for (synd, status) in table {
        let raw = probe::fact(&format!("MLX5_CQE_SYNDROME_{synd}")) as usize;
        expected[raw] = probe::fact(status) as u32;
    }
    for raw in 0..=255u8 {
        let ours = status_of(Syndrome::from_raw(raw));
        let want = expected[usize::from(raw)];
        assert_eq!(ours.to_raw(), want, "syndrome {raw:#x}: ours {ours:?}");
        assert_eq!(
            probe::wc_status_of_syndrome(raw),
            want,
            "the probe's own table, {raw:#x}"
        );
        assert_eq!(WcStatus::from_raw(want), ours);
    }
    eprintln!("status_of: all 256 syndromes vs libmlx5's mapping (IBV_WC_* from verbs.h)");
}
