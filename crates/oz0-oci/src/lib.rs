//! Container images without Docker or root.
//!
//! What this crate owns: an image named by digest
//! (`oci:REGISTRY/NAME@sha256:…`, [`mod@reference`]), its manifests and
//! config read within bounds ([`manifest`]), pulled from a registry the
//! operator allows with every blob's digest checked as it streams
//! (`registry`, on Linux), kept in a bounded content-addressed cache in
//! the node's data directory and unpacked once per image (`cache`), its
//! layers applied in order and by descriptor into a read-only rootfs
//! owned by the node's user ([`tar`], `unpack`).
//!
//! Threat model: the registry, the image and every byte of it are hostile.
//! A manifest, an index, a config, a token answer and a tar header are each
//! bounded before anything is allocated for them; a blob that does not
//! have its digest is never used; an entry never lands outside the rootfs
//! (no `..`, no absolute name, no link followed while unpacking); device
//! nodes, setuid, setgid and sticky bits, owners and extended attributes
//! (file capabilities among them) never reach the disk.

pub mod manifest;
pub mod reference;
pub mod tar;

#[cfg(target_os = "linux")]
pub mod cache;
#[cfg(target_os = "linux")]
mod fsx;
#[cfg(target_os = "linux")]
pub mod registry;
#[cfg(target_os = "linux")]
pub mod unpack;

pub use reference::{Digest, Reference, ReferenceError};
