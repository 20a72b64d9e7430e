use super::*;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn setup() -> Arc<FaultFs> {
    let fs = FaultFs::new();
    fs.create_dir_all(&p("/db/wal")).unwrap();
    fs
}

fn read_all(fs: &FaultFs, path: &str) -> Vec<u8> {
    let f = fs.open(&p(path), false).unwrap();
    let mut buf = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    buf
}

fn errno(e: Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source.raw_os_error(),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn lose_unsynced_keeps_only_synced_bytes() {
    let fs = setup();
    let f = fs.open(&p("/db/t"), true).unwrap();
    f.write_at(b"hello", 0).unwrap();
    f.sync().unwrap();
    f.write_at(b"HELLO world", 0).unwrap();
    assert_eq!(read_all(&fs, "/db/t"), b"HELLO world");
    let after = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(read_all(&after, "/db/t"), b"hello", "synced create + content survive");
    // The old file system keeps working but is irrelevant.
    f.write_at(b"!", 11).unwrap();
    assert_eq!(read_all(&after, "/db/t"), b"hello");
}

#[test]
fn unsynced_create_is_lost_and_sync_dir_keeps_it() {
    let fs = setup();
    fs.open(&p("/db/a"), true).unwrap();
    fs.open(&p("/db/b"), true).unwrap();
    fs.sync_dir(&p("/db")).unwrap();
    fs.open(&p("/db/c"), true).unwrap();
    let after = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(after.list(&p("/db")).unwrap(), vec!["a", "b", "wal"]);
    assert!(!after.exists(&p("/db/c")));
}

#[test]
fn rename_is_durable_only_after_sync_dir() {
    let fs = setup();
    let f = fs.open(&p("/db/control.tmp"), true).unwrap();
    f.write_at(b"new", 0).unwrap();
    f.sync().unwrap();
    let old = fs.open(&p("/db/control"), true).unwrap();
    old.write_at(b"old", 0).unwrap();
    old.sync().unwrap();
    fs.rename(&p("/db/control.tmp"), &p("/db/control")).unwrap();
    assert_eq!(read_all(&fs, "/db/control"), b"new");
    let lost = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(read_all(&lost, "/db/control"), b"old", "rename not yet durable");
    assert!(lost.exists(&p("/db/control.tmp")));
    fs.sync_dir(&p("/db")).unwrap();
    let kept = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(read_all(&kept, "/db/control"), b"new");
    assert!(!kept.exists(&p("/db/control.tmp")));
    // Removal needs sync_dir too.
    fs.remove(&p("/db/control")).unwrap();
    assert!(fs.crash(CrashMode::LoseUnsynced).exists(&p("/db/control")));
    fs.sync_dir(&p("/db")).unwrap();
    assert!(!fs.crash(CrashMode::LoseUnsynced).exists(&p("/db/control")));
}

#[test]
fn random_crash_tears_writes_at_sector_boundaries() {
    let mut torn = 0;
    let mut outcomes = BTreeSet::new();
    for seed in 0..200 {
        let fs = setup();
        let f = fs.open(&p("/db/t"), true).unwrap();
        f.write_at(&[0u8; 4096], 0).unwrap();
        f.sync().unwrap();
        f.write_at(&[0xAA; 4096], 0).unwrap();
        let after = fs.crash(CrashMode::Random { seed });
        let data = read_all(&after, "/db/t");
        assert_eq!(data.len(), 4096);
        let applied = data.iter().take_while(|&&b| b == 0xAA).count();
        assert_eq!(applied % SECTOR, 0, "seed {seed}: only whole sectors");
        assert!(data[applied..].iter().all(|&b| b == 0), "seed {seed}: a prefix only");
        if applied > 0 && applied < 4096 {
            torn += 1;
        }
        outcomes.insert(applied);
        // Same seed, same outcome.
        assert_eq!(read_all(&fs.crash(CrashMode::Random { seed }), "/db/t"), data);
    }
    assert!(torn > 0, "some writes are torn");
    assert!(outcomes.contains(&0) && outcomes.contains(&4096));
}

#[test]
fn random_crash_keeps_synced_data() {
    for seed in 0..50 {
        let fs = setup();
        let f = fs.open(&p("/db/t"), true).unwrap();
        f.write_at(&[1u8; 1000], 0).unwrap();
        f.sync().unwrap();
        f.write_at(&[2u8; 100], 2000).unwrap();
        let data = read_all(&fs.crash(CrashMode::Random { seed }), "/db/t");
        assert_eq!(&data[..1000], &[1u8; 1000][..]);
        assert!(data.len() == 1000 || data.len() == 2100);
    }
}

#[test]
fn failed_fsync_drops_unsynced_data_and_keeps_failing() {
    let fs = setup();
    let f = fs.open(&p("/db/t"), true).unwrap();
    f.write_at(b"durable", 0).unwrap();
    f.sync().unwrap();
    fs.fail_sync_after(Some(2));
    f.write_at(b"DURABLE", 0).unwrap();
    f.sync().unwrap(); // the first following sync still works
    f.write_at(b"lost!!!", 0).unwrap();
    assert_eq!(errno(f.sync().unwrap_err()), Some(EIO));
    assert_eq!(read_all(&fs, "/db/t"), b"DURABLE", "unsynced data dropped, as Linux does");
    f.write_at(b"again", 0).unwrap();
    assert!(f.sync().is_err(), "every later sync fails too");
    assert!(fs.sync_dir(&p("/db")).is_err());
    assert_eq!(fs.syncs(), 5);
    fs.fail_sync_after(None);
    f.sync().unwrap();
}

#[test]
fn enospc_when_the_space_limit_is_reached() {
    let fs = setup();
    fs.set_space_limit(Some(10_000));
    let f = fs.open(&p("/db/t"), true).unwrap();
    f.write_at(&[1; 8000], 0).unwrap();
    let e = f.write_at(&[1; 3000], 8000).unwrap_err();
    assert!(e.to_string().contains("No space left on device"), "{e}");
    assert_eq!(errno(e), Some(ENOSPC));
    assert!(f.set_len(20_000).is_err());
    f.write_at(&[2; 3000], 5000).unwrap(); // overwriting within the limit is fine
    f.set_len(1000).unwrap();
    let g = fs.open(&p("/db/u"), true).unwrap();
    g.write_at(&[3; 9000], 0).unwrap();
    fs.remove(&p("/db/u")).unwrap();
    f.write_at(&[1; 8000], 1000).unwrap();
    assert_eq!(fs.bytes_written(), 8000 + 3000 + 9000 + 8000);
}

#[test]
fn failing_reads_and_sparse_files() {
    let fs = setup();
    let f = fs.open(&p("/db/wal/000000010000000000000001"), true).unwrap();
    f.write_at(b"x", 512 << 20).unwrap();
    assert_eq!(f.len().unwrap(), (512 << 20) + 1);
    {
        let st = fs.state.lock();
        let node = st.inodes.values().next().unwrap();
        assert_eq!(node.current.chunks.len(), 1, "sparse storage");
    }
    let mut buf = [9u8; 4];
    assert_eq!(f.read_at(&mut buf, 100).unwrap(), 4);
    assert_eq!(buf, [0; 4], "holes read as zeros");
    assert_eq!(f.read_at(&mut buf, (512 << 20) - 1).unwrap(), 2, "short read at EOF");
    fs.fail_reads_of(Some("/wal/".into()));
    assert_eq!(errno(f.read_at(&mut buf, 0).unwrap_err()), Some(EIO));
    fs.fail_reads_of(None);
    f.read_at(&mut buf, 0).unwrap();
    f.set_len(10).unwrap();
    f.set_len(20).unwrap();
    let mut buf = [9u8; 20];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [0; 20], "truncate then extend reads zeros");
}

#[test]
fn directory_operations_follow_unix_rules() {
    let fs = setup();
    assert!(fs.open(&p("/nodir/x"), true).is_err());
    assert!(fs.open(&p("/db/missing"), false).is_err());
    assert!(fs.rename(&p("/db/missing"), &p("/db/y")).is_err());
    fs.remove(&p("/db/missing")).unwrap();
    fs.open(&p("/db/wal/2"), true).unwrap();
    fs.open(&p("/db/wal/1"), true).unwrap();
    assert_eq!(fs.list(&p("/db/wal")).unwrap(), vec!["1", "2"]);
    assert!(fs.exists(&p("/db/wal")));
    assert!(fs.list(&p("/nodir")).is_err());
}

#[test]
fn a_power_cut_takes_the_image_just_before_the_armed_call() {
    let fs = setup();
    let f = fs.open(&p("/db/t"), true).unwrap(); // op 1
    f.write_at(b"one", 0).unwrap(); // op 2
    fs.arm_power_cut(3, CrashMode::LoseUnsynced);
    f.sync().unwrap(); // 1st call from now
    f.write_at(b"two", 0).unwrap(); // 2nd
    assert!(!fs.power_was_cut());
    f.sync().unwrap(); // 3rd: the power goes before it
    assert!(fs.power_was_cut());
    f.write_at(b"six", 0).unwrap();
    assert_eq!(read_all(&fs, "/db/t"), b"six", "the old machine goes on");
    let after = fs.take_power_cut().expect("cut");
    assert_eq!(read_all(&after, "/db/t"), b"one", "the second write was never synced");
    assert!(fs.take_power_cut().is_none(), "taken once");
    // Disarmed, nothing happens; the ops counter counts changing calls only.
    let before = fs.ops();
    fs.arm_power_cut(1, CrashMode::LoseUnsynced);
    fs.disarm_power_cut();
    let _ = read_all(&fs, "/db/t");
    f.write_at(b"x", 0).unwrap();
    assert!(!fs.power_was_cut());
    assert_eq!(fs.ops(), before + 1);
}

#[test]
fn a_lying_sync_makes_nothing_durable() {
    let fs = setup();
    let f = fs.open(&p("/db/t"), true).unwrap();
    f.write_at(b"kept", 0).unwrap();
    f.sync().unwrap();
    fs.set_syncs_lie(true);
    f.write_at(b"lost", 0).unwrap();
    f.sync().unwrap();
    fs.sync_dir(&p("/db")).unwrap();
    assert_eq!(read_all(&fs.crash(CrashMode::LoseUnsynced), "/db/t"), b"kept");
}

#[test]
fn a_reservation_takes_space_and_writes_inside_it_never_run_out() {
    let fs = setup();
    let f = fs.open(&p("/db/t"), true).unwrap();
    fs.set_space_limit(Some(64 << 10));
    f.allocate(0, 32 << 10).unwrap();
    assert_eq!(fs.total_bytes(), 32 << 10);
    let g = fs.open(&p("/db/u"), true).unwrap();
    assert_eq!(errno(g.write_at(&[1; 40 << 10], 0).unwrap_err()), Some(ENOSPC), "the reservation is taken");
    g.write_at(&[1; 32 << 10], 0).unwrap();
    f.write_at(&[2; 32 << 10], 0).unwrap(); // inside the reservation: no new space
    assert_eq!(fs.total_bytes(), 64 << 10);
    assert_eq!(errno(f.allocate(32 << 10, 8192).unwrap_err()), Some(ENOSPC));
    f.set_len(8192).unwrap(); // truncation frees the reservation beyond the new end
    assert_eq!(fs.total_bytes(), (32 << 10) + 8192);
}
