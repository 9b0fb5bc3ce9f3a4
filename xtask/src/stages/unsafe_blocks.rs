//! The `unsafe` stage: counts the `unsafe { }` blocks of mlx5dv's product code and fails when
//! the count rises over [`CEILING`] (issue 26: each safety argument is written once, where its
//! token is made, rather than repeated at every use).
//!
//! A text scan, no build: the module tree is followed from `lib.rs` through its `mod name;`
//! declarations, and every item under a `#[cfg(test)]` or `#[cfg(all(test, ..))]` attribute is
//! left out, with the files of the test modules it declares (`tests.rs`, `*_tests.rs`,
//! `testutil.rs`). Comments, strings and character literals are blanked before the scan, so a
//! comment that mentions `unsafe {` does not count.

use std::path::{Path, PathBuf};

use crate::run::Run;
use crate::util::{self, Result, bail};

/// The most `unsafe { }` blocks mlx5dv's product code may hold. Lower it when the count falls;
/// raising it needs a reason in the commit.
pub const CEILING: usize = 120;

/// The crate whose blocks are counted, relative to the workspace root.
const CRATE_SRC: &str = "mlx5dv/src";

/// Runs the stage: prints the count per file and fails over the ceiling.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    let src = util::root().join(CRATE_SRC);
    let files = count_crate(&src)?;
    let total: usize = files.iter().map(|(_, n)| n).sum();
    for (file, n) in files.iter().filter(|(_, n)| *n > 0) {
        let shown = file.strip_prefix(&src).unwrap_or(file);
        println!("{n:>5}  {}", shown.display());
    }
    println!("{total:>5}  {CRATE_SRC} (ceiling {CEILING})");
    if total > CEILING {
        bail!(
            "{CRATE_SRC} has {total} unsafe blocks in product code, over the ceiling of \
             {CEILING} (xtask/src/stages/unsafe_blocks.rs): argue the new step once, where its \
             token is made, rather than at each use"
        );
    }
    Ok(Some(format!("{total} unsafe blocks (ceiling {CEILING})")))
}

/// The product files of the crate rooted at `src/lib.rs`, each with its count of blocks, in
/// the order the module tree reaches them.
pub fn count_crate(src: &Path) -> Result<Vec<(PathBuf, usize)>> {
    let mut out = Vec::new();
    visit(&src.join("lib.rs"), src, &mut out)?;
    Ok(out)
}

/// Counts `file` (whose child modules live in `dir`) and the product modules it declares.
fn visit(file: &Path, dir: &Path, out: &mut Vec<(PathBuf, usize)>) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| util::anyhow!("cannot read {}: {e}", file.display()))?;
    let scan = scan(&text);
    out.push((file.to_path_buf(), scan.blocks));
    for name in scan.modules {
        let flat = dir.join(format!("{name}.rs"));
        let nested = dir.join(&name).join("mod.rs");
        let (child, child_dir) = if flat.exists() {
            (flat, dir.join(&name))
        } else if nested.exists() {
            (nested, dir.join(&name))
        } else {
            bail!("{}: module `{name}` has no file", file.display());
        };
        visit(&child, &child_dir, out)?;
    }
    Ok(())
}

/// What one file holds outside its test items.
#[derive(Debug, Default, PartialEq)]
struct Scan {
    /// `unsafe { }` blocks.
    blocks: usize,
    /// Modules declared with `mod name;`, in order.
    modules: Vec<String>,
}

/// Scans one file's text.
fn scan(text: &str) -> Scan {
    let code = blank(text);
    let b = code.as_bytes();
    let mut out = Scan::default();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'#' && b.get(i + 1) == Some(&b'[') {
            let end = close(b, i + 1);
            if is_test_cfg(&code[i + 2..end.saturating_sub(1)]) {
                i = skip_item(b, end);
                continue;
            }
            i = end;
            continue;
        }
        if let Some(after) = word_at(b, i, "unsafe") {
            let j = skip_space(b, after);
            if b.get(j) == Some(&b'{') {
                out.blocks += 1;
            }
            i = after;
            continue;
        }
        if let Some(after) = word_at(b, i, "mod") {
            let start = skip_space(b, after);
            let end = ident_end(b, start);
            if end > start && b.get(skip_space(b, end)) == Some(&b';') {
                out.modules.push(code[start..end].to_string());
            }
            i = end.max(after);
            continue;
        }
        i += 1;
    }
    out
}

/// Whether an attribute's text (inside `#[` `]`) is a `cfg` that holds only under test:
/// `cfg(test)` or `cfg(all(.., test, ..))`.
fn is_test_cfg(attr: &str) -> bool {
    let attr: String = attr.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(pred) = attr.strip_prefix("cfg(").and_then(|p| p.strip_suffix(')')) else {
        return false;
    };
    if pred == "test" {
        return true;
    }
    let Some(args) = pred.strip_prefix("all(").and_then(|p| p.strip_suffix(')')) else {
        return false;
    };
    top_level(args).any(|a| a == "test")
}

/// The comma-separated arguments of a predicate list, nested lists kept whole.
fn top_level(args: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (k, c) in args.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&args[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[start..]);
    parts.into_iter()
}

/// Skips the item that starts at `i` (after any further attributes): to the `;` that ends a
/// declaration or the `}` that closes its body, whichever comes first at nesting depth zero.
fn skip_item(b: &[u8], mut i: usize) -> usize {
    loop {
        i = skip_space(b, i);
        if b.get(i) == Some(&b'#') && b.get(i + 1) == Some(&b'[') {
            i = close(b, i + 1);
        } else {
            break;
        }
    }
    while i < b.len() {
        match b[i] {
            b';' => return i + 1,
            b'{' => return close(b, i),
            b'(' | b'[' => i = close(b, i),
            _ => i += 1,
        }
    }
    i
}

/// The index after the bracket that closes the one at `open` (`(`, `[` or `{`).
fn close(b: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The index after `word` if it stands at `i` as a whole identifier.
fn word_at(b: &[u8], i: usize, word: &str) -> Option<usize> {
    let w = word.as_bytes();
    let before_ok = i == 0 || !is_ident(b[i - 1]);
    let end = i + w.len();
    (before_ok && b.get(i..end) == Some(w) && b.get(end).is_none_or(|c| !is_ident(*c)))
        .then_some(end)
}

/// The first index at or after `i` that is not white space.
fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The end of the identifier that starts at `i`.
fn ident_end(b: &[u8], mut i: usize) -> usize {
    while b.get(i).copied().is_some_and(is_ident) {
        i += 1;
    }
    i
}

/// Whether `c` can be part of an identifier.
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `text` with comments and the contents of strings and character literals replaced by
/// spaces (line breaks kept), so brackets and words in them do not count.
fn blank(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            wipe(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if let Some(hashes) = raw_string_start(b, i) {
            // r"..." or r#"..."#: runs to a quote followed by as many hashes.
            let open = i + 1 + hashes + 1;
            let mut j = open;
            while j < b.len() {
                if b[j] == b'"' && b[j + 1..].iter().take_while(|&&c| c == b'#').count() >= hashes {
                    break;
                }
                j += 1;
            }
            wipe(&mut out, open, j);
            i = j + 1 + hashes;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut out, i + 1, j.min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}') rather than a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p)
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 1 + width)
            };
            match end {
                Some(end) => {
                    wipe(&mut out, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    // Only ASCII bytes were replaced, and only whole characters (every byte of a multi-byte
    // character is inside a wiped range or untouched).
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of hashes if a raw string (`r"`, `r#"`, `br"`) starts at `i`.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    if b[i] != b'r' || (i > 0 && is_ident(b[i - 1]) && b[i - 1] != b'b') {
        return None;
    }
    if i > 1 && b[i - 1] == b'b' && is_ident(b[i - 2]) {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_in_product_code_count_and_test_items_do_not() {
        let text = r#"
mod a;
#[cfg(test)]
mod a_tests;
#[cfg(all(test, not(zverbs_loom)))]
mod b_tests;
#[cfg(not(test))]
mod c;
// unsafe { in a comment }
/// unsafe { in a doc comment }
fn f() {
    let s = "unsafe { in a string }";
    let c = '{';
    // SAFETY: counted.
    unsafe { g() };
    unsafe fn not_a_block() {}
}
#[cfg(test)]
impl X {
    fn t() { unsafe { h() } }
}
#[cfg(test)]
const T: [u8; 2] = [0; 2];
fn after() {
    // SAFETY: counted too.
    let _ = unsafe
    {
        k()
    };
}
#[cfg(all(test, feature = "x"))]
mod tests {
    fn t() { unsafe { h() } }
}
"#;
        assert_eq!(
            scan(text),
            Scan {
                blocks: 2,
                modules: vec!["a".into(), "c".into()],
            }
        );
    }

    #[test]
    fn only_cfgs_that_need_test_skip_an_item() {
        assert!(is_test_cfg("cfg(test)"));
        assert!(is_test_cfg("cfg(all(test, not(zverbs_loom)))"));
        assert!(is_test_cfg("cfg(all(not(miri), test))"));
        assert!(!is_test_cfg("cfg(not(test))"));
        assert!(!is_test_cfg("cfg(any(test, zverbs_loom))"));
        assert!(!is_test_cfg("cfg(all(not(test), x))"));
        assert!(!is_test_cfg("derive(Debug)"));
    }

    /// The crate as it stands is at or under the ceiling (the stage's check, as a test).
    #[test]
    fn mlx5dv_is_at_or_under_the_ceiling() {
        let files = count_crate(&util::root().join(CRATE_SRC)).expect("scan");
        assert!(files.iter().all(|(f, _)| {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.ends_with("tests.rs") && name != "testutil.rs"
        }));
        let total: usize = files.iter().map(|(_, n)| n).sum();
        assert!(total > 0 && total <= CEILING, "{total} over {CEILING}");
    }
}
