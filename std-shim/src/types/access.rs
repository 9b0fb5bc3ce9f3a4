//! Access rights of a memory registration.

bitflags::bitflags! {
    /// Access rights of a registration, as `enum ibv_access_flags` (the values are
    /// libibverbs').
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The device may write (RDMA READ destinations, receives, atomic results)
        /// (`IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE into it (`IBV_ACCESS_REMOTE_WRITE`).
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ it (`IBV_ACCESS_REMOTE_READ`).
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it (`IBV_ACCESS_REMOTE_ATOMIC`).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

impl AccessFlags {
    /// Every local and remote right.
    pub const ALL: Self = Self::all();
}

/// The software device's rights: the same `enum ibv_access_flags` bits.
#[cfg(feature = "sim")]
impl From<AccessFlags> for zverbs_sim::Access {
    fn from(a: AccessFlags) -> Self {
        Self::from_bits_truncate(a.bits())
    }
}
