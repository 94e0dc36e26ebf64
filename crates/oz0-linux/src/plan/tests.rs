//! The plan, table-tested: what each spec and host yields.

use super::*;
use crate::host::{FileId, ProtectedFacts, RootFact};
use oz0_policy::protected;
use oz0_policy::RunRequest;

fn p(s: &str) -> AbsPath {
    AbsPath::new(s).unwrap()
}

fn spec(edit: impl FnOnce(&mut RunRequest)) -> RunSpec {
    let mut r = RunRequest {
        work: "/w".into(),
        data_dir: "/home/u/.local/share/oz0-node".into(),
        command: vec!["make".into(), "test".into()],
        ..Default::default()
    };
    edit(&mut r);
    RunSpec::new(r).unwrap()
}

fn root(path: &str, entry: Entry) -> RootFact {
    RootFact {
        path: p(path),
        canonical: (entry != Entry::Missing).then(|| path.to_string()),
        entry,
    }
}

/// The protected facts of `rootp` with `.git` as `git` and, when it is a
/// folder, the entries `entries` at its top (as `gather` records them:
/// the held names that are missing added, `objects/info` a folder when
/// `objects` is one, with no alternates).
fn prot(rootp: &str, git: Entry, entries: &[(&str, Entry)]) -> ProtectedFacts {
    let mut git_entries: Vec<(String, Entry)> = entries
        .iter()
        .map(|(n, e)| (n.to_string(), e.clone()))
        .collect();
    if git == Entry::Dir {
        for (n, _) in protected::GIT_HELD {
            if !git_entries.iter().any(|(m, _)| m == n) {
                git_entries.push((n.to_string(), Entry::Missing));
            }
        }
    }
    git_entries.sort_by(|a, b| a.0.cmp(&b.0));
    let objects = entries.contains(&("objects", Entry::Dir));
    ProtectedFacts {
        root: p(rootp),
        names: protected::READ_ONLY_NAMES
            .iter()
            .map(|(n, k)| (*n, *k, Entry::Missing))
            .collect(),
        git,
        git_entries,
        objects_info: if objects { Entry::Dir } else { Entry::Missing },
        objects_held: if objects {
            protected::GIT_OBJECTS_HELD
                .iter()
                .map(|(n, k)| (*n, *k, Entry::Missing))
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Host facts with an identity for every caller path and protected
/// name that exists (as `gather` records them).
fn host(roots: Vec<RootFact>, protected: Vec<ProtectedFacts>) -> HostFacts {
    let mut ids = Vec::new();
    let mut id = |path: AbsPath, entry: &Entry| {
        if matches!(entry, Entry::Dir | Entry::File | Entry::Other) {
            let ino = ids.len() as u64 + 100;
            ids.push((
                path,
                FileId {
                    major: 8,
                    minor: 1,
                    ino,
                },
            ));
        }
    };
    for r in &roots {
        id(r.path.clone(), &r.entry);
    }
    for s in ["/usr", "/etc", "/opt/oz0/oz0-node", "/dev"] {
        id(p(s), &Entry::Dir);
    }
    for f in &protected {
        for (n, _, e) in &f.names {
            id(f.root.join(n).unwrap(), e);
        }
        let git = f.root.join(protected::GIT_DIR).unwrap();
        id(git.clone(), &f.git);
        for (n, e) in &f.git_entries {
            id(git.join(n).unwrap(), e);
        }
        let info = join_all(&git, protected::GIT_OBJECTS_INFO);
        id(info.clone(), &f.objects_info);
        for (n, _, e) in &f.objects_held {
            id(info.join(n).unwrap(), e);
        }
    }
    HostFacts {
        system: vec![
            (p("/usr"), Entry::Dir),
            (p("/bin"), Entry::Symlink("usr/bin".into())),
            (p("/lib32"), Entry::Missing),
            (p("/etc"), Entry::Dir),
        ],
        system_root: None,
        node_exe: p("/opt/oz0/oz0-node"),
        node_libs: Vec::new(),
        roots,
        protected,
        ids,
        mounts: vec!["/".into()],
        home: None,
    }
}

fn basic_host() -> HostFacts {
    host(
        vec![root("/w", Entry::Dir)],
        vec![prot("/w", Entry::Missing, &[])],
    )
}

#[test]
fn golden_minimal_run() {
    let plan = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
    let args = plan.bwrap_args().join(" ");
    let expect = "--unshare-user --unshare-ipc --unshare-pid --unshare-net --unshare-uts --unshare-cgroup \
--as-pid-1 --die-with-parent --new-session --clearenv --cap-drop ALL --hostname oz0 \
--cap-add CAP_SYS_ADMIN --cap-add CAP_SYS_RESOURCE --cap-add CAP_SETFCAP \
--ro-bind /usr /usr --symlink usr/bin /bin --ro-bind /etc /etc --proc /proc --dev-bind /dev /oz0/dev --tmpfs /tmp \
--ro-bind /opt/oz0/oz0-node /oz0/oz0-node --bind /w /w \
--chdir /w --json-status-fd 4";
    assert_eq!(args, expect);
    // Every protected name of the empty work folder is a placeholder the
    // stage mounts (from sources it makes at /oz0/ph); the stage, not
    // bubblewrap, then makes the root read-only.
    assert_eq!(
        plan.placeholders.len(),
        protected::READ_ONLY_NAMES.len(),
        "{:?}",
        plan.placeholders
    );
    assert!(plan.placeholders.contains(&Placeholder {
        path: p("/w/.oz0"),
        kind: PlaceholderKind::Dir
    }));
    assert_eq!(PLACEHOLDERS_INSIDE, "/oz0/ph");
    assert_eq!(PlaceholderKind::Dir.source_name(), "empty.d");
    assert_eq!(PlaceholderKind::File.source_name(), "empty");
    // bubblewrap never mounts anything at the sources' place.
    assert!(!args.contains(PLACEHOLDERS_INSIDE), "{args}");
    // Nothing of the caller's is on bubblewrap's real command line.
    assert_eq!(
        plan.bwrap_command().join(" "),
        "--args 3 -- /oz0/oz0-node __oz0-stage"
    );
    assert_eq!(plan.argv, vec!["make", "test"]);
}

/// The node user's secrets under its home are folders of mode 0 on the
/// run's root (so they answer `Permission denied`), but never where a
/// mount covers or holds them; the run is told its wall in OZ0_SANDBOX
/// and its policy file names them.
#[test]
fn secrets_under_the_home_answer_refused_and_the_run_is_told_its_wall() {
    let mut h = basic_host();
    h.home = Some(p("/home/u"));
    let made = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
    let args = made.bwrap_args().join(" ");
    assert!(
        args.contains(
            "--bind /w /w --perms 0000 --dir /home/u/.aws --perms 0000 --dir /home/u/.azure"
        ),
        "{args}"
    );
    assert!(
        args.contains("--perms 0000 --dir /home/u/.ssh --chdir"),
        "{args}"
    );
    assert!(!made.mount_points.iter().any(|m| m.starts_with("/home")));
    let var = made.env.iter().find(|(k, _)| k == "OZ0_SANDBOX").unwrap();
    assert_eq!(
        var.1,
        "tier=1;wall=bubblewrap;policy=/tmp/.oz0-sandbox.json"
    );
    let policy: serde_json::Value = serde_json::from_str(&made.policy).unwrap();
    assert_eq!(policy["tier"], 1);
    assert_eq!(policy["write"], serde_json::json!(["/w", "/tmp"]));
    assert_eq!(policy["refused"][12], "/home/u/.ssh");

    // A work folder at the home itself, or holding .ssh: nothing is made
    // inside what is bound.
    let mut h = host(
        vec![root("/home/u", Entry::Dir)],
        vec![prot("/home/u", Entry::Missing, &[])],
    );
    h.home = Some(p("/home/u"));
    let at_home = |r: &mut RunRequest| {
        r.work = "/home/u".into();
        r.data_dir = "/srv/oz0".into();
    };
    let made = plan(&spec(at_home), &h, &Extras::default()).unwrap();
    assert!(!made.bwrap_args().join(" ").contains("--perms"));
    let mut h = host(
        vec![root("/home/u/.ssh/x", Entry::Dir)],
        vec![prot("/home/u/.ssh/x", Entry::Missing, &[])],
    );
    h.home = Some(p("/home/u"));
    let made = plan(
        &spec(|r| r.work = "/home/u/.ssh/x".into()),
        &h,
        &Extras::default(),
    )
    .unwrap();
    let args = made.bwrap_args().join(" ");
    assert!(!args.contains("/home/u/.ssh --"), "{args}");
    assert!(args.contains("--dir /home/u/.aws"), "{args}");
}

/// The stage finds exactly these mount points in the run, or refuses
/// it: what bubblewrap binds (with the host's mount points under each
/// folder it binds, which a bind takes along), but not the host's /dev
/// the stage detaches, and what the stage mounts itself.
#[test]
fn the_mount_points_the_stage_expects() {
    let mut h = basic_host();
    h.mounts = vec![
        "/".into(),
        "/usr".into(),
        "/w/cache".into(),
        "/wx".into(),
        "/dev/shm".into(),
        "/home".into(),
    ];
    let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
    let mut want: Vec<String> = [
        "/",
        "/usr",
        "/etc",
        "/proc",
        "/tmp",
        "/oz0/oz0-node",
        "/w",
        "/w/cache",
        "/dev",
        "/dev/pts",
        "/oz0/ph",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(DEV_NODES.iter().map(|d| format!("/dev/{d}")))
    .chain(plan.placeholders.iter().map(|p| p.path.to_string()))
    .collect();
    want.sort();
    assert_eq!(plan.mount_points, want);
    // Every bind of bubblewrap's is checked by identity too: the
    // system's, the node binary, the host's /dev aside, the caller's.
    let expect: Vec<&str> = plan.expect.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(expect, ["/usr", "/etc", "/oz0/dev", "/oz0/oz0-node", "/w"]);
}

#[test]
fn the_run_gets_the_usual_devices_and_only_the_devices_named() {
    let p0 = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
    assert_eq!(p0.devices, DEV_NODES);
    // The host's /dev is bound only where the stage builds the run's
    // /dev from it (and detaches it): never at /dev itself.
    let host_dev: Vec<_> = p0
        .mounts
        .iter()
        .filter(|m| matches!(m, Mount::DevBind { .. }))
        .collect();
    assert_eq!(
        host_dev,
        [&Mount::DevBind {
            src: p("/dev"),
            dest: p(HOST_DEV_INSIDE)
        }]
    );
    let extras = Extras {
        devices: vec![p("/dev/kvm"), p("/dev/null"), p("/dev/net/tun")],
        ..Extras::default()
    };
    let p1 = plan(&spec(|_| {}), &basic_host(), &extras).unwrap();
    let mut want: Vec<&str> = DEV_NODES.to_vec();
    want.extend(["kvm", "net/tun"]);
    assert_eq!(p1.devices, want);
    assert_eq!(p1.mounts, p0.mounts);
    let outside = Extras {
        devices: vec![p("/home/u/kvm")],
        ..Extras::default()
    };
    assert_eq!(
        plan(&spec(|_| {}), &basic_host(), &outside),
        Err(PlanError::NotADevice(p("/home/u/kvm")))
    );
}

#[test]
fn nothing_but_what_is_named_is_mounted() {
    let plan = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
    for m in &plan.mounts {
        if let Mount::RoBind { src, .. } | Mount::Bind { src, .. } = m {
            let ok = ["/usr", "/etc", "/opt/oz0/oz0-node", "/w"].contains(&src.as_str())
                || src.starts_with(&p("/w"));
            assert!(ok, "unexpected source {src}");
            assert!(!src.starts_with(&p("/home")), "home mounted: {src}");
        }
    }
    // Missing system paths are not mounted; links stay links.
    assert!(!plan.bwrap_args().contains(&"/lib32".to_string()));
}

#[test]
fn vm_secrets_reach_the_monitor_only_under_their_prefix() {
    let with = |names: &[&str]| Extras {
        vm_secrets: names.iter().map(|n| (n.to_string(), "v".into())).collect(),
        ..Extras::default()
    };
    let ok = plan(
        &spec(|_| {}),
        &basic_host(),
        &with(&["OZ0_VMENV_API_KEY", "OZ0_VMENV_api_key"]),
    )
    .unwrap();
    assert!(ok.env.contains(&("OZ0_VMENV_API_KEY".into(), "v".into())));
    assert!(ok.env.contains(&("OZ0_VMENV_api_key".into(), "v".into())));
    for bad in [
        "API_KEY",
        "OZ0_VMENV_",
        "OZ0_VMENV_A-B",
        "OZ0_VMENV_A=B",
        "LD_PRELOAD",
    ] {
        assert_eq!(
            plan(&spec(|_| {}), &basic_host(), &with(&[bad])),
            Err(PlanError::BadVmSecret(bad.into())),
            "{bad}"
        );
    }
    assert!(matches!(
        plan(
            &spec(|_| {}),
            &basic_host(),
            &with(&["OZ0_VMENV_A", "OZ0_VMENV_A"])
        ),
        Err(PlanError::BadVmSecret(_))
    ));
}

#[test]
fn environment_is_exactly_the_callers_plus_needs() {
    let s = spec(|r| r.env = vec![oz0_policy::EnvVar::parse("LANG=C").unwrap()]);
    let plan = plan(&s, &basic_host(), &Extras::default()).unwrap();
    let names: Vec<_> = plan.env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["LANG", "PATH", "HOME", "TMPDIR", "OZ0_SANDBOX"]);
    let s = spec(|r| r.env = vec![oz0_policy::EnvVar::parse("PATH=/x").unwrap()]);
    let plan = super::plan(&s, &basic_host(), &Extras::default()).unwrap();
    assert_eq!(plan.env.iter().filter(|(n, _)| n == "PATH").count(), 1);
    assert!(plan.env.contains(&("PATH".into(), "/x".into())));
}

#[test]
fn read_and_write_paths_parents_first() {
    let s = spec(|r| {
        r.read = vec!["/w/sub/ro".into(), "/data/ref".into()];
        r.write = vec!["/w/sub".into()];
    });
    let h = host(
        vec![
            root("/w", Entry::Dir),
            root("/w/sub/ro", Entry::Dir),
            root("/data/ref", Entry::File),
            root("/w/sub", Entry::Dir),
        ],
        vec![
            prot("/w", Entry::Missing, &[]),
            prot("/w/sub", Entry::Missing, &[]),
        ],
    );
    let plan = plan(&s, &h, &Extras::default()).unwrap();
    let pos = |needle: &Mount| plan.mounts.iter().position(|m| m == needle).unwrap();
    let w = pos(&Mount::Bind {
        src: p("/w"),
        dest: p("/w"),
    });
    let sub = pos(&Mount::Bind {
        src: p("/w/sub"),
        dest: p("/w/sub"),
    });
    let ro = pos(&Mount::RoBind {
        src: p("/w/sub/ro"),
        dest: p("/w/sub/ro"),
    });
    assert!(w < sub && sub < ro);
    assert!(plan.landlock.read.contains(&"/data/ref".to_string()));
    assert!(plan.landlock.write.contains(&"/w/sub".to_string()));
    // Protected names are held in both writable folders.
    assert!(plan.protected.iter().any(|x| x.path == p("/w/sub/.claude")));
}

/// The rule of `.git`: unmovable; what git writes in ordinary work
/// writable; every other entry read-only, and the names git reads to
/// decide what to run held even when missing; `objects` and
/// `objects/info` unmovable with the alternates held. The stage does all
/// of it by descriptor; bubblewrap binds none of it.
#[test]
fn the_git_rule_holds_what_git_reads_and_leaves_what_commits_write() {
    let entries = [
        ("objects", Entry::Dir),
        ("refs", Entry::Dir),
        ("logs", Entry::Dir),
        ("HEAD", Entry::File),
        ("index", Entry::File),
        ("description", Entry::File),
        ("FETCH_HEAD", Entry::File),
        ("hooks", Entry::Dir),
        ("config", Entry::File),
        ("info", Entry::Dir),
        ("branches", Entry::Dir),
        ("something-else", Entry::File),
    ];
    let h = host(
        vec![root("/w", Entry::Dir)],
        vec![prot("/w", Entry::Dir, &entries)],
    );
    let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
    let holds: Vec<(&str, bool)> = plan
        .holds
        .iter()
        .map(|h| (h.path.as_str(), h.readonly))
        .collect();
    assert_eq!(
        holds,
        vec![
            ("/w/.git", false),
            ("/w/.git/branches", true),
            ("/w/.git/config", true),
            ("/w/.git/hooks", true),
            ("/w/.git/info", true),
            ("/w/.git/objects", false),
            ("/w/.git/something-else", true),
            ("/w/.git/objects/info", false),
        ]
    );
    for x in &plan.holds {
        assert_eq!(Some(x.id), h.id(&x.path), "{}", x.path);
    }
    let git_placeholders: Vec<(&str, PlaceholderKind)> = plan
        .placeholders
        .iter()
        .filter(|x| x.path.as_str().starts_with("/w/.git/"))
        .map(|x| (x.path.as_str(), x.kind))
        .collect();
    assert_eq!(
        git_placeholders,
        vec![
            ("/w/.git/commondir", PlaceholderKind::SelfRef),
            ("/w/.git/config.worktree", PlaceholderKind::File),
            ("/w/.git/modules", PlaceholderKind::Dir),
            ("/w/.git/worktrees", PlaceholderKind::Dir),
            ("/w/.git/objects/info/alternates", PlaceholderKind::File),
            (
                "/w/.git/objects/info/http-alternates",
                PlaceholderKind::File
            ),
        ]
    );
    // What commits write is neither held nor a placeholder.
    for n in ["refs", "logs", "HEAD", "index", "description", "FETCH_HEAD"] {
        let path = p(&format!("/w/.git/{n}"));
        assert!(!plan.protected.iter().any(|x| x.path == path), "{n}");
    }
    let how = |s: &str| plan.protected.iter().find(|x| x.path == p(s)).unwrap().how;
    assert_eq!(how("/w/.git"), Protection::Unmovable);
    assert_eq!(how("/w/.git/hooks"), Protection::ReadOnly);
    assert_eq!(how("/w/.git/commondir"), Protection::Placeholder);
    // bubblewrap binds only the caller's folder of these, which the
    // stage checks, as it checks every bind of bubblewrap's.
    assert!(!plan
        .mounts
        .iter()
        .any(|m| m.dest().as_str().starts_with("/w/.git")));
    assert!(plan.expect.iter().any(|e| e.path == p("/w") && !e.readonly));
    for m in &plan.mounts {
        if let Mount::Bind { dest, .. } | Mount::RoBind { dest, .. } | Mount::DevBind { dest, .. } =
            m
        {
            assert!(
                plan.expect.iter().any(|e| &e.path == dest),
                "{dest} is bound and not checked"
            );
        }
    }
}

#[test]
fn git_file_is_read_only_and_absent_git_is_reported() {
    let h = host(
        vec![root("/w", Entry::Dir)],
        vec![prot("/w", Entry::File, &[])],
    );
    let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
    assert!(plan
        .holds
        .iter()
        .any(|x| x.path == p("/w/.git") && x.readonly));
    let plan = super::plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
    assert!(plan.protected.contains(&Protected {
        path: p("/w/.git"),
        how: Protection::AbsentGit
    }));
}

/// Plans the spec on its host, which must refuse with an error `want`
/// takes (and one that says something).
fn refuses(name: &str, (s, h): (RunSpec, HostFacts), want: fn(&PlanError) -> bool) {
    let e = plan(&s, &h, &Extras::default()).expect_err(name);
    assert!(want(&e), "{name}: {e:?}");
    assert!(!e.to_string().is_empty());
}

#[test]
fn refusals_of_the_work_folder() {
    refuses(
        "missing work",
        (spec(|_| {}), host(vec![root("/w", Entry::Missing)], vec![])),
        |e| matches!(e, PlanError::Missing(_)),
    );
    refuses(
        "work is a file",
        (spec(|_| {}), host(vec![root("/w", Entry::File)], vec![])),
        |e| matches!(e, PlanError::WorkNotDir(_)),
    );
    refuses(
        "work is a link",
        (
            spec(|_| {}),
            host(
                vec![RootFact {
                    path: p("/w"),
                    entry: Entry::Symlink("/etc".into()),
                    canonical: Some("/etc".into()),
                }],
                vec![],
            ),
        ),
        |e| matches!(e, PlanError::Symlinked { .. }),
    );
    refuses(
        "parent is a link",
        (
            spec(|_| {}),
            host(
                // What `gather` records when a folder on the way
                // is a link: the link met, and where it leads.
                vec![RootFact {
                    path: p("/w"),
                    entry: Entry::Symlink("/".into()),
                    canonical: Some("/real/w".into()),
                }],
                vec![],
            ),
        ),
        |e| matches!(e, PlanError::Symlinked { resolved, .. } if resolved == "/real/w"),
    );
}

#[test]
fn refusals_of_the_callers_paths() {
    refuses(
        "the node binary in a writable folder",
        (
            spec(|r| r.write = vec!["/opt/oz0".into()]),
            host(
                vec![root("/w", Entry::Dir), root("/opt/oz0", Entry::Dir)],
                vec![
                    prot("/w", Entry::Missing, &[]),
                    prot("/opt/oz0", Entry::Missing, &[]),
                ],
            ),
        ),
        |e| matches!(e, PlanError::NodeInWritable { .. }),
    );
    refuses(
        "socket",
        (
            spec(|r| r.read = vec!["/run/x.sock".into()]),
            host(
                vec![root("/w", Entry::Dir), root("/run/x.sock", Entry::Other)],
                vec![],
            ),
        ),
        |e| matches!(e, PlanError::Special(_)),
    );
}

#[test]
fn refusals_of_protected_paths() {
    let mut pf = prot("/w", Entry::Missing, &[]);
    pf.names[2].2 = Entry::Symlink("/home/u/.ssh".into());
    refuses(
        "protected link",
        (spec(|_| {}), host(vec![root("/w", Entry::Dir)], vec![pf])),
        |e| matches!(e, PlanError::ProtectedSymlink(_)),
    );
    refuses(
        "git link",
        (
            spec(|_| {}),
            host(
                vec![root("/w", Entry::Dir)],
                vec![prot("/w", Entry::Symlink("/x".into()), &[])],
            ),
        ),
        |e| matches!(e, PlanError::ProtectedSymlink(_)),
    );
    refuses(
        "hooks link",
        (
            spec(|_| {}),
            host(
                vec![root("/w", Entry::Dir)],
                vec![prot(
                    "/w",
                    Entry::Dir,
                    &[("hooks", Entry::Symlink("/x".into()))],
                )],
            ),
        ),
        |e| matches!(e, PlanError::ProtectedSymlink(_)),
    );
    refuses(
        "write a protected path",
        (
            spec(|r| r.write = vec!["/w/.claude".into()]),
            host(
                vec![root("/w", Entry::Dir), root("/w/.claude", Entry::Dir)],
                vec![
                    prot("/w", Entry::Missing, &[]),
                    prot("/w/.claude", Entry::Missing, &[]),
                ],
            ),
        ),
        |e| matches!(e, PlanError::ProtectedWritable(_)),
    );
}

/// A run in an image's root: the image's names in place of the host's
/// system, the work folder at /work (its binds, Landlock rule, checks,
/// holds and placeholders all there inside, and the placeholders made at
/// their host paths), the image's working folder; other folders refused.
#[test]
fn image_root_replaces_the_system_and_puts_work_at_slash_work() {
    let rootfs = "/data/oci/images/abc/rootfs";
    let mut h = host(
        vec![root("/w", Entry::Dir)],
        vec![prot("/w", Entry::Dir, &[])],
    );
    h.system = vec![
        (p("/usr"), Entry::Dir),
        (p("/bin"), Entry::Symlink("usr/bin".into())),
        (p("/app"), Entry::Dir),
    ];
    h.system_root = Some(p(rootfs));
    for (i, name) in ["usr", "app"].iter().enumerate() {
        let id = FileId {
            major: 8,
            minor: 2,
            ino: 900 + i as u64,
        };
        h.ids.push((p(&format!("{rootfs}/{name}")), id));
    }
    let extras = Extras {
        image: Some(ImageRoot {
            rootfs: p(rootfs),
            cwd: p("/app"),
            user: Some((1000, 50)),
        }),
        ..Extras::default()
    };
    let plan = plan(&spec(|_| {}), &h, &extras).unwrap();
    let args = plan.bwrap_args().join(" ");
    assert!(
        args.contains(&format!(
            "--ro-bind {rootfs}/usr /usr --symlink usr/bin /bin --ro-bind {rootfs}/app /app --proc"
        )),
        "{args}"
    );
    assert!(
        !args.contains("/etc"),
        "the host's system stays out: {args}"
    );
    assert!(args.contains("--bind /w /work --chdir /app"), "{args}");
    // The image's user: the node's user mapped to its ids.
    assert!(args.contains("--uid 1000 --gid 50"), "{args}");
    assert!(plan.landlock.write.contains(&"/work".to_string()));
    assert!(!plan.landlock.write.contains(&"/w".to_string()));
    assert!(plan.landlock.read.contains(&"/app".to_string()));
    let work = plan.expect.iter().find(|e| e.path == p("/work")).unwrap();
    assert!(!work.readonly);
    assert!(plan
        .expect
        .iter()
        .any(|e| e.path == p("/usr") && e.id.ino == 900));
    assert!(plan.holds.iter().all(|x| x.path.starts_with(&p("/work"))));
    assert!(!plan.holds.is_empty());
    assert!(!plan.placeholders.is_empty());
    for (host_side, inside) in plan.placeholders.iter().zip(&plan.placeholders_inside) {
        assert!(host_side.path.starts_with(&p("/w")), "{:?}", host_side.path);
        let rest = host_side.path.as_str().strip_prefix("/w").unwrap();
        assert_eq!(inside.path.as_str(), format!("/work{rest}"));
    }
    assert!(plan.mount_points.iter().all(|m| !m.starts_with("/w/")));
    assert!(plan.mount_points.contains(&"/work".to_string()));
    assert!(plan.mount_points.contains(&"/app".to_string()));
    // A static node binary needs nothing more.
    assert_eq!(
        plan.bwrap_command().join(" "),
        "--args 3 -- /oz0/oz0-node __oz0-stage"
    );

    // A dynamically linked one: its loader and libraries, checked like
    // every bind, and the stage started through the loader.
    let libs = [
        "/lib64/ld-linux-x86-64.so.2",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ];
    for (i, l) in libs.iter().enumerate() {
        h.node_libs.push(p(l));
        let id = FileId {
            major: 8,
            minor: 3,
            ino: 950 + i as u64,
        };
        h.ids.push((p(l), id));
    }
    let plan = super::plan(&spec(|_| {}), &h, &extras).unwrap();
    let args = plan.bwrap_args().join(" ");
    assert!(
        args.contains("--ro-bind /lib64/ld-linux-x86-64.so.2 /oz0/lib/ld-linux-x86-64.so.2 --ro-bind /usr/lib/x86_64-linux-gnu/libc.so.6 /oz0/lib/libc.so.6"),
        "{args}"
    );
    assert_eq!(
        plan.bwrap_command().join(" "),
        "--args 3 -- /oz0/lib/ld-linux-x86-64.so.2 --library-path /oz0/lib /oz0/oz0-node __oz0-stage"
    );
    assert!(plan.landlock.read.contains(&"/oz0/lib".to_string()));
    assert!(plan
        .expect
        .iter()
        .any(|e| e.path == p("/oz0/lib/libc.so.6") && e.id.ino == 951));
    assert!(plan
        .mount_points
        .contains(&"/oz0/lib/libc.so.6".to_string()));

    for edit in [
        (|r: &mut RunRequest| r.read = vec!["/r".into()]) as fn(&mut RunRequest),
        |r: &mut RunRequest| r.write = vec!["/x".into()],
    ] {
        let err = super::plan(&spec(edit), &h, &extras).unwrap_err();
        assert!(matches!(err, PlanError::ImageExtraPath(_)), "{err}");
    }
}
