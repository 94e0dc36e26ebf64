//! The look at git after a run: what it finds, what it renames aside, what
//! it never follows, and that whatever it cannot examine is a finding.

use super::*;
use std::collections::HashSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oz0-gitlook-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn open(root: &Path) -> OwnedFd {
    crate::hostfs::open_no_links(
        root,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
    )
    .unwrap()
}

fn run_look(root: &Path, start: Duration, policy: Policy) -> GitLook {
    run_look_kept(root, start, policy, &HashSet::new(), Limits::default())
}

fn run_look_kept(
    root: &Path,
    start: Duration,
    policy: Policy,
    kept: &HashSet<(u64, u64)>,
    limits: Limits,
) -> GitLook {
    let fd = open(root);
    look_with(
        &[Root {
            path: root,
            fd: &fd,
        }],
        start,
        policy,
        "r1",
        kept,
        limits,
    )
}

/// Now, by the kernel's clock for file changes: the `ctime` of a new
/// file (as the node takes it from a folder it makes).
fn now(root: &Path) -> Duration {
    std::thread::sleep(Duration::from_millis(20));
    let mark = root.join(format!("mark-{:?}", std::time::Instant::now()));
    fs::write(&mark, "").unwrap();
    let st = rustix::fs::stat(&mark).unwrap();
    fs::remove_file(&mark).unwrap();
    ctime(&st)
}

fn id_of(p: &Path) -> (u64, u64) {
    let st = rustix::fs::lstat(p).unwrap();
    (st.st_dev, st.st_ino)
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

/// What the wall holds in place of the repository at `root/.git`.
fn held_git(root: &Path) -> HashSet<(u64, u64)> {
    [".git", ".git/hooks", ".git/config", ".git/objects"]
        .iter()
        .map(|p| id_of(&root.join(p)))
        .collect()
}

const EVIL: &str = "[core]\n\tfsmonitor = touch /tmp/x\n";

/// `(path relative to root, what)` of each finding, sorted.
fn found(l: &GitLook, root: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = l
        .findings
        .iter()
        .map(|f| {
            let what = serde_json::to_value(&f.what).unwrap()["what"]
                .as_str()
                .unwrap()
                .to_string();
            (shown(f.path.strip_prefix(root).unwrap_or(&f.path)), what)
        })
        .collect();
    v.sort();
    v
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = v
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
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
        let kept: HashSet<_> = [".git", ".git/objects", ".git/objects/info", ".git/hooks"]
            .iter()
            .map(|p| id_of(&root.join(p)))
            .collect();
        let start = now(&root);
        // The run: a commit in the user's repository (its .git changes),
        // a nested repository with a dangerous config and a hook, a
        // commondir, alternates, a bare repository, a .git file.
        fs::write(root.join(".git/index"), "x").unwrap();
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
        let l = run_look_kept(&root, start, policy, &kept, Limits::default());
        assert!(l.complete, "{l:?}");
        assert_eq!(
            found(&l, &root),
            pairs(&[
                (".git/commondir", "commondir"),
                (".git/objects/info/alternates", "alternates"),
                ("src/.git/config", "config"),
                ("src/.git/hooks/post-checkout", "hook"),
                ("deep/bare.git/config", "config"),
                ("wt/.git", "git_file"),
            ]),
            "{l:?}"
        );
        let src = l
            .findings
            .iter()
            .find(|f| f.path.ends_with("src/.git/config"))
            .unwrap();
        assert_eq!(
            src.what,
            What::Config {
                settings: vec!["alias.x".into(), "core.fsmonitor".into()]
            }
        );
        match policy {
            Policy::Neutralise => {
                assert!(!root.join(".git/commondir").exists());
                assert!(root.join(".git/commondir.oz0-quarantine-r1").exists());
                assert!(!root.join("src/.git/hooks/post-checkout").exists());
                assert!(!root.join("wt/.git").exists());
                assert!(l.findings.iter().all(|f| f.aside.is_some()), "{l:?}");
                assert_eq!(l.left_in_place, 0);
                assert!(!l.failed());
                // A second look finds nothing left.
                let again = run_look_kept(&root, start, policy, &kept, Limits::default());
                assert!(again.findings.is_empty(), "{again:?}");
            }
            Policy::Report => {
                assert!(root.join(".git/commondir").exists());
                assert!(l.findings.iter().all(|f| f.aside.is_none()));
                assert_eq!(l.left_in_place, 6);
                assert!(!l.failed());
            }
        }
        fs::remove_dir_all(&root).unwrap();
    }
}

/// No link is followed into the walk: a `.git` that is a link is a
/// finding, and a folder reached only through a link is not walked.
#[test]
fn follows_no_link() {
    let root = tmp("links");
    let elsewhere = tmp("links-elsewhere");
    repo(&elsewhere.join(".git"));
    let start = now(&root);
    symlink(elsewhere.join(".git"), root.join(".git")).unwrap();
    symlink(&elsewhere, root.join("linked")).unwrap();
    fs::write(elsewhere.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    let l = run_look(&root, start, Policy::Report);
    assert_eq!(found(&l, &root), pairs(&[(".git", "link")]), "{l:?}");
    assert_eq!(l.repositories, 0);
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&elsewhere).unwrap();
}

/// A name that is not UTF-8 hides nothing: the walk works on bytes.
#[test]
fn names_that_are_not_utf8_hide_nothing() {
    let root = tmp("bytes");
    let start = now(&root);
    let odd = root.join(std::ffi::OsStr::from_bytes(b"x\xffy"));
    repo(&odd.join(".git"));
    fs::write(odd.join(".git/config"), EVIL).unwrap();
    let l = run_look(&root, start, Policy::Neutralise);
    assert_eq!(
        found(&l, &root),
        pairs(&[("x\\xffy/.git/config", "config")])
    );
    assert!(!odd.join(".git/config").exists());
    let doc = serde_json::to_string(&l).unwrap();
    assert!(doc.contains("x\\\\xffy"), "{doc}");
    fs::remove_dir_all(&root).unwrap();
}

/// Links where git reads, in a repository the run made: `hooks`,
/// `rebase-merge`, `git-rebase-todo`, a bare repository's `objects`,
/// `objects/info`; and a todo line `x<TAB>cmd`.
#[test]
fn links_and_todo_lines_git_would_follow() {
    let root = tmp("gitlinks");
    let start = now(&root);
    fs::create_dir_all(root.join("store/hooks")).unwrap();
    fs::write(root.join("store/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    fs::write(root.join("store/todo"), "exec touch /tmp/x\n").unwrap();
    fs::create_dir_all(root.join("store/rm")).unwrap();
    fs::write(root.join("store/rm/git-rebase-todo"), "pick 1 a\n").unwrap();
    fs::create_dir_all(root.join("store/info")).unwrap();
    fs::write(root.join("store/info/alternates"), "/elsewhere\n").unwrap();

    repo(&root.join("a/.git"));
    fs::remove_dir_all(root.join("a/.git/hooks")).unwrap();
    symlink("../../store/hooks", root.join("a/.git/hooks")).unwrap();
    repo(&root.join("b/.git"));
    symlink("../../store/rm", root.join("b/.git/rebase-merge")).unwrap();
    repo(&root.join("c/.git"));
    fs::create_dir_all(root.join("c/.git/rebase-merge")).unwrap();
    symlink(
        "../../../store/todo",
        root.join("c/.git/rebase-merge/git-rebase-todo"),
    )
    .unwrap();
    repo(&root.join("d/.git"));
    fs::create_dir_all(root.join("d/.git/rebase-merge")).unwrap();
    fs::write(
        root.join("d/.git/rebase-merge/git-rebase-todo"),
        "pick 1 a\n  x\ttouch /tmp/x\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("e.git/refs")).unwrap();
    fs::write(root.join("e.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::create_dir_all(root.join("e-objects")).unwrap();
    symlink("../e-objects", root.join("e.git/objects")).unwrap();
    repo(&root.join("f.git"));
    fs::remove_dir_all(root.join("f.git/objects/info")).unwrap();
    symlink("../../store/info", root.join("f.git/objects/info")).unwrap();

    let l = run_look(&root, start, Policy::Neutralise);
    assert_eq!(
        found(&l, &root),
        pairs(&[
            ("a/.git/hooks", "link"),
            ("b/.git/rebase-merge", "link"),
            ("c/.git/rebase-merge/git-rebase-todo", "link"),
            ("d/.git/rebase-merge", "rebase_exec"),
            ("e.git/objects", "link"),
            ("f.git/objects/info", "link"),
        ]),
        "{l:?}"
    );
    assert!(l.findings.iter().all(|f| f.aside.is_some()), "{l:?}");
    fs::remove_dir_all(&root).unwrap();
}

/// A repository prepared so that it is none (its `.git` named otherwise,
/// `refs` renamed away), then renamed into place in a later run: the
/// repository is the later run's, though its config is older.
#[test]
fn a_repository_renamed_into_place_is_the_runs() {
    let root = tmp("renamed");
    repo(&root.join("p/dotgit"));
    fs::write(root.join("p/dotgit/config"), EVIL).unwrap();
    fs::rename(root.join("p/dotgit/refs"), root.join("p/dotgit/refsx")).unwrap();
    fs::write(root.join("p/dotgit/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
    let start = now(&root);
    fs::rename(root.join("p/dotgit/refsx"), root.join("p/dotgit/refs")).unwrap();
    fs::rename(root.join("p/dotgit"), root.join("p/.git")).unwrap();
    let l = run_look(&root, start, Policy::Neutralise);
    assert_eq!(
        found(&l, &root),
        pairs(&[
            ("p/.git/config", "config"),
            ("p/.git/hooks/post-checkout", "hook")
        ]),
        "{l:?}"
    );
    // And a whole folder moved: the repository in it is the run's.
    fs::create_dir_all(root.join("q/sub")).unwrap();
    repo(&root.join("q/sub/.git"));
    fs::write(root.join("q/sub/.git/config"), EVIL).unwrap();
    let start = now(&root);
    fs::rename(root.join("q"), root.join("r")).unwrap();
    let l = run_look(&root, start, Policy::Report);
    assert_eq!(
        found(&l, &root),
        pairs(&[("r/sub/.git/config", "config")]),
        "{l:?}"
    );
    fs::remove_dir_all(&root).unwrap();
}

/// Agents' settings the run made or changed below the top are found
/// and renamed aside; project files host tools run are only reported.
#[test]
fn settings_at_any_depth_and_host_exec_files() {
    let root = tmp("settings");
    fs::create_dir_all(root.join("old/.vscode")).unwrap();
    fs::write(root.join("old/.vscode/settings.json"), "{}").unwrap();
    fs::create_dir_all(root.join("sub/.vscode")).unwrap();
    fs::write(root.join("sub/.vscode/tasks.json"), "{}").unwrap();
    fs::write(root.join("Makefile"), "all:\n").unwrap();
    let start = now(&root);
    fs::create_dir_all(root.join("sub/.claude")).unwrap();
    fs::write(root.join("sub/.claude/settings.json"), "{}").unwrap();
    fs::write(root.join("sub/.vscode/tasks.json"), "{\"x\":1}").unwrap();
    fs::write(
        root.join("sub/deeper/.mcp.json")
            .parent()
            .map(|p| {
                fs::create_dir_all(p).unwrap();
                p.join(".mcp.json")
            })
            .unwrap(),
        "{}",
    )
    .unwrap();
    fs::create_dir_all(root.join("sub/.github/workflows")).unwrap();
    fs::write(root.join("sub/.github/workflows/ci.yml"), "on: push\n").unwrap();
    fs::write(root.join("sub/Makefile"), "all:\n").unwrap();
    fs::create_dir_all(root.join("sub/.cargo")).unwrap();
    fs::write(root.join("sub/.cargo/config.toml"), "").unwrap();
    let l = run_look(&root, start, Policy::Neutralise);
    assert_eq!(
        found(&l, &root),
        pairs(&[
            ("sub/.claude", "agent_settings"),
            ("sub/.vscode", "agent_settings"),
            ("sub/deeper/.mcp.json", "agent_settings"),
        ]),
        "{l:?}"
    );
    assert!(root.join("old/.vscode/settings.json").exists());
    assert!(!root.join("sub/.vscode").exists());
    let mut exec: Vec<String> = l
        .changed_host_exec
        .iter()
        .map(|p| shown(p.strip_prefix(&root).unwrap()))
        .collect();
    exec.sort();
    assert_eq!(
        exec,
        [
            "sub/.cargo/config.toml",
            "sub/.github/workflows",
            "sub/.github/workflows/ci.yml",
            "sub/Makefile"
        ]
    );
    assert!(root.join("sub/Makefile").exists());
    fs::remove_dir_all(&root).unwrap();
}

/// An unchanged configuration's `core.hooksPath` and includes inside the
/// writable folder, and a hook that is a link to a script there: what the
/// run changed behind them is found.
#[test]
fn what_an_unchanged_config_names_is_looked_at() {
    let root = tmp("follow");
    repo(&root.join(".git"));
    fs::write(
        root.join(".git/config"),
        "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../.gitconfig-project\n",
    )
    .unwrap();
    fs::create_dir_all(root.join(".husky")).unwrap();
    fs::create_dir_all(root.join("scripts")).unwrap();
    fs::write(root.join("scripts/pre-push"), "#!/bin/sh\n").unwrap();
    symlink("../../scripts/pre-push", root.join(".git/hooks/pre-push")).unwrap();
    fs::write(root.join(".gitconfig-project"), "[user]\n\tname = x\n").unwrap();
    let kept = held_git(&root);
    // Nothing changed: nothing found.
    let start = now(&root);
    let l = run_look_kept(&root, start, Policy::Report, &kept, Limits::default());
    assert!(l.findings.is_empty(), "{l:?}");
    // The run writes a hook in .husky, the included file, the script.
    fs::write(root.join(".husky/pre-commit"), "#!/bin/sh\n").unwrap();
    fs::write(root.join(".gitconfig-project"), EVIL).unwrap();
    fs::write(root.join("scripts/pre-push"), "#!/bin/sh\nevil\n").unwrap();
    let l = run_look_kept(&root, start, Policy::Neutralise, &kept, Limits::default());
    assert_eq!(
        found(&l, &root),
        pairs(&[
            (".husky/pre-commit", "hook"),
            (".gitconfig-project", "config"),
            (".git/hooks/pre-push", "hook"),
        ]),
        "{l:?}"
    );
    assert!(!root.join(".husky/pre-commit").exists());
    assert!(!root.join(".gitconfig-project").exists());
    fs::remove_dir_all(&root).unwrap();
}

/// Links the run made on the way to what an unchanged configuration or
/// link names: git follows them, so each is found and renamed aside,
/// wherever it leads (out of the writable folders, to another run's; or
/// to a script of the user's that the run did not change).
#[test]
fn links_the_run_made_on_the_way_are_found() {
    let root = tmp("midway");
    let elsewhere = tmp("midway-elsewhere");
    fs::create_dir_all(elsewhere.join("h")).unwrap();
    fs::write(elsewhere.join("h/pre-commit"), "#!/bin/sh\n").unwrap();
    repo(&root.join(".git"));
    fs::write(root.join(".git/config"), "[core]\n\thooksPath = .husky\n").unwrap();
    for d in [".husky", "scripts", "tools", "lib"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::write(root.join("scripts/pre-push"), "#!/bin/sh\n").unwrap();
    fs::write(root.join("tools/pre-push"), "#!/bin/sh\nrelease\n").unwrap();
    fs::write(root.join("lib/post-merge"), "#!/bin/sh\n").unwrap();
    symlink("../../scripts/pre-push", root.join(".git/hooks/pre-push")).unwrap();
    // A link of the user's on the way (followed, not a finding).
    symlink("lib", root.join("shared")).unwrap();
    symlink(
        "../../shared/post-merge",
        root.join(".git/hooks/post-merge"),
    )
    .unwrap();
    let kept = held_git(&root);
    let start = now(&root);
    let l = run_look_kept(&root, start, Policy::Report, &kept, Limits::default());
    assert!(l.findings.is_empty(), "{l:?}");
    // The run turns .husky into a link out of the work folder, and
    // scripts into a link to tools.
    fs::remove_dir_all(root.join(".husky")).unwrap();
    symlink(elsewhere.join("h"), root.join(".husky")).unwrap();
    fs::remove_dir_all(root.join("scripts")).unwrap();
    symlink("tools", root.join("scripts")).unwrap();
    let l = run_look_kept(&root, start, Policy::Neutralise, &kept, Limits::default());
    assert_eq!(
        found(&l, &root),
        pairs(&[(".husky", "link"), ("scripts", "link")]),
        "{l:?}"
    );
    for gone in [".husky", "scripts"] {
        assert!(
            fs::symlink_metadata(root.join(gone)).is_err(),
            "{gone} left in place"
        );
    }
    assert!(root.join("shared").exists() && root.join("tools/pre-push").exists());
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&elsewhere).unwrap();
}

/// The look's bounds: beyond them nothing stays unexamined in place.
#[test]
fn beyond_its_bounds_the_look_puts_folders_aside() {
    let root = tmp("bounds");
    let start = now(&root);
    fs::create_dir_all(root.join("a/b/c/d/e")).unwrap();
    repo(&root.join("a/b/c/d/e/.git"));
    let shallow = Limits {
        depth: 3,
        ..Limits::default()
    };
    let l = run_look_kept(&root, start, Policy::Neutralise, &HashSet::new(), shallow);
    assert_eq!(
        found(&l, &root),
        pairs(&[("a/b/c/d", "unexamined")]),
        "{l:?}"
    );
    assert!(!l.complete);
    assert!(root.join("a/b/c/d.oz0-quarantine-r1").is_dir());
    fs::remove_dir_all(&root).unwrap();

    let root = tmp("bounds2");
    let start = now(&root);
    for i in 0..20 {
        fs::create_dir_all(root.join(format!("d{i}/x"))).unwrap();
    }
    let few = Limits {
        entries: 10,
        ..Limits::default()
    };
    let l = run_look_kept(&root, start, Policy::Neutralise, &HashSet::new(), few);
    assert!(!l.complete);
    assert!(l.stopped.is_some());
    assert_eq!(l.left_in_place, 0, "{l:?}");
    // Every folder is either walked whole or put aside.
    let aside = fs::read_dir(&root)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".oz0-quarantine-")
        })
        .count();
    assert!(aside >= 20 - 10, "{aside} put aside: {l:?}");
    fs::remove_dir_all(&root).unwrap();
}

/// Whatever the run leaves, what the look keeps is bounded: at most 1,000
/// findings listed (each one past them still renamed aside and counted),
/// and a config's setting names each once, at most 100.
#[test]
fn what_the_look_keeps_is_bounded() {
    let root = tmp("many");
    let start = now(&root);
    for i in 0..1100 {
        fs::create_dir_all(root.join(format!("p{i}"))).unwrap();
        fs::write(root.join(format!("p{i}/.mcp.json")), "{}").unwrap();
    }
    repo(&root.join("big/.git"));
    // 1,000 settings of two names, then 200 of names of their own.
    let mut config = String::from("[core]\n");
    for _ in 0..500 {
        config.push_str("\tfsmonitor = a\n\tsshCommand = b\n");
    }
    config.push_str("[x]\n");
    for i in 0..200 {
        config.push_str(&format!("\tk{i} = 1\n"));
    }
    fs::write(root.join("big/.git/config"), &config).unwrap();
    let l = run_look(&root, start, Policy::Neutralise);
    assert_eq!(l.findings.len(), 1000, "{:?}", l.stopped);
    assert_eq!(l.findings.len() + l.findings_more, 1101);
    assert_eq!(l.left_in_place, 0);
    let left = (0..1100)
        .filter(|i| root.join(format!("p{i}/.mcp.json")).exists())
        .count();
    assert_eq!(left, 0, "every finding is renamed aside, listed or not");
    assert!(root.join("big/.git").exists());
    assert!(!root.join("big/.git/config").exists());
    let warnings = l.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("101 more findings than --json-status lists")),
        "{warnings:?}"
    );
    // The config's finding may be one of those only counted: look at it
    // on its own.
    fs::remove_dir_all(&root).unwrap();
    let root = tmp("settings");
    let start = now(&root);
    repo(&root.join(".git"));
    fs::write(root.join(".git/config"), config).unwrap();
    let l = run_look(&root, start, Policy::Report);
    let settings = l
        .findings
        .iter()
        .find_map(|f| match &f.what {
            What::Config { settings } => Some(settings.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(settings.len(), 100, "{settings:?}");
    assert!(
        settings.windows(2).all(|w| w[0] < w[1]),
        "sorted, each once: {settings:?}"
    );
    assert_eq!(
        settings.iter().filter(|s| s.contains("fsmonitor")).count(),
        1,
        "{settings:?}"
    );
    fs::remove_dir_all(&root).unwrap();
}

/// Names shown to a terminal or a document cannot carry control
/// characters, and two different names never look the same.
#[test]
fn names_are_shown_escaped() {
    let p = Path::new(std::ffi::OsStr::from_bytes(b"a\x1b]52;c;x\x07\\b\xff"));
    assert_eq!(shown(p), "a\\u{1b}]52;c;x\\u{7}\\\\b\\xff");
    assert_eq!(shown(Path::new("x\u{202e}y")), "x\\u{202e}y");
}

/// A finding that cannot be renamed aside (here a folder made immutable,
/// which only root can do) is left in place, named, and fails the run
/// under Neutralise.
#[test]
fn a_finding_left_in_place_fails_the_run() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: only root can make a folder immutable");
        return;
    }
    let root = tmp("immutable");
    let start = now(&root);
    repo(&root.join("r/.git"));
    fs::write(root.join("r/.git/config"), EVIL).unwrap();
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(root.join("r/.git"))
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("skipped: this file system keeps no immutable attribute");
        fs::remove_dir_all(&root).unwrap();
        return;
    }
    let l = run_look(&root, start, Policy::Neutralise);
    chattr("-i");
    assert_eq!(found(&l, &root), pairs(&[("r/.git/config", "config")]));
    assert_eq!(l.left_in_place, 1);
    assert!(l.failed());
    assert!(
        l.findings[0].left.as_deref().unwrap().contains("rename"),
        "{l:?}"
    );
    assert!(l.warnings().iter().any(|w| w.contains("the run fails")));
    fs::remove_dir_all(&root).unwrap();
}

/// Out of time, the look stops and puts aside what it did not walk,
/// repositories included.
#[test]
fn out_of_time_the_look_puts_the_rest_aside() {
    let root = tmp("late");
    let start = now(&root);
    repo(&root.join("r/.git"));
    fs::write(root.join("r/.git/config"), EVIL).unwrap();
    let none = Limits {
        time: Duration::ZERO,
        ..Limits::default()
    };
    let l = run_look_kept(&root, start, Policy::Neutralise, &HashSet::new(), none);
    assert!(!l.complete);
    assert!(
        l.stopped.as_deref().unwrap().contains("longer than"),
        "{l:?}"
    );
    assert_eq!(found(&l, &root), pairs(&[("r", "unexamined")]), "{l:?}");
    assert!(root.join("r.oz0-quarantine-r1/.git/config").exists());
    assert_eq!(l.left_in_place, 0);
    fs::remove_dir_all(&root).unwrap();
}
