//! Client authentication and the checks after it: what a PostgreSQL backend does between the
//! StartupMessage and its first ReadyForQuery (`ClientAuthentication`, then `InitPostgres`'s
//! role and connection-slot checks).
//!
//! ```text
//!   StartupMessage ──► (conn: a connection slot, or FATAL 53300 too many clients)
//!        │
//!        ├─ trust (settle serve --trust) ───────────────────────────┐
//!        │                                                          │
//!        └─ SCRAM-SHA-256 against the role's stored verifier:       │
//!             AuthenticationSASL ◄─► SASLInitialResponse            │
//!             AuthenticationSASLContinue ◄─► SASLResponse           │
//!             proof wrong, no such role, or no password:            │
//!                 FATAL 28P01 password authentication failed        │
//!                                                                   ▼
//!                                          authorize: no such role  FATAL 28000 (trust only)
//!                                                     NOLOGIN        FATAL 28000
//!                                                     reserved slots FATAL 53300
//!                                                                   │
//!        AuthenticationSASLFinal, AuthenticationOk, ParameterStatus, BackendKeyData,
//!        ReadyForQuery
//! ```
//!
//! The SCRAM exchange is pgwire's ([`ScramAuth`]), fed the role's verifier
//! ([`crate::roles::scram`]): salt, iteration count, StoredKey and ServerKey. The server
//! never holds a password or a salted password. A login as a role that does not exist, or that
//! has no password, is challenged exactly like any other (a salt derived from the name, keys
//! no proof matches) and fails at the proof with the same 28P01 as a wrong password, as
//! PostgreSQL's mock authentication makes it: a client cannot learn which roles exist. The
//! server log says which it was.
//!
//! Once the client is authenticated (or trusted), and before anything else is sent, the role
//! is checked as PostgreSQL's `InitializeSessionUserId` checks it: it must exist (under trust
//! only; SCRAM already failed otherwise) and have LOGIN. Then, for a role that is not a
//! superuser, `superuser_reserved_connections`: when the connections already in (this one
//! counted among the `max_connections` slots it took at startup) leave fewer free slots than
//! are reserved, it gets FATAL 53300 `remaining connection slots are reserved for
//! non-replication superuser connections`; a superuser takes the reserved slots. Connections
//! beyond `max_connections` were already refused before authentication (`crate::conn`), as
//! PostgreSQL refuses them before it forks a backend.
//!
//! ParameterStatus `is_superuser` is the role's; `session_authorization` its name. The
//! connection's role becomes the session's (`crate::conn` records it in the session's
//! [`crate::interrupt::Control`] once startup is done; `current_user` reads it there).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::sink::Sink;
use pgwire::api::auth::driver::AuthOutcome;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::{ScramAuth, ScramSecret};
use pgwire::api::auth::sasl::SaslMechanisms;
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, AuthDriver, AuthSource, DefaultServerParameterProvider,
    LoginInfo, Password, ServerParameterProvider, StartupHandler,
};
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::error::SqlError;
use crate::interrupt::KeyGenerator;
use crate::roles::Roles;
use crate::Shared;

/// Where the connection's metadata says whether its role is a superuser (`on`/`off`), for
/// ParameterStatus `is_superuser`.
const IS_SUPERUSER: &str = "settledb.is_superuser";

/// The StartupHandler of every connection of a server.
pub struct Startup {
    driver: AuthDriver<Params>,
    /// SCRAM-SHA-256, unless the server trusts every connection.
    scram: Option<SaslMechanisms>,
    sh: Arc<Shared>,
}

/// The ParameterStatus values sent after authentication: PostgreSQL 15's, with the role's
/// `is_superuser`.
struct Params(DefaultServerParameterProvider);

impl ServerParameterProvider for Params {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut p = self.0.server_parameters(client)?;
        let on = client.metadata().get(IS_SUPERUSER).map_or("off", String::as_str);
        p.insert("is_superuser".into(), on.to_string());
        Some(p)
    }
}

/// The SCRAM secret of a login: the role's stored verifier, or a mock one.
#[derive(Debug)]
struct RoleVerifiers(Arc<Roles>);

#[async_trait]
impl AuthSource for RoleVerifiers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Never asked for (SCRAM asks for the secret below); no password is kept anyway.
        Err(PgWireError::InvalidPassword(login.user().unwrap_or_default().to_string()))
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let v = self.0.verifier_for_login(login.user().unwrap_or_default());
        let secret = ScramSecret::Verifier {
            salt: v.salt,
            iterations: v.iterations as usize,
            stored_key: v.stored_key.to_vec(),
            server_key: v.server_key.to_vec(),
        };
        Ok((secret, None))
    }
}

impl Startup {
    pub fn new(sh: Arc<Shared>) -> Startup {
        let mut p = DefaultServerParameterProvider::default();
        p.server_version = crate::SERVER_VERSION.to_string();
        p.date_style = "ISO, MDY".into();
        p.time_zone = "UTC".into();
        p.interval_style = "postgres".into();
        p.scram_iterations = crate::roles::scram::ITERATIONS as usize;
        let keys = Arc::new(KeyGenerator::new(sh.registry.clone()));
        let driver = AuthDriver::new(Params(p)).with_pid_secret_key_generator(keys);
        let scram = (!sh.trust).then(|| {
            let auth = ScramAuth::new(Arc::new(RoleVerifiers(sh.roles.clone())));
            SaslMechanisms::new(vec![]).with_mechanism(Arc::new(auth))
        });
        Startup { driver, scram, sh }
    }

    /// The role checks after authentication, then AuthenticationOk and the rest.
    async fn finish<C>(&self, client: &mut C, final_message: Option<Authentication>) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let user = client.metadata().get("user").cloned().unwrap_or_default();
        // The startup packet's `options` settings must be valid before the session starts
        // (PostgreSQL refuses the connection); the session applies them once it runs.
        let params = client.metadata().iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let checked = crate::settings::check_startup(&self.sh.db, params);
        match checked.and_then(|()| authorize(&self.sh, &user, self.scram.is_some())) {
            Ok(superuser) => {
                let on = if superuser { "on" } else { "off" };
                client.metadata_mut().insert(IS_SUPERUSER.into(), on.into());
                self.driver.complete_authentication(client, final_message).await
            }
            Err(e) => {
                self.sh.log.line("FATAL", &e.message);
                let info = ErrorInfo::new("FATAL".into(), e.code.into(), e.message);
                Err(PgWireError::UserError(Box::new(info)))
            }
        }
    }
}

/// May `user`, authenticated (or trusted), start a session now? `Ok(superuser)` if so.
pub fn authorize(sh: &Shared, user: &str, scram: bool) -> Result<bool, SqlError> {
    let Some(role) = sh.roles.get(user) else {
        return Err(if scram {
            SqlError::new("28P01", format!("password authentication failed for user \"{user}\""))
        } else {
            SqlError::new("28000", format!("role \"{user}\" does not exist"))
        });
    };
    if !role.login {
        return Err(SqlError::new("28000", format!("role \"{user}\" is not permitted to log in")));
    }
    if !role.superuser && !sh.registry.admits_non_superuser() {
        return Err(SqlError::new(
            "53300",
            "remaining connection slots are reserved for non-replication superuser connections",
        ));
    }
    Ok(role.superuser)
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let outcome = match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                let user = startup.parameters.get("user").cloned().unwrap_or_default();
                let database = startup.parameters.get("database").cloned().unwrap_or_else(|| user.clone());
                let what = if self.scram.is_some() { "authentication requested (SCRAM-SHA-256)" } else { "authorized" };
                self.sh.log.line("LOG", &format!("connection {what}: user={user} database={database}"));
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                match &self.scram {
                    Some(m) => self.driver.begin_authentication(client, m.create()).await,
                    None => Ok(AuthOutcome::Authenticated { identity: None, final_message: None }),
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(m) => {
                let r = self.driver.advance_authentication(client, m).await;
                if r.is_err() {
                    self.log_failure(client);
                }
                r
            }
            _ => return Ok(()),
        };
        match outcome? {
            AuthOutcome::InProgress => Ok(()),
            AuthOutcome::Authenticated { final_message, .. } => self.finish(client, final_message).await,
        }
    }
}

impl Startup {
    /// Why a SCRAM login failed, for the server log only (the client hears 28P01 whatever it
    /// was, from `crate::conn`).
    fn log_failure<C: ClientInfo>(&self, client: &C) {
        let user = client.metadata().get("user").cloned().unwrap_or_default();
        let why = match self.sh.roles.get(&user) {
            None => format!("Role \"{user}\" does not exist."),
            Some(r) if r.password.is_none() => format!("User \"{user}\" has no password assigned."),
            Some(_) => return,
        };
        self.sh.log.line("LOG", &format!("password authentication for user \"{user}\" cannot succeed: {why}"));
    }
}
