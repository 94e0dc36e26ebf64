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

/// Why a manifest, an index or a config is refused: each names the value
/// at fault and, where the operator can do something, what.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// A manifest or index that is not JSON of the expected shape.
    #[error("it is not a manifest's JSON: {0}")]
    NotManifestJson(serde_json::Error),
    /// Docker's schema 1, or no schema version.
    #[error("its schemaVersion is not 2 (Docker's schema 1 is refused): push the image as OCI or Docker v2 schema 2 (e.g. `skopeo copy --format oci`)")]
    SchemaVersion,
    /// A media type that is no manifest or index the node reads.
    #[error("its media type {0} is not an OCI image manifest or index, nor Docker's v2 schema 2 manifest or list")]
    MediaType(
        /// The media type (escaped).
        String,
    ),
    /// A media type and fields that disagree.
    #[error("its media type and its fields disagree (an image has config and layers, an index manifests)")]
    Shape,
    /// An index of over [`MAX_INDEX_ENTRIES`] manifests.
    #[error("it lists over {MAX_INDEX_ENTRIES} manifests")]
    TooManyManifests,
    /// A descriptor whose digest is not a sha256 digest.
    #[error("{what} has the digest {digest}, not sha256:<64 hex digits>")]
    BadDigest {
        /// Which descriptor: `its config`, `layer 2 of 3`, `manifest 4`.
        what: String,
        /// The digest as given (escaped).
        digest: String,
    },
    /// A descriptor with a negative size.
    #[error("{what} has a negative size")]
    NegativeSize {
        /// Which descriptor.
        what: String,
    },
    /// A config descriptor of another media type.
    #[error("its config's media type {0} is not an image config")]
    ConfigType(
        /// The media type (escaped).
        String,
    ),
    /// Over [`MAX_LAYERS`] layers.
    #[error("it has {0} layers, over {MAX_LAYERS}")]
    TooManyLayers(
        /// How many it has.
        usize,
    ),
    /// A zstd-compressed layer.
    #[error("{what} ({digest}): zstd-compressed layers are not supported yet: push the image with gzip layers (e.g. `skopeo copy --dest-compress-format gzip`)")]
    ZstdLayer {
        /// Which layer: `layer 2 of 3`.
        what: String,
        /// Its blob's digest.
        digest: Digest,
    },
    /// A foreign (non-distributable) layer.
    #[error("{what} ({digest}): {media_type} is a foreign layer, fetched from URLs outside the registry, which the node never follows")]
    ForeignLayer {
        /// Which layer.
        what: String,
        /// Its blob's digest.
        digest: Digest,
        /// Its media type (escaped).
        media_type: String,
    },
    /// A layer of another media type.
    #[error("{what} ({digest}): {media_type} is not a layer type the node unpacks (OCI tar, tar+gzip or Docker's tar.gzip)")]
    LayerType {
        /// Which layer.
        what: String,
        /// Its blob's digest.
        digest: Digest,
        /// Its media type (escaped).
        media_type: String,
    },
    /// An index inside an index.
    #[error("it is an index inside an index, which the node does not follow")]
    NestedIndex,
    /// An index entry for this platform that is too big to read.
    #[error("its {platform} manifest {digest} declares {size} bytes, over {MAX_MANIFEST}")]
    PlatformManifestTooBig {
        /// This node's platform, `linux/amd64`.
        platform: String,
        /// The manifest's digest.
        digest: Digest,
        /// The size it declares.
        size: u64,
    },
    /// An index with no image for this node's platform.
    #[error("it has no image for this node's platform {platform} (it has: {have}): pull an image built for {platform}")]
    NoPlatform {
        /// This node's platform, `linux/amd64`.
        platform: String,
        /// The platforms it has (escaped).
        have: String,
    },
    /// A config that is not JSON of the expected shape.
    #[error("it is not an image config: {0}")]
    NotConfigJson(serde_json::Error),
    /// A config for another platform.
    #[error("the image is for {os}/{architecture}, this node is {platform}: pull an image built for {platform}")]
    WrongPlatform {
        /// The config's `os` (escaped).
        os: String,
        /// The config's `architecture` (escaped).
        architecture: String,
        /// This node's platform, `linux/amd64`.
        platform: String,
    },
    /// A config whose rootfs is not `layers`.
    #[error("its rootfs type is {0}, not layers")]
    RootfsType(
        /// The type (escaped).
        String,
    ),
    /// A config whose `diff_ids` do not match the manifest's layers.
    #[error("it names {named} layer digests (diff_ids) for {layers} layers")]
    DiffIdCount {
        /// How many `diff_ids` it names.
        named: usize,
        /// How many layers the manifest has.
        layers: usize,
    },
    /// A `diff_id` that is not a sha256 digest.
    #[error("its diff_id {0} is not a sha256 digest")]
    BadDiffId(
        /// The value (escaped).
        String,
    ),
}

/// The compression of layer `what` (`blob`), or why its media type is
/// refused.
fn layer_compression(what: &str, blob: &Descriptor) -> Result<Compression, ManifestError> {
    let what = what.to_string();
    let digest = blob.digest.clone();
    match blob.media_type.as_str() {
        "application/vnd.oci.image.layer.v1.tar" => Ok(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok(Compression::Gzip),
        "application/vnd.oci.image.layer.v1.tar+zstd" => {
            Err(ManifestError::ZstdLayer { what, digest })
        }
        t if t.contains("nondistributable") || t.contains("foreign") => {
            Err(ManifestError::ForeignLayer {
                what,
                digest,
                media_type: shown(t),
            })
        }
        t => Err(ManifestError::LayerType {
            what,
            digest,
            media_type: shown(t),
        }),
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

fn descriptor(d: &RawDescriptor, what: &str) -> Result<Descriptor, ManifestError> {
    let digest = Digest::parse(&d.digest).ok_or_else(|| ManifestError::BadDigest {
        what: what.into(),
        digest: shown(&d.digest),
    })?;
    let size =
        u64::try_from(d.size).map_err(|_| ManifestError::NegativeSize { what: what.into() })?;
    Ok(Descriptor {
        media_type: d.media_type.clone(),
        digest,
        size,
    })
}

/// Parses a manifest or an index (at most [`MAX_MANIFEST`] bytes, which the
/// caller bounded); `content_type` is the registry's `Content-Type`, when
/// the document came from one.
pub fn parse_document(body: &[u8], content_type: Option<&str>) -> Result<Document, ManifestError> {
    let raw: RawDocument = serde_json::from_slice(body).map_err(ManifestError::NotManifestJson)?;
    if raw.schema_version != Some(2) {
        return Err(ManifestError::SchemaVersion);
    }
    let header = content_type
        .map(|c| c.split(';').next().unwrap_or("").trim())
        .filter(|c| MANIFEST_TYPES.contains(c));
    let kind = raw.media_type.as_deref().or(header);
    if let Some(k) = kind {
        if !MANIFEST_TYPES.contains(&k) {
            return Err(ManifestError::MediaType(shown(k)));
        }
    }
    let is_index = match (kind, &raw.manifests, &raw.config) {
        (Some(OCI_INDEX | DOCKER_LIST), Some(_), None) => true,
        (Some(OCI_MANIFEST | DOCKER_MANIFEST), None, Some(_)) => false,
        (None, Some(_), None) => true,
        (None, None, Some(_)) => false,
        _ => return Err(ManifestError::Shape),
    };
    if is_index {
        let list = raw.manifests.unwrap_or_default();
        if list.len() > MAX_INDEX_ENTRIES {
            return Err(ManifestError::TooManyManifests);
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
        return Err(ManifestError::ConfigType(shown(&config.media_type)));
    }
    let raw_layers = raw.layers.unwrap_or_default();
    if raw_layers.len() > MAX_LAYERS {
        return Err(ManifestError::TooManyLayers(raw_layers.len()));
    }
    let mut layers = Vec::with_capacity(raw_layers.len());
    for (i, l) in raw_layers.iter().enumerate() {
        let what = format!("layer {} of {}", i + 1, raw_layers.len());
        let blob = descriptor(l, &what)?;
        let compression = layer_compression(&what, &blob)?;
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
pub fn pick_platform(
    entries: &[(Descriptor, Option<Platform>)],
) -> Result<Descriptor, ManifestError> {
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
        Some((d, _)) if d.size > MAX_MANIFEST => Err(ManifestError::PlatformManifestTooBig {
            platform: format!("{os}/{arch}"),
            digest: d.digest.clone(),
            size: d.size,
        }),
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
            Err(ManifestError::NoPlatform {
                platform: format!("{os}/{arch}"),
                have: shown(&have.join(", ")),
            })
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
pub fn parse_config(body: &[u8], layers: usize) -> Result<ImageConfig, ManifestError> {
    let raw: RawConfig = serde_json::from_slice(body).map_err(ManifestError::NotConfigJson)?;
    let (os, arch) = this_platform();
    if raw.os != os || raw.architecture != arch {
        return Err(ManifestError::WrongPlatform {
            os: shown(&raw.os),
            architecture: shown(&raw.architecture),
            platform: format!("{os}/{arch}"),
        });
    }
    if raw.rootfs.kind != "layers" {
        return Err(ManifestError::RootfsType(shown(&raw.rootfs.kind)));
    }
    if raw.rootfs.diff_ids.len() != layers {
        return Err(ManifestError::DiffIdCount {
            named: raw.rootfs.diff_ids.len(),
            layers,
        });
    }
    let diff_ids = raw
        .rootfs
        .diff_ids
        .iter()
        .map(|d| Digest::parse(d).ok_or_else(|| ManifestError::BadDiffId(shown(d))))
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
            .to_string()
            .contains("schema 1"));
        let odd = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.example+json","config":{{"mediaType":"x","digest":"{}","size":1}},"layers":[]}}"#,
            d('a')
        );
        assert!(parse_document(odd.as_bytes(), None)
            .unwrap_err()
            .to_string()
            .contains("media type"));
        let zstd = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":1}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","digest":"{}","size":1}}]}}"#,
            d('a'),
            d('b')
        );
        assert!(parse_document(zstd.as_bytes(), None)
            .unwrap_err()
            .to_string()
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
        let e = pick_platform(&list[..1]).unwrap_err().to_string();
        assert!(e.contains("linux/s390x"), "{e}");
    }
}
