//! Pulls from a registry made here into a cache under a temp dir.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;
use crate::manifest::{OCI_INDEX, OCI_MANIFEST};
use crate::registry::tests::{serve, Answer, Fake};
use crate::registry::Options;
use crate::unpack::tests::{dir, file, layer};

/// Blobs and manifests by digest, served under any repository.
#[derive(Default, Clone)]
struct Store(Arc<Mutex<Blobs>>);

/// Each blob's media type and bytes.
type Blobs = HashMap<Digest, (String, Vec<u8>)>;

impl Store {
    fn put(&self, media_type: &str, body: Vec<u8>) -> Digest {
        let d = Digest::of(&body);
        self.0
            .lock()
            .unwrap()
            .insert(d.clone(), (media_type.into(), body));
        d
    }
    fn serve(&self) -> Fake {
        self.serve_slow(std::time::Duration::ZERO)
    }
    /// Serves, each manifest after `delay` (so that pulls overlap).
    fn serve_slow(&self, delay: std::time::Duration) -> Fake {
        let s = self.clone();
        serve(Arc::new(move |_, path, _| -> Answer {
            if path.contains("/manifests/") {
                std::thread::sleep(delay);
            }
            let d = path.rsplit('/').next().and_then(Digest::parse);
            match d.and_then(|d| s.0.lock().unwrap().get(&d).cloned()) {
                Some((ct, body)) => (200, vec![("Content-Type".into(), ct)], body),
                None => (404, vec![], vec![]),
            }
        }))
    }
    /// An image of `layers` (plain tar streams; gzip ones when `gzip`)
    /// whose config names `diff_ids` (each layer's own when `None`).
    fn image(&self, layers: &[Vec<u8>], gzip: bool, diff_ids: Option<Vec<Digest>>) -> Digest {
        let (os, arch) = manifest::this_platform();
        let mut descs = Vec::new();
        for l in layers {
            let (mt, blob) = if gzip {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(l).unwrap();
                (
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                    gz.finish().unwrap(),
                )
            } else {
                ("application/vnd.oci.image.layer.v1.tar", l.clone())
            };
            let size = blob.len();
            let d = self.put(mt, blob);
            descs.push(format!(
                r#"{{"mediaType":"{mt}","digest":"{d}","size":{size}}}"#
            ));
        }
        let ids = diff_ids.unwrap_or_else(|| layers.iter().map(|l| Digest::of(l)).collect());
        let ids: Vec<String> = ids.iter().map(|d| format!("\"{d}\"")).collect();
        let config = format!(
            r#"{{"architecture":"{arch}","os":"{os}","config":{{"Entrypoint":["/bin/server"],"Cmd":["--stdio"],"Env":["PATH=/bin"],"WorkingDir":"/srv","User":"1000"}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            ids.join(",")
        );
        let csize = config.len();
        let cd = self.put(
            "application/vnd.oci.image.config.v1+json",
            config.into_bytes(),
        );
        let m = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{cd}","size":{csize}}},"layers":[{}]}}"#,
            descs.join(",")
        );
        self.put(OCI_MANIFEST, m.into_bytes())
    }
}

struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        let p = std::env::temp_dir().join(format!("oz0-oci-cache-{}", fsx::random_name()));
        std::fs::create_dir(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let tmp = rustix::fs::open(
            std::env::temp_dir(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        fsx::remove_at(tmp.as_fd(), self.0.file_name().unwrap()).unwrap();
    }
}

fn client(fake: &Fake) -> Client {
    Client::new(&Options {
        allowed: vec![fake.host()],
        ..Options::default()
    })
    .unwrap()
}

fn reference(fake: &Fake, d: &Digest) -> Reference {
    Reference::parse(&format!("oci:{}/acme/tool@{d}", fake.host())).unwrap()
}

fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_image_is_pulled_once_and_unpacked_once() {
    let store = Store::default();
    let d = store.image(
        &[
            layer(&[
                dir("bin", 0o755),
                file("bin/server", 0o4755, b"#!/bin/sh\n"),
                file("etc/old", 0o644, b""),
            ]),
            layer(&[
                file("etc/.wh.old", 0o644, b""),
                file("srv/data", 0o644, b"data"),
            ]),
        ],
        true,
        None,
    );
    let fake = store.serve();
    let data = Dir::new();
    let cache = Cache::open(&data.0, 1 << 30).unwrap();
    let c = client(&fake);
    let i = cache.pull(&c, &reference(&fake, &d)).unwrap();
    assert!(i.pulled);
    assert_eq!(
        i.rootfs,
        data.0.join("oci/images").join(d.hex()).join("rootfs")
    );
    assert_eq!(names(&i.rootfs), ["bin", "etc", "srv"]);
    assert!(names(&i.rootfs.join("etc")).is_empty());
    assert_eq!(std::fs::read(i.rootfs.join("srv/data")).unwrap(), b"data");
    assert_eq!(i.record.config.entrypoint, ["/bin/server"]);
    assert_eq!(i.record.config.cmd, ["--stdio"]);
    assert_eq!(i.record.config.working_dir.as_deref(), Some("/srv"));
    assert_eq!(i.record.unpacked.cleared_named, ["bin/server"]);
    assert_eq!(i.record.layers.len(), 2);
    // Nothing is left under tmp/: the blobs went with the pull.
    assert!(names(&data.0.join("oci/tmp")).is_empty());
    let gets = fake.gets("");
    drop(i);
    // Again: from the cache, no GET.
    let i = cache.pull(&c, &reference(&fake, &d)).unwrap();
    assert!(!i.pulled);
    assert_eq!(fake.gets(""), gets);
    assert_eq!(cache.get(&d).unwrap().unwrap().record, i.record);
}

#[test]
fn two_pulls_of_one_digest_do_not_race() {
    let store = Store::default();
    let d = store.image(&[layer(&[file("f", 0o644, &[7u8; 100_000])])], true, None);
    // The first pull is still fetching when the others start.
    let fake = store.serve_slow(std::time::Duration::from_millis(300));
    let data = Dir::new();
    let pulled: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    // Each its own cache handle and client, as separate
                    // processes would be.
                    let cache = Cache::open(&data.0, 1 << 30).unwrap();
                    cache
                        .pull(&client(&fake), &reference(&fake, &d))
                        .unwrap()
                        .pulled
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(pulled.iter().filter(|p| **p).count(), 1, "{pulled:?}");
    assert_eq!(fake.gets("/v2/acme/tool/manifests/"), 1);
}

#[test]
fn a_bad_image_is_refused_and_leaves_nothing() {
    let store = Store::default();
    let l = layer(&[file("a", 0o644, b"a")]);
    let wrong = Digest::of(b"not the layer");
    let d = store.image(std::slice::from_ref(&l), false, Some(vec![wrong.clone()]));
    let escape = store.image(&[layer(&[file("../escape", 0o644, b"x")])], true, None);
    let fake = store.serve();
    let data = Dir::new();
    let cache = Cache::open(&data.0, 1 << 30).unwrap();
    let c = client(&fake);
    let e = cache
        .pull(&c, &reference(&fake, &d))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "layer 1 of 1 ({}): its uncompressed content has the digest {}, not {wrong}",
            Digest::of(&l),
            Digest::of(&l)
        )),
        "{e}"
    );
    let e = cache
        .pull(&c, &reference(&fake, &escape))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("entry \"../escape\": its name holds '..'"),
        "{e}"
    );
    assert!(names(&data.0.join("oci/images")).is_empty());
    assert!(names(&data.0.join("oci/tmp")).is_empty());
    assert!(!data.0.join("escape").exists() && !data.0.join("oci/tmp/escape").exists());
    // A blob the registry changed is named with its digest.
    let d2 = store.image(&[layer(&[file("b", 0o644, b"b")])], true, None);
    let manifest = store.0.lock().unwrap()[&d2].1.clone();
    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let layer_digest = Digest::parse(m["layers"][0]["digest"].as_str().unwrap()).unwrap();
    let size = usize::try_from(m["layers"][0]["size"].as_u64().unwrap()).unwrap();
    store.0.lock().unwrap().get_mut(&layer_digest).unwrap().1 = vec![0u8; size];
    let e = cache
        .pull(&c, &reference(&fake, &d2))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "layer 1 of 1 ({layer_digest}) from {}: what the registry sent has the digest",
            fake.host()
        )),
        "{e}"
    );
    // Over the cache's bound, refused before a layer is fetched.
    let small = Cache::open(&data.0, 10).unwrap();
    let before = fake.gets("/v2/acme/tool/blobs/");
    let d3 = store.image(&[layer(&[file("c", 0o644, b"c")])], false, None);
    let e = small
        .pull(&c, &reference(&fake, &d3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("over the cache's bound of 10 bytes"), "{e}");
    assert_eq!(
        fake.gets("/v2/acme/tool/blobs/"),
        before + 1,
        "only the config"
    );
}

#[test]
fn an_index_gives_this_platforms_image() {
    let store = Store::default();
    let (os, arch) = manifest::this_platform();
    let img = store.image(&[layer(&[file("hello", 0o644, b"hi")])], true, None);
    let size = store.0.lock().unwrap()[&img].1.len();
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{img}","size":{size},"platform":{{"os":"{os}","architecture":"{arch}"}}}}]}}"#
    );
    let d = store.put(OCI_INDEX, index.into_bytes());
    let fake = store.serve();
    let data = Dir::new();
    let cache = Cache::open(&data.0, 1 << 30).unwrap();
    let i = cache.pull(&client(&fake), &reference(&fake, &d)).unwrap();
    assert_eq!(
        (i.record.digest.clone(), i.record.manifest.clone()),
        (d.clone(), img)
    );
    assert_eq!(std::fs::read(i.rootfs.join("hello")).unwrap(), b"hi");
}

#[test]
fn the_least_recently_used_image_nobody_holds_is_evicted() {
    let store = Store::default();
    let a = store.image(&[layer(&[file("a", 0o644, &[1u8; 600])])], true, None);
    let b = store.image(&[layer(&[file("b", 0o644, &[2u8; 600])])], true, None);
    let c3 = store.image(&[layer(&[file("c", 0o644, &[3u8; 600])])], true, None);
    let fake = store.serve();
    let data = Dir::new();
    // Room for one image's 600 bytes and a bit: every pull evicts.
    let cache = Cache::open(&data.0, 4000).unwrap();
    let c = client(&fake);
    let held = cache.pull(&c, &reference(&fake, &a)).unwrap();
    drop(cache.pull(&c, &reference(&fake, &b)).unwrap());
    // Bound the cache tighter: a held image stays, the other goes.
    let tight = Cache::open(&data.0, 1000).unwrap();
    drop(tight.pull(&c, &reference(&fake, &c3)).unwrap());
    let left = names(&data.0.join("oci/images"));
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&a.hex().to_string()), "held: {left:?}");
    assert!(
        left.contains(&c3.hex().to_string()),
        "just pulled: {left:?}"
    );
    assert!(names(&data.0.join("oci/tmp")).is_empty());
    drop(held);
    let d = store.image(&[layer(&[file("d", 0o644, &[4u8; 600])])], true, None);
    drop(tight.pull(&c, &reference(&fake, &d)).unwrap());
    let left = names(&data.0.join("oci/images"));
    assert_eq!(left, [d.hex().to_string()]);
}
