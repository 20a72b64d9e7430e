use super::*;

fn sample() -> SlotData {
    SlotData {
        name: "orders_cdc".into(),
        plugin: "pgoutput".into(),
        database: DATABASE_OID,
        two_phase: true,
        two_phase_at: Lsn(0x0100_0060),
        xmin: Xid::INVALID,
        catalog_xmin: Xid(731),
        restart_lsn: Lsn(0x0100_0028),
        confirmed_flush: Lsn(0x0100_0060),
        invalidated_at: Lsn::INVALID,
        invalidated: false,
        temporary: false,
    }
}

#[test]
fn state_round_trips_and_rejects_damage() {
    let d = sample();
    let bytes = d.encode();
    assert_eq!(SlotData::decode(&bytes), Ok(d.clone()));
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        assert!(SlotData::decode(&b).is_err(), "flipped byte {i} accepted");
    }
    for n in 0..bytes.len() {
        assert!(SlotData::decode(&bytes[..n]).is_err(), "prefix of {n} bytes accepted");
    }
    assert_eq!(
        describe(&d),
        "slot \"orders_cdc\" plugin \"pgoutput\" two_phase true xmin 0 catalog_xmin 731 restart_lsn 0/1000028 \
         confirmed_flush 0/1000060"
    );
    let mut lost = d;
    lost.invalidated = true;
    lost.invalidated_at = lost.restart_lsn;
    lost.restart_lsn = Lsn::INVALID;
    assert_eq!(SlotData::decode(&lost.encode()), Ok(lost));
}

/// A version 1 file (no `two_phase_at`) still loads, with `two_phase_at` 0.
#[test]
fn version_1_state_loads() {
    let d = sample();
    let v2 = d.encode();
    let mut v1 = Vec::new();
    v1.extend_from_slice(&v2[..4]);
    v1.extend_from_slice(&1u16.to_le_bytes());
    v1.extend_from_slice(&v2[6..44]);
    v1.extend_from_slice(&v2[52..v2.len() - 4]);
    v1.extend_from_slice(&crate::crc::crc32c(&v1).to_le_bytes());
    assert_eq!(SlotData::decode(&v1), Ok(SlotData { two_phase_at: Lsn::INVALID, ..d }));
}

#[test]
fn names_follow_postgresql() {
    assert!(validate_name("a_1").is_ok());
    assert!(validate_name(&"s".repeat(63)).is_ok());
    let e = validate_name(&"s".repeat(64)).unwrap_err().to_string();
    assert!(e.contains("is too long"), "{e}");
    let e = validate_name("").unwrap_err().to_string();
    assert!(e.contains("is too short"), "{e}");
    for bad in ["Upper", "with-dash", "sp ace", "dot.", "é"] {
        let e = validate_name(bad).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "replication slot name \"{bad}\" contains invalid character; HINT: Replication slot names may only \
                 contain lower case letters, numbers, and the underscore character."
            )
        );
    }
}

fn rx(lsn: u64, oldest: u32, xids: &[u32]) -> RunningXactsAt {
    RunningXactsAt {
        lsn: Lsn(lsn),
        end: Lsn(lsn + 30),
        running: RunningXacts {
            next_xid: Xid(xids.iter().copied().max().map_or(oldest, |m| m + 1)),
            oldest_running: Xid(oldest),
            xids: xids.iter().map(|&x| Xid(x)).collect(),
            subxids: vec![],
            overflowed: false,
        },
    }
}

#[test]
fn restart_point_needs_every_listed_transaction_finished() {
    // R1 lists 100 (still running at R2), R2 lists nothing but 100… no: R2's oldest is 100.
    let recs = [rx(1000, 100, &[100]), rx(2000, 100, &[100, 105]), rx(3000, 106, &[106])];
    assert_eq!(restart_point(&recs, Lsn(1030)), None, "100 may still commit after the confirmed position");
    assert_eq!(restart_point(&recs, Lsn(2030)), None);
    // At R3 100 and 105 have finished: R2 qualifies, R3 does not (106 runs).
    assert_eq!(restart_point(&recs, Lsn(3030)), Some((Lsn(2000), Xid(100))));
    // A record listing nothing qualifies by itself.
    let recs = [rx(1000, 100, &[100]), rx(2000, 120, &[])];
    assert_eq!(restart_point(&recs, Lsn(2030)), Some((Lsn(2000), Xid(120))));
    assert_eq!(restart_point(&recs, Lsn(2029)), None, "a record must end by confirmed_flush");
}

#[test]
fn wal_status_and_keep() {
    const SEG: u64 = 1 << 20;
    let unlimited = WalPosition {
        current: Lsn(10 * SEG + 5),
        segment_size: SEG,
        max_wal_size: 4 * SEG,
        max_slot_wal_keep_size: -1,
    };
    let mut d = sample();
    d.restart_lsn = Lsn(8 * SEG + 100);
    assert_eq!(unlimited.status(&d), (WalStatus::Reserved, None));
    d.restart_lsn = Lsn(2 * SEG + 100);
    assert_eq!(unlimited.status(&d), (WalStatus::Extended, None));
    assert_eq!(unlimited.keep_lsn(d.restart_lsn), Lsn(2 * SEG));
    let capped = WalPosition { max_slot_wal_keep_size: (3 * SEG) as i64, ..unlimited };
    assert_eq!(capped.status(&d).0, WalStatus::Unreserved);
    assert_eq!(capped.keep_lsn(d.restart_lsn), Lsn(7 * SEG));
    d.restart_lsn = Lsn(9 * SEG);
    // Lost once the write position reaches segment 9 + 3 + 1.
    assert_eq!(capped.status(&d), (WalStatus::Reserved, Some((13 * SEG - (10 * SEG + 5)) as i64)));
    d.invalidated = true;
    assert_eq!(capped.status(&d), (WalStatus::Lost, None));
}

#[test]
fn directory_lifecycle_and_corruption() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs: Arc<dyn FileSystem> = Arc::new(crate::io::RealFs);
    let slots = ReplicationSlots::open(fs.clone(), tmp.path())?;
    slots.lock().create(sample())?;
    assert!(tmp.path().join("pg_replslot/orders_cdc/state").exists());
    // A leftover of an interrupted creation is removed at startup.
    std::fs::create_dir_all(tmp.path().join("pg_replslot/half")).expect("mkdir");
    std::fs::write(tmp.path().join("pg_replslot/half/state.tmp"), b"x").expect("write");
    std::fs::create_dir_all(tmp.path().join("pg_replslot/old.tmp")).expect("mkdir");
    std::fs::write(tmp.path().join("pg_replslot/README"), b"not a slot").expect("write");
    let again = ReplicationSlots::open(fs.clone(), tmp.path())?;
    assert_eq!(again.list(), vec![sample()]);
    assert!(!tmp.path().join("pg_replslot/half").exists() && !tmp.path().join("pg_replslot/old.tmp").exists());
    assert!(tmp.path().join("pg_replslot/README").exists(), "a file that is not a slot is left alone");
    again.lock().drop_slot("orders_cdc")?;
    assert!(ReplicationSlots::open(fs.clone(), tmp.path())?.list().is_empty());
    let e = again.lock().drop_slot("orders_cdc").unwrap_err();
    assert_eq!(e.to_string(), "replication slot \"orders_cdc\" does not exist");
    // A damaged state file is an error naming it.
    again.lock().create(sample())?;
    let state = tmp.path().join("pg_replslot/orders_cdc/state");
    let mut b = std::fs::read(&state).expect("read");
    b[20] ^= 1;
    std::fs::write(&state, b).expect("write");
    let e = ReplicationSlots::open(fs, tmp.path()).err().expect("corrupt state accepted").to_string();
    assert!(e.contains("pg_replslot/orders_cdc/state") && e.contains("checksum mismatch"), "{e}");
    Ok(())
}
