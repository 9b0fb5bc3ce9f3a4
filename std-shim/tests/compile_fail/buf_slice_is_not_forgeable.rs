//! A `BufSlice` is made only by `MrBuf::slice`, which checks the bounds and takes the
//! buffer's own key: its fields are private, so a span cannot be forged.

use zverbs::{MrBuf, Registered};
use zverbs::safe::BufSlice;

fn forge(buf: &MrBuf) -> BufSlice<'_> {
    BufSlice {
        buf,
        sge: zverbs::Sge::new(0xdead_0000, 1 << 20, buf.lkey()),
    }
}

fn main() {}
