//! The libibverbs fallback's handles have one public path, `zverbs::backend::verbs`: the
//! module that defines them is private.

fn main() {
    let _: Option<zverbs::backend::verbs::SendQueue> = None;
    let _: Option<zverbs::fallback::SendQueue> = None;
}
