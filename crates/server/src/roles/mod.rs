//! Roles: who may log in to `settle serve`, with which password, and who is a superuser.
//!
//! PostgreSQL keeps roles in the shared catalog `pg_authid` (`rolname`, `rolsuper`,
//! `rolcanlogin`, `rolpassword`, ...). settledb keeps the few attributes it acts on in a file
//! of the data directory, `DIR/server_roles`:
//!
//! ```text
//!   settledb roles 1
//!   10<TAB>postgres<TAB>superuser<TAB>login<TAB>SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>
//!   16384<TAB>alice<TAB>nosuperuser<TAB>login<TAB>-
//! ```
//!
//! a version line, then one line per role: its OID, name, `superuser`/`nosuperuser`,
//! `login`/`nologin`, and its SCRAM-SHA-256 verifier in `pg_authid.rolpassword`'s text
//! ([`scram`]) or `-` for none. No password is ever written, in clear or salted: only the
//! verifier, from which the password cannot be recovered. Names hold no control characters
//! (CREATE ROLE refuses them), so tabs and newlines only separate.
//!
//! **Writes** replace the file whole ([`crate::catalog::replace_file`]: a sibling file,
//! fsync, rename, fsync of the directory), so a crash leaves the old roles or the new ones.
//! A change is computed on a copy, written, and only then made visible, all under one lock;
//! a failed write changes nothing. Role commands are not transactional (as sequences here
//! are not; PostgreSQL's are): they take effect when they succeed, and are refused inside a
//! transaction block.
//!
//! **Reading** checks every line; a file that is not valid is a startup error naming the file
//! and the line (never a panic, never a silent default): the server does not start on roles
//! it cannot trust.
//!
//! **The bootstrap superuser** `postgres` (OID 10, as `initdb` makes it) is created with the
//! file, when a server first opens a directory; it cannot be dropped and stays a superuser
//! (its NOLOGIN or NOSUPERUSER would lock every superuser out, so neither is allowed).
//! Its password is set from `settle serve --password-file` (PostgreSQL's `initdb
//! --pwfile`): at initialization, or at a later start while it has none; a later start
//! with a different password in the file is refused, so a restart never quietly undoes an
//! `ALTER ROLE ... PASSWORD`.
//!
//! Authentication reads the stored verifier (`crate::auth`); `CREATE/ALTER/DROP ROLE` change
//! the file ([`command`]); `pg_roles`, `pg_user` and `pg_authid` list it
//! (`crate::pgcatalog`).

pub mod command;
pub mod scram;

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::error::SqlError;
use scram::Verifier;

/// PostgreSQL's bootstrap superuser.
pub const BOOTSTRAP_SUPERUSER: &str = "postgres";

/// Its OID, as `initdb` gives it (what the catalogs' owner columns hold).
pub const BOOTSTRAP_OID: i64 = crate::views::OWNER;

/// OIDs of created roles start here (PostgreSQL's `FirstNormalObjectId`).
const FIRST_OID: i64 = 16384;

/// The file's name in the data directory.
pub const FILE: &str = "server_roles";

/// The file's first line.
const VERSION_LINE: &str = "settledb roles 1";

/// One role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub oid: i64,
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    pub password: Option<Verifier>,
}

/// The roles of a data directory.
pub struct Roles {
    path: PathBuf,
    roles: Mutex<Vec<Role>>,
    /// Seeds the salts that unknown roles are challenged with ([`Verifier::mock`]).
    mock_secret: [u8; 32],
}

fn corrupt(path: &Path, line: usize, detail: impl std::fmt::Display) -> SqlError {
    SqlError::new("XX001", format!("invalid roles file {}, line {line}: {detail}", path.display()))
}

/// Reads and checks the roles file of `dir`; `None` when there is none yet.
pub fn read(dir: &Path) -> Result<Option<Vec<Role>>, SqlError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SqlError::new("58030", format!("could not read {}: {e}", path.display()))),
    };
    parse(&path, &bytes).map(Some)
}

/// The roles `bytes` holds (the file at `path`), every line checked.
fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Role>, SqlError> {
    let mut lines = bytes.split(|&b| b == b'\n').enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, l)) if l == VERSION_LINE.as_bytes() => {}
        _ => return Err(corrupt(path, 1, format!("expected \"{VERSION_LINE}\""))),
    }
    let mut roles: Vec<Role> = Vec::new();
    for (n, line) in lines {
        if line.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(line).map_err(|_| corrupt(path, n, "not UTF-8"))?;
        let role = parse_line(text).map_err(|d| corrupt(path, n, d))?;
        if roles.iter().any(|r| r.name == role.name || r.oid == role.oid) {
            return Err(corrupt(path, n, format!("role \"{}\" or OID {} appears twice", role.name, role.oid)));
        }
        roles.push(role);
    }
    match roles.iter().find(|r| r.oid == BOOTSTRAP_OID) {
        Some(r) if r.name == BOOTSTRAP_SUPERUSER && r.superuser && r.login => Ok(roles),
        _ => {
            Err(corrupt(path, 1, format!("no bootstrap superuser \"{BOOTSTRAP_SUPERUSER}\" with OID {BOOTSTRAP_OID}")))
        }
    }
}

fn parse_line(line: &str) -> Result<Role, String> {
    let fields: Vec<&str> = line.split('\t').collect();
    let [oid, name, superuser, login, password] = fields[..] else {
        return Err(format!("expected 5 tab-separated fields, found {}", fields.len()));
    };
    let oid = oid.parse::<i64>().ok().filter(|&o| o > 0).ok_or_else(|| format!("bad OID {oid:?}"))?;
    check_name(name).map_err(|e| e.message)?;
    let flag = |v: &str, yes: &str, no: &str| match v {
        _ if v == yes => Ok(true),
        _ if v == no => Ok(false),
        _ => Err(format!("expected {yes} or {no}, found {v:?}")),
    };
    let password = match password {
        "-" => None,
        v => Some(Verifier::parse(v).ok_or("malformed SCRAM-SHA-256 verifier")?),
    };
    Ok(Role {
        oid,
        name: name.to_string(),
        superuser: flag(superuser, "superuser", "nosuperuser")?,
        login: flag(login, "login", "nologin")?,
        password,
    })
}

/// A role name the file can hold: non-empty, no control characters.
pub fn check_name(name: &str) -> Result<(), SqlError> {
    if name.is_empty() {
        return Err(SqlError::new("42602", "zero-length delimited identifier"));
    }
    if name.chars().any(char::is_control) {
        return Err(SqlError::unsupported("a role name holding control characters"));
    }
    Ok(())
}

fn render(roles: &[Role]) -> String {
    let mut out = format!("{VERSION_LINE}\n");
    for r in roles {
        let password = r.password.as_ref().map_or_else(|| "-".to_string(), Verifier::to_string);
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{password}\n",
            r.oid,
            r.name,
            if r.superuser { "superuser" } else { "nosuperuser" },
            if r.login { "login" } else { "nologin" },
        ));
    }
    out
}

/// Whether `dir`'s roles file gives some role a password (`false` when there is no file).
pub fn any_password(dir: &Path) -> Result<bool, SqlError> {
    Ok(read(dir)?.is_some_and(|roles| roles.iter().any(|r| r.password.is_some())))
}

/// `settle serve --password-file`'s password does not verify against `postgres`'s.
pub fn password_mismatch(path: &Path) -> SqlError {
    SqlError::new(
        "28P01",
        format!(
            "role \"{BOOTSTRAP_SUPERUSER}\" already has a password in {}, and the one given is not it; change \
             it with ALTER ROLE {BOOTSTRAP_SUPERUSER} PASSWORD '...' (or psql's \\password)",
            path.display()
        ),
    )
}

fn no_random(e: scram::NoRandom) -> SqlError {
    SqlError::new("58000", e.to_string())
}

impl std::fmt::Debug for Roles {
    /// The file, not the verifiers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roles").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Roles {
    /// Opens `dir`'s roles, creating the file with the bootstrap superuser when there is none.
    /// `initial_password` (`--password-file`'s) becomes `postgres`'s password when it has none;
    /// when it has one, the password given must be it.
    pub fn open(dir: &Path, initial_password: Option<String>) -> Result<Roles, SqlError> {
        let path = dir.join(FILE);
        let existing = read(dir)?;
        let created = existing.is_none();
        let mut roles = existing.unwrap_or_else(|| {
            vec![Role {
                oid: BOOTSTRAP_OID,
                name: BOOTSTRAP_SUPERUSER.into(),
                superuser: true,
                login: true,
                password: None,
            }]
        });
        let mut changed = created;
        if let Some(pw) = initial_password {
            let boot =
                roles.iter_mut().find(|r| r.oid == BOOTSTRAP_OID).ok_or_else(|| corrupt(&path, 1, "no postgres"))?;
            match &boot.password {
                Some(v) if v.verifies(&pw) => {}
                Some(_) => return Err(password_mismatch(&path)),
                None => {
                    boot.password = Some(Verifier::generate(&pw).map_err(no_random)?);
                    changed = true;
                }
            }
            // The password itself goes no further than this.
            drop(pw);
        }
        if changed {
            crate::catalog::replace_file(&path, &render(&roles))?;
        }
        let mut mock_secret = [0u8; 32];
        scram::random_bytes(&mut mock_secret).map_err(no_random)?;
        Ok(Roles { path, roles: Mutex::new(roles), mock_secret })
    }

    /// The role named `name`.
    pub fn get(&self, name: &str) -> Option<Role> {
        self.roles.lock().iter().find(|r| r.name == name).cloned()
    }

    /// Whether `name` is a superuser (an unknown name is not).
    pub fn is_superuser(&self, name: &str) -> bool {
        self.roles.lock().iter().any(|r| r.name == name && r.superuser)
    }

    /// Every role, by OID.
    pub fn all(&self) -> Vec<Role> {
        let mut v = self.roles.lock().clone();
        v.sort_by_key(|r| r.oid);
        v
    }

    /// The verifier a login as `user` is checked against: the role's own, or, for a role that
    /// has none or does not exist, one no proof matches (the client cannot tell which).
    pub fn verifier_for_login(&self, user: &str) -> Verifier {
        match self.get(user).and_then(|r| r.password) {
            Some(v) => v,
            None => Verifier::mock(&self.mock_secret, user),
        }
    }

    /// Applies `f` to a copy of the roles; when it succeeds the copy is written to the file
    /// and becomes the roles. Changes are serialized.
    pub fn update<T>(&self, f: impl FnOnce(&mut Vec<Role>) -> Result<T, SqlError>) -> Result<T, SqlError> {
        let mut g = self.roles.lock();
        let mut next = g.clone();
        let out = f(&mut next)?;
        crate::catalog::replace_file(&self.path, &render(&next))?;
        *g = next;
        Ok(out)
    }

    /// An OID no role has.
    pub fn next_oid(roles: &[Role]) -> i64 {
        roles.iter().map(|r| r.oid + 1).max().unwrap_or(FIRST_OID).max(FIRST_OID)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(oid: i64, name: &str, superuser: bool, login: bool, pw: Option<&str>) -> Role {
        Role {
            oid,
            name: name.into(),
            superuser,
            login,
            password: pw.map(|p| Verifier::compute(p, b"0123456789abcdef", 4096)),
        }
    }

    #[test]
    fn the_file_round_trips() {
        let roles = vec![role(10, "postgres", true, true, Some("pw")), role(16384, "Alice Smith", false, false, None)];
        let text = render(&roles);
        assert!(text.starts_with("settledb roles 1\n10\tpostgres\tsuperuser\tlogin\tSCRAM-SHA-256$4096:"));
        assert!(!text.contains("pw\t") && !text.contains("\tpw"));
        assert_eq!(parse(Path::new("f"), text.as_bytes()).unwrap(), roles);
    }

    #[test]
    fn a_bad_file_is_an_error_naming_the_line() {
        let good = render(&[role(10, "postgres", true, true, None), role(16384, "a", false, true, None)]);
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "line 1"),
            ("settledb roles 2\n".into(), "line 1"),
            (good.replace("16384\ta\tnosuperuser", "16384\ta\tmaybe"), "line 3"),
            (good.replace("16384\t", "x\t"), "line 3"),
            (good.replace("\tlogin\t-\n", "\tlogin\n"), "line 2"),
            (
                good.replace("16384\ta\tnosuperuser\tlogin\t-", "16384\ta\tnosuperuser\tlogin\tSCRAM-SHA-256$1:x"),
                "line 3",
            ),
            (good.replace("16384\ta", "16384\tpostgres"), "line 3"),
            (good.replace("10\tpostgres\tsuperuser", "10\tpostgres\tnosuperuser"), "line 1"),
            ("settledb roles 1\n16384\ta\tnosuperuser\tlogin\t-\n".into(), "no bootstrap superuser"),
        ];
        for (text, want) in cases {
            let e = parse(Path::new("DIR/server_roles"), text.as_bytes()).unwrap_err();
            assert!(e.message.contains("DIR/server_roles") && e.message.contains(want), "{text:?}: {}", e.message);
        }
        let mut bytes = good.into_bytes();
        bytes.extend_from_slice(b"16385\t\xff\tnosuperuser\tlogin\t-\n");
        assert!(parse(Path::new("f"), &bytes).unwrap_err().message.contains("line 4: not UTF-8"));
    }

    #[test]
    fn open_creates_postgres_and_keeps_the_password_file_honest() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!any_password(dir.path()).unwrap());
        let roles = Roles::open(dir.path(), Some("first".into())).unwrap();
        let pg = roles.get("postgres").unwrap();
        assert!(pg.superuser && pg.login && pg.password.as_ref().unwrap().verifies("first"));
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains("first"));
        assert!(any_password(dir.path()).unwrap());
        // Again with the same password, or none: the stored one stays.
        Roles::open(dir.path(), Some("first".into())).unwrap();
        Roles::open(dir.path(), None).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), text);
        // A different one is refused.
        let e = Roles::open(dir.path(), Some("second".into())).err().unwrap();
        assert_eq!(e.code, "28P01");
    }
}
