//! Decoding the x86-64 instructions that store to a UAR: what the watcher needs to perform a
//! store the program tried (its width, where its value comes from, and its length, to resume
//! after it).
//!
//! The stores to UAR pages are few kinds of instruction: libmlx5's doorbells and BlueFlame
//! copies are 64-bit `mov`s (`mmio_write64_be`, an atomic relaxed store), and so are the
//! direct path's volatile writes; a compiler may also store an immediate, or a value it holds
//! in an XMM register. Those are decoded: `mov` from a general register (`88`, `89`) or of an
//! immediate (`C6`, `C7`), `movnti` (`0F C3`), and the SSE stores `movq`/`movd` (`66 0F D6`,
//! `66 0F 7E`), `movlps`/`movlpd` (`0F 13`), `movhps`/`movhpd` (`0F 17`), `movss`/`movsd`/
//! `movups`/`movupd` (`0F 11`), `movaps`/`movapd` (`0F 29`), `movdqa`/`movdqu` (`0F 7F`),
//! `movntdq` (`66 0F E7`) and `movntps`/`movntpd` (`0F 2B`). Anything else is refused, and the
//! watcher stops the program with the instruction's bytes rather than guess.

/// Where a store's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// General register `n` (0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi, 7 rdi,
    /// 8..15 r8..r15), its low bytes; `high_byte`: the legacy `ah`/`ch`/`dh`/`bh` (bits 8..15
    /// of register `n`).
    Gpr {
        /// Register number.
        n: u8,
        /// The second byte of the register (`ah`, `ch`, `dh`, `bh`).
        high_byte: bool,
    },
    /// XMM register `n`, from its byte `from` on.
    Xmm {
        /// Register number.
        n: u8,
        /// First byte of the register that is stored (8 for `movhps`).
        from: u8,
    },
    /// An immediate, sign-extended to the store's width.
    Imm(i64),
}

/// A decoded store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// Bytes stored.
    pub width: u8,
    /// Where they come from.
    pub source: Source,
    /// The instruction's length in bytes.
    pub len: u8,
}

/// Decodes the store instruction whose bytes `byte(0)`, `byte(1)`, ... returns (read one by
/// one, only as far as the instruction goes). `None` for an instruction that is not one of
/// the stores above, or that stores to a register rather than to memory.
pub fn decode(mut byte: impl FnMut(usize) -> u8) -> Option<Store> {
    let mut i = 0usize;
    let (mut opsize16, mut rep, mut repne) = (false, false, false);
    // Legacy prefixes.
    loop {
        match byte(i) {
            0x66 => opsize16 = true,
            0xf3 => rep = true,
            0xf2 => repne = true,
            0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 => {}
            _ => break,
        }
        i += 1;
        if i > 4 {
            return None;
        }
    }
    let mut rex = 0u8;
    if byte(i) & 0xf0 == 0x40 {
        rex = byte(i);
        i += 1;
    }
    let rex_w = rex & 8 != 0;
    let rex_r = (rex >> 2) & 1;
    let op = byte(i);
    i += 1;
    // (width, source kind, immediate bytes, xmm byte offset)
    enum Kind {
        Gpr,
        Xmm(u8),
        Imm(u8),
    }
    let (width, kind): (u8, Kind) = if op == 0x0f {
        let op2 = byte(i);
        i += 1;
        match (op2, opsize16, rep, repne) {
            (0xc3, false, false, false) => (if rex_w { 8 } else { 4 }, Kind::Gpr),
            (0xd6, true, false, false) => (8, Kind::Xmm(0)),
            (0x7e, true, false, false) => (if rex_w { 8 } else { 4 }, Kind::Xmm(0)),
            (0x13, _, false, false) => (8, Kind::Xmm(0)),
            (0x17, _, false, false) => (8, Kind::Xmm(8)),
            (0x11, _, true, false) => (4, Kind::Xmm(0)),
            (0x11, _, false, true) => (8, Kind::Xmm(0)),
            (0x11, _, false, false) | (0x29, _, false, false) | (0x2b, _, false, false) => {
                (16, Kind::Xmm(0))
            }
            (0x7f, true, false, false) | (0x7f, false, true, false) => (16, Kind::Xmm(0)),
            (0xe7, true, false, false) => (16, Kind::Xmm(0)),
            _ => return None,
        }
    } else {
        let wide = if rex_w {
            8
        } else if opsize16 {
            2
        } else {
            4
        };
        match op {
            0x88 => (1, Kind::Gpr),
            0x89 => (wide, Kind::Gpr),
            0xc6 => (1, Kind::Imm(1)),
            0xc7 => (wide, Kind::Imm(if opsize16 && !rex_w { 2 } else { 4 })),
            _ => return None,
        }
    };
    // ModRM, then SIB and displacement.
    let modrm = byte(i);
    i += 1;
    let md = modrm >> 6;
    let reg = ((modrm >> 3) & 7) | (rex_r << 3);
    let rm = modrm & 7;
    if md == 3 {
        return None;
    }
    if matches!(kind, Kind::Imm(_)) && (modrm >> 3) & 7 != 0 {
        return None;
    }
    let mut base = rm;
    if rm == 4 {
        base = byte(i) & 7;
        i += 1;
    }
    i += match md {
        1 => 1,
        2 => 4,
        _ if rm == 5 || base == 5 => 4,
        _ => 0,
    };
    let source = match kind {
        Kind::Gpr => Source::Gpr {
            n: reg,
            high_byte: width == 1 && rex == 0 && (4..8).contains(&reg),
        },
        Kind::Xmm(from) => Source::Xmm { n: reg, from },
        Kind::Imm(n) => {
            let mut v = 0u64;
            for k in 0..n as usize {
                v |= u64::from(byte(i + k)) << (8 * k);
            }
            i += n as usize;
            let bits = 8 * u32::from(n);
            Source::Imm(((v << (64 - bits)) as i64) >> (64 - bits))
        }
    };
    let source = match source {
        Source::Gpr { n, high_byte: true } => Source::Gpr {
            n: n - 4,
            high_byte: true,
        },
        s => s,
    };
    (i <= 15).then_some(Store {
        width,
        source,
        len: i as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(bytes: &[u8]) -> Option<Store> {
        decode(|i| bytes.get(i).copied().unwrap_or(0xcc))
    }

    fn gpr(n: u8) -> Source {
        Source::Gpr {
            n,
            high_byte: false,
        }
    }

    #[test]
    fn general_register_moves() {
        // mov [rcx+rdx*8], rsi  (48 89 34 d1)
        assert_eq!(
            d(&[0x48, 0x89, 0x34, 0xd1]),
            Some(Store {
                width: 8,
                source: gpr(6),
                len: 4
            })
        );
        // mov [r15+rbx*1+0x8], r10d  (45 89 54 1f 08)
        assert_eq!(
            d(&[0x45, 0x89, 0x54, 0x1f, 0x08]),
            Some(Store {
                width: 4,
                source: gpr(10),
                len: 5
            })
        );
        // mov [rax+0x12345678], rdi  (48 89 b8 78 56 34 12)
        assert_eq!(
            d(&[0x48, 0x89, 0xb8, 0x78, 0x56, 0x34, 0x12]).unwrap().len,
            7
        );
        // mov [rip+disp32], rax  (48 89 05 00 00 00 00)
        assert_eq!(d(&[0x48, 0x89, 0x05, 0, 0, 0, 0]).unwrap().len, 7);
        // mov [rbp+0], eax with SIB base rbp and mod 0: disp32 (89 04 25 00 00 00 00)
        assert_eq!(d(&[0x89, 0x04, 0x25, 0, 0, 0, 0]).unwrap().len, 7);
        // mov [rbx], ah  (88 23): the high byte of rax
        assert_eq!(
            d(&[0x88, 0x23]),
            Some(Store {
                width: 1,
                source: Source::Gpr {
                    n: 0,
                    high_byte: true
                },
                len: 2
            })
        );
        // mov [rbx], spl with REX: the low byte of rsp (40 88 23)
        assert_eq!(d(&[0x40, 0x88, 0x23]).unwrap().source, gpr(4));
        // mov word [rdi], cx  (66 89 0f)
        assert_eq!(d(&[0x66, 0x89, 0x0f]).unwrap().width, 2);
        // movnti [rdi], rax  (48 0f c3 07)
        assert_eq!(
            d(&[0x48, 0x0f, 0xc3, 0x07]),
            Some(Store {
                width: 8,
                source: gpr(0),
                len: 4
            })
        );
    }

    #[test]
    fn immediates() {
        // mov qword [rdi+0x10], -2  (48 c7 47 10 fe ff ff ff)
        assert_eq!(
            d(&[0x48, 0xc7, 0x47, 0x10, 0xfe, 0xff, 0xff, 0xff]),
            Some(Store {
                width: 8,
                source: Source::Imm(-2),
                len: 8
            })
        );
        // mov byte [rax], 0x80  (c6 00 80)
        assert_eq!(
            d(&[0xc6, 0x00, 0x80]),
            Some(Store {
                width: 1,
                source: Source::Imm(-128),
                len: 3
            })
        );
        // mov word [rax], 0x1234  (66 c7 00 34 12)
        assert_eq!(
            d(&[0x66, 0xc7, 0x00, 0x34, 0x12]),
            Some(Store {
                width: 2,
                source: Source::Imm(0x1234),
                len: 5
            })
        );
    }

    #[test]
    fn sse_stores() {
        // movq [rdi], xmm0  (66 0f d6 07)
        assert_eq!(
            d(&[0x66, 0x0f, 0xd6, 0x07]),
            Some(Store {
                width: 8,
                source: Source::Xmm { n: 0, from: 0 },
                len: 4
            })
        );
        // movq [rdi], xmm9 via 66 REX.WR 0f 7e  (66 4c 0f 7e 0f)
        assert_eq!(
            d(&[0x66, 0x4c, 0x0f, 0x7e, 0x0f]).unwrap().source,
            Source::Xmm { n: 9, from: 0 }
        );
        // movhps [rax], xmm1  (0f 17 08): the high 8 bytes
        assert_eq!(
            d(&[0x0f, 0x17, 0x08]).unwrap().source,
            Source::Xmm { n: 1, from: 8 }
        );
        // movups [rax], xmm2 (0f 11 10); movsd [rax], xmm2 (f2 0f 11 10); movdqu (f3 0f 7f 10)
        assert_eq!(d(&[0x0f, 0x11, 0x10]).unwrap().width, 16);
        assert_eq!(d(&[0xf2, 0x0f, 0x11, 0x10]).unwrap().width, 8);
        assert_eq!(d(&[0xf3, 0x0f, 0x11, 0x10]).unwrap().width, 4);
        assert_eq!(d(&[0xf3, 0x0f, 0x7f, 0x10]).unwrap().width, 16);
        assert_eq!(d(&[0x66, 0x0f, 0xe7, 0x10]).unwrap().width, 16);
    }

    #[test]
    fn other_instructions_are_refused() {
        // add [rax], rcx; a load mov rcx, [rax]; mov between registers; rep movsb.
        for bytes in [
            &[0x48, 0x01, 0x08][..],
            &[0x48, 0x8b, 0x08],
            &[0x48, 0x89, 0xc8],
            &[0xf3, 0xa4],
            &[0xc7, 0x48, 0x08, 0, 0, 0, 0],
        ] {
            assert_eq!(d(bytes), None, "{bytes:x?}");
        }
    }
}
