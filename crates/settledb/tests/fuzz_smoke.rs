//! Every fuzz target (`settledb::fuzzing`, the same functions `fuzz/` hands to libFuzzer) run
//! over seeded inputs, so that plain `cargo test` fuzzes every decoder of bytes from disk a
//! few thousand times even where cargo-fuzz cannot run: the valid seeds of
//! `fuzzing::seeds` (a real database's pages, records, files), then random mutations of them
//! (bit flips, byte overwrites with interesting values, truncations, insertions, deletions,
//! splices of two seeds, a flipped control byte; half of them with the checksum or CRC
//! repaired) and random bytes.
//!
//! `SETTLEDB_FUZZ_ITERS` sets the mutated inputs per target (default 5000);
//! `SETTLEDB_FUZZ_SEED` the RNG seed (default 0x5E77_1EDB). A failing input is written to
//! `target/fuzz-smoke/<target>.bin`; replay it with
//! `cargo fuzz run <target> target/fuzz-smoke/<target>.bin` or `fuzzing::<target>(&bytes)`.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::fuzzing::{seeds, TARGETS};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn all_seeds() -> &'static BTreeMap<&'static str, Vec<Vec<u8>>> {
    static SEEDS: OnceLock<BTreeMap<&'static str, Vec<Vec<u8>>>> = OnceLock::new();
    SEEDS.get_or_init(seeds::all)
}

/// Targets whose control bit 0 repairs the integrity check in front of the decoder.
const REPAIRS: [&str; 10] = [
    "page",
    "wal_record",
    "control_file",
    "btree_page",
    "vm_page",
    "fsm_page",
    "stats_file",
    "relsize_file",
    "slot_state",
    "spill_file",
];

const INTERESTING: [u8; 9] = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x18, 0x20, 0xF0, 0x1F];

/// One random change to `v` (never grows it past 20,000 bytes).
fn mutate(rng: &mut StdRng, v: &mut Vec<u8>, other: &[u8]) {
    let len = v.len();
    match rng.gen_range(0..9) {
        0 | 1 if len > 0 => {
            let i = rng.gen_range(0..len);
            v[i] ^= 1 << rng.gen_range(0..8);
        }
        2 if len > 0 => {
            let i = rng.gen_range(0..len);
            v[i] = INTERESTING[rng.gen_range(0..INTERESTING.len())];
        }
        3 if len > 1 => {
            // A 16-bit field set to an edge value (lengths, offsets, counts).
            let i = rng.gen_range(0..len - 1);
            let x: u16 = [0, 1, 23, 24, 0x7FFF, 0x8000, 8160, 8192, 0xFFFF][rng.gen_range(0..9)];
            v[i..i + 2].copy_from_slice(&x.to_le_bytes());
        }
        4 if len > 0 => v.truncate(rng.gen_range(0..len)),
        5 if len < 20_000 => {
            let i = rng.gen_range(0..=len);
            let n = rng.gen_range(1..16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            v.splice(i..i, bytes);
        }
        6 if len > 1 => {
            let i = rng.gen_range(0..len);
            let n = rng.gen_range(1..=(len - i).min(64));
            v.drain(i..i + n);
        }
        7 if !other.is_empty() && len > 0 => {
            // Splice: a run of another seed over this one, at the same offset.
            let i = rng.gen_range(0..len.min(other.len()));
            let n = rng.gen_range(1..=(other.len() - i).min(len - i).min(512));
            v[i..i + n].copy_from_slice(&other[i..i + n]);
        }
        8 if len > 0 => v[0] ^= 1 << rng.gen_range(0..8),
        _ => v.push(rng.gen()),
    }
}

fn run_one(name: &str, f: fn(&[u8]), input: &[u8]) {
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(input))) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-smoke");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{name}.bin"));
        let _ = std::fs::write(&path, input);
        let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
        panic!("fuzz target {name} panicked on an input saved to {}: {msg:?}", path.display());
    }
}

fn smoke(name: &str) {
    let f = TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).expect("a target of that name");
    let seeds = &all_seeds()[name];
    assert!(!seeds.is_empty(), "no seeds for {name}");
    for s in seeds {
        run_one(name, f, s);
    }
    let iters = env_u64("SETTLEDB_FUZZ_ITERS", 5000);
    let mut rng = StdRng::seed_from_u64(env_u64("SETTLEDB_FUZZ_SEED", 0x5E77_1EDB) ^ name.len() as u64);
    for i in 0..iters {
        let mut v = if i % 10 == 9 {
            let n = rng.gen_range(0..300);
            (0..n).map(|_| rng.gen()).collect()
        } else {
            seeds[rng.gen_range(0..seeds.len())].clone()
        };
        let other = &seeds[rng.gen_range(0..seeds.len())];
        for _ in 0..rng.gen_range(1..6) {
            mutate(&mut rng, &mut v, other);
        }
        // Half the time past the checksum / CRC, where the decoders are (control bit 0).
        if REPAIRS.contains(&name) && !v.is_empty() && rng.gen_bool(0.5) {
            v[0] |= settledb::fuzzing::REPAIR;
        }
        run_one(name, f, &v);
    }
}

#[test]
fn every_target_has_seeds_and_a_smoke_test() {
    let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(all_seeds().keys().copied().collect::<Vec<_>>(), {
        let mut n = names.clone();
        n.sort_unstable();
        n
    });
    let mut smoked = SMOKED.to_vec();
    smoked.sort_unstable();
    let mut names = names;
    names.sort_unstable();
    assert_eq!(smoked, names, "one smoke test per target");
}

macro_rules! smoke_tests {
    ($($name:ident),* $(,)?) => {
        const SMOKED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                smoke(stringify!($name));
            }
        )*
    };
}

smoke_tests!(
    page,
    heap_tuple,
    catalog_tuple,
    wal_record,
    wal_stream,
    control_file,
    clog_page,
    btree_page,
    vm_page,
    fsm_page,
    stats_file,
    relsize_file,
    twophase_state,
    slot_state,
    spill_file,
    pgoutput_message
);
