//! The workspace's imports, drawn: which file of a crate imports which, so
//! that arrows run one way. A file is above everything it imports; a circle
//! has no such order and fails. In the core, whose folders are its rooms, a
//! file also imports nothing from a folder ranked above its own.
//!
//! The crate root (`lib.rs`, `main.rs`) is the crate's map, not a room: it
//! declares the modules, re-exports and may define the type every file
//! names (a backend's `Cuda`), so no arrow is drawn from or to it.
//!
//! Read with `syn`: every `use` and every `crate::`, `self::` or `super::`
//! path in the code, each followed through re-exports to the file that
//! defines what it names. Tests (`#[cfg(test)]`) and doc comments are left
//! out: they are not the crate's structure.
//!
//! A trait's signatures are left out too. A trait names the types its
//! implementors deal in (`fn state() -> &'static State<Self>`) without
//! using them, while those types' impls need the trait: counted as an
//! arrow, the name would make a circle of every type that lives beside its
//! impl. A default body, a bound on the trait itself and every other use
//! of the name in the file are arrows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use syn::visit::Visit;

use crate::root;

/// The core's folders, lowest first: a file may import from its own folder
/// and from those below it. Files beside `lib.rs` are the floor everything
/// stands on; `lib.rs` itself, the crate's map, may name any.
const CORE_ROOMS: &[&str] = &[
    "",
    "events",
    "fence",
    "anchoring",
    "placement",
    "waiting",
    "profiler",
    "backend",
    "testing",
    "process",
];
const CORE: &str = "device-events-core";

/// Check every crate of the workspace; `verbose` prints each crate's floors.
pub fn layers(verbose: bool) -> Result<()> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    crates.push(root().join("xtask"));
    crates.sort();
    let mut faults = Vec::new();
    for dir in crates {
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let src = dir.join("src");
        let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .filter(|f| f.exists())
            .collect();
        // Each binary under src/bin/ is a crate root of its own.
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            let mut bins: Vec<PathBuf> = bins
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|e| e == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        for crate_root in roots {
            let graph = Graph::read(&src, &crate_root)
                .with_context(|| format!("reading {}", crate_root.display()))?;
            let rooms = (name == CORE && crate_root.ends_with("lib.rs")).then_some(CORE_ROOMS);
            let report = graph.report(rooms);
            let label = format!(
                "{name}/{}",
                crate_root.file_name().unwrap_or_default().to_string_lossy()
            );
            eprintln!(
                "xtask: layers {label}: {} files, {} floors, {} arrows, {} circles{}",
                graph.files.len(),
                report.floors.len(),
                report.arrows,
                report.circles.len(),
                if rooms.is_some() {
                    format!(", {} upward between rooms", report.upward.len())
                } else {
                    String::new()
                }
            );
            if verbose {
                for (n, floor) in report.floors.iter().enumerate() {
                    eprintln!("  floor {n}: {}", floor.join(" "));
                }
            }
            for circle in &report.circles {
                let inside: Vec<String> = circle
                    .iter()
                    .flat_map(|from| {
                        report.arrows_of[from]
                            .iter()
                            .filter(|to| circle.contains(to))
                            .map(move |to| format!("{from} → {to}"))
                    })
                    .collect();
                faults.push(format!("{label}: a circle: {}", inside.join(", ")));
            }
            for (from, to) in &report.upward {
                faults.push(format!(
                    "{label}: {from} imports {to}, a room above its own"
                ));
            }
        }
    }
    if !faults.is_empty() {
        for fault in &faults {
            eprintln!("xtask: {fault}");
        }
        bail!("{} import(s) run the wrong way", faults.len());
    }
    Ok(())
}

/// A crate's files and who imports whom.
struct Graph {
    /// By file, relative to `src/`.
    files: BTreeMap<String, FileInfo>,
    /// Each module path (`a::b`, the root is empty) to its file.
    modules: HashMap<String, String>,
}

#[derive(Default)]
struct FileInfo {
    /// Absolute paths (segments after `crate`) this file names.
    names: BTreeSet<Vec<String>>,
    /// What the file re-exports: module path, item name, target path.
    reexports: Vec<(String, String, Vec<String>)>,
}

struct Report {
    floors: Vec<Vec<String>>,
    arrows: usize,
    arrows_of: BTreeMap<String, BTreeSet<String>>,
    circles: Vec<Vec<String>>,
    upward: Vec<(String, String)>,
}

impl Graph {
    fn read(src: &Path, crate_root: &Path) -> Result<Self> {
        let mut graph = Graph {
            files: BTreeMap::new(),
            modules: HashMap::new(),
        };
        graph.read_file(src, crate_root, String::new())?;
        Ok(graph)
    }

    fn read_file(&mut self, src: &Path, file: &Path, module: String) -> Result<()> {
        let text = std::fs::read_to_string(file)?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
        let rel = file
            .strip_prefix(src)
            .unwrap_or(file)
            .to_string_lossy()
            .into_owned();
        // A file's children live beside it (lib.rs, main.rs, mod.rs) or in
        // the folder named for it.
        let stem = file.file_stem().unwrap_or_default();
        let dir = file.parent().unwrap_or(src);
        let child_dir = if module.is_empty() || stem == "mod" {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        let mut reader = Reader {
            stack: vec![module.clone()],
            info: FileInfo::default(),
            children: Vec::new(),
            inline: Vec::new(),
            public_uses: Vec::new(),
            private_uses: Vec::new(),
            idents: BTreeSet::new(),
            signature_idents: BTreeSet::new(),
            in_signature: false,
            in_trait: false,
            local: Vec::new(),
            aliases: HashMap::new(),
        };
        reader.visit_file(&ast);
        let Reader {
            mut info,
            children,
            inline,
            public_uses,
            private_uses,
            idents,
            signature_idents,
            ..
        } = reader;
        for (path, bound) in public_uses {
            if idents.contains(&bound) {
                info.names.insert(path);
            }
        }
        // A name bound by a private `use` and seen only in a trait's
        // signatures is no arrow; one seen nowhere still is.
        for (path, bound) in private_uses {
            if !signature_idents.contains(&bound) || idents.contains(&bound) {
                info.names.insert(path);
            }
        }
        self.modules.insert(module.clone(), rel.clone());
        for path in inline {
            self.modules.insert(path, rel.clone());
        }
        self.files.insert(rel, info);
        for child in children {
            let path = join(&module, &child);
            let candidates = [
                child_dir.join(format!("{child}.rs")),
                child_dir.join(&child).join("mod.rs"),
            ];
            let Some(found) = candidates.iter().find(|c| c.exists()) else {
                bail!("no file for module {path} under {}", child_dir.display());
            };
            self.read_file(src, found, path)?;
        }
        Ok(())
    }

    /// The file that defines what `path` names, through re-exports; `None`
    /// outside the crate.
    fn target(&self, path: &[String], depth: usize) -> Option<String> {
        if depth > 16 {
            return None;
        }
        let mut module = String::new();
        let mut used = 0;
        for (n, _) in path.iter().enumerate() {
            let prefix = path[..=n].join("::");
            if self.modules.contains_key(&prefix) {
                module = prefix;
                used = n + 1;
            } else {
                break;
            }
        }
        let file = self.modules.get(&module)?;
        if let Some(item) = path.get(used) {
            let info = &self.files[file];
            if let Some((_, _, to)) = info
                .reexports
                .iter()
                .find(|(m, name, _)| *m == module && name == item)
            {
                let mut next = to.clone();
                next.extend(path[used + 1..].iter().cloned());
                return self.target(&next, depth + 1);
            }
        }
        Some(file.clone())
    }

    fn arrows(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let root = &self.modules[""];
        for (file, info) in &self.files {
            if file == root {
                continue;
            }
            let out = arrows.entry(file.clone()).or_default();
            for name in &info.names {
                if let Some(to) = self.target(name, 0)
                    && to != *file
                    && to != *root
                {
                    out.insert(to);
                }
            }
        }
        arrows
    }

    fn report(&self, rooms: Option<&[&str]>) -> Report {
        let arrows = self.arrows();
        let count = arrows.values().map(BTreeSet::len).sum();
        let circles = circles(&arrows);
        // Floors: each file one above the highest it imports; a circle's
        // files are left out (they have no floor).
        let in_circle: BTreeSet<&String> = circles.iter().flatten().collect();
        let mut floor: BTreeMap<&String, usize> = BTreeMap::new();
        let mut changed = true;
        while changed {
            changed = false;
            for (file, out) in &arrows {
                if in_circle.contains(file) || floor.contains_key(file) {
                    continue;
                }
                if out.iter().any(|to| in_circle.contains(to)) {
                    continue;
                }
                if out.iter().all(|to| floor.contains_key(to)) {
                    let level = out.iter().map(|to| floor[to] + 1).max().unwrap_or(0);
                    floor.insert(file, level);
                    changed = true;
                }
            }
        }
        let mut floors: Vec<Vec<String>> = Vec::new();
        for (file, level) in floor {
            if floors.len() <= level {
                floors.resize(level + 1, Vec::new());
            }
            floors[level].push(file.clone());
        }
        let mut upward = Vec::new();
        if let Some(rooms) = rooms {
            let rank = |file: &str| {
                let room = file.split_once('/').map_or("", |(dir, _)| dir);
                let room = room.trim_end_matches(".rs");
                rooms.iter().position(|r| *r == room)
            };
            for (from, out) in &arrows {
                for to in out {
                    match (rank(from), rank(to)) {
                        (Some(a), Some(b)) if b <= a => {}
                        _ => upward.push((from.clone(), to.clone())),
                    }
                }
            }
        }
        Report {
            floors,
            arrows: count,
            arrows_of: arrows,
            circles,
            upward,
        }
    }
}

/// Strongly connected sets of two or more files (Tarjan's algorithm).
fn circles(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, file: &'a str) {
            let n = self.index.len();
            self.index.insert(file, n);
            self.low.insert(file, n);
            self.stack.push(file);
            self.on_stack.insert(file);
            for to in self.arrows.get(file).into_iter().flatten() {
                if !self.index.contains_key(to.as_str()) {
                    self.visit(to);
                    let low = self.low[to.as_str()].min(self.low[file]);
                    self.low.insert(file, low);
                } else if self.on_stack.contains(to.as_str()) {
                    let low = self.index[to.as_str()].min(self.low[file]);
                    self.low.insert(file, low);
                }
            }
            if self.low[file] == self.index[file] {
                let mut set = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    set.push(top.to_owned());
                    if top == file {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        arrows,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for file in arrows.keys() {
        if !walk.index.contains_key(file.as_str()) {
            walk.visit(file);
        }
    }
    walk.found
}

fn join(module: &str, child: &str) -> String {
    if module.is_empty() {
        child.to_owned()
    } else {
        format!("{module}::{child}")
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .meta
                .require_list()
                .is_ok_and(|list| list.tokens.to_string() == "test")
    })
}

/// One file's reading: its `mod` declarations, re-exports and the paths it
/// names, with `self` and `super` made absolute.
struct Reader {
    /// The module being read: the file's, then any inline one inside it.
    stack: Vec<String>,
    info: FileInfo,
    /// Modules declared here whose body is another file.
    children: Vec<String>,
    /// Inline modules, by path.
    inline: Vec<String>,
    /// Public `use`s: a path, and the name it binds. One counts as an
    /// import only where the file itself uses that name; otherwise it is
    /// the module's map, a re-export and no arrow.
    public_uses: Vec<(Vec<String>, String)>,
    /// Private top-level `use`s: a path, and the name it binds.
    private_uses: Vec<(Vec<String>, String)>,
    /// Every identifier outside `use` items and trait signatures.
    idents: BTreeSet<String>,
    /// Identifiers in a trait's signatures.
    signature_idents: BTreeSet<String>,
    /// Whether a trait's signature is being read.
    in_signature: bool,
    /// Whether a trait's items are being read.
    in_trait: bool,
    /// The modules declared in the module being read, which a path in its
    /// code may start with.
    local: Vec<BTreeSet<String>>,
    /// Names a `use` bound to a path of the crate: a path in the code may
    /// start with one (`use crate::backend; backend::raw::X`).
    aliases: HashMap<String, Vec<String>>,
}

impl Reader {
    fn module(&self) -> &str {
        self.stack.last().map_or("", String::as_str)
    }

    /// `segments` made absolute, or `None` outside the crate. A first
    /// segment that is neither `crate`, `self` nor `super` is the crate's
    /// only when `local` (a `use` naming a module declared here).
    fn absolute(&self, segments: &[String], local: &BTreeSet<String>) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        let mut base: Vec<String> = self
            .module()
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let mut rest = rest;
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop();
                while let Some((next, tail)) = rest.split_first() {
                    if next != "super" {
                        break;
                    }
                    base.pop();
                    rest = tail;
                }
            }
            name if local.contains(name) => base.push(name.to_owned()),
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Every path a use tree names, with the name it binds (`None` for a
    /// glob).
    fn flatten(
        tree: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, Option<String>)>,
    ) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                Self::flatten(&path.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let ident = name.ident.to_string();
                let mut full = prefix.clone();
                if ident != "self" {
                    full.push(ident.clone());
                }
                let bound = if ident == "self" {
                    prefix.last().cloned()
                } else {
                    Some(ident)
                };
                out.push((full, bound));
            }
            syn::UseTree::Rename(rename) => {
                let mut full = prefix.clone();
                full.push(rename.ident.to_string());
                out.push((full, Some(rename.rename.to_string())));
            }
            syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    Self::flatten(tree, prefix, out);
                }
            }
        }
    }

    fn local_modules(items: &[syn::Item]) -> BTreeSet<String> {
        items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(m) => Some(m.ident.to_string()),
                _ => None,
            })
            .collect()
    }
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_file(&mut self, file: &'ast syn::File) {
        self.read_items(&file.items);
    }

    // A `use` inside a function body names what a top-level one would.
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.read_use(item, false);
    }

    // `pub(super)` names who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_ident(&mut self, ident: &'ast syn::Ident) {
        if self.in_signature {
            self.signature_idents.insert(ident.to_string());
        } else {
            self.idents.insert(ident.to_string());
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if !self.in_signature {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.name(&segments);
        }
        syn::visit::visit_path(self, path);
    }

    // A trait's signatures name; its default bodies use.
    fn visit_signature(&mut self, sig: &'ast syn::Signature) {
        let outer = std::mem::replace(&mut self.in_signature, self.in_trait);
        syn::visit::visit_signature(self, sig);
        self.in_signature = outer;
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        let outer = std::mem::replace(&mut self.in_trait, true);
        syn::visit::visit_item_trait(self, item);
        self.in_trait = outer;
    }

    fn visit_trait_item_type(&mut self, item: &'ast syn::TraitItemType) {
        let outer = std::mem::replace(&mut self.in_signature, true);
        syn::visit::visit_trait_item_type(self, item);
        self.in_signature = outer;
    }

    // A body inside a trait (a default) is code, whatever encloses it.
    fn visit_block(&mut self, block: &'ast syn::Block) {
        let outer = (
            std::mem::replace(&mut self.in_trait, false),
            std::mem::replace(&mut self.in_signature, false),
        );
        syn::visit::visit_block(self, block);
        (self.in_trait, self.in_signature) = outer;
    }

    // A macro's body is tokens to syn: its `crate::` and `super::` paths
    // are read from them.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let text = mac.tokens.to_string();
        let tokens: Vec<&str> = text.split_whitespace().collect();
        for (n, token) in tokens.iter().enumerate() {
            if !matches!(*token, "crate" | "super") || (n > 0 && tokens[n - 1] == "::") {
                continue;
            }
            let mut segments = vec![(*token).to_owned()];
            let mut at = n + 1;
            while at + 1 < tokens.len() && tokens[at] == "::" {
                let next = tokens[at + 1];
                if !next.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    break;
                }
                segments.push(next.to_owned());
                at += 2;
            }
            self.name(&segments);
        }
        syn::visit::visit_macro(self, mac);
    }
}

impl Reader {
    /// Note a path of the code: the crate's, relative, or through a name a
    /// `use` bound.
    fn name(&mut self, segments: &[String]) {
        let local = self.local.last().cloned().unwrap_or_default();
        let abs = match segments.split_first() {
            Some((first, rest))
                if !matches!(first.as_str(), "crate" | "self" | "super")
                    && !local.contains(first)
                    && self.aliases.contains_key(first) =>
            {
                let mut abs = self.aliases[first].clone();
                abs.extend(rest.iter().cloned());
                Some(abs)
            }
            _ => self.absolute(segments, &local),
        };
        if let Some(abs) = abs
            && !abs.is_empty()
        {
            self.info.names.insert(abs);
        }
    }

    /// A module's items, with the modules it declares in scope.
    fn read_items(&mut self, items: &[syn::Item]) {
        self.local.push(Self::local_modules(items));
        for item in items {
            match item {
                syn::Item::Mod(m) if is_test(&m.attrs) => {}
                // A file of another crate's (`#[path]`), drawn with that
                // crate's layers, not this one's.
                syn::Item::Mod(m) if m.attrs.iter().any(|a| a.path().is_ident("path")) => {}
                syn::Item::Mod(m) => {
                    let path = join(self.module(), &m.ident.to_string());
                    match &m.content {
                        None => self.children.push(m.ident.to_string()),
                        Some((_, inner)) => {
                            self.inline.push(path.clone());
                            self.stack.push(path);
                            self.read_items(inner);
                            self.stack.pop();
                        }
                    }
                }
                syn::Item::Use(u) if is_test(&u.attrs) => {}
                syn::Item::Use(u) => self.read_use(u, true),
                syn::Item::Impl(i) if is_test(&i.attrs) => {}
                syn::Item::Fn(f) if is_test(&f.attrs) => {}
                other => self.visit_item(other),
            }
        }
        self.local.pop();
    }

    /// A `use`: the names it binds, and what it re-exports where it is a
    /// module's (`top`) and public.
    fn read_use(&mut self, item: &syn::ItemUse, top: bool) {
        let mut named = Vec::new();
        Self::flatten(&item.tree, &mut Vec::new(), &mut named);
        let public = top && !matches!(item.vis, syn::Visibility::Inherited);
        let local = self.local.last().cloned().unwrap_or_default();
        for (path, bound) in named {
            let Some(abs) = self.absolute(&path, &local) else {
                continue;
            };
            if abs.is_empty() {
                continue;
            }
            if let Some(bound) = &bound {
                self.aliases.insert(bound.clone(), abs.clone());
            }
            match (public, bound) {
                (true, Some(bound)) => {
                    self.info.reexports.push((
                        self.module().to_owned(),
                        bound.clone(),
                        abs.clone(),
                    ));
                    self.public_uses.push((abs, bound));
                }
                (false, Some(bound)) if top => self.private_uses.push((abs, bound)),
                _ => {
                    self.info.names.insert(abs);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate of `files` (path under `src/`, text), read.
    fn graph(name: &str, files: &[(&str, &str)]) -> Graph {
        let dir = std::env::temp_dir().join(format!("layers-{name}-{}", std::process::id()));
        let src = dir.join("src");
        for (path, text) in files {
            let file = src.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let graph = Graph::read(&src, &src.join("lib.rs")).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        graph
    }

    #[test]
    fn a_module_of_another_crates_file_is_not_read_as_this_crates() {
        let graph = graph(
            "path",
            &[
                (
                    "lib.rs",
                    "#[path = \"../../other/src/spin.rs\"]\npub mod spin;\nmod a;\n",
                ),
                ("a.rs", "pub struct A;\n"),
            ],
        );
        let report = graph.report(None);
        assert!(report.circles.is_empty());
    }

    #[test]
    fn two_files_that_import_each_other_are_a_circle() {
        let graph = graph(
            "circle",
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
                (
                    "b.rs",
                    "pub struct B;\npub fn f() -> super::a::A { todo!() }\n",
                ),
            ],
        );
        let report = graph.report(None);
        assert_eq!(
            report.circles,
            vec![vec!["a.rs".to_owned(), "b.rs".to_owned()]]
        );
    }

    #[test]
    fn a_folders_re_export_is_no_arrow_and_a_room_above_is_refused() {
        let graph = graph(
            "rooms",
            &[
                ("lib.rs", "mod low;\nmod high;\npub use high::H;\n"),
                ("low/mod.rs", "mod item;\nmod other;\npub use item::L;\n"),
                ("low/item.rs", "pub struct L;\n"),
                ("low/other.rs", "pub struct O(crate::high::H);\n"),
                ("high/mod.rs", "pub struct H;\nfn f(_: crate::low::L) {}\n"),
            ],
        );
        let report = graph.report(Some(&["", "low", "high"]));
        assert!(report.circles.is_empty());
        // Through low/mod.rs's re-export to the file that defines L.
        assert!(report.arrows_of["high/mod.rs"].contains("low/item.rs"));
        assert!(report.arrows_of["low/mod.rs"].is_empty());
        assert_eq!(
            report.upward,
            vec![("low/other.rs".to_owned(), "high/mod.rs".to_owned())]
        );
    }

    #[test]
    fn a_type_named_only_in_a_traits_signatures_may_live_beside_its_impl() {
        let files = |default_body: &str| {
            let trait_file = format!(
                "use crate::state::State;\n\
                 pub trait Api: Sized {{\n\
                 type Kept: Into<State<Self>>;\n\
                 fn state() -> &'static State<Self>;\n\
                 fn describe() {{ {default_body} }}\n}}\n"
            );
            graph(
                &format!("signature-{}", default_body.len()),
                &[
                    (
                        "lib.rs",
                        "mod api;
mod state;
",
                    ),
                    ("api.rs", trait_file.as_str()),
                    (
                        "state.rs",
                        "use crate::api::Api;
pub struct State<A>(A);
\
                         impl<A: Api> State<A> { pub fn live() {} }
",
                    ),
                ],
            )
            .report(None)
        };
        let named = files("");
        assert!(named.circles.is_empty(), "{:?}", named.circles);
        assert!(!named.arrows_of["api.rs"].contains("state.rs"));
        // A default body uses what it names: that is an arrow, and here a
        // circle.
        let used = files("State::<Self>::live();");
        assert_eq!(
            used.circles,
            vec![vec!["api.rs".to_owned(), "state.rs".to_owned()]]
        );
    }

    #[test]
    fn a_path_in_a_macro_or_after_a_module_alias_is_an_arrow() {
        let graph = graph(
            "hidden",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
                ("a/mod.rs", "pub mod deep;\n"),
                ("a/deep.rs", "pub struct D;\n"),
                ("b.rs", "use crate::a;\nfn f(_: a::deep::D) {}\n"),
                (
                    "c.rs",
                    "fn f() { println!(\"{}\", std::mem::size_of::<crate::a::deep::D>()); }\n",
                ),
            ],
        );
        let report = graph.report(None);
        assert!(report.arrows_of["b.rs"].contains("a/deep.rs"));
        assert!(report.arrows_of["c.rs"].contains("a/deep.rs"));
    }
}
