//! ORDER BY and LIMIT answered by the scan: rows read in index order need no sort, and a scan
//! whose rows all survive stops after the ones LIMIT keeps.
//!
//! A B-tree range scan returns its entries in key order, forward or backward (the engine's
//! [`ScanDirection`]). The index places NULL after every value (the engine's `compare_values`),
//! as PostgreSQL's default `ASC NULLS LAST`, so a forward scan is `ASC NULLS LAST` on each key
//! column and a backward scan `DESC NULLS FIRST`: the two orders PostgreSQL's
//! `build_index_pathkeys` offers for a default B-tree.
//!
//! A single-table SELECT without GROUP BY or aggregates whose rows come from an index range
//! ([`Access::Index`]) skips its sort when its ORDER BY, after dropping the items that name a
//! column the range pins with an equality (one value on every row found; PostgreSQL drops them
//! as redundant pathkeys), is a run of the index's following key columns in key order, all
//! `ASC [NULLS LAST]` (forward scan) or all `DESC [NULLS FIRST]` (backward scan):
//!
//! ```text
//!   index (w, d, o)
//!   WHERE w = $1 AND d = $2 ORDER BY o LIMIT 1             forward, stops after one row
//!   WHERE w = $1 AND d = $2 ORDER BY d, o DESC             backward (d is pinned)
//!   WHERE w = $1 AND d > 3 ORDER BY d, o                   forward
//!   WHERE w = $1 ORDER BY o                                sorted (d varies)
//!   WHERE w = $1 ORDER BY d, o DESC                        sorted (mixed directions)
//!   WHERE w = $1 ORDER BY d NULLS FIRST                    sorted (NULLs are last in the index)
//! ```
//!
//! The key column's type must order in the index as the sort orders it. Text does not qualify:
//! the server's comparison ignores trailing blanks (`char(n)`'s rule) while the index compares
//! bytes, so `'a\t'` and `'a '` would come out in another order than a sort gives them.
//!
//! LIMIT enters the scan (it stops after OFFSET + LIMIT rows) when the rows come out in the
//! ORDER BY's order (any order, without ORDER BY) and nothing after the scan drops or merges
//! rows: every WHERE conjunct is one of the range's bounds ([`Access::covers_where`]), and
//! there is no DISTINCT. The WHERE clause is still re-checked on each row found; should it
//! reject one of a scan that stopped at the limit, the range is read again without a limit,
//! so the result never depends on the early stop. (A bound rounded to the column's scale,
//! the one case known where the index and the re-check disagree, answers no conjunct, so it
//! never stops a scan early.) A sequential scan with no WHERE clause stops the same way.
//!
//! Ties on the ORDER BY columns come out in index order (key, then heap TID), one of the
//! orders SQL allows. Ordered point lookups (`IN`), merge of several ranges and a top-N sort
//! for an ORDER BY the index does not give are not done.

use settledb::ScanDirection;
use sqlparser::ast::{Expr, Value};

use crate::expr::{ident_name, Scope};
use crate::plan::{Access, Target};
use crate::query::OutCol;
use crate::types::SqlType;

/// One ORDER BY item: its expression, descending, NULLs first.
pub type OrderItem = (Expr, bool, bool);

/// How a SELECT reads its one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOrder {
    /// The direction of an index range scan.
    pub dir: ScanDirection,
    /// Whether the rows come out in the ORDER BY's order, so that no sort is needed.
    pub sorted: bool,
    /// The most rows the statement can keep (OFFSET + LIMIT) when the scan may stop there.
    pub stop_after: Option<usize>,
}

/// What the rest of the statement does with the rows a scan finds.
pub struct Shape<'q> {
    pub order: &'q [OrderItem],
    pub outs: &'q [OutCol],
    pub where_conjuncts: usize,
    pub grouped: bool,
    pub distinct: bool,
    pub limit: Option<usize>,
    pub offset: usize,
}

/// Chooses the scan direction, whether a sort is still needed and where the scan may stop.
pub fn choose(t: &Target, a: &Access, shape: &Shape<'_>) -> ScanOrder {
    let unordered = ScanOrder { dir: ScanDirection::Forward, sorted: false, stop_after: None };
    if shape.grouped {
        return unordered;
    }
    let dir = match a {
        Access::Index { .. } | Access::Nothing => index_order(t, a, shape.order, shape.outs),
        Access::Seq if shape.order.is_empty() => Some(ScanDirection::Forward),
        Access::Seq | Access::Points { .. } => None,
    };
    let Some(dir) = dir else { return unordered };
    let all_rows_kept = match a {
        Access::Seq => shape.where_conjuncts == 0,
        _ => a.covers_where(shape.where_conjuncts),
    };
    let stop_after = shape.limit.filter(|_| all_rows_kept && !shape.distinct).map(|l| l.saturating_add(shape.offset));
    ScanOrder { dir, sorted: !shape.order.is_empty(), stop_after }
}

/// The direction in which an index range of `a` returns its rows in `order`'s order, if one
/// does (forward for an empty ORDER BY).
pub fn index_order(t: &Target, a: &Access, order: &[OrderItem], outs: &[OutCol]) -> Option<ScanDirection> {
    let (index, eq_columns) = match a {
        Access::Index { index, eq_columns, .. } => (index, *eq_columns),
        // No row: any order.
        Access::Nothing => return Some(ScanDirection::Forward),
        _ => return None,
    };
    let keys: Vec<usize> =
        index.columns().iter().map(|n| t.cols.iter().position(|c| &c.name == n)).collect::<Option<_>>()?;
    let pinned = &keys[..eq_columns.min(keys.len())];
    let mut next = pinned.len();
    let mut dir = None;
    for (e, desc, nulls_first) in order {
        let c = order_column(e, t, outs)?;
        if pinned.contains(&c) {
            continue;
        }
        if keys.get(next) != Some(&c) || nulls_first != desc || !index_orders_as_sort(t.cols[c].ty) {
            return None;
        }
        next += 1;
        let d = if *desc { ScanDirection::Backward } else { ScanDirection::Forward };
        if dir.is_some_and(|x| x != d) {
            return None;
        }
        dir = Some(d);
    }
    Some(dir.unwrap_or(ScanDirection::Forward))
}

/// Whether the index orders a column of type `ty` as the server's sort does.
fn index_orders_as_sort(ty: SqlType) -> bool {
    !matches!(ty, SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_))
}

/// The table column an ORDER BY item sorts by, resolved as the sort resolves it
/// (`crate::query`'s `sort_key`): an output position, an output column's name (when the
/// output is a plain column, or the name is no column of the table), or a column.
fn order_column(e: &Expr, t: &Target, outs: &[OutCol]) -> Option<usize> {
    let scope = t.scope();
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => {
                let i: usize = n.parse().ok()?;
                column(&outs.get(i.checked_sub(1)?)?.expr, &scope)
            }
            _ => None,
        },
        Expr::Identifier(id) => {
            let n = ident_name(id);
            if let Some(p) = outs.iter().position(|o| o.name == n) {
                let resolves = scope.resolve(std::slice::from_ref(id)).is_ok();
                if !resolves || matches!(outs[p].expr, Expr::Identifier(_)) {
                    return column(&outs[p].expr, &scope);
                }
            }
            column(e, &scope)
        }
        _ => column(e, &scope),
    }
}

/// The column a plain column reference names.
fn column(e: &Expr, scope: &Scope<'_>) -> Option<usize> {
    match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
        Expr::CompoundIdentifier(p) => scope.resolve(p).ok(),
        _ => None,
    }
}
