//! The emulator's sockets between processes as an untrusted peer meets them: a device
//! instance's listener ([`Fabric`], served by [`zverbs_emu::fabric::rx`]) and a process's
//! fault-injection socket ([`serve_control`]). Whoever connects must run as this user, open
//! with a hello carrying this fabric's key and, for a device instance, the LID it holds; what
//! it sends costs no more than it sent (a frame's announced size allocates nothing, an idle
//! connection takes no thread, connections are bounded); a message names its own sender.
//!
//! No device is needed: the listener hands what it admits to a channel. The tests take turns
//! (they count the process's threads and its resident memory).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use zverbs_emu::async_events::{send_fault, serve_control};
use zverbs_emu::fabric::hello::{self, HELLO_LEN, Hello, KEY_LEN, Key, Role, lid_name};
use zverbs_emu::fabric::rx::{MAX_CONNECTIONS, MAX_FRAME};
use zverbs_emu::fabric::{Fabric, Listener};
use zverbs_sim::wire::{Datagram, Message};

/// One test at a time: they count threads and memory of the whole process.
static TURN: Mutex<()> = Mutex::new(());

/// How long anything expected may take to happen (far beyond what it needs).
const PATIENCE: Duration = Duration::from_secs(30);

/// Set in a child process started by [`child`]: what it is to do.
const CHILD: &str = "ZVERBS_EMU_FABRIC_CHILD";

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

fn key() -> Key {
    Key::new([0x5a; KEY_LEN])
}

/// A listening device instance, served, and what it delivered.
struct Served {
    ns: String,
    lid: u16,
    got: Receiver<Vec<u8>>,
}

fn served(test: &str) -> Served {
    let ns = format!("fabric-test-{}-{test}", std::process::id());
    let (_sending, listener) = Fabric::bind(&ns, 100, key()).unwrap();
    let lid = listener.lid();
    let (tx, got) = mpsc::channel();
    listener
        .serve(move |m| {
            let _ = tx.send(m.to_vec());
        })
        .unwrap();
    Served { ns, lid, got }
}

impl Served {
    fn name(&self) -> String {
        lid_name(&self.ns, self.lid)
    }

    /// A LID this process holds (its listener is kept, never served), for a member to claim.
    fn member_lid(&self) -> (u16, Listener) {
        let (_, l) = Fabric::bind(&self.ns, 1000, key()).unwrap();
        (l.lid(), l)
    }

    /// Connects as a member of the fabric holding `lid`.
    fn open(&self, lid: u16) -> UnixStream {
        let hello = Hello {
            role: Role::Device,
            lid,
            key: key(),
        };
        self.open_raw(&hello.encode())
    }

    /// Connects (waiting while the listener's queue is full) and sends `first` as the
    /// hello, whatever it is.
    fn open_raw(&self, first: &[u8]) -> UnixStream {
        let until = Instant::now() + PATIENCE;
        let s = loop {
            match hello::connect_now(&self.name()) {
                Ok(s) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("connecting to {}: {e}", self.name()),
            }
        };
        s.set_nonblocking(false).unwrap();
        (&s).write_all(first).unwrap();
        s
    }

    /// The next message delivered.
    fn next(&self) -> Vec<u8> {
        self.got
            .recv_timeout(PATIENCE)
            .expect("a message delivered")
    }

    fn nothing_delivered(&self) {
        assert_eq!(self.got.try_recv().ok(), None, "a message was delivered");
    }
}

/// A datagram's bytes, from `src_lid`, tagged.
fn datagram(src_lid: u16, tag: u8) -> Vec<u8> {
    Message::Datagram(Datagram {
        src_lid,
        src_qpn: 0x100,
        dlid: 1,
        dqpn: 0x200,
        qkey: 0x11,
        sl: 0,
        solicited: false,
        imm: None,
        grh: None,
        payload: vec![tag; 8],
    })
    .encode()
}

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut f = (msg.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(msg);
    f
}

/// Whether the other end closed `s` (it reads the end) within [`PATIENCE`]; what it sent
/// before is dropped.
fn closed_by_peer(s: &UnixStream) -> bool {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match (&*s).read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// This process's resident memory, in bytes.
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Bytes written to `s` that its reader has not yet read (`SIOCOUTQ`).
fn unread(s: &UnixStream) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    assert_eq!(r, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
    n
}

/// Raises this process's limit of open descriptors as far as it may (the tests below open a
/// few hundred sockets at both ends).
fn more_descriptors() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reading and setting this process's own limit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Runs this test binary's test `test` as a child process with `what` in [`CHILD`], and
/// `setup` applied to its command; its stdout is piped.
fn child(
    test: &str,
    what: &str,
    setup: impl FnOnce(&mut std::process::Command),
) -> std::process::Child {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, what)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    setup(&mut c);
    c.spawn().unwrap()
}

/// Reads the child's output up to a line holding `marker`: what follows the marker there.
fn child_says(c: &mut std::process::Child, marker: &str) -> String {
    let out = c.stdout.as_mut().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        assert_eq!(out.read(&mut b).unwrap(), 1, "the child ended: {line:?}");
        if b[0] == b'\n' {
            let text = String::from_utf8_lossy(&line).into_owned();
            if let Some(at) = text.find(marker) {
                return text[at + marker.len()..].trim().to_string();
            }
            line.clear();
        } else {
            line.push(b[0]);
        }
    }
}

#[test]
fn a_member_is_heard_and_a_message_it_forges_closes_its_connection() {
    let _t = turn();
    let s = served("forged");
    let (lid, _held) = s.member_lid();
    let mut c = s.open(lid);
    c.write_all(&frame(&datagram(lid, 1))).unwrap();
    assert_eq!(s.next(), datagram(lid, 1));
    // Two messages in one write, the second naming another LID as its sender: the first is
    // delivered, the second closes the connection.
    let mut two = frame(&datagram(lid, 2));
    two.extend(frame(&datagram(lid ^ 0x100, 3)));
    c.write_all(&two).unwrap();
    assert_eq!(s.next(), datagram(lid, 2));
    assert!(closed_by_peer(&c), "a forged sender was not refused");
    s.nothing_delivered();
}

/// In a child process only: holds a LID of namespace `NS` (printed as `@lid N`) until its
/// stdin closes, or connects to the listener of LID `SERVER` as another user
/// (`as-another-user`).
#[test]
fn fabric_child() {
    let Ok(what) = std::env::var(CHILD) else {
        return;
    };
    let ns = std::env::var("NS").unwrap();
    let server: u16 = std::env::var("SERVER").unwrap().parse().unwrap();
    match what.as_str() {
        "hold-a-lid" => {
            let (_, l) = Fabric::bind(&ns, 2000, key()).unwrap();
            println!("@lid {}", l.lid());
            let _ = std::io::stdin().read(&mut [0u8; 1]);
        }
        "as-another-user" => {
            let (_, l) = Fabric::bind(&ns, 3000, key()).unwrap();
            let name = lid_name(&ns, server);
            let hello = Hello {
                role: Role::Device,
                lid: l.lid(),
                key: key(),
            };
            // This side does not send the key to another user's listener...
            let e = hello::open(&name, &hello).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
            // ... and the listener does not hear another user who sends it anyway.
            let s = hello::connect_now(&name).unwrap();
            s.set_nonblocking(false).unwrap();
            let mut first = hello.encode().to_vec();
            first.extend(frame(&datagram(l.lid(), 9)));
            let _ = (&s).write_all(&first);
            assert!(closed_by_peer(&s), "another user's connection stayed open");
            println!("@result refused");
        }
        other => panic!("unknown child {other}"),
    }
}

#[test]
fn strangers_are_not_heard() {
    let _t = turn();
    let s = served("strangers");
    let (lid, _held) = s.member_lid();
    let free = {
        let (l, held) = s.member_lid();
        drop(held);
        l
    };
    let mut holder = child("fabric_child", "hold-a-lid", |c| {
        c.env("NS", &s.ns).env("SERVER", s.lid.to_string());
    });
    let theirs: u16 = child_says(&mut holder, "@lid ").parse().unwrap();
    let hello = |role, lid, key| Hello { role, lid, key }.encode().to_vec();
    let mut other_key = [0x5a; KEY_LEN];
    other_key[7] ^= 1;
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "another fabric's key",
            hello(Role::Device, lid, Key::new(other_key)),
            lid,
        ),
        ("no key", hello(Role::Device, lid, Key::NONE), lid),
        ("a control hello", hello(Role::Control, lid, key()), lid),
        ("a LID no one holds", hello(Role::Device, free, key()), free),
        (
            "the listener's own LID",
            hello(Role::Device, s.lid, key()),
            s.lid,
        ),
        (
            "another process's LID",
            hello(Role::Device, theirs, key()),
            theirs,
        ),
        ("not a hello", vec![b'x'; HELLO_LEN], lid),
    ];
    for (what, first, claimed) in cases {
        let mut bytes = first;
        bytes.extend(frame(&datagram(claimed, 1)));
        let c = s.open_raw(&bytes);
        assert!(closed_by_peer(&c), "{what}: the connection stayed open");
        s.nothing_delivered();
    }
    drop(holder.stdin.take());
    holder.wait().unwrap();
    // Another user (when this test may start a process as one).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        let mut other = child("fabric_child", "as-another-user", |c| {
            c.env("NS", &s.ns)
                .env("SERVER", s.lid.to_string())
                .uid(65534)
                .gid(65534);
        });
        assert_eq!(child_says(&mut other, "@result "), "refused");
        assert!(other.wait().unwrap().success());
        s.nothing_delivered();
    } else {
        println!("not root: the connection of another user is not tried");
    }
    // A member is still heard.
    let mut c = s.open(lid);
    c.write_all(&frame(&datagram(lid, 7))).unwrap();
    assert_eq!(s.next(), datagram(lid, 7));
}

#[test]
fn an_announced_size_costs_nothing_before_its_bytes_come() {
    let _t = turn();
    let s = served("size");
    let (lid, _held) = s.member_lid();
    let mut c = s.open(lid);
    let before = resident();
    // The largest frame taken, announced, and its first MiB sent.
    c.write_all(&(MAX_FRAME as u32).to_le_bytes()).unwrap();
    c.write_all(&vec![0u8; 1 << 20]).unwrap();
    let until = Instant::now() + PATIENCE;
    while unread(&c) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(unread(&c), 0, "the listener did not read what came");
    let grew = resident().saturating_sub(before);
    assert!(
        grew < 64 << 20,
        "{} MiB resident after a frame of {MAX_FRAME} bytes was announced and 1 MiB of it sent",
        grew >> 20
    );
    // Over the largest, or empty: the connection is closed before anything else is read.
    for head in [(MAX_FRAME + 1) as u32, u32::MAX, 0] {
        let mut c = s.open(lid);
        c.write_all(&head.to_le_bytes()).unwrap();
        assert!(closed_by_peer(&c), "a frame of {head} bytes was taken");
    }
    s.nothing_delivered();
}

#[test]
fn connections_take_no_thread_and_are_bounded() {
    let _t = turn();
    more_descriptors();
    let s = served("bounded");
    let before = threads();
    // More members than the listener serves, each holding its LID, each sending a message.
    let extra = 40;
    let members: Vec<(u16, Listener)> = (0..MAX_CONNECTIONS + extra)
        .map(|_| s.member_lid())
        .collect();
    let conns: Vec<UnixStream> = members.iter().map(|(lid, _)| s.open(*lid)).collect();
    for (c, (lid, _)) in conns.iter().zip(&members) {
        // The connections refused may be closed already.
        let _ = (&*c).write_all(&frame(&datagram(*lid, 1)));
    }
    for i in 0..MAX_CONNECTIONS {
        assert!(
            s.got.recv_timeout(PATIENCE).is_ok(),
            "{i} of {MAX_CONNECTIONS} members heard"
        );
    }
    // The others are closed.
    let mut fds: Vec<libc::pollfd> = conns
        .iter()
        .map(|c| libc::pollfd {
            fd: c.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        })
        .collect();
    let until = Instant::now() + PATIENCE;
    let hung_up = loop {
        // SAFETY: `fds` is a valid array of pollfd of its length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        let n = fds
            .iter()
            .filter(|p| p.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0)
            .count();
        if n >= extra || Instant::now() > until {
            break n;
        }
    };
    assert_eq!(
        hung_up, extra,
        "connections beyond {MAX_CONNECTIONS} closed"
    );
    s.nothing_delivered();
    let now = threads();
    assert!(
        now <= before + 2,
        "{now} threads with {} connections (before them: {before})",
        conns.len()
    );
    drop(conns);
    // A connection that sends no hello is closed once its time is up.
    let idle = hello::connect_now(&s.name()).unwrap();
    idle.set_nonblocking(false).unwrap();
    assert!(closed_by_peer(&idle), "an idle connection was kept");
    // Once the others are gone, a member is heard again.
    let (lid, _held) = s.member_lid();
    let mut c = s.open(lid);
    c.write_all(&frame(&datagram(lid, 5))).unwrap();
    assert_eq!(s.next(), datagram(lid, 5));
}

#[test]
fn faults_are_taken_from_members_of_the_fabric_only() {
    let _t = turn();
    let ns = format!("fabric-test-{}-control", std::process::id());
    let dev: &'static zverbs_sim::Device = Box::leak(Box::new(zverbs_sim::Device::new()));
    serve_control(&ns, key(), dev);
    let pid = std::process::id();
    let up = dev.port_state();
    let mut other = [0x5a; KEY_LEN];
    other[0] = 0;
    for stranger in [Key::new(other), Key::NONE] {
        let e = send_fault(&ns, stranger, pid, "port-down").unwrap_err();
        assert!(e.to_string().contains("another emulated fabric"), "{e}");
        assert_eq!(dev.port_state(), up, "a stranger's fault was applied");
    }
    send_fault(&ns, key(), pid, "port-down").unwrap();
    assert_ne!(dev.port_state(), up, "the member's fault was not applied");
    let e = send_fault(&ns, key(), pid, "qp-fatal 0x123456").unwrap_err();
    assert!(e.to_string().contains(&format!("process {pid}")), "{e}");
    send_fault(&ns, key(), pid, "port-up").unwrap();
    assert_eq!(dev.port_state(), up);
    // A connection that says nothing holds the socket for a while (CONTROL_WAIT) at most.
    let silent = hello::connect_now(&format!("zverbs-emu/{ns}/inject/{pid}")).unwrap();
    silent.set_nonblocking(false).unwrap();
    assert!(closed_by_peer(&silent));
    send_fault(&ns, key(), pid, "port-down").unwrap();
    assert_ne!(dev.port_state(), up);
}
