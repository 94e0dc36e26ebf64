//! Signed releases end to end: `oz0 release key` and `oz0 release sign`
//! (the operator's CLI), an edge serving the folder (`--release-dir`), and
//! a node fetching its guest binary with `oz0_edge::release::fetch_file`
//! (what a Mac node does for its microVMs' bridge), checked against the
//! key it trusts. A wrong key, another version's manifest and a file
//! changed after signing are each refused, and leave nothing behind; other
//! versions' copies are removed.

mod common;

use std::path::Path;
use std::process::Command;

use common::{linux_facts, node, start_configured, store_urls, ACME};
use oz0_edge::release::{self, ReleaseError};
use oz0_edge::Store;

/// `oz0 ARGS` with an empty environment.
fn run_oz0(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oz0"))
        .args(args)
        .env_clear()
        .output()
        .unwrap()
}

fn oz0(args: &[&str]) -> String {
    let out = run_oz0(args);
    assert!(
        out.status.success(),
        "oz0 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn oz0_fails(args: &[&str]) -> String {
    let out = run_oz0(args);
    assert!(!out.status.success(), "oz0 {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// `oz0 release key --out`: the public key it prints.
fn new_key(path: &Path) -> ed25519_dalek::VerifyingKey {
    let out = oz0(&["release", "key", "--out", path.to_str().unwrap()]);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("public key: "))
        .unwrap();
    release::parse_public_key(line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_takes_only_its_versions_files_signed_by_its_key() {
    let root = std::env::temp_dir().join(format!("oz0-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // The operator's key and another.
    let key_file = root.join("release.key");
    let trusted = new_key(&key_file);
    let other = new_key(&root.join("other.key"));
    // The key file is never overwritten, and one others may read is refused.
    let e = oz0_fails(&["release", "key", "--out", &s(&key_file)]);
    assert!(e.contains("never overwritten"), "{e}");
    // A "binary" of three pieces and a bit.
    let binary: Vec<u8> = (0..(3 * release::PIECE_BYTES + 12_345))
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let bin = root.join("oz0-node");
    std::fs::write(&bin, &binary).unwrap();
    let releases = root.join("releases");
    std::fs::create_dir(&releases).unwrap();
    let out = oz0(&[
        "release",
        "sign",
        "--key",
        &s(&key_file),
        "--version",
        "0.1.0",
        "--dir",
        &s(&releases),
        &format!("linux-aarch64={}", s(&bin)),
    ]);
    assert!(out.contains("release 0.1.0 signed"), "{out}");
    // Another version's manifest under this version's name.
    std::fs::create_dir(releases.join("0.2.0")).unwrap();
    std::fs::copy(
        releases.join("0.1.0/release.json"),
        releases.join("0.2.0/release.json"),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let loose = root.join("loose.key");
        std::fs::copy(&key_file, &loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = oz0_fails(&[
            "release",
            "sign",
            "--key",
            &s(&loose),
            "--version",
            "0.3.0",
            "--dir",
            &s(&releases),
            &format!("linux-aarch64={}", s(&bin)),
        ]);
        assert!(e.contains("chmod 600"), "{e}");
    }

    let stores = store_urls().await;

    let url = stores.first();
    let dir = releases.clone();
    let e = start_configured(
        Store::open(&url).await.unwrap(),
        move |c| c.release_dir = Some(dir),
        None,
        oz0_edge::serve::Limits::default(),
        oz0_edge::client::Trust::System,
    )
    .await;
    let n = node(&e, "acme", ACME, "mac1", &linux_facts(false, false)).await;
    let guest = root.join("data/microvm/guest");
    // An older version's copy, removed at the fetch.
    std::fs::create_dir_all(guest.join("0.0.9")).unwrap();
    std::fs::write(guest.join("0.0.9/oz0-node-linux-aarch64"), b"old").unwrap();

    let got = release::fetch_file(&n, &trusted, "0.1.0", ("linux", "aarch64"), &guest)
        .await
        .unwrap();
    assert_eq!(got, guest.join("0.1.0/oz0-node-linux-aarch64"));
    assert_eq!(std::fs::read(&got).unwrap(), binary);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&got).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }
    assert!(!guest.join("0.0.9").exists(), "an older copy was kept");
    // Fetched again: the copy there is checked, and kept.
    let again = release::fetch_file(&n, &trusted, "0.1.0", ("linux", "aarch64"), &guest)
        .await
        .unwrap();
    assert_eq!(again, got);

    // Fetches that are refused, each into a folder of its own.
    let refused = |key, version, arch, dir: &str| {
        let dir = root.join(dir);
        let n = &n;
        async move {
            release::fetch_file(n, key, version, ("linux", arch), &dir)
                .await
                .unwrap_err()
        }
    };
    // A node built with another key.
    let e1 = refused(&other, "0.1.0", "aarch64", "g1").await;
    assert!(matches!(e1, ReleaseError::WrongKey { .. }), "{e1}");
    // Another version's manifest, served as this version's.
    let e2 = refused(&trusted, "0.2.0", "aarch64", "g2").await;
    assert!(matches!(e2, ReleaseError::OtherVersion { .. }), "{e2}");
    // No file for this architecture.
    let e3 = refused(&trusted, "0.1.0", "x86_64", "g3").await;
    assert!(matches!(e3, ReleaseError::NoFile { .. }), "{e3}");
    // A version the edge does not serve.
    let e4 = refused(&trusted, "9.9.9", "aarch64", "g4").await;
    assert!(e4.to_string().contains("no_release"), "{e4}");
    // The binary changed on the edge after it was signed: refused, and
    // nothing of it kept.
    let served = releases.join("0.1.0/oz0-node-linux-aarch64");
    let mut bytes = std::fs::read(&served).unwrap();
    bytes[usize::try_from(release::PIECE_BYTES).unwrap() + 1] ^= 1;
    std::fs::write(&served, &bytes).unwrap();
    let e5 = refused(&trusted, "0.1.0", "aarch64", "g5").await;
    assert!(matches!(e5, ReleaseError::Tampered { .. }), "{e5}");
    assert!(e5.to_string().contains("SHA-256"), "{e5}");
    let left: Vec<_> = std::fs::read_dir(root.join("g5/0.1.0"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A copy already there that no longer matches is fetched again (and
    // here refused, the served file being changed).
    std::fs::write(&got, b"swapped").unwrap();
    let e6 = release::fetch_file(&n, &trusted, "0.1.0", ("linux", "aarch64"), &guest)
        .await
        .unwrap_err();
    assert!(matches!(e6, ReleaseError::Tampered { .. }), "{e6}");
    assert!(!got.exists(), "a copy that does not match was kept");
    std::fs::remove_dir_all(&root).unwrap();
}
