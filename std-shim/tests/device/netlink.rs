//! The kernel's own count of a process's RDMA objects, read through the RDMA netlink
//! interface (what `rdma resource show` prints), so that a test can tell which verbs objects
//! really exist after it dropped handles.
//!
//! Constants from `<rdma/rdma_netlink.h>`: each `RDMA_NLDEV_CMD_RES_*_GET` dump, given a device
//! index, answers one message per batch of objects, each a nested table of entries whose
//! `RDMA_NLDEV_ATTR_RES_PID` names the owning process.

use std::io;

const NETLINK_RDMA: i32 = 20;
const RDMA_NL_NLDEV: u16 = 5;
const CMD_GET: u16 = 1;
const CMD_RES_QP_GET: u16 = 10;
const CMD_RES_CQ_GET: u16 = 12;
const CMD_RES_MR_GET: u16 = 13;
const CMD_RES_PD_GET: u16 = 14;
const CMD_RES_CTX_GET: u16 = 22;
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_RES_PID: u16 = 28;
/// (dump command, table attribute, entry attribute) per object kind.
const KINDS: [(u16, u16, u16); 5] = [
    (CMD_RES_CTX_GET, 86, 87),
    (CMD_RES_PD_GET, 46, 47),
    (CMD_RES_MR_GET, 40, 41),
    (CMD_RES_CQ_GET, 35, 36),
    (CMD_RES_QP_GET, 19, 20),
];

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// How many objects of each kind a process owns on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Objects {
    /// Device contexts (open `ibv_context`s).
    pub ctx: usize,
    /// Protection domains.
    pub pd: usize,
    /// Memory regions.
    pub mr: usize,
    /// Completion queues.
    pub cq: usize,
    /// Queue pairs.
    pub qp: usize,
}

/// A netlink socket for RDMA device requests.
pub struct Socket {
    fd: i32,
    seq: u32,
    dev_index: u32,
    buf: Vec<u8>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

fn nlmsg(kind: u16, seq: u32, dev_index: Option<u32>) -> Vec<u8> {
    let mut m = Vec::with_capacity(24);
    let len: u32 = if dev_index.is_some() { 24 } else { 16 };
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&((RDMA_NL_NLDEV << 10) + kind).to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    if let Some(i) = dev_index {
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&ATTR_DEV_INDEX.to_ne_bytes());
        m.extend_from_slice(&i.to_ne_bytes());
    }
    m
}

/// The attributes in `b`: (type without flags, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let kind = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((kind, &b[4..len]));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    out
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

impl Socket {
    /// A socket for requests about `device`.
    pub fn open(device: &str) -> io::Result<Self> {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_RDMA) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut s = Self {
            fd,
            seq: 0,
            dev_index: 0,
            buf: vec![0u8; 64 << 10],
        };
        let mut found = None;
        s.dump(CMD_GET, None, |msg| {
            let a = attrs(msg);
            let name = a.iter().find(|(k, _)| *k == ATTR_DEV_NAME).map(|(_, p)| *p);
            let index = a
                .iter()
                .find(|(k, _)| *k == ATTR_DEV_INDEX)
                .map(|(_, p)| *p);
            if let (Some(n), Some(i)) = (name, index)
                && n.split(|&c| c == 0).next() == Some(device.as_bytes())
            {
                found = u32_of(i);
            }
        })?;
        s.dev_index = found.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no RDMA device {device}"))
        })?;
        Ok(s)
    }

    /// Sends a dump request and hands each answer's attributes (after the netlink header) to
    /// `each`.
    fn dump(&mut self, cmd: u16, dev: Option<u32>, mut each: impl FnMut(&[u8])) -> io::Result<()> {
        self.seq += 1;
        let req = nlmsg(cmd, self.seq, dev);
        // SAFETY: sends `req.len()` initialised bytes; the kernel is the default destination of
        // an unbound netlink socket's send.
        let n = unsafe { libc::send(self.fd, req.as_ptr().cast(), req.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let buf = &mut self.buf;
        loop {
            // SAFETY: receives into `buf`, which has `buf.len()` writable bytes.
            let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut b = &buf[..n as usize];
            while b.len() >= 16 {
                let len = u32_of(b).unwrap_or(0) as usize;
                let kind = u16::from_ne_bytes([b[4], b[5]]);
                if len < 16 || len > b.len() {
                    return Err(io::Error::other("truncated netlink message"));
                }
                match kind {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let errno = i32::from_ne_bytes(b[16..20].try_into().unwrap_or([0; 4]));
                        if errno == 0 {
                            return Ok(());
                        }
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                    _ => each(&b[16..len]),
                }
                b = &b[len.next_multiple_of(4).min(b.len())..];
            }
        }
    }

    /// The objects the tasks `owners` created on the device.
    pub fn objects(&mut self, owners: &[u32]) -> io::Result<Objects> {
        let mut counts = [0usize; 5];
        for (i, (cmd, table, entry)) in KINDS.into_iter().enumerate() {
            let dev = Some(self.dev_index);
            self.dump(cmd, dev, |msg| {
                for (k, t) in attrs(msg) {
                    if k != table {
                        continue;
                    }
                    for (e, fields) in attrs(t) {
                        let owner = attrs(fields)
                            .into_iter()
                            .find(|(f, _)| *f == ATTR_RES_PID)
                            .and_then(|(_, p)| u32_of(p));
                        if e == entry && owner.is_some_and(|o| owners.contains(&o)) {
                            counts[i] += 1;
                        }
                    }
                }
            })?;
        }
        let [ctx, pd, mr, cq, qp] = counts;
        Ok(Objects {
            ctx,
            pd,
            mr,
            cq,
            qp,
        })
    }
}
