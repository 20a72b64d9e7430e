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
    "prepare",
    "execute",
    "deallocate",
    "discard",
    "as",
    "all",
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
    SqlType::TimestampTz,
    SqlType::Interval,
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
    "'2024-02-29 10:00+05:30'::timestamptz",
    "interval '1 mon -2 days 03:00'",
    "'P1Y2.5M'::interval",
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

/// A message as the client frames it: type byte, length, body.
fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Valid client byte streams, mutated (bytes changed, cut, repeated): the protocol decoder
/// (`settledb_server::fuzzing::frontend_messages`, the cargo-fuzz target's function) returns
/// on each, and what it decodes encodes back to bytes it decodes again.
#[test]
fn mutated_client_messages_never_panic_the_decoder() {
    let mut startup = Vec::new();
    let body = b"\x00\x03\x00\x00user\x00postgres\x00database\x00postgres\x00\x00";
    startup.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    startup.extend_from_slice(body);
    let ssl = [0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut status = vec![b'r'];
    for v in [10u64, 9, 8, 0] {
        status.extend_from_slice(&v.to_be_bytes());
    }
    status.push(0);
    let session: Vec<u8> = [
        framed(b'Q', b"select 1; vacuum (verbose) t\0"),
        framed(b'P', b"s1\0select $1::int4\0\x00\x01\x00\x00\x00\x17"),
        framed(b'B', b"\0s1\0\x00\x01\x00\x01\x00\x01\x00\x00\x00\x04\x00\x00\x00\x07\x00\x01\x00\x00"),
        framed(b'D', b"Ps1\0"),
        framed(b'E', b"\0\x00\x00\x00\x00"),
        framed(b'S', b""),
        framed(b'd', &status),
        framed(b'c', b""),
        framed(b'p', b"secret\0"),
        framed(b'X', b""),
    ]
    .concat();
    let seeds: Vec<Vec<u8>> = vec![
        [vec![1], ssl.to_vec(), startup.clone()].concat(),
        [vec![1], startup.clone(), session.clone()].concat(),
        [vec![3], startup].concat(),
        [vec![0], session.clone()].concat(),
        [vec![2], session].concat(),
    ];
    let mut rng = Rng(0x5eed_f00d);
    for seed in &seeds {
        settledb_server::fuzzing::frontend_messages(seed);
        for _ in 0..2_000 {
            let mut m = seed.clone();
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 if m.len() > 1 => {
                        let i = 1 + rng.below(m.len() - 1);
                        m[i] = rng.next() as u8;
                    }
                    1 => m.truncate(1 + rng.below(m.len())),
                    2 if m.len() > 1 => {
                        let i = 1 + rng.below(m.len() - 1);
                        let j = (i + 1 + rng.below(16)).min(m.len());
                        let piece = m[i..j].to_vec();
                        m.splice(i..i, piece);
                    }
                    _ => m.push(rng.next() as u8),
                }
            }
            settledb_server::fuzzing::frontend_messages(&m);
        }
    }
    // And the SQL front end's target on the texts of the SQL test above.
    settledb_server::fuzzing::sql_front_end(b"select 1; vacuum (verbose, analyze) t; copy t from stdin; select $$;");
    settledb_server::fuzzing::sql_front_end(b"prepare q (int) as select $1; execute q(1); deallocate all; discard all");
}
