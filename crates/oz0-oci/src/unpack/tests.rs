//! The hostile-input rules, each shown on a tar stream made here.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{Bounds, LayerError, Tree, Unpacked};
use crate::fsx;
use crate::manifest::Compression;
use crate::reference::Digest;
use crate::tar::tests::header;

/// A folder of its own under the temp dir, removed (read-only trees too)
/// when dropped: `root` is unpacked into, `outside` is what an escape
/// would reach.
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let base = std::env::temp_dir().join(format!("oz0-oci-test-{}", fsx::random_name()));
        std::fs::create_dir(&base).unwrap();
        std::fs::create_dir(base.join("root")).unwrap();
        std::fs::create_dir(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret"), b"secret").unwrap();
        Scratch { base }
    }
    fn root(&self) -> PathBuf {
        self.base.join("root")
    }
    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }
    /// What is in `outside`, which nothing may change.
    fn outside_untouched(&self) {
        let mut names: Vec<_> = std::fs::read_dir(self.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [OsStr::new("secret")]);
        assert_eq!(
            std::fs::read(self.outside().join("secret")).unwrap(),
            b"secret"
        );
        let parent: Vec<_> = std::fs::read_dir(&self.base)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(parent.len(), 2, "{parent:?}");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let tmp = rustix::fs::open(
            self.base.parent().unwrap(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        fsx::remove_at(tmp.as_fd(), self.base.file_name().unwrap()).unwrap();
    }
}

/// A tar stream of `entries` (each a header and its data), closed.
pub(crate) fn layer(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut t: Vec<u8> = entries.concat();
    t.extend(vec![0u8; 1024]);
    t
}

pub(crate) fn file(name: &str, mode: u32, data: &[u8]) -> Vec<u8> {
    let mut e = header(name, b'0', mode, data.len() as u64, "");
    e.extend_from_slice(data);
    e.extend(vec![0u8; (512 - data.len() % 512) % 512]);
    e
}

pub(crate) fn dir(name: &str, mode: u32) -> Vec<u8> {
    header(name, b'5', mode, 0, "")
}

pub(crate) fn symlink(name: &str, target: &str) -> Vec<u8> {
    header(name, b'2', 0o777, 0, target)
}

pub(crate) fn hardlink(name: &str, target: &str) -> Vec<u8> {
    header(name, b'1', 0o644, 0, target)
}

/// A PAX extended header of `records`.
pub(crate) fn pax(records: &[(&str, &str)]) -> Vec<u8> {
    let mut body = String::new();
    for (k, v) in records {
        let rec = format!(" {k}={v}\n");
        // The length counts its own digits.
        let mut len = rec.len() + 1;
        while format!("{len}{rec}").len() != len {
            len += 1;
        }
        body.push_str(&format!("{len}{rec}"));
    }
    let mut e = header("././@PaxHeader", b'x', 0o644, body.len() as u64, "");
    e.extend_from_slice(body.as_bytes());
    e.extend(vec![0u8; (512 - body.len() % 512) % 512]);
    e
}

const BIG: Bounds = Bounds {
    bytes: 1 << 20,
    entries: 1000,
};

/// Unpacks `layers` (plain tar) into the scratch's root.
fn unpack(s: &Scratch, layers: &[Vec<u8>], bounds: Bounds) -> Result<Unpacked, LayerError> {
    let root =
        rustix::fs::open(s.root(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut tree = Tree::new(root, bounds);
    for (i, l) in layers.iter().enumerate() {
        let id = Digest::of(l);
        tree.apply(i + 1, layers.len(), &id, &l[..], Compression::None, &id)?;
    }
    Ok(tree.finish().unwrap())
}

fn refused(layers: &[Vec<u8>], bounds: Bounds, why: &str) -> LayerError {
    let s = Scratch::new();
    let e = unpack(&s, layers, bounds).unwrap_err();
    assert!(e.to_string().contains(why), "{e}");
    s.outside_untouched();
    e
}

fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

#[test]
fn dot_dot_and_absolute_names_are_refused() {
    let e = refused(
        &[layer(&[file("a/../../outside/secret", 0o644, b"pwned")])],
        BIG,
        "its name holds '..', which could land outside the rootfs",
    );
    assert_eq!(e.entry.as_deref(), Some("\"a/../../outside/secret\""));
    assert_eq!((e.layer, e.layers, e.bound), (1, 1, false));
    refused(&[layer(&[file("../x", 0o644, b"")])], BIG, "'..'");
    refused(
        &[layer(&[file("/tmp/x", 0o644, b"")])],
        BIG,
        "its name is absolute",
    );
    // A long name from a PAX header is held to the same rules.
    refused(
        &[layer(&[
            pax(&[("path", "ok/../../../x")]),
            file("ok", 0o644, b""),
        ])],
        BIG,
        "'..'",
    );
}

#[test]
fn an_entry_through_a_symbolic_link_is_refused() {
    let s = Scratch::new();
    let out = s.outside();
    let out = out.to_str().unwrap();
    for (layers, why) in [
        // In the same layer, and in a later one.
        (
            vec![layer(&[symlink("l", out), file("l/pwned", 0o644, b"x")])],
            "it goes through the symbolic link \"l\"",
        ),
        (
            vec![
                layer(&[symlink("l", out)]),
                layer(&[file("l/pwned", 0o644, b"x")]),
            ],
            "the symbolic link \"l\"",
        ),
        // A relative link, deeper, and a folder entry through it.
        (
            vec![layer(&[
                dir("d", 0o755),
                symlink("d/up", "../.."),
                dir("d/up/outside/new", 0o755),
            ])],
            "the symbolic link \"d/up\"",
        ),
        // A whiteout through a link removes nothing outside.
        (
            vec![layer(&[
                symlink("l", out),
                file("l/.wh.secret", 0o644, b""),
            ])],
            "the symbolic link \"l\"",
        ),
        // A hard link named through a link, and one whose target is.
        (
            vec![layer(&[
                file("f", 0o644, b"f"),
                symlink("l", out),
                hardlink("l/h", "f"),
            ])],
            "the symbolic link \"l\"",
        ),
        (
            vec![layer(&[symlink("l", out), hardlink("h", "l/secret")])],
            "its hard link target \"l/secret\": it goes through the symbolic link \"l\"",
        ),
    ] {
        refused(&layers, BIG, why);
    }
    drop(s);
}

#[test]
fn a_link_replaced_by_an_entry_is_replaced_not_followed() {
    let s = Scratch::new();
    let out = s.outside();
    let secret = out.join("secret");
    let u = unpack(
        &s,
        &[
            layer(&[
                symlink("f", secret.to_str().unwrap()),
                symlink("d", out.to_str().unwrap()),
            ]),
            layer(&[
                file("f", 0o644, b"mine"),
                dir("d", 0o755),
                file("d/secret", 0o644, b"mine"),
            ]),
        ],
        BIG,
    )
    .unwrap();
    assert_eq!(u.entries, 5);
    s.outside_untouched();
    assert_eq!(std::fs::read(s.root().join("f")).unwrap(), b"mine");
    assert!(s.root().join("d").symlink_metadata().unwrap().is_dir());
    // Links themselves may point anywhere: nothing follows them here.
    let s = Scratch::new();
    unpack(
        &s,
        &[layer(&[
            symlink("etc-passwd", "/etc/passwd"),
            symlink("up", "../../.."),
        ])],
        BIG,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_link(s.root().join("up")).unwrap(),
        Path::new("../../..")
    );
    s.outside_untouched();
}

#[test]
fn hard_links_only_to_regular_files_inside() {
    let s = Scratch::new();
    let out = s.outside();
    for (layers, why) in [
        (
            vec![layer(&[hardlink("h", "../outside/secret")])],
            "its hard link target \"../outside/secret\": its name holds '..'",
        ),
        (
            vec![layer(&[hardlink(
                "h",
                &out.join("secret").to_string_lossy(),
            )])],
            "its name is absolute",
        ),
        (
            vec![layer(&[symlink("l", "/etc/passwd"), hardlink("h", "l")])],
            "it is a hard link to \"l\", which is not a regular file already in the image",
        ),
        (
            vec![layer(&[dir("d", 0o755), hardlink("h", "d")])],
            "not a regular file already in the image",
        ),
        (
            vec![layer(&[hardlink("h", "missing")])],
            "not a regular file already in the image",
        ),
        (
            vec![layer(&[hardlink("h", ".")])],
            "a hard link to the rootfs itself",
        ),
    ] {
        refused(&layers, BIG, why);
    }
    // One to a file inside is a link; a later file at its name is a new
    // file, never a write through the link.
    let s2 = Scratch::new();
    unpack(
        &s2,
        &[
            layer(&[file("a", 0o644, b"a"), hardlink("b", "a")]),
            layer(&[file("b", 0o644, b"b")]),
        ],
        BIG,
    )
    .unwrap();
    assert_eq!(std::fs::read(s2.root().join("a")).unwrap(), b"a");
    assert_eq!(std::fs::read(s2.root().join("b")).unwrap(), b"b");
    drop(s);
}

#[test]
fn device_nodes_and_pipes_are_dropped() {
    let s = Scratch::new();
    let u = unpack(
        &s,
        &[
            layer(&[file("dev/null", 0o644, b"lower")]),
            layer(&[
                header("dev/null", b'3', 0o666, 0, ""),
                header("dev/sda", b'4', 0o660, 0, ""),
                header("fifo", b'6', 0o644, 0, ""),
            ]),
        ],
        BIG,
    )
    .unwrap();
    assert_eq!(u.dropped_nodes, 3);
    assert_eq!(u.dropped_named, ["dev/null", "dev/sda", "fifo"]);
    assert!(
        !exists(&s.root().join("dev/null")),
        "what the node replaced is gone"
    );
    assert!(!exists(&s.root().join("dev/sda")));
    assert!(!exists(&s.root().join("fifo")));
}

#[test]
fn setuid_setgid_sticky_bits_and_capabilities_are_cleared() {
    let s = Scratch::new();
    let u = unpack(
        &s,
        &[layer(&[
            file("suid", 0o4755, b"#!/bin/sh\n"),
            file("sgid", 0o2711, b""),
            dir("sticky", 0o1777),
            dir("sgid-dir", 0o2755),
            // File capabilities travel as an extended attribute.
            pax(&[
                ("SCHILY.xattr.security.capability", "\u{1}\0\0\u{2}"),
                ("SCHILY.xattr.user.x", "y"),
            ]),
            file("cap", 0o755, b"x"),
            file("plain", 0o640, b""),
        ])],
        BIG,
    )
    .unwrap();
    assert_eq!(u.cleared_bits, 4);
    assert_eq!(u.cleared_named, ["suid", "sgid", "sticky", "sgid-dir"]);
    for (name, want) in [
        ("suid", 0o555),
        ("sgid", 0o511),
        ("sticky", 0o555),
        ("sgid-dir", 0o555),
        ("cap", 0o555),
        ("plain", 0o440),
        ("", 0o555),
    ] {
        let mode = std::fs::symlink_metadata(s.root().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, want, "{name}: {mode:o}");
    }
    let mut buf = [0u8; 64];
    for attr in ["security.capability", "user.x"] {
        let got = rustix::fs::getxattr(s.root().join("cap"), attr, &mut buf[..]);
        assert_eq!(got.unwrap_err(), rustix::io::Errno::NODATA, "{attr}");
    }
}

#[test]
fn whiteouts_hide_lower_layers_only() {
    let s = Scratch::new();
    unpack(
        &s,
        &[
            layer(&[
                dir("d", 0o755),
                file("d/a", 0o644, b"a"),
                file("d/b", 0o644, b"b"),
                file("x", 0o644, b"x"),
                dir("o", 0o755),
                file("o/old", 0o644, b""),
                dir("o/sub", 0o555),
                file("o/sub/deep", 0o444, b""),
                dir("gone", 0o500),
                file("gone/f", 0o400, b""),
            ]),
            layer(&[
                file(".wh.x", 0o644, b""),
                file("d/.wh.a", 0o644, b""),
                // This layer's own entry survives its opaque whiteout,
                // before or after it.
                file("o/new", 0o644, b"n"),
                file("o/.wh..wh..opq", 0o644, b""),
                file("o/newer", 0o644, b"n"),
                file(".wh.gone", 0o644, b""),
                // Nothing to hide: no folder is made for it.
                file("nope/.wh.z", 0o644, b""),
                // A whiteout and its name in one layer: the entry stays.
                file("y", 0o644, b"y"),
                file(".wh.y", 0o644, b""),
            ]),
        ],
        BIG,
    )
    .unwrap();
    let r = s.root();
    assert!(!exists(&r.join("x")));
    assert!(!exists(&r.join("d/a")));
    assert!(exists(&r.join("d/b")));
    assert!(!exists(&r.join("o/old")));
    assert!(!exists(&r.join("o/sub")));
    assert!(exists(&r.join("o/new")));
    assert!(exists(&r.join("o/newer")));
    assert!(!exists(&r.join("gone")));
    assert!(!exists(&r.join("nope")));
    assert!(exists(&r.join("y")));
    assert!(!exists(&r.join("d/.wh.a")) && !exists(&r.join(".wh.x")));
    refused(
        &[layer(&[file(".wh.", 0o644, b"")])],
        BIG,
        "a whiteout of no valid name",
    );
    refused(
        &[layer(&[file(".wh...", 0o644, b"")])],
        BIG,
        "a whiteout of no valid name",
    );
}

#[test]
fn sizes_are_bounded_before_anything_is_read() {
    let small = Bounds {
        bytes: 1000,
        entries: 10,
    };
    // A PAX size of a petabyte is refused on its word, before a byte.
    let e = refused(
        &[layer(&[
            pax(&[("size", "1125899906842624")]),
            file("big", 0o644, b""),
        ])],
        small,
        "its 1125899906842624 bytes would take the image over 0 MiB of data",
    );
    assert!(e.bound);
    // Data on an entry that is not a file counts too (it is read to be
    // skipped).
    refused(
        &[layer(&[
            file("a", 0o644, &[b'a'; 600]),
            pax(&[("size", "600")]),
            dir("d", 0o755),
        ])],
        small,
        "its 600 bytes would take the image over",
    );
    // Across layers.
    refused(
        &[
            layer(&[file("a", 0o644, &[b'a'; 600])]),
            layer(&[file("b", 0o644, &[b'b'; 600])]),
        ],
        small,
        "layer 2 of 2",
    );
    // A PAX header or a long name claiming a terabyte is refused before
    // it is read.
    refused(
        &[layer(&[header("././@PaxHeader", b'x', 0o644, 1 << 40, "")])],
        small,
        "its PAX header is 1099511627776 bytes, over the 65536 the node reads",
    );
    refused(
        &[layer(&[header("././@LongLink", b'L', 0o644, 1 << 40, "")])],
        small,
        "its long name is 1099511627776 bytes, over the 4096",
    );
    // A name over PATH_MAX or too deep.
    let long = "a/".repeat(129) + "f";
    refused(
        &[layer(&[pax(&[("path", &long)]), file("x", 0o644, b"")])],
        BIG,
        "it is over 128 folders deep",
    );
}

#[test]
fn entries_are_bounded() {
    let bounds = Bounds {
        bytes: 1 << 20,
        entries: 10,
    };
    let many: Vec<Vec<u8>> = (0..11)
        .map(|i| file(&format!("f{i}"), 0o644, b""))
        .collect();
    let e = refused(
        &[layer(&many)],
        bounds,
        "the image has over 10 entries, the bound of one image",
    );
    assert!(e.bound);
    // Across layers, and long names and PAX headers count.
    let six: Vec<Vec<u8>> = (0..6).map(|i| file(&format!("f{i}"), 0o644, b"")).collect();
    refused(&[layer(&six), layer(&six)], bounds, "layer 2 of 2");
    let paxed: Vec<Vec<u8>> = (0..6)
        .flat_map(|i| [pax(&[("path", &format!("p{i}"))]), file("x", 0o644, b"")])
        .collect();
    refused(&[layer(&paxed)], bounds, "over 10 entries");
    let s = Scratch::new();
    let ten: Vec<Vec<u8>> = (0..10)
        .map(|i| file(&format!("f{i}"), 0o644, b""))
        .collect();
    assert_eq!(unpack(&s, &[layer(&ten)], bounds).unwrap().entries, 10);
}

#[test]
fn a_layer_without_its_diff_id_is_refused() {
    let s = Scratch::new();
    let root =
        rustix::fs::open(s.root(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut tree = Tree::new(root, BIG);
    let l = layer(&[file("a", 0o644, b"a")]);
    let blob = Digest::of(b"the blob");
    let other = Digest::of(b"another layer");
    let e = tree
        .apply(1, 1, &blob, &l[..], Compression::None, &other)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "layer 1 of 1 ({blob}): its uncompressed content has the digest {}, not {other} as the image's config names it: the image is damaged or was changed",
            Digest::of(&l)
        )
    );
    // Bytes after the archive's end are part of it.
    let root =
        rustix::fs::open(s.root(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut tree = Tree::new(root, BIG);
    let mut padded = l.clone();
    padded.extend(vec![0u8; 512]);
    let e = tree.apply(1, 1, &blob, &padded[..], Compression::None, &Digest::of(&l));
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("its uncompressed content has the digest"));
}

#[test]
fn gzip_layers_are_checked_uncompressed() {
    let s = Scratch::new();
    let l = layer(&[
        dir("etc", 0o755),
        file("etc/os-release", 0o644, b"ID=test\n"),
    ]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&l).unwrap();
    let gz = gz.finish().unwrap();
    let root =
        rustix::fs::open(s.root(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut tree = Tree::new(root, BIG);
    tree.apply(
        1,
        1,
        &Digest::of(&gz),
        &gz[..],
        Compression::Gzip,
        &Digest::of(&l),
    )
    .unwrap();
    let u = tree.finish().unwrap();
    assert_eq!(u.bytes, 8);
    assert_eq!(
        std::fs::read(s.root().join("etc/os-release")).unwrap(),
        b"ID=test\n"
    );
    // The folder and the file are read-only.
    assert!(
        std::fs::write(s.root().join("etc/new"), b"").is_err()
            || rustix::process::geteuid().is_root()
    );
}
