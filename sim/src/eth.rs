//! Ethernet frames as the device's port sees them: the headers it reads (Ethernet, one C-VLAN
//! tag, IPv4, UDP and TCP), the checksums it computes on send and checks on receive, and the
//! port itself ([`EthPort`]), which frames sent by raw packet QPs leave through and frames from
//! outside enter by ([`Device::receive_frame`](crate::Device::receive_frame)).
//!
//! Contract: frames are untrusted bytes. Parsing reads only inside the frame, never panics, and
//! reports a header only when all of it is there: an IPv4 header needs a version of 4, an IHL
//! of at least 5 and a total length that fits the frame; a UDP or TCP header needs an
//! unfragmented IPv4 packet long enough for it. Nothing here allocates.

/// The Ethernet header without a VLAN tag: destination, source, EtherType.
pub const ETH_HLEN: usize = 14;
/// A C-VLAN tag (TPID `0x8100` and the TCI).
pub const VLAN_HLEN: usize = 4;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType (TPID) of a C-VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// The largest port MTU the device supports (a jumbo frame of 9000 bytes of IP).
pub const MAX_MTU: u32 = 9000;
/// The port MTU a device starts with.
pub const DEFAULT_MTU: u32 = 1500;
/// The largest frame the device handles: [`MAX_MTU`], the Ethernet header and a VLAN tag.
pub(crate) const MAX_FRAME: usize = MAX_MTU as usize + ETH_HLEN + VLAN_HLEN;

/// The Ethernet segment's `cs_flags`: compute the IPv4 header checksum
/// (`MLX5_ETH_WQE_L3_CSUM`).
pub const CS_L3: u8 = 1 << 6;
/// The Ethernet segment's `cs_flags`: compute the TCP or UDP checksum
/// (`MLX5_ETH_WQE_L4_CSUM`).
pub const CS_L4: u8 = 1 << 7;

/// Where frames leave the device's Ethernet port, and what stands at its other end: a test's
/// capture, a second device, or (in the emulated ConnectX) an `AF_PACKET` socket on a veth.
///
/// [`EthPort::transmit`] is called on the device's own thread of work (the caller of
/// [`Device::step`](crate::Device::step) or the progress thread) with the device's lock held:
/// it must not call back into the same device. A frame for the device comes in through
/// [`Device::receive_frame`](crate::Device::receive_frame), from any other thread.
pub trait EthPort: Send + Sync {
    /// A frame the device sends: from the destination MAC to the end of the payload, without
    /// the FCS. The slice is valid for the call only.
    fn transmit(&self, frame: &[u8]);
}

/// The IPv4 header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ipv4 {
    /// Offset of the header in the frame.
    pub(crate) off: usize,
    /// Header length in bytes (IHL × 4).
    pub(crate) hlen: usize,
    /// Total length (header and payload) as the header says.
    pub(crate) total: usize,
    pub(crate) proto: u8,
    pub(crate) src: [u8; 4],
    pub(crate) dst: [u8; 4],
    /// More fragments follow, or the fragment offset is not 0.
    pub(crate) fragment: bool,
}

/// The UDP or TCP header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct L4 {
    pub(crate) off: usize,
    pub(crate) proto: u8,
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    /// TCP: ACK set.
    pub(crate) ack: bool,
    /// TCP: bytes after the TCP header.
    pub(crate) payload: usize,
}

/// What the device reads of a frame's headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Headers {
    pub(crate) dst_mac: [u8; 6],
    pub(crate) src_mac: [u8; 6],
    /// The EtherType after the VLAN tag, if any.
    pub(crate) ether_type: u16,
    pub(crate) vlan: bool,
    pub(crate) ipv4: Option<Ipv4>,
    pub(crate) l4: Option<L4>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The headers of `frame`, or `None` for a frame shorter than an Ethernet header.
pub(crate) fn parse(frame: &[u8]) -> Option<Headers> {
    if frame.len() < ETH_HLEN {
        return None;
    }
    let mut h = Headers {
        dst_mac: frame[0..6].try_into().ok()?,
        src_mac: frame[6..12].try_into().ok()?,
        ether_type: be16(frame, 12),
        vlan: false,
        ipv4: None,
        l4: None,
    };
    let mut l3 = ETH_HLEN;
    if h.ether_type == ETHERTYPE_VLAN && frame.len() >= ETH_HLEN + VLAN_HLEN {
        h.vlan = true;
        h.ether_type = be16(frame, 16);
        l3 += VLAN_HLEN;
    }
    if h.ether_type != ETHERTYPE_IPV4 || frame.len() < l3 + 20 {
        return Some(h);
    }
    let ip = &frame[l3..];
    let hlen = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(be16(ip, 2));
    if ip[0] >> 4 != 4 || hlen < 20 || total < hlen || total > ip.len() {
        return Some(h);
    }
    let frag = be16(ip, 6);
    let v4 = Ipv4 {
        off: l3,
        hlen,
        total,
        proto: ip[9],
        src: ip[12..16].try_into().ok()?,
        dst: ip[16..20].try_into().ok()?,
        fragment: frag & 0x3fff != 0,
    };
    h.ipv4 = Some(v4);
    let seg = &ip[hlen..total];
    let l4_off = l3 + hlen;
    h.l4 = match v4.proto {
        _ if v4.fragment => None,
        IPPROTO_UDP if seg.len() >= 8 => Some(L4 {
            off: l4_off,
            proto: IPPROTO_UDP,
            src_port: be16(seg, 0),
            dst_port: be16(seg, 2),
            ack: false,
            payload: seg.len() - 8,
        }),
        IPPROTO_TCP if seg.len() >= 20 && usize::from(seg[12] >> 4) * 4 <= seg.len() => {
            let doff = usize::from(seg[12] >> 4) * 4;
            (doff >= 20).then_some(L4 {
                off: l4_off,
                proto: IPPROTO_TCP,
                src_port: be16(seg, 0),
                dst_port: be16(seg, 2),
                ack: seg[13] & 0x10 != 0,
                payload: seg.len() - doff,
            })
        }
        _ => None,
    };
    Some(h)
}

/// Adds `bytes` as big-endian 16-bit words (an odd last byte padded with 0) to `sum`.
fn add_words(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for w in &mut chunks {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// `sum` folded into 16 bits, ones' complement addition.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The ones' complement sum of the bytes after the Ethernet header (and VLAN tag), as a
/// ConnectX reports it in a receive CQE's `check_sum` for the driver's CHECKSUM_COMPLETE.
pub(crate) fn raw_sum(frame: &[u8], h: &Headers) -> u16 {
    let l3 = if h.vlan {
        ETH_HLEN + VLAN_HLEN
    } else {
        ETH_HLEN
    };
    frame.get(l3..).map_or(0, |b| fold(add_words(0, b)))
}

/// The sum of the pseudo-header and the L4 segment of `ip` (frame bytes `seg`), checksum field
/// included as it is.
fn l4_sum(ip: &Ipv4, seg: &[u8]) -> u32 {
    let mut s = add_words(0, &ip.src);
    s = add_words(s, &ip.dst);
    s += u32::from(ip.proto);
    s += seg.len() as u32;
    add_words(s, seg)
}

/// The offset of the checksum field in an L4 header of `proto`.
fn l4_csum_at(proto: u8) -> usize {
    if proto == IPPROTO_TCP { 16 } else { 6 }
}

/// Computes the checksums `cs_flags` asks for into `frame` (headers `h`): the IPv4 header
/// checksum ([`CS_L3`]) and the UDP or TCP checksum over the pseudo-header and the segment
/// ([`CS_L4`]), from scratch, whatever the fields held. A frame without the header a flag
/// names is left as it is; a UDP checksum that computes to 0 is sent as `0xffff`.
pub(crate) fn fill_checksums(frame: &mut [u8], h: &Headers, cs_flags: u8) {
    let Some(ip) = h.ipv4 else { return };
    if cs_flags & CS_L3 != 0 {
        let hdr = &mut frame[ip.off..ip.off + ip.hlen];
        hdr[10..12].fill(0);
        let c = !fold(add_words(0, hdr));
        hdr[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if cs_flags & CS_L4 != 0
        && let Some(l4) = h.l4
    {
        let at = l4.off + l4_csum_at(l4.proto);
        frame[at..at + 2].fill(0);
        let seg = &frame[l4.off..ip.off + ip.total];
        let mut c = !fold(l4_sum(&ip, seg));
        if c == 0 && l4.proto == IPPROTO_UDP {
            c = 0xffff;
        }
        frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// Whether the IPv4 header checksum of the frame is right.
pub(crate) fn l3_ok(frame: &[u8], h: &Headers) -> bool {
    h.ipv4
        .is_some_and(|ip| fold(add_words(0, &frame[ip.off..ip.off + ip.hlen])) == 0xffff)
}

/// Whether the UDP or TCP checksum of the frame is right (a UDP checksum of 0 means none,
/// which is right).
pub(crate) fn l4_ok(frame: &[u8], h: &Headers) -> bool {
    let (Some(ip), Some(l4)) = (h.ipv4, h.l4) else {
        return false;
    };
    let seg = &frame[l4.off..ip.off + ip.total];
    if l4.proto == IPPROTO_UDP && seg[6..8] == [0, 0] {
        return true;
    }
    fold(l4_sum(&ip, seg)) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The research brief's 64-byte multicast UDP frame (both checksums 0).
    fn frame() -> [u8; 64] {
        let mut f = [0u8; 64];
        f[..42].copy_from_slice(&[
            0x01, 0x00, 0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x32, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00,
            0x00, 0x01, 0xef, 0x01, 0x02, 0x03, 0x75, 0x30, 0x79, 0x18, 0x00, 0x1e, 0x00, 0x00,
        ]);
        for (i, b) in f[42..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn parses_the_udp_frame() {
        let h = parse(&frame()).unwrap();
        let ip = h.ipv4.unwrap();
        assert_eq!((ip.off, ip.hlen, ip.total, ip.proto), (14, 20, 50, 17));
        assert_eq!((ip.src, ip.dst), ([10, 0, 0, 1], [239, 1, 2, 3]));
        let l4 = h.l4.unwrap();
        assert_eq!(
            (l4.off, l4.src_port, l4.dst_port, l4.payload),
            (34, 30000, 31000, 22)
        );
        assert!(parse(&frame()[..13]).is_none());
        // A total length past the frame: no IPv4 header is reported.
        let mut f = frame();
        f[16] = 0x10;
        assert_eq!(parse(&f).unwrap().ipv4, None);
    }

    /// The checksums of the brief's test vector: IPv4 `3fb6`, UDP `a7ea`.
    #[test]
    fn checksums_of_the_brief_vector() {
        let mut f = frame();
        let h = parse(&f).unwrap();
        assert!(!l3_ok(&f, &h));
        fill_checksums(&mut f, &h, CS_L3 | CS_L4);
        assert_eq!(
            (&f[24..26], &f[40..42]),
            (&[0x3f, 0xb6][..], &[0xa7, 0xea][..])
        );
        assert!(l3_ok(&f, &h) && l4_ok(&f, &h));
        f[50] ^= 1;
        assert!(!l4_ok(&f, &h));
    }
}
