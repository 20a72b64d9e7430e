use settledb::*;
use std::time::Instant;
fn main() {
    let n: i32 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let policy = std::env::args().nth(2).unwrap_or("eager".into());
    let dirarg = std::env::args().nth(3).unwrap();
    let mode = std::env::args().nth(4).unwrap();
    let dir = std::path::PathBuf::from(dirarg);
    let cfg = Config::from_pairs([
        ("shared_buffers", "1GB"),
        ("fsync", "off"),
        ("autovacuum", "off"),
        ("vacuum_freeze_policy", policy.as_str()),
        ("max_wal_size", "10GB"),
    ])
    .unwrap();
    let db = Database::open(&dir, cfg).unwrap();
    if mode == "vacuum" {
        let t = db.table("a").unwrap();
        let mut tx = db.begin().unwrap();
        let n = tx.scan(&t).unwrap().count();
        drop(tx);
        let pk = db.index("a_pkey").unwrap();
        let mut tx = db.begin().unwrap();
        let m =
            tx.index_only(&pk, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None).unwrap().len();
        drop(tx);
        eprintln!("warm: {n} {m}");
        let t0 = Instant::now();
        let r = db.vacuum(Some("a"), &VacuumParams { verbose: true, ..Default::default() }).unwrap().remove(0);
        println!("{}\nelapsed {:?}", r.verbose_text(), t0.elapsed());
        std::process::exit(0);
    }
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    let schema = Schema {
        columns: vec![
            col("aid", Type::Int4),
            col("bid", Type::Int4),
            col("abalance", Type::Int4),
            col("filler", Type::Text),
        ],
    };
    let t = db
        .create_table("a", schema, TableOptions { primary_key: Some(vec!["aid".into()]), ..Default::default() })
        .unwrap();
    let mut i = 1;
    while i <= n {
        let mut tx = db.begin().unwrap();
        let rows: Vec<Vec<Value>> = (i..(i + 100_000).min(n + 1))
            .map(|a| vec![Value::Int4(a), Value::Int4(1), Value::Int4(0), Value::Text(" ".repeat(84))])
            .collect();
        tx.insert_many(&t, &rows).unwrap();
        tx.commit().unwrap();
        i += 100_000;
    }
    let pk = db.index("a_pkey").unwrap();
    let mut a = 7;
    while a <= n {
        let mut tx = db.begin().unwrap();
        for _ in 0..1000 {
            if a > n {
                break;
            }
            tx.update_by_key(&pk, &[Value::Int4(a)], |r| {
                let mut r = r.to_vec();
                r[2] = Value::Int4(1);
                Ok(r)
            })
            .unwrap();
            a += 20;
        }
        tx.commit().unwrap();
    }
    db.checkpoint().unwrap();
    if mode == "setup" {
        db.close().unwrap();
        return;
    }
    if let (Ok(ctl), Err(_)) = (std::env::var("PERF_CTL"), std::env::var("PERF_SECOND")) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(ctl).unwrap();
        f.write_all(b"enable\n").unwrap();
    }
    let t0 = Instant::now();
    let r = db.vacuum(Some("a"), &VacuumParams { verbose: true, ..Default::default() }).unwrap().remove(0);
    println!("{}\nelapsed {:?}", r.verbose_text(), t0.elapsed());
    if let Ok(ctl) = std::env::var("PERF_CTL") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(ctl).unwrap();
        let cmd: &[u8] = if std::env::var("PERF_SECOND").is_ok() { b"enable\n" } else { b"disable\n" };
        f.write_all(cmd).unwrap();
    }
    let t0 = Instant::now();
    let r = db
        .vacuum(Some("a"), &VacuumParams { verbose: true, disable_page_skipping: true, ..Default::default() })
        .unwrap()
        .remove(0);
    println!("{}\nelapsed {:?}", r.verbose_text(), t0.elapsed());
}
