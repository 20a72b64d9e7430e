//! The TPC-C driver over settledb's Rust API.
//!
//! Each transaction is what BenchmarkSQL's SQL does, step by step, through the explicit
//! index-and-key API: `SELECT … WHERE key` is [`Transaction::get`], `UPDATE … WHERE key` is
//! [`Transaction::update_by_key`] (find, lock and change in one command, re-checked on a
//! concurrent update as READ COMMITTED does), a range predicate on an index prefix is
//! [`Transaction::range`], and where PostgreSQL would plan an index-only scan for
//! BenchmarkSQL's SQL (ORDER_STATUS's newest-order lookup on `bmsql_oorder_idx1`, DELIVERY's
//! oldest new order on `bmsql_new_order`'s key) it is [`Transaction::index_only`].
//! [`TpccConn::access_counts`] reports the calling thread's heap accesses
//! ([`settledb::heap::my_heap_usage`]), so the run can charge them to each transaction type.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{anyhow, Context};
use settledb::{Database, Error, Index, KeyBound, ScanDirection, Table, TableOptions, Transaction, Value};

use super::{
    load, AccessCounts, CustomerRef, Delivery, DistrictFacts, Facts, NewOrder, OrderStatus, Outcome, Payment,
    StockLevel, TableDef, TpccConn, TpccTarget, CUSTOMER, DISTRICT, DISTRICTS, HISTORY, ITEM, NEW_ORDER, OORDER,
    ORDER_LINE, STOCK, TABLES, WAREHOUSE,
};

/// Creates BenchmarkSQL's tables with their fillfactors (no keys yet).
pub fn create_schema(db: &Database) -> anyhow::Result<()> {
    for def in TABLES {
        let schema = settledb::Schema {
            columns: def
                .columns
                .iter()
                .map(|c| settledb::Column { name: c.name.into(), ty: c.ty, nullable: c.nullable })
                .collect(),
        };
        let options = TableOptions { fillfactor: def.fillfactor, ..TableOptions::default() };
        db.create_table(def.name, schema, options).with_context(|| format!("creating {}", def.name))?;
    }
    Ok(())
}

/// Loads the population of `warehouses` warehouses (one transaction per chunk, as
/// BenchmarkSQL's loader commits in batches), then adds the primary keys and indexes.
pub fn load(db: &Database, warehouses: i32, seed: u64) -> anyhow::Result<()> {
    let mut sink = |def: &TableDef, rows: Vec<Vec<Value>>| -> anyhow::Result<()> {
        let table = db.table(def.name)?;
        let mut tx = db.begin()?;
        tx.insert_many(&table, &rows).with_context(|| format!("loading {}", def.name))?;
        tx.commit()?;
        Ok(())
    };
    load::generate(warehouses, seed, &mut sink)?;
    create_indexes(db)
}

/// BenchmarkSQL's primary keys and extra indexes, built on the loaded tables.
pub fn create_indexes(db: &Database) -> anyhow::Result<()> {
    for def in TABLES {
        db.add_primary_key(def.name, def.primary_key).with_context(|| format!("primary key of {}", def.name))?;
        for ix in def.indexes {
            db.create_index(ix.name, def.name, ix.columns, ix.unique).with_context(|| format!("index {}", ix.name))?;
        }
    }
    Ok(())
}

/// The embedded engine as a TPC-C target.
pub struct Embedded<'db> {
    db: &'db Database,
    /// `bmsql_hist_id_seq`: the next history ID.
    hist_seq: AtomicI32,
}

impl<'db> Embedded<'db> {
    /// A target over an opened, loaded database.
    pub fn new(db: &'db Database) -> anyhow::Result<Embedded<'db>> {
        // The sequence resumes after the largest hist_id (the primary key's last entry).
        let pkey = db.index(&HISTORY.pkey_name())?;
        let mut tx = db.begin()?;
        let last = tx.index_only(&pkey, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward, Some(1))?;
        tx.commit()?;
        let max = match last.first().and_then(|k| k.first()) {
            Some(Value::Int4(v)) => *v,
            _ => 0,
        };
        Ok(Embedded { db, hist_seq: AtomicI32::new(max + 1) })
    }
}

impl<'db> TpccTarget for Embedded<'db> {
    type Conn<'a>
        = Conn<'a>
    where
        Self: 'a;

    fn connect(&self) -> anyhow::Result<Conn<'_>> {
        let t = |d: &TableDef| self.db.table(d.name);
        let pk = |d: &TableDef| self.db.index(&d.pkey_name());
        Ok(Conn {
            db: self.db,
            hist_seq: &self.hist_seq,
            warehouse: t(&WAREHOUSE)?,
            history: t(&HISTORY)?,
            oorder: t(&OORDER)?,
            new_order: t(&NEW_ORDER)?,
            order_line: t(&ORDER_LINE)?,
            district: t(&DISTRICT)?,
            warehouse_pk: pk(&WAREHOUSE)?,
            district_pk: pk(&DISTRICT)?,
            customer_pk: pk(&CUSTOMER)?,
            customer_idx1: self.db.index("bmsql_customer_idx1")?,
            oorder_pk: pk(&OORDER)?,
            oorder_idx1: self.db.index("bmsql_oorder_idx1")?,
            new_order_pk: pk(&NEW_ORDER)?,
            order_line_pk: pk(&ORDER_LINE)?,
            item_pk: pk(&ITEM)?,
            stock_pk: pk(&STOCK)?,
        })
    }
}

/// One terminal's handles on the tables and indexes.
pub struct Conn<'db> {
    db: &'db Database,
    hist_seq: &'db AtomicI32,
    warehouse: Table,
    district: Table,
    history: Table,
    oorder: Table,
    new_order: Table,
    order_line: Table,
    warehouse_pk: Index,
    district_pk: Index,
    customer_pk: Index,
    customer_idx1: Index,
    oorder_pk: Index,
    oorder_idx1: Index,
    new_order_pk: Index,
    order_line_pk: Index,
    item_pk: Index,
    stock_pk: Index,
}

fn int4(v: &Value, what: &str) -> anyhow::Result<i32> {
    match v {
        Value::Int4(x) => Ok(*x),
        other => Err(anyhow!("{what}: expected int4, found {other:?}")),
    }
}

fn int8(v: &Value, what: &str) -> anyhow::Result<i64> {
    match v {
        Value::Int8(x) => Ok(*x),
        other => Err(anyhow!("{what}: expected int8, found {other:?}")),
    }
}

/// An update closure's error, for values the schema guarantees.
fn bad(what: &str) -> Error {
    Error::InvalidInput(format!("unexpected value in {what}"))
}

/// Maps the engine's retryable errors to [`Outcome::Retry`]; the transaction, dropped by the
/// caller, rolls back.
fn outcome(r: anyhow::Result<Outcome>) -> anyhow::Result<Outcome> {
    match r {
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::Deadlock { .. } | Error::SerializationFailure) => Ok(Outcome::Retry),
            _ => Err(e),
        },
        ok => ok,
    }
}

fn key(v: &[i32]) -> Vec<Value> {
    v.iter().map(|&x| Value::Int4(x)).collect()
}

fn exactly(k: Vec<Value>) -> (KeyBound, KeyBound) {
    (KeyBound::Included(k.clone()), KeyBound::Included(k))
}

impl Conn<'_> {
    /// The customer a Payment or Order-Status names: its ID, looked up by last name when
    /// needed (the middle one, by first name, of those with that name).
    fn resolve_customer(&self, tx: &mut Transaction<'_>, w: i32, d: i32, c: &CustomerRef) -> anyhow::Result<i32> {
        match c {
            CustomerRef::Id(id) => Ok(*id),
            CustomerRef::Last(last) => {
                let prefix = vec![Value::Int4(w), Value::Int4(d), Value::Text(last.clone())];
                let (lo, hi) = exactly(prefix);
                let rows = tx.range(&self.customer_idx1, lo, hi, ScanDirection::Forward, None)?;
                if rows.is_empty() {
                    return Err(anyhow!("no customer named {last} in district {w}/{d}"));
                }
                let middle = &rows[(rows.len() - 1) / 2].1;
                int4(&middle[CUSTOMER.col("c_id")], "c_id")
            }
        }
    }

    fn try_new_order(&mut self, t: &NewOrder) -> anyhow::Result<Outcome> {
        let mut tx = self.db.begin()?;
        let w_row = tx.get(&self.warehouse_pk, &key(&[t.w_id]))?.ok_or_else(|| anyhow!("no warehouse {}", t.w_id))?.1;
        let w_tax = int4(&w_row[WAREHOUSE.col("w_tax")], "w_tax")? as i64;
        let (next_col, tax_col) = (DISTRICT.col("d_next_o_id"), DISTRICT.col("d_tax"));
        let mut o_id = 0;
        let mut d_tax = 0;
        tx.update_by_key(&self.district_pk, &key(&[t.w_id, t.d_id]), |row| {
            let mut row = row.to_vec();
            let Value::Int4(next) = row[next_col] else { return Err(bad("d_next_o_id")) };
            if let Value::Int4(tax) = row[tax_col] {
                d_tax = tax as i64;
            }
            o_id = next;
            row[next_col] = Value::Int4(next + 1);
            Ok(row)
        })?
        .ok_or_else(|| anyhow!("no district {}/{}", t.w_id, t.d_id))?;
        let c_row = tx
            .get(&self.customer_pk, &key(&[t.w_id, t.d_id, t.c_id]))?
            .ok_or_else(|| anyhow!("no customer {}/{}/{}", t.w_id, t.d_id, t.c_id))?
            .1;
        let discount = int4(&c_row[CUSTOMER.col("c_discount")], "c_discount")? as i64;
        let mut sum = 0i64;
        tx.insert(
            &self.oorder,
            &[
                Value::Int4(t.w_id),
                Value::Int4(t.d_id),
                Value::Int4(o_id),
                Value::Int4(t.c_id),
                Value::Null,
                Value::Int4(t.lines.len() as i32),
                Value::Int4(t.all_local as i32),
                Value::Timestamp(t.entry_d),
            ],
        )?;
        tx.insert(&self.new_order, &key(&[t.w_id, t.d_id, o_id]))?;
        let dist_col = STOCK.col("s_dist_01") + (t.d_id - 1) as usize;
        let (qty, ytd, cnt, remote) =
            (STOCK.col("s_quantity"), STOCK.col("s_ytd"), STOCK.col("s_order_cnt"), STOCK.col("s_remote_cnt"));
        for (n, line) in t.lines.iter().enumerate() {
            let Some((_, item)) = tx.get(&self.item_pk, &key(&[line.i_id]))? else {
                // The invalid item of the 1% rollbacks: everything done so far is undone.
                tx.rollback()?;
                return Ok(Outcome::RolledBack);
            };
            let price = int8(&item[ITEM.col("i_price")], "i_price")?;
            let mut dist_info = String::new();
            let is_remote = line.supply_w_id != t.w_id;
            tx.update_by_key(&self.stock_pk, &key(&[line.supply_w_id, line.i_id]), |row| {
                let mut row = row.to_vec();
                let (Value::Int4(q), Value::Int8(y), Value::Int4(c), Value::Int4(r)) =
                    (&row[qty], &row[ytd], &row[cnt], &row[remote])
                else {
                    return Err(bad("bmsql_stock"));
                };
                let new_q = if q - line.quantity >= 10 { q - line.quantity } else { q - line.quantity + 91 };
                let (y, c, r) = (*y, *c, *r);
                row[qty] = Value::Int4(new_q);
                // s_ytd is a decimal(8,2) quantity, held in hundredths.
                row[ytd] = Value::Int8(y + line.quantity as i64 * 100);
                row[cnt] = Value::Int4(c + 1);
                row[remote] = Value::Int4(r + is_remote as i32);
                if let Value::Text(s) = &row[dist_col] {
                    dist_info = s.clone();
                }
                Ok(row)
            })?
            .ok_or_else(|| anyhow!("no stock {}/{}", line.supply_w_id, line.i_id))?;
            sum += price * line.quantity as i64;
            tx.insert(
                &self.order_line,
                &[
                    Value::Int4(t.w_id),
                    Value::Int4(t.d_id),
                    Value::Int4(o_id),
                    Value::Int4(n as i32 + 1),
                    Value::Int4(line.i_id),
                    Value::Null,
                    Value::Int8(price * line.quantity as i64),
                    Value::Int4(line.supply_w_id),
                    Value::Int4(line.quantity),
                    Value::Text(dist_info),
                ],
            )?;
        }
        // The order's total, which the terminal would display: sum × (1 − discount) × (1 + taxes),
        // the rates in ten-thousandths.
        std::hint::black_box(sum * (10_000 - discount) * (10_000 + w_tax + d_tax) / 100_000_000);
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_payment(&mut self, t: &Payment) -> anyhow::Result<Outcome> {
        let mut tx = self.db.begin()?;
        let (w_ytd, w_name) = (WAREHOUSE.col("w_ytd"), WAREHOUSE.col("w_name"));
        let mut warehouse_name = String::new();
        tx.update_by_key(&self.warehouse_pk, &key(&[t.w_id]), |row| {
            let mut row = row.to_vec();
            let Value::Int8(ytd) = row[w_ytd] else { return Err(bad("w_ytd")) };
            row[w_ytd] = Value::Int8(ytd + t.amount);
            if let Value::Text(s) = &row[w_name] {
                warehouse_name = s.clone();
            }
            Ok(row)
        })?
        .ok_or_else(|| anyhow!("no warehouse {}", t.w_id))?;
        let (d_ytd, d_name) = (DISTRICT.col("d_ytd"), DISTRICT.col("d_name"));
        let mut district_name = String::new();
        tx.update_by_key(&self.district_pk, &key(&[t.w_id, t.d_id]), |row| {
            let mut row = row.to_vec();
            let Value::Int8(ytd) = row[d_ytd] else { return Err(bad("d_ytd")) };
            row[d_ytd] = Value::Int8(ytd + t.amount);
            if let Value::Text(s) = &row[d_name] {
                district_name = s.clone();
            }
            Ok(row)
        })?
        .ok_or_else(|| anyhow!("no district {}/{}", t.w_id, t.d_id))?;
        let c_id = self.resolve_customer(&mut tx, t.c_w_id, t.c_d_id, &t.customer)?;
        let cols = ["c_balance", "c_ytd_payment", "c_payment_cnt", "c_credit", "c_data"].map(|n| CUSTOMER.col(n));
        tx.update_by_key(&self.customer_pk, &key(&[t.c_w_id, t.c_d_id, c_id]), |row| {
            let mut row = row.to_vec();
            let (Value::Int8(bal), Value::Int8(ytd), Value::Int4(cnt)) = (&row[cols[0]], &row[cols[1]], &row[cols[2]])
            else {
                return Err(bad("bmsql_customer"));
            };
            let (bal, ytd, cnt) = (*bal, *ytd, *cnt);
            row[cols[0]] = Value::Int8(bal - t.amount);
            row[cols[1]] = Value::Int8(ytd + t.amount);
            row[cols[2]] = Value::Int4(cnt + 1);
            if matches!(&row[cols[3]], Value::Text(s) if s == "BC") {
                let old = if let Value::Text(s) = &row[cols[4]] { s.as_str() } else { "" };
                let mut data = format!(
                    "C_ID={} C_D_ID={} C_W_ID={} D_ID={} W_ID={} H_AMOUNT={}.{:02} {}",
                    c_id,
                    t.c_d_id,
                    t.c_w_id,
                    t.d_id,
                    t.w_id,
                    t.amount / 100,
                    t.amount % 100,
                    old
                );
                data.truncate(500);
                row[cols[4]] = Value::Text(data);
            }
            Ok(row)
        })?
        .ok_or_else(|| anyhow!("no customer {}/{}/{c_id}", t.c_w_id, t.c_d_id))?;
        let mut h_data = format!("{warehouse_name}    {district_name}");
        h_data.truncate(24);
        tx.insert(
            &self.history,
            &[
                Value::Int4(self.hist_seq.fetch_add(1, Ordering::Relaxed)),
                Value::Int4(c_id),
                Value::Int4(t.c_d_id),
                Value::Int4(t.c_w_id),
                Value::Int4(t.d_id),
                Value::Int4(t.w_id),
                Value::Timestamp(t.date),
                Value::Int8(t.amount),
                Value::Text(h_data),
            ],
        )?;
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_order_status(&mut self, t: &OrderStatus) -> anyhow::Result<Outcome> {
        let mut tx = self.db.begin()?;
        let c_id = self.resolve_customer(&mut tx, t.w_id, t.d_id, &t.customer)?;
        let customer = tx.get(&self.customer_pk, &key(&[t.w_id, t.d_id, c_id]))?;
        if customer.is_none() {
            return Err(anyhow!("no customer {}/{}/{c_id}", t.w_id, t.d_id));
        }
        // The customer's newest order, from the covering index alone where the map allows.
        let (lo, hi) = exactly(key(&[t.w_id, t.d_id, c_id]));
        let newest = tx.index_only(&self.oorder_idx1, lo, hi, ScanDirection::Backward, Some(1))?;
        if let Some(order) = newest.first() {
            let o_id = int4(&order[3], "o_id")?;
            let (lo, hi) = exactly(key(&[t.w_id, t.d_id, o_id]));
            let _lines = tx.range(&self.order_line_pk, lo, hi, ScanDirection::Forward, None)?;
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_delivery(&mut self, t: &Delivery) -> anyhow::Result<Outcome> {
        let mut tx = self.db.begin()?;
        let carrier = OORDER.col("o_carrier_id");
        let c_id_col = OORDER.col("o_c_id");
        let (delivery_d, amount) = (ORDER_LINE.col("ol_delivery_d"), ORDER_LINE.col("ol_amount"));
        let (balance, deliveries) = (CUSTOMER.col("c_balance"), CUSTOMER.col("c_delivery_cnt"));
        for d in 1..=DISTRICTS {
            let (lo, hi) = exactly(key(&[t.w_id, d]));
            // Every column is in the key: an index-only scan, as PostgreSQL plans it.
            let oldest = tx.index_only(&self.new_order_pk, lo, hi, ScanDirection::Forward, Some(1))?;
            let Some(row) = oldest.first() else { continue };
            let o_id = int4(&row[2], "no_o_id")?;
            if !tx.delete_by_key(&self.new_order_pk, &key(&[t.w_id, d, o_id]))? {
                // Delivered meanwhile by another worker.
                continue;
            }
            let mut c_id = 0;
            tx.update_by_key(&self.oorder_pk, &key(&[t.w_id, d, o_id]), |row| {
                let mut row = row.to_vec();
                let Value::Int4(c) = row[c_id_col] else { return Err(bad("o_c_id")) };
                c_id = c;
                row[carrier] = Value::Int4(t.carrier_id);
                Ok(row)
            })?
            .ok_or_else(|| anyhow!("order {}/{d}/{o_id} is missing", t.w_id))?;
            let (lo, hi) = exactly(key(&[t.w_id, d, o_id]));
            let lines = tx.range(&self.order_line_pk, lo, hi, ScanDirection::Forward, None)?;
            let mut total = 0i64;
            for (_, line) in &lines {
                let number = int4(&line[3], "ol_number")?;
                tx.update_by_key(&self.order_line_pk, &key(&[t.w_id, d, o_id, number]), |row| {
                    let mut row = row.to_vec();
                    let Value::Int8(a) = row[amount] else { return Err(bad("ol_amount")) };
                    total += a;
                    row[delivery_d] = Value::Timestamp(t.date);
                    Ok(row)
                })?;
            }
            tx.update_by_key(&self.customer_pk, &key(&[t.w_id, d, c_id]), |row| {
                let mut row = row.to_vec();
                let (Value::Int8(b), Value::Int4(n)) = (&row[balance], &row[deliveries]) else {
                    return Err(bad("bmsql_customer"));
                };
                let (b, n) = (*b, *n);
                row[balance] = Value::Int8(b + total);
                row[deliveries] = Value::Int4(n + 1);
                Ok(row)
            })?
            .ok_or_else(|| anyhow!("no customer {}/{d}/{c_id}", t.w_id))?;
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    fn try_stock_level(&mut self, t: &StockLevel) -> anyhow::Result<Outcome> {
        let mut tx = self.db.begin()?;
        let d_row = tx
            .get(&self.district_pk, &key(&[t.w_id, t.d_id]))?
            .ok_or_else(|| anyhow!("no district {}/{}", t.w_id, t.d_id))?
            .1;
        let next = int4(&d_row[DISTRICT.col("d_next_o_id")], "d_next_o_id")?;
        let lines = tx.range(
            &self.order_line_pk,
            KeyBound::Included(key(&[t.w_id, t.d_id, next - 20])),
            KeyBound::Excluded(key(&[t.w_id, t.d_id, next])),
            ScanDirection::Forward,
            None,
        )?;
        let items: BTreeSet<i32> = lines.iter().filter_map(|(_, l)| int4(&l[4], "ol_i_id").ok()).collect();
        let q = STOCK.col("s_quantity");
        let mut low = 0;
        for i in items {
            if let Some((_, s)) = tx.get(&self.stock_pk, &key(&[t.w_id, i]))? {
                if int4(&s[q], "s_quantity")? < t.threshold {
                    low += 1;
                }
            }
        }
        std::hint::black_box(low);
        tx.commit()?;
        Ok(Outcome::Committed)
    }
}

impl TpccConn for Conn<'_> {
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

    fn access_counts(&self) -> Option<AccessCounts> {
        let u = settledb::heap::my_heap_usage();
        Some(AccessCounts {
            transactions: 0,
            heap_blks_hit: u.blks_hit,
            heap_blks_read: u.blks_read,
            index_only_heap_fetches: u.index_only_heap_fetches,
            index_only_fetches_avoided: u.index_only_fetches_avoided,
        })
    }

    fn consistency_facts(&mut self) -> anyhow::Result<Facts> {
        use std::collections::BTreeMap;
        let mut tx = self.db.begin_with(settledb::IsolationLevel::RepeatableRead)?;
        let mut facts = Facts::default();
        for r in tx.scan(&self.warehouse)? {
            let (_, row) = r?;
            facts.warehouses.push((int4(&row[0], "w_id")?, int8(&row[WAREHOUSE.col("w_ytd")], "w_ytd")?));
        }
        let mut districts: BTreeMap<(i32, i32), DistrictFacts> = BTreeMap::new();
        for r in tx.scan(&self.district)? {
            let (_, row) = r?;
            let (w, d) = (int4(&row[0], "d_w_id")?, int4(&row[1], "d_id")?);
            districts.insert(
                (w, d),
                DistrictFacts {
                    w_id: w,
                    d_id: d,
                    d_ytd: int8(&row[DISTRICT.col("d_ytd")], "d_ytd")?,
                    d_next_o_id: int4(&row[DISTRICT.col("d_next_o_id")], "d_next_o_id")?,
                    ..DistrictFacts::default()
                },
            );
        }
        let ol_cnt = OORDER.col("o_ol_cnt");
        for r in tx.scan(&self.oorder)? {
            let (_, row) = r?;
            let Some(f) = districts.get_mut(&(int4(&row[0], "o_w_id")?, int4(&row[1], "o_d_id")?)) else { continue };
            let o = int4(&row[2], "o_id")?;
            f.max_o_id = Some(f.max_o_id.map_or(o, |m| m.max(o)));
            f.sum_ol_cnt += int4(&row[ol_cnt], "o_ol_cnt")? as i64;
        }
        for r in tx.scan(&self.new_order)? {
            let (_, row) = r?;
            let Some(f) = districts.get_mut(&(int4(&row[0], "no_w_id")?, int4(&row[1], "no_d_id")?)) else {
                continue;
            };
            let o = int4(&row[2], "no_o_id")?;
            f.max_no_o_id = Some(f.max_no_o_id.map_or(o, |m| m.max(o)));
            f.min_no_o_id = Some(f.min_no_o_id.map_or(o, |m| m.min(o)));
            f.new_orders += 1;
        }
        for r in tx.scan(&self.order_line)? {
            let (_, row) = r?;
            if let Some(f) = districts.get_mut(&(int4(&row[0], "ol_w_id")?, int4(&row[1], "ol_d_id")?)) {
                f.order_lines += 1;
            }
        }
        tx.commit()?;
        facts.districts = districts.into_values().collect();
        Ok(facts)
    }
}
