//! A multicast receiver or sender joined through rdma_cm, compatible with rdma-core's `mckey`.
//!
//! ```text
//! cargo run -p zverbs-tools --example mcast -- --recv --group 239.1.1.1 [--bind LOCAL_IP]
//!     [-C COUNT] [-S SIZE] [--timeout SECS]
//! cargo run -p zverbs-tools --example mcast -- --send --group 239.1.1.1 [--bind LOCAL_IP]
//!     [-C COUNT] [-S SIZE] [--timeout SECS]
//! ```
//!
//! Resolves the group address to a local RDMA device (the one holding `--bind`, else the one
//! the routing table picks), creates a UD QP on it, readies it with the attributes rdma_cm
//! gives, posts `COUNT` receives of `SIZE` bytes (each behind the 40 bytes a UD receive
//! reserves for the GRH), joins the group (`rdma_join_multicast`, then MULTICAST_JOIN), prints
//! `joined group ...` and then one line a datagram, and exits 0 once `COUNT` have arrived.
//! `mckey -s -m GROUP` on the same or another device is a sender.
//!
//! `--send` joins the same way, makes an address handle from the join's address
//! ([`McastGroup::join_info`](zverbs::connect::cm::McastGroup::join_info)), and sends `COUNT`
//! datagrams of `SIZE` bytes to QPN `0xffffff` with the group's Q_Key, one at a time (each
//! waits for its completion, then 1 ms, so that a slower receiver keeps up: UD drops a
//! datagram that finds no receive). With `--repeat SECS` it sends such a round every 100 ms
//! for that long, for receivers that join after it (a datagram reaches only members).
//! `mckey -m GROUP` (without `-s`) on the same or another device is a receiver.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use zverbs::connect::cm::CmMulticast;
use zverbs::{AccessFlags, Completion, PollCq, Qp, SendFlags, WcFlags};
use zverbs_tools::args::{self, Arg::*, Parser};

const USAGE: &str = "\
usage: mcast --recv|--send --group ADDR [--bind LOCAL_IP] [-C COUNT] [-S SIZE]
             [--timeout SECS]

  --recv            join the group and receive COUNT datagrams, then exit 0
  --send            join the group and send COUNT datagrams of SIZE bytes to it (as mckey -s)
  --group ADDR      the group: an IPv4 (224.0.0.0/4) or IPv6 (ff00::/8) multicast address
  --bind LOCAL_IP   join from the RDMA device holding this address (as mckey -b)
  -C COUNT          datagrams to receive, 1 to 4096 (default 10, as mckey)
  -S SIZE           the largest datagram, 1 to 4096 bytes (default 100, as mckey)
  --repeat SECS     (--send) send a round of COUNT every 100 ms for SECS seconds
  --timeout SECS    how long the join, and each wait for a datagram, may take (default 30)";

/// The bytes at the start of every UD receive buffer that hold the GRH (`struct ibv_grh`),
/// whether or not the datagram carried one.
const GRH_BYTES: usize = 40;
const MAX_COUNT: u32 = 4096;
const MAX_SIZE: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
struct Args {
    send: bool,
    group: IpAddr,
    bind: Option<IpAddr>,
    count: u32,
    size: usize,
    timeout: Duration,
    repeat: Option<Duration>,
}

/// The arguments; `Err("")` asks for the usage text.
fn parse_args(mut p: Parser) -> Result<Args, String> {
    let (mut recv, mut send) = (false, false);
    let mut group = None;
    let mut a = Args {
        send: false,
        group: IpAddr::from([0, 0, 0, 0]),
        bind: None,
        count: 10,
        size: 100,
        timeout: Duration::from_secs(30),
        repeat: None,
    };
    let ip = |p: &mut Parser, f: &str| -> Result<IpAddr, String> {
        let v = args::value(p, f)?;
        v.parse()
            .map_err(|_| format!("{f} {v}: not an IPv4 or IPv6 address"))
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Long("recv") => recv = true,
            Long("send") => send = true,
            Short('m') | Long("group") => group = Some(ip(&mut p, &f)?),
            Short('b') | Long("bind") => a.bind = Some(ip(&mut p, &f)?),
            Short('C') | Long("count") => a.count = args::in_range(&mut p, &f, 1, MAX_COUNT)?,
            Short('S') | Long("size") => a.size = args::in_range(&mut p, &f, 1, MAX_SIZE)?,
            Long("repeat") => {
                a.repeat = Some(Duration::from_secs(args::in_range(&mut p, &f, 1, 3600)?))
            }
            Long("timeout") => {
                a.timeout = Duration::from_secs(args::in_range(&mut p, &f, 1, 3600)?)
            }
            Short('h') | Long("help") => return Err(String::new()),
            arg => return Err(args::unexpected(arg)),
        }
    }
    if recv == send {
        return Err("give --recv or --send".into());
    }
    a.send = send;
    if a.repeat.is_some() && !send {
        return Err("--repeat is for --send".into());
    }
    let Some(g) = group else {
        return Err("give the group with --group ADDR (e.g. 239.1.1.1)".into());
    };
    if !g.is_multicast() {
        return Err(format!(
            "--group {g}: not a multicast address (e.g. 239.1.1.1)"
        ));
    }
    a.group = g;
    Ok(a)
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn receive(a: &Args) -> Res<()> {
    let m = CmMulticast::resolve(a.group, a.bind, a.timeout)?;
    let ctx = m.context();
    println!(
        "mcast: group {} through {} port {}",
        a.group,
        ctx.name(),
        m.port()
    );
    let pd = ctx.alloc_pd()?;
    let cq = ctx.cq_builder().cqe(a.count * 2).build()?;
    let qp: Qp = pd
        .qp_builder(&cq, &cq)
        .ud()
        .max_send_wr(1)
        .max_recv_wr(a.count)
        .max_recv_sge(1)
        .build()?;
    m.ready(&qp)?;
    let slot = GRH_BYTES + a.size;
    let buf = pd.alloc_buf(slot * a.count as usize, AccessFlags::LOCAL_WRITE)?;
    let mut rq = qp.recv_queue()?;
    for i in 0..a.count as usize {
        rq.post(i as u64, buf.slice(i * slot..(i + 1) * slot)?)?;
    }
    let group = m.join(&qp)?;
    let j = group.join_info();
    println!(
        "mcast: joined group {} mgid {} mlid {:#x} qkey {:#x}",
        a.group,
        j.mgid(),
        j.mlid(),
        j.qkey
    );
    let mut cq = cq.poller()?;
    let mut wc = [Completion::EMPTY; 16];
    let mut got = 0u32;
    let mut last = Instant::now();
    let mut payload = vec![0u8; a.size];
    while got < a.count {
        let n = cq.poll(&mut wc);
        if n == 0 {
            if last.elapsed() >= a.timeout {
                return Err(format!(
                    "{got} of {} datagrams within {} s of the last one",
                    a.count,
                    a.timeout.as_secs()
                )
                .into());
            }
            std::hint::spin_loop();
            continue;
        }
        last = Instant::now();
        for c in &wc[..n] {
            if !c.is_success() {
                return Err(format!("receive {} failed: {}", c.wr_id, c.status).into());
            }
            let len = (c.byte_len as usize).saturating_sub(GRH_BYTES);
            let at = c.wr_id as usize * slot + GRH_BYTES;
            buf.read(at, &mut payload[..len.min(a.size)])?;
            let imm = if c.flags.contains(WcFlags::WITH_IMM) {
                format!(", immediate {:#x}", c.imm)
            } else {
                String::new()
            };
            println!(
                "mcast: datagram {}: {len} bytes{imm}{}",
                got + 1,
                if c.flags.contains(WcFlags::GRH) {
                    ", with a GRH"
                } else {
                    ""
                }
            );
            got += 1;
        }
    }
    println!("mcast: received {got} datagrams");
    drop(group);
    Ok(())
}

fn send(a: &Args) -> Res<()> {
    let m = CmMulticast::resolve(a.group, a.bind, a.timeout)?;
    let ctx = m.context();
    println!(
        "mcast: group {} through {} port {}",
        a.group,
        ctx.name(),
        m.port()
    );
    let pd = ctx.alloc_pd()?;
    let cq = ctx.cq_builder().cqe(4).build()?;
    let qp: Qp = pd
        .qp_builder(&cq, &cq)
        .ud()
        .max_send_wr(1)
        .max_recv_wr(1)
        .build()?;
    m.ready(&qp)?;
    let group = m.join(&qp)?;
    let j = group.join_info();
    println!(
        "mcast: joined group {} mgid {} mlid {:#x} qkey {:#x}",
        a.group,
        j.mgid(),
        j.mlid(),
        j.qkey
    );
    let ah = pd.create_ah(&j.ah)?;
    let dest = ah.target(j.qpn, j.qkey);
    let buf = pd.alloc_buf(a.size, AccessFlags::LOCAL_WRITE)?;
    buf.fill(0..a.size, 0x6d)?;
    let mut q = qp.queues(&cq)?;
    let slice = buf.slice(0..a.size)?;
    let until = a.repeat.map(|r| Instant::now() + r);
    let mut sent = 0u64;
    loop {
        for i in 0..a.count {
            q.sq.send_to(u64::from(i), slice, &dest, SendFlags::SIGNALED)?;
            let c = q.cq.wait(1, Instant::now() + a.timeout)?[0];
            if !c.is_success() {
                return Err(format!("send {i} failed: {}", c.status).into());
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        match until {
            Some(t) if Instant::now() < t => std::thread::sleep(Duration::from_millis(100)),
            _ => break,
        }
    }
    println!("mcast: sent {sent} datagrams of {} bytes", a.size);
    drop(q);
    drop(ah);
    drop(group);
    Ok(())
}

fn main() -> ExitCode {
    let a = match args::or_usage(parse_args(Parser::from_env()), "mcast", USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match if a.send { send(&a) } else { receive(&a) } {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcast: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Args, String> {
        parse_args(Parser::from_iter(
            std::iter::once("mcast").chain(words.iter().copied()),
        ))
    }

    #[test]
    fn arguments() {
        let a = parse(&[
            "--recv",
            "--group",
            "239.1.2.3",
            "-b",
            "10.0.0.1",
            "-C",
            "5",
            "-S",
            "64",
        ])
        .unwrap();
        assert_eq!(a.group, IpAddr::from([239, 1, 2, 3]));
        assert_eq!(a.bind, Some(IpAddr::from([10, 0, 0, 1])));
        assert_eq!((a.count, a.size), (5, 64));
        let e = parse(&["--recv", "--group", "10.1.2.3"]).unwrap_err();
        assert!(e.contains("not a multicast address"), "{e}");
        let e = parse(&["--recv", "--group", "nonsense"]).unwrap_err();
        assert!(e.contains("not an IPv4 or IPv6 address"), "{e}");
        assert!(parse(&["--recv"]).unwrap_err().contains("--group"));
        assert!(parse(&["--send", "-m", "239.1.1.1"]).unwrap().send);
        assert!(!parse(&["--recv", "-m", "239.1.1.1"]).unwrap().send);
        assert!(parse(&["--send", "--recv", "-m", "239.1.1.1"]).is_err());
        let a = parse(&["--send", "-m", "239.1.1.1", "--repeat", "5"]).unwrap();
        assert_eq!(a.repeat, Some(Duration::from_secs(5)));
        assert!(parse(&["--recv", "-m", "239.1.1.1", "--repeat", "5"]).is_err());
        assert!(parse(&["-m", "239.1.1.1"]).is_err());
        assert!(parse(&["--recv", "-m", "239.1.1.1", "-C", "0"]).is_err());
    }
}
