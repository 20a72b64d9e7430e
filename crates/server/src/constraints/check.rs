//! CHECK constraints: parsing, the columns an expression names, evaluation on a new row
//! (PostgreSQL's `ExecConstraints`, after NOT NULL), and the text `pg_get_constraintdef`
//! prints.
//!
//! A row passes when the expression is true *or NULL* (SQL's rule for CHECK); false is
//! 23514 `new row for relation "t" violates check constraint "c"` with the DETAIL
//! `Failing row contains (1, null, x).`, every column in its text output. Constraints are
//! tried in name order, as PostgreSQL does, so the first failing name is the one reported.
//!
//! Subqueries are refused when the constraint is defined (0A000, as PostgreSQL), so
//! evaluation needs no session: only constants and the row.

use sqlparser::ast::{BinaryOperator, Expr, UnaryOperator, Value as SqlValue};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use super::TableRules;
use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, truth, Params, Scope};
use crate::types::{Datum, SqlType};

/// Parses a CHECK expression's text.
pub fn parse(text: &str) -> Result<Expr, SqlError> {
    sqlparser::parser::Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::syntax(format!("CHECK expression \"{text}\" does not parse: {e}")))
}

/// The identifier words of `text` (case-folded unless quoted), with their token indexes.
fn words(tokens: &[Token]) -> impl Iterator<Item = (usize, String)> + '_ {
    tokens.iter().enumerate().filter_map(|(i, t)| match t {
        Token::Word(w) if w.quote_style.is_some() => Some((i, w.value.clone())),
        Token::Word(w) => Some((i, w.value.to_lowercase())),
        _ => None,
    })
}

fn tokenize(text: &str) -> Result<Vec<Token>, SqlError> {
    Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize()
        .map_err(|e| SqlError::syntax(format!("CHECK expression \"{text}\" does not parse: {e}")))
}

/// The columns of `cols` that `text` names, by position (PostgreSQL's `conkey` for a CHECK).
pub fn columns_named(text: &str, cols: &[ColumnDef]) -> Result<Vec<(usize, String)>, SqlError> {
    let tokens = tokenize(text)?;
    let mut out: Vec<(usize, String)> =
        words(&tokens).filter_map(|(_, w)| cols.iter().position(|c| c.name == w).map(|p| (p, w))).collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The text rewritten for columns renamed since it was written (`columns` records each
/// named column's position and name then; `names` are the table's names now), or `None`
/// when nothing changed. Words naming an old name not followed by `(` (a function) are
/// replaced.
pub fn renamed(text: &str, columns: &[(usize, String)], names: &[String]) -> Option<(String, Vec<(usize, String)>)> {
    let renames: Vec<(&str, &str)> = columns
        .iter()
        .filter_map(|(p, old)| names.get(*p).filter(|n| *n != old).map(|n| (old.as_str(), n.as_str())))
        .collect();
    if renames.is_empty() {
        return None;
    }
    let mut tokens = tokenize(text).ok()?;
    let hits: Vec<(usize, String)> = words(&tokens).collect();
    for (i, w) in hits {
        let Some((_, new)) = renames.iter().find(|(old, _)| *old == w) else { continue };
        let call = tokens[i + 1..].iter().find(|t| !matches!(t, Token::Whitespace(_))) == Some(&Token::LParen);
        if call {
            continue;
        }
        let plain = new.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !new.starts_with(|c: char| c.is_ascii_digit());
        let quote_style = if plain { None } else { Some('"') };
        tokens[i] = Token::Word(Word {
            value: new.replace('"', "\"\""),
            quote_style,
            keyword: sqlparser::keywords::Keyword::NoKeyword,
        });
    }
    let text: String = tokens.iter().map(ToString::to_string).collect();
    let columns = columns.iter().map(|(p, old)| (*p, names.get(*p).cloned().unwrap_or_else(|| old.clone()))).collect();
    Some((text, columns))
}

/// Refuses what a CHECK expression may not hold (subqueries, as PostgreSQL's 0A000).
pub fn refuse_subqueries(e: &Expr) -> Result<(), SqlError> {
    let mut found = Vec::new();
    crate::query::subqueries(e, &mut found);
    if found.is_empty() {
        Ok(())
    } else {
        Err(SqlError::unsupported("a subquery in a check constraint")
            .with_detail("cannot use subquery in check constraint"))
    }
}

/// Whether `row` (datums of `cols`) satisfies `e`: true or NULL.
pub fn holds(e: &Expr, cols: &[ColumnDef], row: &[Datum]) -> Result<bool, SqlError> {
    let scope = Scope { names: Vec::new(), cols, rels: Vec::new(), merged: Vec::new() };
    let v = eval(e, &scope, row, &mut Params(&[]), None)?;
    Ok(truth(&v)? != Some(false))
}

/// Checks a new row of `table` against its CHECK constraints.
pub fn row(rules: &TableRules, table: &str, cols: &[ColumnDef], row: &[Datum]) -> Result<(), SqlError> {
    for c in &rules.checks {
        if !holds(&c.expr, cols, row)? {
            return Err(SqlError::new(
                "23514",
                format!("new row for relation \"{table}\" violates check constraint \"{}\"", c.name),
            )
            .with_detail(failing_row(row)));
        }
    }
    Ok(())
}

/// PostgreSQL's `Failing row contains (...).`: every column's text output, NULL as `null`.
pub fn failing_row(row: &[Datum]) -> String {
    let parts: Vec<String> = row.iter().map(|d| d.to_text().unwrap_or_else(|| "null".into())).collect();
    format!("Failing row contains ({}).", parts.join(", "))
}

/// `pg_get_constraintdef(oid, true)`'s text for a CHECK: PostgreSQL's pretty deparse
/// (parentheses only where its precedence rules need them, BETWEEN and IN spelled out, a
/// literal compared with a column cast to the column's type). Expressions beyond the common
/// forms print as written.
pub fn definition(text: &str, cols: &[ColumnDef]) -> String {
    match parse(text) {
        Ok(e) => format!("CHECK ({})", Deparse { cols }.expr(&e)),
        Err(_) => format!("CHECK ({text})"),
    }
}

struct Deparse<'a> {
    cols: &'a [ColumnDef],
}

/// What a node is, for PostgreSQL's `isSimpleNode`.
#[derive(Clone, Copy, PartialEq)]
enum Node {
    /// A binary operator, with its text.
    Op(&'static str),
    Not,
    And,
    Or,
    /// A prefix operator, IS [NOT] NULL and other non-simple nodes.
    Other,
    /// Columns, constants, function calls: never parenthesized.
    Simple,
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(x) => strip(x),
        e => e,
    }
}

fn op_text(op: &BinaryOperator) -> Option<&'static str> {
    use BinaryOperator as B;
    Some(match op {
        B::Plus => "+",
        B::Minus => "-",
        B::Multiply => "*",
        B::Divide => "/",
        B::Modulo => "%",
        B::Eq => "=",
        B::NotEq => "<>",
        B::Lt => "<",
        B::LtEq => "<=",
        B::Gt => ">",
        B::GtEq => ">=",
        B::StringConcat => "||",
        _ => return None,
    })
}

impl Deparse<'_> {
    fn kind(&self, e: &Expr) -> Node {
        match strip(e) {
            Expr::BinaryOp { op: BinaryOperator::And, .. } | Expr::Between { .. } => Node::And,
            Expr::BinaryOp { op: BinaryOperator::Or, .. } => Node::Or,
            Expr::BinaryOp { op, .. } => op_text(op).map_or(Node::Other, Node::Op),
            Expr::UnaryOp { op: UnaryOperator::Not, .. } => Node::Not,
            Expr::Like { .. } | Expr::InList { .. } => Node::Op("~~"),
            Expr::UnaryOp { .. } | Expr::IsNull(_) | Expr::IsNotNull(_) => Node::Other,
            _ => Node::Simple,
        }
    }

    /// `child` printed under `parent`, parenthesized unless PostgreSQL's `isSimpleNode`
    /// says it need not be (`left`: it is the parent's first operand).
    fn under(&self, child: &Expr, parent: Node, left: bool) -> String {
        let text = self.expr(child);
        let simple = match (self.kind(child), parent) {
            (Node::Simple, _) => true,
            (Node::Op(op), Node::Op(pop)) => {
                let lo = |o: &str| o == "+" || o == "-";
                let hi = |o: &str| o == "*" || o == "/" || o == "%";
                if !(lo(op) || hi(op)) || !(lo(pop) || hi(pop)) {
                    false
                } else if hi(op) && lo(pop) {
                    true
                } else if lo(op) && hi(pop) {
                    false
                } else {
                    left
                }
            }
            (Node::Op(_) | Node::Other, Node::And | Node::Or | Node::Not) => true,
            (Node::Not | Node::And, Node::And | Node::Or) => true,
            (Node::Or, Node::Or) => true,
            _ => false,
        };
        if simple {
            text
        } else {
            format!("({text})")
        }
    }

    fn column_type(&self, e: &Expr) -> Option<SqlType> {
        match strip(e) {
            Expr::Identifier(i) => {
                let n = crate::expr::ident_name(i);
                self.cols.iter().find(|c| c.name == n).map(|c| c.ty)
            }
            _ => None,
        }
    }

    /// A literal compared with a column of type `ty`, as PostgreSQL shows the coercion.
    fn literal(&self, e: &Expr, ty: Option<SqlType>) -> Option<String> {
        let (neg, v) = match strip(e) {
            Expr::Value(v) => (false, &v.value),
            Expr::UnaryOp { op: UnaryOperator::Minus, expr } => match strip(expr) {
                Expr::Value(v) => (true, &v.value),
                _ => return None,
            },
            _ => return None,
        };
        let ty = ty?;
        let name = match ty {
            SqlType::Text | SqlType::Varchar(_) => "text",
            SqlType::Char(_) => "bpchar",
            SqlType::Int2 => "smallint",
            SqlType::Int4 => "integer",
            SqlType::Int8 => "bigint",
            SqlType::Numeric { .. } => "numeric",
            SqlType::Float8 => "double precision",
            SqlType::Date => "date",
            SqlType::Timestamp => "timestamp without time zone",
            SqlType::TimestampTz => "timestamp with time zone",
            _ => return None,
        };
        Some(match v {
            SqlValue::SingleQuotedString(s) => format!("'{}'::{name}", s.replace('\'', "''")),
            SqlValue::Number(n, _) if neg => format!("'-{n}'::{name}"),
            SqlValue::Number(n, _) if matches!(ty, SqlType::Int2 | SqlType::Int4) && !n.contains('.') => n.clone(),
            SqlValue::Number(n, _) if matches!(ty, SqlType::Int8) => n.clone(),
            SqlValue::Number(n, _) => format!("{n}::{name}"),
            _ => return None,
        })
    }

    /// An operand of a comparison with `other`: a literal takes `other`'s type, a varchar
    /// column compared with text shows its cast.
    fn operand(&self, e: &Expr, other: &Expr, parent: Node, left: bool) -> String {
        let ty = self.column_type(other);
        if let Some(l) = self.literal(e, ty) {
            return l;
        }
        if matches!(self.column_type(e), Some(SqlType::Varchar(_))) {
            return format!("{}::text", self.expr(e));
        }
        self.under(e, parent, left)
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Nested(x) => self.expr(x),
            Expr::BinaryOp { left, op, right } => {
                let me = self.kind(e);
                let word = match op {
                    BinaryOperator::And => "AND".to_string(),
                    BinaryOperator::Or => "OR".to_string(),
                    other => op_text(other).map_or_else(|| other.to_string(), str::to_string),
                };
                format!("{} {word} {}", self.operand(left, right, me, true), self.operand(right, left, me, false))
            }
            Expr::UnaryOp { op: UnaryOperator::Not, expr } => format!("NOT {}", self.under(expr, Node::Not, true)),
            Expr::UnaryOp { op: UnaryOperator::Minus, expr } => format!("- {}", self.under(expr, Node::Other, true)),
            Expr::IsNull(x) => format!("{} IS NULL", self.under(x, Node::Other, true)),
            Expr::IsNotNull(x) => format!("{} IS NOT NULL", self.under(x, Node::Other, true)),
            Expr::Between { expr, negated: false, low, high } => {
                let ge = Expr::BinaryOp { left: expr.clone(), op: BinaryOperator::GtEq, right: low.clone() };
                let le = Expr::BinaryOp { left: expr.clone(), op: BinaryOperator::LtEq, right: high.clone() };
                format!("{} AND {}", self.expr(&ge), self.expr(&le))
            }
            Expr::InList { expr, list, negated } => {
                let items: Vec<String> = list.iter().map(|x| self.operand(x, expr, Node::Simple, false)).collect();
                let (op, any) = if *negated { ("<>", "ALL") } else { ("=", "ANY") };
                format!("{} {op} {any} (ARRAY[{}])", self.under(expr, Node::Op(op_static(op)), true), items.join(", "))
            }
            Expr::Like { negated, expr, pattern, .. } => {
                let op = if *negated { "!~~" } else { "~~" };
                format!(
                    "{} {op} {}",
                    self.operand(expr, pattern, Node::Op("~~"), true),
                    self.operand(pattern, expr, Node::Op("~~"), false)
                )
            }
            other => other.to_string(),
        }
    }
}

fn op_static(op: &str) -> &'static str {
    if op == "=" {
        "="
    } else {
        "<>"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> Vec<ColumnDef> {
        [
            ("a", SqlType::Int4),
            ("b", SqlType::Int4),
            ("s", SqlType::Text),
            ("v", SqlType::Varchar(Some(5))),
            ("n", SqlType::Numeric { precision: 10, scale: 2 }),
        ]
        .iter()
        .map(|(n, t)| ColumnDef { name: (*n).into(), ty: *t, nullable: true })
        .collect()
    }

    /// Each pair: what CREATE TABLE wrote, what PostgreSQL 15's `pg_get_constraintdef(oid,
    /// true)` printed for it.
    #[test]
    fn definitions_print_as_postgresql_prints_them() {
        for (written, pg) in [
            ("a is not null", "CHECK (a IS NOT NULL)"),
            ("a > 0 and b > 0 or a < -5", "CHECK (a > 0 AND b > 0 OR a < '-5'::integer)"),
            ("s <> 'x'", "CHECK (s <> 'x'::text)"),
            ("a between 1 and 10", "CHECK (a >= 1 AND a <= 10)"),
            ("a in (1,2)", "CHECK (a = ANY (ARRAY[1, 2]))"),
            ("not (a = 3)", "CHECK (NOT a = 3)"),
            ("length(s) < 5", "CHECK (length(s) < 5)"),
            ("b > a + 1", "CHECK (b > (a + 1))"),
            ("n > 0", "CHECK (n > 0::numeric)"),
            ("v <> 'y'", "CHECK (v::text <> 'y'::text)"),
            ("-a < 0", "CHECK ((- a) < 0)"),
            ("s like 'a%'", "CHECK (s ~~ 'a%'::text)"),
            ("a <> b", "CHECK (a <> b)"),
        ] {
            assert_eq!(definition(written, &cols()), pg, "{written}");
        }
    }

    #[test]
    fn a_renamed_column_is_renamed_in_the_text() {
        let names: Vec<String> = ["qty", "Price"].iter().map(|s| s.to_string()).collect();
        let (text, cols) =
            renamed("a > 0 AND abs(a) < b AND b <> 'a'", &[(0, "a".into()), (1, "b".into())], &names).unwrap();
        assert_eq!(text, "qty > 0 AND abs(qty) < \"Price\" AND \"Price\" <> 'a'");
        assert_eq!(cols, vec![(0, "qty".to_string()), (1, "Price".to_string())]);
        assert!(renamed("a > 0", &[(0, "a".into())], &["a".to_string()]).is_none());
    }
}
