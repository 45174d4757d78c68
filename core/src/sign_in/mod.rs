//! People signing in to the dashboard: the password check with its limits on guessing, what a
//! cookie session remembers of the person ([`SessionUser`]) and who that is now
//! ([`principal_of`]), the session records in the database ([`records`]), and the housekeeping
//! of all of it. The cookie itself (its layer, rotation, sign-out) belongs to the surface.
//!
//! - [`device`]: the id of the long-lived device cookie by which a browser that signed in is
//!   known.

pub mod device;
pub mod records;

use std::net::{IpAddr, Ipv6Addr};

use engine::receipt::{Decision, ReasonCode};
use engine::scope::ScopeSet;
use serde::{Deserialize, Serialize};
use serde_json::json;

use aperture_types::dto::Me;
use aperture_types::error::{AppError, ErrorCode, FieldError};

use crate::config::canonical_ip;
use crate::error::ServiceError;
use crate::journal::{ANONYMOUS, Author, Journal};
use crate::password::Passwords;
use crate::principal::{Principal, PrincipalKind};
use crate::store::users::SignInSource;
use crate::store::{self, Store};

/// Absolute lifetime of a sign-in.
pub const ABSOLUTE_MS: i64 = 12 * 60 * 60 * 1000;
/// Failed sign-ins at one account from one client address (or, for a device the account knows,
/// from that device) after which that pair is refused for the rest of the window. Never a
/// lockout of the account: other addresses still get through.
pub const MAX_FAILURES_PER_ADDRESS: i64 = 100;
/// The failure-counting window.
pub const FAILURE_WINDOW_MS: i64 = 60 * 60 * 1000;
/// Failures of an account (from any address) within the window that cost no delay.
pub const FREE_FAILURES: i64 = 5;
/// The longest delay between two attempts at one account from the addresses and devices it does
/// not know: whatever their number, their guessing stays near 3,600 / 30 = 120 tries an hour,
/// and the rightful user from a new address waits at most this long.
pub const MAX_DELAY_MS: i64 = 30_000;

/// The delay before the next attempt at an account with `failures` failures in the window:
/// none for the first [`FREE_FAILURES`], then 1 s doubling with each failure up to
/// [`MAX_DELAY_MS`].
pub fn delay_after(failures: i64) -> i64 {
    if failures < FREE_FAILURES {
        return 0;
    }
    let doublings = u32::try_from((failures - FREE_FAILURES).min(15)).unwrap_or(15);
    (1_000_i64 << doublings).min(MAX_DELAY_MS)
}

/// The key under which a cookie session keeps its [`SessionUser`].
pub const SESSION_KEY: &str = "aperture.user";

/// What a cookie session remembers about the person.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionUser {
    tenant_id: String,
    username: String,
    signed_in_at: i64,
    /// The user's `usr_…` id: a user deleted and made again under the same name is another
    /// person, whose sessions these are not. Absent in sessions made before users had ids.
    #[serde(default)]
    user_id: Option<String>,
}

/// The caller's address, in each request's extensions as the surface determined it (behind
/// trusted proxies too); absent when the server was not given the connection's address, as in
/// tests that call the router directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The key under which sign-in counts an address: an IPv4 address on its own (an IPv4-mapped
/// IPv6 address as that IPv4 address), an IPv6 address by its /64, the smallest block a
/// subscriber is usually given whole (one host could otherwise be a new address per guess).
pub fn address_key(ip: IpAddr) -> String {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let network = Ipv6Addr::from(u128::from(v6) & !(u128::from(u64::MAX)));
            format!("{network}/64")
        }
    }
}

/// Who is signing in, as far as the request tells.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller<'a> {
    /// The caller's address (as the surface determined it, see [`ClientAddr`]); `None` when the server was not given
    /// it, and then every such caller shares one count and is never a known address.
    pub address: Option<IpAddr>,
    /// The well-formed id in the caller's device cookie ([`device`]), if it sent one.
    pub device: Option<&'a str>,
}

/// A successful sign-in: what the session is to remember, the person, and the device id the
/// browser keeps for [`device::KNOWN_FOR_MS`] (the caller's own when the server issued it,
/// else a fresh one). The surface rotates the session id and stores [`SignedIn::session`]
/// under [`SESSION_KEY`].
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// What the session remembers.
    pub session: SessionUser,
    /// The person.
    pub me: Me,
    /// The id for the device cookie.
    pub device: String,
}

/// Checks the password of a person signing in. Every failure looks the same ("wrong username or
/// password"), whether the tenant or user exists or not, and takes the same time.
///
/// Guessing is slowed, never turned into a lockout of the rightful user:
/// - an attempt from an address (an IPv6 address per /64, [`address_key`]) or a device
///   cookie that signed in to the account within [`device::KNOWN_FOR_MS`] is never delayed by
///   other people's failures: it waits only [`delay_after`] its own failures (the device's,
///   counted from any address, when the device is known; else the address's), in a slot of its
///   own, and is refused after [`MAX_FAILURES_PER_ADDRESS`] of them within the hour;
/// - every other attempt is refused after [`MAX_FAILURES_PER_ADDRESS`] failures at the account
///   from its address within the hour, and waits [`delay_after`] the account's failures from
///   any address (at most [`MAX_DELAY_MS`]) in the slot all of them share, so guessing from
///   unknown addresses stays near 120 an hour however many there are.
///
/// Failures for usernames the tenant does not have are journaled once per tenant and hour and
/// counted; the count is journaled when the hour ends ([`journal_unknown_user_hours`]).
#[tracing::instrument(skip(store, journal, passwords, password, caller))]
#[allow(clippy::too_many_arguments)]
pub async fn sign_in(
    store: &Store,
    journal: &Journal,
    passwords: &Passwords,
    tenant: &str,
    username: &str,
    password: &str,
    caller: Caller<'_>,
) -> Result<SignedIn, ServiceError> {
    let mut fields = Vec::new();
    for (path, value) in [
        ("tenant", tenant),
        ("username", username),
        ("password", password),
    ] {
        if value.is_empty() {
            fields.push(FieldError {
                path: path.into(),
                message: "required".into(),
            });
        }
    }
    if !fields.is_empty() {
        return Err(AppError::invalid(fields).into());
    }
    if tenant.len() > 64 || username.len() > 64 || password.len() > crate::password::MAX_LEN {
        return Err(wrong_credentials().into());
    }
    let now = store::now_ms();
    let address = caller.address.map(address_key);
    let client = address.as_deref().unwrap_or("unknown");
    let device_hash = caller.device.map(device::hash);
    let known = known_source(
        store,
        tenant,
        username,
        address.as_deref(),
        device_hash.as_deref(),
        now,
    )
    .await?;
    let since = now - FAILURE_WINDOW_MS;
    let failures = store::users::sign_in_failures(store, tenant, username, client, since).await?;
    // The attempt's own failures: its device's when that is what the account knows it by.
    let own = match &known {
        Some(SignInSource::Device(hash)) => {
            store::users::device_sign_in_failures(store, tenant, username, hash, since).await?
        }
        _ => failures.pair,
    };
    if own >= MAX_FAILURES_PER_ADDRESS {
        crate::metrics::sign_in_failure("throttled");
        return Err(AppError::new(
            ErrorCode::TooManyRequests,
            "too many failed sign-ins at this account from your address or device; try again \
             later (within the hour) or from another network",
        )
        .into());
    }
    let wait = match &known {
        Some(source) => {
            store::users::claim_sign_in_source_slot(
                store,
                tenant,
                username,
                source,
                now,
                delay_after(own),
            )
            .await?
        }
        None => {
            store::users::claim_sign_in_slot(
                store,
                tenant,
                username,
                now,
                delay_after(failures.account),
            )
            .await?
        }
    };
    if let Some(wait) = wait {
        crate::metrics::sign_in_failure("throttled");
        return Err(AppError::new(
            ErrorCode::TooManyRequests,
            format!(
                "too many failed sign-ins at this account; try again in {} s",
                (wait.min(MAX_DELAY_MS) + 999) / 1000
            ),
        )
        .into());
    }
    let user = store::users::find(store, tenant, username).await?;
    let ok = passwords
        .verify(
            password.to_owned(),
            user.as_ref().map(|u| u.password_hash.clone()),
        )
        .await?;
    let known_user = user.is_some();
    let Some(user) = user.filter(|_| ok) else {
        crate::metrics::sign_in_failure("wrong_credentials");
        store::users::record_device_sign_in_failure(
            store,
            tenant,
            username,
            client,
            device_hash.as_deref(),
            store::now_ms(),
            FAILURE_WINDOW_MS,
        )
        .await?;
        // Failures are journaled in tenants that exist; nothing runs on a failure, so a journal
        // outage is logged rather than turned into another error.
        if let Err(e) = journal_failure(store, journal, tenant, username, known_user, now).await {
            tracing::error!(error = %e, "a failed sign-in could not be journaled");
        }
        return Err(wrong_credentials().into());
    };
    journal
        .admin(
            &user.tenant_id,
            &Author::new(user.username.clone(), user.id.clone()),
            Decision::Allow,
            ReasonCode::Ok,
            "sign_in",
            json!({"username": user.username}),
        )
        .await?;
    let device = remember_source(store, tenant, username, address, caller.device, now).await?;
    tracing::info!(tenant = %user.tenant_id, username = %user.username, "signed in");
    Ok(SignedIn {
        session: SessionUser {
            tenant_id: user.tenant_id.clone(),
            username: user.username.clone(),
            signed_in_at: store::now_ms(),
            user_id: Some(user.id.clone()),
        },
        me: Me {
            tenant_id: user.tenant_id,
            username: user.username,
            scopes: user.scopes,
        },
        device,
    })
}

/// The source by which the account knows the attempt, if it does: its device (counted
/// wherever it connects from) before its address.
async fn known_source(
    store: &Store,
    tenant: &str,
    username: &str,
    address: Option<&str>,
    device_hash: Option<&str>,
    now: i64,
) -> Result<Option<SignInSource>, ServiceError> {
    let since = now - device::KNOWN_FOR_MS;
    let candidates = [
        device_hash.map(|h| SignInSource::Device(h.to_owned())),
        address.map(|a| SignInSource::Address(a.to_owned())),
    ];
    for source in candidates.into_iter().flatten() {
        if store::users::sign_in_source_known(store, tenant, username, &source, since).await? {
            return Ok(Some(source));
        }
    }
    Ok(None)
}

/// Remembers the address and device of a successful sign-in; returns the device id the browser
/// keeps. A presented id is kept only when the server issued it (some account signed in with it
/// within [`device::KNOWN_FOR_MS`]), so nobody can plant an id of their choosing in someone
/// else's browser and have it become known to that person's account.
async fn remember_source(
    store: &Store,
    tenant: &str,
    username: &str,
    address: Option<String>,
    presented: Option<&str>,
    now: i64,
) -> Result<String, ServiceError> {
    let mut id = None;
    if let Some(presented) = presented {
        let source = SignInSource::Device(device::hash(presented));
        if store::users::sign_in_source_issued(store, &source, now - device::KNOWN_FOR_MS).await? {
            id = Some(presented.to_owned());
        }
    }
    let id = id.unwrap_or_else(device::new_id);
    let sources = [
        Some(SignInSource::Device(device::hash(&id))),
        address.map(SignInSource::Address),
    ];
    for source in sources.into_iter().flatten() {
        store::users::remember_sign_in_source(store, tenant, username, &source, now).await?;
    }
    Ok(id)
}

/// Journals a failed sign-in in a tenant that exists: each one for a user the tenant has (they
/// are slowed per account, so bounded), and for unknown usernames (anyone can make up as many
/// as they like) only the first of each hour; the rest are counted.
async fn journal_failure(
    store: &Store,
    journal: &Journal,
    tenant: &str,
    username: &str,
    known: bool,
    now: i64,
) -> Result<(), ServiceError> {
    if !store::tenants::exists(store, tenant).await? {
        return Ok(());
    }
    if known {
        journal
            .admin(
                tenant,
                &Author::new(username, ANONYMOUS),
                Decision::Deny,
                ReasonCode::Unauthenticated,
                "sign_in",
                json!({"username": username}),
            )
            .await?;
        return Ok(());
    }
    let hour_start = now - now.rem_euclid(FAILURE_WINDOW_MS);
    if store::users::count_unknown_user_failure(store, tenant, hour_start).await? == 1 {
        // The name is not recorded: an attacker would choose it.
        journal
            .admin(
                tenant,
                &Author::new("(unknown user)", ANONYMOUS),
                Decision::Deny,
                ReasonCode::Unauthenticated,
                "sign_in",
                json!({"unknown_user": true, "hour_start": store::rfc3339(hour_start),
                       "note": "further failures for unknown users this hour are counted and journaled when it ends"}),
            )
            .await?;
    }
    Ok(())
}

/// Journals the counts of failed sign-ins for unknown users of every hour that has ended (one
/// record per tenant and hour), then forgets them; the background cleanup calls it.
pub async fn journal_unknown_user_hours(
    store: &Store,
    journal: &Journal,
    now: i64,
) -> Result<usize, ServiceError> {
    let this_hour = now - now.rem_euclid(FAILURE_WINDOW_MS);
    let hours = store::users::claim_unknown_user_hours(store, this_hour, now).await?;
    let mut journaled = 0;
    for (tenant, hour_start, failures) in hours {
        let written = journal
            .admin(
                &tenant,
                &Author::new("(unknown user)", ANONYMOUS),
                Decision::Deny,
                ReasonCode::Unauthenticated,
                "sign_in_failures",
                json!({"unknown_user": true, "failures": failures,
                       "from": store::rfc3339(hour_start),
                       "until": store::rfc3339(hour_start + FAILURE_WINDOW_MS)}),
            )
            .await;
        match written {
            Ok(_) => {
                store::users::unknown_user_hours_done(store, &tenant, hour_start).await?;
                journaled += 1;
            }
            Err(e) => {
                store::users::unknown_user_hours_release(store, &tenant, hour_start).await?;
                return Err(e.into());
            }
        }
    }
    Ok(journaled)
}

fn wrong_credentials() -> AppError {
    AppError::new(ErrorCode::Unauthenticated, "wrong username or password")
}

/// The person a session remembers, as a principal with their scopes read fresh from the
/// database; `None` when the sign-in is older than [`ABSOLUTE_MS`] or the user is gone (or is
/// another person of the same name): the surface then ends the session.
pub async fn principal_of(
    store: &Store,
    su: &SessionUser,
) -> Result<Option<Principal>, ServiceError> {
    if store::now_ms() - su.signed_in_at > ABSOLUTE_MS {
        return Ok(None);
    }
    let user = store::users::find(store, &su.tenant_id, &su.username)
        .await?
        .filter(|u| su.user_id.as_ref().is_none_or(|id| *id == u.id));
    let Some(user) = user else {
        return Ok(None);
    };
    let scopes = ScopeSet::parse(&user.scopes)
        .map_err(|e| anyhow::anyhow!("stored scopes of user {} are invalid: {e}", user.username))?;
    Ok(Some(Principal {
        tenant_id: user.tenant_id,
        actor_id: user.username,
        scopes,
        kind: PrincipalKind::User { user_id: user.id },
        read_at: None,
        environments: user.environments,
    }))
}

/// Forgets what sign-in keeps that has aged out (expired session records, the failure counts
/// of past hours, the addresses and devices accounts no longer know) after journaling the counts
/// of failures for unknown users of the hours that ended. A step that fails is logged and the
/// others run; the background cleanup calls it every minute.
pub async fn tidy(store: &Store, journal: &Journal, now: i64) {
    if let Err(e) = records::delete_expired(store, now).await {
        tracing::warn!(error = %e, "deleting expired dashboard sessions");
    }
    if let Err(e) = journal_unknown_user_hours(store, journal, now).await {
        tracing::warn!(error = %e, "journaling failed sign-ins for unknown users");
    }
    if let Err(e) = store::users::delete_sign_in_throttles(store, now - FAILURE_WINDOW_MS).await {
        tracing::warn!(error = %e, "deleting old sign-in throttles");
    }
    if let Err(e) = store::users::delete_sign_in_sources(store, now - device::KNOWN_FOR_MS).await {
        tracing::warn!(error = %e, "forgetting old sign-in addresses and devices");
    }
}
