//! The dynamically connected transport on a device (`ZVERBS_TEST_DEVICE`): on an mlx5 device
//! driven directly (the emulated ConnectX in `cargo xtask test --only connectx`), every
//! operation from one initiator to several targets, the failures (wrong access key, unknown
//! target, access violation), the flush, recovery and the refusals, as on the software device
//! (`sim_dc.rs`); on the libibverbs fallback (rxe, or `ZVERBS_BACKEND=verbs`), the typed
//! refusal at creation, since libibverbs has no DC.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md).

mod dc;
mod device;

use device::{env, open, serial};
use zverbs::{BackendKind, Context, Error};

/// The device's context, or `None` after checking that the fallback refuses DC.
fn direct() -> Option<Context> {
    let e = env()?;
    let ctx = open(&e.device);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(8).build().unwrap();
    if cq.backend().kind == BackendKind::Verbs {
        let srq = pd.create_srq(4, 1).unwrap();
        for r in [
            pd.qp_builder(&cq, &cq).dc_initiator().build(),
            pd.qp_builder(&cq, &cq).srq(&srq).dc_target(7).build(),
        ] {
            assert!(
                matches!(r, Err(Error::Backend { .. })),
                "DC on the fallback: {r:?}"
            );
        }
        println!("skipped: the fallback has no DC (refused with Error::Backend, checked)");
        return None;
    }
    Some(ctx)
}

#[test]
fn every_operation_to_every_target() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::every_operation_to_every_target(&ctx);
    }
}

#[test]
fn safe_operations_to_targets() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::safe_operations_to_targets(&ctx);
    }
}

#[test]
fn wrong_key_fails_then_the_initiator_recovers() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::wrong_key_fails_then_the_initiator_recovers(&ctx);
    }
}

#[test]
fn unknown_target_fails() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::unknown_target_fails(&ctx);
    }
}

#[test]
fn access_violation_fails_the_initiator_only() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::access_violation_fails_the_initiator_only(&ctx);
    }
}

#[test]
fn flush_of_every_outstanding_request() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::flush_of_every_outstanding_request(&ctx);
    }
}

#[test]
fn refusals() {
    let _g = serial();
    if let Some(ctx) = direct() {
        dc::refusals(&ctx);
    }
}
