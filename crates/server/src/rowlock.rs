//! `SELECT ... FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE | FOR KEY SHARE [OF t [, ...]]
//! [NOWAIT | SKIP LOCKED]`: row-locking SELECT over one table (the engine's lock:
//! [`settledb::Transaction::lock_row`], `settledb::heap::lock`).
//!
//! The rows are found and filtered by WHERE as any SELECT's, projected and sorted, and then
//! locked one by one in output order (PostgreSQL's LockRows sits below its Limit): a row
//! SKIP LOCKED gives up, or one that is gone, does not count toward OFFSET and LIMIT, and no row
//! past OFFSET + LIMIT is locked. When READ COMMITTED locked a newer version of a row a
//! concurrent transaction updated (after waiting for it), WHERE is evaluated again on that
//! version, which is then the one returned, or the row is left out (PostgreSQL's EvalPlanQual;
//! the lock on it stays, as in PostgreSQL). REPEATABLE READ fails such a row with 40001. The
//! re-check runs on every locked row, not only the followed ones: a TID from the scan may name
//! a version since pruned and reused, which the re-check then refuses like any non-match.
//!
//! Locks hold until the transaction ends (the statement's own, in autocommit). Waits obey
//! `lock_timeout`, cancel and `statement_timeout` (the engine's lock waits, through the
//! session's interrupt). NOWAIT fails with 55P03 `could not obtain lock on row in relation
//! "t"`.
//!
//! # What the engine's lock means here
//!
//! Every row lock is exclusive (settledb has no MultiXacts): two FOR SHARE lockers of one row
//! wait for each other, and an UPDATE waits for a FOR KEY SHARE locker. sqlparser 0.63 knows
//! only `FOR UPDATE` and `FOR SHARE` with one `OF` name: [`normalize`] rewrites the statement's
//! text first, `FOR NO KEY UPDATE` to `FOR UPDATE`, `FOR KEY SHARE` to `FOR SHARE` (the same
//! lock either way; error messages then name the stronger spelling), and `OF a, b` to one
//! clause per name.
//!
//! # Refused
//!
//! As PostgreSQL refuses them (0A000, its messages): with UNION/INTERSECT/EXCEPT, DISTINCT,
//! GROUP BY, HAVING and aggregate functions. Of our own making (0A000): a FROM with joins,
//! subqueries or functions, a system view, a catalog table. An OF name not in FROM is 42P01.

use std::collections::HashMap;

use settledb::{LockResult, RowLockMode, RowLockWait, ScanDirection};
use sqlparser::ast::{Expr, LockClause, LockType, NonBlock, Query, Select};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::SqlError;
use crate::expr::{eval, truth};
use crate::plan::{access, Target};
use crate::query::{compare_keys, sort_key, OutCol};
use crate::session::{datums, Cx};
use crate::types::Datum;

/// `FOR UPDATE` or `FOR SHARE`, as PostgreSQL's messages spell the clause.
fn clause_name(l: &LockClause) -> &'static str {
    match l.lock_type {
        LockType::Update => "FOR UPDATE",
        LockType::Share => "FOR SHARE",
    }
}

/// The refusals PostgreSQL's `CheckSelectLocking` makes, in its order, for a query whose body
/// is `sel` (`None`: a set operation). `aggregates`: the select list, HAVING or ORDER BY
/// calls one; `windows`: it calls a window function.
pub fn check(q: &Query, sel: Option<&Select>, aggregates: bool, windows: bool) -> Result<(), SqlError> {
    let Some(first) = q.locks.first() else { return Ok(()) };
    let what = clause_name(first);
    let refuse = |with: &str| Err(SqlError::new("0A000", format!("{what} is not allowed with {with}")));
    let Some(sel) = sel else { return refuse("UNION/INTERSECT/EXCEPT") };
    if sel.distinct.is_some() {
        return refuse("DISTINCT clause");
    }
    let grouped = match &sel.group_by {
        sqlparser::ast::GroupByExpr::Expressions(v, _) => !v.is_empty(),
        sqlparser::ast::GroupByExpr::All(_) => true,
    };
    if grouped {
        return refuse("GROUP BY clause");
    }
    if sel.having.is_some() {
        return refuse("HAVING clause");
    }
    if aggregates {
        return refuse("aggregate functions");
    }
    if windows {
        return refuse("window functions");
    }
    Ok(())
}

/// The mode and wait policy the clauses ask for `t` (the strongest mode and the strictest
/// policy among the clauses that name it or name nothing, as PostgreSQL combines them), or
/// `None` when no clause applies to it. An OF name that is not `t` is 42P01.
fn wanted(locks: &[LockClause], t: &Target) -> Result<Option<(RowLockMode, RowLockWait)>, SqlError> {
    let visible = t.alias.as_deref().unwrap_or(&t.name);
    let mut out: Option<(RowLockMode, RowLockWait)> = None;
    for l in locks {
        if let Some(of) = &l.of {
            let n = crate::ddl::object_name(of);
            if n != visible {
                return Err(SqlError::new(
                    "42P01",
                    format!("relation \"{n}\" in {} clause not found in FROM clause", clause_name(l)),
                ));
            }
        }
        let mode = match l.lock_type {
            LockType::Update => RowLockMode::Update,
            LockType::Share => RowLockMode::Share,
        };
        let wait = match l.nonblock {
            None => RowLockWait::Block,
            Some(NonBlock::SkipLocked) => RowLockWait::SkipLocked,
            Some(NonBlock::Nowait) => RowLockWait::NoWait,
        };
        out = Some(match out {
            None => (mode, wait),
            Some((m, w)) => (m.max(mode), w.max(wait)),
        });
    }
    Ok(out)
}

/// What a row-locking SELECT of one table needs from the query ([`crate::query`]).
pub struct Plan<'q> {
    pub sel: &'q Select,
    pub outs: &'q [OutCol],
    pub order: &'q [crate::ordered::OrderItem],
    pub limit: Option<usize>,
    pub offset: usize,
}

/// The rows of a row-locking SELECT over `source` (see the module doc), after OFFSET and LIMIT.
pub fn rows(
    cx: &mut Cx<'_, '_>,
    q: &Query,
    source: &crate::query::Source,
    p: &Plan<'_>,
) -> Result<Vec<Vec<Datum>>, SqlError> {
    let t = match source {
        crate::query::Source::Table(t) if !t.is_catalog() => t,
        crate::query::Source::Table(_) => return Err(SqlError::unsupported("FOR UPDATE/SHARE on a system catalog")),
        crate::query::Source::None => return project_unlocked(cx, p),
        crate::query::Source::View { .. } => return Err(SqlError::unsupported("FOR UPDATE/SHARE on a system view")),
        crate::query::Source::Join(_) => {
            return Err(SqlError::unsupported("FOR UPDATE/SHARE with joins, subqueries or functions in FROM"))
        }
    };
    let Some((mode, wait)) = wanted(&q.locks, t)? else { return project_unlocked(cx, p) };
    let scope = t.scope();
    let w = p.sel.selection.as_ref();
    let a = access(cx, t, w)?;
    let found = crate::plan::fetch_in(cx, t, &a, ScanDirection::Forward, None)?;
    // (TID, output row, sort keys) of the rows WHERE keeps, in output order.
    let mut cands = Vec::with_capacity(found.len());
    for (tid, vals) in found {
        cx.interrupts.tick()?;
        let row = datums(&vals, &t.cols);
        if let Some((out, keys)) = output(cx, w, &scope, p, &row)? {
            cands.push((tid, out, keys));
        }
    }
    if !p.order.is_empty() {
        let flags: Vec<(bool, bool)> = p.order.iter().map(|(_, desc, nulls_first)| (*desc, *nulls_first)).collect();
        cands.sort_by(|a, b| compare_keys(&a.2, &b.2, &flags));
    }
    let wanted_rows = p.limit.map_or(usize::MAX, |l| l.saturating_add(p.offset));
    let mut locked = Vec::new();
    for (tid, _, _) in cands {
        if locked.len() >= wanted_rows {
            break;
        }
        cx.interrupts.tick()?;
        match cx.tx.lock_row(&t.table, tid, mode, wait)? {
            LockResult::Locked { values, .. } => {
                // Re-checked on the version locked (the newest, when READ COMMITTED followed an
                // update), which is also the one returned.
                let row = datums(&values, &t.cols);
                if let Some((out, _)) = output(cx, w, &scope, p, &row)? {
                    locked.push(out);
                }
            }
            LockResult::Skipped | LockResult::Gone => {}
        }
    }
    Ok(locked.into_iter().skip(p.offset).take(p.limit.unwrap_or(usize::MAX)).collect())
}

/// A row's output columns and its sort keys.
type Produced = (Vec<Datum>, Vec<Datum>);

/// A row's output columns and sort keys, or `None` when WHERE does not keep it.
fn output(
    cx: &mut Cx<'_, '_>,
    w: Option<&Expr>,
    scope: &crate::expr::Scope<'_>,
    p: &Plan<'_>,
    row: &[Datum],
) -> Result<Option<Produced>, SqlError> {
    if let Some(w) = w {
        if truth(&eval(w, scope, row, cx, None)?)? != Some(true) {
            return Ok(None);
        }
    }
    let mut out = Vec::with_capacity(p.outs.len());
    for o in p.outs {
        out.push(eval(&o.expr, scope, row, cx, None)?);
    }
    let aggs: Option<&HashMap<String, Datum>> = None;
    let mut keys = Vec::with_capacity(p.order.len());
    for (e, _, _) in p.order {
        keys.push(sort_key(e, p.outs, &out, scope, row, cx, aggs)?);
    }
    Ok(Some((out, keys)))
}

/// A SELECT without a table to lock (`SELECT 1 FOR UPDATE`): its one row, if WHERE keeps it.
fn project_unlocked(cx: &mut Cx<'_, '_>, p: &Plan<'_>) -> Result<Vec<Vec<Datum>>, SqlError> {
    let scope = crate::expr::Scope::empty();
    let rows: Vec<Vec<Datum>> =
        output(cx, p.sel.selection.as_ref(), &scope, p, &[])?.map(|(o, _)| o).into_iter().collect();
    Ok(rows.into_iter().skip(p.offset).take(p.limit.unwrap_or(usize::MAX)).collect())
}

/// Rewrites the locking clauses sqlparser 0.63 does not parse into ones it does (see the
/// module doc); any other text is returned unchanged (`None`).
pub fn normalize(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("for") || !(lower.contains("key") || lower.contains(" of ")) {
        return None;
    }
    let toks = Tokenizer::new(&sqlparser::dialect::PostgreSqlDialect {}, sql).tokenize().ok()?;
    // Positions of the significant tokens.
    let sig: Vec<usize> = (0..toks.len()).filter(|&i| !matches!(toks[i], Token::Whitespace(_))).collect();
    let kw = |j: usize| -> String {
        match sig.get(j).map(|&i| &toks[i]) {
            Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
            _ => String::new(),
        }
    };
    let mut out = String::with_capacity(sql.len());
    let mut changed = false;
    let mut copied = 0; // tokens before this index are in `out`
    let mut j = 0;
    while j < sig.len() {
        if kw(j) != "FOR" {
            j += 1;
            continue;
        }
        // FOR [NO] KEY (UPDATE|SHARE) or FOR (UPDATE|SHARE)
        let (mode, mut k) = match (kw(j + 1).as_str(), kw(j + 2).as_str(), kw(j + 3).as_str()) {
            ("NO", "KEY", "UPDATE") => ("UPDATE", j + 4),
            ("KEY", "SHARE", _) => ("SHARE", j + 3),
            ("UPDATE", _, _) => ("UPDATE", j + 2),
            ("SHARE", _, _) => ("SHARE", j + 2),
            _ => {
                j += 1;
                continue;
            }
        };
        // OF name [, name ...]: each name is words joined by periods.
        let tok = |k: usize| sig.get(k).map(|&i| &toks[i]);
        let mut names: Vec<String> = Vec::new();
        if kw(k) == "OF" {
            k += 1;
            while let Some(t @ Token::Word(_)) = tok(k) {
                let mut name = t.to_string();
                k += 1;
                while let (Some(Token::Period), Some(w @ Token::Word(_))) = (tok(k), tok(k + 1)) {
                    name.push('.');
                    name.push_str(&w.to_string());
                    k += 2;
                }
                names.push(name);
                if !matches!(tok(k), Some(Token::Comma)) {
                    break;
                }
                k += 1;
            }
        }
        let nonblock = match (kw(k).as_str(), kw(k + 1).as_str()) {
            ("NOWAIT", _) => {
                k += 1;
                " NOWAIT"
            }
            ("SKIP", "LOCKED") => {
                k += 2;
                " SKIP LOCKED"
            }
            _ => "",
        };
        if !matches!(kw(j + 1).as_str(), "NO" | "KEY") && names.len() <= 1 {
            j = k;
            continue;
        }
        for t in &toks[copied..sig[j]] {
            out.push_str(&t.to_string());
        }
        let clauses: Vec<String> = if names.is_empty() {
            vec![format!("FOR {mode}{nonblock}")]
        } else {
            names.iter().map(|n| format!("FOR {mode} OF {n}{nonblock}")).collect()
        };
        out.push_str(&clauses.join(" "));
        copied = sig[k - 1] + 1; // the whitespace after the clause stays
        changed = true;
        j = k;
    }
    if !changed {
        return None;
    }
    for t in &toks[copied..] {
        out.push_str(&t.to_string());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normalize_rewrites_only_what_sqlparser_lacks() {
        assert_eq!(normalize("select * from t for update"), None);
        assert_eq!(normalize("select * from t for update of t nowait"), None);
        assert_eq!(normalize("select * from t for no key update").as_deref(), Some("select * from t FOR UPDATE"));
        assert_eq!(
            normalize("select * from t for key share skip locked limit 1").as_deref(),
            Some("select * from t FOR SHARE SKIP LOCKED limit 1")
        );
        assert_eq!(
            normalize("select * from a, b for update of a, public.b nowait").as_deref(),
            Some("select * from a, b FOR UPDATE OF a NOWAIT FOR UPDATE OF public.b NOWAIT")
        );
        assert_eq!(normalize("select substring('key' for 2) from t"), None);
        assert_eq!(normalize("select 'for key share'"), None);
    }
}
