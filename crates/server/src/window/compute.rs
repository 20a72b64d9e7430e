//! Computing window calls over the query's rows: sort into partitions, find peer groups,
//! evaluate each function per row (see the parent module's diagram).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Range;

use sqlparser::ast::Expr;

use super::frame::Peers;
use super::{Call, Func, Plan};
use crate::aggregate::State;
use crate::error::SqlError;
use crate::expr::{eval, infer_type, truth, Scope};
use crate::query::compare_keys;
use crate::session::Cx;
use crate::types::{Datum, SqlType};

/// The rows window functions run over: each its representative input row and the values
/// (aggregates, then window calls) the evaluator looks up by their text.
pub type Rows = Vec<(Vec<Datum>, HashMap<String, Datum>)>;

impl Plan {
    /// Adds every call's value to each row's map, and returns the order of the rows in the
    /// last call's window (partition, then ORDER BY), for a query without ORDER BY to use.
    pub fn compute(&self, cx: &mut Cx<'_, '_>, scope: &Scope<'_>, rows: &mut Rows) -> Result<Vec<usize>, SqlError> {
        let mut last = (0..rows.len()).collect();
        for c in &self.calls {
            let (order, values) = one_call(c, cx, scope, rows)?;
            for (r, v) in rows.iter_mut().zip(values) {
                r.1.insert(c.key.clone(), v);
            }
            last = order;
        }
        Ok(last)
    }
}

/// Per-row inputs of one call: its sort keys, arguments and FILTER.
struct Inputs {
    partition: Vec<Vec<Datum>>,
    order: Vec<Vec<Datum>>,
    args: Vec<Vec<Datum>>,
    kept: Vec<bool>,
}

fn evaluate(
    exprs: &[&Expr],
    cx: &mut Cx<'_, '_>,
    scope: &Scope<'_>,
    row: &(Vec<Datum>, HashMap<String, Datum>),
) -> Result<Vec<Datum>, SqlError> {
    exprs.iter().map(|e| eval(e, scope, &row.0, cx, Some(&row.1))).collect()
}

fn inputs(c: &Call, cx: &mut Cx<'_, '_>, scope: &Scope<'_>, rows: &Rows) -> Result<Inputs, SqlError> {
    let part: Vec<&Expr> = c.partition.iter().collect();
    let ord: Vec<&Expr> = c.order.iter().map(|(e, _, _)| e).collect();
    let args: Vec<&Expr> = c.args.iter().collect();
    let mut inp = Inputs { partition: Vec::new(), order: Vec::new(), args: Vec::new(), kept: Vec::new() };
    for r in rows {
        cx.interrupts.tick()?;
        inp.partition.push(evaluate(&part, cx, scope, r)?);
        inp.order.push(evaluate(&ord, cx, scope, r)?);
        inp.args.push(evaluate(&args, cx, scope, r)?);
        let kept = match &c.filter {
            Some(w) => truth(&eval(w, scope, &r.0, cx, Some(&r.1))?)? == Some(true),
            None => true,
        };
        inp.kept.push(kept);
    }
    Ok(inp)
}

/// One call over all rows: (the rows in window order, each row's value).
fn one_call(
    c: &Call,
    cx: &mut Cx<'_, '_>,
    scope: &Scope<'_>,
    rows: &Rows,
) -> Result<(Vec<usize>, Vec<Datum>), SqlError> {
    let inp = inputs(c, cx, scope, rows)?;
    let pflags = vec![(false, false); c.partition.len()];
    let oflags: Vec<(bool, bool)> = c.order.iter().map(|(_, d, n)| (*d, *n)).collect();
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    cx.interrupts.check()?;
    idx.sort_by(|&a, &b| {
        compare_keys(&inp.partition[a], &inp.partition[b], &pflags)
            .then_with(|| compare_keys(&inp.order[a], &inp.order[b], &oflags))
    });
    let default_type = c.args.first().map(|a| infer_type(a, scope, &[]));
    let mut out = vec![Datum::Null; rows.len()];
    let mut s = 0;
    while s < idx.len() {
        let mut e = s + 1;
        while e < idx.len() && compare_keys(&inp.partition[idx[s]], &inp.partition[idx[e]], &pflags) == Ordering::Equal
        {
            e += 1;
        }
        let part = Partition { rows: &idx[s..e], starts: peer_starts(&idx[s..e], &inp.order, &oflags) };
        partition(c, cx, &inp, &part, default_type, &mut out)?;
        s = e;
    }
    Ok((idx, out))
}

/// One partition: its row numbers in window order and where each peer group starts.
struct Partition<'a> {
    rows: &'a [usize],
    starts: Vec<usize>,
}

fn peer_starts(rows: &[usize], order: &[Vec<Datum>], flags: &[(bool, bool)]) -> Vec<usize> {
    let mut starts = vec![0];
    for j in 1..rows.len() {
        if compare_keys(&order[rows[j - 1]], &order[rows[j]], flags) != Ordering::Equal {
            starts.push(j);
        }
    }
    starts
}

/// Each row's value of call `c` in one partition, written to `out` by row number.
fn partition(
    c: &Call,
    cx: &mut Cx<'_, '_>,
    inp: &Inputs,
    p: &Partition<'_>,
    value_type: Option<SqlType>,
    out: &mut [Datum],
) -> Result<(), SqlError> {
    let m = p.rows.len();
    let arg = |k: usize, j: usize| inp.args[p.rows[j]].get(k).cloned().unwrap_or(Datum::Null);
    let mut agg = Folding::default();
    let mut group = 0;
    for j in 0..m {
        cx.interrupts.tick()?;
        while group + 1 < p.starts.len() && p.starts[group + 1] <= j {
            group += 1;
        }
        let peers = Peers { starts: &p.starts, group };
        let group_end = p.starts.get(group + 1).copied().unwrap_or(m);
        let rank = p.starts[group] + 1;
        let v = match &c.func {
            Func::RowNumber => Datum::Int(j as i64 + 1),
            Func::Rank => Datum::Int(rank as i64),
            Func::DenseRank => Datum::Int(group as i64 + 1),
            Func::PercentRank if m == 1 => Datum::Float(0.0),
            Func::PercentRank => Datum::Float((rank - 1) as f64 / (m - 1) as f64),
            Func::CumeDist => Datum::Float(group_end as f64 / m as f64),
            Func::Ntile => ntile(&arg(0, 0), j, m)?,
            Func::Lag | Func::Lead => {
                let offset = if inp.args[p.rows[j]].len() > 1 { arg(1, j) } else { Datum::Int(1) };
                let Some(off) = integer(&offset)? else {
                    out[p.rows[j]] = Datum::Null;
                    continue;
                };
                let at = if c.func == Func::Lag { (j as i64).checked_sub(off) } else { (j as i64).checked_add(off) };
                match at.and_then(|t| usize::try_from(t).ok()).filter(|&t| t < m) {
                    Some(t) => arg(0, t),
                    None => lag_default(arg(2, j), value_type)?,
                }
            }
            Func::FirstValue | Func::LastValue | Func::NthValue => {
                let f = c.frame.rows(j, m, &peers);
                let at = match c.func {
                    Func::FirstValue => Some(f.start),
                    Func::LastValue => f.end.checked_sub(1),
                    _ => match integer(&arg(1, j))? {
                        None => {
                            out[p.rows[j]] = Datum::Null;
                            continue;
                        }
                        Some(n) if n <= 0 => {
                            return Err(SqlError::new("22016", "argument of nth_value must be greater than zero"))
                        }
                        Some(n) => usize::try_from(n - 1).ok().and_then(|k| f.start.checked_add(k)),
                    },
                };
                match at.filter(|&t| f.contains(&t)) {
                    Some(t) => arg(0, t),
                    None => Datum::Null,
                }
            }
            Func::Agg { name, star } => {
                let f = c.frame.rows(j, m, &peers);
                agg.frame(cx, name, *star, f, p, inp)?
            }
        };
        out[p.rows[j]] = v;
    }
    Ok(())
}

/// An integer argument (offsets, counts): `None` for NULL.
fn integer(d: &Datum) -> Result<Option<i64>, SqlError> {
    match crate::expr::cast(d.clone(), SqlType::Int8)? {
        Datum::Null => Ok(None),
        Datum::Int(n) => Ok(Some(n)),
        other => {
            Err(SqlError::new("42804", format!("argument must be an integer, not {}", other.natural_type().display())))
        }
    }
}

/// `lag`/`lead`'s default, as the value argument's type (numeric keeps its own scale, as an
/// unconstrained numeric does in PostgreSQL).
fn lag_default(d: Datum, ty: Option<SqlType>) -> Result<Datum, SqlError> {
    match ty {
        Some(SqlType::Numeric { .. } | SqlType::Text) | None => Ok(d),
        Some(t) => crate::expr::cast(d, t),
    }
}

/// `ntile(buckets)` for the row at `j` of `m`: the first `m % buckets` buckets hold one row
/// more than the rest (PostgreSQL's `window_ntile`). The count is the partition's first
/// row's argument.
fn ntile(buckets: &Datum, j: usize, m: usize) -> Result<Datum, SqlError> {
    let Some(k) = integer(buckets)? else { return Ok(Datum::Null) };
    if k <= 0 {
        return Err(SqlError::new("22014", "argument of ntile must be greater than zero"));
    }
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    Ok(Datum::Int(bucket(j, m, k) as i64))
}

fn bucket(j: usize, m: usize, k: usize) -> usize {
    let per = m / k;
    let extra = m % k;
    let big = per + 1;
    if j < extra * big {
        j / big + 1
    } else {
        extra + (j - extra * big) / per.max(1) + 1
    }
}

/// A window aggregate's state as the frames of a partition's rows go by: extended while the
/// frame keeps its start and its end advances, rebuilt otherwise; the last result reused
/// while the frame stays the same (peers under the default frame).
#[derive(Default)]
struct Folding {
    state: Option<(State, Range<usize>)>,
    last: Option<(Range<usize>, Datum)>,
}

impl Folding {
    fn frame(
        &mut self,
        cx: &mut Cx<'_, '_>,
        name: &str,
        star: bool,
        f: Range<usize>,
        p: &Partition<'_>,
        inp: &Inputs,
    ) -> Result<Datum, SqlError> {
        if let Some((r, v)) = &self.last {
            if *r == f {
                return Ok(v.clone());
            }
        }
        let (state, covered) = match self.state.take() {
            Some((s, covered)) if covered.start == f.start && covered.end <= f.end => (s, covered),
            _ => (State::new(name, star).ok_or_else(|| SqlError::unsupported(name))?, f.start..f.start),
        };
        let mut state = state;
        for t in covered.end..f.end {
            cx.interrupts.tick()?;
            let row = p.rows[t];
            if !inp.kept[row] {
                continue;
            }
            state.add_row();
            if let Some(v) = inp.args[row].first() {
                state.add(v);
            }
        }
        let v = state.result()?;
        self.state = Some((state, f.clone()));
        self.last = Some((f, v.clone()));
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn ntile_gives_the_first_buckets_the_extra_rows() {
        let all = |m, k| (0..m).map(|j| bucket(j, m, k)).collect::<Vec<_>>();
        assert_eq!(all(6, 4), vec![1, 1, 2, 2, 3, 4]);
        assert_eq!(all(5, 5), vec![1, 2, 3, 4, 5]);
        assert_eq!(all(3, 5), vec![1, 2, 3]);
        assert_eq!(all(7, 2), vec![1, 1, 1, 1, 2, 2, 2]);
        assert_eq!(all(4, 1), vec![1, 1, 1, 1]);
    }
}
