//! What only the caller can promise is behind `unsafe`: registering memory the caller owns,
//! and driving queue memory described by raw layouts.

use zverbs::mlx5::{
    CompletionQueue, CqBinding, CqLayout, QpLayout, RecvQueue, RqRef, SendQueue, SqCaps, SqRef,
};
use zverbs::{AccessFlags, Pd};

fn register(pd: &Pd, mine: &mut [u8]) {
    pd.register(mine.as_mut_ptr(), mine.len(), AccessFlags::ALL)
        .unwrap();
}

fn drive(
    qp: &QpLayout,
    cq: &CqLayout,
    caps: SqCaps,
    sq: SqRef<'_>,
    rq: RqRef<'_>,
    bindings: &[CqBinding<SqRef<'_>, RqRef<'_>>],
) {
    let _ = SendQueue::new(qp, caps, sq, None);
    let _ = RecvQueue::new(qp, rq);
    let _ = CompletionQueue::new(cq, bindings);
}

fn main() {}
