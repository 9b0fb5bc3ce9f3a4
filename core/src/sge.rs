//! Scatter/gather entries and remote buffers.

/// One scatter/gather entry: a span of registered local memory.
///
/// The layout is identical to `struct ibv_sge` in `<infiniband/verbs.h>` (`addr` u64, `length`
/// u32, `lkey` u32, 16 bytes), so a slice of `Sge` can be handed to libibverbs unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes. A zero-length entry carries no data and is skipped by the backends.
    pub length: u32,
    /// Local key of the memory region that holds the span.
    pub lkey: u32,
}

const _: () = assert!(core::mem::size_of::<Sge>() == 16);
const _: () = assert!(core::mem::align_of::<Sge>() == 8);

impl Sge {
    /// An entry for `length` bytes at `addr` in the region with key `lkey`.
    #[inline]
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Self {
        Self { addr, length, lkey }
    }

    /// An entry covering `buf`, which must lie in the region with key `lkey`.
    ///
    /// Only the address and length are taken: the entry does not borrow `buf`. Lengths above
    /// `u32::MAX` are clamped to `u32::MAX` bytes (the largest an IB scatter entry can name).
    ///
    /// The address is taken with `<*const u8>::expose_provenance`, so that code which turns it
    /// back into a pointer (an inline copy, the software device) may do so with
    /// [`core::ptr::with_exposed_provenance`], as Rust's memory model asks of an address that
    /// travels as an integer.
    #[inline]
    pub fn from_slice(buf: &[u8], lkey: u32) -> Self {
        let length = if buf.len() > u32::MAX as usize {
            u32::MAX
        } else {
            buf.len() as u32
        };
        Self {
            addr: buf.as_ptr().expose_provenance() as u64,
            length,
            lkey,
        }
    }
}

/// A span of the peer's registered memory: the target of RDMA WRITE and READ and of atomics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// Virtual address in the peer's address space.
    pub addr: u64,
    /// Remote key of the peer's memory region.
    pub rkey: u32,
}

impl RemoteBuf {
    /// The remote span starting at `addr` in the region with key `rkey`.
    #[inline]
    pub const fn new(addr: u64, rkey: u32) -> Self {
        Self { addr, rkey }
    }

    /// The same region, `off` bytes further on.
    #[inline]
    pub const fn offset(self, off: u64) -> Self {
        Self {
            addr: self.addr.wrapping_add(off),
            rkey: self.rkey,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_slice_takes_address_and_length() {
        let buf = [0u8; 40];
        let sge = Sge::from_slice(&buf[8..], 0x1234);
        assert_eq!(sge.addr, buf.as_ptr() as u64 + 8);
        assert_eq!(sge.length, 32);
        assert_eq!(sge.lkey, 0x1234);
    }

    #[test]
    #[cfg(all(unix, target_pointer_width = "64"))]
    #[cfg_attr(miri, ignore = "maps 4 GiB of address space")]
    fn a_buffer_over_4_gib_is_clamped_to_u32_max() {
        // 4 GiB + 1 bytes of address space, read-only and reserving nothing: its pages are
        // never touched, so it costs no memory (and a private read-only mapping is not
        // counted against the overcommit limit).
        let len = (1usize << 32) + 1;
        // SAFETY: a new anonymous mapping, at an address the kernel chooses.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of 4 GiB of address space");
        // SAFETY: the mapping is `len` readable bytes, unmapped only after the slice's use.
        let buf = unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) };
        let sge = Sge::from_slice(buf, 9);
        assert_eq!((sge.addr, sge.length), (p as u64, u32::MAX));
        let sge = Sge::from_slice(&buf[..u32::MAX as usize], 9);
        assert_eq!(sge.length, u32::MAX);
        // SAFETY: the mapping made above, no longer borrowed.
        assert_eq!(unsafe { libc::munmap(p, len) }, 0);
    }

    #[test]
    fn remote_offset_keeps_key() {
        let r = RemoteBuf::new(0x1000, 7).offset(0x20);
        assert_eq!(r, RemoteBuf::new(0x1020, 7));
    }
}
