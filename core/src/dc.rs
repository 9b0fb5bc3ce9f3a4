//! Destinations of the dynamically connected transport (DC).
//!
//! A DC initiator (DCI) reaches any DC target (DCT) in the fabric: each request names its
//! target, as a UD SEND names its destination, and otherwise carries the operations of a
//! reliable connection (WRITE, READ, SEND, atomics). A [`DcDest`] is what a request needs to
//! address a target: the address vector of the path to the target's port, the target's
//! number, and the access key the target was created with (a request with another key is
//! refused by the target and fails at the initiator).

/// Where a DC request goes: the address vector to the target's port, the DCT number and the
/// DC access key.
///
/// Made once per target on the control path (from an address handle to the target's port)
/// and referenced by every request to that target; a request copies nothing of it until it
/// writes the WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcDest {
    /// The mlx5 address vector, 48 bytes in the device's byte order, as `mlx5dv_init_obj`
    /// reports it for the address handle (`mlx5dv_ah.av`, `struct mlx5_wqe_av`): the direct
    /// path copies it into the WQE's datagram segment, then writes the DCT number into
    /// `dqp_dct` and the access key into `key.dc_key`.
    pub av: [u8; 48],
    /// The target's DCT number (24 bits).
    pub dctn: u32,
    /// The target's DC access key (`mlx5dv_dc_init_attr.dct_access_key`).
    pub dc_key: u64,
}

impl DcDest {
    /// A destination from its address vector, DCT number and access key.
    #[inline]
    pub const fn new(av: [u8; 48], dctn: u32, dc_key: u64) -> Self {
        Self { av, dctn, dc_key }
    }
}
