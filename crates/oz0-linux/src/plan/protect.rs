//! The protected paths of a plan: each held read-only (or unmovable) by
//! the stage, or given a placeholder where it does not exist yet; and every
//! mount point the run must have once the stage is done.

use oz0_policy::protected::{self, Kind};
use oz0_policy::AbsPath;

use super::*;
use crate::host::{Entry, HostFacts, ProtectedFacts};

/// Every mount point the run has once the stage is done, sorted (a path
/// mounted on twice is there twice): the root; each of `mounts` but the
/// host's `/dev`, which the stage detaches, with the host's mount points
/// (`host_mounts`) under each folder bound (a bind takes them along); the
/// stage's `/dev` and its devices; the placeholders' sources; the holds and
/// the placeholders. The stage finds exactly these, or refuses the run
/// (see `hold::verify_mount_table`).
pub(super) fn mount_points(
    mounts: &[Mount],
    host_mounts: &[String],
    devices: &[String],
    holds: &[Hold],
    placeholders: &[Placeholder],
) -> Vec<String> {
    let mut points = vec!["/".to_string()];
    for m in mounts {
        match m {
            Mount::RoBind { src, dest } | Mount::Bind { src, dest } => {
                points.push(dest.to_string());
                for h in host_mounts {
                    if let Some(rest) = h.strip_prefix(src.as_str()) {
                        if rest.starts_with('/') && src.as_str() != "/" {
                            points.push(format!("{dest}{rest}"));
                        } else if src.as_str() == "/" && h != "/" {
                            points.push(format!("{}{h}", dest.as_str().trim_end_matches('/')));
                        }
                    }
                }
            }
            Mount::Proc { dest } | Mount::Tmpfs { dest, .. } => points.push(dest.to_string()),
            Mount::DevBind { .. } | Mount::Symlink { .. } | Mount::Refused { .. } => {}
        }
    }
    points.push("/dev".into());
    points.extend(devices.iter().map(|d| format!("/dev/{d}")));
    points.push("/dev/pts".into());
    if !placeholders.is_empty() {
        points.push(PLACEHOLDERS_INSIDE.into());
    }
    points.extend(holds.iter().map(|h| h.path.to_string()));
    points.extend(placeholders.iter().map(|p| p.path.to_string()));
    points.sort();
    points
}

/// Collects the holds, reports and placeholders of the protected paths.
pub(super) struct Holder<'a> {
    pub(super) host: &'a HostFacts,
    pub(super) protected: &'a mut Vec<Protected>,
    pub(super) placeholders: &'a mut Vec<Placeholder>,
    pub(super) holds: &'a mut Vec<Hold>,
}

impl Holder<'_> {
    /// Binds what is at `path` onto itself (the stage does it): read-only,
    /// or (`!readonly`) so that it cannot be renamed or replaced.
    fn bind_in_place(&mut self, path: AbsPath, readonly: bool) -> Result<(), PlanError> {
        let id = self
            .host
            .id(&path)
            .ok_or_else(|| PlanError::NoFacts(path.clone()))?;
        self.holds.push(Hold {
            path: path.clone(),
            id,
            readonly,
        });
        let how = if readonly {
            Protection::ReadOnly
        } else {
            Protection::Unmovable
        };
        self.protected.push(Protected { path, how });
        Ok(())
    }

    /// Holds `path` read-only: over itself if it exists, with an empty
    /// placeholder of `kind` if it does not; a link refuses the run.
    fn hold(&mut self, path: AbsPath, kind: Kind, entry: &Entry) -> Result<(), PlanError> {
        match entry {
            Entry::Symlink(_) => Err(PlanError::ProtectedSymlink(path)),
            Entry::Missing => {
                let kind = match kind {
                    Kind::Dir => PlaceholderKind::Dir,
                    Kind::File => PlaceholderKind::File,
                    Kind::SelfRef => PlaceholderKind::SelfRef,
                };
                self.placeholders.push(Placeholder {
                    path: path.clone(),
                    kind,
                });
                self.protected.push(Protected {
                    path,
                    how: Protection::Placeholder,
                });
                Ok(())
            }
            Entry::Dir | Entry::File | Entry::Other => self.bind_in_place(path, true),
        }
    }

    pub(super) fn root(&mut self, facts: &ProtectedFacts) -> Result<(), PlanError> {
        let root = &facts.root;
        for (name, kind, entry) in &facts.names {
            self.hold(root.join(name).expect("constant name"), *kind, entry)?;
        }
        let git = root.join(protected::GIT_DIR).expect("constant name");
        match &facts.git {
            Entry::Symlink(_) => Err(PlanError::ProtectedSymlink(git)),
            Entry::Missing => {
                self.protected.push(Protected {
                    path: git,
                    how: Protection::AbsentGit,
                });
                Ok(())
            }
            Entry::File | Entry::Other => self.hold(git, Kind::File, &facts.git),
            Entry::Dir => self.git(&git, facts),
        }
    }

    /// The rule of `.git` (see `oz0_policy::protected`): unmovable, every
    /// entry git does not write in ordinary work read-only (held when
    /// missing), `objects` and `objects/info` unmovable and the alternates
    /// in it held.
    fn git(&mut self, git: &AbsPath, facts: &ProtectedFacts) -> Result<(), PlanError> {
        self.bind_in_place(git.clone(), false)?;
        let at = |name: &str| git.join(name).map_err(|_| PlanError::NoFacts(git.clone()));
        for (name, entry) in &facts.git_entries {
            if name == "objects" {
                match entry {
                    Entry::Dir => self.bind_in_place(at(name)?, false)?,
                    Entry::Symlink(_) => return Err(PlanError::ProtectedSymlink(at(name)?)),
                    _ => {}
                }
            } else if !protected::git_writable(name) {
                let kind = protected::GIT_HELD
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(Kind::File, |(_, k)| *k);
                self.hold(at(name)?, kind, entry)?;
            }
        }
        let info = join_all(git, protected::GIT_OBJECTS_INFO);
        match &facts.objects_info {
            Entry::Dir => {
                self.bind_in_place(info.clone(), false)?;
                for (name, kind, entry) in &facts.objects_held {
                    self.hold(info.join(name).expect("constant name"), *kind, entry)?;
                }
            }
            Entry::Symlink(_) => return Err(PlanError::ProtectedSymlink(info)),
            // Without objects/info no alternates can be read; a run that
            // makes it is the look's.
            _ => {}
        }
        Ok(())
    }
}
