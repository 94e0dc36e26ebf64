//! Pinning: the node runs only a VMM whose every loaded file has the SHA-256
//! of a release it pins, unless the operator names the folder explicitly.
//!
//! `OZ0_MICROVM` decides: unset — find `smolvm` (or the wheel's `smol-vmm`)
//! on `PATH` and require the pins; `off` — no microVMs; a path — that folder,
//! pinned if it matches, otherwise run anyway with `pinned: false` and a
//! warning. The node never downloads or updates a VMM.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The variable that names or disables the VMM.
pub const MICROVM_VAR: &str = "OZ0_MICROVM";

/// The smolvm release this node pins.
pub const PINNED_RELEASE: &str = "1.24.0";

/// One pinned file: its name in the folder and its SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedFile {
    /// What it is.
    pub role: Role,
    /// File name in the VMM's folder.
    pub name: &'static str,
    /// Lowercase hex SHA-256.
    pub sha256: &'static str,
}

/// What a pinned file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The smolvm command line.
    Cli,
    /// libkrun, the VMM library.
    Libkrun,
    /// libkrunfw, the guest kernel.
    Libkrunfw,
    /// The guest agent's root file system.
    AgentRootfs,
}

/// smolvm 1.24.0 as shipped in the PyPI wheel
/// `smolmachines-1.24.0-cp39-abi3-manylinux_2_34_x86_64.whl` (folder `smol/`).
pub const SMOLVM_1_24_0_WHEEL_X86_64: &[PinnedFile] = &[
    PinnedFile {
        role: Role::Cli,
        name: "smol-vmm",
        sha256: "072676b0bc66e2c9d96b0b6af3091ad4cbda0217becdda966566a36cc0d137b6",
    },
    PinnedFile {
        role: Role::Libkrun,
        name: "libkrun.so.2",
        sha256: "616609688ae42d2fadedb3b9f888ec8bc42b8ed1cd06d6f2acdb09d3c0cea4f3",
    },
    PinnedFile {
        role: Role::Libkrunfw,
        name: "libkrunfw.so.5",
        sha256: "55551f064c961b51954df4be7103b5c8232d1c8231140afb55ac2e748ec1ceb1",
    },
    PinnedFile {
        role: Role::AgentRootfs,
        name: "agent-rootfs.tar",
        sha256: "15daa904b19fb1879d09369f3c4779365e008db3d889c6096dc3a16b3edf682f",
    },
];

/// smolvm 1.24.0 as shipped in the PyPI wheel
/// `smolmachines-1.24.0-cp39-abi3-manylinux_2_34_aarch64.whl` (folder `smol/`).
pub const SMOLVM_1_24_0_WHEEL_AARCH64: &[PinnedFile] = &[
    PinnedFile {
        role: Role::Cli,
        name: "smol-vmm",
        sha256: "4861bff41798e11dfd894289f3b1d11b04bc8e0a2ec8ecd003c1d43d799dc9fb",
    },
    PinnedFile {
        role: Role::Libkrun,
        name: "libkrun.so.2",
        sha256: "f3176c6b0ff1717e9171f52cfbd27da83da0b6c13f180b8b1c315c38aa2698de",
    },
    PinnedFile {
        role: Role::Libkrunfw,
        name: "libkrunfw.so.5",
        sha256: "4decf5ff7f29d2e01f96ae808a11bef600c1cce26ea9382307469e36da5719bd",
    },
    PinnedFile {
        role: Role::AgentRootfs,
        name: "agent-rootfs.tar",
        sha256: "471fe81c69d25ef5ca97256dffba4e339dc05e3d2a4fca809bc9815caf4d6b9f",
    },
];

/// Every layout this build pins, with the architecture (Rust's
/// `std::env::consts::ARCH`) it runs on. A node takes only its own
/// architecture's: another's files would not run, and are not its release.
pub const PINNED_LAYOUTS: &[(&str, &[PinnedFile])] = &[
    ("x86_64", SMOLVM_1_24_0_WHEEL_X86_64),
    ("aarch64", SMOLVM_1_24_0_WHEEL_AARCH64),
];

/// The architectures this build pins smolvm for.
pub fn pinned_arches() -> Vec<&'static str> {
    PINNED_LAYOUTS.iter().map(|(a, _)| *a).collect()
}

/// Names the CLI may have in a folder (release tarball, wheel).
pub const CLI_NAMES: &[&str] = &["smolvm", "smol-vmm"];

/// The release tarball's program: its `smolvm` is a shell script that sets
/// the library path to `lib/` and executes this.
pub const TARBALL_BIN: &str = "smolvm-bin";
/// The release tarball's folder of libraries.
pub const TARBALL_LIB: &str = "lib";

/// Whether `dir` is laid out as smolvm's release tarball unpacks
/// (`smolvm`, `smolvm-bin`, `lib/`), not as the wheel's `smol/` folder.
pub fn is_tarball_layout(dir: &Path) -> bool {
    dir.join(TARBALL_BIN).is_file() && dir.join(TARBALL_LIB).is_dir()
}

/// The VMM the node will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vmm {
    /// Its folder.
    pub dir: PathBuf,
    /// The CLI.
    pub cli: PathBuf,
    /// The folder of its libraries (`SMOLVM_LIB_DIR`): `dir` for the
    /// wheel's layout, `dir/lib` for the release tarball's.
    pub lib_dir: PathBuf,
    /// Each loaded file with its role (paths inside `dir`).
    pub files: Vec<(Role, PathBuf)>,
    /// True when every file matched a pinned release.
    pub pinned: bool,
    /// Set when `pinned` is false: what differed.
    pub warning: Option<String>,
}

/// What `OZ0_MICROVM` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// `off`.
    Off,
    /// Unset or empty: search `PATH`, pins required.
    Search,
    /// A folder named by the operator.
    Named(PathBuf),
}

impl Selection {
    /// Reads the variable's value.
    pub fn from_value(v: Option<&str>) -> Selection {
        match v.map(str::trim) {
            None | Some("") => Selection::Search,
            Some("off") => Selection::Off,
            Some(p) => Selection::Named(PathBuf::from(p)),
        }
    }
}

/// Why no VMM can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// `OZ0_MICROVM=off`.
    #[error("microVMs are turned off ({MICROVM_VAR}=off)")]
    Off,
    /// Nothing found.
    #[error("no smolvm found on PATH: install smolvm {PINNED_RELEASE} (pip install --require-hashes smolmachines=={PINNED_RELEASE}, or the release tarball) and put it on PATH, or name its folder with {MICROVM_VAR}=/path")]
    NotFound,
    /// A named folder lacks a file.
    #[error("{dir}: no {name} there: name the folder holding smolvm and its libraries ({MICROVM_VAR}=/path)")]
    Missing {
        /// The folder.
        dir: PathBuf,
        /// The missing file.
        name: String,
    },
    /// Found, but not what we pin.
    #[error("smolvm is not a release this node pins, so it does not run it: {detail}; install smolvm {PINNED_RELEASE} unmodified, or name its folder with {MICROVM_VAR}=/path to run it unpinned")]
    Unpinned {
        /// Which file and how.
        detail: Mismatch,
    },
    /// A file could not be read.
    #[error("{path}: {error}: the node's user must be able to read smolvm's files")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        error: String,
    },
}

/// How a folder differs from the layouts pinned for an architecture: the
/// first difference met, or the other architecture's release it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Mismatch {
    /// A pinned file is not in the folder.
    #[error("{} is missing", .0.display())]
    Missing(PathBuf),
    /// A file's SHA-256 is not the pinned one.
    #[error("{} has SHA-256 {got}, not the {want} of smolvm {PINNED_RELEASE}", path.display())]
    Hash {
        /// The file.
        path: PathBuf,
        /// Its SHA-256.
        got: String,
        /// The pinned one.
        want: &'static str,
    },
    /// The folder is laid out as the release tarball unpacks, whose files
    /// this build does not pin.
    #[error("{} is laid out as smolvm's release tarball unpacks (smolvm, smolvm-bin, lib/), and this build pins only the files of smolvm {PINNED_RELEASE}'s PyPI wheel: the tarball's own SHA-256 is published, its files' are not, so none of them is pinned; install the wheel (pip install --require-hashes smolmachines=={PINNED_RELEASE}) and put its smol folder on PATH", .0.display())]
    Tarball(PathBuf),
    /// This build pins no release for the architecture.
    #[error("this build pins no smolvm for {0}")]
    NoLayout(String),
    /// Others than its owner may write the folder or a pinned file: one
    /// swapped between its check and the VM's start would run unpinned.
    #[error("{} may be written by users other than its owner (mode {mode:o}), so a file could be swapped after its check: chmod go-w it", path.display())]
    Writable {
        /// The folder or file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The folder holds the pinned release of another architecture.
    #[error("it is smolvm {PINNED_RELEASE} for {other}, and this node runs on {arch}")]
    OtherArch {
        /// The release's architecture.
        other: &'static str,
        /// This node's.
        arch: String,
    },
}

/// Why `path` (what it leads to) is no pinned file's place: group or
/// others may write it.
fn others_may_write(path: &Path) -> Option<Mismatch> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o022 != 0).then(|| Mismatch::Writable {
        path: path.to_path_buf(),
        mode: mode & 0o7777,
    })
}

/// SHA-256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, PinError> {
    let err = |e: std::io::Error| PinError::Read {
        path: path.to_path_buf(),
        error: e.to_string(),
    };
    let mut f = File::open(path).map_err(err)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks the folder `dir` against each layout pinned for this build's
/// architecture.
fn check_layouts(dir: &Path) -> Result<Result<Vmm, Mismatch>, PinError> {
    check_layouts_for(dir, std::env::consts::ARCH)
}

/// Checks the folder `dir` against each layout pinned for `arch`. `Ok`
/// with the first layout that matches entirely; `Err` with the first
/// mismatch otherwise (or, when the folder is another architecture's
/// release, which).
pub fn check_layouts_for(dir: &Path, arch: &str) -> Result<Result<Vmm, Mismatch>, PinError> {
    let mut best: Option<Mismatch> = None;
    if let Some(w) = others_may_write(dir) {
        return Ok(Err(w));
    }
    for (_, layout) in PINNED_LAYOUTS.iter().filter(|(a, _)| *a == arch) {
        let mut files = Vec::new();
        let mut mismatch = None;
        for p in layout.iter() {
            let path = dir.join(p.name);
            if std::fs::symlink_metadata(&path).is_err() {
                mismatch = Some(Mismatch::Missing(path));
                break;
            }
            if let Some(w) = others_may_write(&path) {
                mismatch = Some(w);
                break;
            }
            let got = sha256_file(&path)?;
            if got != p.sha256 {
                mismatch = Some(Mismatch::Hash {
                    path,
                    got,
                    want: p.sha256,
                });
                break;
            }
            files.push((p.role, path));
        }
        match mismatch {
            None => {
                let cli = files
                    .iter()
                    .find(|(r, _)| *r == Role::Cli)
                    .map(|(_, p)| p.clone())
                    .expect("every layout pins its CLI");
                return Ok(Ok(Vmm {
                    dir: dir.to_path_buf(),
                    cli,
                    lib_dir: dir.to_path_buf(),
                    files,
                    pinned: true,
                    warning: None,
                }));
            }
            Some(m) => {
                best.get_or_insert(m);
            }
        }
    }
    let mut detail = best.unwrap_or_else(|| Mismatch::NoLayout(arch.to_string()));
    if matches!(detail, Mismatch::Missing(_)) && is_tarball_layout(dir) {
        detail = Mismatch::Tarball(dir.to_path_buf());
    }
    // Another architecture's release says so, instead of only "a hash differs".
    for (other, layout) in PINNED_LAYOUTS.iter().filter(|(a, _)| *a != arch) {
        let matches = layout
            .iter()
            .all(|p| sha256_file(&dir.join(p.name)).is_ok_and(|h| h == p.sha256));
        if matches {
            detail = Mismatch::OtherArch {
                other,
                arch: arch.to_string(),
            };
        }
    }
    Ok(Err(detail))
}

/// The files a folder holds that smolvm loads, whatever their hashes: the
/// wheel's layout (the CLI, its libraries and the agent's root beside it),
/// or the release tarball's (`smolvm-bin`, libraries in `lib/`, the agent's
/// root beside it), where the program is `smolvm-bin` and not the `smolvm`
/// script that starts it.
fn unpinned_files(dir: &Path) -> Result<Vmm, PinError> {
    let tarball = is_tarball_layout(dir);
    let (cli, lib_dir) = if tarball {
        (dir.join(TARBALL_BIN), dir.join(TARBALL_LIB))
    } else {
        let cli = CLI_NAMES
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| PinError::Missing {
                dir: dir.to_path_buf(),
                name: CLI_NAMES.join(" or "),
            })?;
        (cli, dir.to_path_buf())
    };
    let mut files = vec![(Role::Cli, cli.clone())];
    for (role, base, names) in [
        (
            Role::Libkrun,
            &lib_dir,
            &["libkrun.so.2", "libkrun.so.1", "libkrun.so"][..],
        ),
        (
            Role::Libkrunfw,
            &lib_dir,
            &["libkrunfw.so.5", "libkrunfw.so.4", "libkrunfw.so"][..],
        ),
        (
            Role::AgentRootfs,
            &dir.to_path_buf(),
            &["agent-rootfs.tar", "agent-rootfs"][..],
        ),
    ] {
        if let Some(p) = names.iter().map(|n| base.join(n)).find(|p| p.exists()) {
            files.push((role, p));
        }
    }
    Ok(Vmm {
        dir: dir.to_path_buf(),
        cli,
        lib_dir,
        files,
        pinned: false,
        warning: None,
    })
}

/// Finds the VMM: `selection` from `OZ0_MICROVM`, `path_var` the `PATH` to
/// search. Every file is hashed now; call again before each use.
pub fn select(selection: &Selection, path_var: Option<&str>) -> Result<Vmm, PinError> {
    match selection {
        Selection::Off => Err(PinError::Off),
        Selection::Named(dir) => match check_layouts(dir)? {
            Ok(vmm) => Ok(vmm),
            Err(detail) => {
                let mut vmm = unpinned_files(dir)?;
                vmm.warning = Some(format!(
                    "smolvm in {} is not a release this node pins ({detail}); it runs only because {MICROVM_VAR} names it",
                    dir.display()
                ));
                Ok(vmm)
            }
        },
        Selection::Search => {
            let found = path_var
                .unwrap_or("")
                .split(':')
                .filter(|d| !d.is_empty())
                .flat_map(|d| CLI_NAMES.iter().map(move |n| Path::new(d).join(n)))
                .find(|p| p.is_file())
                .ok_or(PinError::NotFound)?;
            // A symlink on PATH (the README's `ln -s`) leads to the folder.
            let real = std::fs::canonicalize(&found).map_err(|e| PinError::Read {
                path: found.clone(),
                error: e.to_string(),
            })?;
            let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
            match check_layouts(&dir)? {
                Ok(vmm) => Ok(vmm),
                Err(detail) => Err(PinError::Unpinned { detail }),
            }
        }
    }
}

/// Re-checks a VMM's files just before use: a pinned VMM whose file changed
/// since it was selected is refused.
pub fn recheck(vmm: &Vmm) -> Result<(), PinError> {
    if !vmm.pinned {
        return Ok(());
    }
    match check_layouts(&vmm.dir)? {
        Ok(_) => Ok(()),
        Err(detail) => Err(PinError::Unpinned { detail }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_values() {
        assert_eq!(Selection::from_value(None), Selection::Search);
        assert_eq!(Selection::from_value(Some("")), Selection::Search);
        assert_eq!(Selection::from_value(Some("off")), Selection::Off);
        assert_eq!(
            Selection::from_value(Some("/opt/smolvm")),
            Selection::Named("/opt/smolvm".into())
        );
    }

    #[test]
    fn pins_are_well_formed() {
        assert_eq!(pinned_arches(), ["x86_64", "aarch64"]);
        for (_, l) in PINNED_LAYOUTS {
            assert!(l.iter().any(|p| p.role == Role::Cli));
            for p in l.iter() {
                assert_eq!(p.sha256.len(), 64);
                assert!(p
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            }
        }
    }

    #[test]
    fn the_tarballs_layout_is_named_on_path_and_its_program_used_when_named() {
        let d = std::env::temp_dir().join(format!("oz0-pin-tarball-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("lib")).unwrap();
        std::fs::write(d.join("smolvm"), b"#!/bin/sh\n").unwrap();
        std::fs::write(d.join("smolvm-bin"), b"").unwrap();
        std::fs::write(d.join("lib/libkrun.so.1"), b"").unwrap();
        std::fs::create_dir(d.join("agent-rootfs")).unwrap();
        let e = select(&Selection::Search, d.to_str()).unwrap_err();
        assert_eq!(
            e,
            PinError::Unpinned {
                detail: Mismatch::Tarball(d.clone())
            }
        );
        let v = select(&Selection::Named(d.clone()), None).unwrap();
        assert_eq!(
            (v.cli.clone(), v.lib_dir.clone()),
            (d.join("smolvm-bin"), d.join("lib"))
        );
        assert_eq!(
            v.files,
            [
                (Role::Cli, d.join("smolvm-bin")),
                (Role::Libkrun, d.join("lib/libkrun.so.1")),
                (Role::AgentRootfs, d.join("agent-rootfs")),
            ]
        );
        // The wheel's layout is not taken for the tarball's.
        std::fs::remove_file(d.join("smolvm-bin")).unwrap();
        let e = select(&Selection::Search, d.to_str()).unwrap_err();
        assert!(
            matches!(
                &e,
                PinError::Unpinned {
                    detail: Mismatch::Missing(_)
                }
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A folder others may write is no pinned release's, whatever it
    /// holds: a file could be swapped between its check and its run.
    #[test]
    fn a_folder_others_may_write_is_not_pinned() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("oz0-pin-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("smolvm"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = select(&Selection::Search, d.to_str()).unwrap_err();
        assert!(
            matches!(
                &e,
                PinError::Unpinned {
                    detail: Mismatch::Writable { mode: 0o777, .. }
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fake_folder_is_refused_on_path_and_unpinned_when_named() {
        let d = std::env::temp_dir().join(format!("oz0-pin-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("smolvm"), b"#!/bin/sh\n").unwrap();
        let e = select(&Selection::Search, d.to_str()).unwrap_err();
        assert!(matches!(e, PinError::Unpinned { .. }), "{e:?}");
        assert!(e.to_string().contains("not a release this node pins"));
        let v = select(&Selection::Named(d.clone()), None).unwrap();
        assert!(!v.pinned && v.warning.is_some());
        assert_eq!(
            select(&Selection::Search, Some("/nonexistent")),
            Err(PinError::NotFound)
        );
        assert_eq!(select(&Selection::Off, None), Err(PinError::Off));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
