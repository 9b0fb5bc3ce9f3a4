//! What the UD tests share, on the software device (`sim_ud_data.rs`) and on real devices
//! (`device_ud.rs`): the Q_Key, the GRH area at the start of every UD receive, multicast
//! GIDs, and the check of a datagram's receive completion and of the bytes it wrote.
#![allow(dead_code)]

use zverbs::{Completion, Gid, MrBuf, WcFlags, WcOpcode};

/// The Q_Key of the tests' UD QPs.
pub const QKEY: u32 = 0x1111_1111;

/// Bytes at the start of a UD receive that the device fills with the GRH (or leaves alone
/// when the datagram has none); the datagram follows.
pub const GRH: usize = 40;

/// The multicast GID `ff12::n` (link-local scope, as the software device's groups use).
pub fn mgid(n: u8) -> Gid {
    let mut g = Gid::default();
    g.0[0] = 0xff;
    g.0[1] = 0x12;
    g.0[15] = n;
    g
}

/// What a datagram's receive completion must say.
#[derive(Clone, Copy, Debug)]
pub struct Expect<'a> {
    /// The receive's `wr_id`.
    pub wr_id: u64,
    /// The receiving QP.
    pub qp_num: u32,
    /// The sending QP.
    pub src_qp: u32,
    /// The datagram's bytes.
    pub data: &'a [u8],
    /// Its immediate, if sent with one.
    pub imm: Option<u32>,
    /// Whether it came with a GRH.
    pub grh: bool,
}

/// Checks a datagram's receive completion (status, opcode, QPs, `byte_len` counting the GRH
/// area, `wc_flags`, immediate) and the receive's bytes: the datagram right after the GRH
/// area at `at` in `buf`, and the `fill` byte untouched for `tail` bytes after it.
pub fn check_datagram(
    c: &Completion,
    e: &Expect<'_>,
    buf: &MrBuf,
    at: usize,
    tail: usize,
    fill: u8,
) {
    assert!(c.status.is_success(), "{c:?}");
    assert_eq!(c.opcode, WcOpcode::Recv, "{c:?}");
    assert_eq!(
        (c.wr_id, c.qp_num, c.src_qp, c.byte_len as usize),
        (e.wr_id, e.qp_num, e.src_qp, GRH + e.data.len()),
        "{c:?}"
    );
    assert_eq!(c.flags.contains(WcFlags::GRH), e.grh, "GRH flag: {c:?}");
    assert_eq!(
        c.flags.contains(WcFlags::WITH_IMM),
        e.imm.is_some(),
        "{c:?}"
    );
    if let Some(imm) = e.imm {
        assert_eq!(c.imm, imm, "{c:?}");
    }
    let mut got = vec![0u8; e.data.len() + tail];
    buf.read(at + GRH, &mut got).unwrap();
    assert_eq!(
        &got[..e.data.len()],
        e.data,
        "the datagram after the GRH area"
    );
    assert!(
        got[e.data.len()..].iter().all(|&b| b == fill),
        "bytes after the datagram were written"
    );
}
