//! The tables a torture run creates: pgbench's four (history with a unique id per
//! transaction), or TPC-C's nine from the workload crate, a bulk table for extension bursts, and
//! the two-phase table the prepared transactions write.

use anyhow::{Context, Result};
use settledb::{Column, Database, Schema, TableOptions, Type, VacuumParams, Value};

pub const BRANCHES: &str = "pgbench_branches";
pub const TELLERS: &str = "pgbench_tellers";
pub const ACCOUNTS: &str = "pgbench_accounts";
pub const HISTORY: &str = "pgbench_history";
pub const BULK: &str = "torture_bulk";
pub const BULK_INDEX: &str = "torture_bulk_burst";
/// Rows of prepared transactions: `(id, part, note)`, `id` the transaction's ack log key.
pub const TWOPC: &str = "torture_2pc";
pub const TWOPC_INDEX: &str = "torture_2pc_id";
/// Every GID the torture child prepares is this prefix and the ack log key.
pub const GID_PREFIX: &str = "torture-";
/// The logical replication slot the child decodes from and the verifier checks.
pub const SLOT: &str = "torture_slot";

/// Rows per bulk-insert burst, and their padding: about 12 heap pages a burst.
pub const BURST_ROWS: i32 = 400;
pub const BURST_PAD: usize = 200;

/// The workload a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Pgbench,
    Tpcc,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Pgbench => "pgbench",
            Workload::Tpcc => "tpcc",
        }
    }
}

fn col(name: &str, ty: Type, nullable: bool) -> Column {
    Column { name: name.into(), ty, nullable }
}

fn create(db: &Database, name: &str, columns: Vec<Column>) -> Result<()> {
    db.create_table(name, Schema { columns }, TableOptions::default()).with_context(|| format!("creating {name}"))?;
    Ok(())
}

/// Creates and loads the workload's tables at scale 1 (one warehouse for TPC-C), and the bulk
/// table; checkpoints at the end.
pub fn init(db: &Database, workload: Workload, seed: u64) -> Result<()> {
    match workload {
        Workload::Pgbench => init_pgbench(db)?,
        Workload::Tpcc => {
            workload::tpcc::embedded::create_schema(db)?;
            workload::tpcc::embedded::load(db, 1, seed)?;
        }
    }
    create(db, BULK, vec![col("burst", Type::Int8, false), col("n", Type::Int4, false), col("pad", Type::Text, true)])?;
    db.create_index(BULK_INDEX, BULK, &["burst"], false)?;
    ensure_twophase(db)?;
    ensure_slot(db)?;
    db.checkpoint()?;
    Ok(())
}

/// Creates the replication slot unless it exists.
pub fn ensure_slot(db: &Database) -> Result<()> {
    if db.replication_slot(SLOT).is_none() {
        db.create_logical_replication_slot(SLOT, "test_decoding", false).context("creating the replication slot")?;
    }
    Ok(())
}

/// Creates the two-phase table unless it exists (a run begun before it did gets it too).
pub fn ensure_twophase(db: &Database) -> Result<()> {
    if db.table(TWOPC).is_ok() {
        return Ok(());
    }
    create(
        db,
        TWOPC,
        vec![col("id", Type::Int8, false), col("part", Type::Int4, false), col("note", Type::Text, true)],
    )?;
    db.create_index(TWOPC_INDEX, TWOPC, &["id"], false)?;
    Ok(())
}

/// pgbench's tables at scale 1, with the rows `pgbench -i` generates; history carries `hid`,
/// the transaction's unique id (generation << 32 | client << 24 | sequence).
fn init_pgbench(db: &Database) -> Result<()> {
    use Type::{Int4, Int8, Text, Timestamp};
    create(db, BRANCHES, vec![col("bid", Int4, false), col("bbalance", Int4, true), col("filler", Text, true)])?;
    let teller =
        vec![col("tid", Int4, false), col("bid", Int4, true), col("tbalance", Int4, true), col("filler", Text, true)];
    create(db, TELLERS, teller)?;
    let account =
        vec![col("aid", Int4, false), col("bid", Int4, true), col("abalance", Int4, true), col("filler", Text, true)];
    create(db, ACCOUNTS, account)?;
    let mut sink = |table: &'static str, rows: Vec<Vec<Value>>| -> Result<()> {
        let t = db.table(table)?;
        let mut tx = db.begin()?;
        tx.insert_many(&t, &rows).with_context(|| format!("loading {table}"))?;
        tx.commit()?;
        Ok(())
    };
    workload::pgbench::generate(1, &mut sink)?;
    let history = vec![
        col("hid", Int8, false),
        col("tid", Int4, true),
        col("bid", Int4, true),
        col("aid", Int4, true),
        col("delta", Int4, true),
        col("mtime", Timestamp, true),
        col("filler", Text, true),
    ];
    create(db, HISTORY, history)?;
    for (t, key) in [(BRANCHES, "bid"), (TELLERS, "tid"), (ACCOUNTS, "aid"), (HISTORY, "hid")] {
        db.vacuum(Some(t), &VacuumParams::default())?;
        db.create_index(&format!("{t}_pkey"), t, &[key], true)?;
    }
    Ok(())
}
