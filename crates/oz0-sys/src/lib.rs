//! `oz0-sys` is the one place in the workspace allowed to contain `unsafe`.
//!
//! Every other crate denies `unsafe_code`. Each function here wraps exactly one
//! system-call pattern, states its contract in a `// SAFETY:` comment, and
//! reports failure as an [`std::io::Error`] carrying the errno.
//!
//! Three families live here:
//! - [`spawn`]: placing a child into its job and handing it a fixed set of
//!   file descriptors between `fork` and `exec` (what `std` cannot do).
//! - [`kernel`]: raw calls that ask the kernel what it allows: the calls a
//!   sandbox must refuse, which the in-sandbox witness makes to prove each
//!   is refused and with which errno, and what Landlock and seccomp the
//!   kernel offers.
//! - [`ns`]: the in-sandbox stage's own user namespace, and children it
//!   forks without executing a program (the egress bridge).
#![allow(unsafe_code)]

pub mod kernel;
pub mod ns;
pub mod spawn;
pub mod start;
