//! redis benchmarks (filled in by the redis backend work).

fn main() {}
