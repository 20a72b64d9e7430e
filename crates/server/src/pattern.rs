//! Pattern matching: SQL's `LIKE` and PostgreSQL's regular expression operators (`~`, `~*`,
//! `!~`, `!~*`), used by the evaluator ([`crate::expr`]).

use crate::error::SqlError;

/// `s ~ p`: whether the regular expression `p` matches somewhere in `s`. PostgreSQL's
/// advanced regular expressions are read as Rust's `regex` syntax, which agrees on the common
/// forms (anchors, classes, alternation, repetition); 2201B for a pattern it cannot compile.
pub fn regex_match(s: &str, p: &str, insensitive: bool) -> Result<bool, SqlError> {
    let re = regex_lite::RegexBuilder::new(p)
        .case_insensitive(insensitive)
        .build()
        .map_err(|e| SqlError::new("2201B", format!("invalid regular expression: {e}")))?;
    Ok(re.is_match(s))
}

/// SQL's LIKE with `%` and `_` (backslash escapes the next character).
pub fn like(s: &str, p: &str) -> bool {
    fn go(s: &[char], p: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('%') => (0..=s.len()).any(|i| go(&s[i..], &p[1..])),
            Some('_') => !s.is_empty() && go(&s[1..], &p[1..]),
            Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && go(&s[1..], &p[2..]),
            Some(c) => s.first() == Some(c) && go(&s[1..], &p[1..]),
        }
    }
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = p.chars().collect();
    go(&s, &p)
}
