//! The initial population (clause 4.3.3.1), as rows of [`settledb::Value`] handed to a sink in
//! chunks, so every target loads the same rows for the same seed.

use settledb::Value;

use super::{
    TableDef, CUSTOMER, CUSTOMERS, DISTRICT, DISTRICTS, FIRST_UNDELIVERED, HISTORY, ITEM, ITEMS, NEW_ORDER, OORDER,
    ORDERS, ORDER_LINE, STOCK, WAREHOUSE,
};
use crate::rng::{last_name, NurandConstants, TpccRng};

/// Rows handed to the sink at a time.
const CHUNK: usize = 5_000;

/// A chunk of rows of one table.
pub type Sink<'a> = dyn FnMut(&TableDef, Vec<Vec<Value>>) -> anyhow::Result<()> + 'a;

struct Chunker<'a, 'b> {
    table: &'static TableDef,
    rows: Vec<Vec<Value>>,
    sink: &'a mut Sink<'b>,
}

impl Chunker<'_, '_> {
    fn push(&mut self, row: Vec<Value>) -> anyhow::Result<()> {
        self.rows.push(row);
        if self.rows.len() == CHUNK {
            (self.sink)(self.table, std::mem::take(&mut self.rows))?;
        }
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<()> {
        if !self.rows.is_empty() {
            (self.sink)(self.table, std::mem::take(&mut self.rows))?;
        }
        Ok(())
    }
}

fn chunker<'a, 'b>(table: &'static TableDef, sink: &'a mut Sink<'b>) -> Chunker<'a, 'b> {
    Chunker { table, rows: Vec::with_capacity(CHUNK), sink }
}

fn i4(v: i32) -> Value {
    Value::Int4(v)
}
fn i8(v: i64) -> Value {
    Value::Int8(v)
}
fn t(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

fn address(r: &mut TpccRng) -> [Value; 5] {
    [t(r.astring(10, 20)), t(r.astring(10, 20)), t(r.astring(10, 20)), t(r.astring(2, 2).to_uppercase()), t(r.zip())]
}

/// Generates the population of `warehouses` warehouses for `seed`, table by table in
/// [`super::TABLES`] order, into `sink`.
pub fn generate(warehouses: i32, seed: u64, sink: &mut Sink<'_>) -> anyhow::Result<()> {
    let c = NurandConstants::from_seed(seed);
    let now = super::inputs::now_timestamp();
    let mut r = TpccRng::new(seed, u64::MAX, c);

    let mut out = chunker(&ITEM, sink);
    for i in 1..=ITEMS {
        out.push(vec![
            i4(i),
            t(r.astring(14, 24)),
            i8(r.int(100, 10_000)),
            t(r.data_with_original(26, 50)),
            i4(r.int32(1, 10_000)),
        ])?;
    }
    out.finish()?;

    let mut out = chunker(&WAREHOUSE, sink);
    for w in 1..=warehouses {
        let mut row = vec![i4(w), i8(30_000_000), i4(r.int32(0, 2000)), t(r.astring(6, 10))];
        row.extend(address(&mut r));
        out.push(row)?;
    }
    out.finish()?;

    let mut out = chunker(&STOCK, sink);
    for w in 1..=warehouses {
        for i in 1..=ITEMS {
            let mut row =
                vec![i4(w), i4(i), i4(r.int32(10, 100)), i8(0), i4(0), i4(0), t(r.data_with_original(26, 50))];
            row.extend((0..10).map(|_| t(r.astring(24, 24))));
            out.push(row)?;
        }
    }
    out.finish()?;

    let mut out = chunker(&DISTRICT, sink);
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            let mut row = vec![i4(w), i4(d), i8(3_000_000), i4(r.int32(0, 2000)), i4(ORDERS + 1), t(r.astring(6, 10))];
            row.extend(address(&mut r));
            out.push(row)?;
        }
    }
    out.finish()?;

    let mut out = chunker(&CUSTOMER, sink);
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            for cid in 1..=CUSTOMERS {
                let last = if cid <= 1000 { last_name((cid - 1) as u32) } else { r.load_last_name() };
                let credit = if r.percent(10) { "BC" } else { "GC" };
                let mut row = vec![
                    i4(w),
                    i4(d),
                    i4(cid),
                    i4(r.int32(0, 5000)),
                    t(credit),
                    t(last),
                    t(r.astring(8, 16)),
                    i8(5_000_000),
                    i8(-1000),
                    i8(1000),
                    i4(1),
                    i4(0),
                ];
                row.extend(address(&mut r));
                row.extend([t(r.nstring(16, 16)), Value::Timestamp(now), t("OE"), t(r.astring(300, 500))]);
                out.push(row)?;
            }
        }
    }
    out.finish()?;

    let mut out = chunker(&HISTORY, sink);
    let mut hist_id = 0;
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            for cid in 1..=CUSTOMERS {
                hist_id += 1;
                out.push(vec![
                    i4(hist_id),
                    i4(cid),
                    i4(d),
                    i4(w),
                    i4(d),
                    i4(w),
                    Value::Timestamp(now),
                    i8(1000),
                    t(r.astring(12, 24)),
                ])?;
            }
        }
    }
    out.finish()?;

    // Orders, then new orders, then order lines: each order's line count is drawn with the
    // order and remembered for its lines.
    let mut counts = Vec::with_capacity((warehouses * DISTRICTS * ORDERS) as usize);
    let mut out = chunker(&OORDER, sink);
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            let customers = r.permutation(CUSTOMERS);
            for o in 1..=ORDERS {
                let carrier = if o < FIRST_UNDELIVERED { i4(r.int32(1, 10)) } else { Value::Null };
                let n = r.int32(5, 15);
                counts.push(n);
                out.push(vec![
                    i4(w),
                    i4(d),
                    i4(o),
                    i4(customers[(o - 1) as usize]),
                    carrier,
                    i4(n),
                    i4(1),
                    Value::Timestamp(now),
                ])?;
            }
        }
    }
    out.finish()?;

    let mut out = chunker(&NEW_ORDER, sink);
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            for o in FIRST_UNDELIVERED..=ORDERS {
                out.push(vec![i4(w), i4(d), i4(o)])?;
            }
        }
    }
    out.finish()?;

    let mut out = chunker(&ORDER_LINE, sink);
    let mut k = 0;
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            for o in 1..=ORDERS {
                for n in 1..=counts[k] {
                    let delivered = o < FIRST_UNDELIVERED;
                    out.push(vec![
                        i4(w),
                        i4(d),
                        i4(o),
                        i4(n),
                        i4(r.int32(1, ITEMS)),
                        if delivered { Value::Timestamp(now) } else { Value::Null },
                        i8(if delivered { 0 } else { r.int(1, 999_999) }),
                        i4(w),
                        i4(5),
                        t(r.astring(24, 24)),
                    ])?;
                }
                k += 1;
            }
        }
    }
    out.finish()
}
