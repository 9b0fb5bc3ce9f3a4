//! Which device a demo or tool opens when the user names none, and the line that says why.
//!
//! The library never puts the software device in a NIC's place: `zverbs::open_device(None,
//! ..)` fails on a machine without one. The demos and `zverbs-perf` must still run on a fresh
//! machine, so they ask for the software device themselves, by its name, and print that they
//! did and why:
//!
//! ```text
//! device: zverbs_sim0 (the software mlx5 device: no RDMA device on this machine; pass --device to choose)
//! ```
//!
//! Shared by the examples and `zverbs-perf`.

use std::fmt;

use zverbs::{Context, ContextOptions, DEVICE_ENV, Error, SOFTWARE_DEVICE};

/// An open device and why it is the one.
pub struct Chosen {
    /// The device.
    pub ctx: Context,
    /// Why this device.
    pub why: String,
}

impl Chosen {
    /// Whether it is the software device (both ends of its connections are in this process).
    pub fn is_software(&self) -> bool {
        self.ctx.name() == SOFTWARE_DEVICE
    }
}

impl fmt::Display for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device: {} ({})", self.ctx.name(), self.why)
    }
}

/// Opens the device called `name`; without a name, the one `ZVERBS_DEVICE` names; without
/// either, the first NIC; and on a machine without a NIC, when `software` allows it (both ends
/// in this process), the software device, asked for by name. `flag` says how to name a device
/// (`--device`), for the reason.
///
/// # Errors
///
/// What `zverbs::open_device` returns; with no NIC and `software` false (or no software device
/// in this build), its [`Error::NoDevice`], which says how to ask for the software device.
pub fn open(
    name: Option<&str>,
    options: &ContextOptions,
    flag: &str,
    software: bool,
) -> Result<Chosen, Error> {
    let chosen = |ctx, why: String| Ok(Chosen { ctx, why });
    if let Some(n) = name {
        return chosen(
            zverbs::open_device(Some(n), options)?,
            "named on the command line".into(),
        );
    }
    if std::env::var_os(DEVICE_ENV).is_some_and(|v| !v.is_empty()) {
        return chosen(
            zverbs::open_device(None, options)?,
            format!("named by {DEVICE_ENV}"),
        );
    }
    match zverbs::open_device(None, options) {
        Ok(ctx) => chosen(ctx, format!("the first RDMA device; pass {flag} to choose")),
        Err(e @ Error::NoDevice { .. }) if software => {
            let missing = match &e {
                Error::NoDevice {
                    library: Some(l), ..
                } => format!("rdma-core is not installed (package {})", l.package),
                _ => "no RDMA device on this machine".to_string(),
            };
            match zverbs::open_device(Some(SOFTWARE_DEVICE), options) {
                Ok(ctx) => chosen(
                    ctx,
                    format!("the software mlx5 device: {missing}; pass {flag} to choose"),
                ),
                // Left out of this build (feature `sim`): the first error says so.
                Err(Error::DeviceNotFound { .. }) => Err(e),
                Err(other) => Err(other),
            }
        }
        Err(e) => Err(e),
    }
}
