//! Writing initramfs archives: the "new ASCII" (`newc`) cpio format that the Linux kernel
//! unpacks at boot (`Documentation/driver-api/early-userspace/buffer-format.rst`).
//!
//! Each entry is a 110-byte header of `070701` and thirteen 8-digit hexadecimal fields, the
//! path (NUL-terminated, padded to a multiple of 4 bytes counted from the header's start), then
//! the contents (padded to 4 bytes). A symlink's contents are its target. The archive ends with
//! an entry named `TRAILER!!!`. Archives may be concatenated: the kernel unpacks them in order,
//! later files replacing earlier ones, which is how a small per-run archive adds the guest's
//! `/init` to the cached image.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// File type bits of `st_mode`.
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

/// A `newc` archive being written.
pub struct Archive<W: Write> {
    out: W,
    /// Bytes written so far (for padding).
    written: u64,
    /// The next inode number.
    ino: u32,
}

impl<W: Write> Archive<W> {
    /// An archive written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            written: 0,
            ino: 1,
        }
    }

    /// Adds a directory.
    pub fn dir(&mut self, path: &str, perm: u32) -> io::Result<()> {
        self.entry(path, S_IFDIR | (perm & 0o7777), 2, b"")
    }

    /// Adds a regular file with these contents.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, S_IFREG | (perm & 0o7777), 1, data)
    }

    /// Adds a symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, S_IFLNK | 0o777, 1, target.as_bytes())
    }

    /// Adds everything under the directory `root` (not `root` itself), each entry named by its
    /// path relative to `root`, in sorted order (parents before children). Owners become root;
    /// permissions are kept.
    pub fn tree(&mut self, root: &Path) -> io::Result<()> {
        self.tree_under(root, "")
    }

    fn tree_under(&mut self, dir: &Path, prefix: &str) -> io::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                return Err(io::Error::other(format!(
                    "{}: not a UTF-8 file name",
                    e.path().display()
                )));
            };
            let path = format!("{prefix}{name}");
            let meta = fs::symlink_metadata(e.path())?;
            let perm = meta.permissions().mode();
            if meta.file_type().is_symlink() {
                let target = fs::read_link(e.path())?;
                let Some(target) = target.to_str() else {
                    return Err(io::Error::other(format!(
                        "{}: not a UTF-8 link target",
                        e.path().display()
                    )));
                };
                self.symlink(&path, target)?;
            } else if meta.is_dir() {
                self.dir(&path, perm)?;
                self.tree_under(&e.path(), &format!("{path}/"))?;
            } else if meta.is_file() {
                self.file(&path, perm, &fs::read(e.path())?)?;
            } else {
                return Err(io::Error::other(format!(
                    "{}: neither file, directory nor symlink (mode {:o})",
                    e.path().display(),
                    meta.mode()
                )));
            }
        }
        Ok(())
    }

    /// Writes the trailer and hands back the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry_with_ino(0, "TRAILER!!!", 0, 1, b"")?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, data: &[u8]) -> io::Result<()> {
        let ino = self.ino;
        self.ino += 1;
        self.entry_with_ino(ino, path, mode, nlink, data)
    }

    fn entry_with_ino(
        &mut self,
        ino: u32,
        path: &str,
        mode: u32,
        nlink: u32,
        data: &[u8],
    ) -> io::Result<()> {
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::other(format!("{path}: too large for cpio")))?;
        let namesize = path.len() + 1;
        // ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
        // rdevminor, namesize, check
        let fields = [
            ino,
            mode,
            0,
            0,
            nlink,
            0,
            size,
            0,
            0,
            0,
            0,
            namesize as u32,
            0,
        ];
        let mut header = String::from("070701");
        for f in fields {
            header.push_str(&format!("{f:08x}"));
        }
        self.put(header.as_bytes())?;
        self.put(path.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Zero bytes up to the next multiple of 4.
    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0; 3][..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as the format lays it out: magic, then 13 fields of 8 hex digits.
    fn header(fields: [&str; 13]) -> Vec<u8> {
        let mut h = b"070701".to_vec();
        for f in fields {
            assert_eq!(f.len(), 8);
            h.extend_from_slice(f.as_bytes());
        }
        h
    }

    #[test]
    fn newc_bytes_of_a_file_a_link_and_the_trailer() {
        let mut a = Archive::new(Vec::new());
        a.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        a.symlink("bin", "usr/bin").unwrap();
        let out = a.finish().unwrap();

        let z = "00000000";
        let mut want = Vec::new();
        // ino 1, mode 0o100755, nlink 1, size 10, namesize 5: header (110) + "init\0" = 115
        // bytes, padded to 116; then 10 bytes of data and 2 of padding.
        want.extend(header([
            "00000001", "000081ed", z, z, "00000001", z, "0000000a", z, z, z, z, "00000005", z,
        ]));
        want.extend_from_slice(b"init\0\0");
        want.extend_from_slice(b"#!/bin/sh\n\0\0");
        // ino 2, mode 0o120777, size 7 ("usr/bin"), namesize 4: 114 bytes padded to 116.
        want.extend(header([
            "00000002", "0000a1ff", z, z, "00000001", z, "00000007", z, z, z, z, "00000004", z,
        ]));
        want.extend_from_slice(b"bin\0\0\0");
        want.extend_from_slice(b"usr/bin\0");
        // The trailer: ino 0, nlink 1, namesize 11: 121 bytes padded to 124.
        want.extend(header([
            z, z, z, z, "00000001", z, z, z, z, z, z, "0000000b", z,
        ]));
        want.extend_from_slice(b"TRAILER!!!\0\0\0\0");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(out.len() % 4, 0);
    }

    #[test]
    fn every_entry_starts_on_a_four_byte_boundary() {
        for name_len in 1..9 {
            let mut a = Archive::new(Vec::new());
            let name = "n".repeat(name_len);
            a.file(&name, 0o644, &vec![7; name_len]).unwrap();
            a.dir("d", 0o755).unwrap();
            let out = a.finish().unwrap();
            let starts: Vec<usize> = out
                .windows(6)
                .enumerate()
                .filter(|(_, w)| w == b"070701")
                .map(|(i, _)| i)
                .collect();
            assert_eq!(starts.len(), 3, "name length {name_len}");
            assert!(starts.iter().all(|s| s % 4 == 0), "{starts:?}");
        }
    }
}
