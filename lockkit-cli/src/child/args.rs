//! The hidden first arguments with which `lockkit` re-executes itself for `exec`.

/// The hidden first argument that makes this binary the supervisor.
pub(crate) const ARG: &str = "__exec-child";

/// The hidden first argument that makes this binary the command's last step before `exec`.
pub(crate) const COMMAND_ARG: &str = "__exec-command";
