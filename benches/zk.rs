//! zk benchmarks (filled in by the zk backend work).

fn main() {}
