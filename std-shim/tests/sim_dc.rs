//! The dynamically connected transport on the software device, through the control path:
//! DC targets and initiators made by `QpBuilder::dc_target` / `dc_initiator`, addresses
//! exchanged as bytes, every operation from one initiator to several targets, the failures a
//! ConnectX reports (wrong access key, unknown target, access violation), flushes, recovery,
//! and the refusals.
#![cfg(feature = "sim")]

mod dc;

use zverbs::ContextOptions;
use zverbs::dc::DcAddr;

fn ctx() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

#[test]
fn every_operation_to_every_target() {
    dc::every_operation_to_every_target(&ctx());
}

#[test]
fn safe_operations_to_targets() {
    dc::safe_operations_to_targets(&ctx());
}

#[test]
fn wrong_key_fails_then_the_initiator_recovers() {
    dc::wrong_key_fails_then_the_initiator_recovers(&ctx());
}

#[test]
fn unknown_target_fails() {
    dc::unknown_target_fails(&ctx());
}

#[test]
fn access_violation_fails_the_initiator_only() {
    dc::access_violation_fails_the_initiator_only(&ctx());
}

#[test]
fn flush_of_every_outstanding_request() {
    dc::flush_of_every_outstanding_request(&ctx());
}

#[test]
fn refusals() {
    dc::refusals(&ctx());
}

#[test]
fn a_dc_address_round_trips_through_its_bytes() {
    let gid = zverbs::Gid(core::array::from_fn(|i| i as u8 + 1));
    let a = DcAddr {
        lid: 0x1234,
        gid,
        dctn: 0x00ab_cdef,
        access_key: 0x0102_0304_0506_0708,
    };
    let b = a.to_bytes();
    #[rustfmt::skip]
    let want: [u8; DcAddr::LEN] = [
        b'z', b'D', b'C', 1, 0x12, 0x34,
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        0x00, 0xab, 0xcd, 0xef, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    assert_eq!(b, want);
    assert_eq!(DcAddr::from_bytes(&b).unwrap(), a);
    assert!(DcAddr::from_bytes(&b[..33]).is_err(), "too short");
    let mut tag = b;
    tag[3] = 2;
    assert!(DcAddr::from_bytes(&tag).is_err(), "another version");
    let mut wide = b;
    wide[22] = 1;
    assert!(
        DcAddr::from_bytes(&wide).is_err(),
        "DCT number above 24 bits"
    );
}

#[test]
fn prepared_requests_to_targets() {
    dc::prepared_requests_to_targets(&ctx());
}
