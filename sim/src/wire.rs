//! The messages between device instances in different processes: RC requests and their
//! answers, and UD datagrams, as bytes.
//!
//! A QP connected to a peer in another process ([`Peer::Remote`](crate::Peer)) does not touch
//! the peer's memory: its device sends a [`Request`] (with the gathered payload of a WRITE or
//! SEND) to the device instance at the peer's LID, whose engine does the responder's work on
//! its own memory, receive queue and CQs and sends back a [`Response`] (an ACK, with the data
//! of a READ or the original value of an atomic; an RNR NAK with the responder's RNR timer;
//! or a NAK with the syndrome the requester reports). Each QP has at most one request in
//! flight, so execution stays in order. An answer that never comes (a peer process that
//! died) is the requester's transport timer's business.
//!
//! Both ends check where a message comes from, since a QPN is easy to guess: a responder
//! serves a request only when its source LID and QPN are the ones its own connection names
//! (anything else is refused with "transport retry exceeded", what a requester whose packets
//! a responder drops ends with), and a requester takes a response only from the LID and QPN
//! it sent to.
//!
//! A UD datagram to another LID travels as a [`Datagram`] (its source, destination, Q_Key,
//! SL, immediate, GRH and payload), sent to the destination LID; one to a multicast LID is
//! sent to the MLID, and the transport hands it to every other instance (not back to the
//! sender, whose own members the sending device served itself). Nothing answers a datagram.
//!
//! How the bytes travel is the transport's business ([`Wire`]): it must deliver each message
//! whole and in order per destination, and hand what arrives to
//! [`Device::deliver`](crate::Device::deliver).
//!
//! A request from a DC initiator is a [`Request`] with the target's access key
//! ([`Request::dc_key`]): its responder is the DC target the request names, which checks the
//! key instead of a connection; the response goes back to the initiator as an RC one does.
//!
//! Layout (all integers little-endian): byte 0 the kind (1 request, 2 response), then the
//! fields in declaration order, then the payload to the end of the message. A request's
//! `solicited` byte is a set of flags (bit 0 solicited, bit 1 a DC request, whose access key
//! follows `compare`). A response's status is three bytes: its kind (0 ACK, 1 RNR NAK, 2 NAK,
//! 3 sequence error NAK, 4 dropped), then the syndrome and vendor syndrome of a NAK, or the
//! RNR timer code of an RNR NAK.

/// Carries messages to other device instances, named by their LID.
pub trait Wire: Send + Sync {
    /// Sends `msg` to the device instance at `lid`. Called with the device's lock held: it
    /// must not block on the peer (queue the message and return).
    fn send(&self, lid: u16, msg: Vec<u8>);
}

/// An RC request from a requester QP to a responder QP in another process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The requester's LID (where the response goes).
    pub src_lid: u16,
    /// The requester's QPN.
    pub src_qpn: u32,
    /// The responder's QPN.
    pub dst_qpn: u32,
    /// The requester's tag, echoed in the response.
    pub seq: u32,
    /// The request's PSN (24 bits): its first packet's.
    pub psn: u32,
    /// The WQE opcode (`MLX5_OPCODE_*`).
    pub opcode: u8,
    /// The request asked for a solicited event.
    pub solicited: bool,
    /// Remote address (WRITE, READ, atomics).
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// The immediate as the control segment carries it.
    pub imm: [u8; 4],
    /// Message length: the payload's for WRITE and SEND, the bytes to read for READ, 8 for
    /// atomics.
    pub len: u64,
    /// Atomic operand: swap value or addend.
    pub swap_add: u64,
    /// Atomic compare value.
    pub compare: u64,
    /// For a request from a DC initiator, the target's access key: the responder serves it at
    /// the DC target `dst_qpn` when the key is the target's, whoever sends it. `None` for RC.
    pub dc_key: Option<u64>,
    /// The payload of a WRITE or SEND.
    pub payload: Vec<u8>,
}

/// How a responder answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Done; the response carries READ data or the atomic's original value.
    Ack,
    /// No receive was posted: retry once the RNR timer this code names (the responder's
    /// `min_rnr_timer`, 5 bits of the specification's table) has run.
    Rnr(u8),
    /// Refused with (syndrome, vendor syndrome) for the requester's error CQE.
    Nak(u8, u8),
    /// PSN sequence error NAK: the request is ahead of the PSN the responder expects (the
    /// response's `psn`); not carried out.
    Seq,
    /// Dropped by the responder (a repeated out-of-sequence request, a duplicate atomic whose
    /// result is no longer kept): on a network no answer would come and the requester's
    /// timer would run out; this says so at once.
    Dropped,
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The responder's LID.
    pub src_lid: u16,
    /// The responder's QPN.
    pub src_qpn: u32,
    /// The requester's QPN.
    pub dst_qpn: u32,
    /// The request's tag.
    pub seq: u32,
    /// The acknowledgement's PSN: the request's last packet's for an ACK or a NAK of it, the
    /// last request carried out for a duplicate acknowledged again, the expected PSN for a
    /// sequence error NAK.
    pub psn: u32,
    /// The outcome.
    pub status: Status,
    /// READ data, or the 8 bytes of an atomic's original value as they were in memory.
    pub data: Vec<u8>,
}

/// A UD datagram from a QP to another instance's QP, or to a multicast group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The sender's LID (with its path bits).
    pub src_lid: u16,
    /// The sending QP.
    pub src_qpn: u32,
    /// The destination LID (a multicast LID for a group).
    pub dlid: u16,
    /// The destination QP (`0xffffff` for a group).
    pub dqpn: u32,
    /// The Q_Key the receiver checks.
    pub qkey: u32,
    /// The service level.
    pub sl: u8,
    /// The sender asked for a solicited event.
    pub solicited: bool,
    /// The immediate, as the control segment carries it, when the SEND has one.
    pub imm: Option<[u8; 4]>,
    /// The GRH, when the datagram carries one.
    pub grh: Option<[u8; 40]>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A message between device instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A request for a responder.
    Request(Request),
    /// The answer to a request.
    Response(Response),
    /// A UD datagram (no answer).
    Datagram(Datagram),
}

const REQUEST: u8 = 1;
const RESPONSE: u8 = 2;
const DATAGRAM: u8 = 3;
/// Bytes before a datagram's optional parts: kind, LIDs, QPNs, Q_Key, SL, flags (bit 0
/// solicited, bit 1 immediate, bit 2 GRH); then the immediate (4) and the GRH (40) when
/// present, then the payload.
const DATAGRAM_HEADER: usize = 1 + 2 + 4 + 2 + 4 + 4 + 1 + 1;
/// Bytes before a request's payload.
const REQUEST_HEADER: usize = 1 + 2 + 4 + 4 + 4 + 4 + 1 + 1 + 8 + 4 + 4 + 8 + 8 + 8;
/// Bytes before a response's data.
const RESPONSE_HEADER: usize = 1 + 2 + 4 + 4 + 4 + 4 + 1 + 1 + 1;

/// Reads little-endian fields in order.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.b.split_first_chunk::<N>()?;
        self.b = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

impl Message {
    /// The message as bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Request(r) => {
                let mut v = Vec::with_capacity(REQUEST_HEADER + r.payload.len());
                v.push(REQUEST);
                v.extend_from_slice(&r.src_lid.to_le_bytes());
                v.extend_from_slice(&r.src_qpn.to_le_bytes());
                v.extend_from_slice(&r.dst_qpn.to_le_bytes());
                v.extend_from_slice(&r.seq.to_le_bytes());
                v.extend_from_slice(&r.psn.to_le_bytes());
                v.push(r.opcode);
                v.push(u8::from(r.solicited) | (u8::from(r.dc_key.is_some()) << 1));
                v.extend_from_slice(&r.raddr.to_le_bytes());
                v.extend_from_slice(&r.rkey.to_le_bytes());
                v.extend_from_slice(&r.imm);
                v.extend_from_slice(&r.len.to_le_bytes());
                v.extend_from_slice(&r.swap_add.to_le_bytes());
                v.extend_from_slice(&r.compare.to_le_bytes());
                debug_assert_eq!(v.len(), REQUEST_HEADER);
                if let Some(key) = r.dc_key {
                    v.extend_from_slice(&key.to_le_bytes());
                }
                v.extend_from_slice(&r.payload);
                v
            }
            Message::Response(r) => {
                let mut v = Vec::with_capacity(RESPONSE_HEADER + r.data.len());
                v.push(RESPONSE);
                v.extend_from_slice(&r.src_lid.to_le_bytes());
                v.extend_from_slice(&r.src_qpn.to_le_bytes());
                v.extend_from_slice(&r.dst_qpn.to_le_bytes());
                v.extend_from_slice(&r.seq.to_le_bytes());
                v.extend_from_slice(&r.psn.to_le_bytes());
                let (kind, syndrome, vendor) = match r.status {
                    Status::Ack => (0, 0, 0),
                    Status::Rnr(t) => (1, t & 0x1f, 0),
                    Status::Nak(s, v) => (2, s, v),
                    Status::Seq => (3, 0, 0),
                    Status::Dropped => (4, 0, 0),
                };
                v.extend_from_slice(&[kind, syndrome, vendor]);
                debug_assert_eq!(v.len(), RESPONSE_HEADER);
                v.extend_from_slice(&r.data);
                v
            }
            Message::Datagram(d) => {
                let mut v = Vec::with_capacity(DATAGRAM_HEADER + 44 + d.payload.len());
                v.push(DATAGRAM);
                v.extend_from_slice(&d.src_lid.to_le_bytes());
                v.extend_from_slice(&d.src_qpn.to_le_bytes());
                v.extend_from_slice(&d.dlid.to_le_bytes());
                v.extend_from_slice(&d.dqpn.to_le_bytes());
                v.extend_from_slice(&d.qkey.to_le_bytes());
                v.push(d.sl);
                let flags = u8::from(d.solicited)
                    | (u8::from(d.imm.is_some()) << 1)
                    | (u8::from(d.grh.is_some()) << 2);
                v.push(flags);
                debug_assert_eq!(v.len(), DATAGRAM_HEADER);
                if let Some(imm) = d.imm {
                    v.extend_from_slice(&imm);
                }
                if let Some(grh) = d.grh {
                    v.extend_from_slice(&grh);
                }
                v.extend_from_slice(&d.payload);
                v
            }
        }
    }

    /// The LID the bytes of a message name as its sender (`src_lid`, the first field of every
    /// kind), without parsing the rest; `None` for bytes that are no message.
    pub fn source_lid(b: &[u8]) -> Option<u16> {
        if !matches!(b.first()?, &REQUEST | &RESPONSE | &DATAGRAM) {
            return None;
        }
        Some(u16::from_le_bytes([*b.get(1)?, *b.get(2)?]))
    }

    /// Whether the message in `b` says it comes from the instance at `lid`: a request's and a
    /// response's source is that LID, a datagram's may add path bits to it (the low seven bits
    /// that its address vector's `src_path_bits` sets, as the sending device does). A transport
    /// that knows which instance sent the bytes checks it before delivering them.
    pub fn sent_from(b: &[u8], lid: u16) -> bool {
        const PATH_BITS: u16 = 0x7f;
        match (b.first(), Message::source_lid(b)) {
            (Some(&DATAGRAM), Some(src)) => {
                src & !PATH_BITS == lid & !PATH_BITS && src & lid == lid
            }
            (_, Some(src)) => src == lid,
            _ => false,
        }
    }

    /// Parses a message; `None` for bytes that are not one (untrusted input: never a panic).
    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut r = Reader { b };
        match r.u8()? {
            REQUEST => {
                let src_lid = r.u16()?;
                let src_qpn = r.u32()?;
                let dst_qpn = r.u32()?;
                let seq = r.u32()?;
                let psn = r.u32()?;
                let opcode = r.u8()?;
                let flags = r.u8()?;
                if flags & !3 != 0 {
                    return None;
                }
                let raddr = r.u64()?;
                let rkey = r.u32()?;
                let imm = r.take::<4>()?;
                let len = r.u64()?;
                let swap_add = r.u64()?;
                let compare = r.u64()?;
                let dc_key = if flags & 2 != 0 { Some(r.u64()?) } else { None };
                Some(Message::Request(Request {
                    src_lid,
                    src_qpn,
                    dst_qpn,
                    seq,
                    psn,
                    opcode,
                    solicited: flags & 1 != 0,
                    raddr,
                    rkey,
                    imm,
                    len,
                    swap_add,
                    compare,
                    dc_key,
                    payload: r.b.to_vec(),
                }))
            }
            RESPONSE => {
                let src_lid = r.u16()?;
                let src_qpn = r.u32()?;
                let dst_qpn = r.u32()?;
                let seq = r.u32()?;
                let psn = r.u32()?;
                let status = match (r.u8()?, r.u8()?, r.u8()?) {
                    (0, _, _) => Status::Ack,
                    (1, t, _) => Status::Rnr(t & 0x1f),
                    (2, s, v) => Status::Nak(s, v),
                    (3, _, _) => Status::Seq,
                    (4, _, _) => Status::Dropped,
                    _ => return None,
                };
                Some(Message::Response(Response {
                    src_lid,
                    src_qpn,
                    dst_qpn,
                    seq,
                    psn,
                    status,
                    data: r.b.to_vec(),
                }))
            }
            DATAGRAM => {
                let src_lid = r.u16()?;
                let src_qpn = r.u32()?;
                let dlid = r.u16()?;
                let dqpn = r.u32()?;
                let qkey = r.u32()?;
                let sl = r.u8()?;
                let flags = r.u8()?;
                if flags & !7 != 0 {
                    return None;
                }
                let imm = if flags & 2 != 0 {
                    Some(r.take::<4>()?)
                } else {
                    None
                };
                let grh = if flags & 4 != 0 {
                    Some(r.take::<40>()?)
                } else {
                    None
                };
                Some(Message::Datagram(Datagram {
                    src_lid,
                    src_qpn,
                    dlid,
                    dqpn,
                    qkey,
                    sl,
                    solicited: flags & 1 != 0,
                    imm,
                    grh,
                    payload: r.b.to_vec(),
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes_round_trip() {
        let m = Message::Request(Request {
            src_lid: 0x0102,
            src_qpn: 0x100,
            dst_qpn: 0x101,
            seq: 7,
            psn: 0xff_fffe,
            opcode: 0x0b,
            solicited: true,
            raddr: 0x1122_3344_5566_7788,
            rkey: 0xaabb_ccdd,
            imm: [0xca, 0xfe, 0xba, 0xbe],
            len: 3,
            swap_add: 0,
            compare: 0,
            dc_key: None,
            payload: std::vec![1, 2, 3],
        });
        let b = m.encode();
        assert_eq!(b.len(), REQUEST_HEADER + 3);
        assert_eq!(&b[..7], &[1, 0x02, 0x01, 0x00, 0x01, 0, 0]);
        assert_eq!(&b[b.len() - 3..], &[1, 2, 3]);
        assert_eq!(Message::decode(&b), Some(m.clone()));
        for cut in 0..REQUEST_HEADER {
            assert_eq!(Message::decode(&b[..cut]), None, "cut at {cut}");
        }
        // A DC request: flag bit 1, the access key after the header, then the payload.
        let Message::Request(mut r) = m else {
            unreachable!()
        };
        r.dc_key = Some(0x0123_4567_89ab_cdef);
        let dc = Message::Request(r);
        let b = dc.encode();
        assert_eq!(b.len(), REQUEST_HEADER + 8 + 3);
        assert_eq!(b[20], 0b11);
        assert_eq!(
            &b[REQUEST_HEADER..REQUEST_HEADER + 8],
            &0x0123_4567_89ab_cdefu64.to_le_bytes()
        );
        assert_eq!(Message::decode(&b), Some(dc));
        assert_eq!(Message::decode(&b[..REQUEST_HEADER + 7]), None);
        let mut unknown = b.clone();
        unknown[20] |= 4;
        assert_eq!(Message::decode(&unknown), None);
    }

    #[test]
    fn datagram_bytes_round_trip() {
        for (imm, grh) in [
            (None, None),
            (Some([1, 2, 3, 4]), None),
            (None, Some([7; 40])),
            (Some([5; 4]), Some([8; 40])),
        ] {
            let m = Message::Datagram(Datagram {
                src_lid: 0x0102,
                src_qpn: 0x100,
                dlid: 0xc001,
                dqpn: 0xff_ffff,
                qkey: 0x1111_2222,
                sl: 3,
                solicited: true,
                imm,
                grh,
                payload: std::vec![1, 2, 3],
            });
            let b = m.encode();
            assert_eq!(&b[..3], &[3, 0x02, 0x01]);
            assert_eq!(b[DATAGRAM_HEADER - 1] & 1, 1);
            assert_eq!(Message::decode(&b), Some(m));
            let head = DATAGRAM_HEADER + imm.map_or(0, |_| 4) + grh.map_or(0, |_| 40);
            for cut in 0..head {
                assert_eq!(Message::decode(&b[..cut]), None, "cut at {cut}");
            }
        }
        let mut bad_flags = [0u8; DATAGRAM_HEADER];
        bad_flags[0] = 3;
        bad_flags[DATAGRAM_HEADER - 1] = 8;
        assert_eq!(Message::decode(&bad_flags), None);
    }

    #[test]
    fn the_sender_is_read_from_the_first_field_of_every_kind() {
        let req = Message::Request(Request {
            src_lid: 0x0102,
            src_qpn: 1,
            dst_qpn: 2,
            seq: 0,
            psn: 0,
            opcode: 0x08,
            solicited: false,
            raddr: 0,
            rkey: 0,
            imm: [0; 4],
            len: 0,
            swap_add: 0,
            compare: 0,
            dc_key: None,
            payload: std::vec![],
        })
        .encode();
        let resp = Message::Response(Response {
            src_lid: 0x0102,
            src_qpn: 2,
            dst_qpn: 1,
            seq: 0,
            psn: 0,
            status: Status::Ack,
            data: std::vec![],
        })
        .encode();
        let dgram = |src_lid| {
            Message::Datagram(Datagram {
                src_lid,
                src_qpn: 1,
                dlid: 3,
                dqpn: 2,
                qkey: 0,
                sl: 0,
                solicited: false,
                imm: None,
                grh: None,
                payload: std::vec![],
            })
            .encode()
        };
        for b in [&req, &resp, &dgram(0x0102)] {
            assert_eq!(Message::source_lid(b), Some(0x0102));
            assert!(Message::sent_from(b, 0x0102));
            assert!(!Message::sent_from(b, 0x0103));
            assert!(!Message::sent_from(&b[..2], 0x0102), "cut short");
        }
        // A datagram's source may carry path bits; a request's may not.
        assert!(Message::sent_from(&dgram(0x0102 | 0x7c), 0x0102));
        assert!(!Message::sent_from(&dgram(0x0182), 0x0102));
        assert!(!Message::sent_from(&dgram(0x0100), 0x0102));
        let mut req_bits = req.clone();
        req_bits[1] |= 0x7c;
        assert!(!Message::sent_from(&req_bits, 0x0102));
        assert_eq!(Message::source_lid(&[9, 2, 1]), None);
        assert_eq!(Message::source_lid(&[]), None);
    }

    #[test]
    fn response_bytes_round_trip() {
        for status in [
            Status::Ack,
            Status::Rnr(0),
            Status::Rnr(12),
            Status::Rnr(31),
            Status::Nak(0x13, 0x31),
            Status::Seq,
            Status::Dropped,
        ] {
            let m = Message::Response(Response {
                src_lid: 0x0102,
                src_qpn: 0x101,
                dst_qpn: 0x100,
                seq: 9,
                psn: 0x12_3456,
                status,
                data: std::vec![9; 8],
            });
            let b = m.encode();
            assert_eq!(b[0], 2);
            assert_eq!(Message::decode(&b), Some(m));
        }
        let mut unknown_status = [0u8; RESPONSE_HEADER];
        unknown_status[0] = 2;
        unknown_status[RESPONSE_HEADER - 3] = 5;
        assert_eq!(Message::decode(&unknown_status), None);
        assert_eq!(Message::decode(&[9]), None);
    }
}
