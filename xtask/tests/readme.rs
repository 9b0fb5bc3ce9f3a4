//! The README's list of what an application that depends on `zverbs` builds is cargo's own:
//! the block after `<!-- cargo tree -p zverbs -e normal -->` must equal that command's output
//! with the local paths left out. A dependency added to the library shows up here first.

use std::path::Path;
use std::process::Command;

const MARKER: &str = "<!-- cargo tree -p zverbs -e normal -->";

/// `cargo tree -p zverbs -e normal`, without the ` (/local/path)` of path dependencies.
fn cargo_tree(root: &Path) -> String {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["tree", "-p", "zverbs", "-e", "normal", "--color", "never"])
        .current_dir(root)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    without_paths(&String::from_utf8(out.stdout).expect("cargo tree prints UTF-8"))
}

/// `text` without the ` (/local/path)` after path dependencies.
fn without_paths(text: &str) -> String {
    text.lines()
        .map(|l| match l.find(" (/") {
            Some(i) => {
                let rest = &l[i + 2..];
                let end = rest.find(')').map_or(rest.len(), |e| e + 1);
                format!("{}{}", &l[..i], &rest[end..])
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fenced block after the marker.
fn readme_block(readme: &str) -> &str {
    let after = &readme[readme.find(MARKER).expect("the README has the marker") + MARKER.len()..];
    let body = &after[after
        .find("```text\n")
        .expect("a text block after the marker")
        + 8..];
    body[..body.find("```").expect("the block ends")].trim_end()
}

#[test]
fn the_readme_lists_the_library_s_dependencies_as_cargo_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert_eq!(
        readme_block(&readme),
        cargo_tree(root).trim_end(),
        "README.md's dependency tree differs from `cargo tree -p zverbs -e normal`: update it"
    );
}

#[test]
fn local_paths_are_left_out_and_the_rest_kept() {
    assert_eq!(
        without_paths(
            "zverbs v0.1.0 (/w/std-shim)\n│   └── zverbs-core v0.1.0 (/w/core) (*)\n└── libc v0.2"
        ),
        "zverbs v0.1.0\n│   └── zverbs-core v0.1.0 (*)\n└── libc v0.2"
    );
    assert_eq!(
        readme_block("x\n<!-- cargo tree -p zverbs -e normal -->\n```text\na\nb\n```\n"),
        "a\nb"
    );
}
