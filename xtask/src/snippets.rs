//! The docs' Rust snippets, held to what CI compiles. The snippets crate
//! ([`SNIPPETS_CRATE`]) includes Markdown files whole as doctests, so a
//! snippet there is compiled as a reader sees it; this checks what the
//! compiler cannot: that every file with a Rust snippet is included, that
//! no snippet is marked to be skipped, and that a `Cargo.toml` snippet
//! lists what the Rust snippet after it names, with a path for each crate
//! not yet published.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

use crate::root;

/// The crate whose doctests are the docs' Rust snippets.
pub(crate) const SNIPPETS_CRATE: &str = "crates/device-events-snippets/src/lib.rs";

/// Markers that keep rustdoc from compiling a snippet as written.
const NOT_COMPILED: [&str; 3] = ["ignore", "compile_fail", "text"];

/// Path roots a snippet names that are no crate to depend on.
const NOT_CRATES: [&str; 6] = ["std", "core", "alloc", "crate", "self", "super"];

/// Check every Rust and `Cargo.toml` snippet of `files`.
pub(crate) fn check(files: &[PathBuf]) -> Result<()> {
    let included = included_files()?;
    let known = |name: &str| root().join("crates").join(name).is_dir();
    let mut faults = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)?;
        let canonical = file.canonicalize().unwrap_or_else(|_| file.clone());
        let relative = file.strip_prefix(root()).unwrap_or(file).display();
        for fault in faults_in(&text, included.contains(&canonical), &known) {
            faults.push(format!("{relative}: {fault}"));
        }
    }
    ensure!(
        faults.is_empty(),
        "snippets CI would not compile as written, or whose Cargo.toml would not build \
         them:\n{}",
        faults.join("\n")
    );
    Ok(())
}

/// The Markdown files the snippets crate includes, canonical.
fn included_files() -> Result<BTreeSet<PathBuf>> {
    let lib = root().join(SNIPPETS_CRATE);
    let text =
        std::fs::read_to_string(&lib).with_context(|| format!("reading {}", lib.display()))?;
    let dir = lib.parent().unwrap_or(Path::new("."));
    let mut files = BTreeSet::new();
    for part in text.split("include_str!(\"").skip(1) {
        if let Some((path, _)) = part.split_once('"') {
            let path = dir.join(path);
            files.insert(path.canonicalize().unwrap_or(path));
        }
    }
    Ok(files)
}

/// A fenced code block.
struct Block {
    /// Its language, the info string's first word (`rust`, `toml`).
    lang: String,
    /// The info string's other words (`no_run`, `ignore`).
    attrs: Vec<String>,
    body: String,
    /// The line of its opening fence, from 1.
    line: usize,
    /// How many headings come before it: blocks of one section share it.
    section: usize,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    let mut section = 0;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => found.push(block),
                None => {
                    let mut words = info.split([',', ' ']).filter(|w| !w.is_empty());
                    open = Some(Block {
                        lang: words.next().unwrap_or("").to_owned(),
                        attrs: words.map(str::to_owned).collect(),
                        body: String::new(),
                        line: index + 1,
                        section,
                    });
                }
            }
            continue;
        }
        match &mut open {
            Some(block) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            None if trimmed.starts_with('#') => section += 1,
            None => {}
        }
    }
    found
}

/// What is wrong with the snippets of one Markdown file: `compiled` when
/// the snippets crate includes it; `known` says whether a crate of the
/// workspace has that name.
fn faults_in(text: &str, compiled: bool, known: &dyn Fn(&str) -> bool) -> Vec<String> {
    let blocks = blocks(text);
    let mut faults = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        match block.lang.as_str() {
            "rust" => {
                let line = block.line;
                if !compiled {
                    faults.push(format!(
                        "line {line}: a Rust snippet in a file {SNIPPETS_CRATE} does not \
                         include, so CI does not compile it"
                    ));
                }
                for attr in &block.attrs {
                    if NOT_COMPILED.contains(&attr.as_str()) {
                        faults.push(format!(
                            "line {line}: marked `{attr}`, so CI does not compile it \
                             (`no_run` compiles it without running it)"
                        ));
                    }
                }
                // The manifest a reader is told to write for it: the last
                // one above it in its section.
                let manifest = blocks[..index]
                    .iter()
                    .rev()
                    .take_while(|b| b.section == block.section)
                    .find(|b| b.lang == "toml");
                if let Some(manifest) = manifest {
                    let deps = &tables(&manifest.body)["dependencies"];
                    for name in crates_named(&block.body) {
                        if !deps.contains_key(&name) {
                            faults.push(format!(
                                "line {line}: names `{}`, which the Cargo.toml snippet at \
                                 line {} does not list",
                                name.replace('-', "_"),
                                manifest.line
                            ));
                        }
                    }
                }
            }
            "toml" => faults.extend(
                unpublished_without_a_path(&block.body, known)
                    .into_iter()
                    .map(|f| format!("line {}: {f}", block.line)),
            ),
            _ => {}
        }
    }
    faults
}

/// A `Cargo.toml` snippet's tables, each key with its value as written.
fn tables(toml: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut tables: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    tables.entry("dependencies".into()).or_default();
    let mut table = String::new();
    for line in toml.lines() {
        let line = line.split(" #").next().unwrap_or("").trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.trim().to_owned();
        } else if let Some((key, value)) = line.split_once('=') {
            tables
                .entry(table.clone())
                .or_default()
                .insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    tables
}

/// Each of the workspace's crates a `Cargo.toml` snippet depends on that
/// takes it neither by `path` nor through a `[patch.crates-io]` path to
/// its folder: none is published, so cargo could not find it.
fn unpublished_without_a_path(toml: &str, known: &dyn Fn(&str) -> bool) -> Vec<String> {
    let tables = tables(toml);
    let patches = tables.get("patch.crates-io");
    let mut faults = Vec::new();
    for (name, value) in &tables["dependencies"] {
        if !known(name) || value.contains("path") {
            continue;
        }
        let patched = patches
            .and_then(|p| p.get(name))
            .is_some_and(|p| p.contains(&format!("crates/{name}\"")));
        if !patched {
            faults.push(format!(
                "`{name}` is not published: give it a `path`, or a `[patch.crates-io]` \
                 entry with the path of its folder (`.../crates/{name}`)"
            ));
        }
    }
    faults
}

/// The crates a Rust snippet names, as a `Cargo.toml` spells them: the
/// root of each path (`cudarc::driver::...`, `use pollster;`), the standard
/// library's and the snippet's own aside.
fn crates_named(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut at = 0;
    while let Some(found) = code[at..].find("::") {
        let colons = at + found;
        let mut start = colons;
        while start > 0 && ident(bytes[start - 1]) {
            start -= 1;
        }
        let word = &code[start..colons];
        // A root: not itself after `::`, and in lower case (a type's path,
        // `OwnedStream::<Cuda>::new`, starts with a capital).
        let is_root = !code[..start].ends_with("::")
            && word.starts_with(|c: char| c.is_ascii_lowercase())
            && !NOT_CRATES.contains(&word);
        if is_root {
            named.insert(word.replace('_', "-"));
        }
        at = colons + 2;
    }
    // A module the snippet brings in by `use a::b::{self, ...}` or
    // `use a::b;` is its own name, not a crate's.
    for line in code.lines() {
        if let Some(path) = line.trim().strip_prefix("use ") {
            let path = path.trim_end_matches(';');
            if let Some((parent, items)) = path.split_once("::{") {
                if items.contains("self") {
                    named.remove(&parent.rsplit("::").next().unwrap_or("").replace('_', "-"));
                }
            } else if path.contains("::") {
                named.remove(&path.rsplit("::").next().unwrap_or("").replace('_', "-"));
            }
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(name: &str) -> bool {
        name.starts_with("device-events-")
    }

    const MANIFEST: &str = "## Use it\n\n```toml\n[dependencies]\n\
        device-events-core = \"0.1.0\"\npollster = \"0.4\" # or any executor\n\n\
        [patch.crates-io]\ndevice-events-core = { path = \"../device-events/crates/device-events-core\" }\n```\n\n";

    #[test]
    fn a_snippet_that_names_only_what_its_manifest_lists_passes() {
        let text = format!(
            "{MANIFEST}```rust,no_run\nuse device_events_core::EventProfiler;\n\
             let _ = pollster::block_on(async {{}});\nlet _ = std::time::Instant::now();\n```\n"
        );
        assert_eq!(faults_in(&text, true, &known), Vec::<String>::new());
    }

    #[test]
    fn a_crate_the_snippet_names_and_its_manifest_lacks_is_a_fault() {
        let text = format!(
            "{MANIFEST}```rust,no_run\nlet ctx = cudarc::driver::CudaContext::new(0)?;\n```\n"
        );
        let faults = faults_in(&text, true, &known);
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert!(faults[0].contains("`cudarc`"), "{faults:?}");
    }

    #[test]
    fn an_unpublished_crate_without_a_path_is_a_fault() {
        let text = "```toml\n[dependencies]\ndevice-events-cuda = \"0.1.0\"\n```\n";
        let faults = faults_in(text, true, &known);
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert!(faults[0].contains("`device-events-cuda` is not published"));
        let with_path = "```toml\n[dependencies]\n\
            device-events-cuda = { version = \"0.1.0\", path = \"../x/crates/device-events-cuda\" }\n```\n";
        assert_eq!(faults_in(with_path, true, &known), Vec::<String>::new());
    }

    #[test]
    fn a_rust_snippet_in_a_file_not_compiled_is_a_fault() {
        let faults = faults_in("# T\n\n```rust\nfn f() {}\n```\n", false, &known);
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert!(faults[0].starts_with("line 3:"), "{faults:?}");
    }

    #[test]
    fn a_rust_snippet_marked_ignore_is_a_fault_and_no_run_is_not() {
        assert_eq!(faults_in("```rust,ignore\n```\n", true, &known).len(), 1);
        assert!(faults_in("```rust,no_run\n```\n", true, &known).is_empty());
    }

    #[test]
    fn a_manifest_in_another_section_does_not_speak_for_a_snippet() {
        let text = format!("{MANIFEST}## Another\n\n```rust\nlet x = cudarc::x();\n```\n");
        assert!(faults_in(&text, true, &known).is_empty());
    }

    #[test]
    fn a_module_brought_in_by_use_is_not_a_crate() {
        let named = crates_named(
            "use cudarc::driver::result::stream::{self, StreamKind};\n\
             let s = stream::create(StreamKind::NonBlocking);\nlet t = Foo::<u8>::new();\n",
        );
        assert_eq!(named.into_iter().collect::<Vec<_>>(), ["cudarc"]);
    }
}
