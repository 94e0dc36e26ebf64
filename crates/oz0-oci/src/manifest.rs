//! Manifests, indexes and image configs: only the OCI image manifest and
//! index and Docker's v2 schema 2 manifest and list are taken, each bounded
//! before it is parsed; an index gives the manifest of this node's
//! platform.

use serde::{Deserialize, Serialize};

use crate::reference::{shown, Digest};

/// Largest manifest, index or config read (the registries' own bound is 4 MiB).
pub const MAX_MANIFEST: u64 = 4 << 20;
/// Most layers an image may have (Docker's own bound is 127).
pub const MAX_LAYERS: usize = 128;
/// Most manifests an index may list.
pub const MAX_INDEX_ENTRIES: usize = 1024;

/// The OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's v2 schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's v2 schema 2 manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Every manifest type asked for (`Accept`).
pub const MANIFEST_TYPES: &[&str] = &[OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST];

const CONFIG_TYPES: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];

/// How a layer's tar stream is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// A plain tar stream.
    None,
    /// gzip.
    Gzip,
}

/// The layer's compression, or why its media type is refused.
fn layer_compression(media_type: &str) -> Result<Compression, String> {
    match media_type {
        "application/vnd.oci.image.layer.v1.tar" => Ok(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok(Compression::Gzip),
        "application/vnd.oci.image.layer.v1.tar+zstd" => Err(
            "zstd-compressed layers are not supported yet: push the image with gzip layers (e.g. `skopeo copy --dest-compress-format gzip`)".into(),
        ),
        t if t.contains("nondistributable") || t.contains("foreign") => Err(format!(
            "{} is a foreign layer, fetched from URLs outside the registry, which the node never follows",
            shown(t)
        )),
        t => Err(format!("{} is not a layer type the node unpacks (OCI tar, tar+gzip or Docker's tar.gzip)", shown(t))),
    }
}

/// A descriptor as manifests carry it.
#[derive(Debug, Clone, Deserialize)]
pub struct RawDescriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    platform: Option<Platform>,
}

/// An index entry's platform.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct Platform {
    /// `amd64`, `arm64`, …
    pub architecture: String,
    /// `linux`, …
    pub os: String,
    /// `v8`, …
    #[serde(default)]
    pub variant: Option<String>,
}

/// A checked descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes, as the manifest declares.
    pub size: u64,
}

/// One layer: its blob and how to read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layer {
    /// The blob.
    pub blob: Descriptor,
    /// Its compression.
    pub compression: Compression,
}

/// A parsed image manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The config blob.
    pub config: Descriptor,
    /// The layers, lowest first.
    pub layers: Vec<Layer>,
}

/// A manifest document: an image manifest or an index of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Document {
    /// One image.
    Image(Manifest),
    /// One manifest per platform.
    Index(Vec<(Descriptor, Option<Platform>)>),
}

#[derive(Deserialize)]
struct RawDocument {
    #[serde(rename = "schemaVersion")]
    schema_version: Option<u32>,
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    config: Option<RawDescriptor>,
    layers: Option<Vec<RawDescriptor>>,
    manifests: Option<Vec<RawDescriptor>>,
}

fn descriptor(d: &RawDescriptor, what: &str) -> Result<Descriptor, String> {
    let digest = Digest::parse(&d.digest).ok_or_else(|| {
        format!(
            "{what} has the digest {}, not sha256:<64 hex digits>",
            shown(&d.digest)
        )
    })?;
    let size = u64::try_from(d.size).map_err(|_| format!("{what} has a negative size"))?;
    Ok(Descriptor {
        media_type: d.media_type.clone(),
        digest,
        size,
    })
}

/// Parses a manifest or an index (at most [`MAX_MANIFEST`] bytes, which the
/// caller bounded); `content_type` is the registry's `Content-Type`, when
/// the document came from one.
pub fn parse_document(body: &[u8], content_type: Option<&str>) -> Result<Document, String> {
    let raw: RawDocument =
        serde_json::from_slice(body).map_err(|e| format!("it is not a manifest's JSON: {e}"))?;
    if raw.schema_version != Some(2) {
        return Err("its schemaVersion is not 2 (Docker's schema 1 is refused)".into());
    }
    let header = content_type
        .map(|c| c.split(';').next().unwrap_or("").trim())
        .filter(|c| MANIFEST_TYPES.contains(c));
    let kind = raw.media_type.as_deref().or(header);
    if let Some(k) = kind {
        if !MANIFEST_TYPES.contains(&k) {
            return Err(format!(
                "its media type {} is not an OCI image manifest or index, nor Docker's v2 schema 2 manifest or list",
                shown(k)
            ));
        }
    }
    let is_index = match (kind, &raw.manifests, &raw.config) {
        (Some(OCI_INDEX | DOCKER_LIST), Some(_), None) => true,
        (Some(OCI_MANIFEST | DOCKER_MANIFEST), None, Some(_)) => false,
        (None, Some(_), None) => true,
        (None, None, Some(_)) => false,
        _ => return Err("its media type and its fields disagree (an image has config and layers, an index manifests)".into()),
    };
    if is_index {
        let list = raw.manifests.unwrap_or_default();
        if list.len() > MAX_INDEX_ENTRIES {
            return Err(format!("it lists over {MAX_INDEX_ENTRIES} manifests"));
        }
        let mut out = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            out.push((
                descriptor(m, &format!("manifest {}", i + 1))?,
                m.platform.clone(),
            ));
        }
        return Ok(Document::Index(out));
    }
    let config = descriptor(raw.config.as_ref().expect("checked above"), "its config")?;
    if !CONFIG_TYPES.contains(&config.media_type.as_str()) {
        return Err(format!(
            "its config's media type {} is not an image config",
            shown(&config.media_type)
        ));
    }
    let raw_layers = raw.layers.unwrap_or_default();
    if raw_layers.len() > MAX_LAYERS {
        return Err(format!(
            "it has {} layers, over {MAX_LAYERS}",
            raw_layers.len()
        ));
    }
    let mut layers = Vec::with_capacity(raw_layers.len());
    for (i, l) in raw_layers.iter().enumerate() {
        let what = format!("layer {} of {}", i + 1, raw_layers.len());
        let blob = descriptor(l, &what)?;
        let compression = layer_compression(&blob.media_type)
            .map_err(|e| format!("{what} ({}): {e}", blob.digest))?;
        layers.push(Layer { blob, compression });
    }
    Ok(Document::Image(Manifest { config, layers }))
}

/// This node's platform as images name it (`linux`, `amd64`).
pub fn this_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    };
    ("linux", arch)
}

/// The entry of an index for this node's platform, or why none fits.
pub fn pick_platform(entries: &[(Descriptor, Option<Platform>)]) -> Result<Descriptor, String> {
    let (os, arch) = this_platform();
    let fits = |p: &Platform| {
        p.os == os
            && p.architecture == arch
            && (arch != "arm64" || p.variant.as_deref().is_none_or(|v| v == "v8"))
    };
    let found = entries.iter().find(|(d, p)| {
        p.as_ref().is_some_and(fits)
            && [OCI_MANIFEST, DOCKER_MANIFEST].contains(&d.media_type.as_str())
    });
    match found {
        Some((d, _)) if d.size > MAX_MANIFEST => Err(format!(
            "its {os}/{arch} manifest {} declares {} bytes, over {MAX_MANIFEST}",
            d.digest, d.size
        )),
        Some((d, _)) => Ok(d.clone()),
        None => {
            let have: Vec<String> = entries
                .iter()
                .filter_map(|(_, p)| p.as_ref())
                .map(|p| match &p.variant {
                    Some(v) => format!("{}/{}/{}", p.os, p.architecture, v),
                    None => format!("{}/{}", p.os, p.architecture),
                })
                .collect();
            Err(format!(
                "it has no image for this node's platform {os}/{arch} (it has: {}): pull an image built for {os}/{arch}",
                shown(&have.join(", "))
            ))
        }
    }
}

/// What a run of the image starts with: the config's `config` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env`, `NAME=VALUE` each.
    pub env: Vec<String>,
    /// `WorkingDir`, when set.
    pub working_dir: Option<String>,
    /// `User`, when set (the run is the node's user all the same).
    pub user: Option<String>,
}

/// A parsed image config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageConfig {
    /// What a run starts with.
    pub run: RunConfig,
    /// The uncompressed digest of each layer, lowest first.
    pub diff_ids: Vec<Digest>,
}

#[derive(Deserialize)]
struct RawConfig {
    architecture: String,
    os: String,
    #[serde(default)]
    config: Option<RawRun>,
    rootfs: RawRootfs,
}

#[derive(Deserialize)]
struct RawRun {
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
}

#[derive(Deserialize)]
struct RawRootfs {
    #[serde(rename = "type")]
    kind: String,
    diff_ids: Vec<String>,
}

/// Parses an image config (bounded by the caller) for an image of
/// `layers` layers on this node's platform.
pub fn parse_config(body: &[u8], layers: usize) -> Result<ImageConfig, String> {
    let raw: RawConfig =
        serde_json::from_slice(body).map_err(|e| format!("it is not an image config: {e}"))?;
    let (os, arch) = this_platform();
    if raw.os != os || raw.architecture != arch {
        return Err(format!(
            "the image is for {}/{}, this node is {os}/{arch}: pull an image built for {os}/{arch}",
            shown(&raw.os),
            shown(&raw.architecture)
        ));
    }
    if raw.rootfs.kind != "layers" {
        return Err(format!(
            "its rootfs type is {}, not layers",
            shown(&raw.rootfs.kind)
        ));
    }
    if raw.rootfs.diff_ids.len() != layers {
        return Err(format!(
            "it names {} layer digests (diff_ids) for {layers} layers",
            raw.rootfs.diff_ids.len()
        ));
    }
    let diff_ids = raw
        .rootfs
        .diff_ids
        .iter()
        .map(|d| {
            Digest::parse(d)
                .ok_or_else(|| format!("its diff_id {} is not a sha256 digest", shown(d)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let r = raw.config.unwrap_or(RawRun {
        entrypoint: None,
        cmd: None,
        env: None,
        working_dir: None,
        user: None,
    });
    Ok(ImageConfig {
        run: RunConfig {
            entrypoint: r.entrypoint.unwrap_or_default(),
            cmd: r.cmd.unwrap_or_default(),
            env: r.env.unwrap_or_default(),
            working_dir: r.working_dir.filter(|w| !w.is_empty()),
            user: r.user.filter(|u| !u.is_empty()),
        },
        diff_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn an_oci_manifest_parses() {
        let body = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":10}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":20}}]}}"#,
            d('a'),
            d('b')
        );
        let Document::Image(m) = parse_document(body.as_bytes(), None).unwrap() else {
            panic!("not an image")
        };
        assert_eq!(m.layers[0].compression, Compression::Gzip);
        assert_eq!(m.layers[0].blob.size, 20);
    }

    #[test]
    fn other_types_are_refused() {
        let v1 = r#"{"schemaVersion":1,"name":"x"}"#;
        assert!(parse_document(v1.as_bytes(), None)
            .unwrap_err()
            .contains("schema 1"));
        let odd = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.example+json","config":{{"mediaType":"x","digest":"{}","size":1}},"layers":[]}}"#,
            d('a')
        );
        assert!(parse_document(odd.as_bytes(), None)
            .unwrap_err()
            .contains("media type"));
        let zstd = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":1}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","digest":"{}","size":1}}]}}"#,
            d('a'),
            d('b')
        );
        assert!(parse_document(zstd.as_bytes(), None)
            .unwrap_err()
            .contains("zstd"));
    }

    #[test]
    fn an_index_gives_this_platform() {
        let (os, arch) = this_platform();
        let body = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[
              {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":5,"platform":{{"os":"linux","architecture":"s390x"}}}},
              {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":6,"platform":{{"os":"{os}","architecture":"{arch}"}}}}]}}"#,
            d('a'),
            d('b')
        );
        let Document::Index(list) = parse_document(body.as_bytes(), None).unwrap() else {
            panic!("not an index")
        };
        assert_eq!(pick_platform(&list).unwrap().digest.to_string(), d('b'));
        let e = pick_platform(&list[..1]).unwrap_err();
        assert!(e.contains("linux/s390x"), "{e}");
    }
}
