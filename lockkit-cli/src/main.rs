//! The `lockkit` command (work in progress).

fn main() {}
