//! Reading a tar stream entry by entry (what `dpkg-deb --fsys-tarfile` writes), so that the
//! image takes a few files out of a package without unpacking all of it to disk.
//!
//! The format: 512-byte headers, each followed by its data padded to 512 bytes; the name in
//! the header's first 100 bytes, with the ustar prefix (bytes 345..500) before it; a longer
//! name in a GNU `L` entry or a pax `x` entry's `path=` record just before the entry it names;
//! two zero blocks (or the end of the stream) end it.

use std::io::{self, Read};

const BLOCK: usize = 512;

/// One entry's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path as written (`./lib/modules/...`).
    pub path: String,
    /// The ustar type: `b'0'` a file, `b'5'` a directory, `b'2'` a symbolic link, ...
    pub kind: u8,
    /// Its data's size in bytes.
    pub size: u64,
}

impl Entry {
    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.kind == b'0' || self.kind == 0
    }

    /// Its path without the leading `./` or `/`.
    pub fn relative(&self) -> &str {
        self.path.trim_start_matches("./").trim_start_matches('/')
    }
}

/// An octal number field (NUL- or space-terminated), or base-256 when its top bit is set.
fn number(field: &[u8]) -> io::Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            n = n
                .checked_mul(256)
                .and_then(|n| n.checked_add(u64::from(b)))
                .ok_or_else(|| bad("a size does not fit in 64 bits"))?;
        }
        return Ok(n);
    }
    let text: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|&b| b == b' ')
        .take_while(|&b| b != 0 && b != b' ')
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    let s = std::str::from_utf8(&text).map_err(|_| bad("a number field is not ASCII"))?;
    u64::from_str_radix(s, 8).map_err(|_| bad("a number field is not octal"))
}

/// A NUL-terminated string field.
fn string(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("tar: {what}"))
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end of the stream before any.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(bad("the stream ends inside a block")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The `path` record of a pax extended header (`"<len> path=<value>\n"` records).
fn pax_path(data: &[u8]) -> Option<String> {
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        let record = rest.get(space + 1..len)?;
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(v) = record.strip_prefix(b"path=") {
            return Some(String::from_utf8_lossy(v).into_owned());
        }
        rest = &rest[len..];
    }
    None
}

/// Calls `f` with each entry of the tar stream `r` and a reader of exactly its data (what `f`
/// leaves unread is skipped).
pub fn each(
    mut r: impl Read,
    mut f: impl FnMut(&Entry, &mut dyn Read) -> io::Result<()>,
) -> io::Result<()> {
    let mut header = [0u8; BLOCK];
    let mut long_name: Option<String> = None;
    loop {
        if !fill(&mut r, &mut header)? || header.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let size = number(&header[124..136])?;
        let kind = header[156];
        let padded = size
            .div_ceil(BLOCK as u64)
            .checked_mul(BLOCK as u64)
            .ok_or_else(|| bad("an entry's size does not fit in 64 bits once padded"))?;
        let mut data = (&mut r).take(size);
        match kind {
            b'L' | b'x' => {
                let mut meta = Vec::new();
                data.read_to_end(&mut meta)?;
                if meta.len() as u64 != size {
                    return Err(bad("the stream ends inside a long name"));
                }
                long_name = if kind == b'L' {
                    Some(string(&meta))
                } else {
                    pax_path(&meta).or(long_name)
                };
            }
            b'K' | b'g' => {
                io::copy(&mut data, &mut io::sink())?;
            }
            _ => {
                let path = long_name.take().unwrap_or_else(|| {
                    let name = string(&header[0..100]);
                    let prefix = if &header[257..262] == b"ustar" {
                        string(&header[345..500])
                    } else {
                        String::new()
                    };
                    if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    }
                });
                let entry = Entry { path, kind, size };
                f(&entry, &mut data)?;
                io::copy(&mut data, &mut io::sink())?;
                if data.limit() != 0 {
                    return Err(bad("the stream ends inside an entry"));
                }
            }
        }
        let pad = padded - size;
        if io::copy(&mut (&mut r).take(pad), &mut io::sink())? != pad {
            return Err(bad("the stream ends inside an entry's padding"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header block for `name` (ustar), its data padded.
    fn entry(name: &str, kind: u8, data: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        let (prefix, name) = if name.len() > 100 {
            let cut = name[..155.min(name.len())].rfind('/').unwrap();
            (&name[..cut], &name[cut + 1..])
        } else {
            ("", name)
        };
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        let mut out = h;
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        out
    }

    fn read_all(stream: &[u8]) -> Vec<(Entry, Vec<u8>)> {
        let mut out = Vec::new();
        each(stream, |e, d| {
            let mut v = Vec::new();
            d.read_to_end(&mut v)?;
            out.push((e.clone(), v));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn entries_come_with_their_data_and_every_kind_of_long_name() {
        let deep = format!("./lib/modules/6.1/{}/rdma_rxe.ko", "d".repeat(120));
        let gnu = format!("./{}/x.ko", "g".repeat(200));
        let pax = format!("./{}/y.ko", "p".repeat(300));
        let record = format!("path={pax}\n");
        let mut len = record.len() + 4;
        if format!("{len} {record}").len() != len {
            len += 1;
        }
        let mut s = entry("./boot/", b'5', b"");
        s.extend(entry("./boot/vmlinuz-6.1", b'0', &[7u8; 600]));
        s.extend(entry(&deep, b'0', b"ko"));
        s.extend(entry("././@LongLink", b'L', format!("{gnu}\0").as_bytes()));
        s.extend(entry("short", b'0', b"gnu"));
        s.extend(entry(
            "PaxHeaders/y",
            b'x',
            format!("{len} {record}").as_bytes(),
        ));
        s.extend(entry("short2", b'0', b"pax"));
        s.extend([0u8; 2 * BLOCK]);
        s.extend(entry("after-the-end", b'0', b"never read"));
        let got = read_all(&s);
        let names: Vec<&str> = got.iter().map(|(e, _)| e.path.as_str()).collect();
        assert_eq!(names, ["./boot/", "./boot/vmlinuz-6.1", &deep, &gnu, &pax]);
        assert!(!got[0].0.is_file() && got[1].0.is_file());
        assert_eq!(got[1].1, vec![7u8; 600]);
        assert_eq!(got[1].0.relative(), "boot/vmlinuz-6.1");
        assert_eq!(got[2].1, b"ko");
        assert_eq!(got[3].1, b"gnu");
        assert_eq!(got[4].1, b"pax");
    }

    #[test]
    fn unread_data_is_skipped_and_a_cut_stream_is_an_error() {
        let mut s = entry("a", b'0', &[1u8; 1000]);
        s.extend(entry("b", b'0', b"second"));
        let mut seen = Vec::new();
        each(&s[..], |e, d| {
            if e.path == "b" {
                let mut v = Vec::new();
                d.read_to_end(&mut v)?;
                seen.push(v);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [b"second".to_vec()]);
        // No end blocks: the stream's end ends it too.
        assert_eq!(read_all(&s).len(), 2);
        let cut = &s[..BLOCK + 700];
        assert!(each(cut, |_, _| Ok(())).is_err());
        assert_eq!(number(b"00000001750\0").unwrap(), 1000);
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 1, 0]).unwrap(), 256);
        // A size that cannot be padded to a block is an error, not a wrapped length.
        let mut huge = entry("h", b'0', b"");
        // Base-256: 0x80, three zero bytes, then u64::MAX.
        huge[124..128].copy_from_slice(&[0x80, 0, 0, 0]);
        huge[128..136].copy_from_slice(&[0xff; 8]);
        let err = each(&huge[..], |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("padded"), "{err}");
    }
}
