//! Where a database's CA bundle (`sslrootcert`) comes from, and how it is
//! read. A scheduler or an agent reads the file its URL names, on its own
//! file system. The operator reads URLs its tenants wrote, so a path in
//! one is theirs to choose: there the file must be in a directory the
//! platform team named ([`restrict_ca_files`]), or the bundle comes with
//! the URL itself ([`crate::DatabaseUrl::with_root_pem`], from a Secret).
//! Either way only a regular file of at most [`MAX_CA_BYTES`] is read, and
//! off the async workers: a device that never ends (`/dev/zero`), a FIFO
//! that never answers or a huge file costs one connect attempt its error,
//! never the process its memory or a worker thread.

use std::{
    io::Read,
    path::{Path, PathBuf},
    sync::OnceLock,
};

/// The largest CA bundle read: a bundle of every public root is under
/// 300 KiB.
pub const MAX_CA_BYTES: u64 = 1 << 20;

/// Where a URL's `sslrootcert` file may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaFiles {
    /// Anywhere this process can read (its own URL).
    Anywhere,
    /// Only within these directories (URLs others wrote).
    Within(Vec<PathBuf>),
}

static POLICY: OnceLock<CaFiles> = OnceLock::new();

/// From now on this process reads `sslrootcert` files only within `dirs`
/// (none: no file at all). Once per process; a second call changes
/// nothing and says so.
pub fn restrict_ca_files(dirs: Vec<PathBuf>) -> Result<(), CaFiles> {
    POLICY
        .set(CaFiles::Within(dirs))
        .map_err(|_| policy().clone())
}

/// This process's rule.
pub fn policy() -> &'static CaFiles {
    POLICY.get().unwrap_or(&CaFiles::Anywhere)
}

/// The bytes of `sslrootcert` file `path` under this process's rule, read
/// on a blocking thread; what is wrong with it on one line, naming it.
pub(crate) async fn read(path: &Path) -> Result<Vec<u8>, String> {
    let path = path.to_path_buf();
    let shown = path.display().to_string();
    tokio::task::spawn_blocking(move || read_under(&path, policy()))
        .await
        .unwrap_or_else(|e| Err(format!("sslrootcert {shown}: its read failed: {e}")))
}

/// The bytes of `path` under `rule` (see the module's doc).
pub fn read_under(path: &Path, rule: &CaFiles) -> Result<Vec<u8>, String> {
    let bad = |what: String| format!("sslrootcert {}: {what}", path.display());
    let path = match rule {
        CaFiles::Anywhere => path.to_path_buf(),
        CaFiles::Within(dirs) => {
            // By the path as written first, touching nothing: whether a
            // file exists elsewhere is nobody's to learn from the answer.
            // Then by where it really is, its links followed.
            let written = lexical(path).filter(|p| dirs.iter().any(|d| p.starts_with(d)));
            let real = match written {
                Some(p) => Some(p.canonicalize().map_err(|e| bad(e.to_string()))?),
                None => None,
            };
            let inside = real.as_ref().is_some_and(|real| {
                dirs.iter()
                    .filter_map(|d| d.canonicalize().ok())
                    .any(|d| real.starts_with(d))
            });
            if !inside {
                let named = if dirs.is_empty() {
                    "none".to_string()
                } else {
                    dirs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(bad(format!(
                    "the operator reads CA files only in the directories its chart names \
                     (databaseCaDirectories: {named}); put the bundle there, or in the \
                     Secret beside the URL (database.urlSecretRef.caKey)"
                )));
            }
            real.unwrap_or_default()
        }
    };
    // Non-blocking: opening a FIFO with no writer returns at once.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| bad(e.to_string()))?
    };
    let meta = file.metadata().map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    if meta.len() > MAX_CA_BYTES {
        return Err(bad(format!(
            "is {} bytes, more than the {MAX_CA_BYTES} a CA bundle may be",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_CA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    if bytes.len() as u64 > MAX_CA_BYTES {
        return Err(bad(format!(
            "grew past the {MAX_CA_BYTES} bytes a CA bundle may be while it was read"
        )));
    }
    Ok(bytes)
}

/// `path` with its `.` and `..` taken out as written (no link followed),
/// if it is absolute and never climbs above the root.
fn lexical(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("orca-db-ca-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_device_a_fifo_and_a_directory_are_refused_at_once() {
        let fifo = dir("fifo").join("ca.pem");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string naming a path in the test's directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (path, said) in [
            (PathBuf::from("/dev/zero"), "is not a regular file"),
            (fifo.clone(), "is not a regular file"),
            (dir("a-dir"), "is not a regular file"),
        ] {
            let err = read_under(&path, &CaFiles::Anywhere).unwrap_err();
            assert!(
                err.starts_with(&format!("sslrootcert {}", path.display())),
                "{err}"
            );
            assert!(err.ends_with(said), "{err}");
        }
    }

    #[test]
    fn a_file_over_the_cap_is_refused_without_being_read() {
        let big = dir("big").join("ca.pem");
        let f = std::fs::File::create(&big).unwrap();
        // Sparse: its length, not its blocks.
        f.set_len(MAX_CA_BYTES + 1).unwrap();
        let err = read_under(&big, &CaFiles::Anywhere).unwrap_err();
        assert!(
            err.contains("more than the 1048576 a CA bundle may be"),
            "{err}"
        );
    }

    #[test]
    fn within_directories_only_their_files_are_read_symlinks_resolved() {
        let allowed = dir("allowed");
        let outside = dir("outside");
        std::fs::write(allowed.join("ca.pem"), b"pem").unwrap();
        std::fs::write(outside.join("ca.pem"), b"theirs").unwrap();
        let escape = allowed.join("escape.pem");
        let _ = std::fs::remove_file(&escape);
        std::os::unix::fs::symlink(outside.join("ca.pem"), &escape).unwrap();
        let rule = CaFiles::Within(vec![allowed.clone()]);
        assert_eq!(read_under(&allowed.join("ca.pem"), &rule).unwrap(), b"pem");
        for path in [
            outside.join("ca.pem"),
            escape,
            allowed.join("../outside/ca.pem"),
            PathBuf::from("/etc/passwd"),
        ] {
            let err = read_under(&path, &rule).unwrap_err();
            assert!(
                err.contains("reads CA files only in the directories"),
                "{err}"
            );
        }
        let none = read_under(&allowed.join("ca.pem"), &CaFiles::Within(Vec::new())).unwrap_err();
        assert!(none.contains("databaseCaDirectories: none"), "{none}");
        // Outside, a file there and one that is not are refused alike: the
        // answer tells nothing of what exists.
        let there = read_under(&outside.join("ca.pem"), &rule).unwrap_err();
        let not_there = read_under(&outside.join("nope.pem"), &rule).unwrap_err();
        assert_eq!(
            there.replace("ca.pem", "X"),
            not_there.replace("nope.pem", "X")
        );
        assert!(read_under(Path::new("relative/ca.pem"), &rule).is_err());
    }
}
