//! Tier 2 on Linux: each tool server in a microVM of its own, whose monitor
//! runs inside tier 1.
//!
//! This crate owns the VMM's pins ([`pin`]), the boot check that decides
//! whether the node offers microVMs ([`bootcheck`]), the VM lifecycle
//! ([`vm`]) for smolvm and the QEMU test backend ([`backend`]), the byte
//! stream between node and guest ([`mux`]) and the guest agent ([`guest`]);
//! `oz0-node sandbox vm` drives it.
//!
//! Threat model. The server in the VM, its guest kernel, and anything it
//! writes into `/work` are hostile. A server that breaks out of its guest
//! kernel holds the VM monitor, so the monitor always runs inside tier 1
//! (bubblewrap namespaces, no capabilities, the `vmm` seccomp profile,
//! Landlock, `/dev/kvm` its only device) and sees only the system read-only,
//! `/work`, its own `vmm/` folder and the VMM's files — never the node's data
//! directory, other VMs' folders, or the egress proxy socket. The guest has
//! no network device: the one stream it shares with the node ([`mux`])
//! carries its server's stdio and proxy connections, parsed with fixed
//! bounds, and each proxy connection reaches only the proxy, which checks the
//! VM's token and allowlist. Guest-made symbolic links in `/work` can point
//! anywhere on the host: node code never follows them (it never opens
//! `/work`'s contents, and removes only the VM's own folder, without
//! following links). A VMM is used only when every file it loads has the
//! SHA-256 of a pinned release, unless the operator names it explicitly.
//! Secrets reach the server by name and never appear on a command line.

pub mod backend;
pub mod bootcheck;
pub mod command;
pub mod guest;
/// The plugin manifest (`oz0-plugin.yaml`), from `oz0-plugin`.
pub use oz0_plugin::manifest;
pub mod monitor;
pub mod mux;
pub mod pin;
pub mod smolguest;
pub mod vm;
pub mod vmdir;
