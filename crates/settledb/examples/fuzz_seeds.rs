//! Writes the seed corpus of every fuzz target (`settledb::fuzzing::seeds`): valid pages,
//! WAL records, WAL streams and files of a real database, in each target's input format.
//!
//! ```text
//! cargo run -p settledb --example fuzz_seeds -- fuzz/corpus
//! ```
//!
//! creates `fuzz/corpus/<target>/seed-N`, the directory `cargo fuzz run <target>` reads.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".to_string()));
    for (target, seeds) in settledb::fuzzing::seeds::all() {
        let d = dir.join(target);
        std::fs::create_dir_all(&d)?;
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i}")), s)?;
        }
        println!("{target}: {} seeds, {} bytes", seeds.len(), seeds.iter().map(Vec::len).sum::<usize>());
    }
    Ok(())
}
