//! The crate's files import one another down the layers only, and never in a circle.
//!
//! A small reader of the source, not the compiler: it reads every file of `src/` that the
//! library (`src/lib.rs`) or the binary (`src/main.rs`) declares, leaves out comments (doc links
//! are not imports), string literals and every item under `#[cfg(test)]` (test modules and test
//! files are never reached), and takes each path that names the crate: `use crate::…`,
//! `super::…`, `self::…`, `crate::…` in code, a name a `use` bound (`telemetry::names::X` after
//! `use crate::telemetry`), and in the binary `hookloop::…`. A path goes to the file of the
//! deepest module it names; an item a module re-exports (`pub use`, or any `use` a child reaches
//! through `super::`) goes on to the file that defines it, so `crate::LlmClient` is an import
//! of `src/ports/model.rs`, not of `src/lib.rs`. Features do not matter: every file counts.
//!
//! Two rules, each a test:
//! - no circle between files. A module's root file (`mod.rs`, or `x.rs` beside its folder `x/`)
//!   declares its children, so its own arrows to them are not counted; every other arrow is.
//!   The circles in [`KNOWN_CIRCLES`] are the exceptions, and each must still exist: the entry
//!   goes when its circle is untied.
//! - no arrow up the [`LAYERS`]: a file imports its own layer and the layers below. `src/lib.rs`
//!   is the crate's face (it declares and re-exports everything) and is in no layer; the binary
//!   (`src/main.rs`, `src/cli/`) is above them all.
//!
//! What it cannot see: a method one file adds to a type of another (`impl Slot { … }` written in
//! a second file) is called without a path, so only the file that adds it imports the type's.
//!
//! The README's "Layout" section says the same; change both together.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The library's layers, bottom first, by top-level module.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "the core",
        &[
            "text",
            "private",
            "millis",
            "hooks",
            "machine",
            "supervisor",
        ],
    ),
    ("the seams and the shared plumbing", &["ports", "net"]),
    ("settings and traces", &["config", "telemetry"]),
    ("the driver", &["driver"]),
    (
        "records and views of a session",
        &["transcript", "progress"],
    ),
    // The bridge's host formats are read by the MCP host's command hooks, so the bridge sits
    // beside `mcp` (it imports the core and `mcp` only).
    (
        "implementations of the seams",
        &["llm", "mcp", "bridge", "testing"],
    ),
    ("front ends", &["acp"]),
];

/// Circles known and not untied yet, each with the move that unties it. A circle must be exactly
/// one of these, and each of these must still be a circle: the entry goes when it is untied.
const KNOWN_CIRCLES: &[(&[&str], &str)] = &[];

#[test]
fn no_file_imports_one_above_its_layer() {
    let graph = the_crate();
    let problems = graph.arrows_up();
    assert!(
        problems.is_empty(),
        "imports up the layers:\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_files_import_one_another_in_a_circle_but_the_known_ones() {
    let graph = the_crate();
    let problems = check_circles(&graph.circles(), KNOWN_CIRCLES);
    let arrows: Vec<String> = graph
        .circles()
        .iter()
        .flat_map(|circle| graph.arrows_within(circle))
        .collect();
    assert!(
        problems.is_empty(),
        "{}\nthe arrows of each circle:\n{}",
        problems.join("\n"),
        arrows.join("\n")
    );
}

#[test]
fn every_module_of_the_library_has_a_layer() {
    let graph = the_crate();
    let placed: BTreeSet<&str> = LAYERS.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    let unplaced: BTreeSet<&str> = graph
        .files
        .iter()
        .filter(|f| f.krate == Krate::Lib)
        .filter_map(|f| f.module.first().map(String::as_str))
        .filter(|m| !placed.contains(m))
        .collect();
    assert!(unplaced.is_empty(), "modules in no layer: {unplaced:?}");
    assert!(
        graph.files.len() > 100,
        "only {} files read",
        graph.files.len()
    );
}

// The reader itself, on small crates written for the purpose.

#[test]
fn the_reader_finds_an_arrow_up_through_a_re_export_and_not_in_a_doc_comment() {
    let dir = scratch("up");
    write(
        &dir,
        "lib.rs",
        "pub mod machine;\npub mod driver;\npub use crate::driver::Session;\n",
    );
    write(&dir, "driver.rs", "pub struct Session;\n");
    write(
        &dir,
        "machine/mod.rs",
        "//! See [`crate::driver::Session`].\nmod effect;\npub use self::effect::Effect;\n",
    );
    write(
        &dir,
        "machine/effect.rs",
        "pub struct Effect(crate::Session);\n",
    );
    let problems = Graph::read(&dir).arrows_up();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("src/machine/effect.rs:1 imports src/driver.rs"),
        "{problems:?}"
    );
}

#[test]
fn the_reader_finds_a_circle_and_leaves_out_tests_and_a_root_declaring_its_children() {
    let dir = scratch("circle");
    write(&dir, "lib.rs", "pub mod machine;\n");
    write(
        &dir,
        "machine/mod.rs",
        "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\npub use self::a::A;\npub struct Core;\n",
    );
    write(
        &dir,
        "machine/a.rs",
        "use super::Core;\npub struct A;\nfn f() { let _ = super::b::B; }\n",
    );
    write(
        &dir,
        "machine/b.rs",
        concat!(
            "pub struct B;\nfn g() { let _ = crate::machine::A; }\n",
            "#[cfg(test)]\nmod tests { use super::super::Core; }\n",
        ),
    );
    write(&dir, "machine/tests.rs", "use crate::machine::b::B;\n");
    let graph = Graph::read(&dir);
    assert_eq!(
        graph.circles(),
        vec![vec![
            "src/machine/a.rs".to_owned(),
            "src/machine/b.rs".to_owned()
        ]]
    );
    let files: &[&str] = &["src/machine/b.rs", "src/machine/a.rs"];
    let known = [(files, "a test's exception")];
    assert!(check_circles(&graph.circles(), &known).is_empty());
    let stale = check_circles(&[], &known);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(
        stale[0].starts_with("a known circle is no longer one"),
        "{stale:?}"
    );
    let larger = ["a", "b", "c"]
        .map(|f| format!("src/machine/{f}.rs"))
        .to_vec();
    assert_eq!(check_circles(&[larger], &known).len(), 2);
}

#[test]
fn the_reader_follows_names_a_use_bound_and_the_binary_s_hookloop_paths() {
    let dir = scratch("bound");
    write(&dir, "lib.rs", "pub mod ports;\npub mod telemetry;\n");
    write(&dir, "ports.rs", "pub trait Observer {}\n");
    write(&dir, "telemetry/mod.rs", "pub mod names;\n");
    write(
        &dir,
        "telemetry/names.rs",
        "pub const TARGET: &str = \"t\";\n",
    );
    write(
        &dir,
        "main.rs",
        "mod cli;\nuse hookloop::telemetry;\nfn main() { let _ = telemetry::names::TARGET; }\n",
    );
    write(&dir, "cli/mod.rs", "use hookloop::ports::Observer as _;\n");
    let graph = Graph::read(&dir);
    let mut arrows: Vec<String> = graph
        .edges
        .iter()
        .map(|e| {
            format!(
                "{} -> {}",
                graph.files[e.from].shown, graph.files[e.to].shown
            )
        })
        .collect();
    arrows.sort();
    arrows.dedup();
    assert_eq!(
        arrows,
        [
            "src/cli/mod.rs -> src/ports.rs",
            "src/main.rs -> src/telemetry/mod.rs",
            "src/main.rs -> src/telemetry/names.rs",
        ]
    );
}

/// The crate's own graph, read once for the tests that check it.
fn the_crate() -> &'static Graph {
    static GRAPH: std::sync::OnceLock<Graph> = std::sync::OnceLock::new();
    GRAPH.get_or_init(|| Graph::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")))
}

/// A crate's `src/` under a fresh folder of the temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(self.0.parent().unwrap());
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("hookloop-layers-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    Scratch(dir.join("src"))
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// What is wrong with `circles` given the `known` exceptions: a circle that is none of them, an
/// exception that is no circle (any more, or not in this shape).
fn check_circles(circles: &[Vec<String>], known: &[(&[&str], &str)]) -> Vec<String> {
    let same = |circle: &Vec<String>, files: &[&str]| {
        let mut files: Vec<&str> = files.to_vec();
        files.sort();
        circle.iter().map(String::as_str).eq(files)
    };
    let mut problems = Vec::new();
    for circle in circles {
        if !known.iter().any(|(files, _)| same(circle, files)) {
            problems.push(format!(
                "files that import one another: {}",
                circle.join(" <-> ")
            ));
        }
    }
    for (files, why) in known {
        if !circles.iter().any(|c| same(c, files)) {
            problems.push(format!(
                "a known circle is no longer one, or no longer this one: {} ({why}); \
                 update or delete its entry of KNOWN_CIRCLES",
                files.join(" <-> ")
            ));
        }
    }
    problems
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Krate {
    Lib,
    Bin,
}

struct File {
    krate: Krate,
    /// The module path (`["mcp", "host"]`); empty for a crate root.
    module: Vec<String>,
    /// `src/...`, as messages show it.
    shown: String,
    /// Whether the file declares modules of its own (a `mod.rs`, or an `x.rs` with `x/`).
    parent: bool,
    /// Each name a `use` binds in the file, to the path it stands for and the scope it was
    /// written in; `None` for a glob.
    bindings: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// The paths that name the crate: (line, scope, segments).
    paths: Vec<(usize, Vec<String>, Vec<String>)>,
}

struct Edge {
    from: usize,
    to: usize,
    line: usize,
    path: String,
}

struct Graph {
    files: Vec<File>,
    by_module: BTreeMap<(Krate, Vec<String>), usize>,
    edges: Vec<Edge>,
}

impl Graph {
    /// Reads the crate under `src` (its `lib.rs`, and its `main.rs` when there is one).
    fn read(src: &Path) -> Self {
        let mut graph = Graph {
            files: Vec::new(),
            by_module: BTreeMap::new(),
            edges: Vec::new(),
        };
        for (krate, root) in [(Krate::Lib, "lib.rs"), (Krate::Bin, "main.rs")] {
            let root = src.join(root);
            if root.exists() {
                graph.load(src, krate, &root, Vec::new());
            }
        }
        for from in 0..graph.files.len() {
            for (line, scope, segments) in graph.files[from].paths.clone() {
                let Some(to) = graph.resolve(from, &scope, &segments) else {
                    continue;
                };
                // The library's root only declares and re-exports: what lands there is a
                // macro of the crate's, or a name it re-exports from outside.
                let face = graph.files[to].krate == Krate::Lib && graph.files[to].module.is_empty();
                if to != from && !face {
                    let path = segments.join("::");
                    graph.edges.push(Edge {
                        from,
                        to,
                        line,
                        path,
                    });
                }
            }
        }
        graph
    }

    fn load(&mut self, src: &Path, krate: Krate, path: &Path, module: Vec<String>) {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tokens = without_tests(&tokens(&text));
        let read = read_file(&tokens, &module);
        let name = path.file_name().unwrap().to_str().unwrap();
        let is_root = matches!(name, "lib.rs" | "main.rs" | "mod.rs");
        let folder = if is_root {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        let shown = format!("src/{}", path.strip_prefix(src).unwrap().display());
        let id = self.files.len();
        self.files.push(File {
            krate,
            module: module.clone(),
            shown,
            parent: !read.children.is_empty(),
            bindings: read.bindings,
            paths: read.paths,
        });
        self.by_module.insert((krate, module.clone()), id);
        for child in read.children {
            let candidates = [
                folder.join(format!("{child}.rs")),
                folder.join(&child).join("mod.rs"),
            ];
            let file = candidates.iter().find(|c| c.exists());
            let file =
                file.unwrap_or_else(|| panic!("no file for `mod {child};` of {}", path.display()));
            let mut inner = module.clone();
            inner.push(child);
            self.load(src, krate, file, inner);
        }
    }

    /// The file `segments` (written in `from`, inside `scope`) lands in, if it names the crate.
    fn resolve(&self, from: usize, scope: &[String], segments: &[String]) -> Option<usize> {
        let (krate, absolute) = self.absolute(from, scope, segments, 0)?;
        self.locate(krate, absolute, 0)
    }

    fn absolute(
        &self,
        from: usize,
        scope: &[String],
        segments: &[String],
        depth: usize,
    ) -> Option<(Krate, Vec<String>)> {
        let file = &self.files[from];
        let (first, rest) = segments.split_first()?;
        let join = |base: &[String], rest: &[String]| [base, rest].concat();
        match first.as_str() {
            "crate" => Some((file.krate, rest.to_vec())),
            "self" => Some((file.krate, join(scope, rest))),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let base = &scope[..scope.len().checked_sub(ups)?];
                Some((file.krate, join(base, &segments[ups..])))
            }
            "hookloop" if file.krate == Krate::Bin => Some((Krate::Lib, rest.to_vec())),
            name if depth < 8 => {
                let (bound, written) = file.bindings.get(name)?;
                let (krate, base) = self.absolute(from, written, bound, depth + 1)?;
                Some((krate, join(&base, rest)))
            }
            _ => None,
        }
    }

    /// The file of the deepest module `path` names; an item that module only re-exports is
    /// followed to its own file.
    fn locate(&self, krate: Krate, path: Vec<String>, depth: usize) -> Option<usize> {
        let deepest = (0..=path.len())
            .rev()
            .find(|&k| self.by_module.contains_key(&(krate, path[..k].to_vec())))?;
        let id = self.by_module[&(krate, path[..deepest].to_vec())];
        if let Some(item) = path.get(deepest)
            && depth < 8
            && let Some((bound, written)) = self.files[id].bindings.get(item)
            && let Some((krate, target)) = self.absolute(id, written, bound, 0)
        {
            let target = [target, path[deepest + 1..].to_vec()].concat();
            return self.locate(krate, target, depth + 1).or(Some(id));
        }
        Some(id)
    }

    /// Which layer a file is in: its index in [`LAYERS`], or one past them for the binary.
    fn layer(&self, file: usize) -> Option<usize> {
        let file = &self.files[file];
        if file.krate == Krate::Bin {
            return Some(LAYERS.len());
        }
        let top = file.module.first()?;
        LAYERS
            .iter()
            .position(|(_, modules)| modules.contains(&top.as_str()))
    }

    fn layer_name(&self, file: usize) -> &'static str {
        self.layer(file)
            .and_then(|l| LAYERS.get(l))
            .map_or("the binary", |(name, _)| name)
    }

    fn arrows_up(&self) -> Vec<String> {
        let mut problems = BTreeSet::new();
        for edge in &self.edges {
            let (Some(from), Some(to)) = (self.layer(edge.from), self.layer(edge.to)) else {
                continue;
            };
            if to > from {
                problems.insert(format!(
                    "{}:{} imports {} (`{}`): {} is below {}",
                    self.files[edge.from].shown,
                    edge.line,
                    self.files[edge.to].shown,
                    edge.path,
                    self.layer_name(edge.from),
                    self.layer_name(edge.to),
                ));
            }
        }
        problems.into_iter().collect()
    }

    /// The arrows between files of `circle`, where each is written.
    fn arrows_within(&self, circle: &[String]) -> Vec<String> {
        let inside = |f: usize| circle.contains(&self.files[f].shown);
        let mut arrows: Vec<String> = self
            .edges
            .iter()
            .filter(|e| inside(e.from) && inside(e.to))
            .map(|e| {
                let (from, to) = (&self.files[e.from], &self.files[e.to]);
                format!("  {}:{} `{}` -> {}", from.shown, e.line, e.path, to.shown)
            })
            .collect();
        arrows.dedup();
        arrows
    }

    /// The groups of two or more files that import one another, each sorted, in order.
    fn circles(&self) -> Vec<Vec<String>> {
        let n = self.files.len();
        let mut next = vec![BTreeSet::new(); n];
        for edge in &self.edges {
            let (from, to) = (&self.files[edge.from], &self.files[edge.to]);
            let declares = from.parent
                && from.krate == to.krate
                && to.module.len() > from.module.len()
                && to.module.starts_with(&from.module);
            if !declares {
                next[edge.from].insert(edge.to);
            }
        }
        let mut circles: Vec<Vec<String>> = strongly_connected(&next)
            .into_iter()
            .filter(|group| group.len() > 1)
            .map(|group| {
                let mut names: Vec<String> =
                    group.iter().map(|&f| self.files[f].shown.clone()).collect();
                names.sort();
                names
            })
            .collect();
        circles.sort();
        circles
    }
}

/// Tarjan's strongly connected components.
fn strongly_connected(next: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        counter: usize,
        groups: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.next[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            s.groups.push(group);
        }
    }
    let n = next.len();
    let mut s = State {
        next,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        counter: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.groups
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// The tokens of `text` with their lines: comments and literals left out.
fn tokens(text: &str) -> Vec<(usize, Tok)> {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if i >= chars.len() {
                    break;
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && at(i + 1) == 'r')) && {
            let j = i + 1 + usize::from(c == 'b');
            let hashes = chars[j..].iter().take_while(|&&h| h == '#').count();
            at(j + hashes) == '"'
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let j = i + 1 + usize::from(c == 'b');
            let hashes = chars[j..].iter().take_while(|&&h| h == '#').count();
            i = j + hashes + 1;
            while i < chars.len() && !(chars[i] == '"' && (0..hashes).all(|k| at(i + 1 + k) == '#'))
            {
                line += usize::from(chars[i] == '\n');
                i += 1;
            }
            i += 1 + hashes;
        } else if c == '"' || (c == 'b' && at(i + 1) == '"') {
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                line += usize::from(chars[i] == '\n');
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' || (c == 'b' && at(i + 1) == '\'') {
            // A char literal ('a', '\n', '\u{1F600}'), else a lifetime's quote.
            let j = i + usize::from(c == 'b') + 1;
            if at(j) == '\\' {
                i = j + 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(j + 1) == '\'' {
                i = j + 2;
            } else if c == 'b' {
                out.push((line, Tok::Ident("b".into())));
                i += 1;
            } else {
                i += 1;
            }
        } else if c == 'r' && at(i + 1) == '#' && (at(i + 2).is_alphabetic() || at(i + 2) == '_') {
            i += 2;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((line, Tok::Ident(chars[start..i].iter().collect())));
        } else if c == ':' && at(i + 1) == ':' {
            out.push((line, Tok::Sep));
            i += 2;
        } else {
            out.push((line, Tok::Punct(c)));
            i += 1;
        }
    }
    out
}

fn is(tok: Option<&(usize, Tok)>, c: char) -> bool {
    matches!(tok, Some((_, Tok::Punct(p))) if *p == c)
}

fn ident(tok: Option<&(usize, Tok)>) -> Option<&str> {
    match tok {
        Some((_, Tok::Ident(name))) => Some(name),
        _ => None,
    }
}

/// `tokens` without the items under `#[cfg(test)]` or `#[cfg(all(test, …))]`.
fn without_tests(tokens: &[(usize, Tok)]) -> Vec<(usize, Tok)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let test_only = is(tokens.get(i), '#')
            && is(tokens.get(i + 1), '[')
            && ident(tokens.get(i + 2)) == Some("cfg")
            && is(tokens.get(i + 3), '(')
            && (ident(tokens.get(i + 4)) == Some("test")
                || (ident(tokens.get(i + 4)) == Some("all")
                    && ident(tokens.get(i + 6)) == Some("test")));
        if !test_only {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i = skip_attributes(tokens, i);
        i = skip_item(tokens, i);
    }
    out
}

fn skip_attributes(tokens: &[(usize, Tok)], mut i: usize) -> usize {
    while is(tokens.get(i), '#') && is(tokens.get(i + 1), '[') {
        let mut depth = 0;
        i += 1;
        while i < tokens.len() {
            if is(tokens.get(i), '[') {
                depth += 1;
            } else if is(tokens.get(i), ']') {
                depth -= 1;
                if depth == 0 {
                    i += 1;
                    break;
                }
            }
            i += 1;
        }
    }
    i
}

/// The index past the item (or statement, field, match arm) starting at `i`.
fn skip_item(tokens: &[(usize, Tok)], mut i: usize) -> usize {
    const ENDS_AT_SEMICOLON: &[&str] = &["use", "const", "static", "type", "let"];
    const ITEMS: &[&str] = &[
        "fn",
        "impl",
        "struct",
        "enum",
        "mod",
        "use",
        "trait",
        "const",
        "static",
        "type",
        "async",
        "unsafe",
        "extern",
        "macro_rules",
        "let",
    ];
    // The item's keyword: past `pub` and its `(crate)`, `(super)`, `(in …)`.
    let mut k = i;
    if ident(tokens.get(k)) == Some("pub") {
        k += 1;
        if is(tokens.get(k), '(') {
            while k < tokens.len() && !is(tokens.get(k), ')') {
                k += 1;
            }
            k += 1;
        }
    }
    let keyword = ident(tokens.get(k)).unwrap_or("");
    let to_semicolon = ENDS_AT_SEMICOLON.contains(&keyword);
    let item = ITEMS.contains(&keyword) || k > i;
    let mut depth = 0i32;
    while i < tokens.len() {
        match &tokens[i].1 {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                if depth == 0 {
                    return i;
                }
                depth -= 1;
                if depth == 0 && !to_semicolon && tokens[i].1 == Tok::Punct('}') {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            Tok::Punct(',') if depth == 0 && !item => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

struct Read {
    children: Vec<String>,
    bindings: BTreeMap<String, (Vec<String>, Vec<String>)>,
    paths: Vec<(usize, Vec<String>, Vec<String>)>,
}

/// The modules a file declares, the names its `use`s bind, and the paths in it, each with the
/// scope (module path, inline modules included) it was written in.
fn read_file(tokens: &[(usize, Tok)], module: &[String]) -> Read {
    let mut read = Read {
        children: Vec::new(),
        bindings: BTreeMap::new(),
        paths: Vec::new(),
    };
    // Inline modules: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let scope: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect();
        match &tokens[i].1 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.checked_sub(1).unwrap_or_else(|| {
                    panic!("{module:?}: a `}}` closes nothing at line {}", tokens[i].0)
                });
            }
            Tok::Ident(word) if word == "mod" => {
                if let Some(name) = ident(tokens.get(i + 1)) {
                    if is(tokens.get(i + 2), ';')
                        && !after_path_attribute(tokens, i)
                        && inline.is_empty()
                    {
                        read.children.push(name.to_owned());
                    } else if is(tokens.get(i + 2), '{') {
                        inline.push((name.to_owned(), depth + 1));
                    }
                }
            }
            // Not `use<…>`, the precise capturing of an `impl Trait`.
            Tok::Ident(word) if word == "use" && !is(tokens.get(i + 1), '<') => {
                let line = tokens[i].0;
                let mut uses = Vec::new();
                i = use_tree(tokens, i + 1, &mut Vec::new(), &mut uses);
                for (segments, binding) in uses {
                    if let Some(name) = binding {
                        read.bindings
                            .insert(name, (segments.clone(), scope.clone()));
                    }
                    read.paths.push((line, scope.clone(), segments));
                }
                continue;
            }
            Tok::Ident(first)
                if !matches!(tokens.get(i.wrapping_sub(1)), Some((_, Tok::Sep)))
                    && matches!(tokens.get(i + 1), Some((_, Tok::Sep))) =>
            {
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while matches!(tokens.get(j), Some((_, Tok::Sep))) {
                    let Some(name) = ident(tokens.get(j + 1)) else {
                        break;
                    };
                    segments.push(name.to_owned());
                    j += 2;
                }
                read.paths.push((tokens[i].0, scope, segments));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    read
}

/// Whether the `mod` at `i` carries a `#[path = …]` attribute (a file outside `src/`).
fn after_path_attribute(tokens: &[(usize, Tok)], i: usize) -> bool {
    let start = i.saturating_sub(8);
    tokens[start..i]
        .windows(2)
        .any(|w| w[0].1 == Tok::Punct('[') && w[1].1 == Tok::Ident("path".into()))
}

/// Reads the use tree at `i` under `prefix`: each path it names, with the name it binds (none
/// for a glob or `_`). Returns the index past it (past the `;` at the top).
fn use_tree(
    tokens: &[(usize, Tok)],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let depth = prefix.len();
    if matches!(tokens.get(i), Some((_, Tok::Sep))) {
        i += 1;
    }
    loop {
        match tokens.get(i) {
            Some((_, Tok::Ident(name))) => {
                prefix.push(name.clone());
                i += 1;
                if matches!(tokens.get(i), Some((_, Tok::Sep))) {
                    i += 1;
                    continue;
                }
                let mut binding = (name != "self").then(|| name.clone());
                if name == "self" {
                    prefix.pop();
                    binding = prefix.last().cloned();
                }
                if ident(tokens.get(i)) == Some("as") {
                    binding = ident(tokens.get(i + 1))
                        .filter(|n| *n != "_")
                        .map(str::to_owned);
                    i += 2;
                }
                out.push((prefix.clone(), binding));
            }
            Some((_, Tok::Punct('*'))) => {
                out.push((prefix.clone(), None));
                i += 1;
            }
            Some((_, Tok::Punct('{'))) => {
                i += 1;
                while !is(tokens.get(i), '}') && i < tokens.len() {
                    i = use_tree(tokens, i, prefix, out);
                    if is(tokens.get(i), ',') {
                        i += 1;
                    }
                }
                i += 1;
            }
            _ => {}
        }
        break;
    }
    prefix.truncate(depth);
    if depth == 0 {
        while i < tokens.len() && !is(tokens.get(i), ';') {
            i += 1;
        }
        i += 1;
    }
    i
}
