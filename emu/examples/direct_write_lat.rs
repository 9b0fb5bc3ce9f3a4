//! RDMA WRITE latency over the mlx5 direct path, the way perftest's `ib_write_lat` measures it,
//! on QPs that libmlx5 created (the emulated ConnectX, or a real one).
//!
//! ```text
//! direct_write_lat [-n iters] [-s size] [-p port]              # server
//! direct_write_lat [-n iters] [-s size] [-p port] 127.0.0.1    # client
//! ```
//!
//! Both sides create an RC QP through libibverbs/libmlx5, exchange LID, QPN, rkey and buffer
//! address over TCP, connect, and build the direct path's `SendQueue` and `CompletionQueue`
//! from what `mlx5dv_init_obj` reports. Then they ping-pong: each writes `size` bytes into the
//! other's buffer (inline when it fits) with the iteration's tag in the last byte, and waits
//! for its own buffer's last byte to carry the tag. The client prints perftest's figures: half
//! the round trip, in microseconds (`t_typical` is the median).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use zverbs_core::{Completion, PollCq, PostSend, RemoteBuf, SendWr, Sge};
use zverbs_emu::verbs::{Context, QpCaps};
use zverbs_mlx5dv::{CompletionQueue, CqBinding, SendQueue, SqCaps, SqSlot, SqState};

struct Args {
    iters: u32,
    size: u32,
    port: u16,
    server: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        iters: 1000,
        size: 2,
        port: 18600,
        server: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut num = |what: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} needs a number"))
        };
        match x.as_str() {
            "-n" => a.iters = num("-n") as u32,
            "-s" => a.size = num("-s") as u32,
            "-p" => a.port = num("-p") as u16,
            s if !s.starts_with('-') => a.server = Some(s.to_string()),
            s => panic!("unknown option {s}"),
        }
    }
    assert!(a.size >= 1, "-s must be at least 1");
    a
}

fn main() -> Result<(), String> {
    let a = args();
    let ctx = Context::open()?;
    let len = (a.size as usize).max(64);
    let buf: &'static mut [u8] = Box::leak(vec![0u8; len + 64].into_boxed_slice());
    // Local source (first half of the page-aligned area would do; separate buffers are clearer).
    let src: &'static mut [u8] = Box::leak(vec![0u8; len + 64].into_boxed_slice());
    // SAFETY: leaked buffers: valid for the process's life.
    let mr = unsafe { ctx.reg_mr(buf.as_mut_ptr(), buf.len()) }?;
    // SAFETY: as above.
    let smr = unsafe { ctx.reg_mr(src.as_mut_ptr(), src.len()) }?;
    let cq = ctx.create_cq(64)?;
    let qp = ctx.create_qp(
        cq,
        QpCaps {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 220,
        },
    )?;
    let mine = [
        u64::from(ctx.lid),
        u64::from(qp.qpn),
        u64::from(mr.rkey),
        buf.as_ptr() as u64,
    ];
    let mut stream = match &a.server {
        Some(host) => {
            let t = Instant::now();
            loop {
                match TcpStream::connect((host.as_str(), a.port)) {
                    Ok(s) => break s,
                    Err(e) if t.elapsed() < Duration::from_secs(10) => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => return Err(format!("connect to {host}:{}: {e}", a.port)),
                }
            }
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port)).map_err(|e| e.to_string())?;
            l.accept().map_err(|e| e.to_string())?.0
        }
    };
    let mut out = Vec::new();
    for v in mine {
        out.extend_from_slice(&v.to_le_bytes());
    }
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut theirs = [0u8; 32];
    stream.read_exact(&mut theirs).map_err(|e| e.to_string())?;
    let word = |k: usize| u64::from_le_bytes(theirs[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
    let (lid, qpn, rkey, raddr) = (word(0) as u16, word(1) as u32, word(2) as u32, word(3));
    ctx.connect(qp, lid, qpn)?;
    let (ql, cl) = ctx.dv(qp, cq)?;
    // Both sides are ready before the first WRITE.
    stream.write_all(&[1]).map_err(|e| e.to_string())?;
    stream.read_exact(&mut [0u8]).map_err(|e| e.to_string())?;

    let slots: Vec<SqSlot> = (0..ql.sq.wqe_cnt).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots).map_err(|e| e.to_string())?;
    let bindings = [CqBinding::new(qp.qpn, Some(&state), None)];
    let caps = SqCaps {
        max_send_sge: qp.cap[2],
        max_inline_data: qp.cap[4],
        sig_all: false,
        max_signaled: cl.cqe_cnt,
    };
    // SAFETY: libmlx5 allocated the rings, which live as long as the process; nothing else
    // posts to this QP or polls this CQ.
    let (mut sq, mut cqp) = unsafe {
        (
            SendQueue::new(&ql, caps, &state).map_err(|e| e.to_string())?,
            CompletionQueue::new(&cl, &bindings).map_err(|e| e.to_string())?,
        )
    };
    let last = a.size as usize - 1;
    // The device writes the last byte of `buf` (with a release store); it is read with
    // acquire loads only.
    // SAFETY: inside the leaked buffer; `AtomicU8` has the layout of `u8`.
    let flag = unsafe { AtomicU8::from_ptr(buf.as_mut_ptr().add(last)) };
    let sgl = [Sge::new(src.as_ptr() as u64, a.size, smr.lkey)];
    let remote = RemoteBuf::new(raddr, rkey);
    let inline = a.size <= caps.max_inline_data;
    let mut wc = [Completion::EMPTY; 4];
    let mut times = Vec::with_capacity(a.iters as usize);
    let client = a.server.is_some();
    let mut tag = 0u8;
    let write = |tag: u8,
                 sq: &mut SendQueue<'_>,
                 cqp: &mut CompletionQueue<'_>,
                 wc: &mut [Completion]|
     -> Result<(), String> {
        // SAFETY: the source byte is ours; the device reads it only during the post (inline) or
        // until the completion polled below.
        unsafe { src.as_ptr().add(last).cast_mut().write_volatile(tag) };
        let mut w = SendWr::write(u64::from(tag), &sgl, remote).signaled();
        if inline {
            w = w.inline();
        }
        // SAFETY: the entry lies in a registered buffer, unchanged until the completion.
        unsafe { sq.send(&w) }.map_err(|e| format!("post: {e:?}"))?;
        loop {
            let n = cqp.poll(wc);
            if n > 0 {
                return if wc[0].is_success() {
                    Ok(())
                } else {
                    Err(format!("completion: {:?}", wc[0].status))
                };
            }
            std::hint::spin_loop();
        }
    };
    for _ in 0..a.iters {
        tag = tag.wrapping_add(1).max(1);
        let t = Instant::now();
        if client {
            write(tag, &mut sq, &mut cqp, &mut wc)?;
        }
        while flag.load(Ordering::Acquire) != tag {
            std::hint::spin_loop();
        }
        if !client {
            write(tag, &mut sq, &mut cqp, &mut wc)?;
        }
        times.push(t.elapsed());
    }
    if client {
        times.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
        let n = times.len();
        let avg = times.iter().map(|d| us(*d)).sum::<f64>() / n as f64;
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    99% percentile[usec]"
        );
        println!(
            " {:<6} {:<10} {:>12.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2}",
            a.size,
            n,
            us(times[0]),
            us(times[n - 1]),
            us(times[n / 2]),
            avg,
            us(times[(n * 99 / 100).min(n - 1)])
        );
    }
    Ok(())
}
