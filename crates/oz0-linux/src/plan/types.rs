//! What a plan is made of: the mounts, the protected paths and how each
//! is held, the placeholders, the binds the stage verifies, the Landlock
//! rules and the sizes of the run's memory file systems.

use oz0_policy::AbsPath;
use serde::{Deserialize, Serialize};

use super::PlanError;
use crate::host::{FileId, HostFacts};

/// One mount operation, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Mount {
    /// Read-only bind of host `src` at `dest`.
    RoBind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
    /// Writable bind.
    Bind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
    /// A symbolic link inside.
    Symlink {
        /// Link text.
        target: String,
        /// Path inside.
        dest: AbsPath,
    },
    /// A fresh procfs for the run's pid namespace.
    Proc {
        /// Path inside.
        dest: AbsPath,
    },
    /// A private tmpfs of a bounded size (bubblewrap mounts it; the stage
    /// sets its size and number of files, which bubblewrap cannot bound,
    /// before anything of the caller runs).
    Tmpfs {
        /// Path inside.
        dest: AbsPath,
        /// Its size.
        #[serde(flatten)]
        size: TmpfsSize,
    },
    /// A host folder bound with device access: the host's `/dev`, aside,
    /// for the stage to build the run's from.
    DevBind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
    /// A folder of mode 0 on the run's root, made by bubblewrap before the
    /// root turns read-only: whatever is opened in or under it answers
    /// `Permission denied` (the node user's secrets under its home).
    Refused {
        /// Path inside.
        dest: AbsPath,
    },
}

impl Mount {
    pub(super) fn dest(&self) -> &AbsPath {
        match self {
            Mount::RoBind { dest, .. }
            | Mount::Bind { dest, .. }
            | Mount::Refused { dest }
            | Mount::DevBind { dest, .. }
            | Mount::Symlink { dest, .. }
            | Mount::Proc { dest }
            | Mount::Tmpfs { dest, .. } => dest,
        }
    }
}

/// How a protected path is held for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protection {
    /// Exists; mounted read-only over itself.
    ReadOnly,
    /// Did not exist; an empty read-only placeholder holds its place (and is
    /// removed after the run if still empty).
    Placeholder,
    /// `.git` folder: mounted over itself, so it cannot be renamed or
    /// replaced; its contents other than hooks and config stay writable.
    Unmovable,
    /// `.git` did not exist: a repository the run creates is its own, and
    /// its hooks are the run's writing.
    AbsentGit,
}

/// One protected path and how it is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protected {
    /// The path (same inside and outside).
    pub path: AbsPath,
    /// How.
    pub how: Protection,
}

/// A placeholder bubblewrap creates on the host as a mount point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// Host path.
    pub path: AbsPath,
    /// File or folder.
    pub kind: PlaceholderKind,
}

/// A bind of a caller's path or a protected path as the stage must find it
/// inside the run: at `path`, a mount of its own whose object is the one the
/// node opened without links (`id`), read-only when `readonly`. bubblewrap
/// binds by path, and another run able to write a parent folder could swap
/// a link in between the node's look and the bind; the stage refuses the run
/// when what is mounted is not what was looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The path (the same inside and on the host).
    pub path: AbsPath,
    /// The object the node opened there.
    pub id: FileId,
    /// Mounted read-only.
    pub readonly: bool,
}

impl Expect {
    /// Host `src` bound at `dest`.
    pub(super) fn at(
        host: &HostFacts,
        src: &AbsPath,
        dest: AbsPath,
        readonly: bool,
    ) -> Result<Expect, PlanError> {
        let id = host
            .id(src)
            .ok_or_else(|| PlanError::NoFacts(src.clone()))?;
        Ok(Expect {
            path: dest,
            id,
            readonly,
        })
    }
}

/// A protected path that exists, bound onto itself by the stage: `id` is
/// the object the node looked at there (the stage refuses the run if it
/// finds another), `readonly` or only unmovable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    /// The path (the same inside and on the host).
    pub path: AbsPath,
    /// The object the node opened there.
    pub id: FileId,
    /// Read-only, or only unmovable.
    pub readonly: bool,
}

/// The kind of a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceholderKind {
    /// An empty folder.
    Dir,
    /// An empty file.
    File,
    /// A file holding `.` and a line break: `commondir` naming `.git`
    /// itself, which git takes as no common directory (an empty one would
    /// stop git).
    SelfRef,
}

/// Landlock rules, with paths as seen inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRules {
    /// Read and execute.
    pub read: Vec<String>,
    /// Everything.
    pub write: Vec<String>,
}

/// The size of a memory file system of the run: its `/tmp` and its `/dev`
/// (with `/dev/shm`), each of which the stage mounts with this size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmpfsSize {
    /// Bytes, in MiB.
    pub size_mib: u64,
    /// Files (inodes).
    pub inodes: u64,
}

impl TmpfsSize {
    /// The tmpfs mount options that bound it: `size=…,nr_inodes=…`.
    pub fn options(&self) -> String {
        format!("size={}m,nr_inodes={}", self.size_mib, self.inodes)
    }
}

/// The empty file placeholders of files are bound from.
pub const PLACEHOLDER_FILE: &str = "empty";
/// The empty folder placeholders of folders are bound from.
pub const PLACEHOLDER_DIR: &str = "empty.d";
/// The file `SelfRef` placeholders are bound from (see [`SELF_REF`]).
pub const PLACEHOLDER_SELF: &str = "self";
/// What a [`PlaceholderKind::SelfRef`] placeholder holds.
pub const SELF_REF: &[u8] = b".\n";
/// Where the stage makes the placeholders' sources ([`PLACEHOLDER_FILE`],
/// [`PLACEHOLDER_DIR`]) inside the run, on the run's own root, as a
/// read-only mount of their own.
pub const PLACEHOLDERS_INSIDE: &str = "/oz0/ph";

impl PlaceholderKind {
    /// The name of the source of a placeholder of this kind, in
    /// [`PLACEHOLDERS_INSIDE`].
    pub fn source_name(self) -> &'static str {
        match self {
            PlaceholderKind::File => PLACEHOLDER_FILE,
            PlaceholderKind::Dir => PLACEHOLDER_DIR,
            PlaceholderKind::SelfRef => PLACEHOLDER_SELF,
        }
    }
}

/// Where bubblewrap binds the host's `/dev` for the stage, which builds the
/// run's `/dev` from it and detaches it before anything of the caller runs
/// (see `devfs`).
pub const HOST_DEV_INSIDE: &str = "/oz0/dev";
/// The device nodes of every run's `/dev`, as bubblewrap's `--dev` has them.
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The capabilities bubblewrap leaves to the stage, in the run's first user
/// namespace only: to build `/dev`, mount the placeholders and make the
/// run's root read-only (`CAP_SYS_ADMIN`), to forbid nested user namespaces
/// there (`CAP_SYS_RESOURCE`, for `user.max_user_namespaces`), and, for a
/// node running as root, to map uid 0 in the user namespace it then makes
/// (`CAP_SETFCAP`: the kernel asks it of whoever makes a namespace that
/// maps uid 0). The stage moves into that namespace and gives up every
/// capability before anything of the caller runs (see `hold`).
pub const STAGE_CAPS: &[&str] = &["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SETFCAP"];
