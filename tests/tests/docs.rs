//! The repository explains itself: `docs/api.md` is what the CRD types
//! generate, the documented IAM policies are what `orca-operator
//! iam-policy` renders, and every description `kubectl explain` would show
//! is there, and every link of the README and `docs/` leads somewhere.

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn docs_api_md_is_what_the_crd_types_generate() {
    let path = repo().join("docs/api.md");
    let on_disk =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == orca_operator::crd::api_markdown(),
        "docs/api.md is stale: run `cargo run -p orca-operator -- api-docs > docs/api.md`"
    );
}

#[test]
fn docs_iam_policies_are_what_the_command_renders() {
    use clap::Parser;

    #[derive(Parser)]
    struct IamPolicy {
        #[command(flatten)]
        args: orca_operator::iam_policy::IamPolicyArgs,
    }
    for (file, args) in orca_tests::iam::DOCUMENTED {
        let path = orca_tests::iam::docs_file(file);
        let on_disk =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rendered = IamPolicy::try_parse_from(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .args
            .render();
        assert!(
            on_disk == rendered,
            "docs/{file} is stale: run `cargo run -p orca-operator -- {} > docs/{file}`",
            args.join(" ")
        );
    }
}

/// The fields whose types are Kubernetes' own: they need a description of
/// their own, but what lies inside keeps its upstream descriptions.
const KUBERNETES_TYPED: [&str; 7] = [
    "Scheduler.spec.env",
    "Scheduler.spec.resources",
    "Scheduler.spec.podTemplate.affinity",
    "Scheduler.spec.podTemplate.tolerations",
    "Scheduler.spec.podTemplate.imagePullSecrets",
    "Scheduler.status.conditions",
    "WarmPool.status.conditions",
];

#[test]
fn every_crd_property_has_a_description() {
    use serde::Deserialize;

    let yaml = orca_operator::crd::crds_yaml();
    let mut walk = Walk::default();
    let mut kinds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let crd = serde_yaml::Value::deserialize(doc).expect("a CRD parses as YAML");
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .expect("a CRD names its kind")
            .to_string();
        let versions = crd["spec"]["versions"]
            .as_sequence()
            .expect("a CRD has versions");
        for version in versions {
            let root = &version["schema"]["openAPIV3Schema"];
            let description = root["description"].as_str().unwrap_or("");
            assert!(
                !description.trim().is_empty() && !description.starts_with("Auto-generated"),
                "{kind}: the schema's own description is {description:?}"
            );
            walk.schema(root, &kind);
        }
        kinds.push(kind);
    }
    assert_eq!(kinds, ["Scheduler", "WarmPool", "WarmPoolClass"]);
    assert!(
        walk.properties > 50,
        "only {} properties walked: is the schema where the test looks?",
        walk.properties
    );
    for path in KUBERNETES_TYPED {
        assert!(
            walk.seen.iter().any(|p| p == path),
            "{path} is not in the CRDs any more: update KUBERNETES_TYPED"
        );
    }
    assert!(
        walk.missing.is_empty(),
        "properties without a description (a doc comment on the Rust field):\n{}",
        walk.missing.join("\n")
    );
}

#[derive(Default)]
struct Walk {
    properties: usize,
    seen: Vec<String>,
    missing: Vec<String>,
}

impl Walk {
    /// Every property beneath `schema` (at `path`), at every depth: in
    /// `properties`, array `items`, map values and `allOf`/`anyOf`/`oneOf`.
    fn schema(&mut self, schema: &serde_yaml::Value, path: &str) {
        if let Some(props) = schema.get("properties").and_then(|p| p.as_mapping()) {
            for (name, child) in props {
                let here = format!("{path}.{}", name.as_str().unwrap_or("?"));
                self.properties += 1;
                let described = child
                    .get("description")
                    .and_then(|d| d.as_str())
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    self.missing.push(here.clone());
                }
                if !KUBERNETES_TYPED.contains(&here.as_str()) {
                    self.schema(child, &here);
                }
                self.seen.push(here);
            }
        }
        if let Some(items) = schema.get("items") {
            self.schema(items, &format!("{path}[]"));
        }
        if let Some(values) = schema.get("additionalProperties") {
            if values.is_mapping() {
                self.schema(values, &format!("{path}{{}}"));
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for sub in schema
                .get(key)
                .and_then(|s| s.as_sequence())
                .into_iter()
                .flatten()
            {
                self.schema(sub, path);
            }
        }
    }
}

/// The directories checked for citations of documents that are not in the
/// repository; `tests/kube` (Kubernetes' own `main` packages) is left out.
const CHECKED: [&str; 7] = [
    "db",
    "operator",
    "pool-agent",
    "tests",
    "scripts",
    "charts",
    "examples",
];

#[test]
fn nothing_cites_documents_outside_the_repository() {
    let root = repo();
    let mut found = Vec::new();
    let mut files = 0;
    for dir in CHECKED {
        scan(&root.join(dir), &root, &mut files, &mut found);
    }
    assert!(files > 50, "only {files} files scanned");
    assert!(
        found.is_empty(),
        "point into docs/ instead, or drop the citation:\n{}",
        found.join("\n")
    );
}

fn scan(dir: &std::path::Path, root: &std::path::Path, files: &mut usize, found: &mut Vec<String>) {
    if dir == root.join("tests/kube") {
        return;
    }
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .collect();
    paths.sort();
    for path in paths {
        let meta =
            std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if meta.is_dir() {
            scan(&path, root, files, found);
        } else if meta.is_file() {
            *files += 1;
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let text = String::from_utf8_lossy(&bytes);
            for (n, line) in text.lines().enumerate() {
                if let Some(what) = citation(line) {
                    let shown = path.strip_prefix(root).unwrap_or(&path).display();
                    found.push(format!("{shown}:{}: {what}: {}", n + 1, line.trim()));
                }
            }
        }
    }
}

/// What `line` cites that is not in the repository: a numbered section of
/// the spec, a numbered seed or an issue number.
fn citation(line: &str) -> Option<&'static str> {
    if line.contains(concat!("SPEC", " §")) {
        return Some("a section of the spec");
    }
    let lower = line.to_lowercase();
    let followed_by_digit = |needle: &str| {
        lower.match_indices(needle).any(|(at, _)| {
            lower[at + needle.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
    };
    if followed_by_digit("seed 0") {
        return Some("a seed");
    }
    if followed_by_digit("issue ") {
        return Some("an issue");
    }
    None
}

/// The Markdown files a reader follows links through: the README and
/// `docs/`.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The anchors GitHub gives `text`'s headings: each heading lowercased,
/// without what is not a letter, digit, space, `-` or `_`, spaces as `-`;
/// a repeated one gets `-1`, `-2`….
fn anchors(text: &str) -> std::collections::HashSet<String> {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut out = std::collections::HashSet::new();
    for line in outside_code(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The lines of `text` outside fenced code blocks.
fn outside_code(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The targets of the inline links `[text](target)` on `line`.
fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn every_link_in_the_readme_and_docs_leads_somewhere() {
    let root = repo();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("a Markdown file");
        let dir = file.parent().expect("a file has a directory");
        for line in outside_code(&text) {
            for target in link_targets(line) {
                if target.starts_with("http://") || target.starts_with("https://") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let to = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let shown = file.strip_prefix(&root).unwrap_or(&file).display();
                if !to.exists() {
                    broken.push(format!("{shown}: {target}: no such file"));
                    continue;
                }
                let is_markdown = to.extension().is_some_and(|e| e == "md");
                if !anchor.is_empty() && is_markdown {
                    let headings = std::fs::read_to_string(&to).expect("a Markdown file");
                    if !anchors(&headings).contains(anchor) {
                        broken.push(format!("{shown}: {target}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
