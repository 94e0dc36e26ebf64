//! Black-box tests of the look after a run, as an attacker goes at it: each
//! test leaves, from inside `oz0-node sandbox run`, something the host's
//! git would run (a `core.fsmonitor`, a hook, a rebase's `exec`, an
//! `core.sshCommand`) where the look could miss it, then runs the host's
//! git there the way a user would. Nothing the run planted may run, and
//! the run's status must say what was found. Each test fails on a node
//! whose look drops what it cannot open, read, decode or follow.

#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;

use common::{marker, stderr, Env};

/// git with an identity, for the scripts run inside the sandbox.
const G: &str = "g() { git -c user.name=r -c user.email=r@example.invalid -c init.defaultBranch=main \"$@\"; }\n";

fn host_git() -> Option<&'static str> {
    ["/usr/bin/git", "/usr/local/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists())
}

/// Runs each script in `runs` in turn in the sandbox (one run each, the
/// same work folder; `@P@` stands for a marker path outside it), with the
/// node's `extra` flags; returns each run's status document.
fn runs(env: &Env, pwned: &Path, extra: &[&str], runs: &[&str]) -> Vec<serde_json::Value> {
    let mut docs = Vec::new();
    for script in runs {
        let script = format!(
            "{G}set -e\n{}",
            script.replace("@P@", pwned.to_str().unwrap())
        );
        let status = env.root.join(&format!("status-{}.json", marker("st")));
        let mut args = vec!["--json-status", status.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = env.cmd(&args, ["/bin/sh", "-c", &script]).output().unwrap();
        let doc: serde_json::Value = std::fs::read(&status)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| panic!("no status document; stderr: {}", stderr(&out)));
        assert_eq!(
            doc["command_exit_code"]
                .as_i64()
                .unwrap_or(doc["exit_code"].as_i64().unwrap()),
            0,
            "the script failed: {doc}\n{}",
            stderr(&out)
        );
        docs.push(doc);
    }
    docs
}

/// Runs `script` on the host, in the work folder, as a user would (each
/// git command bounded in time); the planted command must not have run.
fn host_runs_nothing(env: &Env, git: &str, pwned: &Path, script: &str) {
    let script = format!(
        "git() {{ timeout 20 {git} -c user.name=h -c user.email=h@example.invalid \"$@\"; }}\n{script}"
    );
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .current_dir(&env.work)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        !pwned.exists(),
        "the host's git ran what the run planted ({script}): {}",
        stderr(&out)
    );
}

/// The findings of every run, as `(path relative to the work folder,
/// what)`.
fn findings(env: &Env, docs: &[serde_json::Value]) -> Vec<(String, String)> {
    let work = format!("{}/", env.work.display());
    let mut v = Vec::new();
    for d in docs {
        for f in d["git"]["findings"].as_array().into_iter().flatten() {
            let p = f["path"].as_str().unwrap();
            v.push((
                p.strip_prefix(&work).unwrap_or(p).to_string(),
                f["what"].as_str().unwrap().to_string(),
            ));
        }
    }
    v
}

/// Every finding of every run was renamed aside: nothing was left where
/// git looks, and no run failed for it.
fn all_aside(docs: &[serde_json::Value]) {
    for d in docs {
        assert_eq!(d["git"]["left_in_place"], 0, "{d}");
        for f in d["git"]["findings"].as_array().into_iter().flatten() {
            assert!(f["aside"].is_string(), "{f}");
        }
    }
}

macro_rules! need_git {
    () => {{
        ready!();
        match host_git() {
            Some(g) => g,
            None => {
                // git is installed wherever the tests are meant to run.
                assert!(
                    std::env::var_os("OZ0_MUST_WORK").is_none(),
                    "git is not installed"
                );
                common::skip("git is not installed");
                return;
            }
        }
    }};
}

/// What an attack left: its folders, the findings, the status documents.
type Attacked = (Env, Vec<(String, String)>, Vec<serde_json::Value>);

/// One attack: the runs' scripts, then the host's commands.
fn attack(tag: &str, scripts: &[&str], host: &str) -> Option<Attacked> {
    let git = host_git()?;
    let env = Env::new(tag);
    let pwned = env.root.join("pwned");
    let docs = runs(&env, &pwned, &[], scripts);
    host_runs_nothing(&env, git, &pwned, host);
    let f = findings(&env, &docs);
    all_aside(&docs);
    Some((env, f, docs))
}

fn has(f: &[(String, String)], path: &str, what: &str) -> bool {
    f.iter().any(|(p, w)| p == path && w == what)
}

/// A folder whose name is not UTF-8 hides nothing below it.
#[test]
fn a_folder_named_in_bytes_hides_nothing() {
    need_git!();
    let (_env, f, _) = attack(
        "bytes",
        &["d=\"$(printf 'x\\377y')\"; g init -q \"$d/r\"; g -C \"$d/r\" config core.fsmonitor 'touch @P@; false'"],
        "cd \"$(printf 'x\\377y')/r\" && git status",
    )
    .unwrap();
    assert!(has(&f, "x\\xffy/r/.git/config", "config"), "{f:?}");
}

/// A folder, or a `.git`, the run made unreadable (git needs only search
/// permission, mode 0311) is walked all the same.
#[test]
fn a_folder_left_unreadable_is_walked() {
    need_git!();
    let (env, f, docs) = attack(
        "unreadable",
        &["mkdir d; g init -q d/r; g -C d/r config core.fsmonitor 'touch @P@; false'; chmod 0311 d\n\
           g init -q s; g -C s config core.fsmonitor 'touch @P@; false'; chmod 0311 s/.git"],
        "(cd d/r && git status); (cd s && git status)",
    )
    .unwrap();
    assert!(has(&f, "d/r/.git/config", "config"), "{f:?}");
    assert!(has(&f, "s/.git/config", "config"), "{f:?}");
    assert_eq!(docs[0]["git"]["complete"], true, "{}", docs[0]);
    assert!(docs[0]["git"]["folders_made_readable"].as_u64().unwrap() >= 2);
    drop(env);
}

/// 1,500 sibling repositories under a limit of 256 descriptors: the look
/// holds one descriptor per level, not one per folder waiting, and finds
/// every one.
#[test]
fn fifteen_hundred_repositories_under_256_descriptors() {
    let git = need_git!();
    let Some(prlimit) = ["/usr/bin/prlimit", "/bin/prlimit"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        assert!(
            std::env::var_os("OZ0_MUST_WORK").is_none(),
            "prlimit (util-linux) is not installed"
        );
        common::skip("prlimit is not installed");
        return;
    };
    let env = Env::new("siblings");
    let pwned = env.root.join("pwned");
    let script = format!(
        "{G}set -e\ng init -q r0 && g -C r0 config core.fsmonitor 'touch {}; false'\n\
         for i in $(seq 1 1500); do cp -r r0 r$i; done",
        pwned.display()
    );
    let status = env.root.join("status.json");
    let out = Command::new(prlimit)
        .arg("--nofile=256:256")
        .arg(common::node())
        .args(["sandbox", "run", "--work"])
        .arg(&env.work)
        .arg("--data-dir")
        .arg(&env.data)
        .arg("--json-status")
        .arg(&status)
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&status).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(doc["exit_code"], 0, "{doc}");
    assert_eq!(doc["git"]["complete"], true, "{}", doc["git"]["stopped"]);
    // The first 1,000 findings are listed, the rest counted; all of them
    // are renamed aside (none left in place).
    let listed = doc["git"]["findings"].as_array().unwrap();
    let configs = listed
        .iter()
        .filter(|f| f["what"] == "config" && f["aside"].is_string())
        .count();
    assert_eq!(configs, listed.len(), "{doc}");
    let more = doc["git"]["findings_more"].as_u64().unwrap();
    assert_eq!(
        configs as u64 + more,
        1501,
        "{}",
        doc["git"]["left_in_place"]
    );
    assert_eq!(doc["git"]["left_in_place"], 0);
    host_runs_nothing(
        &env,
        git,
        &pwned,
        "for i in 0 1 750 1500; do (cd r$i && git status); done",
    );
}

/// A hooks folder that is a link to a folder of the run.
#[test]
fn a_hooks_folder_that_is_a_link() {
    need_git!();
    let (_env, f, _) = attack(
        "hookslink",
        &["g init -q r; mkdir h; printf '#!/bin/sh\\ntouch @P@\\n' > h/pre-commit; chmod +x h/pre-commit\n\
           rm -rf r/.git/hooks; ln -s ../../h r/.git/hooks"],
        "cd r && git commit -q --allow-empty -m x",
    )
    .unwrap();
    assert!(has(&f, "r/.git/hooks", "link"), "{f:?}");
}

/// A rebase stopped with an `exec` line written as git reads it
/// (`x<TAB>cmd`), its folder a link, or its list a link.
#[test]
fn a_rebase_that_would_run_a_command() {
    need_git!();
    let stopped = "g init -q r; cd r; echo a > a; g add a; g commit -qm a; echo b > b; g add b; g commit -qm b\n\
                   GIT_SEQUENCE_EDITOR=\"sed -i '1i break'\" g rebase -q -i HEAD~1\n\
                   printf ' x\\ttouch @P@\\n' >> .git/rebase-merge/git-rebase-todo\n";
    for (tag, tail, path, what) in [
        ("tab", "", "r/.git/rebase-merge", "rebase_exec"),
        (
            "dirlink",
            "mv .git/rebase-merge ../rm; ln -s ../../rm .git/rebase-merge",
            "r/.git/rebase-merge",
            "link",
        ),
        (
            "todolink",
            "mv .git/rebase-merge/git-rebase-todo ../todo; ln -s ../../../todo .git/rebase-merge/git-rebase-todo",
            "r/.git/rebase-merge/git-rebase-todo",
            "link",
        ),
    ] {
        let script = format!("{stopped}{tail}");
        let (_env, f, _) = attack(
            &format!("rebase-{tag}"),
            &[&script],
            "cd r && git rebase --continue",
        )
        .unwrap();
        assert!(has(&f, path, what), "{tag}: {f:?}");
    }
}

/// A bare repository whose `objects` is a link (git follows it, so it is
/// a repository), and one whose `objects/info` is a link hiding
/// alternates.
#[test]
fn a_bare_repository_behind_links() {
    need_git!();
    let (_env, f, _) = attack(
        "bare",
        &[
            "g init -q --bare b.git; g -C b.git config core.sshCommand 'touch @P@; false'\n\
           mv b.git/objects objs; ln -s ../objs b.git/objects\n\
           g init -q --bare c.git; mkdir inf; echo /elsewhere > inf/alternates\n\
           rm -rf c.git/objects/info; ln -s ../../inf c.git/objects/info",
        ],
        "cd b.git && git fetch -q ssh://example.invalid/x; true",
    )
    .unwrap();
    assert!(has(&f, "b.git/objects", "link"), "{f:?}");
    assert!(has(&f, "b.git/config", "config"), "{f:?}");
    assert!(has(&f, "c.git/objects/info", "link"), "{f:?}");
}

/// A `.git` the run left without write permission (`chmod 555`): its
/// findings are still renamed aside, and the run does not pass with them
/// in place.
#[test]
fn a_git_folder_left_read_only() {
    need_git!();
    let (_env, f, docs) = attack(
        "readonly",
        &["g init -q r; g -C r config core.fsmonitor 'touch @P@; false'; chmod 555 r/.git"],
        "cd r && git status",
    )
    .unwrap();
    assert!(has(&f, "r/.git/config", "config"), "{f:?}");
    assert_eq!(docs[0]["exit_code"], 0, "{}", docs[0]);
}

/// A repository prepared in one run so that it is none (its `.git` named
/// otherwise, `HEAD` and `refs` renamed away) and renamed into place by
/// the next: it is the next run's, though its config is older.
#[test]
fn a_repository_prepared_in_one_run_and_placed_by_the_next() {
    need_git!();
    let (_env, f, _) = attack(
        "prepared",
        &[
            "g init -q p; g -C p config core.fsmonitor 'touch @P@; false'\n\
             mv p/.git/refs p/.git/refsx; mv p/.git/HEAD p/.git/HEADx; mv p/.git p/dotgit",
            "mv p/dotgit/refsx p/dotgit/refs; mv p/dotgit/HEADx p/dotgit/HEAD; mv p/dotgit p/.git",
        ],
        "cd p && git status",
    )
    .unwrap();
    assert!(has(&f, "p/.git/config", "config"), "{f:?}");
}

/// Agents' and editors' settings below the top of the work folder are
/// found and renamed aside; project files host tools execute are listed
/// in `changed_host_exec` and left where they are.
#[test]
fn settings_below_the_top_and_files_host_tools_run() {
    ready!();
    let env = Env::new("settings");
    let pwned = env.root.join("pwned");
    let docs = runs(
        &env,
        &pwned,
        &[],
        &[
            "mkdir -p sub/.claude sub/.vscode sub/deep .github/workflows\n\
           echo '{}' > sub/.claude/settings.json; echo '{}' > sub/.vscode/tasks.json\n\
           echo '{}' > sub/deep/.mcp.json; echo 'on: push' > .github/workflows/ci.yml\n\
           printf 'all:\\n' > Makefile; echo '* filter=x' > sub/.gitattributes",
        ],
    );
    let f = findings(&env, &docs);
    for p in ["sub/.claude", "sub/.vscode", "sub/deep/.mcp.json"] {
        assert!(has(&f, p, "agent_settings"), "{p}: {f:?}");
        assert!(!env.work.join(p).exists(), "{p} is still in place");
    }
    all_aside(&docs);
    let work = format!("{}/", env.work.display());
    let mut exec: Vec<String> = docs[0]["changed_host_exec"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().strip_prefix(&work).unwrap().to_string())
        .collect();
    exec.sort();
    assert_eq!(
        exec,
        [
            ".github/workflows",
            ".github/workflows/ci.yml",
            "Makefile",
            "sub/.gitattributes"
        ],
        "{}",
        docs[0]
    );
    assert!(env.work.join("Makefile").exists());
}

/// A job through the fleet: what the look after its run found travels with
/// its end to the edge, and `oz0 job show` tells the operator (escaped),
/// findings and changed project files alike.
#[test]
fn a_jobs_look_reaches_the_operator() {
    ready!();
    let (Some(bin), Some(_)) = (common::fleet::edge_bin(), common::fleet::oz0_bin()) else {
        assert!(
            std::env::var_os("OZ0_MUST_WORK").is_none(),
            "the oz0-edge and oz0 binaries are not found"
        );
        common::skip("the oz0-edge or oz0 binary is not found");
        return;
    };
    let edge = common::fleet::Edge::start(&bin, 30);
    let mut node = common::fleet::Node::start(&edge, "looker", &[]);
    node.wait_log("facts reported", 120);
    let script = "mkdir -p sub/.claude && echo '{}' > sub/.claude/settings.json && printf 'all:\\n' > Makefile";
    let id = edge
        .submit(
            oz0_edge::routing::Origin::Internal,
            serde_json::json!({"command": ["/bin/sh", "-c", script]}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 120);
    assert_eq!(j.state, "succeeded", "{j:?}");
    let look = j.look.expect("the job's end carries the look");
    assert_eq!(look.left_in_place, 0, "{look:?}");
    assert!(
        look.findings.iter().any(|f| f.what == "agent_settings"
            && f.path.ends_with("sub/.claude")
            && f.aside.is_some()),
        "{look:?}"
    );
    assert!(
        look.changed_host_exec
            .iter()
            .any(|p| p.ends_with("/Makefile")),
        "{look:?}"
    );
    let (st, out, err) = edge.oz0(&["job", "show", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0), "{err}");
    assert!(out.contains("Look after the run: 1 finding(s)"), "{out}");
    assert!(out.contains("agent_settings at "), "{out}");
    assert!(
        out.contains("Changed files that tools on the host execute"),
        "{out}"
    );
}
