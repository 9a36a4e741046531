//! Points per second of `icsim sweep`: 32 points spread over docs/guide.md's
//! 10,000-point sweep (configs/sweeps/capacity-10k.toml: Llama-3.1-70B at
//! TP=8 on the default experiment's four machines, prompts of 2K to 14K
//! tokens, batches of 1 to 5), each resolved and replayed on one thread.
//! `cargo bench --bench sweep` prints the rate; docs/performance.md records it.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use icsim::sweep::{Sweep, run};

fn sweep_points(c: &mut Criterion) {
    let sweep = Sweep::load(Path::new("configs/sweeps/capacity-10k.toml")).expect("the shipped 10,000-point sweep");
    // A prime stride larger than any axis, so that the points mix every
    // axis's values (a stride that divides the axes' product would keep the
    // inner axes at their first value).
    let points: Vec<usize> = (0..32).map(|i| i * 7919 % sweep.len()).collect();
    let mut group = c.benchmark_group("sweep");
    group.sample_size(10);
    group.throughput(Throughput::Elements(points.len() as u64));
    group.bench_function("32 points of capacity-10k, one thread (points/s)", |b| {
        b.iter(|| black_box(run::run(&sweep, &points, Some(1), &|| {}).expect("a thread pool")))
    });
    group.finish();
}

criterion_group!(benches, sweep_points);
criterion_main!(benches);
