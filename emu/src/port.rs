//! The Ethernet function's port as a Linux network interface: an `AF_PACKET` socket bound to
//! the interface `ZVERBS_EMU_ETH_IF` names (a veth end in a namespace the test makes, see
//! `docs/ethernet.md`), with a mapped `TPACKET_V2` receive ring.
//!
//! - Frames a raw packet QP sends leave by `send` on the bound socket ([`EthPort::transmit`],
//!   on the device's own thread): the kernel hands them to the interface as any frame, so the
//!   veth's peer (a kernel socket, another emulated ConnectX) receives them.
//! - Frames the interface receives land in the ring; one thread of the emulator's takes each
//!   and hands it to the software device ([`Device::receive_frame`]), whose flow rules steer
//!   it, as a ConnectX's wire side does. The socket ignores the frames the interface sends
//!   (`PACKET_IGNORE_OUTGOING`), so a port does not hear itself; a VLAN tag the kernel moved
//!   into the ring's header is put back into the frame.
//!
//! The interface sees every frame (a veth does not filter by MAC, and the flow rules are the
//! port's only filter, as on a ConnectX without a netdev in the way); a frame longer than a ring
//! slot (2048 bytes: a 1500-byte MTU) is counted and dropped, as a ConnectX drops a frame over
//! its port MTU.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use zverbs_sim::{Device, EthPort};

/// `SOL_PACKET` socket options and ring constants (`<linux/if_packet.h>`).
const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
/// `ETH_P_ALL`: every protocol.
const ETH_P_ALL: u16 = 3;

/// The ring: 8192 slots of 2048 bytes, in blocks of 64 KiB.
const FRAME_SIZE: u32 = 2048;
const BLOCK_SIZE: u32 = 1 << 16;
const FRAMES: u32 = 8192;

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// `struct tpacket2_hdr` (32 bytes; the frame starts `tp_mac` bytes into the slot).
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<Tpacket2Hdr>() == 32);

/// What the port counted.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames sent to the interface.
    pub sent: AtomicU64,
    /// Frames the kernel refused to send (its queue full): lost, as on a congested wire.
    pub send_failed: AtomicU64,
    /// Frames taken from the ring and handed to the device.
    pub received: AtomicU64,
    /// Frames longer than a ring slot, dropped.
    pub too_long: AtomicU64,
    /// Frames the kernel dropped because the ring was full (the port's thread behind): the
    /// socket's `PACKET_STATISTICS` `tp_drops`, as a ConnectX counts frames its port buffer
    /// had no room for (`rx_discards_phy`). Brought up to date by [`counters`].
    pub ring_dropped: AtomicU64,
}

/// `struct tpacket_stats` (what `PACKET_STATISTICS` answers for a `TPACKET_V2` socket).
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    /// Frames seen, dropped ones included (unread: the ring's own count is `received`).
    #[allow(dead_code)]
    tp_packets: u32,
    tp_drops: u32,
}

/// The counters of this process's port, once it is open, and its socket.
static COUNTERS: std::sync::OnceLock<(&'static PortCounters, libc::c_int)> =
    std::sync::OnceLock::new();

/// The counters of this process's port, if one was opened, with the ring's drops brought up
/// to date.
pub fn counters() -> Option<&'static PortCounters> {
    let &(c, fd) = COUNTERS.get()?;
    collect_ring_drops(fd, c);
    Some(c)
}

/// Adds the drops the kernel counted since the last call (reading `PACKET_STATISTICS`
/// resets them, so concurrent callers each add a disjoint share) to `c.ring_dropped`.
fn collect_ring_drops(fd: libc::c_int, c: &PortCounters) {
    let mut st = TpacketStats::default();
    let mut len = core::mem::size_of::<TpacketStats>() as libc::socklen_t;
    // SAFETY: `st` has room for the `len` bytes the kernel may write, `len` is its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            SOL_PACKET,
            PACKET_STATISTICS,
            (&raw mut st).cast(),
            &raw mut len,
        )
    };
    if r == 0 {
        c.ring_dropped
            .fetch_add(u64::from(st.tp_drops), Ordering::Relaxed);
    }
}

/// The bound socket, which the device sends through.
#[derive(Debug)]
pub struct PacketPort {
    fd: libc::c_int,
    /// The port's counters.
    pub counters: &'static PortCounters,
}

impl EthPort for PacketPort {
    fn transmit(&self, frame: &[u8]) {
        // SAFETY: a bound packet socket of ours and the frame's bytes, valid for the call.
        let n = unsafe {
            libc::send(
                self.fd,
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let c = if n == frame.len() as isize {
            &self.counters.sent
        } else {
            &self.counters.send_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Opens the packet socket on interface `ifname`, maps its receive ring, starts the thread
/// that feeds `dev` from it, and returns the port to attach ([`Device::attach_port`]).
///
/// # Errors
///
/// When the interface does not exist, the process may not open a packet socket (it needs
/// `CAP_NET_RAW`), or the ring cannot be set up.
pub fn open(dev: &'static Device, ifname: &str) -> io::Result<PacketPort> {
    let name = std::ffi::CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(last_error(&format!("no interface {ifname}")));
    }
    // Protocol 0 until bound: the socket takes no frame of another interface meanwhile.
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_error("socket(AF_PACKET)"));
    }
    let fail = |what: &str| {
        let e = last_error(what);
        // SAFETY: closing the socket made above.
        unsafe { libc::close(fd) };
        e
    };
    let setopt = |opt: libc::c_int, val: *const libc::c_void, len: usize| {
        // SAFETY: `val` points at `len` bytes of the option's value.
        unsafe { libc::setsockopt(fd, SOL_PACKET, opt, val, len as libc::socklen_t) == 0 }
    };
    let v2 = TPACKET_V2;
    if !setopt(PACKET_VERSION, (&raw const v2).cast(), 4) {
        return Err(fail("PACKET_VERSION TPACKET_V2"));
    }
    let one: libc::c_int = 1;
    if !setopt(PACKET_IGNORE_OUTGOING, (&raw const one).cast(), 4) {
        return Err(fail("PACKET_IGNORE_OUTGOING"));
    }
    let req = TpacketReq {
        block_size: BLOCK_SIZE,
        block_nr: FRAMES * FRAME_SIZE / BLOCK_SIZE,
        frame_size: FRAME_SIZE,
        frame_nr: FRAMES,
    };
    if !setopt(
        PACKET_RX_RING,
        (&raw const req).cast(),
        core::mem::size_of::<TpacketReq>(),
    ) {
        return Err(fail("PACKET_RX_RING"));
    }
    let len = (FRAMES * FRAME_SIZE) as usize;
    // SAFETY: maps the ring the kernel just allocated for this socket.
    let ring = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ring == libc::MAP_FAILED {
        return Err(fail("mmap of the receive ring"));
    }
    // SAFETY: an all-zero `sockaddr_ll` is valid; the fields that matter are set below.
    let mut sll: libc::sockaddr_ll = unsafe { core::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: a valid `sockaddr_ll` of its own size.
    let r = unsafe {
        libc::bind(
            fd,
            (&raw const sll).cast(),
            core::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(fail(&format!("bind to {ifname}")));
    }
    let counters: &'static PortCounters = Box::leak(Box::default());
    let _ = COUNTERS.set((counters, fd));
    let base = ring as usize;
    std::thread::Builder::new()
        .name(format!("zverbs-emu-port-{ifname}"))
        .spawn(move || receive_loop(dev, fd, base, counters))
        .map_err(|e| io::Error::other(format!("port thread: {e}")))?;
    crate::log(format_args!(
        "Ethernet port on {ifname} (ifindex {ifindex}): AF_PACKET, {FRAMES}-slot TPACKET_V2 ring"
    ));
    Ok(PacketPort { fd, counters })
}

/// Takes frames from the ring (mapped at `base`) in order and hands them to `dev`, for the
/// process's life.
fn receive_loop(dev: &'static Device, fd: libc::c_int, base: usize, c: &'static PortCounters) {
    let mut frame = vec![0u8; FRAME_SIZE as usize + 4];
    let mut i: u32 = 0;
    loop {
        let slot = base + (i * FRAME_SIZE) as usize;
        // SAFETY: the slot's status word, inside the mapped ring; the kernel writes it, so it
        // is read atomically.
        let status = unsafe { AtomicU32::from_ptr(slot as *mut u32) };
        let s = status.load(Ordering::Acquire);
        if s & TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 100) };
            collect_ring_drops(fd, c);
            continue;
        }
        // SAFETY: the slot's header, handed to user space by TP_STATUS_USER (the Acquire
        // above orders the reads after it).
        let h = unsafe { (slot as *const Tpacket2Hdr).read() };
        let snap = h.tp_snaplen as usize;
        let at = usize::from(h.tp_mac);
        if h.tp_len as usize != snap || at + snap > FRAME_SIZE as usize {
            c.too_long.fetch_add(1, Ordering::Relaxed);
        } else {
            // SAFETY: `snap` bytes at `tp_mac` inside the slot (checked above).
            let bytes = unsafe { core::slice::from_raw_parts((slot + at) as *const u8, snap) };
            let n = put_back_vlan(&mut frame, bytes, s, &h);
            c.received.fetch_add(1, Ordering::Relaxed);
            dev.receive_frame(&frame[..n]);
        }
        status.store(TP_STATUS_KERNEL, Ordering::Release);
        i = (i + 1) % FRAMES;
    }
}

/// Copies `bytes` into `out`, with the VLAN tag the kernel took out of it (status `s`) put
/// back after the MAC addresses; returns the frame's length.
fn put_back_vlan(out: &mut [u8], bytes: &[u8], s: u32, h: &Tpacket2Hdr) -> usize {
    if s & TP_STATUS_VLAN_VALID == 0 || bytes.len() < 12 || bytes.len() + 4 > out.len() {
        out[..bytes.len()].copy_from_slice(bytes);
        return bytes.len();
    }
    let tpid = if s & TP_STATUS_VLAN_TPID_VALID != 0 {
        h.tp_vlan_tpid
    } else {
        0x8100
    };
    out[..12].copy_from_slice(&bytes[..12]);
    out[12..14].copy_from_slice(&tpid.to_be_bytes());
    out[14..16].copy_from_slice(&h.tp_vlan_tci.to_be_bytes());
    out[16..bytes.len() + 4].copy_from_slice(&bytes[12..]);
    bytes.len() + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vlan_tag_goes_back_after_the_addresses() {
        let bytes: Vec<u8> = (0..20).collect();
        let h = Tpacket2Hdr {
            tp_status: 0,
            tp_len: 20,
            tp_snaplen: 20,
            tp_mac: 0,
            tp_net: 0,
            tp_sec: 0,
            tp_nsec: 0,
            tp_vlan_tci: 0x0123,
            tp_vlan_tpid: 0,
            tp_padding: [0; 4],
        };
        let mut out = [0u8; 64];
        assert_eq!(put_back_vlan(&mut out, &bytes, 0, &h), 20);
        assert_eq!(&out[..20], &bytes[..]);
        assert_eq!(
            put_back_vlan(&mut out, &bytes, TP_STATUS_VLAN_VALID, &h),
            24
        );
        assert_eq!(&out[..12], &bytes[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x01, 0x23]);
        assert_eq!(&out[16..24], &bytes[12..]);
    }
}
