//! Runs the out-of-line post+ring and poll functions many times, for instruction counting:
//! `valgrind --tool=callgrind --toggle-collect='zverbs_benches::poll_one' ...`.
use zverbs_benches::{MemQp, poll_one, post_ring_out_of_line, post_write_1sge, write_1sge};
use zverbs_core::{Completion, Sge};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut qp = MemQp::new(4096, 4096, 256);
    let sgl = [Sge::new(0x1000, 64, 1)];
    let wr = write_1sge(&sgl);
    let mut wc = [Completion::EMPTY; 1];
    let mut polled = 0;
    for _ in 0..n {
        if qp.sq.free_blocks() == 0 {
            let last = qp.sq.producer().wrapping_sub(1) as u16;
            qp.complete_all(last);
        }
        // SAFETY: nothing executes the request.
        unsafe {
            if std::env::var_os("GENERIC").is_some() {
                post_ring_out_of_line(&mut qp.sq, &wr)
            } else {
                post_write_1sge(&mut qp.sq, 0x1000, 64, 1, 0x2000, 2, 7).unwrap()
            }
        };
        qp.write_cqes(1, |i| i as u16);
        polled += poll_one(&mut qp.cq, &mut wc);
    }
    println!("{polled}");
}
