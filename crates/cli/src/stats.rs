//! `settle stats DIR [--json]`: the cumulative statistics views of a data directory.
//!
//! Sections, each built once as rows of cells and rendered either as psql's aligned
//! table output or as one JSON object (the same names and values both ways):
//!
//! * `pg_stat_user_tables`: per user table, the counters of `settledb::stats` (PostgreSQL's
//!   columns, then ours: `anti_wraparound_count`, `pages_frozen`, `vm_bits_cleared`);
//! * `pg_stat_database`: transactions, blocks read and hit, tuples, deadlocks, and when the
//!   counters last started from zero;
//! * `pg_stat_wal`: WAL records, full-page images and bytes;
//! * `relfrozenxid`: every table's relfrozenxid and its age (next XID - relfrozenxid), what
//!   anti-wraparound VACUUM is driven by (PostgreSQL's `age(relfrozenxid)`);
//! * `pg_prepared_xacts`: the prepared transactions waiting for COMMIT or ROLLBACK PREPARED
//!   (`transaction`, `gid`, `prepared`, `database`; there are no roles, so no `owner`), with
//!   their XID's age, since each holds back VACUUM's removable cutoff;
//! * `pg_locks`: the locks held, with `settle serve`'s columns; offline these are the table
//!   locks prepared transactions hold (taken again at startup) and their XIDs;
//! * `pg_replication_slots`: the replication slots with PostgreSQL 15's columns (`slot_name`,
//!   `plugin`, `slot_type`, `datoid`, `database`, `temporary`, `active`, `active_pid`, `xmin`,
//!   `catalog_xmin`, `restart_lsn`, `confirmed_flush_lsn`, `wal_status`, `safe_wal_size`,
//!   `two_phase`): each keeps WAL from its `restart_lsn` and catalog rows from its
//!   `catalog_xmin`. A data directory with logical slots opens only under
//!   `--set wal_level=logical`, as PostgreSQL refuses to start without it;
//! * `pg_stat_replication_slots`: per slot, PostgreSQL 15's columns (`slot_name`,
//!   `spill_txns`, `spill_count`, `spill_bytes`, `stream_txns`, `stream_count`,
//!   `stream_bytes`, `total_txns`, `total_bytes`, `stats_reset`): what its decoding sessions
//!   (get and peek alike) spilled, streamed and decoded.
//!
//! Opening the directory runs crash recovery if it needs it; the counters then start from
//! zero (the engine resets them after a crash, as PostgreSQL does), and `stats_reset` in
//! `pg_stat_database` says since when they count. They include what the opening itself did
//! (reading the catalog, the startup checkpoint).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Map, Value as Json};
use settledb::stats::SlotStats;
use settledb::xact::PreparedXact;
use settledb::{Config, Database, SlotInfo, TableStatsSnapshot};

/// One value of a view. `Null` prints as nothing, as psql prints NULL.
enum Cell {
    Num(u64),
    Int(i64),
    Text(String),
    /// Printed `t` / `f` as psql prints a boolean.
    Bool(bool),
    Null,
}

impl Cell {
    fn render(&self) -> String {
        match self {
            Cell::Num(n) => n.to_string(),
            Cell::Int(n) => n.to_string(),
            Cell::Text(s) => s.clone(),
            Cell::Bool(b) => (if *b { "t" } else { "f" }).to_string(),
            Cell::Null => String::new(),
        }
    }

    fn json(&self) -> Json {
        match self {
            Cell::Num(n) => Json::from(*n),
            Cell::Int(n) => Json::from(*n),
            Cell::Text(s) => Json::from(s.as_str()),
            Cell::Bool(b) => Json::from(*b),
            Cell::Null => Json::Null,
        }
    }
}

/// A view: a name, its columns, its rows. `one_row` views are a JSON object, others an array.
struct View {
    name: &'static str,
    columns: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
    one_row: bool,
}

impl View {
    /// psql's aligned format: text columns left-aligned, numbers right-aligned.
    fn render(&self) -> String {
        let cells: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(Cell::render).collect()).collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| cells.iter().map(|r| r[i].len()).chain([self.columns[i].len()]).max().unwrap_or(0))
            .collect();
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|i| self.rows.iter().all(|r| matches!(r[i], Cell::Num(_) | Cell::Int(_) | Cell::Null)))
            .collect();
        let line = |vals: Vec<String>, header: bool| -> String {
            let parts: Vec<String> = vals
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let w = widths[i];
                    if header {
                        format!(" {v:^w$} ")
                    } else if numeric[i] {
                        format!(" {v:>w$} ")
                    } else {
                        format!(" {v:<w$} ")
                    }
                })
                .collect();
            parts.join("|").trim_end().to_string()
        };
        let mut out = format!("{}\n", self.name);
        out.push_str(&line(self.columns.iter().map(|c| c.to_string()).collect(), true));
        out.push('\n');
        out.push_str(&widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
        out.push('\n');
        for r in cells {
            out.push_str(&line(r, false));
            out.push('\n');
        }
        let n = self.rows.len();
        out.push_str(&format!("({n} row{})\n", if n == 1 { "" } else { "s" }));
        out
    }

    fn json(&self) -> Json {
        let mut objects: Vec<Json> = self
            .rows
            .iter()
            .map(|r| Json::Object(self.columns.iter().zip(r).map(|(c, v)| (c.to_string(), v.json())).collect()))
            .collect();
        if self.one_row {
            objects.pop().unwrap_or(Json::Null)
        } else {
            Json::Array(objects)
        }
    }
}

/// A timestamp in microseconds since the Unix epoch as PostgreSQL prints a `timestamptz` in
/// UTC (`2024-05-01 12:34:56.789012+00`); 0 (never) is NULL.
fn timestamp(micros: u64) -> Cell {
    if micros == 0 {
        return Cell::Null;
    }
    let secs = micros / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = settledb::stats::civil_from_days(days);
    Cell::Text(format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}+00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        micros % 1_000_000
    ))
}

fn user_tables(tables: &[(String, TableStatsSnapshot)]) -> View {
    let columns = vec![
        "relname",
        "seq_scan",
        "idx_scan",
        "n_tup_ins",
        "n_tup_upd",
        "n_tup_del",
        "n_tup_hot_upd",
        "n_live_tup",
        "n_dead_tup",
        "n_mod_since_analyze",
        "n_ins_since_vacuum",
        "last_vacuum",
        "last_autovacuum",
        "vacuum_count",
        "autovacuum_count",
        "anti_wraparound_count",
        "pages_frozen",
        "vm_bits_cleared",
    ];
    let rows = tables
        .iter()
        .map(|(name, s)| {
            vec![
                Cell::Text(name.clone()),
                Cell::Num(s.seq_scan),
                Cell::Num(s.idx_scan),
                Cell::Num(s.n_tup_ins),
                Cell::Num(s.n_tup_upd),
                Cell::Num(s.n_tup_del),
                Cell::Num(s.n_tup_hot_upd),
                Cell::Num(s.n_live_tup),
                Cell::Num(s.n_dead_tup),
                Cell::Num(s.n_mod_since_analyze),
                Cell::Num(s.n_ins_since_vacuum),
                timestamp(s.last_vacuum),
                timestamp(s.last_autovacuum),
                Cell::Num(s.vacuum_count),
                Cell::Num(s.autovacuum_count),
                Cell::Num(s.anti_wraparound_count),
                Cell::Num(s.pages_frozen),
                Cell::Num(s.vm_bits_cleared),
            ]
        })
        .collect();
    View { name: "pg_stat_user_tables", columns, rows, one_row: false }
}

fn database(s: &settledb::DbStats) -> View {
    let columns = vec![
        "xact_commit",
        "xact_rollback",
        "blks_read",
        "blks_hit",
        "tup_returned",
        "tup_fetched",
        "tup_inserted",
        "tup_updated",
        "tup_deleted",
        "deadlocks",
        "stats_reset",
    ];
    let counts = [
        s.xact_commit,
        s.xact_rollback,
        s.blks_read,
        s.blks_hit,
        s.tup_returned,
        s.tup_fetched,
        s.tup_inserted,
        s.tup_updated,
        s.tup_deleted,
        s.deadlocks,
    ];
    let mut row: Vec<Cell> = counts.map(Cell::Num).into();
    row.push(timestamp(s.stats_reset));
    View { name: "pg_stat_database", columns, rows: vec![row], one_row: true }
}

fn wal(s: &settledb::DbStats) -> View {
    let row = [s.wal_records, s.wal_fpi, s.wal_bytes].map(Cell::Num).into();
    View { name: "pg_stat_wal", columns: vec!["wal_records", "wal_fpi", "wal_bytes"], rows: vec![row], one_row: true }
}

/// Every table's relfrozenxid and age, `pg_class` included (it counts for the database's
/// frozen XID too).
fn frozen_xids(db: &Database) -> View {
    let next = db.next_xid().xid();
    let rows = db
        .tables()
        .iter()
        .map(|t| {
            let x = t.relfrozenxid();
            // As PostgreSQL's age(): a special XID (frozen, bootstrap) is as old as an age can be.
            let age = if x.is_normal() { u64::from(next.0.wrapping_sub(x.0)) } else { i32::MAX as u64 };
            vec![Cell::Text(t.name().to_string()), Cell::Num(u64::from(x.0)), Cell::Num(age)]
        })
        .collect();
    View { name: "relfrozenxid", columns: vec!["relname", "relfrozenxid", "age"], rows, one_row: false }
}

/// The prepared transactions (`pg_prepared_xacts`), by XID, with the age of each XID.
fn prepared_xacts(list: &[PreparedXact], next: settledb::Xid) -> View {
    let rows = list
        .iter()
        .map(|p| {
            let x = p.xid.xid();
            vec![
                Cell::Num(u64::from(x.0)),
                Cell::Text(p.gid.clone()),
                timestamp(u64::try_from(p.prepared_at_us).unwrap_or(0)),
                Cell::Text(settledb::vacuum::DATABASE_NAME.to_string()),
                Cell::Num(u64::from(next.0.wrapping_sub(x.0))),
            ]
        })
        .collect();
    View {
        name: "pg_prepared_xacts",
        columns: vec!["transaction", "gid", "prepared", "database", "age"],
        rows,
        one_row: false,
    }
}

/// The locks held (`pg_locks`, the columns of `settle serve`'s view). Offline, the only
/// holders are prepared transactions, which take their table locks again at startup.
fn locks(list: &[settledb::lmgr::LockInfo]) -> View {
    let opt = |x: Option<u32>| x.map_or(Cell::Null, |v| Cell::Num(u64::from(v)));
    let rows = list
        .iter()
        .map(|l| {
            vec![
                Cell::Text(l.locktype.to_string()),
                Cell::Num(1),
                opt(l.relation.map(|o| o.0)),
                opt(l.transactionid.map(|x| x.0)),
                Cell::Num(l.owner.0),
                Cell::Text(l.mode.name().to_string()),
                Cell::Bool(l.granted),
                Cell::Bool(l.fastpath),
                Cell::Text(l.owner_kind.to_string()),
            ]
        })
        .collect();
    View {
        name: "pg_locks",
        columns: vec![
            "locktype",
            "database",
            "relation",
            "transactionid",
            "pid",
            "mode",
            "granted",
            "fastpath",
            "holder",
        ],
        rows,
        one_row: false,
    }
}

/// The replication slots (`pg_replication_slots`, PostgreSQL 15's columns), by name.
fn replication_slots(list: &[SlotInfo]) -> View {
    let opt = |x: Option<u64>| x.map_or(Cell::Null, Cell::Num);
    let rows = list
        .iter()
        .map(|s| {
            vec![
                Cell::Text(s.slot_name.clone()),
                Cell::Text(s.plugin.clone()),
                Cell::Text(s.slot_type.to_string()),
                Cell::Num(u64::from(s.datoid.0)),
                Cell::Text(s.database.clone()),
                Cell::Bool(s.temporary),
                Cell::Bool(s.active),
                opt(s.active_pid.map(u64::from)),
                opt(s.xmin.map(|x| u64::from(x.0))),
                opt(s.catalog_xmin.map(|x| u64::from(x.0))),
                s.restart_lsn.map_or(Cell::Null, |l| Cell::Text(l.to_string())),
                s.confirmed_flush_lsn.map_or(Cell::Null, |l| Cell::Text(l.to_string())),
                s.wal_status.map_or(Cell::Null, |w| Cell::Text(w.as_str().to_string())),
                s.safe_wal_size.map_or(Cell::Null, Cell::Int),
                Cell::Bool(s.two_phase),
            ]
        })
        .collect();
    View {
        name: "pg_replication_slots",
        columns: vec![
            "slot_name",
            "plugin",
            "slot_type",
            "datoid",
            "database",
            "temporary",
            "active",
            "active_pid",
            "xmin",
            "catalog_xmin",
            "restart_lsn",
            "confirmed_flush_lsn",
            "wal_status",
            "safe_wal_size",
            "two_phase",
        ],
        rows,
        one_row: false,
    }
}

/// The replication slots' decoding counters (`pg_stat_replication_slots`), by name.
fn replication_slot_stats(list: &[(String, SlotStats)]) -> View {
    let rows = list
        .iter()
        .map(|(name, s)| {
            vec![
                Cell::Text(name.clone()),
                Cell::Num(s.spill_txns),
                Cell::Num(s.spill_count),
                Cell::Num(s.spill_bytes),
                Cell::Num(s.stream_txns),
                Cell::Num(s.stream_count),
                Cell::Num(s.stream_bytes),
                Cell::Num(s.total_txns),
                Cell::Num(s.total_bytes),
                timestamp(s.stats_reset),
            ]
        })
        .collect();
    View {
        name: "pg_stat_replication_slots",
        columns: vec![
            "slot_name",
            "spill_txns",
            "spill_count",
            "spill_bytes",
            "stream_txns",
            "stream_count",
            "stream_bytes",
            "total_txns",
            "total_bytes",
            "stats_reset",
        ],
        rows,
        one_row: false,
    }
}

pub fn run(dir: PathBuf, json: bool, config: Config) -> Result<ExitCode> {
    crate::require_data_dir(&dir)?;
    let db = Database::open(&dir, config)?;
    let db_stats = db.stats();
    let next_xid = db.next_xid().xid();
    let views = [
        user_tables(&db.all_table_stats()),
        database(&db_stats),
        wal(&db_stats),
        frozen_xids(&db),
        prepared_xacts(&db.prepared_xacts(), next_xid),
        locks(&db.locks()),
        replication_slots(&db.replication_slots()),
        replication_slot_stats(&db.replication_slot_stats()),
    ];
    db.close()?;
    if json {
        let mut m: Map<String, Json> = views.iter().map(|v| (v.name.to_string(), v.json())).collect();
        m.insert("next_xid".into(), Json::from(next_xid.0));
        println!("{}", serde_json::to_string_pretty(&Json::Object(m))?);
    } else {
        let text: Vec<String> = views.iter().map(View::render).collect();
        print!("{}", text.join("\n"));
        println!("\nnext XID: {next_xid}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_as_postgresql_prints_utc() {
        assert!(matches!(timestamp(0), Cell::Null));
        assert_eq!(timestamp(1).render(), "1970-01-01 00:00:00.000001+00");
        // 2000-02-29 (a leap day of a century year) 23:59:59.5
        assert_eq!(timestamp(951_868_799_500_000).render(), "2000-02-29 23:59:59.500000+00");
        assert_eq!(timestamp(1_735_689_600_000_000).render(), "2025-01-01 00:00:00.000000+00");
    }

    #[test]
    fn views_render_aligned_and_as_json() {
        let v = View {
            name: "v",
            columns: vec!["relname", "n"],
            rows: vec![vec![Cell::Text("a".into()), Cell::Num(5)], vec![Cell::Text("bcd".into()), Cell::Null]],
            one_row: false,
        };
        assert_eq!(v.render(), "v\n relname | n\n---------+---\n a       | 5\n bcd     |\n(2 rows)\n");
        assert_eq!(v.json(), serde_json::json!([{"relname": "a", "n": 5}, {"relname": "bcd", "n": null}]));
    }

    #[test]
    fn replication_slots_view_has_postgresql_columns() {
        let s = SlotInfo {
            slot_name: "cdc".into(),
            plugin: "pgoutput".into(),
            slot_type: "logical",
            datoid: settledb::Oid(1),
            database: "settledb".into(),
            temporary: false,
            active: false,
            active_pid: None,
            xmin: None,
            catalog_xmin: Some(settledb::Xid(731)),
            restart_lsn: Some(settledb::Lsn(0x0100_0028)),
            confirmed_flush_lsn: Some(settledb::Lsn(0x0100_0060)),
            wal_status: Some(settledb::WalStatus::Reserved),
            safe_wal_size: Some(-42),
            two_phase: true,
        };
        let v = replication_slots(&[s]);
        assert_eq!(
            v.render(),
            "pg_replication_slots\n slot_name |  plugin  | slot_type | datoid | database | temporary | active | active_pid \
             | xmin | catalog_xmin | restart_lsn | confirmed_flush_lsn | wal_status | safe_wal_size | two_phase\n\
             -----------+----------+-----------+--------+----------+-----------+--------+------------+------+\
             --------------+-------------+---------------------+------------+---------------+-----------\n \
             cdc       | pgoutput | logical   |      1 | settledb | f         | f      |            |      |          \
             731 | 0/1000028   | 0/1000060           | reserved   |           -42 | t\n(1 row)\n"
        );
        let j = v.json();
        assert_eq!(j[0]["two_phase"], Json::from(true));
        assert_eq!(j[0]["xmin"], Json::Null);
        assert_eq!(j[0]["safe_wal_size"], Json::from(-42));
    }

    #[test]
    fn replication_slot_stats_view_has_postgresql_columns() {
        let s = SlotStats { spill_txns: 1, spill_count: 4, spill_bytes: 129_363, total_txns: 2, ..Default::default() };
        let v = replication_slot_stats(&[("cdc".into(), s)]);
        assert_eq!(
            v.render(),
            "pg_stat_replication_slots\n slot_name | spill_txns | spill_count | spill_bytes | stream_txns | \
             stream_count | stream_bytes | total_txns | total_bytes | stats_reset\n\
             -----------+------------+-------------+-------------+-------------+--------------+--------------+\
             ------------+-------------+-------------\n \
             cdc       |          1 |           4 |      129363 |           0 |            0 |            0 |          \
             2 |           0 |\n(1 row)\n"
        );
        assert_eq!(v.json()[0]["stats_reset"], Json::Null);
    }

    #[test]
    fn prepared_xacts_view_names_each_with_its_age() {
        let p = PreparedXact {
            xid: settledb::FullXid::new(0, settledb::Xid(700)),
            gid: "order-1".into(),
            prepared_at_us: 1_735_689_600_000_000,
            subxacts: 2,
        };
        let v = prepared_xacts(&[p], settledb::Xid(750));
        assert_eq!(
            v.render(),
            "pg_prepared_xacts\n transaction |   gid   |           prepared            | database | age\n\
             -------------+---------+-------------------------------+----------+-----\n\
             \x20        700 | order-1 | 2025-01-01 00:00:00.000000+00 | settledb |  50\n(1 row)\n"
        );
    }
}
