//! The look at git after a run: what it finds, what it renames aside, what it never follows.

use super::*;
use std::fs;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oz0-gitlook-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn run_look(root: &Path, start: Duration, policy: Policy) -> GitLook {
    let fd = crate::hostfs::open_no_links(root, OFlags::RDONLY | OFlags::DIRECTORY).unwrap();
    look(&[(root, &fd)], start, policy, "r1")
}

/// Now, by the kernel's clock for file changes: the `ctime` of a new
/// file (as the node takes it from a folder it makes).
fn now(root: &Path) -> Duration {
    let mark = root.join(format!("mark-{:?}", std::time::Instant::now()));
    fs::write(&mark, "").unwrap();
    let st = rustix::fs::stat(&mark).unwrap();
    fs::remove_file(&mark).unwrap();
    super::ctime(&st)
}

fn repo(at: &Path) {
    for d in ["objects/info", "refs/heads", "hooks"] {
        fs::create_dir_all(at.join(d)).unwrap();
    }
    fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(
        at.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
    )
    .unwrap();
    fs::write(at.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
}

/// What a run left is found wherever it is, renamed aside with
/// Neutralise, and only reported with Report; what was there before
/// the run is not the run's.
#[test]
fn finds_what_host_git_would_run_and_puts_it_aside() {
    for policy in [Policy::Neutralise, Policy::Report] {
        let root = tmp(&format!("{policy:?}"));
        // Before the run: the user's own repository, with a hook.
        repo(&root.join(".git"));
        fs::write(root.join(".git/hooks/pre-push"), "#!/bin/sh\n").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let start = now(&root);
        // The run: a nested repository with a dangerous config and a
        // hook, a commondir, alternates, a bare repository, a .git file.
        repo(&root.join("src/.git"));
        fs::write(
            root.join("src/.git/config"),
            "[core]\n\tfsmonitor = touch /tmp/x\n[alias]\n\tx = !sh\n",
        )
        .unwrap();
        fs::write(root.join("src/.git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        fs::write(root.join(".git/commondir"), "/elsewhere\n").unwrap();
        fs::write(root.join(".git/objects/info/alternates"), "/elsewhere\n").unwrap();
        repo(&root.join("deep/bare.git"));
        fs::write(
            root.join("deep/bare.git/config"),
            "[core]\n\tsshCommand = x\n",
        )
        .unwrap();
        fs::create_dir_all(root.join("wt")).unwrap();
        fs::write(root.join("wt/.git"), "gitdir: ../deep/bare.git\n").unwrap();
        // A repository made the way `git init` makes it: nothing found.
        repo(&root.join("clean/.git"));

        let l = run_look(&root, start, policy);
        assert!(l.complete);
        let found: Vec<(String, &What)> = l
            .findings
            .iter()
            .map(|f| {
                (
                    f.path.strip_prefix(&root).unwrap().display().to_string(),
                    &f.what,
                )
            })
            .collect();
        let has = |p: &str| found.iter().any(|(q, _)| q == p);
        for p in [
            ".git/commondir",
            ".git/objects/info/alternates",
            "src/.git/config",
            "src/.git/hooks/post-checkout",
            "deep/bare.git/config",
            "wt/.git",
        ] {
            assert!(has(p), "{p} not found: {found:?}");
        }
        assert!(
            !has(".git/hooks/pre-push"),
            "the user's own hook: {found:?}"
        );
        assert!(
            !found.iter().any(|(p, _)| p.starts_with("clean")),
            "{found:?}"
        );
        let src = l
            .findings
            .iter()
            .find(|f| f.path.ends_with("src/.git/config"))
            .unwrap();
        assert_eq!(
            src.what,
            What::Config {
                settings: vec!["core.fsmonitor".into(), "alias.x".into()]
            }
        );
        match policy {
            Policy::Neutralise => {
                assert!(!root.join(".git/commondir").exists());
                assert!(root.join(".git/commondir.oz0-quarantine-r1").exists());
                assert!(!root.join("src/.git/hooks/post-checkout").exists());
                assert!(!root.join("wt/.git").exists());
                assert!(l.findings.iter().all(|f| f.aside.is_some()), "{l:?}");
                // A second look finds nothing left.
                assert!(run_look(&root, start, policy).findings.is_empty());
            }
            Policy::Report => {
                assert!(root.join(".git/commondir").exists());
                assert!(l.findings.iter().all(|f| f.aside.is_none()));
            }
        }
        fs::remove_dir_all(&root).unwrap();
    }
}

/// No link is followed: a `.git` that is a link is a finding, and a
/// folder reached only through a link is not walked.
#[test]
fn follows_no_link() {
    let root = tmp("links");
    let elsewhere = tmp("links-elsewhere");
    repo(&elsewhere.join(".git"));
    let start = now(&root);
    std::os::unix::fs::symlink(elsewhere.join(".git"), root.join(".git")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("linked")).unwrap();
    fs::write(elsewhere.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    let l = run_look(&root, start, Policy::Report);
    assert_eq!(l.findings.len(), 1, "{l:?}");
    assert_eq!(l.findings[0].what, What::Link);
    assert_eq!(l.repositories, 0);
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&elsewhere).unwrap();
}
