use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn col(name: &str, ty: Type, nullable: bool) -> Column {
    Column { name: name.to_string(), ty, nullable }
}

fn pgbench_accounts() -> Schema {
    Schema {
        columns: vec![
            col("aid", Type::Int4, false),
            col("bid", Type::Int4, true),
            col("abalance", Type::Int4, true),
            col("filler", Type::Text, true),
        ],
    }
}

fn pgbench_row(aid: i32) -> Vec<Value> {
    vec![Value::Int4(aid), Value::Int4(1), Value::Int4(0), Value::Text(" ".repeat(84))]
}

fn invalid_msg(r: Result<Vec<u8>>) -> String {
    match r {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn pgbench_accounts_row_is_121_bytes() {
    let t = form_tuple(&pgbench_accounts(), &pgbench_row(7)).unwrap();
    assert_eq!(t.len(), 121);
    let h = TupleHeader::parse(&t).unwrap();
    assert_eq!(h.hoff(), 24);
    assert_eq!(h.natts(), 4);
    assert_eq!(h.infomask(), HEAP_XMAX_INVALID | HEAP_HASVARWIDTH);
    assert_eq!(h.xmax(), Xid::INVALID);
    assert_eq!(t[24 + 12], ((85 << 1) | 1) as u8, "1-byte varlena header, unaligned");
    assert_eq!(deform_tuple(&pgbench_accounts(), &t).unwrap(), pgbench_row(7));
}

#[test]
fn header_setters_write_little_endian_fields() {
    let mut t = form_tuple(&pgbench_accounts(), &pgbench_row(1)).unwrap();
    set_xmin(&mut t, Xid(0x0102_0304));
    set_xmax(&mut t, Xid(9));
    set_cid(&mut t, 3);
    set_ctid(&mut t, Tid::new(5, 2));
    set_infomask(&mut t, HEAP_XMIN_COMMITTED | HEAP_XMAX_INVALID);
    set_infomask2(&mut t, 4 | HEAP_HOT_UPDATED);
    assert_eq!(&t[0..4], &[4, 3, 2, 1]);
    let h = TupleHeader::parse(&t).unwrap();
    assert_eq!((h.xmin(), h.xmax(), h.cid(), h.ctid()), (Xid(0x0102_0304), Xid(9), 3, Tid::new(5, 2)));
    assert_eq!(h.natts(), 4);
    assert_eq!(
        describe_header(&t),
        "xmin: 16909060  xmax: 9  cid: 3  ctid: (5,2)  infomask: XMIN_COMMITTED|XMAX_INVALID|HOT_UPDATED  hoff: 24  natts: 4"
    );
    set_infomask(&mut t, HEAP_XMIN_FROZEN | 0x1000);
    assert!(describe_header(&t).contains("infomask: XMIN_FROZEN|HOT_UPDATED|0x1000 "));
    assert!(describe_header(&t[..10]).starts_with("invalid tuple"));
}

#[test]
fn alignment_follows_postgres_rules() {
    let s = Schema {
        columns: vec![
            col("b", Type::Bool, false),
            col("i8", Type::Int8, false),
            col("t", Type::Text, false),
            col("i4", Type::Int4, false),
            col("long", Type::Bytea, false),
        ],
    };
    let row =
        vec![Value::Bool(true), Value::Int8(-2), Value::Text("ab".into()), Value::Int4(5), Value::Bytea(vec![9; 127])];
    let t = form_tuple(&s, &row).unwrap();
    // data: bool@0, pad to 8, int8@8..16, short text@16..19, pad, int4@20..24,
    // long varlena: header@24..28 (already 4-aligned), 127 bytes -> 155.
    assert_eq!(t.len(), 24 + 155);
    assert_eq!(&t[24 + 24..24 + 28], &((131u32) << 2).to_le_bytes());
    assert_eq!(deform_tuple(&s, &t).unwrap(), row);
    // 126 payload bytes still use the 1-byte header.
    let s2 = Schema { columns: vec![col("b", Type::Bool, false), col("x", Type::Bytea, false)] };
    let t2 = form_tuple(&s2, &[Value::Bool(false), Value::Bytea(vec![1; 126])]).unwrap();
    assert_eq!(t2.len(), 24 + 1 + 127);
    let t3 = form_tuple(&s2, &[Value::Bool(false), Value::Bytea(vec![1; 127])]).unwrap();
    assert_eq!(t3.len(), 24 + 4 + 4 + 127, "long form pads to 4");
}

#[test]
fn nulls_use_a_bitmap_and_take_no_space() {
    let s = pgbench_accounts();
    let row = vec![Value::Int4(1), Value::Null, Value::Int4(3), Value::Null];
    let t = form_tuple(&s, &row).unwrap();
    let h = TupleHeader::parse(&t).unwrap();
    assert_eq!(h.infomask() & (HEAP_HASNULL | HEAP_HASVARWIDTH), HEAP_HASNULL);
    assert_eq!(t[23], 0b0101, "bit set = not null");
    assert_eq!(t.len(), 24 + 8);
    assert!(h.is_null(1) && !h.is_null(2));
    assert_eq!(deform_tuple(&s, &t).unwrap(), row);
    // Columns added after the row was written read as NULL.
    let mut wider = s.clone();
    wider.columns.push(col("extra", Type::Int8, true));
    assert_eq!(deform_tuple(&wider, &t).unwrap()[4], Value::Null);
    // 23 + a 1-byte bitmap fits t_hoff 24 (up to 8 columns); nine columns need 32.
    let eight = Schema { columns: (0..8).map(|i| col(&format!("c{i}"), Type::Int4, true)).collect() };
    let mut r = vec![Value::Int4(1); 8];
    r[7] = Value::Null;
    assert_eq!(TupleHeader::parse(&form_tuple(&eight, &r).unwrap()).unwrap().hoff(), 24);
    let nine = Schema { columns: (0..9).map(|i| col(&format!("c{i}"), Type::Int4, true)).collect() };
    let mut r = vec![Value::Int4(1); 9];
    r[8] = Value::Null;
    assert_eq!(TupleHeader::parse(&form_tuple(&nine, &r).unwrap()).unwrap().hoff(), 32);
    let many = Schema { columns: (0..70).map(|i| col(&format!("c{i}"), Type::Bool, true)).collect() };
    let t = form_tuple(&many, &vec![Value::Null; 70]).unwrap();
    assert_eq!(t.len(), 32, "23 + 9 bitmap bytes -> t_hoff 32");
}

#[test]
fn form_tuple_errors_name_the_problem() {
    let s = pgbench_accounts();
    let mut row = pgbench_row(1);
    row[2] = Value::Text("x".into());
    assert_eq!(invalid_msg(form_tuple(&s, &row)), "column \"abalance\" is of type int4 but the value is text");
    let mut row = pgbench_row(1);
    row[0] = Value::Null;
    assert_eq!(invalid_msg(form_tuple(&s, &row)), "null value in column \"aid\" violates not-null constraint");
    assert_eq!(invalid_msg(form_tuple(&s, &pgbench_row(1)[..3])), "row has 3 values but the table has 4 columns");
    let mut row = pgbench_row(1);
    row[3] = Value::Text("x".repeat(9000 - 24 - 12 - 4));
    assert_eq!(invalid_msg(form_tuple(&s, &row)), "row is too big: size 9000, maximum size 8160");
    row[3] = Value::Text("x".repeat(MAX_HEAP_TUPLE_SIZE - 24 - 12 - 4));
    assert_eq!(form_tuple(&s, &row).unwrap().len(), MAX_HEAP_TUPLE_SIZE);
}

fn random_value(rng: &mut StdRng, ty: Type) -> Value {
    match ty {
        Type::Int4 => Value::Int4(rng.gen()),
        Type::Int8 => Value::Int8(rng.gen()),
        Type::Timestamp => Value::Timestamp(rng.gen()),
        Type::Float8 => loop {
            let f = f64::from_bits(rng.gen());
            if !f.is_nan() {
                break Value::Float8(f);
            }
        },
        Type::Bool => Value::Bool(rng.gen()),
        Type::Text => {
            let n = if rng.gen_bool(0.2) { rng.gen_range(100..400) } else { rng.gen_range(0..20) };
            Value::Text((0..n).map(|_| rng.gen::<char>()).take(n / 2 + 1).collect())
        }
        Type::Bytea => {
            let n = if rng.gen_bool(0.2) { rng.gen_range(120..300) } else { rng.gen_range(0..20) };
            Value::Bytea((0..n).map(|_| rng.gen()).collect())
        }
    }
}

/// A row of `s`, a nullable column NULL three times in ten.
fn random_row(rng: &mut StdRng, s: &Schema) -> Vec<Value> {
    s.columns
        .iter()
        .map(|c| if c.nullable && rng.gen_bool(0.3) { Value::Null } else { random_value(rng, c.ty) })
        .collect()
}

fn random_schema(rng: &mut StdRng) -> Schema {
    let n = rng.gen_range(0..20);
    Schema {
        columns: (0..n)
            .map(|i| col(&format!("c{i}_{}", rng.gen::<u16>()), Type::ALL[rng.gen_range(0..7)], rng.gen()))
            .collect(),
    }
}

/// Property: for random schemas and rows, deform(form(row)) == row, and the schema
/// survives encode/decode.
#[test]
fn random_rows_round_trip() {
    let mut rng = StdRng::seed_from_u64(0x5e771e);
    for _ in 0..3000 {
        let s = random_schema(&mut rng);
        assert_eq!(Schema::decode(&s.encode()).unwrap(), s);
        let row = random_row(&mut rng, &s);
        let t = form_tuple(&s, &row).unwrap();
        let h = TupleHeader::parse(&t).unwrap();
        assert_eq!(h.hoff() as usize % 8, 0);
        assert_eq!(deform_tuple(&s, &t).unwrap(), row, "schema {s:?}");
    }
}

/// Property: a batch formed into one buffer (`form_tuple_into`, as bulk inserts do) holds,
/// wherever each tuple lands in it, exactly the bytes `form_tuple` makes for the row alone: the
/// columns are aligned by their place in the tuple, not in the buffer. A row that cannot be
/// formed leaves the buffer as it was.
#[test]
fn tuples_formed_into_a_shared_buffer_equal_tuples_formed_alone() {
    let mut rng = StdRng::seed_from_u64(0xba7c4);
    for _ in 0..300 {
        let s = random_schema(&mut rng);
        let mut arena = vec![0xAAu8; rng.gen_range(0..9)];
        let mut formed = Vec::new();
        for _ in 0..rng.gen_range(1..12) {
            let row = random_row(&mut rng, &s);
            let start = form_tuple_into(&s, &row, &mut arena).unwrap();
            assert_eq!(start % 8, 0);
            formed.push((start..arena.len(), form_tuple(&s, &row).unwrap()));
        }
        for (span, alone) in formed {
            assert_eq!(&arena[span], &alone[..], "schema {s:?}");
        }
        let before = arena.clone();
        let wrong: Vec<Value> = s.columns.iter().map(|_| Value::Null).chain([Value::Int4(1)]).collect();
        assert!(form_tuple_into(&s, &wrong, &mut arena).is_err());
        assert_eq!(arena, before, "a refused row leaves the buffer as it was");
    }
}

/// Fuzz-like: random bytes, truncations and bit flips of valid tuples and schemas must
/// never panic any decoder.
#[test]
fn decoders_never_panic_on_garbage() {
    let mut rng = StdRng::seed_from_u64(99);
    for _ in 0..2000 {
        let s = random_schema(&mut rng);
        let row = random_row(&mut rng, &s);
        let t = form_tuple(&s, &row).unwrap();
        let enc = s.encode();
        for _ in 0..10 {
            let mut bad = t.clone();
            match rng.gen_range(0..3) {
                0 => bad.truncate(rng.gen_range(0..=t.len())),
                1 => {
                    for _ in 0..rng.gen_range(1..4) {
                        let i = rng.gen_range(0..bad.len());
                        bad[i] ^= 1 << rng.gen_range(0..8);
                    }
                }
                _ => bad = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect(),
            }
            let _ = TupleHeader::parse(&bad).map(|h| (h.natts(), h.ctid(), h.is_null(3)));
            let _ = deform_tuple(&s, &bad);
            let _ = describe_header(&bad);
            let mut e = enc.clone();
            if rng.gen() {
                e.truncate(rng.gen_range(0..=enc.len()));
            } else if !e.is_empty() {
                let i = rng.gen_range(0..e.len());
                e[i] = rng.gen();
            }
            let _ = Schema::decode(&e);
            let junk: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
            let _ = Schema::decode(&junk);
        }
    }
}

#[test]
fn parse_rejects_bad_headers() {
    let t = form_tuple(&pgbench_accounts(), &pgbench_row(1)).unwrap();
    assert!(TupleHeader::parse(&t[..22]).is_none());
    assert!(TupleHeader::parse(&t[..24]).is_some());
    let mut bad = t.clone();
    bad[22] = 20;
    assert!(TupleHeader::parse(&bad).is_none(), "t_hoff < 23");
    bad[22] = 28;
    assert!(TupleHeader::parse(&bad).is_none(), "t_hoff not maxaligned");
    assert!(TupleHeader::parse(&t[..23]).is_none(), "t_hoff past the end");
    let many = Schema { columns: (0..70).map(|i| col(&format!("c{i}"), Type::Bool, true)).collect() };
    let mut t = form_tuple(&many, &vec![Value::Null; 70]).unwrap();
    t[22] = 24;
    assert!(TupleHeader::parse(&t).is_none(), "bitmap of 9 bytes does not fit before 24");
    let s = pgbench_accounts();
    let mut t = form_tuple(&s, &pgbench_row(1)).unwrap();
    t.push(0);
    assert_eq!(deform_tuple(&s, &t).unwrap_err(), "1 trailing bytes after the last attribute");
    t.truncate(100);
    assert!(deform_tuple(&s, &t).unwrap_err().starts_with("column \"filler\" (text)"));
}

/// Rows deformed one after another into the same vector come out as each would alone, whatever
/// the previous row left in the buffers: NULLs where text was, text where NULL or another
/// type was, a shorter text over a longer one, and a wider vector cut to the schema.
#[test]
fn deforming_into_a_reused_vector_gives_each_row_as_alone() {
    let schema = Schema {
        columns: vec![
            col("a", Type::Text, true),
            col("b", Type::Bytea, true),
            col("c", Type::Int8, true),
            col("d", Type::Text, true),
        ],
    };
    let rows = [
        vec![Value::Text("a long first value".into()), Value::Bytea(vec![1, 2, 3]), Value::Int8(7), Value::Null],
        vec![Value::Null, Value::Bytea(vec![9]), Value::Null, Value::Text("now text".into())],
        vec![Value::Text("é".into()), Value::Null, Value::Int8(-1), Value::Text(String::new())],
    ];
    let logged = |row: &[Value]| {
        let t = form_tuple(&schema, row).unwrap();
        let mut out = Vec::new();
        crate::heap::wal::encode_tuple(&mut out, &t);
        out
    };
    let mut into = vec![Value::Int4(1); 6];
    for row in &rows {
        deform_logged_tuple_into(&schema, &logged(row), &mut into).unwrap();
        assert_eq!(&into, row);
        assert_eq!(deform_logged_tuple(&schema, &logged(row)).unwrap(), *row);
    }
    // Bad UTF-8 over a reused text buffer is still an error naming the column.
    let mut bad = logged(&rows[0]);
    let at = bad.windows(5).position(|w| w == b"a lon").unwrap();
    bad[at] = 0xff;
    let e = deform_logged_tuple_into(&schema, &bad, &mut into).unwrap_err();
    assert!(e.contains("column \"a\" (text) is not valid UTF-8"), "{e}");
}

/// The borrowed deform the logical decoder uses gives each row's values as the owned one does,
/// attributes past a short tuple's `natts` from the missing values, and a text value's bytes as
/// stored: unchecked, where the owned deform refuses bytes that are not UTF-8.
#[test]
fn borrowed_deform_matches_the_owned_one() {
    let schema = Schema {
        columns: vec![
            col("a", Type::Text, true),
            col("b", Type::Bytea, true),
            col("c", Type::Int8, true),
            col("d", Type::Timestamp, true),
            col("e", Type::Bool, true),
        ],
    };
    let rows = [
        vec![
            Value::Text("first".into()),
            Value::Bytea(vec![1, 2]),
            Value::Int8(7),
            Value::Timestamp(-5),
            Value::Bool(true),
        ],
        vec![Value::Null, Value::Null, Value::Int8(i64::MIN), Value::Null, Value::Bool(false)],
        vec![Value::Text("é".into()), Value::Bytea(Vec::new()), Value::Null, Value::Timestamp(1), Value::Null],
    ];
    let logged = |schema: &Schema, row: &[Value]| {
        let t = form_tuple(schema, row).unwrap();
        let mut out = Vec::new();
        crate::heap::wal::encode_tuple(&mut out, &t);
        out
    };
    for row in &rows {
        let l = logged(&schema, row);
        let mut refs = vec![ValueRef::Int4(3); 9];
        deform_logged_tuple_refs(&schema, &[], &l, &mut refs).unwrap();
        let owned: Vec<Value> = refs.iter().map(|v| v.to_value(&"v").unwrap()).collect();
        assert_eq!(&owned, row);
        assert_eq!(refs, row.iter().map(Value::as_ref).collect::<Vec<_>>());
    }
    // A row stored before two columns were added reads their missing values.
    let narrow = Schema { columns: schema.columns[..3].to_vec() };
    let l = logged(&narrow, &rows[0][..3]);
    let missing = [Value::Null, Value::Null, Value::Null, Value::Timestamp(9), Value::Null];
    let mut refs = Vec::new();
    deform_logged_tuple_refs(&schema, &missing, &l, &mut refs).unwrap();
    assert_eq!(refs[3..], [ValueRef::Timestamp(9), ValueRef::Null]);
    // Bytes that are not UTF-8 come through as stored; only the owned form refuses them.
    let mut bad = logged(&schema, &rows[0]);
    let at = bad.windows(5).position(|w| w == b"first").unwrap();
    bad[at] = 0xff;
    let mut refs = Vec::new();
    deform_logged_tuple_refs(&schema, &[], &bad, &mut refs).unwrap();
    assert_eq!(refs[0], ValueRef::Text(b"\xffirst"));
    assert!(refs[0].to_value(&"column a").unwrap_err().contains("column a is not valid UTF-8"));
    // A malformed tuple is an error, not a panic.
    assert!(deform_logged_tuple_refs(&schema, &[], &bad[..bad.len() - 3], &mut Vec::new()).is_err());
}

/// Reads walk a tuple noting only that its bytes are malformed, and a second walk says what
/// is wrong: on mangled data areas both must refuse the same tuples, with the second walk's
/// message.
#[test]
fn the_reading_walk_refuses_what_the_describing_walk_refuses() {
    let mut rng = StdRng::seed_from_u64(0xfa57);
    let (mut refused, mut accepted) = (0, 0);
    for _ in 0..3000 {
        let s = random_schema(&mut rng);
        let row = random_row(&mut rng, &s);
        let t = form_tuple(&s, &row).unwrap();
        let hoff = TupleHeader(&t).hoff() as usize;
        for _ in 0..10 {
            let mut bad = t.clone();
            if rng.gen_bool(0.3) {
                bad.truncate(rng.gen_range(hoff..=t.len()));
            } else if bad.len() > hoff {
                for _ in 0..rng.gen_range(1..4) {
                    let i = rng.gen_range(hoff..bad.len());
                    bad[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            if header_problem(&bad).is_some() {
                continue;
            }
            let h = TupleHeader(&bad);
            let natts = usize::from(h.natts());
            let nulls = (h.infomask() & HEAP_HASNULL != 0).then(|| &bad[HEAP_TUPLE_HEADER_SIZE..]);
            let mut out = Vec::new();
            let read = deform_data_refs(&s, &[], natts, nulls, h.data(), &mut out);
            assert_eq!(read, checked_walk(&s, natts, nulls, h.data()), "schema {s:?}");
            if read.is_ok() {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
    }
    assert!(refused > 1_000 && accepted > 1_000, "{refused} refused, {accepted} accepted");
}
