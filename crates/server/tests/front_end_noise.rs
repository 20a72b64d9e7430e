//! Randomized inputs for the decoders of client bytes the server owns: the statement splitter
//! and parser, the types' text input functions and binary decoders, and COPY's field
//! splitting (through a whole COPY). None may panic; each returns a value or an error.
//! (A stand-in for the cargo-fuzz targets issue 20 asks for, which need nightly.)

use settledb_server::expr::{eval, Params, Scope};
use settledb_server::parse::{parse_one, split_statements, Stmt};
use settledb_server::types::{parse_text, Datum, SqlType};

/// xorshift64*: a fixed seed, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "select",
    "insert",
    "into",
    "values",
    "update",
    "set",
    "delete",
    "from",
    "where",
    "vacuum",
    "(",
    ")",
    ",",
    ";",
    "'",
    "\"",
    "$1",
    "$$",
    "--",
    "/*",
    "*/",
    "copy",
    "stdin",
    "with",
    "freeze",
    "on",
    "verbose",
    "analyze",
    "parallel",
    "-1",
    "1e400",
    "99999999999999999999999",
    "t",
    "*",
    "=",
    "<",
    "::",
    "int4",
    "numeric(3,2)",
    "checkpoint",
    "begin",
    "commit",
    "order by",
    "limit",
    "group by",
    "count(*)",
    "\\",
    "\u{fffd}",
    "é",
    " ",
    "\n",
    "pg_catalog.pg_partitioned_table",
    "pg_catalog.pg_inherits",
    "c.relname = '",
    "index_cleanup",
    "truncate",
];

const TYPES: &[SqlType] = &[
    SqlType::Bool,
    SqlType::Int2,
    SqlType::Int4,
    SqlType::Int8,
    SqlType::Numeric { precision: 10, scale: 2 },
    SqlType::Float8,
    SqlType::Text,
    SqlType::Varchar(Some(3)),
    SqlType::Char(2),
    SqlType::Timestamp,
    SqlType::Date,
    SqlType::Bytea,
];

#[test]
fn random_sql_never_panics_the_front_end() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let n = 1 + rng.below(12);
        let sql: String = (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect::<Vec<_>>().join(" ");
        for piece in split_statements(&sql) {
            let _ = parse_one(piece);
        }
    }
}

#[test]
fn random_values_never_panic_the_type_decoders() {
    let mut rng = Rng(42);
    for _ in 0..20_000 {
        let len = rng.below(12);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let alphabet = b"0123456789-+.:eE xT\\tfn";
        let text: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())] as char).collect();
        for &ty in TYPES {
            let _ = Datum::from_binary(&bytes, ty);
            if let Ok(d) = parse_text(&text, ty) {
                let _ = d.to_text();
                let _ = d.to_binary(ty);
                for &other in TYPES {
                    let _ = d.to_stored(other, "c");
                }
            }
        }
    }
}

const OPERANDS: &[&str] = &[
    "1.5",
    "99999999999999999999.123456789012345678901234567890",
    "0",
    "-9223372036854775808",
    "9223372036854775807",
    "1e308",
    "'7'",
    "'x'",
    "null",
    "true",
    "2::int2",
    "'2024-02-29'::date",
    "'2024-02-29 10:00'::timestamp",
    "'\\x00ff'::bytea",
    "3::numeric(4,1)",
    "0.000000000000000001",
];
const OPERATORS: &[&str] = &["+", "-", "*", "/", "%", "=", "<", ">=", "<>", "||", "and", "or"];

#[test]
fn random_arithmetic_never_panics_the_evaluator() {
    let mut rng = Rng(7);
    for _ in 0..20_000 {
        let mut e = OPERANDS[rng.below(OPERANDS.len())].to_string();
        for _ in 0..rng.below(4) {
            let op = OPERATORS[rng.below(OPERATORS.len())];
            let rhs = OPERANDS[rng.below(OPERANDS.len())];
            e = if rng.below(2) == 0 { format!("({e}) {op} {rhs}") } else { format!("{rhs} {op} ({e})") };
        }
        let sql = format!("select {e}, -({e}), abs({e}), coalesce({e}, {e}), cast({e} as text)");
        let Ok(Stmt::Sql(stmt)) = parse_one(&sql) else { continue };
        let sqlparser::ast::Statement::Query(q) = stmt.as_ref() else { continue };
        let sqlparser::ast::SetExpr::Select(sel) = q.body.as_ref() else { continue };
        for item in &sel.projection {
            if let sqlparser::ast::SelectItem::UnnamedExpr(x) = item {
                if let Ok(d) = eval(x, &Scope::empty(), &[], &mut Params(&[]), None) {
                    let _ = d.to_text();
                    for &ty in TYPES {
                        let _ = d.to_binary(ty);
                        let _ = d.to_stored(ty, "c");
                    }
                }
            }
        }
    }
}
