//! etcd benchmarks (filled in by the etcd backend work).

fn main() {}
