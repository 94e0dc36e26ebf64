//! `oz0-policy` owns *what a run may do*, as validated data.
//!
//! Everything that crosses from a caller into the node — paths, environment
//! variables, limits, hosts — enters here and leaves as a newtype that can only
//! hold a valid value ("parse, don't validate"). The crate does no I/O and has
//! no `unsafe`: whether a path exists, and what the host looks like, is decided
//! by the platform crates, which take these types as input.
//!
//! Threat model: the caller of `oz0-node` (the node operator or the node
//! daemon) is trusted to name what a run gets, but the values it forwards may
//! come from outside events. Validation therefore refuses anything ambiguous
//! (relative paths, `..`, non-UTF-8, `OZ0_` variables, oversized input) with an
//! error that names the value and the fix, and the default of every field is the
//! most restrictive one.

pub mod describe;
pub mod env;
pub mod facts;
pub mod gitconfig;
pub mod gittodo;
pub mod limits;
pub mod net;
pub mod path;
pub mod protected;
pub mod spec;

pub use env::{EnvName, EnvVar};
pub use limits::Limits;
pub use path::AbsPath;
pub use spec::{RunRequest, RunSpec, SpecError};
