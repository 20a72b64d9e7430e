//! The TPC-C driver on PostgreSQL: BenchmarkSQL's SQL, one statement per step of
//! [`super::embedded`].
//!
//! # Schema and load
//!
//! [`create_schema`] declares every table of [`super::TABLES`] with the columns' SQL types and
//! the table's fillfactor (`WITH (fillfactor = N)`), and `bmsql_history.hist_id` taking its
//! default from the sequence `bmsql_hist_id_seq`, as BenchmarkSQL does. [`load`] sends the rows
//! of [`super::load::generate`] (the same rows the embedded target loads for the same seed)
//! with `COPY`, then adds the primary keys (`<table>_pkey`) and [`super::TableDef::indexes`],
//! and moves the sequence past the loaded IDs. [`vacuum_all`] is the `VACUUM (ANALYZE)` that
//! ends BenchmarkSQL's build.
//!
//! # Decimals
//!
//! The embedded engine keeps money in cents (`int8`) and rates in ten-thousandths (`int4`);
//! here the columns are `decimal`. Values cross the boundary scaled in SQL: a parameter goes in
//! as `$n::int8 / 100.0`, a column comes out as `(col * 100)::int8`, so both targets see the
//! same integers.
//!
//! # Transactions
//!
//! READ COMMITTED, prepared statements per connection. Each transaction runs the steps of the
//! embedded driver in the same order:
//!
//! - New-Order: `SELECT w_tax`; `UPDATE district SET d_next_o_id = d_next_o_id + 1 … RETURNING
//!   d_tax, d_next_o_id - 1`; `SELECT` the customer; `INSERT` oorder and new_order; per line in
//!   the given (sorted) order `SELECT` the item (missing: `ROLLBACK`, [`Outcome::RolledBack`]),
//!   `UPDATE stock … RETURNING s_dist_NN`, `INSERT` the order line.
//! - Payment: `UPDATE` warehouse and district (`RETURNING` their names), the customer by ID or
//!   by last name (the middle row ordered by `c_first`), `UPDATE` the customer (prefixing
//!   `c_data` for bad credit), `INSERT` history.
//! - Order-Status: the customer, its newest order by `ORDER BY o_id DESC LIMIT 1` (an
//!   index-only scan of the covering `bmsql_oorder_idx1`), that order's lines.
//! - Delivery: per district, the oldest new order, `DELETE` it (no row: delivered meanwhile,
//!   skip), `UPDATE` the order's carrier `RETURNING o_c_id`, `UPDATE` its lines' delivery date
//!   `RETURNING ol_amount` (summed), `UPDATE` the customer.
//! - Stock-Level: BenchmarkSQL's single query joining district, order_line and stock.
//!
//! A serialization failure (`40001`) or deadlock (`40P01`) becomes [`Outcome::Retry`]; the
//! transaction has been rolled back by then (dropping it rolls it back).

use anyhow::{anyhow, Context};
use postgres::{Client, IsolationLevel, Statement, Transaction};

use super::{
    load as population, CustomerRef, Delivery, DistrictFacts, Facts, NewOrder, OrderStatus, Outcome, Payment,
    StockLevel, TableDef, TpccConn, TpccTarget, DISTRICTS, HISTORY, TABLES,
};
use crate::pg;

/// The sequence hist_id takes its default from.
const HIST_SEQ: &str = "bmsql_hist_id_seq";

/// The `CREATE TABLE` of `def`.
fn create_table_sql(def: &TableDef) -> String {
    let cols: Vec<String> = def
        .columns
        .iter()
        .map(|c| {
            let mut s = format!("{} {}", c.name, c.sql);
            if !c.nullable {
                s.push_str(" NOT NULL");
            }
            if def.name == HISTORY.name && c.name == "hist_id" {
                s.push_str(&format!(" DEFAULT nextval('{HIST_SEQ}')"));
            }
            s
        })
        .collect();
    format!("CREATE TABLE {} ({}) WITH (fillfactor = {})", def.name, cols.join(", "), def.fillfactor)
}

/// Drops any bmsql tables and the sequence, then creates the tables (without keys).
pub fn create_schema(url: &str) -> anyhow::Result<()> {
    let mut client = pg::connect(url)?;
    let mut sql = String::new();
    for def in TABLES {
        sql.push_str(&format!("DROP TABLE IF EXISTS {} CASCADE;\n", def.name));
    }
    sql.push_str(&format!("DROP SEQUENCE IF EXISTS {HIST_SEQ};\nCREATE SEQUENCE {HIST_SEQ};\n"));
    for def in TABLES {
        sql.push_str(&create_table_sql(&def));
        sql.push_str(";\n");
    }
    client.batch_execute(&sql).context("creating the bmsql schema")
}

/// Loads the population of `warehouses` warehouses for `seed` with COPY, then adds the keys
/// and indexes and moves `bmsql_hist_id_seq` past the loaded history IDs.
pub fn load(url: &str, warehouses: i32, seed: u64) -> anyhow::Result<()> {
    let mut client = pg::connect(url)?;
    let mut sink = |def: &TableDef, rows: Vec<Vec<settledb::Value>>| -> anyhow::Result<()> {
        let names: Vec<&str> = def.columns.iter().map(|c| c.name).collect();
        let scales: Vec<u8> = def.columns.iter().map(|c| c.scale).collect();
        pg::copy_rows(&mut client, def.name, &names, &scales, &rows)?;
        Ok(())
    };
    population::generate(warehouses, seed, &mut sink)?;
    create_indexes(&mut client)?;
    client
        .batch_execute(&format!(
            "SELECT setval('{HIST_SEQ}', (SELECT coalesce(max(hist_id), 0) + 1 FROM bmsql_history), false)"
        ))
        .context("setting bmsql_hist_id_seq after the load")
}

/// The primary keys and extra indexes of [`create_schema`]'s empty tables, for a database the
/// rows reach another way (a logical replication subscriber, which needs the keys to apply
/// updates and deletes).
pub fn create_keys(url: &str) -> anyhow::Result<()> {
    create_indexes(&mut pg::connect(url)?)
}

/// The primary keys and extra indexes, built on the loaded tables.
fn create_indexes(client: &mut Client) -> anyhow::Result<()> {
    for def in TABLES {
        let sql = format!(
            "ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})",
            def.name,
            def.pkey_name(),
            def.primary_key.join(", ")
        );
        client.batch_execute(&sql).with_context(|| format!("primary key of {}", def.name))?;
        for ix in def.indexes {
            let unique = if ix.unique { "UNIQUE " } else { "" };
            let sql = format!("CREATE {unique}INDEX {} ON {} ({})", ix.name, def.name, ix.columns.join(", "));
            client.batch_execute(&sql).with_context(|| format!("index {}", ix.name))?;
        }
    }
    Ok(())
}

/// `VACUUM (ANALYZE)` of every bmsql table, as BenchmarkSQL's build ends.
pub fn vacuum_all(url: &str) -> anyhow::Result<()> {
    let mut client = pg::connect(url)?;
    for def in TABLES {
        client
            .batch_execute(&format!("VACUUM (ANALYZE) {}", def.name))
            .with_context(|| format!("vacuuming {}", def.name))?;
    }
    Ok(())
}

/// The freeze ages a table can override with a storage parameter of its own:
/// (server setting, per-table storage parameter, settable with ALTER SYSTEM at run time).
/// The `*_max_age` settings are read by the postmaster only at start, so on a running server
/// they can be changed per table only.
const PER_TABLE_AGES: [(&str, &str, bool); 6] = [
    ("autovacuum_freeze_max_age", "autovacuum_freeze_max_age", false),
    ("vacuum_freeze_min_age", "autovacuum_freeze_min_age", true),
    ("vacuum_freeze_table_age", "autovacuum_freeze_table_age", true),
    ("autovacuum_multixact_freeze_max_age", "autovacuum_multixact_freeze_max_age", false),
    ("vacuum_multixact_freeze_min_age", "autovacuum_multixact_freeze_min_age", true),
    ("vacuum_multixact_freeze_table_age", "autovacuum_multixact_freeze_table_age", true),
];

/// Applies settings to a running server, then reloads its configuration.
///
/// - The freeze ages (`autovacuum_freeze_max_age`, `vacuum_freeze_min_age`,
///   `vacuum_freeze_table_age` and their MultiXact twins) become storage parameters of every
///   bmsql table that exists (`autovacuum_freeze_max_age`, `autovacuum_freeze_min_age`,
///   `autovacuum_freeze_table_age`, …), which autovacuum obeys. `vacuum_freeze_*` are also set
///   server-wide with `ALTER SYSTEM`, so manual VACUUMs follow them. `autovacuum_freeze_max_age`
///   can be changed only at server start; here it is per-table only (and PostgreSQL ignores a
///   per-table value larger than the server's, so it can only lower it).
/// - Every other setting goes through `ALTER SYSTEM SET`; one the server can only take at start
///   (context `postmaster`) is refused with an error saying so, rather than left pending.
///
/// Settings that have no PostgreSQL equivalent are the caller's to leave out: an unknown name
/// is an error naming it.
pub fn apply_settings(url: &str, settings: &[(String, String)]) -> anyhow::Result<()> {
    let mut client = pg::connect(url)?;
    let present: Vec<String> = client
        .query("SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname LIKE 'bmsql\\_%'", &[])
        .context("listing the bmsql tables")?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (name, value) in settings {
        pg::check_identifier(name).with_context(|| format!("setting {name}"))?;
        let context: Option<String> = client
            .query_opt("SELECT context FROM pg_settings WHERE name = $1", &[name])
            .with_context(|| format!("looking up setting {name}"))?
            .map(|r| r.get(0));
        let Some(context) = context else {
            return Err(anyhow!("PostgreSQL has no setting {name} (the server rejects {name}={value})"));
        };
        let per_table = PER_TABLE_AGES.iter().find(|(n, _, _)| n == name);
        if let Some((_, param, _)) = per_table {
            for table in &present {
                let sql = format!("ALTER TABLE {table} SET ({param} = {})", pg::literal(value));
                client.batch_execute(&sql).with_context(|| format!("the server rejects {param}={value} on {table}"))?;
            }
        }
        match per_table {
            Some((_, _, false)) => continue,
            Some(_) => {}
            None if context == "postmaster" || context == "internal" => {
                return Err(anyhow!(
                    "{name} can only be set when the server starts (context {context}); \
                     start it with the setting instead (settle peer start --set {name}={value})"
                ));
            }
            None => {}
        }
        let sql = format!("ALTER SYSTEM SET {name} = {}", pg::literal(value));
        client.batch_execute(&sql).with_context(|| format!("the server rejects {name}={value}"))?;
    }
    client.batch_execute("SELECT pg_reload_conf()").context("reloading the server's configuration")
}

/// PostgreSQL (or any server speaking its protocol with its SQL) as a TPC-C target.
pub struct PgTarget {
    url: String,
}

impl PgTarget {
    /// A target over a loaded database; checks that it can connect.
    pub fn new(url: &str) -> anyhow::Result<PgTarget> {
        let mut client = pg::connect(url)?;
        client
            .query_one("SELECT count(*) FROM bmsql_warehouse", &[])
            .with_context(|| format!("{url} has no loaded bmsql schema"))?;
        Ok(PgTarget { url: url.to_string() })
    }
}

impl TpccTarget for PgTarget {
    type Conn<'a>
        = PgConn
    where
        Self: 'a;

    fn connect(&self) -> anyhow::Result<PgConn> {
        let mut client = pg::connect(&self.url)?;
        let st = Statements::prepare(&mut client).context("preparing the TPC-C statements")?;
        Ok(PgConn { client, st })
    }
}

/// The prepared statements of one connection.
struct Statements {
    no_warehouse: Statement,
    no_district: Statement,
    no_customer: Statement,
    no_oorder: Statement,
    no_new_order: Statement,
    no_item: Statement,
    /// One per district: each returns that district's `s_dist_NN`.
    no_stock: Vec<Statement>,
    no_order_line: Statement,
    pay_warehouse: Statement,
    pay_district: Statement,
    customers_by_last: Statement,
    pay_customer: Statement,
    pay_history: Statement,
    os_customer: Statement,
    os_newest_order: Statement,
    os_order_lines: Statement,
    del_oldest: Statement,
    del_delete: Statement,
    del_oorder: Statement,
    del_order_lines: Statement,
    del_customer: Statement,
    stock_level: Statement,
}

impl Statements {
    fn prepare(c: &mut Client) -> anyhow::Result<Statements> {
        let mut p = |sql: &str| c.prepare(sql).with_context(|| format!("preparing {sql}"));
        let mut no_stock = Vec::new();
        for d in 1..=DISTRICTS {
            no_stock.push(p(&format!(
                "UPDATE bmsql_stock SET s_quantity = CASE WHEN s_quantity - $1 >= 10 THEN s_quantity - $1 \
                 ELSE s_quantity - $1 + 91 END, s_ytd = s_ytd + $1, s_order_cnt = s_order_cnt + 1, \
                 s_remote_cnt = s_remote_cnt + $2 WHERE s_w_id = $3 AND s_i_id = $4 RETURNING s_dist_{d:02}"
            ))?);
        }
        Ok(Statements {
            no_warehouse: p("SELECT (w_tax * 10000)::int4 FROM bmsql_warehouse WHERE w_id = $1")?,
            no_district: p("UPDATE bmsql_district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 \
                 RETURNING (d_tax * 10000)::int4, d_next_o_id - 1")?,
            no_customer: p("SELECT (c_discount * 10000)::int4, c_last, c_credit FROM bmsql_customer \
                 WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3")?,
            no_oorder: p("INSERT INTO bmsql_oorder (o_w_id, o_d_id, o_id, o_c_id, o_carrier_id, o_ol_cnt, \
                 o_all_local, o_entry_d) VALUES ($1, $2, $3, $4, NULL, $5, $6, $7)")?,
            no_new_order: p("INSERT INTO bmsql_new_order (no_w_id, no_d_id, no_o_id) VALUES ($1, $2, $3)")?,
            no_item: p("SELECT (i_price * 100)::int8, i_name, i_data FROM bmsql_item WHERE i_id = $1")?,
            no_stock,
            no_order_line: p("INSERT INTO bmsql_order_line (ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, \
                 ol_delivery_d, ol_amount, ol_supply_w_id, ol_quantity, ol_dist_info) \
                 VALUES ($1, $2, $3, $4, $5, NULL, $6::int8 / 100.0, $7, $8, $9)")?,
            pay_warehouse: p("UPDATE bmsql_warehouse SET w_ytd = w_ytd + $1::int8 / 100.0 WHERE w_id = $2 \
                 RETURNING w_name")?,
            pay_district: p("UPDATE bmsql_district SET d_ytd = d_ytd + $1::int8 / 100.0 \
                 WHERE d_w_id = $2 AND d_id = $3 RETURNING d_name")?,
            customers_by_last: p("SELECT c_id FROM bmsql_customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 \
                 ORDER BY c_first")?,
            pay_customer: p("UPDATE bmsql_customer SET c_balance = c_balance - $1::int8 / 100.0, \
                 c_ytd_payment = c_ytd_payment + $1::int8 / 100.0, c_payment_cnt = c_payment_cnt + 1, \
                 c_data = CASE WHEN c_credit = 'BC' THEN substr($2::text || c_data, 1, 500) ELSE c_data END \
                 WHERE c_w_id = $3 AND c_d_id = $4 AND c_id = $5 RETURNING c_credit")?,
            pay_history: p("INSERT INTO bmsql_history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, \
                 h_amount, h_data) VALUES ($1, $2, $3, $4, $5, $6, $7::int8 / 100.0, $8)")?,
            os_customer: p("SELECT c_first, c_middle, c_last, (c_balance * 100)::int8 FROM bmsql_customer \
                 WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3")?,
            os_newest_order: p("SELECT o_id, o_entry_d, o_carrier_id FROM bmsql_oorder \
                 WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1")?,
            os_order_lines: p("SELECT ol_i_id, ol_supply_w_id, ol_quantity, (ol_amount * 100)::int8, ol_delivery_d \
                 FROM bmsql_order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 \
                 ORDER BY ol_w_id, ol_d_id, ol_o_id, ol_number")?,
            del_oldest: p("SELECT no_o_id FROM bmsql_new_order WHERE no_w_id = $1 AND no_d_id = $2 \
                 ORDER BY no_o_id ASC LIMIT 1")?,
            del_delete: p("DELETE FROM bmsql_new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3")?,
            del_oorder: p(
                "UPDATE bmsql_oorder SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4 \
                 RETURNING o_c_id",
            )?,
            del_order_lines: p("UPDATE bmsql_order_line SET ol_delivery_d = $1 \
                 WHERE ol_w_id = $2 AND ol_d_id = $3 AND ol_o_id = $4 RETURNING (ol_amount * 100)::int8")?,
            del_customer: p("UPDATE bmsql_customer SET c_balance = c_balance + $1::int8 / 100.0, \
                 c_delivery_cnt = c_delivery_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4")?,
            stock_level: p("SELECT count(*) FROM bmsql_stock WHERE s_w_id = $1 AND s_quantity < $2 AND s_i_id IN (\
                 SELECT ol_i_id FROM bmsql_district JOIN bmsql_order_line ON ol_w_id = d_w_id AND ol_d_id = d_id \
                 AND ol_o_id >= d_next_o_id - 20 AND ol_o_id < d_next_o_id WHERE d_w_id = $3 AND d_id = $4)")?,
        })
    }
}

/// One terminal's connection and its prepared statements.
pub struct PgConn {
    client: Client,
    st: Statements,
}

/// Maps a serialization failure or deadlock to [`Outcome::Retry`] (the failed transaction was
/// rolled back when its handle was dropped).
fn outcome(r: anyhow::Result<Outcome>) -> anyhow::Result<Outcome> {
    match r {
        Err(e) if pg::is_retryable(&e) => Ok(Outcome::Retry),
        other => other,
    }
}

/// The customer ID a Payment or Order-Status names: by last name, the middle one (rounding
/// down) of those with that name ordered by first name.
fn resolve_customer(tx: &mut Transaction<'_>, st: &Statements, w: i32, d: i32, c: &CustomerRef) -> anyhow::Result<i32> {
    match c {
        CustomerRef::Id(id) => Ok(*id),
        CustomerRef::Last(last) => {
            let rows = tx.query(&st.customers_by_last, &[&w, &d, last])?;
            let middle = rows.get(rows.len().saturating_sub(1) / 2);
            let middle = middle.ok_or_else(|| anyhow!("no customer named {last} in district {w}/{d}"))?;
            Ok(middle.try_get(0)?)
        }
    }
}

impl PgConn {
    fn try_new_order(&mut self, t: &NewOrder) -> anyhow::Result<Outcome> {
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        let w_tax: i32 = tx
            .query_opt(&st.no_warehouse, &[&t.w_id])?
            .ok_or_else(|| anyhow!("no warehouse {}", t.w_id))?
            .try_get(0)?;
        let d_row = tx
            .query_opt(&st.no_district, &[&t.w_id, &t.d_id])?
            .ok_or_else(|| anyhow!("no district {}/{}", t.w_id, t.d_id))?;
        let (d_tax, o_id): (i32, i32) = (d_row.try_get(0)?, d_row.try_get(1)?);
        let discount: i32 = tx
            .query_opt(&st.no_customer, &[&t.w_id, &t.d_id, &t.c_id])?
            .ok_or_else(|| anyhow!("no customer {}/{}/{}", t.w_id, t.d_id, t.c_id))?
            .try_get(0)?;
        let ol_cnt = t.lines.len() as i32;
        let entry_d = pg::timestamp(t.entry_d);
        tx.execute(&st.no_oorder, &[&t.w_id, &t.d_id, &o_id, &t.c_id, &ol_cnt, &(t.all_local as i32), &entry_d])?;
        tx.execute(&st.no_new_order, &[&t.w_id, &t.d_id, &o_id])?;
        let stock = &st.no_stock[(t.d_id - 1) as usize];
        let mut sum = 0i64;
        for (n, line) in t.lines.iter().enumerate() {
            let Some(item) = tx.query_opt(&st.no_item, &[&line.i_id])? else {
                // The invalid item of the 1% rollbacks: everything done so far is undone.
                tx.rollback()?;
                return Ok(Outcome::RolledBack);
            };
            let price: i64 = item.try_get(0)?;
            let remote = i32::from(line.supply_w_id != t.w_id);
            let dist_info: String = tx
                .query_opt(stock, &[&line.quantity, &remote, &line.supply_w_id, &line.i_id])?
                .ok_or_else(|| anyhow!("no stock {}/{}", line.supply_w_id, line.i_id))?
                .try_get(0)?;
            let amount = price * i64::from(line.quantity);
            sum += amount;
            let number = n as i32 + 1;
            tx.execute(
                &st.no_order_line,
                &[&t.w_id, &t.d_id, &o_id, &number, &line.i_id, &amount, &line.supply_w_id, &line.quantity, &dist_info],
            )?;
        }
        // The order's total the terminal would display (rates in ten-thousandths).
        let taxes = 10_000 + i64::from(w_tax) + i64::from(d_tax);
        std::hint::black_box(sum * (10_000 - i64::from(discount)) * taxes / 100_000_000);
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_payment(&mut self, t: &Payment) -> anyhow::Result<Outcome> {
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        let w_name: String = tx
            .query_opt(&st.pay_warehouse, &[&t.amount, &t.w_id])?
            .ok_or_else(|| anyhow!("no warehouse {}", t.w_id))?
            .try_get(0)?;
        let d_name: String = tx
            .query_opt(&st.pay_district, &[&t.amount, &t.w_id, &t.d_id])?
            .ok_or_else(|| anyhow!("no district {}/{}", t.w_id, t.d_id))?
            .try_get(0)?;
        let c_id = resolve_customer(&mut tx, st, t.c_w_id, t.c_d_id, &t.customer)?;
        // The note a bad-credit customer's c_data is prefixed with (the statement applies it
        // only when c_credit = 'BC').
        let note = format!(
            "C_ID={} C_D_ID={} C_W_ID={} D_ID={} W_ID={} H_AMOUNT={}.{:02} ",
            c_id,
            t.c_d_id,
            t.c_w_id,
            t.d_id,
            t.w_id,
            t.amount / 100,
            t.amount % 100
        );
        tx.query_opt(&st.pay_customer, &[&t.amount, &note, &t.c_w_id, &t.c_d_id, &c_id])?
            .ok_or_else(|| anyhow!("no customer {}/{}/{c_id}", t.c_w_id, t.c_d_id))?;
        let mut h_data = format!("{w_name}    {d_name}");
        h_data.truncate(24);
        let date = pg::timestamp(t.date);
        tx.execute(&st.pay_history, &[&c_id, &t.c_d_id, &t.c_w_id, &t.d_id, &t.w_id, &date, &t.amount, &h_data])?;
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_order_status(&mut self, t: &OrderStatus) -> anyhow::Result<Outcome> {
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        let c_id = resolve_customer(&mut tx, st, t.w_id, t.d_id, &t.customer)?;
        tx.query_opt(&st.os_customer, &[&t.w_id, &t.d_id, &c_id])?
            .ok_or_else(|| anyhow!("no customer {}/{}/{c_id}", t.w_id, t.d_id))?;
        if let Some(order) = tx.query_opt(&st.os_newest_order, &[&t.w_id, &t.d_id, &c_id])? {
            let o_id: i32 = order.try_get(0)?;
            let lines = tx.query(&st.os_order_lines, &[&t.w_id, &t.d_id, &o_id])?;
            std::hint::black_box(lines.len());
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_delivery(&mut self, t: &Delivery) -> anyhow::Result<Outcome> {
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        let date = pg::timestamp(t.date);
        for d in 1..=DISTRICTS {
            let Some(oldest) = tx.query_opt(&st.del_oldest, &[&t.w_id, &d])? else { continue };
            let o_id: i32 = oldest.try_get(0)?;
            if tx.execute(&st.del_delete, &[&t.w_id, &d, &o_id])? == 0 {
                // Delivered meanwhile by another worker.
                continue;
            }
            let c_id: i32 = tx
                .query_opt(&st.del_oorder, &[&t.carrier_id, &t.w_id, &d, &o_id])?
                .ok_or_else(|| anyhow!("order {}/{d}/{o_id} is missing", t.w_id))?
                .try_get(0)?;
            let mut total = 0i64;
            for line in tx.query(&st.del_order_lines, &[&date, &t.w_id, &d, &o_id])? {
                total += line.try_get::<_, i64>(0)?;
            }
            if tx.execute(&st.del_customer, &[&total, &t.w_id, &d, &c_id])? == 0 {
                return Err(anyhow!("no customer {}/{d}/{c_id}", t.w_id));
            }
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_stock_level(&mut self, t: &StockLevel) -> anyhow::Result<Outcome> {
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        let low: i64 = tx.query_one(&st.stock_level, &[&t.w_id, &t.threshold, &t.w_id, &t.d_id])?.try_get(0)?;
        std::hint::black_box(low);
        tx.commit()?;
        Ok(Outcome::Committed)
    }
}

/// The per-district figures of conditions 1–4, one row per district.
const DISTRICT_FACTS_SQL: &str = "\
SELECT d.d_w_id, d.d_id, (d.d_ytd * 100)::int8, d.d_next_o_id,
       o.max_o_id, coalesce(o.sum_ol_cnt, 0)::int8,
       n.max_no, n.min_no, coalesce(n.cnt, 0)::int8, coalesce(l.cnt, 0)::int8
  FROM bmsql_district d
  LEFT JOIN (SELECT o_w_id, o_d_id, max(o_id) AS max_o_id, sum(o_ol_cnt) AS sum_ol_cnt
               FROM bmsql_oorder GROUP BY o_w_id, o_d_id) o ON o.o_w_id = d.d_w_id AND o.o_d_id = d.d_id
  LEFT JOIN (SELECT no_w_id, no_d_id, max(no_o_id) AS max_no, min(no_o_id) AS min_no, count(*) AS cnt
               FROM bmsql_new_order GROUP BY no_w_id, no_d_id) n ON n.no_w_id = d.d_w_id AND n.no_d_id = d.d_id
  LEFT JOIN (SELECT ol_w_id, ol_d_id, count(*) AS cnt
               FROM bmsql_order_line GROUP BY ol_w_id, ol_d_id) l ON l.ol_w_id = d.d_w_id AND l.ol_d_id = d.d_id
 ORDER BY d.d_w_id, d.d_id";

impl TpccConn for PgConn {
    fn new_order(&mut self, t: &NewOrder) -> anyhow::Result<Outcome> {
        outcome(self.try_new_order(t))
    }
    fn payment(&mut self, t: &Payment) -> anyhow::Result<Outcome> {
        outcome(self.try_payment(t))
    }
    fn order_status(&mut self, t: &OrderStatus) -> anyhow::Result<Outcome> {
        outcome(self.try_order_status(t))
    }
    fn delivery(&mut self, t: &Delivery) -> anyhow::Result<Outcome> {
        outcome(self.try_delivery(t))
    }
    fn stock_level(&mut self, t: &StockLevel) -> anyhow::Result<Outcome> {
        outcome(self.try_stock_level(t))
    }

    fn consistency_facts(&mut self) -> anyhow::Result<Facts> {
        let mut tx = self.client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start()?;
        let mut facts = Facts::default();
        for r in tx.query("SELECT w_id, (w_ytd * 100)::int8 FROM bmsql_warehouse ORDER BY w_id", &[])? {
            facts.warehouses.push((r.try_get(0)?, r.try_get(1)?));
        }
        for r in tx.query(DISTRICT_FACTS_SQL, &[]).context("reading the consistency figures")? {
            facts.districts.push(DistrictFacts {
                w_id: r.try_get(0)?,
                d_id: r.try_get(1)?,
                d_ytd: r.try_get(2)?,
                d_next_o_id: r.try_get(3)?,
                max_o_id: r.try_get(4)?,
                sum_ol_cnt: r.try_get(5)?,
                max_no_o_id: r.try_get(6)?,
                min_no_o_id: r.try_get(7)?,
                new_orders: r.try_get(8)?,
                order_lines: r.try_get(9)?,
            });
        }
        tx.commit()?;
        Ok(facts)
    }
}
