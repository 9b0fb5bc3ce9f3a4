//! Completions: what a completion queue reports about a finished work request.

/// Status of a completion: every `enum ibv_wc_status` of `<infiniband/verbs.h>`, with the same
/// numbers ([`WcStatus::to_raw`]), and unknown values kept as data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The request completed successfully (`IBV_WC_SUCCESS`, 0).
    #[default]
    Success,
    /// Local length error: a message exceeded the receive buffers or the port's limits (1).
    LocLenErr,
    /// Local QP operation error: an inconsistency in the work queue entry (2).
    LocQpOpErr,
    /// Local EE context operation error (3).
    LocEecOpErr,
    /// Local protection error: a local buffer is not in a valid region for the access (4).
    LocProtErr,
    /// Flushed: the QP was in the error state when the request was processed (5).
    WrFlushErr,
    /// Memory window bind error (6).
    MwBindErr,
    /// Bad response from the responder (7).
    BadRespErr,
    /// Local access error: a protection error on a local buffer during a READ/atomic reply or
    /// an incoming write with immediate (8).
    LocAccessErr,
    /// Remote invalid request: the responder saw an invalid message or opcode (9).
    RemInvReqErr,
    /// Remote access error: a protection error on the remote buffer (10).
    RemAccessErr,
    /// Remote operation error: the responder could not complete the operation (11).
    RemOpErr,
    /// Transport retry counter exceeded: no acknowledgement from the peer (12).
    RetryExcErr,
    /// RNR retry counter exceeded: the peer had no receive posted (13).
    RnrRetryExcErr,
    /// Local RDD violation (14).
    LocRddViolErr,
    /// Remote invalid RD request (15).
    RemInvRdReqErr,
    /// Remote aborted (16).
    RemAbortErr,
    /// Invalid EE context number (17).
    InvEecnErr,
    /// Invalid EE context state (18).
    InvEecStateErr,
    /// Fatal error (19).
    FatalErr,
    /// Response timeout (20).
    RespTimeoutErr,
    /// General error, for failures no other status names (21).
    GeneralErr,
    /// Tag-matching error (22).
    TmErr,
    /// Tag-matching rendezvous incomplete (23).
    TmRndvIncomplete,
    /// A status number this crate does not know.
    Unknown(u32),
}

impl WcStatus {
    const TABLE: [WcStatus; 24] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
        WcStatus::TmErr,
        WcStatus::TmRndvIncomplete,
    ];

    /// The status for libibverbs' number `raw`.
    #[inline]
    pub const fn from_raw(raw: u32) -> Self {
        if (raw as usize) < Self::TABLE.len() {
            Self::TABLE[raw as usize]
        } else {
            WcStatus::Unknown(raw)
        }
    }

    /// libibverbs' number for this status.
    #[inline]
    pub const fn to_raw(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocEecOpErr => 3,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::MwBindErr => 6,
            WcStatus::BadRespErr => 7,
            WcStatus::LocAccessErr => 8,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
            WcStatus::LocRddViolErr => 14,
            WcStatus::RemInvRdReqErr => 15,
            WcStatus::RemAbortErr => 16,
            WcStatus::InvEecnErr => 17,
            WcStatus::InvEecStateErr => 18,
            WcStatus::FatalErr => 19,
            WcStatus::RespTimeoutErr => 20,
            WcStatus::GeneralErr => 21,
            WcStatus::TmErr => 22,
            WcStatus::TmRndvIncomplete => 23,
            WcStatus::Unknown(raw) => raw,
        }
    }

    /// Whether the request succeeded.
    #[inline]
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }

    /// libibverbs' name for the status, as `ibv_wc_status_str` spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
            WcStatus::TmRndvIncomplete => "TM software rendezvous",
            WcStatus::Unknown(_) => "unknown",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WcStatus::Unknown(raw) => write!(f, "unknown status {raw}"),
            s => f.write_str(s.as_str()),
        }
    }
}

/// What kind of request a completion is for, as `enum ibv_wc_opcode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND or SEND with immediate (requester side) (`IBV_WC_SEND`, 0).
    #[default]
    Send,
    /// An RDMA WRITE or WRITE with immediate (requester side) (1).
    RdmaWrite,
    /// An RDMA READ (2).
    RdmaRead,
    /// An atomic compare-and-swap (3).
    CompSwap,
    /// An atomic fetch-and-add (4).
    FetchAdd,
    /// A NOP. libibverbs has no number for it; [`WcOpcode::to_raw`] reports it as `SEND`, as
    /// libmlx5 does.
    Nop,
    /// A received SEND or SEND with immediate (`IBV_WC_RECV`, 128).
    Recv,
    /// A received RDMA WRITE with immediate (`IBV_WC_RECV_RDMA_WITH_IMM`, 129).
    RecvRdmaWithImm,
    /// An opcode number this crate does not know.
    Unknown(u32),
}

impl WcOpcode {
    /// The opcode for libibverbs' number `raw`.
    #[inline]
    pub const fn from_raw(raw: u32) -> Self {
        match raw {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompSwap,
            4 => WcOpcode::FetchAdd,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Unknown(other),
        }
    }

    /// libibverbs' number for this opcode.
    #[inline]
    pub const fn to_raw(self) -> u32 {
        match self {
            WcOpcode::Send | WcOpcode::Nop => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
            WcOpcode::Unknown(raw) => raw,
        }
    }

    /// Whether the completion belongs to the receive side.
    #[inline]
    pub const fn is_recv(self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }
}

bitflags::bitflags! {
    /// Flags of a completion, as `enum ibv_wc_flags` (the two bits a completion of these
    /// queues can carry).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct WcFlags: u8 {
        /// A GRH is present in the receive buffer (`IBV_WC_GRH`).
        const GRH = 1 << 0;
        /// [`Completion::imm`] holds immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = 1 << 1;
    }
}

impl WcFlags {
    /// No flags.
    pub const NONE: Self = Self::empty();

    /// Flags from libibverbs' raw `wc_flags`; bits not defined above are dropped.
    #[inline]
    pub const fn from_ibv(bits: u32) -> Self {
        Self::from_bits_truncate((bits & 0xff) as u8)
    }
}

/// One completion.
///
/// `src_qp`, `slid`, `pkey_index`, `sl` and `dlid_path_bits` are `ibv_wc`'s, which matter
/// for receives on unreliable-datagram queue pairs (who sent the datagram); whether the
/// receive buffer starts with the 40-byte GRH is [`WcFlags::GRH`].
///
/// For an error completion only `wr_id`, `status`, `vendor_err` and `qp_num` are meaningful, as
/// in libibverbs; backends that know the request's opcode report it too.
///
/// # Example
///
/// A poller fills the caller's buffer ([`PollCq`](crate::PollCq)); [`Completion::ok`] turns a
/// failed request into an error:
///
/// ```
/// use zverbs_core::{Completion, WcFlags, WcOpcode, WcStatus};
///
/// let recv = Completion {
///     wr_id: 7,
///     byte_len: 9,
///     imm: 42,
///     opcode: WcOpcode::Recv,
///     flags: WcFlags::WITH_IMM,
///     ..Completion::EMPTY
/// };
/// assert!(recv.is_success());
/// assert_eq!((recv.ok().unwrap().byte_len, recv.imm()), (9, Some(42)));
///
/// let failed = Completion { wr_id: 8, status: WcStatus::RemAccessErr, ..Completion::EMPTY };
/// assert_eq!(failed.ok().unwrap_err().status, WcStatus::RemAccessErr);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// How the request ended.
    pub status: WcStatus,
    /// What kind of request it was.
    pub opcode: WcOpcode,
    /// Bytes transferred: the message size for receives (on a UD QP with the 40 bytes of the
    /// GRH area), the READ length, 8 for atomics.
    pub byte_len: u32,
    /// Local QP number of the queue the request was posted to (for a receive from a shared
    /// receive queue, the QP the message arrived on).
    pub qp_num: u32,
    /// Immediate data in host byte order, valid when `flags` contains [`WcFlags::WITH_IMM`].
    pub imm: u32,
    /// The device's raw vendor syndrome for error completions (for mlx5, `vendor_err_synd`).
    pub vendor_err: u32,
    /// For a receive: the sender's QP number (on an unreliable-datagram QP, where it differs
    /// from message to message); 0 for send completions.
    pub src_qp: u32,
    /// For a receive: the sender's local identifier (0 on RoCE); 0 for send completions.
    pub slid: u16,
    /// For a receive on a UD QP: the index of the P_Key it came with (0 when the message
    /// carried an immediate, which the device reports in the same field); 0 otherwise.
    pub pkey_index: u16,
    /// For a receive: the service level it came with; 0 for send completions.
    pub sl: u8,
    /// For a receive: the destination LID's path bits; 0 for send completions.
    pub dlid_path_bits: u8,
    /// Completion flags.
    pub flags: WcFlags,
}

impl Completion {
    /// An all-zero completion, for initialising the caller's poll buffer.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        byte_len: 0,
        imm: 0,
        qp_num: 0,
        vendor_err: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        flags: WcFlags::NONE,
        src_qp: 0,
        slid: 0,
        pkey_index: 0,
        sl: 0,
        dlid_path_bits: 0,
    };

    /// The immediate data, when the completion carries some.
    #[inline]
    pub const fn imm(&self) -> Option<u32> {
        if self.flags.contains(WcFlags::WITH_IMM) {
            Some(self.imm)
        } else {
            None
        }
    }

    /// Whether the request succeeded.
    #[inline]
    pub const fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// The completion if its request succeeded, else a [`WcError`] with its status and the
    /// device's syndrome: `for c in cq.poll_into(&mut wc) { c.ok()?; }`.
    ///
    /// ```
    /// use zverbs_core::{Completion, WcError, WcStatus};
    ///
    /// fn bytes(c: &Completion) -> Result<u32, WcError> {
    ///     Ok(c.ok()?.byte_len) // `?` leaves with the failure
    /// }
    ///
    /// let done = Completion { wr_id: 1, byte_len: 64, ..Completion::EMPTY };
    /// assert_eq!(bytes(&done), Ok(64));
    /// let failed = Completion { wr_id: 2, qp_num: 0x1c3, status: WcStatus::RemAccessErr, ..Completion::EMPTY };
    /// let err = bytes(&failed).unwrap_err();
    /// assert_eq!((err.wr_id, err.qp_num, err.status), (2, 0x1c3, WcStatus::RemAccessErr));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "work request 2 on QP 0x1c3 failed: remote access error (vendor syndrome 0x0)"
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`WcError`] for every status but [`WcStatus::Success`].
    #[inline]
    pub fn ok(&self) -> Result<&Self, WcError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(WcError::of(self))
        }
    }
}

/// A completion whose request failed ([`Completion::ok`]): its status, named in the message as
/// libibverbs names it ("remote access error"), and the device's vendor syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error(
    "work request {wr_id} on QP {qp_num:#x} failed: {status} (vendor syndrome {vendor_err:#x})"
)]
pub struct WcError {
    /// The failed request's `wr_id`.
    pub wr_id: u64,
    /// The QP it was posted to.
    pub qp_num: u32,
    /// How it ended (never [`WcStatus::Success`]).
    pub status: WcStatus,
    /// The device's raw vendor syndrome (for mlx5, `vendor_err_synd`).
    pub vendor_err: u32,
    /// What kind of request it was, where the backend knows it (see [`Completion`]).
    pub opcode: WcOpcode,
}

impl WcError {
    #[cold]
    fn of(c: &Completion) -> Self {
        Self {
            wr_id: c.wr_id,
            qp_num: c.qp_num,
            status: c.status,
            vendor_err: c.vendor_err,
            opcode: c.opcode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbers_round_trip() {
        for raw in 0..=30u32 {
            assert_eq!(WcStatus::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_raw(13), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::from_raw(21), WcStatus::GeneralErr);
        assert_eq!(WcStatus::from_raw(99), WcStatus::Unknown(99));
    }

    #[test]
    fn only_success_is_success() {
        for raw in 0..=30u32 {
            let status = WcStatus::from_raw(raw);
            assert_eq!(status.is_success(), raw == 0, "{status:?}");
            let wc = Completion {
                status,
                ..Completion::EMPTY
            };
            assert_eq!(wc.is_success(), raw == 0, "{status:?}");
        }
    }

    #[test]
    fn statuses_read_as_libibverbs_names_them() {
        extern crate std;
        use std::string::ToString;
        // As `ibv_wc_status_str` spells them.
        assert_eq!(WcStatus::Success.as_str(), "success");
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
        assert_eq!(
            WcStatus::RnrRetryExcErr.to_string(),
            "RNR retry counter exceeded"
        );
        assert_eq!(WcStatus::Unknown(99).as_str(), "unknown");
        assert_eq!(WcStatus::Unknown(99).to_string(), "unknown status 99");
    }

    #[test]
    fn opcode_numbers_round_trip() {
        for raw in [0, 1, 2, 3, 4, 128, 129, 7, 200] {
            assert_eq!(WcOpcode::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(WcOpcode::Nop.to_raw(), 0);
        assert!(WcOpcode::RecvRdmaWithImm.is_recv());
        assert!(!WcOpcode::RdmaRead.is_recv());
    }

    #[test]
    fn imm_only_with_flag() {
        let mut c = Completion {
            imm: 5,
            ..Completion::EMPTY
        };
        assert_eq!(c.imm(), None);
        c.flags = WcFlags::WITH_IMM;
        assert_eq!(c.imm(), Some(5));
        assert_eq!(
            WcFlags::from_ibv(0xffff_ffff),
            WcFlags::GRH | WcFlags::WITH_IMM
        );
        assert_eq!(WcFlags::from_ibv(1 << 2), WcFlags::NONE);
    }

    #[test]
    fn ok_maps_every_status() {
        extern crate std;
        use std::string::ToString;
        for raw in 0..=30u32 {
            let status = WcStatus::from_raw(raw);
            let c = Completion {
                wr_id: 42,
                qp_num: 0x1c3,
                vendor_err: 0x88,
                status,
                opcode: WcOpcode::RdmaWrite,
                ..Completion::EMPTY
            };
            match c.ok() {
                Ok(same) => {
                    assert_eq!(raw, 0);
                    assert_eq!(same, &c);
                }
                Err(e) => {
                    assert_ne!(raw, 0);
                    assert_eq!(
                        (e.wr_id, e.qp_num, e.status, e.vendor_err, e.opcode),
                        (42, 0x1c3, status, 0x88, WcOpcode::RdmaWrite)
                    );
                    let msg = e.to_string();
                    assert!(msg.contains(&status.to_string()), "{msg}");
                    assert!(msg.contains("0x88"), "{msg}");
                }
            }
        }
        let e = Completion {
            status: WcStatus::RemAccessErr,
            vendor_err: 0x13,
            ..Completion::EMPTY
        }
        .ok()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "work request 0 on QP 0x0 failed: remote access error (vendor syndrome 0x13)"
        );
    }

    #[test]
    fn completion_is_small() {
        assert!(core::mem::size_of::<Completion>() <= 56);
    }
}
