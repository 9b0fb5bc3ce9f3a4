//! Who may speak on the fabric: its key, the hello every connection opens with, and the
//! kernel's word on the process at the other end.
//!
//! Abstract Unix sockets have no file permissions: any process of the machine (of its network
//! namespace) may connect to a listener's name, and any may bind a free one. So a connection
//! to a device instance, or to a process's fault-injection socket, is admitted only when:
//!
//! 1. the kernel says (`SO_PEERCRED`) that the process at the other end runs as this
//!    process's user: checked by the listening side before it reads a byte, and by the
//!    connecting side before it sends the key;
//! 2. its first [`HELLO_LEN`] bytes are a [`Hello`] of the right [`Role`] carrying this
//!    fabric's [`Key`]. The processes of one emulated fabric share its sysfs tree
//!    (`SYSFS_PATH`), where `zverbs-emu sysfs` writes the key once ([`KEY_FILE`], readable by
//!    its owner only); a process of another tree, or of another user, has another key or none;
//! 3. for a device instance, the LID the hello claims is the peer's own: the listener bound to
//!    that LID's name belongs to the process that connected ([`holder`]). A member can speak
//!    for no LID but its own, and every message it sends must name that LID as its source.
//!
//! The hello: 8 bytes of magic and version, the role (1 device instance, 2 fault injection),
//! the claimed LID (little-endian `u16`, 0 for fault injection), the 32 bytes of the key.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The largest LID handed out (unicast LIDs are 1..=0xbfff).
pub const MAX_LID: u16 = 0xbfff;

/// Bytes of a [`Key`].
pub const KEY_LEN: usize = 32;

/// Bytes of a [`Hello`].
pub const HELLO_LEN: usize = 8 + 1 + 2 + KEY_LEN;

/// Magic and version: `zvemu`, two NULs, version 1.
const MAGIC: [u8; 8] = *b"zvemu\0\0\x01";

/// The key's file under the sysfs tree's root (64 hex digits).
pub const KEY_FILE: &str = "zverbs-emu/fabric-key";

/// The secret shared by the processes of one emulated fabric.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if *self == Key::NONE {
            "Key(none)"
        } else {
            "Key(..)"
        })
    }
}

impl Key {
    /// The key of processes that have none (no `SYSFS_PATH`, or a tree without a key): they
    /// admit one another, and no process that has a key.
    pub const NONE: Key = Key([0; KEY_LEN]);

    /// A key of these bytes.
    pub fn new(bytes: [u8; KEY_LEN]) -> Key {
        Key(bytes)
    }

    /// A fresh key from the kernel's random source.
    ///
    /// # Errors
    ///
    /// When `/dev/urandom` cannot be read.
    pub fn random() -> io::Result<Key> {
        let mut k = [0u8; KEY_LEN];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
        Ok(Key(k))
    }

    /// The key in the tree at `root` ([`KEY_FILE`]).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or does not hold 64 hex digits.
    pub fn load(root: &Path) -> io::Result<Key> {
        let text = std::fs::read_to_string(root.join(KEY_FILE))?;
        let text = text.trim();
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a fabric key");
        if text.len() != 2 * KEY_LEN {
            return Err(bad());
        }
        let mut k = [0u8; KEY_LEN];
        for (i, b) in k.iter_mut().enumerate() {
            let digits = text.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *b = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
        }
        Ok(Key(k))
    }

    /// The key in the tree at `root`, written first (a fresh one, readable by its owner only)
    /// when there is none. Two writers at once end with one key: the file appears whole, by
    /// a link that fails when it exists.
    ///
    /// # Errors
    ///
    /// When the key can be neither read nor written.
    pub fn ensure(root: &Path) -> io::Result<Key> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Ok(k) = Key::load(root) {
            return Ok(k);
        }
        let file = root.join(KEY_FILE);
        let dir = file.parent().unwrap_or(root);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let key = Key::random()?;
        let text: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = dir.join(format!(".fabric-key.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(format!("{text}\n").as_bytes())?;
        drop(f);
        let linked = std::fs::hard_link(&tmp, &file);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(key),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Key::load(root),
            Err(e) => Err(e),
        }
    }

    /// This process's key: the one in the tree `SYSFS_PATH` names, else [`Key::NONE`].
    pub fn from_env() -> Key {
        let Some(root) = std::env::var_os("SYSFS_PATH") else {
            crate::log(format_args!("no SYSFS_PATH: no fabric key"));
            return Key::NONE;
        };
        Key::load(Path::new(&root)).unwrap_or_else(|e| {
            crate::log(format_args!(
                "no fabric key in {} ({e})",
                Path::new(&root).join(KEY_FILE).display()
            ));
            Key::NONE
        })
    }

    /// Whether `other` is this key, comparing every byte whatever the first difference.
    pub fn matches(&self, other: &Key) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A device instance sending requests, responses and datagrams.
    Device,
    /// A fault for the process's device (`zverbs-emu inject`).
    Control,
}

/// The first bytes of every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// What the connection is for.
    pub role: Role,
    /// The LID of the connecting device instance (0 for [`Role::Control`]).
    pub lid: u16,
    /// The fabric's key.
    pub key: Key,
}

impl Hello {
    /// The hello as bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8] = match self.role {
            Role::Device => 1,
            Role::Control => 2,
        };
        b[9..11].copy_from_slice(&self.lid.to_le_bytes());
        b[11..].copy_from_slice(&self.key.0);
        b
    }

    /// Parses a hello; `None` for bytes that are none (another program, another version).
    pub fn decode(b: &[u8; HELLO_LEN]) -> Option<Hello> {
        if b[..8] != MAGIC {
            return None;
        }
        let role = match b[8] {
            1 => Role::Device,
            2 => Role::Control,
            _ => return None,
        };
        let mut key = [0u8; KEY_LEN];
        key.copy_from_slice(&b[11..]);
        Some(Hello {
            role,
            lid: u16::from_le_bytes([b[9], b[10]]),
            key: Key(key),
        })
    }
}

/// The user this process runs as (effective).
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The process at the other end of the connected Unix socket `fd`, as the kernel recorded it
/// when the connection was made: for the connecting side, the process that called `listen`.
///
/// # Errors
///
/// When the kernel does not answer (not a Unix socket, not connected).
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable `ucred` of `len` bytes, which SO_PEERCRED fills.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// The abstract socket name of the device instance at `lid` in namespace `ns`.
pub fn lid_name(ns: &str, lid: u16) -> String {
    format!("zverbs-emu.{ns}.lid.{lid}")
}

/// Connects to the abstract socket `name` without waiting: a listener whose queue of
/// connections not yet accepted is full refuses at once (`WouldBlock`) instead of blocking the
/// caller. The stream is left non-blocking.
///
/// # Errors
///
/// No listener, a full queue, a name too long.
pub fn connect_now(name: &str) -> io::Result<UnixStream> {
    // SAFETY: plain socket creation; the descriptor is owned at once below.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero `sockaddr_un` is a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // An abstract name: a NUL, then the name's bytes (no terminating NUL).
    if name.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket name too long",
        ));
    }
    for (slot, &b) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *slot = b as libc::c_char;
    }
    let len = core::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    // SAFETY: `addr` is an initialised `sockaddr_un` of at least `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixStream::from(fd))
}

/// The process that holds the listener of LID `lid` in `ns` (asked by a connection made and
/// dropped at once).
///
/// # Errors
///
/// When no listener answers now.
pub fn holder(ns: &str, lid: u16) -> io::Result<libc::ucred> {
    let s = connect_now(&lid_name(ns, lid))?;
    peer_cred(s.as_fd())
}

/// Opens a connection as `hello` says to the abstract socket `name`, once the kernel has said
/// that its listener runs as this process's user (the key goes to no one else), and sends the
/// hello. Returns the stream, blocking, and the listener's credentials.
///
/// # Errors
///
/// No listener, a listener of another user, a failed write.
pub fn open(name: &str, hello: &Hello) -> io::Result<(UnixStream, libc::ucred)> {
    let s = connect_now(name)?;
    let cred = peer_cred(s.as_fd())?;
    if cred.uid != my_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{name} is held by process {} of user {}, not this user's",
                cred.pid, cred.uid
            ),
        ));
    }
    s.set_nonblocking(false)?;
    (&s).write_all(&hello.encode())?;
    Ok((s, cred))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_round_trips_and_nothing_else_is_one() {
        let h = Hello {
            role: Role::Device,
            lid: 0x1234,
            key: Key::new([7; KEY_LEN]),
        };
        let b = h.encode();
        assert_eq!(&b[..11], b"zvemu\0\0\x01\x01\x34\x12");
        assert_eq!(Hello::decode(&b), Some(h));
        let c = Hello {
            role: Role::Control,
            lid: 0,
            key: Key::NONE,
        };
        assert_eq!(Hello::decode(&c.encode()), Some(c));
        let mut other_version = b;
        other_version[7] = 2;
        assert_eq!(Hello::decode(&other_version), None);
        let mut other_role = b;
        other_role[8] = 3;
        assert_eq!(Hello::decode(&other_role), None);
        assert_eq!(Hello::decode(&[0; HELLO_LEN]), None);
    }

    #[test]
    fn keys_match_only_themselves_and_are_not_printed() {
        let a = Key::new([1; KEY_LEN]);
        let mut b = [1; KEY_LEN];
        b[KEY_LEN - 1] = 2;
        assert!(a.matches(&a));
        assert!(!a.matches(&Key::new(b)));
        assert!(!a.matches(&Key::NONE));
        assert_eq!(format!("{a:?}"), "Key(..)");
        assert_eq!(format!("{:?}", Key::NONE), "Key(none)");
    }

    #[test]
    fn a_tree_keeps_its_key_and_only_its_owner_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("zverbs-emu-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let k = Key::ensure(&root).unwrap();
        assert_ne!(k, Key::NONE);
        assert_eq!(Key::ensure(&root).unwrap(), k, "an existing key is kept");
        assert_eq!(Key::load(&root).unwrap(), k);
        let mode = std::fs::metadata(root.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(root.join(KEY_FILE), "not hex\n").unwrap();
        assert!(Key::load(&root).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
