//! `settle bench decode --shrink 1000 --runs 1 --json` without a peer: the report has the
//! shape consumers read, every workload and setting ran, and the engine's counters agree with
//! the workloads (transactions decoded, the aborted insert and the streamed one spilled
//! nothing, spilling happened where memory was short, test_decoding wrote the lines each
//! workload makes). No timing is asserted.

mod common;

use common::settle;
use serde_json::Value;

fn case<'a>(cases: &'a [Value], name: &str, limit: &str, sink: &str) -> &'a Value {
    cases
        .iter()
        .find(|c| c["case"] == name && c["limit"] == limit && c["sink"] == sink)
        .unwrap_or_else(|| panic!("no case {name} {limit} {sink}"))
}

#[test]
fn bench_decode_reports_consistent_engine_counters() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let (ok, out, err) = settle(&["bench", "decode", "--shrink", "1000", "--runs", "1", "--json", "--dir", dir]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(r["benchmark"], "decode");
    assert_eq!((r["shrink"].as_u64(), r["runs"].as_u64(), r["peer"].as_bool()), (Some(1000), Some(1), Some(false)));
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 21, "every workload's settings, and a td setting for W2, W3, W4 and W6 (shrunk)");
    for c in cases {
        let e = &c["engine"];
        let m = &e["median"];
        assert_eq!(e["runs"].as_array().unwrap().len(), 1);
        assert!(m["cpu_seconds"].as_f64().unwrap() > 0.0, "{c}");
        assert!(m["wall_seconds"].as_f64().unwrap() > 0.0);
        assert!(m["rss_anon_after_open_kb"].as_u64().is_some());
        assert_eq!(m["transactions"], c["expected_transactions"], "transactions decoded in {c}");
        // The engine's eviction events are its evictions (each may evict many transactions).
        assert_eq!(m["eviction_events"], m["buffer_evictions"], "{c}");
        assert!(c["postgres"].is_null());
        assert_eq!(c["postgres_note"], "not run (no --peer)");
    }
    // The rolled-back insert is dropped, never spilled; the streamed one is streamed.
    let w9 = &case(cases, "W9", "64MB", "null")["engine"]["median"];
    assert_eq!((w9["spill_bytes"].as_u64(), w9["transactions"].as_u64()), (Some(0), Some(0)));
    let w7 = &case(cases, "W7", "64MB", "td+stream")["engine"]["median"];
    assert_eq!(w7["spill_bytes"], 0);
    // 100 prepared transactions open at once cannot fit in 64 kB: evicted (spilled or streamed).
    let w4 = &case(cases, "W4", "64kB", "null")["engine"]["median"];
    assert!(w4["spill_count"].as_u64().unwrap() > 0 && w4["spill_bytes"].as_u64().unwrap() > 0, "{w4}");
    let events = w4["eviction_events"].as_u64().unwrap();
    assert!(events > 0 && events <= w4["spill_count"].as_u64().unwrap(), "{w4}");
    assert_eq!(w4["transactions"], 100);
    let w4s = &case(cases, "W4", "64kB", "td+stream")["engine"]["median"];
    assert!(w4s["stream_count"].as_u64().unwrap() > 0 && w4s["spill_bytes"] == 0, "{w4s}");
    // test_decoding wrote a line per change plus BEGIN and COMMIT per transaction.
    let w1 = case(cases, "W1", "64MB", "td");
    assert_eq!(w1["engine"]["median"]["rows_written"], 8_000 + 2);
    assert_eq!(w1["check"]["engine"]["lines"], 8_000 + 2);
    let w5 = case(cases, "W5", "64MB", "td");
    assert_eq!(w5["check"]["engine"]["lines"], 3 * 200);
    // The small versions of W2, W3, W4 and W6 have their lines digested too (compared with
    // PostgreSQL's under --peer).
    for (name, limit, lines) in
        [("W2", "64kB", 100 + 2), ("W3", "1MB", 1_000 + 2), ("W4", "64kB", 3 * 100), ("W6", "64kB", 2 * 1_002)]
    {
        assert_eq!(case(cases, name, limit, "td")["check"]["engine"]["lines"], lines, "{name}");
    }
    // Targets are judged, or marked as needing the peer.
    let targets = r["targets"].as_array().unwrap();
    assert!(targets.iter().any(|t| t["what"].as_str().unwrap().starts_with("W9") && t["met"] == true));
    assert!(targets.iter().any(|t| t["what"].as_str().unwrap().contains("PostgreSQL's") && t["met"].is_null()));
    assert!(!r["builds"].as_array().unwrap().is_empty());
}
