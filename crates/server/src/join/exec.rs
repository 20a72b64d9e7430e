//! The three ways a join step finds matches (see [`crate::join`]): index nested loop, hash
//! join, nested loop. Each proposes (left row, R row) pairs, evaluates every condition of the
//! step on the combined row, and for a LEFT JOIN emits an unmatched left row with R's columns
//! NULL. RIGHT and FULL JOINs ([`StepCx::outer`]) also mark the R rows that matched and emit
//! the others with the left side NULL. Each left row and each proposed pair is an
//! interruption point.

use std::collections::HashMap;

use settledb::{KeyBound, ScanDirection};

use super::{passes, EquiKey, IndexPlan, JoinSource, RangeKey};
use crate::error::SqlError;
use crate::expr::{eval, Scope};
use crate::session::{datums, Cx};
use crate::types::Datum;

/// One join step: R's position and the conditions every pair must meet.
pub(super) struct StepCx<'a, 'e> {
    pub js: &'a JoinSource,
    pub r: usize,
    pub conds: &'a [&'e sqlparser::ast::Expr],
    pub scope: &'a Scope<'a>,
    pub left_join: bool,
}

impl StepCx<'_, '_> {
    /// `left` with R's values put in place.
    fn combine(&self, left: &[Datum], right: &[Datum]) -> Vec<Datum> {
        let mut row = left.to_vec();
        let rel = &self.js.rels[self.r];
        for (slot, d) in row[rel.first..rel.first + rel.len].iter_mut().zip(right) {
            slot.clone_from(d);
        }
        row
    }

    /// Emits the matches of one left row among `candidates`, or the row itself NULL-padded
    /// when a LEFT JOIN found none.
    fn emit<'r>(
        &self,
        cx: &mut Cx<'_, '_>,
        l: &[Datum],
        candidates: impl Iterator<Item = &'r [Datum]>,
        out: &mut Vec<Vec<Datum>>,
    ) -> Result<(), SqlError> {
        let mut matched = false;
        for rr in candidates {
            cx.interrupts.tick()?;
            let row = self.combine(l, rr);
            if passes(cx, self.conds, self.scope, &row)? {
                matched = true;
                out.push(row);
            }
        }
        if self.left_join && !matched {
            out.push(l.to_vec());
        }
        Ok(())
    }

    /// A RIGHT or FULL JOIN step: the matches of each left row (by hash when `keys` equate
    /// the sides, else among all of R), the left rows that matched nothing when the step
    /// keeps them (FULL), then R's rows no left row matched, the left side's columns NULL.
    pub fn outer(
        &self,
        cx: &mut Cx<'_, '_>,
        left: Vec<Vec<Datum>>,
        inner: Vec<Vec<Datum>>,
        keys: &[EquiKey<'_>],
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let blank = vec![Datum::Null; self.js.cols.len()];
        let table = if keys.is_empty() { HashMap::new() } else { self.hash_table(cx, &inner, keys)? };
        let all: Vec<usize> = (0..inner.len()).collect();
        let mut matched = vec![false; inner.len()];
        let mut out = Vec::new();
        for l in &left {
            cx.interrupts.tick()?;
            let candidates: &[usize] = if keys.is_empty() {
                &all
            } else {
                match self.key(cx, keys.iter().map(|k| k.outer), l)? {
                    Some(k) => table.get(&k).map(Vec::as_slice).unwrap_or(&[]),
                    None => &[],
                }
            };
            let mut any = false;
            for &i in candidates {
                cx.interrupts.tick()?;
                let row = self.combine(l, &inner[i]);
                if passes(cx, self.conds, self.scope, &row)? {
                    any = true;
                    matched[i] = true;
                    out.push(row);
                }
            }
            if self.left_join && !any {
                out.push(l.clone());
            }
        }
        for (i, rr) in inner.iter().enumerate() {
            if !matched[i] {
                out.push(self.combine(&blank, rr));
            }
        }
        Ok(out)
    }

    pub fn nested_loop(
        &self,
        cx: &mut Cx<'_, '_>,
        left: Vec<Vec<Datum>>,
        inner: Vec<Vec<Datum>>,
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let mut out = Vec::new();
        for l in &left {
            cx.interrupts.tick()?;
            self.emit(cx, l, inner.iter().map(Vec::as_slice), &mut out)?;
        }
        Ok(out)
    }

    /// Builds a hash table of R on its side of the keys, then probes it with each left row.
    pub fn hash(
        &self,
        cx: &mut Cx<'_, '_>,
        left: Vec<Vec<Datum>>,
        inner: Vec<Vec<Datum>>,
        keys: &[EquiKey<'_>],
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let table = self.hash_table(cx, &inner, keys)?;
        let mut out = Vec::new();
        for l in &left {
            cx.interrupts.tick()?;
            let found = match self.key(cx, keys.iter().map(|k| k.outer), l)? {
                Some(k) => table.get(&k).map(Vec::as_slice).unwrap_or(&[]),
                None => &[],
            };
            self.emit(cx, l, found.iter().map(|&i| inner[i].as_slice()), &mut out)?;
        }
        Ok(out)
    }

    /// R's rows by their side of the keys (positions in `inner`; a row with a NULL key part
    /// matches nothing and is left out).
    fn hash_table(
        &self,
        cx: &mut Cx<'_, '_>,
        inner: &[Vec<Datum>],
        keys: &[EquiKey<'_>],
    ) -> Result<HashMap<Vec<HashKey>, Vec<usize>>, SqlError> {
        let blank = vec![Datum::Null; self.js.cols.len()];
        let mut table: HashMap<Vec<HashKey>, Vec<usize>> = HashMap::new();
        for (i, rr) in inner.iter().enumerate() {
            cx.interrupts.tick()?;
            let row = self.combine(&blank, rr);
            if let Some(k) = self.key(cx, keys.iter().map(|k| k.inner), &row)? {
                table.entry(k).or_default().push(i);
            }
        }
        Ok(table)
    }

    /// The hash key of `row` under `exprs`; `None` when a part is NULL (it matches nothing).
    fn key<'x>(
        &self,
        cx: &mut Cx<'_, '_>,
        exprs: impl Iterator<Item = &'x sqlparser::ast::Expr>,
        row: &[Datum],
    ) -> Result<Option<Vec<HashKey>>, SqlError> {
        let mut k = Vec::new();
        for e in exprs {
            match HashKey::of(eval(e, self.scope, row, cx, None)?) {
                Some(h) => k.push(h),
                None => return Ok(None),
            }
        }
        Ok(Some(k))
    }

    /// One index range on R per left row, bounded by the plan's prefix of equated columns.
    pub fn index_nested_loop(
        &self,
        cx: &mut Cx<'_, '_>,
        left: Vec<Vec<Datum>>,
        plan: &IndexPlan,
        keys: &[EquiKey<'_>],
        ranges: &[RangeKey<'_>],
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let super::Leaf::Table(t) = &self.js.rels[self.r].leaf else {
            return Err(SqlError::new("XX000", "index nested loop over a relation that is not a table"));
        };
        let mut out = Vec::new();
        for l in &left {
            cx.interrupts.tick()?;
            let mut prefix = Vec::with_capacity(plan.keys.len());
            for &(k, pos) in &plan.keys {
                let d = eval(keys[k].outer, self.scope, l, cx, None)?;
                if d.is_null() {
                    break;
                }
                // A value the column cannot hold (an int8 beyond int4, text too long for a
                // varchar) equals nothing in it.
                match d.to_stored(t.cols[pos].ty, &t.cols[pos].name) {
                    Ok(v) => prefix.push(v),
                    Err(_) => break,
                }
            }
            let found: Vec<Vec<Datum>> = if prefix.len() < plan.keys.len() {
                Vec::new()
            } else {
                let (mut lo, mut hi) = (KeyBound::Included(prefix.clone()), KeyBound::Included(prefix.clone()));
                // The first lower and the first upper bound narrow the scan; every bound is
                // rechecked on each pair with the other conditions. NULL matches nothing.
                let (mut have_lo, mut have_hi, mut empty) = (false, false, false);
                for &(k, pos) in &plan.ranges {
                    let rk = &ranges[k];
                    if (rk.lower && have_lo) || (!rk.lower && have_hi) {
                        continue;
                    }
                    let d = eval(rk.outer, self.scope, l, cx, None)?;
                    if d.is_null() {
                        empty = true;
                        break;
                    }
                    // A bound the column cannot hold is left to the recheck.
                    let Ok(v) = d.to_stored(t.cols[pos].ty, &t.cols[pos].name) else { continue };
                    let mut key = prefix.clone();
                    key.push(v);
                    let b = if rk.inclusive { KeyBound::Included(key) } else { KeyBound::Excluded(key) };
                    if rk.lower {
                        (lo, have_lo) = (b, true);
                    } else {
                        (hi, have_hi) = (b, true);
                    }
                }
                if empty {
                    Vec::new()
                } else {
                    let rows = cx.tx.range(&plan.index, lo, hi, ScanDirection::Forward, None)?;
                    rows.into_iter().map(|(_, v)| datums(&v, &t.cols)).collect()
                }
            };
            self.emit(cx, l, found.iter().map(Vec::as_slice), &mut out)?;
        }
        Ok(out)
    }
}

/// A join key normalized so that values SQL calls equal hash alike: integers and numerics as
/// exact decimals without trailing zeros, text without trailing blanks (as `char(n)`
/// compares), dates as the timestamp of their midnight.
#[derive(PartialEq, Eq, Hash)]
pub(super) enum HashKey {
    Exact(i128, u8),
    Float(u64),
    Text(String),
    Bool(bool),
    Time(i64),
    Bytes(Vec<u8>),
}

impl HashKey {
    fn of(d: Datum) -> Option<HashKey> {
        Some(match d {
            Datum::Null => return None,
            Datum::Int(x) => HashKey::Exact(i128::from(x), 0),
            Datum::Num(n) => {
                let (mut m, mut s) = (n.mantissa, n.scale);
                while s > 0 && m % 10 == 0 {
                    m /= 10;
                    s -= 1;
                }
                HashKey::Exact(m, s)
            }
            Datum::Float(f) => HashKey::Float(if f == 0.0 { 0 } else { f.to_bits() }),
            Datum::Text(s) => HashKey::Text(s.trim_end_matches(' ').to_string()),
            Datum::Bool(b) => HashKey::Bool(b),
            Datum::Timestamp(t) => HashKey::Time(t),
            Datum::Date(d) => HashKey::Time(i64::from(d) * 86_400_000_000),
            // Only meets its own kind (join::Kind::Instant, Kind::Span).
            Datum::TimestampTz(t) => HashKey::Time(t),
            Datum::Interval(i) => HashKey::Exact(i.span(), 0),
            Datum::Bytea(b) => HashKey::Bytes(b),
        })
    }
}
