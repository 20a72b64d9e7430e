//! The role statements' grammar (PostgreSQL 15's, for the attributes settledb keeps):
//!
//! ```text
//! CREATE { ROLE | USER } name [ [ WITH ] option [ ... ] ]
//! ALTER { ROLE | USER } name [ [ WITH ] option [ ... ] ]
//! DROP { ROLE | USER } [ IF EXISTS ] name [, ...]
//!   option: SUPERUSER | NOSUPERUSER | LOGIN | NOLOGIN
//!         | [ ENCRYPTED ] PASSWORD 'password' | PASSWORD NULL
//!         | INHERIT | NOCREATEDB | NOCREATEROLE | NOREPLICATION | NOBYPASSRLS
//!         | CONNECTION LIMIT -1                       (what every role here is: accepted)
//! ```
//!
//! The other attributes (CREATEDB, CREATEROLE, NOINHERIT, REPLICATION, BYPASSRLS, a
//! connection limit, VALID UNTIL, IN ROLE, ...) and ALTER ROLE's RENAME, SET and RESET are
//! refused with 0A000; an option given twice is PostgreSQL's 42601 `conflicting or redundant
//! options`.

use sqlparser::tokenizer::Token;

use super::Toks;
use crate::error::SqlError;
use crate::roles::command::{RoleCmd, RoleOptions, Secret};

impl Toks<'_> {
    /// The rest of `CREATE|ALTER|DROP ROLE|USER` (`verb` is the first word, `user` whether
    /// the second was USER).
    pub(super) fn role(&mut self, verb: &str, user: bool) -> Result<RoleCmd, SqlError> {
        let cmd = match verb {
            "DROP" => {
                let (if_exists, names) = self.if_exists_names()?;
                RoleCmd::Drop { names, if_exists }
            }
            _ => {
                let name = self.ident()?;
                if verb == "ALTER" {
                    if let Some(k @ ("RENAME" | "SET" | "RESET")) = self.keyword().as_deref() {
                        return Err(SqlError::unsupported(format!("ALTER ROLE ... {k}")));
                    }
                }
                self.eat_kw("WITH");
                let options = self.role_options()?;
                if verb == "CREATE" {
                    RoleCmd::Create { name, user, options }
                } else {
                    RoleCmd::Alter { name, options }
                }
            }
        };
        if !self.done() {
            return Err(self.err());
        }
        Ok(cmd)
    }

    fn role_options(&mut self) -> Result<RoleOptions, SqlError> {
        let mut o = RoleOptions::default();
        let redundant = || SqlError::syntax("conflicting or redundant options");
        fn set<T>(slot: &mut Option<T>, v: T, redundant: impl Fn() -> SqlError) -> Result<(), SqlError> {
            if slot.replace(v).is_some() {
                return Err(redundant());
            }
            Ok(())
        }
        while let Some(k) = self.keyword() {
            self.i += 1;
            match k.as_str() {
                "SUPERUSER" | "NOSUPERUSER" => set(&mut o.superuser, k == "SUPERUSER", redundant)?,
                "LOGIN" | "NOLOGIN" => set(&mut o.login, k == "LOGIN", redundant)?,
                "ENCRYPTED" | "PASSWORD" => {
                    if k == "ENCRYPTED" && !self.eat_kw("PASSWORD") {
                        return Err(self.err());
                    }
                    let p = match self.next() {
                        Some(Token::SingleQuotedString(s)) => Some(Secret(s.clone())),
                        Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("NULL") => None,
                        _ => {
                            self.i -= 1;
                            return Err(self.err());
                        }
                    };
                    set(&mut o.password, p, redundant)?;
                }
                "UNENCRYPTED" => {
                    return Err(SqlError::new("0A000", "UNENCRYPTED PASSWORD is no longer supported")
                        .with_hint("Remove UNENCRYPTED to store the password in encrypted form instead."));
                }
                // What every role here is.
                "INHERIT" | "NOCREATEDB" | "NOCREATEROLE" | "NOREPLICATION" | "NOBYPASSRLS" => {}
                "CONNECTION" => {
                    let unlimited = self.eat_kw("LIMIT") && self.eat(&Token::Minus) && {
                        matches!(self.next(), Some(Token::Number(n, _)) if n == "1")
                    };
                    if !unlimited {
                        return Err(SqlError::unsupported("a role's CONNECTION LIMIT"));
                    }
                }
                _ => return Err(SqlError::unsupported(format!("the role option {k}"))),
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use crate::parse::{parse_one, Stmt};
    use crate::roles::command::{RoleCmd, RoleOptions, Secret};

    fn role(sql: &str) -> Result<RoleCmd, String> {
        match parse_one(sql) {
            Ok(Stmt::Role(r)) => Ok(r),
            Ok(other) => Err(format!("not a role statement: {other:?}")),
            Err(e) => Err(format!("{} {}", e.code, e.message)),
        }
    }

    #[test]
    fn postgresql_15s_role_statements() {
        let pw = |s: &str| Some(Some(Secret(s.into())));
        assert_eq!(
            role("CREATE ROLE alice LOGIN PASSWORD 'a''b'"),
            Ok(RoleCmd::Create {
                name: "alice".into(),
                user: false,
                options: RoleOptions { superuser: None, login: Some(true), password: pw("a'b") },
            })
        );
        assert_eq!(
            role("create user \"Bob\" with superuser encrypted password 'x'"),
            Ok(RoleCmd::Create {
                name: "Bob".into(),
                user: true,
                options: RoleOptions { superuser: Some(true), login: None, password: pw("x") },
            })
        );
        assert_eq!(
            role("ALTER USER bob WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB NOLOGIN NOREPLICATION NOBYPASSRLS PASSWORD NULL"),
            Ok(RoleCmd::Alter {
                name: "bob".into(),
                options: RoleOptions { superuser: Some(false), login: Some(false), password: Some(None) },
            })
        );
        assert_eq!(
            role("DROP ROLE IF EXISTS a, \"B\""),
            Ok(RoleCmd::Drop { names: vec!["a".into(), "B".into()], if_exists: true })
        );
        assert_eq!(role("drop user a"), Ok(RoleCmd::Drop { names: vec!["a".into()], if_exists: false }));
        assert!(role("CREATE ROLE a CONNECTION LIMIT -1").is_ok());
        for (sql, code) in [
            ("CREATE ROLE a PASSWORD 'x' PASSWORD 'y'", "42601"),
            ("CREATE ROLE a LOGIN NOLOGIN", "42601"),
            ("CREATE ROLE a CREATEDB", "0A000"),
            ("CREATE ROLE a CONNECTION LIMIT 5", "0A000"),
            ("CREATE ROLE a VALID UNTIL 'infinity'", "0A000"),
            ("ALTER ROLE a RENAME TO b", "0A000"),
            ("ALTER ROLE a SET work_mem = 1", "0A000"),
            ("CREATE ROLE a UNENCRYPTED PASSWORD 'x'", "0A000"),
            ("CREATE ROLE a PASSWORD", "42601"),
            ("CREATE ROLE a PASSWORD 5", "42601"),
            ("CREATE ROLE", "42601"),
            ("DROP ROLE a b", "42601"),
            ("DROP ROLE IF a", "42601"),
        ] {
            let e = role(sql).unwrap_err();
            assert!(e.starts_with(code), "{sql}: {e}");
        }
        // The password stays out of Debug output.
        assert!(!format!("{:?}", role("CREATE ROLE a PASSWORD 'hunter2'")).contains("hunter2"));
    }
}
