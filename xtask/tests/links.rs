//! Every relative link in the README and the docs names a file that exists and, when it has a
//! `#fragment`, a heading of that file: a status line whose link rots is a line that lies.

use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked: the README, each crate's README, `docs/`.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "."] {
        let entries = std::fs::read_dir(root.join(dir)).expect("read the directory");
        for e in entries.flatten() {
            let p = e.path();
            if dir == "docs" && p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            } else if dir == "." && p.join("README.md").is_file() {
                pages.push(p.join("README.md"));
            }
        }
    }
    pages.sort();
    pages
}

/// The anchor GitHub gives a heading: lower case, spaces to `-`, and every character but
/// letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of a Markdown text outside its fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors of a Markdown text's headings (outside fenced code blocks), with GitHub's
/// `-1`, `-2` suffixes for repeated ones.
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0u32);
        out.push(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The relative link targets of a Markdown text: `](target)` outside fenced code blocks,
/// leaving out web addresses and mail.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            if !target.contains("://") && !target.starts_with("mailto:") && !target.is_empty() {
                out.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

/// What is wrong with a link of `page` to `target`, if anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    let (file, fragment) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let dest = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(file)
    };
    if !dest.exists() {
        return Some(format!("{target}: no file {}", dest.display()));
    }
    let fragment = fragment?;
    if dest.extension().is_none_or(|x| x != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&dest).unwrap();
    if anchors(&text).iter().any(|a| a == fragment) {
        None
    } else {
        Some(format!(
            "{target}: no heading #{fragment} in {}",
            dest.display()
        ))
    }
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            checked += 1;
            if let Some(why) = broken(&page, &target) {
                bad.push(format!(
                    "{}: {why}",
                    page.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the scan is broken"
    );
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_readme_s_status_links_every_capability_to_a_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let status = &readme[readme.find("### Status").expect("a status section")..];
    let status = &status[..status[4..].find("\n## ").map_or(status.len(), |i| i + 4)];
    let items: Vec<&str> = status
        .split("\n- ")
        .skip(1)
        .map(|i| i.split("\n\n").next().unwrap())
        .collect();
    assert!(items.len() >= 20, "{} status lines", items.len());
    for item in items {
        assert!(
            item.contains("](docs/") || item.contains("](std-shim/"),
            "a status line without a link to the page that explains it: {item}"
        );
    }
}

#[test]
fn anchors_are_github_s() {
    assert_eq!(
        slug(" 2. One RDMA WRITE, from the caller to the device"),
        "2-one-rdma-write-from-the-caller-to-the-device"
    );
    assert_eq!(slug(" `MrBuf` copies"), "mrbuf-copies");
    assert_eq!(
        anchors("# A\n## A\n```\n# B\n```\n### A"),
        ["a", "a-1", "a-2"]
    );
    assert_eq!(
        links("see [x](a.md#b) and [y](https://e.org), [z](#c)\n```\n[no](n.md)\n```"),
        ["a.md#b", "#c"]
    );
}
