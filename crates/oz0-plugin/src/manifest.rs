//! `oz0-plugin.yaml`: a plugin's tools, parsed and validated.
//!
//! Parse, don't validate: [`Manifest::parse`] returns only a manifest whose
//! every field holds (ids, isolation, memory and CPU ranges, egress rules,
//! variable names). Unknown keys are refused with their line and column, so
//! a misspelt `isolaton: microvm` never silently runs a tool in a container.
//! The text is bounded before any value is built ([`crate::yaml`]): no
//! anchors or aliases, and a bound on its values and their nesting.

use std::collections::BTreeSet;

use oz0_policy::net::AllowRule;
use serde::Deserialize;

/// Largest manifest accepted, in bytes.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// Most tools one manifest may declare.
pub const MAX_TOOLS: usize = 256;
/// Longest tool id.
pub const MAX_ID_BYTES: usize = 64;
/// Longest package reference.
pub const MAX_PACKAGE_BYTES: usize = 1024;
/// A microVM's memory when its tool's manifest names none, MiB (every
/// platform's VMs).
pub const DEFAULT_VM_MEMORY_MIB: u32 = 512;
/// Most egress rules, settings or secrets per tool.
pub const MAX_ENTRIES: usize = 128;
/// Smallest memory a tool may ask for, MiB (a guest kernel needs some).
pub const MIN_MEMORY_MB: u32 = 128;
/// Largest memory a tool may ask for, MiB.
pub const MAX_MEMORY_MB: u32 = 65536;
/// Most CPUs a tool may ask for.
pub const MAX_CPUS: f64 = 64.0;

/// Variable names a microVM tool may not name (exact, any case for proxies).
pub const VM_FORBIDDEN_NAMES: &[&str] = &["PATH", "HOME", "TMPDIR"];
/// Proxy variables (compared case-insensitively).
pub const VM_PROXY_NAMES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "FTP_PROXY",
];
/// Prefixes a microVM tool may not name: the loaders', the VMM's own, and
/// the node's (`OZ0_VMENV_` carries values to the VMM; `OZ0_EGRESS_TOKEN`
/// carries the run's token to the guest bridge).
pub const VM_FORBIDDEN_PREFIXES: &[&str] = &["LD_", "DYLD_", "SMOLVM_", "OZ0_VMENV_", "OZ0_"];

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Larger than [`MAX_MANIFEST_BYTES`].
    #[error(
        "oz0-plugin.yaml is {0} bytes, over the limit of {MAX_MANIFEST_BYTES}: split the plugin"
    )]
    TooLarge(usize),
    /// Not YAML, or a key or value of the wrong shape (unknown keys included).
    #[error("oz0-plugin.yaml{}: {message}", location.map(|(l, c)| format!(" line {l} column {c}")).unwrap_or_default())]
    Syntax {
        /// Line and column (1-based), when known.
        location: Option<(usize, usize)>,
        /// What the parser said.
        message: String,
    },
    /// Refused before any value was built: an anchor or alias, or past a
    /// bound of [`crate::yaml`].
    #[error("oz0-plugin.yaml line {line} column {column}: {why}")]
    Refused {
        /// Line (1-based).
        line: usize,
        /// Column (1-based).
        column: usize,
        /// What was refused.
        why: crate::yaml::Refusal,
    },
    /// A tool field is out of its rules.
    #[error("oz0-plugin.yaml: tool {tool:?}: {what}")]
    Tool {
        /// The tool's id (or its index when the id itself is bad).
        tool: String,
        /// What is wrong and how to fix it.
        what: String,
    },
    /// No tools.
    #[error("oz0-plugin.yaml declares no tools: add a `tools:` list")]
    NoTools,
    /// Too many tools.
    #[error("oz0-plugin.yaml declares {0} tools, over the limit of {MAX_TOOLS}")]
    TooManyTools(usize),
    /// The same id twice.
    #[error("oz0-plugin.yaml: tool id {0:?} is declared twice: ids must be unique")]
    DuplicateId(String),
}

/// Where a tool's server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// An OCI container (an image without `isolation: microvm`).
    Container,
    /// A microVM of its own, never a container.
    Microvm,
    /// No image: the manifest's `command` runs in the node's tier-1 sandbox,
    /// as `sandbox run` runs a command. Never written in a manifest: a tool
    /// with `command:` and no `package:` gets it.
    #[serde(skip_deserializing)]
    Sandbox,
}

/// Most arguments of a tool's `command`.
pub const MAX_COMMAND_ARGS: usize = 64;
/// Longest argument of a tool's `command`.
pub const MAX_ARG_BYTES: usize = 4096;
/// Image architectures a microVM tool may name (those microVM nodes run).
pub const VM_ARCHES: &[&str] = &["x86_64", "aarch64"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tools: Vec<RawTool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    id: String,
    #[serde(default)]
    package: Option<String>,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    isolation: Option<Isolation>,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    container: Option<RawResources>,
    #[serde(default)]
    egress: Vec<String>,
    #[serde(default)]
    settings: Vec<String>,
    #[serde(default)]
    secrets: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    #[serde(default)]
    memory_mb: Option<u32>,
    #[serde(default)]
    cpus: Option<f64>,
}

/// A tool's resources, in range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resources {
    /// Memory, MiB.
    pub memory_mb: Option<u32>,
    /// CPUs as declared (fractions allowed).
    pub cpus: Option<f64>,
}

impl Resources {
    /// Whole vCPUs for a VM: the declared CPUs rounded up (at least 1).
    // The manifest takes only finite CPUs in (0, MAX_CPUS], whose ceiling
    // is a whole u32; any other value saturates (a float `as` never wraps)
    // and is lifted to 1.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn vcpus(&self) -> Option<u32> {
        self.cpus.map(|c| (c.ceil() as u32).max(1))
    }
}

/// One validated tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// `[a-z0-9_-]`, at most [`MAX_ID_BYTES`].
    pub id: String,
    /// The image, by digest (`oci:ghcr.io/acme/fetch-mcp@sha256:<64 hex>`);
    /// none for a command tool.
    pub package: Option<String>,
    /// The server's command: inside the image for an image tool (empty:
    /// the image's entrypoint and cmd), the whole server for a command
    /// tool.
    pub command: Vec<String>,
    /// Container, microVM, or the node's tier-1 sandbox (command tools).
    pub isolation: Isolation,
    /// The image's architecture (microVM tools), when declared.
    pub arch: Option<String>,
    /// Memory and CPUs.
    pub resources: Resources,
    /// Hosts its server may reach through the egress proxy.
    pub egress: Vec<AllowRule>,
    /// Setting names (values come from the tenant, by name).
    pub settings: Vec<String>,
    /// Secret names (values come from the tenant, by name).
    pub secrets: Vec<String>,
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The plugin's name, if given.
    pub name: Option<String>,
    /// The plugin's version, if given.
    pub version: Option<String>,
    /// Its tools.
    pub tools: Vec<Tool>,
}

/// Why a variable name is refused for a microVM tool, if it is.
pub fn vm_variable_refusal(name: &str) -> Option<String> {
    let syntax_ok = !name.is_empty()
        && name.len() <= oz0_policy::env::MAX_NAME_BYTES
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !syntax_ok {
        return Some(format!(
            "{name:?} is not a variable name: use letters, digits and _, not starting with a digit"
        ));
    }
    if VM_FORBIDDEN_NAMES.contains(&name) {
        return Some(format!(
            "{name} is set by the VM itself (PATH, HOME=/tmp, TMPDIR): choose another name"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if VM_PROXY_NAMES.contains(&upper.as_str()) {
        return Some(format!(
            "{name} is a proxy variable, set by the node when the tool has egress: list hosts under `egress:` instead"
        ));
    }
    if let Some(p) = VM_FORBIDDEN_PREFIXES
        .iter()
        .find(|p| upper.starts_with(&p.to_ascii_uppercase()))
    {
        return Some(format!(
            "{name} starts with {p}, reserved for the dynamic loader or the VMM: choose another name"
        ));
    }
    None
}

/// Why an image reference is refused, if it is: an image is named by
/// digest (`oci:NAME@sha256:<64 lower-case hex>`), so what runs is what was
/// reviewed, never what a tag points at today.
pub fn image_refusal(package: &str) -> Option<String> {
    if package.len() > MAX_PACKAGE_BYTES {
        return Some(format!("package is over {MAX_PACKAGE_BYTES} bytes"));
    }
    let fix = "name the image by digest: package: oci:REGISTRY/NAME@sha256:<64 hex digits>";
    let Some(rest) = package.strip_prefix("oci:") else {
        return Some(format!(
            "package {package:?} is not an OCI image reference: {fix}"
        ));
    };
    let Some((name, digest)) = rest.rsplit_once("@sha256:") else {
        return Some(format!(
            "package {package:?} has no digest (a tag can change under it): {fix}"
        ));
    };
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b));
    if !name_ok {
        return Some(format!("package {package:?}: the image name may hold a-z, 0-9, '.', '_', '-', '/' and ':': {fix}"));
    }
    if digest.len() != 64
        || !digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Some(format!(
            "package {package:?}: the digest is not 64 lower-case hex digits: {fix}"
        ));
    }
    None
}

impl Tool {
    /// The memory a VM of this tool gets, MiB.
    pub fn vm_memory_mib(&self, default: u32) -> u32 {
        self.resources.memory_mb.unwrap_or(default)
    }
}

fn tool_err(tool: &str, what: impl Into<String>) -> ManifestError {
    ManifestError::Tool {
        tool: tool.to_string(),
        what: what.into(),
    }
}

impl Manifest {
    /// Parses and validates `oz0-plugin.yaml`.
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        if text.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge(text.len()));
        }
        let raw: RawManifest = crate::yaml::from_str(text)?;
        let _ = raw.description;
        if raw.tools.is_empty() {
            return Err(ManifestError::NoTools);
        }
        if raw.tools.len() > MAX_TOOLS {
            return Err(ManifestError::TooManyTools(raw.tools.len()));
        }
        let mut ids = BTreeSet::new();
        let mut tools = Vec::new();
        for (i, t) in raw.tools.into_iter().enumerate() {
            let tool = Self::tool(i, t)?;
            if !ids.insert(tool.id.clone()) {
                return Err(ManifestError::DuplicateId(tool.id));
            }
            tools.push(tool);
        }
        Ok(Manifest {
            name: raw.name,
            version: raw.version,
            tools,
        })
    }

    fn tool(index: usize, t: RawTool) -> Result<Tool, ManifestError> {
        check_id(index, &t.id)?;
        let id = t.id;
        let isolation = isolation_of(&id, t.package.as_deref(), t.isolation, &t.command)?;
        check_command(&id, &t.command)?;
        check_arch(&id, t.arch.as_deref(), isolation)?;
        let res = t.container.unwrap_or(RawResources {
            memory_mb: None,
            cpus: None,
        });
        check_resources(&id, &res)?;
        for (what, list) in [
            ("egress", &t.egress),
            ("settings", &t.settings),
            ("secrets", &t.secrets),
        ] {
            if list.len() > MAX_ENTRIES {
                return Err(tool_err(
                    &id,
                    format!(
                        "{what} has {} entries, over the limit of {MAX_ENTRIES}",
                        list.len()
                    ),
                ));
            }
        }
        let egress = t
            .egress
            .iter()
            .map(|e| {
                AllowRule::parse(e).map_err(|err| tool_err(&id, format!("egress {e:?}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        check_variables(&id, isolation, &t.settings, &t.secrets)?;
        Ok(Tool {
            id,
            package: t.package,
            command: t.command,
            isolation,
            arch: t.arch,
            resources: Resources {
                memory_mb: res.memory_mb,
                cpus: res.cpus,
            },
            egress,
            settings: t.settings,
            secrets: t.secrets,
        })
    }
}

/// The `index`-th tool's id: 1-[`MAX_ID_BYTES`] of a-z, 0-9, _ and -.
fn check_id(index: usize, id: &str) -> Result<(), ManifestError> {
    let id_ok = !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !id_ok {
        return Err(tool_err(
            &format!("#{}", index + 1),
            format!("id {id:?} must be 1-{MAX_ID_BYTES} of a-z, 0-9, _ and -"),
        ));
    }
    Ok(())
}

/// Where the tool runs: an image in a container or microVM, or a command
/// in the node's tier-1 sandbox.
fn isolation_of(
    id: &str,
    package: Option<&str>,
    declared: Option<Isolation>,
    command: &[String],
) -> Result<Isolation, ManifestError> {
    match (package, declared, command.is_empty()) {
        (Some(p), declared, _) => {
            if let Some(why) = image_refusal(p) {
                return Err(tool_err(id, why));
            }
            Ok(declared.unwrap_or(Isolation::Container))
        }
        (None, Some(i), _) => Err(tool_err(
            id,
            format!(
                "isolation: {} needs an image: give package: oci:NAME@sha256:DIGEST (or drop isolation: to run command: in the node's tier-1 sandbox)",
                if i == Isolation::Microvm { "microvm" } else { "container" }
            ),
        )),
        (None, None, false) => Ok(Isolation::Sandbox),
        (None, None, true) => Err(tool_err(
            id,
            "give package: (an image by digest) or command: (a server run in the node's tier-1 sandbox)",
        )),
    }
}

/// At most [`MAX_COMMAND_ARGS`] arguments of at most [`MAX_ARG_BYTES`],
/// without NUL, the first not empty.
fn check_command(id: &str, command: &[String]) -> Result<(), ManifestError> {
    if command.len() > MAX_COMMAND_ARGS
        || command.first().is_some_and(|c| c.is_empty())
        || command
            .iter()
            .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
    {
        return Err(tool_err(
            id,
            format!("command must be at most {MAX_COMMAND_ARGS} arguments of at most {MAX_ARG_BYTES} bytes, without NUL, the first not empty"),
        ));
    }
    Ok(())
}

/// `arch:` goes with a microVM image and names one of [`VM_ARCHES`].
fn check_arch(id: &str, arch: Option<&str>, isolation: Isolation) -> Result<(), ManifestError> {
    let Some(a) = arch else {
        return Ok(());
    };
    if isolation != Isolation::Microvm {
        return Err(tool_err(
            id,
            "arch: names a microVM image's architecture: it goes with isolation: microvm",
        ));
    }
    if !VM_ARCHES.contains(&a) {
        return Err(tool_err(
            id,
            format!("arch {a:?} is not one microVM nodes run: give x86_64 or aarch64"),
        ));
    }
    Ok(())
}

/// Memory and CPUs in range.
fn check_resources(id: &str, res: &RawResources) -> Result<(), ManifestError> {
    if let Some(m) = res.memory_mb {
        if !(MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&m) {
            return Err(tool_err(
                id,
                format!("container.memory_mb {m} is out of range: give {MIN_MEMORY_MB} to {MAX_MEMORY_MB}"),
            ));
        }
    }
    if let Some(c) = res.cpus {
        if !(c.is_finite() && c > 0.0 && c <= MAX_CPUS) {
            return Err(tool_err(
                id,
                format!(
                    "container.cpus {c} is out of range: give more than 0 and at most {MAX_CPUS}"
                ),
            ));
        }
    }
    Ok(())
}

/// Each setting and secret a variable name the tool's isolation allows,
/// none named twice.
fn check_variables(
    id: &str,
    isolation: Isolation,
    settings: &[String],
    secrets: &[String],
) -> Result<(), ManifestError> {
    let mut names = BTreeSet::new();
    for n in settings.iter().chain(secrets.iter()) {
        let refusal = match isolation {
            Isolation::Microvm => vm_variable_refusal(n),
            Isolation::Container | Isolation::Sandbox => oz0_policy::env::EnvName::new(n)
                .err()
                .map(|e| e.to_string()),
        };
        if let Some(why) = refusal {
            return Err(tool_err(id, format!("variable {why}")));
        }
        if !names.insert(n.clone()) {
            return Err(tool_err(
                id,
                format!("variable {n} is named twice (settings and secrets share one namespace)"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "oci:ghcr.io/acme/plain@sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn with_p(text: &str) -> String {
        text.replace("{P}", P)
    }

    const GOOD: &str = "\
name: acme
tools:
  - id: acme_fetch
    package: oci:ghcr.io/acme/fetch-mcp@sha256:4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c4f6c
    isolation: microvm
    container: {memory_mb: 512, cpus: 1.5}
    egress: [api.acme.example, '*.cdn.example:443']
    secrets: [ACME_TOKEN]
    settings: [ACME_REGION]
  - id: plain
    package: oci:ghcr.io/acme/plain@sha256:0000000000000000000000000000000000000000000000000000000000000000
";

    #[test]
    fn good_manifest() {
        let m = Manifest::parse(GOOD).unwrap();
        assert_eq!(m.name.as_deref(), Some("acme"));
        assert_eq!(m.tools.len(), 2);
        let t = &m.tools[0];
        assert_eq!(t.isolation, Isolation::Microvm);
        assert_eq!(t.resources.memory_mb, Some(512));
        assert_eq!(t.resources.vcpus(), Some(2));
        assert_eq!(t.egress.len(), 2);
        assert_eq!(m.tools[1].isolation, Isolation::Container);
    }

    #[test]
    fn bad_yaml_has_a_location() {
        let e = Manifest::parse("tools:\n  - id: [unclosed\n").unwrap_err();
        match e {
            ManifestError::Syntax { location, .. } => assert!(location.is_some()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_keys_are_refused_with_line_and_column() {
        let text = &with_p("tools:\n  - id: a\n    package: {P}\n    isolaton: microvm\n");
        let e = Manifest::parse(text).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 4"), "{msg}");
        assert!(msg.contains("isolaton"), "{msg}");
        let e = Manifest::parse("tool: []\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("tool"), "{e}");
        let text = &with_p(
            "tools:\n  - id: a\n    package: {P}\n    container: {memory_mb: 256, gpus: 1}\n",
        );
        let e = Manifest::parse(text).unwrap_err().to_string();
        assert!(e.contains("gpus") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn forbidden_variable_names_for_microvm_tools() {
        for bad in [
            "PATH",
            "HOME",
            "TMPDIR",
            "HTTPS_PROXY",
            "https_proxy",
            "no_proxy",
            "LD_PRELOAD",
            "DYLD_INSERT_LIBRARIES",
            "SMOLVM_LIB_DIR",
            "OZ0_VMENV_X",
            "OZ0_EGRESS_TOKEN",
            "oz0_anything",
            "1X",
            "A-B",
            "",
        ] {
            let text = format!(
                "tools:\n  - id: t\n    package: {P}\n    isolation: microvm\n    secrets: [{bad:?}]\n"
            );
            let e = Manifest::parse(&text).unwrap_err();
            assert!(matches!(e, ManifestError::Tool { .. }), "{bad}: {e:?}");
        }
        assert!(vm_variable_refusal("ACME_TOKEN").is_none());
        assert!(vm_variable_refusal("acme_token").is_none());
        assert!(vm_variable_refusal("Ld_x").is_some());
    }

    #[test]
    fn memory_and_cpus_ranges() {
        for c in [
            "{memory_mb: 64}",
            "{memory_mb: 999999}",
            "{cpus: 0}",
            "{cpus: -1}",
            "{cpus: 65}",
            "{cpus: .nan}",
        ] {
            let text = format!("tools:\n  - id: t\n    package: {P}\n    container: {c}\n");
            let e = Manifest::parse(&text).unwrap_err();
            assert!(e.to_string().contains("out of range"), "{c}: {e}");
        }
        let e = Manifest::parse(&with_p(
            "tools:\n  - id: t\n    package: {P}\n    container: {memory_mb: -5}\n",
        ))
        .unwrap_err();
        assert!(matches!(e, ManifestError::Syntax { .. }), "{e:?}");
    }

    #[test]
    fn ids_packages_and_duplicates() {
        assert!(Manifest::parse("tools: []\n").is_err());
        assert!(Manifest::parse(&with_p("tools:\n  - id: Bad\n    package: {P}\n")).is_err());
        assert!(Manifest::parse("tools:\n  - id: a\n    package: ''\n").is_err());
        let e = Manifest::parse(&with_p(
            "tools:\n  - {id: a, package: '{P}'}\n  - {id: a, package: '{P}'}\n",
        ))
        .unwrap_err();
        assert_eq!(e, ManifestError::DuplicateId("a".into()));
        let e = Manifest::parse(&with_p(
            "tools:\n  - {id: a, package: '{P}', isolation: vm}\n",
        ))
        .unwrap_err();
        assert!(matches!(e, ManifestError::Syntax { .. }));
        let e = Manifest::parse(&with_p(
            "tools:\n  - {id: a, package: '{P}', egress: ['bad host!']}\n",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("egress"), "{e}");
        let big = "#".repeat(MAX_MANIFEST_BYTES + 1);
        assert!(matches!(
            Manifest::parse(&big),
            Err(ManifestError::TooLarge(_))
        ));
    }

    #[test]
    fn images_by_digest_commands_and_arch() {
        let tool = |body: &str| Manifest::parse(&format!("tools:\n  - id: t\n{body}"));
        for bad in [
            "oci:ghcr.io/acme/x:latest",
            "oci:ghcr.io/acme/x@sha256:abc",
            "docker:ghcr.io/acme/x@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "oci:ghcr.io/ACME/x@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "oci:ghcr.io/acme/x@sha256:000000000000000000000000000000000000000000000000000000000000000G",
        ] {
            let e = tool(&format!("    package: '{bad}'\n")).unwrap_err().to_string();
            assert!(e.contains("digest") || e.contains("OCI"), "{bad}: {e}");
        }
        let t = &tool("    command: [npx, -y, '@modelcontextprotocol/server-filesystem', /work]\n")
            .unwrap()
            .tools[0];
        assert_eq!(t.isolation, Isolation::Sandbox);
        assert_eq!(t.command.len(), 4);
        assert!(t.package.is_none());
        let e = tool("    command: [x]\n    isolation: microvm\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs an image"), "{e}");
        let e = tool("    egress: [a.example]\n").unwrap_err().to_string();
        assert!(
            e.contains("give package: (an image by digest) or command:"),
            "{e}"
        );
        let e = tool("    command: ['']\n").unwrap_err().to_string();
        assert!(e.contains("first not empty"), "{e}");
        let vm = tool(&format!("    package: '{P}'\n    isolation: microvm\n    arch: aarch64\n    command: [python3, /srv/s.py]\n")).unwrap();
        assert_eq!(vm.tools[0].arch.as_deref(), Some("aarch64"));
        assert_eq!(vm.tools[0].command, ["python3", "/srv/s.py"]);
        let e = tool(&format!("    package: '{P}'\n    arch: aarch64\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("isolation: microvm"), "{e}");
        let e = tool(&format!(
            "    package: '{P}'\n    isolation: microvm\n    arch: sparc\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("x86_64 or aarch64"), "{e}");
        // `sandbox` is what a command tool gets, never something to write.
        let e = tool("    command: [x]\n    isolation: sandbox\n").unwrap_err();
        assert!(matches!(e, ManifestError::Syntax { .. }), "{e:?}");
    }
}
