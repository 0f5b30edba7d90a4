//! The layout of the operator and its core (docs/architecture.md#layout),
//! held against their code: every file is on its folder's map (its
//! `mod.rs`, one line a file); no two files of a crate import each other,
//! even through others; no layer imports one above it, nor one controller
//! the other; and the core (`orca-core`: the Scheduler's decision, the
//! pool's plan) depends on no client, runtime or driver, by Cargo's graph.
//!
//! Every path a file names that starts at `crate`, `super`, `self` or one
//! of its own child modules — in a `use` or inline — is an import of the
//! file that defines that module (a `mod.rs` for a folder). A `mod`
//! declaration is not.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use syn::visit::Visit;

/// The crates whose layout is held: the operator, and its core.
const CRATES: [&str; 2] = ["operator", "core"];

/// The sources of `krate` (a folder of the workspace).
fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src")
}

/// Every `.rs` file of `krate`, relative to its `src`.
fn all_files(krate: &str) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the sources are readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(krate), &src(krate), &mut out);
    out
}

/// The module path of a file: `warmpool/act.rs` → `[warmpool, act]`, `warmpool/mod.rs`
/// → `[pool]`, `lib.rs` → `[]`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The paths a file names, each as written.
#[derive(Default)]
struct Paths {
    /// Split into segments, for the imports.
    found: Vec<Vec<String>>,
    /// The names its `use` items bring in from another crate (the
    /// operator's `pub use orca_core::warmpool::{plan, ..}`): a path
    /// through this file to one of them is not an import of this file.
    external: BTreeSet<String>,
}

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                self.used(prefix, &n.ident);
                self.path(prefix, Some(n.ident.to_string()));
            }
            syn::UseTree::Rename(r) => {
                self.used(prefix, &r.rename);
                self.path(prefix, Some(r.ident.to_string()));
            }
            syn::UseTree::Glob(_) => self.path(prefix, None),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.tree(prefix, t);
                }
            }
        }
    }

    fn path(&mut self, prefix: &[String], last: Option<String>) {
        let mut p = prefix.to_vec();
        p.extend(last);
        if !p.is_empty() {
            self.found.push(p);
        }
    }

    /// `name`, brought in by a `use` of `prefix`: from another crate
    /// unless the path starts in this one.
    fn used(&mut self, prefix: &[String], name: &syn::Ident) {
        if let Some(first) = prefix.first() {
            if !matches!(first.as_str(), "crate" | "self" | "super") {
                self.external.insert(name.to_string());
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.path(&segments, None);
        syn::visit::visit_path(self, p);
    }

    // `pub(super)` names where an item is seen, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    // A test module inside a file is the file's own.
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(m) {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

/// Each file of `krate`, with the files it imports.
fn graph(krate: &str) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let all = all_files(krate);
    let by_module: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module_of(f), f.clone())).collect();
    let named: BTreeMap<&PathBuf, Paths> = all
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(src(krate).join(file)).unwrap();
            let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let mut paths = Paths::default();
            paths.visit_file(&ast);
            (file, paths)
        })
        .collect();
    named
        .iter()
        .map(|(file, paths)| {
            let imports = paths
                .found
                .iter()
                .filter_map(|p| imported(&by_module, &named, file, p))
                .collect();
            ((*file).clone(), imports)
        })
        .collect()
}

/// The file of this crate that the path `p`, named in `file`, imports.
fn imported(
    by_module: &BTreeMap<Vec<String>, PathBuf>,
    named: &BTreeMap<&PathBuf, Paths>,
    file: &PathBuf,
    p: &[String],
) -> Option<PathBuf> {
    let here = module_of(file);
    let mut at = here.clone();
    let mut rest = p;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {}
        // A child module of this file's, named as in `use child::X`
        // (anything else is another crate, or a local name: a lone
        // `start` is a function, not the module of that name).
        Some(first) if rest.len() > 1 => {
            let mut child = here.clone();
            child.push(first.to_string());
            by_module.get(&child)?;
        }
        _ => return None,
    }
    while rest.first().map(String::as_str) == Some("super") {
        at.pop();
        rest = &rest[1..];
    }
    // The longest module the path names, unless what it names next is
    // that module's from another crate.
    let mut target = at;
    let mut best = by_module.get(&target)?.clone();
    for seg in rest {
        target.push(seg.clone());
        match by_module.get(&target) {
            Some(f) => best = f.clone(),
            None if named[&best].external.contains(seg) => return None,
            None => break,
        }
    }
    (&best != file).then_some(best)
}

/// The cycles: for each file on one, the path back to itself.
fn cycles(g: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    let mut found = Vec::new();
    for start in g.keys() {
        // A breadth-first walk from start's imports back to start.
        let mut from: BTreeMap<&PathBuf, &PathBuf> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<&PathBuf> = g[start].iter().collect();
        for next in &g[start] {
            from.insert(next, start);
        }
        while let Some(at) = queue.pop_front() {
            if at == start {
                let mut path = vec![start.clone()];
                let mut back = from[start];
                while back != start {
                    path.push(back.clone());
                    back = from[back];
                }
                path.reverse();
                found.push(path);
                break;
            }
            for next in g.get(at).map(|i| i.iter()).into_iter().flatten() {
                if !from.contains_key(next) {
                    from.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
    }
    found
}

#[test]
fn no_file_imports_its_importer() {
    let mut shown = Vec::new();
    for krate in CRATES {
        let g = graph(krate);
        assert!(g.len() > 30, "read {} files of {krate}/src", g.len());
        for c in cycles(&g) {
            let names: Vec<String> = c.iter().map(|f| f.display().to_string()).collect();
            shown.push(format!("{krate}: {} → back", names.join(" → ")));
        }
    }
    assert!(
        shown.is_empty(),
        "files importing their importers:\n{}",
        shown.join("\n")
    );
}

/// The layers, bottom up: the runtime both controllers run on, each
/// controller, and the modes that wire them (`k8s/`, `local/`). A file
/// imports nothing of a layer above its own, nor of the other controller:
/// a change to one controller never reaches into the other or the runtime.
#[test]
fn no_file_imports_a_layer_above_its_own_or_the_other_controller() {
    let mut wrong = Vec::new();
    for krate in CRATES {
        layers_of(krate, &mut wrong);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What of `krate` imports a layer above its own, into `wrong`.
fn layers_of(krate: &str, wrong: &mut Vec<String>) {
    let g = graph(krate);
    let may_not: [(&str, &[&str]); 3] = [
        (
            "runtime",
            &["scheduler", "warmpool", "k8s", "local", "plugin"],
        ),
        ("scheduler", &["warmpool", "k8s", "local", "plugin"]),
        ("warmpool", &["scheduler", "k8s", "local", "plugin"]),
    ];
    for (file, imports) in &g {
        for (layer, above) in may_not {
            if !file.starts_with(layer) {
                continue;
            }
            for f in imports {
                if above.iter().any(|a| f.starts_with(a)) {
                    wrong.push(format!(
                        "{krate}: {} imports {}",
                        file.display(),
                        f.display()
                    ));
                }
            }
        }
    }
}

/// One convention for unit tests: a module's tests are its child `tests`
/// (see the core's `test_support.rs`), and what several modules' tests
/// share is in `test_support`, not borrowed from another module's tests.
#[test]
fn every_test_module_is_its_modules_tests() {
    let mut wrong = Vec::new();
    let all = CRATES
        .iter()
        .flat_map(|k| all_files(k).into_iter().map(move |f| (k, f)));
    for (krate, file) in all {
        let text = std::fs::read_to_string(src(krate).join(&file)).unwrap();
        let file = file.display().to_string();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for item in &ast.items {
            if let syn::Item::Mod(m) = item {
                let name = m.ident.to_string();
                let shared = file == "lib.rs" && name == "test_support";
                if is_test(m) && name != "tests" && !shared {
                    wrong.push(format!("{file}: #[cfg(test)] mod {name}"));
                }
            }
        }
        if text.contains("::tests::") {
            wrong.push(format!(
                "{file} borrows another module's tests: `::tests::`"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The pure core is a crate of its own, `orca-core`: what it may not
/// depend on, even through another crate, Cargo refuses it to name. Its
/// dependency graph is read from Cargo itself.
#[test]
fn the_core_crate_depends_on_no_client_runtime_or_driver() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "orca-core",
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains("k8s-openapi"), "{tree}");
    let forbidden = [
        "tokio",
        "kube-client",
        "kube-runtime",
        "hyper",
        "aws-config",
        "aws-sdk-ec2",
        "aws-sdk-ssm",
        "tokio-postgres",
        "orca-db",
        "tracing",
    ];
    let found: Vec<&&str> = forbidden.iter().filter(|f| names.contains(**f)).collect();
    assert!(found.is_empty(), "orca-core depends on {found:?}");
}

/// Whether `m` is a `#[cfg(test)]` module.
fn is_test(m: &syn::ItemMod) -> bool {
    m.attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// Every public item of the operator — `pub` functions, types, traits,
/// constants, and the public methods of types — has a doc comment that
/// says what it is for.
#[test]
fn every_public_item_is_documented() {
    struct Missing<'a> {
        file: &'a Path,
        found: Vec<String>,
    }
    fn documented(attrs: &[syn::Attribute]) -> bool {
        attrs.iter().any(|a| a.path().is_ident("doc"))
    }
    fn public(vis: &syn::Visibility) -> bool {
        matches!(vis, syn::Visibility::Public(_))
    }
    impl<'ast> Visit<'ast> for Missing<'_> {
        fn visit_item(&mut self, item: &'ast syn::Item) {
            let (attrs, vis, name) = match item {
                syn::Item::Fn(i) => (&i.attrs, &i.vis, i.sig.ident.to_string()),
                syn::Item::Struct(i) => (&i.attrs, &i.vis, i.ident.to_string()),
                syn::Item::Enum(i) => (&i.attrs, &i.vis, i.ident.to_string()),
                syn::Item::Trait(i) => (&i.attrs, &i.vis, i.ident.to_string()),
                syn::Item::Const(i) => (&i.attrs, &i.vis, i.ident.to_string()),
                syn::Item::Type(i) => (&i.attrs, &i.vis, i.ident.to_string()),
                _ => return syn::visit::visit_item(self, item),
            };
            if public(vis) && !documented(attrs) {
                self.found.push(format!("{}: {name}", self.file.display()));
            }
            syn::visit::visit_item(self, item);
        }

        fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
            // A trait's methods are the trait's to document.
            if i.trait_.is_some() {
                return;
            }
            for item in &i.items {
                if let syn::ImplItem::Fn(f) = item {
                    if public(&f.vis) && !documented(&f.attrs) {
                        self.found
                            .push(format!("{}: {}", self.file.display(), f.sig.ident));
                    }
                }
            }
        }

        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            if !is_test(m) {
                syn::visit::visit_item_mod(self, m);
            }
        }
    }
    let mut missing = Vec::new();
    for krate in CRATES {
        for file in &all_files(krate) {
            let text = std::fs::read_to_string(src(krate).join(file)).unwrap();
            let ast = syn::parse_file(&text).unwrap();
            let mut m = Missing {
                file,
                found: Vec::new(),
            };
            m.visit_file(&ast);
            missing.extend(m.found.into_iter().map(|f| format!("{krate}: {f}")));
        }
    }
    assert!(
        missing.is_empty(),
        "{} public items without a doc comment:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// Each file of the operator but its tests (test files are tables and may
/// grow), by name, with its text.
fn code() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for krate in CRATES {
        for file in all_files(krate) {
            let name = file.display().to_string();
            if !name.contains("tests") {
                let text = std::fs::read_to_string(src(krate).join(&file)).unwrap();
                out.push((format!("{krate}/src/{name}"), text));
            }
        }
    }
    out
}

/// Each folder's `mod.rs` (and `lib.rs` for the crate's root) is its
/// map: every file and folder in it is declared there, and each
/// declaration has one line of `//` above it (past its attributes) that
/// says what it holds — the line a newcomer reads to find their file.
#[test]
fn every_file_is_on_its_folders_map() {
    let mut wrong = Vec::new();
    for krate in CRATES {
        maps_of(krate, &mut wrong);
    }
    assert!(
        wrong.is_empty(),
        "not on their folder's map:\n{}",
        wrong.join("\n")
    );
}

/// What file or folder of `krate` is not on its folder's map, into `wrong`.
fn maps_of(krate: &str, wrong: &mut Vec<String>) {
    let all = all_files(krate);
    for file in &all {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if matches!(name, "mod.rs" | "lib.rs" | "main.rs") || file.starts_with("bin") {
            continue;
        }
        let folder = file.parent().unwrap_or(Path::new(""));
        // A module's tests are its child `tests`: in a folder module's
        // folder (`tests/`), or beside a file module `x.rs` in
        // `x_tests.rs` or `x_tests/`, which `x.rs` declares by `#[path]`.
        let in_tests = folder
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "tests" || n.ends_with("_tests"));
        if in_tests {
            continue;
        }
        if let Some(module) = name.strip_suffix("_tests.rs") {
            let owner = folder.join(format!("{module}.rs"));
            let text = std::fs::read_to_string(src(krate).join(&owner)).unwrap_or_default();
            if !text.contains(&format!("#[path = \"{name}\"]\nmod tests;")) {
                wrong.push(format!(
                    "{krate}: {} is not declared by {} as its `mod tests`",
                    file.display(),
                    owner.display()
                ));
            }
            continue;
        }
        let (map, module) = if folder.as_os_str().is_empty() {
            (
                "lib.rs".to_string(),
                name.trim_end_matches(".rs").to_string(),
            )
        } else {
            let map = folder.join("mod.rs").display().to_string();
            (map, name.trim_end_matches(".rs").to_string())
        };
        check_declared(krate, &map, &module, wrong);
    }
    // Each folder, on its parent's map.
    let mut folders: BTreeSet<PathBuf> = all
        .iter()
        .filter(|f| f.ends_with("mod.rs"))
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect();
    folders.retain(|f| {
        !f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with("_tests"))
    });
    for folder in folders {
        let parent = folder.parent().unwrap_or(Path::new(""));
        let map = if parent.as_os_str().is_empty() {
            "lib.rs".to_string()
        } else {
            parent.join("mod.rs").display().to_string()
        };
        let module = folder
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        check_declared(krate, &map, module, wrong);
    }
}

/// Whether `map` (a path under operator/src) declares `module` with a line
/// of `//` above it; what is wrong, into `wrong`.
fn check_declared(krate: &str, map: &str, module: &str, wrong: &mut Vec<String>) {
    let text = std::fs::read_to_string(src(krate).join(map)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let declared = |l: &str| {
        let l = l.trim();
        l.ends_with(&format!("mod {module};")) && (l.starts_with("mod ") || l.starts_with("pub"))
    };
    let Some(at) = lines.iter().position(|l| declared(l)) else {
        wrong.push(format!("{krate}: {map} does not declare {module}"));
        return;
    };
    let above = lines[..at]
        .iter()
        .rev()
        .find(|l| !l.trim_start().starts_with("#["))
        .map(|l| l.trim_start());
    match above {
        Some(l) if l.starts_with("// ") && !l.starts_with("///") => {}
        _ => wrong.push(format!(
            "{krate}: {map}: `mod {module};` has no line of `//` above it"
        )),
    }
}

/// The types each file defines, and the types each file implements.
struct Items<'a> {
    file: &'a Path,
    defined: &'a mut BTreeMap<String, Vec<PathBuf>>,
    implemented: &'a mut Vec<(String, PathBuf)>,
}
impl Items<'_> {
    fn define(&mut self, ident: &syn::Ident) {
        let files = self.defined.entry(ident.to_string()).or_default();
        files.push(self.file.to_path_buf());
    }
}
impl<'ast> Visit<'ast> for Items<'_> {
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if let syn::Type::Path(p) = &*i.self_ty {
            if let Some(last) = p.path.segments.last() {
                let implemented = (last.ident.to_string(), self.file.to_path_buf());
                self.implemented.push(implemented);
            }
        }
    }

    fn visit_item_struct(&mut self, i: &'ast syn::ItemStruct) {
        self.define(&i.ident);
    }

    fn visit_item_enum(&mut self, i: &'ast syn::ItemEnum) {
        self.define(&i.ident);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(m) {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

/// No type of the operator has `impl` blocks (inherent or of a trait) in
/// more than two files: a type's methods in one or two (its definition
/// and, say, its pass) are what a reader can hold; more, and no file owns
/// its fields. Two types of one name (each controller's `Context`) are
/// told apart by where they are defined: an `impl` is of the one defined
/// nearest to it.
#[test]
fn no_type_has_impl_blocks_in_more_than_two_files() {
    let mut wrong = Vec::new();
    for krate in CRATES {
        impls_of(krate, &mut wrong);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Each type of `krate` with impl blocks in more than two files, into `wrong`.
fn impls_of(krate: &str, wrong: &mut Vec<String>) {
    let all = all_files(krate);
    let (mut defined, mut implemented) = (BTreeMap::new(), Vec::new());
    for file in all
        .iter()
        .filter(|f| !f.display().to_string().contains("tests"))
    {
        let text = std::fs::read_to_string(src(krate).join(file)).unwrap();
        let ast = syn::parse_file(&text).unwrap();
        Items {
            file,
            defined: &mut defined,
            implemented: &mut implemented,
        }
        .visit_file(&ast);
    }
    // Each impl under the type it is of: the name, and the file of the
    // definition sharing the most folders with the impl's file.
    let mut by_type: BTreeMap<(String, PathBuf), BTreeSet<PathBuf>> = BTreeMap::new();
    for (name, file) in implemented {
        let shared = |d: &&PathBuf| {
            d.components()
                .zip(file.components())
                .take_while(|(a, b)| a == b)
                .count()
        };
        let of = defined
            .get(&name)
            .and_then(|d| d.iter().max_by_key(shared))
            .cloned()
            .unwrap_or_default();
        by_type.entry((name, of)).or_default().insert(file);
    }
    for ((ty, of), files) in &by_type {
        if files.len() > 2 {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            wrong.push(format!(
                "{krate}: {ty} (of {}) has impl blocks in {} files (at most 2): {}",
                of.display(),
                files.len(),
                names.join(", ")
            ));
        }
    }
}

/// Each function of `text` (formatted by rustfmt: its closing brace at
/// the indentation of its `fn` line) before the file's tests, with its
/// length in lines.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .iter()
        .position(|l| *l == "#[cfg(test)]")
        .unwrap_or(lines.len());
    let mut found = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let visible = match body.strip_prefix("pub(") {
            Some(rest) => rest.split_once(") ").map_or(rest, |(_, r)| r),
            None => body.trim_start_matches("pub "),
        };
        let after_qualifiers = visible
            .trim_start_matches("const ")
            .trim_start_matches("async ");
        let Some(rest) = after_qualifiers.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(j) = lines[i + 1..end].iter().position(|l| *l == close) {
            found.push((name, j + 2));
        }
    }
    found
}

/// No function of the operator outside its tests is over 100 lines: one
/// longer is split into the named steps it reads as.
#[test]
fn no_function_is_over_100_lines() {
    let mut long = Vec::new();
    for (name, text) in code() {
        for (f, lines) in functions(&text) {
            if lines > 100 {
                long.push(format!("{name}: fn {f} is {lines} lines: split it"));
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}
