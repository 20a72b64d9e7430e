//! `CREATE ROLE|USER`, `ALTER ROLE|USER`, `DROP ROLE|USER`: the statements (parsed by
//! `crate::parse`'s role grammar) and their execution against [`super::Roles`].
//!
//! The checks follow PostgreSQL 15's, in its order and with its SQLSTATEs and words:
//!
//! ```text
//!   CREATE ROLE   not a superuser             42501 permission denied to create role
//!                 name pg_...                 42939 role name "pg_x" is reserved
//!                 name taken                  42710 role "x" already exists
//!   ALTER ROLE    no such role                42704 role "x" does not exist
//!                 target or option superuser,
//!                 by a non-superuser          42501 must be superuser to alter superuser roles
//!                                                   or change superuser attribute
//!                 a non-superuser changing
//!                 anything but its own
//!                 password                    42501 permission denied
//!   DROP ROLE     not a superuser             42501 permission denied to drop role
//!                 no such role                42704 role "x" does not exist
//!                                             (IF EXISTS: NOTICE ..., skipping)
//!                 the session's own role      55006 current user cannot be dropped
//!                 postgres                    55006 cannot drop role postgres because it is
//!                                                   required by the database system
//! ```
//!
//! PostgreSQL has a CREATEROLE attribute that lets a non-superuser manage roles; settledb has
//! not, so role management is a superuser's. The bootstrap superuser keeps SUPERUSER and
//! LOGIN (PostgreSQL 16's rule; a server whose only superuser cannot log in could not be
//! managed again).
//!
//! **Passwords**: `PASSWORD 'text'` given as a SCRAM-SHA-256 verifier (what `psql`'s
//! `\password` and libpq's `PQencryptPasswordConn` send) is stored as given; any other text
//! is a password, stored as the verifier of a fresh random salt. As in PostgreSQL a string
//! that only looks like a verifier but does not parse as one is taken as a password. An empty
//! password clears it (with PostgreSQL's NOTICE), `PASSWORD NULL` too. An MD5 hash
//! (`md5` and 32 hex digits) is refused: this server authenticates by SCRAM only.

use super::scram::Verifier;
use super::{Role, Roles, BOOTSTRAP_OID};
use crate::error::SqlError;
use crate::session::{Notice, Outcome};

/// A password as a statement gives it (kept out of `Debug` output).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The role attributes a statement sets; `None` leaves one as it is (or at its default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleOptions {
    pub superuser: Option<bool>,
    pub login: Option<bool>,
    /// `Some(None)`: `PASSWORD NULL`.
    pub password: Option<Option<Secret>>,
}

/// A role statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoleCmd {
    /// `CREATE ROLE name` (`user`: `CREATE USER`, which implies LOGIN).
    Create { name: String, user: bool, options: RoleOptions },
    /// `ALTER ROLE|USER name [WITH] option ...`.
    Alter { name: String, options: RoleOptions },
    /// `DROP ROLE|USER [IF EXISTS] name [, ...]`.
    Drop { names: Vec<String>, if_exists: bool },
}

fn denied(message: &str) -> SqlError {
    SqlError::new("42501", message)
}

fn undefined(name: &str) -> SqlError {
    SqlError::new("42704", format!("role \"{name}\" does not exist"))
}

/// Runs `cmd` for the session whose role is `current`.
pub fn execute(roles: &Roles, current: &str, cmd: &RoleCmd, notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
    let superuser = roles.is_superuser(current);
    match cmd {
        RoleCmd::Create { name, user, options } => {
            if !superuser {
                return Err(denied("permission denied to create role"));
            }
            if name.starts_with("pg_") {
                return Err(SqlError {
                    detail: Some("Role names starting with \"pg_\" are reserved.".into()),
                    ..SqlError::new("42939", format!("role name \"{name}\" is reserved"))
                });
            }
            super::check_name(name)?;
            let password = verifier(options.password.as_ref(), notices)?;
            roles.update(|all| {
                if all.iter().any(|r| &r.name == name) {
                    return Err(SqlError::new("42710", format!("role \"{name}\" already exists")));
                }
                all.push(Role {
                    oid: Roles::next_oid(all),
                    name: name.clone(),
                    superuser: options.superuser.unwrap_or(false),
                    login: options.login.unwrap_or(*user),
                    password: password.flatten(),
                });
                Ok(())
            })?;
            Ok(Outcome::Command("CREATE ROLE".into()))
        }
        RoleCmd::Alter { name, options } => {
            let target = roles.get(name).ok_or_else(|| undefined(name))?;
            if !superuser {
                if target.superuser || options.superuser.is_some() {
                    return Err(denied("must be superuser to alter superuser roles or change superuser attribute"));
                }
                if options.login.is_some() || options.password.is_none() || target.name != current {
                    return Err(denied("permission denied"));
                }
            }
            if target.oid == BOOTSTRAP_OID && (options.superuser == Some(false) || options.login == Some(false)) {
                return Err(SqlError {
                    detail: Some("The bootstrap user must keep the SUPERUSER and LOGIN attributes.".into()),
                    ..denied("permission denied to alter role")
                });
            }
            let password = verifier(options.password.as_ref(), notices)?;
            roles.update(|all| {
                let r = all.iter_mut().find(|r| &r.name == name).ok_or_else(|| undefined(name))?;
                if let Some(s) = options.superuser {
                    r.superuser = s;
                }
                if let Some(l) = options.login {
                    r.login = l;
                }
                if let Some(p) = password {
                    r.password = p;
                }
                Ok(())
            })?;
            Ok(Outcome::Command("ALTER ROLE".into()))
        }
        RoleCmd::Drop { names, if_exists } => {
            if !superuser {
                return Err(denied("permission denied to drop role"));
            }
            roles.update(|all| drop_roles(all, current, names, *if_exists, notices))?;
            Ok(Outcome::Command("DROP ROLE".into()))
        }
    }
}

/// DROP ROLE's names in order, each checked against the roles the ones before it left.
fn drop_roles(
    all: &mut Vec<Role>,
    current: &str,
    names: &[String],
    if_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    for name in names {
        let Some(i) = all.iter().position(|r| &r.name == name) else {
            if !if_exists {
                return Err(undefined(name));
            }
            notices.push(Notice {
                detail: None,
                severity: "NOTICE",
                code: "00000",
                message: format!("role \"{name}\" does not exist, skipping"),
            });
            continue;
        };
        if name == current {
            return Err(SqlError::new("55006", "current user cannot be dropped"));
        }
        if all[i].oid == BOOTSTRAP_OID {
            return Err(SqlError::new(
                "55006",
                format!("cannot drop role {name} because it is required by the database system"),
            ));
        }
        all.remove(i);
    }
    Ok(())
}

/// The verifier a `PASSWORD` option stores: `None` when the statement does not set one,
/// `Some(None)` to clear it.
fn verifier(
    password: Option<&Option<Secret>>,
    notices: &mut Vec<Notice>,
) -> Result<Option<Option<Verifier>>, SqlError> {
    let Some(given) = password else { return Ok(None) };
    let Some(Secret(text)) = given else { return Ok(Some(None)) };
    if text.is_empty() {
        notices.push(Notice {
            detail: None,
            severity: "NOTICE",
            code: "00000",
            message: "empty string is not a valid password, clearing password".into(),
        });
        return Ok(Some(None));
    }
    if let Some(v) = Verifier::parse(text) {
        return Ok(Some(Some(v)));
    }
    if text.len() == 35 && text.starts_with("md5") && text[3..].bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SqlError::unsupported("an MD5-hashed password (give the password or a SCRAM-SHA-256 verifier)"));
    }
    let v = Verifier::generate(text).map_err(|e| SqlError::new("58000", e.to_string()))?;
    Ok(Some(Some(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(roles: &Roles, current: &str, cmd: RoleCmd) -> Result<Vec<Notice>, SqlError> {
        let mut notices = Vec::new();
        execute(roles, current, &cmd, &mut notices).map(|_| notices)
    }

    fn opts(superuser: Option<bool>, login: Option<bool>, password: Option<&str>) -> RoleOptions {
        RoleOptions { superuser, login, password: password.map(|p| Some(Secret(p.into()))) }
    }

    #[test]
    fn postgresql_15s_checks_and_words() {
        let dir = tempfile::tempdir().unwrap();
        let roles = Roles::open(dir.path(), None).unwrap();
        let create = |name: &str, o| RoleCmd::Create { name: name.into(), user: false, options: o };
        run(&roles, "postgres", create("alice", opts(None, Some(true), Some("a")))).unwrap();
        run(&roles, "postgres", RoleCmd::Create { name: "bob".into(), user: true, options: opts(None, None, None) })
            .unwrap();
        assert!(roles.get("bob").unwrap().login, "CREATE USER implies LOGIN");
        assert!(!roles.get("alice").unwrap().superuser);
        let code = |r: Result<Vec<Notice>, SqlError>| r.err().map(|e| (e.code, e.message));
        assert_eq!(
            code(run(&roles, "alice", create("eve", opts(None, None, None)))),
            Some(("42501", "permission denied to create role".into()))
        );
        assert_eq!(
            code(run(&roles, "postgres", create("alice", opts(None, None, None)))),
            Some(("42710", "role \"alice\" already exists".into()))
        );
        assert_eq!(code(run(&roles, "postgres", create("pg_x", opts(None, None, None)))).unwrap().0, "42939");
        let alter = |name: &str, o| RoleCmd::Alter { name: name.into(), options: o };
        assert_eq!(
            code(run(&roles, "alice", alter("bob", opts(None, None, Some("x"))))),
            Some(("42501", "permission denied".into()))
        );
        assert_eq!(
            code(run(&roles, "alice", alter("alice", opts(Some(true), None, None)))),
            Some(("42501", "must be superuser to alter superuser roles or change superuser attribute".into()))
        );
        assert_eq!(
            code(run(&roles, "alice", alter("alice", opts(None, Some(false), Some("x"))))),
            Some(("42501", "permission denied".into()))
        );
        run(&roles, "alice", alter("alice", opts(None, None, Some("new")))).unwrap();
        assert!(roles.get("alice").unwrap().password.unwrap().verifies("new"));
        assert_eq!(
            code(run(&roles, "postgres", alter("nobody", opts(None, Some(true), None)))),
            Some(("42704", "role \"nobody\" does not exist".into()))
        );
        assert_eq!(code(run(&roles, "postgres", alter("postgres", opts(Some(false), None, None)))).unwrap().0, "42501");
        let notices = run(&roles, "postgres", alter("bob", opts(None, None, Some("")))).unwrap();
        assert!(notices[0].message.contains("clearing password"));
        let drop = |names: &[&str], if_exists| RoleCmd::Drop {
            names: names.iter().map(|s| s.to_string()).collect(),
            if_exists,
        };
        assert_eq!(
            code(run(&roles, "alice", drop(&["bob"], false))),
            Some(("42501", "permission denied to drop role".into()))
        );
        assert_eq!(
            code(run(&roles, "postgres", drop(&["postgres"], false))),
            Some(("55006", "current user cannot be dropped".into()))
        );
        run(&roles, "postgres", create("root2", opts(Some(true), Some(true), None))).unwrap();
        assert_eq!(
            code(run(&roles, "root2", drop(&["postgres"], false))),
            Some(("55006", "cannot drop role postgres because it is required by the database system".into()))
        );
        // All or nothing: a missing name later in the list keeps the earlier ones.
        assert_eq!(code(run(&roles, "postgres", drop(&["bob", "nobody"], false))).unwrap().0, "42704");
        assert!(roles.get("bob").is_some());
        let notices = run(&roles, "postgres", drop(&["nobody", "bob"], true)).unwrap();
        assert_eq!(notices[0].message, "role \"nobody\" does not exist, skipping");
        assert!(roles.get("bob").is_none());
        // What was done is on disk.
        let reread = Roles::open(dir.path(), None).unwrap();
        assert_eq!(reread.all(), roles.all());
    }

    #[test]
    fn a_verifier_is_stored_as_given_and_a_password_is_hashed() {
        let pg = "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=";
        let mut n = Vec::new();
        let v = verifier(Some(&Some(Secret(pg.into()))), &mut n).unwrap().unwrap().unwrap();
        assert_eq!(v.to_string(), pg);
        let v = verifier(Some(&Some(Secret("SCRAM-SHA-256$4096:bad".into()))), &mut n).unwrap().unwrap().unwrap();
        assert!(v.verifies("SCRAM-SHA-256$4096:bad"), "a malformed verifier is a password, as in PostgreSQL");
        let md5 = format!("md5{}", "0123456789abcdef".repeat(2));
        assert_eq!(verifier(Some(&Some(Secret(md5))), &mut n).unwrap_err().code, "0A000");
        assert_eq!(verifier(Some(&None), &mut n).unwrap(), Some(None));
        assert_eq!(verifier(None, &mut n).unwrap(), None);
    }
}
