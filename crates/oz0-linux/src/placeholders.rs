//! The placeholders of one run: empty folders and files the node makes on
//! the host, in the run's writable folders, where protected paths do not
//! exist yet, so that the stage can mount them read-only (a run must not
//! create `.git/hooks` or `.claude` where there was none). They are made
//! while bubblewrap builds the sandbox and removed as soon as the run's
//! last process is gone, only if they are still what the node made, and
//! never through a link.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::outcome::SandboxError;
use crate::plan::{self, Placeholder, PlaceholderKind};
use crate::pool::{Back, Pool, Taken};
use crate::record::record_run;

/// Removes the placeholders the node made, if they are still what it made
/// (an empty folder or empty regular file), never following a link: each
/// folder holding placeholders is opened once, without following any link
/// on the way, and the entries are looked at and removed through it. Empty
/// folders go back to `pool` when it can take them; files are removed in
/// place (an empty file holds no block: its removal waits for no disk).
pub(crate) fn remove_placeholders(ps: &[Placeholder], mut pool: Option<&mut Pool>) {
    use rustix::fs::{statat, unlinkat, AtFlags, FileType};
    let mut folders = crate::hold::Folders::default();
    for p in ps.iter().rev() {
        let Ok((dir, name)) = folders.place(p) else {
            continue;
        };
        if let (Some(pool), PlaceholderKind::Dir) = (pool.as_deref_mut(), p.kind) {
            match pool.give_back(dir, name) {
                Back::Aside | Back::Leave => continue,
                Back::Remove => {}
            }
        }
        let Ok(st) = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        let _ = match p.kind {
            PlaceholderKind::Dir if ft == FileType::Directory => {
                unlinkat(dir, name, AtFlags::REMOVEDIR)
            }
            PlaceholderKind::File if ft == FileType::RegularFile && st.st_size == 0 => {
                unlinkat(dir, name, AtFlags::empty())
            }
            PlaceholderKind::SelfRef
                if ft == FileType::RegularFile && holds_self_ref(dir, name) =>
            {
                unlinkat(dir, name, AtFlags::empty())
            }
            _ => continue,
        };
    }
}

/// Whether `name` in `dir` (not followed if a link) holds exactly
/// [`plan::SELF_REF`], as a `SelfRef` placeholder the node made does.
fn holds_self_ref(dir: &OwnedFd, name: &Path) -> bool {
    use rustix::fs::{openat, Mode, OFlags};
    let Ok(f) = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut buf = [0u8; 8];
    rustix::io::read(&f, &mut buf).is_ok_and(|n| &buf[..n] == plan::SELF_REF)
}

/// Makes the placeholders on the host: an empty folder or an empty file
/// (each moved from `pool` when it can) at each place, under its folder
/// opened without following any link. A name that exists meanwhile is left
/// for the stage to check (it must be of the placeholder's kind).
fn make_placeholders(
    ps: &[Placeholder],
    pool: &mut Option<Pool>,
) -> Result<(), crate::hold::PlaceError> {
    use rustix::fs::{mkdirat, Mode};
    use rustix::io::Errno;
    let mut folders = crate::hold::Folders::default();
    for p in ps {
        let (dir, name) = folders.place(p)?;
        let made = match p.kind {
            PlaceholderKind::Dir => match pool.as_mut().map(|pl| pl.take(dir, name)) {
                Some(Taken::Moved | Taken::Exists) => Ok(()),
                Some(Taken::No) | None => mkdirat(dir, name, Mode::from_raw_mode(0o755)),
            },
            PlaceholderKind::File => match pool.as_mut().map(|pl| pl.take_file(dir, name)) {
                Some(Taken::Moved | Taken::Exists) => Ok(()),
                Some(Taken::No) | None => create_new(dir, name).map(drop),
            },
            PlaceholderKind::SelfRef => {
                create_new(dir, name).and_then(|f| rustix::io::write(&f, plan::SELF_REF).map(drop))
            }
        };
        match made {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(source) => {
                return Err(crate::hold::PlaceError::Create {
                    path: p.path.to_string(),
                    source,
                })
            }
        }
    }
    Ok(())
}

/// An empty file made new at `name` in `dir` (never through a link).
fn create_new(dir: &OwnedFd, name: &Path) -> Result<OwnedFd, rustix::io::Errno> {
    use rustix::fs::{openat, Mode, OFlags};
    openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
}

/// The placeholders of one run: made while
/// bubblewrap builds the sandbox (the stage waits for the word on
/// [`fds::READY`]), removed once.
pub(crate) struct Holders {
    /// The run's private folder, where the run is recorded.
    record: PathBuf,
    /// The writable folders the run holds.
    roots: Vec<PathBuf>,
    pool: Option<Pool>,
    pub(crate) removed: bool,
    /// The pipe's write end, until the making starts.
    ready: Option<OwnedFd>,
    /// When the run's folder was made (its `ctime`).
    made: std::time::Duration,
    /// From when the run could change anything: a stamp of the file clock
    /// later than `made`, taken as the making starts (before the stage is
    /// told to go on). What is stamped at or after it is the run's (see
    /// `gitlook`).
    pub(crate) since: Option<std::time::Duration>,
}

impl Holders {
    /// The holders of a run, and the end of the pipe the stage reads.
    pub(crate) fn new(
        record: &Path,
        made: std::time::Duration,
        roots: Vec<PathBuf>,
    ) -> Result<(Holders, OwnedFd), SandboxError> {
        let (ready_r, ready_w) = crate::spawn::pipe()?;
        let holders = Holders {
            record: record.to_path_buf(),
            roots,
            pool: None,
            removed: false,
            ready: Some(ready_w),
            made,
            since: None,
        };
        Ok((holders, ready_r))
    }

    /// Makes `ps` (once bubblewrap is on its way: this thread has nothing
    /// else to do while bubblewrap builds the sandbox) and tells the stage
    /// they are all there, or why not.
    pub(crate) fn start(
        &mut self,
        ps: &[Placeholder],
        data_dir: &Path,
        run_id: &str,
    ) -> Result<(), SandboxError> {
        let Some(ready) = self.ready.take() else {
            return Ok(());
        };
        // Nothing of the run has started: what is stamped from here on may
        // be its doing, what was stamped before may not.
        self.since = Some(crate::record::later_stamp(&self.record, self.made));
        // Recorded before anything is created, so that a sweep can undo it
        // if this process dies.
        if let Err(e) = record_run(&self.record, &self.roots, ps) {
            let _ = File::from(ready).write_all(e.to_string().as_bytes());
            return Err(e);
        }
        if !ps.is_empty() {
            self.pool = Pool::open(data_dir, run_id);
        }
        let word = match make_placeholders(ps, &mut self.pool) {
            Ok(()) => crate::hold::READY_WORD.to_vec(),
            Err(e) => e.to_string().into_bytes(),
        };
        let _ = File::from(ready).write_all(&word);
        // The stage goes on now; meanwhile the pool is tended (used folders
        // removed, fresh ones made) instead of only waiting.
        if let Some(pool) = &mut self.pool {
            pool.tend();
        }
        Ok(())
    }

    /// Removes what was made (once).
    pub(crate) fn remove(&mut self, ps: &[Placeholder]) {
        self.ready = None;
        if !self.removed {
            remove_placeholders(ps, self.pool.as_mut());
            self.removed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::AbsPath;
    use std::fs;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "oz0-launch-unit-{tag}-{}",
            crate::record::new_run_id()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn ph(path: &Path, kind: PlaceholderKind) -> Placeholder {
        Placeholder {
            path: AbsPath::from_path(path).unwrap(),
            kind,
        }
    }

    /// Only what is still an empty placeholder goes; nothing is reached
    /// through a link, in the last component or on the way.
    #[test]
    fn placeholder_removal_takes_only_empty_placeholders_and_follows_no_link() {
        for with_pool in [false, true] {
            let base = tmp(if with_pool { "rm-pool" } else { "rm" });
            let work = base.join("work");
            let elsewhere = base.join("elsewhere");
            fs::create_dir_all(work.join(".git")).unwrap();
            fs::create_dir_all(elsewhere.join(".claude")).unwrap();
            fs::write(elsewhere.join("config"), b"").unwrap();
            fs::create_dir(work.join(".claude")).unwrap();
            fs::write(work.join(".mcp.json"), b"").unwrap();
            fs::write(work.join(".bashrc"), b"written by the run").unwrap();
            fs::create_dir(work.join(".vscode")).unwrap();
            fs::write(work.join(".vscode/settings.json"), b"{}").unwrap();
            std::os::unix::fs::symlink(elsewhere.join(".claude"), work.join(".codex")).unwrap();
            // A file placeholder replaced by a link to an empty file: the
            // link stays (what the pool's give-back of files checked).
            std::os::unix::fs::symlink(elsewhere.join("config"), work.join(".profile")).unwrap();
            // A parent replaced by a link: nothing under it may be touched.
            std::os::unix::fs::symlink(&elsewhere, work.join("linked")).unwrap();
            let list = [
                ph(&work.join(".claude"), PlaceholderKind::Dir),
                ph(&work.join(".mcp.json"), PlaceholderKind::File),
                ph(&work.join(".bashrc"), PlaceholderKind::File),
                ph(&work.join(".vscode"), PlaceholderKind::Dir),
                ph(&work.join(".codex"), PlaceholderKind::Dir),
                ph(&work.join("linked/.claude"), PlaceholderKind::Dir),
                ph(&work.join("linked/config"), PlaceholderKind::File),
                ph(&work.join(".zshrc"), PlaceholderKind::File),
                ph(&work.join(".profile"), PlaceholderKind::File),
            ];
            let mut pool = with_pool.then(|| Pool::open(&base.join("data"), "t").unwrap());
            remove_placeholders(&list, pool.as_mut());
            assert!(!work.join(".claude").exists() && !work.join(".mcp.json").exists());
            assert_eq!(
                fs::read(work.join(".bashrc")).unwrap(),
                b"written by the run"
            );
            assert!(work.join(".vscode/settings.json").is_file());
            assert!(fs::symlink_metadata(work.join(".codex")).is_ok());
            assert!(fs::symlink_metadata(work.join(".profile"))
                .unwrap()
                .file_type()
                .is_symlink());
            assert!(elsewhere.join(".claude").is_dir() && elsewhere.join("config").is_file());
            if with_pool {
                // Only the empty folder went out of the way, to be removed;
                // the empty file was removed in place.
                let used = base.join("data").join(crate::pool::POOL_DIR).join("used");
                assert_eq!(fs::read_dir(used).unwrap().count(), 1);
            }
            fs::remove_dir_all(&base).unwrap();
        }
    }

    /// Placeholders are made under folders reached without links, from the
    /// pool when it has spare folders; what exists is left alone; a link on
    /// the way refuses the run.
    #[test]
    fn placeholders_are_made_without_links_and_from_the_pool() {
        let base = tmp("make");
        let (work, data) = (base.join("work"), base.join("data"));
        fs::create_dir_all(&work).unwrap();
        fs::write(work.join(".bashrc"), b"mine").unwrap();
        let list = [
            ph(&work.join(".claude"), PlaceholderKind::Dir),
            ph(&work.join(".codex"), PlaceholderKind::Dir),
            ph(&work.join(".mcp.json"), PlaceholderKind::File),
            ph(&work.join(".envrc"), PlaceholderKind::File),
            ph(&work.join(".bashrc"), PlaceholderKind::File),
        ];
        // First run: the pool is empty, folders are made; removal puts them
        // out of the way (files are removed in place), and tending the pool
        // makes fresh ones.
        let mut pool = Pool::open(&data, "a");
        make_placeholders(&list, &mut pool).unwrap();
        assert!(work.join(".claude").is_dir() && work.join(".codex").is_dir());
        assert_eq!(fs::metadata(work.join(".mcp.json")).unwrap().len(), 0);
        assert_eq!(fs::read(work.join(".bashrc")).unwrap(), b"mine");
        remove_placeholders(&list[..4], pool.as_mut());
        let pool_dir = data.join(crate::pool::POOL_DIR);
        let count = |sub: &str| fs::read_dir(pool_dir.join(sub)).unwrap().count();
        assert_eq!(count("used"), 2);
        assert_eq!(fs::read_dir(&work).unwrap().count(), 1);
        pool.as_mut().unwrap().tend();
        let fresh = count("fresh");
        assert_eq!(count("used"), 0);
        // Second run: the folders and the files come from the fresh ones.
        let files = count("fresh-files");
        assert!(files > 0);
        let mut pool = Pool::open(&data, "b");
        make_placeholders(&list, &mut pool).unwrap();
        assert!(work.join(".claude").is_dir() && work.join(".codex").is_dir());
        assert_eq!(fs::metadata(work.join(".mcp.json")).unwrap().len(), 0);
        assert_eq!(fs::read(work.join(".bashrc")).unwrap(), b"mine");
        assert_eq!(count("fresh"), fresh - 2);
        assert_eq!(count("fresh-files"), files - 2);
        assert_eq!(fs::metadata(work.join(".envrc")).unwrap().len(), 0);
        remove_placeholders(&list[..4], pool.as_mut());
        assert_eq!(fs::read_dir(&work).unwrap().count(), 1);
        // Folders went aside, files were removed in place.
        assert_eq!((count("used"), count("fresh-files")), (2, files - 2));
        // A link on the way: refused, nothing made through it.
        let elsewhere = base.join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, work.join("linked")).unwrap();
        let err = make_placeholders(
            &[ph(&work.join("linked/.claude"), PlaceholderKind::Dir)],
            &mut None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("linked"), "{err}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        fs::remove_dir_all(&base).unwrap();
    }
}
